// p2p.c - send / recv through one ring-buffer pipe per ordered rank pair.
// A message is a 16-byte header (tag, length) followed by the payload; the
// sender advances `head`, the receiver `tail`, both monotonically, so the
// free space is pipe_bytes - (head - tail). Progress never blocks: the c10d
// layer drives all pending requests of a rank from one thread.
#include <string.h>

#include "comm_internal.h"

typedef struct msg_header {
    int64_t tag;
    uint64_t nbytes;
} msg_header;

static unsigned char *pipe_data(trn__pipe_ctl *p) { return (unsigned char *)(p + 1); }

static void ring_write(trn_comm *c, trn__pipe_ctl *p, uint64_t pos, const void *src, size_t n) {
    uint64_t cap = c->hdr->pipe_bytes, at = pos % cap;
    size_t first = n < cap - at ? n : (size_t)(cap - at);
    memcpy(pipe_data(p) + at, src, first);
    memcpy(pipe_data(p), (const unsigned char *)src + first, n - first);
}

static void ring_read(trn_comm *c, trn__pipe_ctl *p, uint64_t pos, void *dst, size_t n) {
    uint64_t cap = c->hdr->pipe_bytes, at = pos % cap;
    size_t first = n < cap - at ? n : (size_t)(cap - at);
    memcpy(dst, pipe_data(p) + at, first);
    memcpy((unsigned char *)dst + first, pipe_data(p), n - first);
}

static const char *kind(const trn_p2p_req *r) { return r->is_send ? "send" : "recv"; }

// Timeout, abort and dead-peer checks while a request makes no progress.
static trn_status check_stall(trn_comm *c, trn_p2p_req *r) {
    trn_status st = trn__comm_check_abort(c, kind(r));
    if (st != TRN_SUCCESS) return st;
    uint64_t now = trn__now_ns();
    if (r->started_ns == 0) r->started_ns = r->checked_ns = (int64_t)now;
    int peer = r->peer >= 0 ? r->peer : r->source;
    if (c->timeout_ms > 0 &&
        now - (uint64_t)r->started_ns > (uint64_t)c->timeout_ms * UINT64_C(1000000)) {
        if (r->peer < 0)
            return trn__set_error(TRN_ERROR_SYSTEM,
                                  "neuron recv from any source (tag %lld) "
                                  "timed out on rank %d after %lld ms",
                                  (long long)r->tag, c->rank, (long long)c->timeout_ms);
        return trn__set_error(TRN_ERROR_SYSTEM,
                              "neuron %s %s rank %d (tag %lld, %zu bytes) "
                              "timed out on rank %d after %lld ms",
                              kind(r), r->is_send ? "to" : "from", peer, (long long)r->tag,
                              r->nbytes, c->rank, (long long)c->timeout_ms);
    }
    if (now - (uint64_t)r->checked_ns > UINT64_C(20000000)) {
        r->checked_ns = (int64_t)now;
        for (int q = 0; q < c->size; q++) {
            if ((peer >= 0 && q != peer) || q == c->rank) continue;
            // A sender may finish writing and exit between this receiver's
            // look at the pipe and this check: what it left is still there.
            trn__pipe_ctl *in = trn__comm_pipe(c, q, c->rank);
            if (!r->is_send && atomic_load_explicit(&in->head, memory_order_acquire) !=
                                   atomic_load_explicit(&in->tail, memory_order_relaxed))
                continue;
            if (!trn__comm_peer_alive(c, q))
                return trn__set_error(TRN_ERROR_SYSTEM,
                                      "neuron %s on rank %d failed: rank %d "
                                      "(pid %d) exited",
                                      kind(r), c->rank, q, (int)trn__comm_ctl(c, q)->pid);
        }
    }
    return TRN_SUCCESS;
}

static bool send_step(trn_comm *c, trn_p2p_req *r) {
    trn__pipe_ctl *p = trn__comm_pipe(c, c->rank, r->peer);
    uint64_t head = atomic_load_explicit(&p->head, memory_order_relaxed);
    uint64_t tail = atomic_load_explicit(&p->tail, memory_order_acquire);
    uint64_t space = c->hdr->pipe_bytes - (head - tail);
    bool moved = false;
    if (r->stage == 0) {
        if (space < sizeof(msg_header)) return false;
        msg_header h = {r->tag, r->nbytes};
        ring_write(c, p, head, &h, sizeof h);
        head += sizeof h;
        space -= sizeof h;
        r->stage = 1;
        moved = true;
    }
    size_t n = r->nbytes - r->done;
    if (n > space) n = (size_t)space;
    if (n > 0) {
        ring_write(c, p, head, (unsigned char *)r->buf + r->done, n);
        head += n;
        r->done += n;
        moved = true;
    }
    if (moved) atomic_store_explicit(&p->head, head, memory_order_release);
    if (r->done == r->nbytes) r->stage = 2;
    return moved;
}

// Looks at the next header from `from`; true if one is there.
static bool peek_header(trn_comm *c, int from, msg_header *h) {
    trn__pipe_ctl *p = trn__comm_pipe(c, from, c->rank);
    uint64_t head = atomic_load_explicit(&p->head, memory_order_acquire);
    uint64_t tail = atomic_load_explicit(&p->tail, memory_order_relaxed);
    if (head - tail < sizeof *h) return false;
    ring_read(c, p, tail, h, sizeof *h);
    return true;
}

static trn_status recv_step(trn_comm *c, trn_p2p_req *r, bool *moved) {
    *moved = false;
    if (r->stage == 0) {
        msg_header h;
        int from = r->peer;
        if (from < 0) {
            // Any source: the first peer whose next message carries the tag.
            for (int k = 1; k < c->size && from < 0; k++) {
                int q = (c->rank + k) % c->size;
                if (peek_header(c, q, &h) && h.tag == r->tag) from = q;
            }
            if (from < 0) return TRN_SUCCESS;
        } else if (!peek_header(c, from, &h)) {
            return TRN_SUCCESS;
        }
        if (h.tag != r->tag)
            return trn__set_error(TRN_ERROR_INVALID_ARGUMENT,
                                  "neuron recv on rank %d expected tag %lld "
                                  "from rank %d, the next message has tag "
                                  "%lld (send/recv pairs out of order)",
                                  c->rank, (long long)r->tag, from, (long long)h.tag);
        if (h.nbytes != r->nbytes)
            return trn__set_error(TRN_ERROR_INVALID_ARGUMENT,
                                  "neuron recv on rank %d expected %zu bytes "
                                  "from rank %d, which sent %llu (shapes "
                                  "differ)",
                                  c->rank, r->nbytes, from, (unsigned long long)h.nbytes);
        trn__pipe_ctl *p = trn__comm_pipe(c, from, c->rank);
        atomic_fetch_add_explicit(&p->tail, sizeof h, memory_order_release);
        r->source = from;
        r->stage = 1;
        *moved = true;
    }
    trn__pipe_ctl *p = trn__comm_pipe(c, r->source, c->rank);
    uint64_t head = atomic_load_explicit(&p->head, memory_order_acquire);
    uint64_t tail = atomic_load_explicit(&p->tail, memory_order_relaxed);
    size_t n = r->nbytes - r->done;
    if (n > head - tail) n = (size_t)(head - tail);
    if (n > 0) {
        ring_read(c, p, tail, (unsigned char *)r->buf + r->done, n);
        atomic_store_explicit(&p->tail, tail + n, memory_order_release);
        r->done += n;
        *moved = true;
    }
    if (r->done == r->nbytes) r->stage = 2;
    return TRN_SUCCESS;
}

trn_status trn_comm_p2p_progress(trn_comm *c, trn_p2p_req *r, bool *finished) {
    if (c == NULL || r == NULL || finished == NULL || (r->nbytes > 0 && r->buf == NULL))
        return trn__set_error(TRN_ERROR_INVALID_ARGUMENT, "null communicator, request or buffer");
    *finished = r->stage == 2;
    if (*finished) return TRN_SUCCESS;
    // An aborted group moves nothing more: a send would otherwise "succeed"
    // into a pipe nobody reads again.
    trn_status st = trn__comm_check_abort(c, kind(r));
    if (st != TRN_SUCCESS) return st;
    if (r->peer == c->rank || r->peer >= c->size || r->peer < -1 || (r->is_send && r->peer < 0))
        return trn__set_error(TRN_ERROR_INVALID_ARGUMENT,
                              "neuron %s on rank %d: peer %d is not another "
                              "rank of a group of %d",
                              kind(r), c->rank, r->peer, c->size);
    bool moved;
    if (r->is_send) {
        moved = send_step(c, r);
    } else {
        st = recv_step(c, r, &moved);
        if (st != TRN_SUCCESS) return st;
    }
    *finished = r->stage == 2;
    if (*finished) return TRN_SUCCESS;
    if (moved) {
        r->started_ns = 0;  // the timeout counts time without progress
        return TRN_SUCCESS;
    }
    return check_stall(c, r);
}
