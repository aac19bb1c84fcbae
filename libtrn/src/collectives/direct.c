// direct.c - the single-copy path of the collectives: ranks read each
// other's buffers with process_vm_readv instead of staging every byte
// through the shared slots. An allreduce is a reduce-scatter (rank r reads
// segment r of every peer's input and reduces it, in rank order, into its own
// output) then an all-gather (rank r reads segment q from rank q's output):
// each byte crosses memory once per phase and a whole message costs three
// barriers instead of two per 256 KiB round, which matters when ranks
// outnumber cores and every barrier can wait for a peer to be scheduled.
// Exchanges (all_gather, all_to_all, broadcast, gather, scatter) read each
// part straight from its writer's buffer into the reader's output.
//
// Whether it is usable (ptrace rules, seccomp, TORCH_NEURONX_DIST_SINGLE_COPY
// =0) is voted once per communicator: every rank probes every peer and the
// path is taken only if all probes of all ranks succeeded, so ranks never
// disagree on the algorithm. Otherwise coll.c's slot path runs.
#define _GNU_SOURCE
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>

#include "comm_internal.h"

// Below this many bytes (the largest rank's message) the slot path is as
// fast: one round is one copy in and out of cache-resident slots.
#define DIRECT_MIN_BYTES ((uint64_t)32 << 10)
// Peer data a rank reads per reduce step, split over its peers: the pieces
// and the rank's own piece stay in cache for the reduction.
#define DIRECT_CHUNK_BYTES ((size_t)256 << 10)

// Copies `len` bytes at `remote` in rank r's address space to `local`.
static trn_status peer_read(trn_comm *c, const char *what, int r, void *local, uint64_t remote,
                            size_t len) {
    pid_t pid = (pid_t)trn__comm_ctl(c, r)->pid;
    unsigned char *dst = local;
    while (len > 0) {
        struct iovec l = {dst, len}, rm = {(void *)(uintptr_t)remote, len};
        ssize_t got = process_vm_readv(pid, &l, 1, &rm, 1, 0);
        if (got <= 0) {
            if (got < 0 && errno == EINTR) continue;
            int e = got < 0 ? errno : EIO;
            if (!trn__comm_peer_alive(c, r))
                return trn__comm_fail(c,
                                      "neuron %s (collective #%llu) failed on "
                                      "rank %d: rank %d (pid %d) exited "
                                      "without joining it",
                                      what, (unsigned long long)c->seq, c->rank, r, (int)pid);
            return trn__comm_fail(c,
                                  "neuron %s (collective #%llu): rank %d "
                                  "could not read %zu bytes from rank %d: %s",
                                  what, (unsigned long long)c->seq, c->rank, len, r, strerror(e));
        }
        dst += got;
        remote += (uint64_t)got;
        len -= (size_t)got;
    }
    return TRN_SUCCESS;
}

// Whether this rank can read every peer (and is allowed to try).
static bool probe_peers(trn_comm *c) {
    const char *env = getenv("TORCH_NEURONX_DIST_SINGLE_COPY");
    if (env && strcmp(env, "0") == 0) return false;
    for (int r = 0; r < c->size; r++) {
        if (r == c->rank) continue;
        uint64_t magic = 0;
        struct iovec l = {&magic, sizeof magic};
        struct iovec rm = {(void *)(uintptr_t)trn__comm_ctl(c, r)->base_addr, sizeof magic};
        if (process_vm_readv((pid_t)trn__comm_ctl(c, r)->pid, &l, 1, &rm, 1, 0) !=
                (ssize_t)sizeof magic ||
            magic != TRN__COMM_MAGIC)
            return false;
    }
    return true;
}

trn_status trn__direct_use(trn_comm *c, const char *what, uint64_t max_bytes, bool *use) {
    *use = false;
    if (c->size < 2 || max_bytes < DIRECT_MIN_BYTES || c->direct < 0) return TRN_SUCCESS;
    if (c->direct == 0) {
        // Every rank reaches this vote in the same collective: the decision
        // depends only on values all ranks agreed on in the descriptors.
        atomic_store(&trn__comm_ctl(c, c->rank)->direct_vote, probe_peers(c) ? 1 : 2);
        trn_status st = trn__comm_barrier(c, what);
        if (st != TRN_SUCCESS) return st;
        bool all = true;
        for (int r = 0; r < c->size; r++)
            all = all && atomic_load(&trn__comm_ctl(c, r)->direct_vote) == 1;
        c->direct = all ? 1 : -1;
    }
    *use = c->direct > 0;
    return TRN_SUCCESS;
}

static trn_status scratch_reserve(trn_comm *c, size_t bytes) {
    if (c->scratch_bytes >= bytes) return TRN_SUCCESS;
    void *p = realloc(c->scratch, bytes);
    if (p == NULL)
        return trn__set_error(TRN_ERROR_OUT_OF_MEMORY,
                              "out of host memory (%zu bytes of collective "
                              "scratch)",
                              bytes);
    c->scratch = p;
    c->scratch_bytes = bytes;
    return TRN_SUCCESS;
}

// Segment q of a `count`-element reduction: whole cache lines per rank so
// that ranks writing neighbouring segments do not share lines.
static void segment(size_t count, size_t esz, int size, int q, size_t *lo, size_t *len) {
    size_t line = esz >= 64 ? 1 : 64 / esz;
    size_t seg = (count + (size_t)size - 1) / (size_t)size;
    seg = (seg + line - 1) / line * line;
    size_t a = (size_t)q * seg;
    *lo = a < count ? a : count;
    *len = a < count ? (count - a < seg ? count - a : seg) : 0;
}

// Reduces, in rank order, elements [lo, lo + len) of every rank's buffer at
// its descriptor's src_addr (+ src_shift bytes) into dst.
static trn_status reduce_from_peers(trn_comm *c, const char *what, const unsigned char *mine,
                                    void *dst, uint64_t src_shift, size_t lo, size_t len,
                                    trn_dtype dtype, trn_redop op, const trn_reduce_post *post) {
    size_t esz = trn_dtype_size(dtype);
    size_t peers = (size_t)c->size - 1;
    size_t per = DIRECT_CHUNK_BYTES / peers / esz;
    if (per < 1024 / esz) per = 1024 / esz;
    trn_status st = scratch_reserve(c, per * esz * peers);
    if (st != TRN_SUCCESS) return st;
    const void *srcs[TRN_COMM_MAX_RANKS];
    unsigned char *out = dst;
    for (size_t a = 0; a < len; a += per) {
        size_t n = len - a < per ? len - a : per;
        size_t k = 0;
        for (int r = 0; r < c->size; r++) {
            if (r == c->rank) {
                srcs[r] = mine + (lo + a) * esz;
                continue;
            }
            unsigned char *piece = (unsigned char *)c->scratch + k++ * per * esz;
            uint64_t at = trn__comm_desc(c, c->seq, r)->src_addr + src_shift + (lo + a) * esz;
            st = peer_read(c, what, r, piece, at, n * esz);
            if (st != TRN_SUCCESS) return st;
            srcs[r] = piece;
        }
        trn__reduce_run(out + a * esz, srcs, c->size, n, dtype, op, post, c->size);
    }
    return TRN_SUCCESS;
}

trn_status trn__direct_allreduce(trn_comm *c, const char *what, const void *in, void *out,
                                 size_t count, trn_dtype dtype, trn_redop op,
                                 const trn_reduce_post *post) {
    size_t esz = trn_dtype_size(dtype), lo, len;
    segment(count, esz, c->size, c->rank, &lo, &len);
    // Writing segment r of out while peers read other segments of in: when
    // in == out those are disjoint, and the reduction reads its own piece
    // before writing it.
    trn_status st = reduce_from_peers(c, what, in, (unsigned char *)out + lo * esz, 0, lo, len,
                                      dtype, op, post);
    if (st != TRN_SUCCESS) return st;
    st = trn__comm_barrier(c, what);
    if (st != TRN_SUCCESS) return st;
    for (int r = 0; r < c->size; r++) {
        if (r == c->rank) continue;
        size_t rlo, rlen;
        segment(count, esz, c->size, r, &rlo, &rlen);
        if (rlen == 0) continue;
        st = peer_read(c, what, r, (unsigned char *)out + rlo * esz,
                       trn__comm_desc(c, c->seq, r)->dst_addr + rlo * esz, rlen * esz);
        if (st != TRN_SUCCESS) return st;
    }
    // Peers may still be reading this rank's segment.
    return trn__comm_barrier(c, what);
}

trn_status trn__direct_reduce_scatter(trn_comm *c, const char *what, const void *in, void *out,
                                      size_t count, trn_dtype dtype, trn_redop op,
                                      const trn_reduce_post *post) {
    size_t esz = trn_dtype_size(dtype);
    // Block r of every rank's input, this rank's own included.
    uint64_t shift = (uint64_t)c->rank * count * esz;
    trn_status st = reduce_from_peers(c, what, (const unsigned char *)in + shift, out, shift, 0,
                                      count, dtype, op, post);
    if (st != TRN_SUCCESS) return st;
    return trn__comm_barrier(c, what);
}

trn_status trn__direct_exchange(trn_comm *c, const char *what, const void *src, void *const *dst) {
    if (dst != NULL) {
        for (int i = 0; i < c->size; i++) {
            if (dst[i] == NULL) continue;
            trn__desc *di = trn__comm_desc(c, c->seq, i);
            uint64_t off = trn__desc_parts(di)[2 * c->rank];
            uint64_t len = trn__desc_parts(di)[2 * c->rank + 1];
            if (len == 0) continue;
            if (i == c->rank) {
                // May overlap (an in-place all_gather): memmove.
                memmove(dst[i], (const unsigned char *)src + off, len);
                continue;
            }
            trn_status st = peer_read(c, what, i, dst[i], di->src_addr + off, len);
            if (st != TRN_SUCCESS) return st;
        }
    }
    // Writers keep their buffers until every reader is done.
    return trn__comm_barrier(c, what);
}
