// coll.c - the collectives over the shared region. Reductions are a
// reduce-scatter through the slots (rank r reduces segment r of every round)
// followed, for allreduce, by every rank reading the reduced segments: each
// byte is copied in once, reduced once and copied out once. Data movement
// (allgather, broadcast, gather, scatter, all-to-all) is one primitive:
// every rank publishes a buffer round by round and readers copy their parts.
#include <stdio.h>
#include <string.h>

#include "comm_internal.h"

// Bytes a rank moves through its slot per round. Smaller than the slot: a
// round's working set (every rank's slot piece, plus the input and output
// pieces) then stays in cache between the copy in, the reduction and the
// copy out, so a large message costs DRAM traffic for its input and output
// only; a round costs two barriers, microseconds when ranks are in step.
#ifndef TRN_COMM_ROUND_BYTES
#define TRN_COMM_ROUND_BYTES ((uint64_t)256 << 10)
#endif

static uint64_t round_bytes(const trn_comm *c) {
    return c->hdr->slot_bytes < TRN_COMM_ROUND_BYTES ? c->hdr->slot_bytes : TRN_COMM_ROUND_BYTES;
}

static trn_status check_comm(trn_comm *c) {
    if (c == NULL) return trn__set_error(TRN_ERROR_INVALID_ARGUMENT, "null communicator");
    return TRN_SUCCESS;
}

// A local argument error must not leave the other ranks waiting in this
// collective, to pair with this rank's next one: this rank takes its place
// with a stand-in that fails the collective on every rank, giving the reason
// (the thread's last error).
static trn_status refuse(trn_comm *c, const char *what) {
    char why[TRN__COMM_ERROR_MAX];
    snprintf(why, sizeof why, "%s", trn_last_error());
    return trn_comm_fail_call(c, what, why);
}

static void desc_init(trn__desc *d, const char *what) {
    memset(d, 0, sizeof *d);
    snprintf(d->what, sizeof d->what, "%s", what);
}

static const char *op_name(const trn__desc *d) {
    if (d->post_div) return "AVG";
    if (d->post_scale) return "PREMUL_SUM";
    switch ((trn_redop)d->redop) {
    case TRN_REDOP_SUM: return "SUM";
    case TRN_REDOP_PROD: return "PRODUCT";
    case TRN_REDOP_MIN: return "MIN";
    case TRN_REDOP_MAX: return "MAX";
    case TRN_REDOP_BAND: return "BAND";
    case TRN_REDOP_BOR: return "BOR";
    case TRN_REDOP_BXOR: return "BXOR";
    default: return "an unknown op";
    }
}

// Every rank must pass the same reduction parameters; checked on every rank
// from the published descriptors, so all fail alike.
static trn_status check_same_reduce(trn_comm *c, const trn__desc *d) {
    for (int r = 0; r < c->size; r++) {
        const trn__desc *o = trn__comm_desc(c, c->seq, r);
        if (o->count != d->count || o->dtype != d->dtype)
            return trn__set_error(
                TRN_ERROR_INVALID_ARGUMENT,
                "neuron %s: tensors differ across ranks: rank %d passed %llu "
                "%s elements, rank %d passed %llu %s elements",
                d->what, c->rank, (unsigned long long)d->count, trn_dtype_name((trn_dtype)d->dtype),
                r, (unsigned long long)o->count, trn_dtype_name((trn_dtype)o->dtype));
        // (Roots were compared by trn__comm_begin.)
        if (o->redop != d->redop || o->post_div != d->post_div || o->post_scale != d->post_scale)
            return trn__set_error(TRN_ERROR_INVALID_ARGUMENT,
                                  "neuron %s: ranks passed different reduce "
                                  "ops: rank %d passed %s, rank %d passed %s",
                                  d->what, c->rank, op_name(d), r, op_name(o));
        if (d->post_scale && memcmp(&o->post_factor, &d->post_factor, sizeof d->post_factor))
            return trn__set_error(TRN_ERROR_INVALID_ARGUMENT,
                                  "neuron %s: ranks passed different "
                                  "PREMUL_SUM factors: rank %d passed %g, "
                                  "rank %d passed %g",
                                  d->what, c->rank, d->post_factor, r, o->post_factor);
    }
    return TRN_SUCCESS;
}

static trn_status begin_reduce(trn_comm *c, trn__desc *d, const void *in, void *out, size_t count,
                               trn_dtype dtype, trn_redop op, const trn_reduce_post *post,
                               int root) {
    trn_status st = check_comm(c);
    if (st != TRN_SUCCESS) return st;
    st = trn_comm_check_reduce(dtype, op, post);
    if (st != TRN_SUCCESS) return refuse(c, d->what);
    if (root < 0 || root >= c->size) {
        trn__set_error(TRN_ERROR_INVALID_ARGUMENT,
                       "neuron %s: root %d is not a rank of a group of %d", d->what, root, c->size);
        return refuse(c, d->what);
    }
    if (count > 0 && (in == NULL || (out == NULL && root == c->rank))) {
        trn__set_error(TRN_ERROR_INVALID_ARGUMENT, "neuron %s: null buffer", d->what);
        return refuse(c, d->what);
    }
    d->count = count;
    d->dtype = (int32_t)dtype;
    d->redop = (int32_t)op;
    d->root = root;
    d->post_div = post && post->divide_by_size;
    d->post_scale = post && post->scale;
    d->post_factor = post && post->scale ? post->factor : 1.0;
    d->src_addr = (uint64_t)(uintptr_t)in;
    d->dst_addr = (uint64_t)(uintptr_t)out;
    st = trn__comm_begin(c, d, NULL, NULL);
    if (st != TRN_SUCCESS) return st;
    return check_same_reduce(c, d);
}

// Allreduce and reduce share the rounds; only who copies out differs.
static trn_status reduce_rounds(trn_comm *c, const char *what, const void *in, void *out,
                                size_t count, trn_dtype dtype, trn_redop op,
                                const trn_reduce_post *post, int root, bool all) {
    size_t esz = trn_dtype_size(dtype);
    size_t per_round = round_bytes(c) / esz;
    const unsigned char *src = in;
    unsigned char *dst = out;
    const void *srcs[TRN_COMM_MAX_RANKS];
    for (size_t base = 0; base < count; base += per_round) {
        size_t n = count - base < per_round ? count - base : per_round;
        size_t seg = (n + (size_t)c->size - 1) / (size_t)c->size;
        uint64_t round = c->rounds++;
        memcpy(trn__comm_slot(c, round, c->rank), src + base * esz, n * esz);
        trn_status st = trn__comm_barrier(c, what);
        if (st != TRN_SUCCESS) return st;
        size_t lo = (size_t)c->rank * seg;
        if (lo < n) {
            size_t len = n - lo < seg ? n - lo : seg;
            for (int r = 0; r < c->size; r++) srcs[r] = trn__comm_slot(c, round, r) + lo * esz;
            trn__reduce_run(trn__comm_slot(c, round, c->rank) + lo * esz, srcs, c->size, len, dtype,
                            op, post, c->size);
        }
        st = trn__comm_barrier(c, what);
        if (st != TRN_SUCCESS) return st;
        if (!all && c->rank != root) continue;
        for (int r = 0; r < c->size; r++) {
            size_t rlo = (size_t)r * seg;
            if (rlo >= n) break;
            size_t len = n - rlo < seg ? n - rlo : seg;
            memcpy(dst + (base + rlo) * esz, trn__comm_slot(c, round, r) + rlo * esz, len * esz);
        }
    }
    return TRN_SUCCESS;
}

trn_status trn_comm_allreduce(trn_comm *c, const void *in, void *out, size_t count, trn_dtype dtype,
                              trn_redop op, const trn_reduce_post *post) {
    trn__desc d;
    desc_init(&d, "allreduce");
    trn_status st = begin_reduce(c, &d, in, out, count, dtype, op, post, 0);
    if (st != TRN_SUCCESS) return st;
    bool direct = false;
    st = trn__direct_use(c, d.what, count * trn_dtype_size(dtype), &direct);
    if (st != TRN_SUCCESS) return st;
    if (direct) return trn__direct_allreduce(c, d.what, in, out, count, dtype, op, post);
    return reduce_rounds(c, d.what, in, out, count, dtype, op, post, 0, true);
}

trn_status trn_comm_reduce(trn_comm *c, const void *in, void *out, size_t count, trn_dtype dtype,
                           trn_redop op, const trn_reduce_post *post, int root) {
    trn__desc d;
    desc_init(&d, "reduce");
    trn_status st = begin_reduce(c, &d, in, out, count, dtype, op, post, root);
    if (st != TRN_SUCCESS) return st;
    return reduce_rounds(c, d.what, in, out, count, dtype, op, post, root, false);
}

trn_status trn_comm_reduce_scatter(trn_comm *c, const void *in, void *out, size_t count,
                                   trn_dtype dtype, trn_redop op, const trn_reduce_post *post) {
    trn__desc d;
    desc_init(&d, "reduce_scatter");
    trn_status st = begin_reduce(c, &d, in, out, count, dtype, op, post, 0);
    if (st != TRN_SUCCESS) return st;
    size_t esz = trn_dtype_size(dtype);
    size_t size = (size_t)c->size;
    bool direct = false;
    st = trn__direct_use(c, d.what, count * size * esz, &direct);
    if (st != TRN_SUCCESS) return st;
    if (direct) return trn__direct_reduce_scatter(c, d.what, in, out, count, dtype, op, post);
    size_t per_round = round_bytes(c) / (esz * size);
    if (per_round == 0) per_round = 1;
    const unsigned char *src = in;
    unsigned char *dst = out;
    const void *srcs[TRN_COMM_MAX_RANKS];
    for (size_t base = 0; base < count; base += per_round) {
        size_t n = count - base < per_round ? count - base : per_round;
        uint64_t round = c->rounds++;
        unsigned char *slot = trn__comm_slot(c, round, c->rank);
        // The slot holds this round's piece of every block, block j at j*n.
        for (size_t j = 0; j < size; j++)
            memcpy(slot + j * n * esz, src + (j * count + base) * esz, n * esz);
        st = trn__comm_barrier(c, d.what);
        if (st != TRN_SUCCESS) return st;
        for (int r = 0; r < c->size; r++)
            srcs[r] = trn__comm_slot(c, round, r) + (size_t)c->rank * n * esz;
        trn__reduce_run(dst + base * esz, srcs, c->size, n, dtype, op, post, c->size);
    }
    return TRN_SUCCESS;
}

// `root`: -1 when the collective has none; every rank must pass the same.
static trn_status exchange(trn_comm *c, const char *what, int root, const void *src,
                           size_t src_bytes, const size_t *part_off, const size_t *part_len,
                           void *const *dst, const size_t *dst_len) {
    trn_status st;
    size_t size = (size_t)c->size;
    uint64_t parts[2 * TRN_COMM_MAX_RANKS];
    int64_t expected[TRN_COMM_MAX_RANKS];
    for (size_t j = 0; j < size; j++) {
        parts[2 * j] = part_off ? part_off[j] : 0;
        parts[2 * j + 1] = part_len ? part_len[j] : src_bytes;
        if (parts[2 * j] + parts[2 * j + 1] > src_bytes) {
            trn__set_error(TRN_ERROR_INVALID_ARGUMENT,
                           "neuron %s: part %zu (%llu bytes at %llu) lies "
                           "outside the %zu-byte buffer",
                           what, j, (unsigned long long)parts[2 * j + 1],
                           (unsigned long long)parts[2 * j], src_bytes);
            return refuse(c, what);
        }
        expected[j] = dst && dst[j] ? (int64_t)dst_len[j] : -1;
    }
    if (src_bytes > 0 && src == NULL) {
        trn__set_error(TRN_ERROR_INVALID_ARGUMENT, "neuron %s: null buffer", what);
        return refuse(c, what);
    }
    trn__desc d;
    desc_init(&d, what);
    d.root = root;
    d.src_bytes = src_bytes;
    d.src_addr = (uint64_t)(uintptr_t)src;
    // Single-copy reads would see an output that overlaps the input (other
    // than this rank's own part) already overwritten.
    uintptr_t s_lo = (uintptr_t)src, s_hi = s_lo + src_bytes;
    for (size_t j = 0; dst && j < size; j++) {
        uintptr_t o = (uintptr_t)dst[j];
        if ((int)j != c->rank && o && dst_len[j] > 0 && o < s_hi && o + dst_len[j] > s_lo)
            d.no_direct = 1;
    }
    st = trn__comm_begin(c, &d, parts, expected);
    if (st != TRN_SUCCESS) return st;
    // Every reader's expectation against every writer's part, on every rank.
    uint64_t max_bytes = 0;
    for (int i = 0; i < c->size; i++) {
        trn__desc *di = trn__comm_desc(c, c->seq, i);
        if (di->src_bytes > max_bytes) max_bytes = di->src_bytes;
        for (int j = 0; j < c->size; j++) {
            int64_t want = trn__desc_expected(trn__comm_desc(c, c->seq, j), c->size)[i];
            uint64_t have = trn__desc_parts(di)[2 * j + 1];
            if (want >= 0 && (uint64_t)want != have)
                return trn__set_error(TRN_ERROR_INVALID_ARGUMENT,
                                      "neuron %s: shapes differ across ranks: rank %d expects "
                                      "%lld bytes from rank %d, which sends %llu",
                                      what, j, (long long)want, i, (unsigned long long)have);
        }
    }
    bool direct = true;
    for (int i = 0; i < c->size; i++) direct = direct && !trn__comm_desc(c, c->seq, i)->no_direct;
    if (direct) {
        st = trn__direct_use(c, what, max_bytes, &direct);
        if (st != TRN_SUCCESS) return st;
        if (direct) return trn__direct_exchange(c, what, src, dst);
    }
    uint64_t window = round_bytes(c);
    const unsigned char *s = src;
    // This rank's own part (all_to_all, scatter) goes from src to dst
    // directly; when no other rank reads those bytes they are not published
    // either, which saves a copy of 1/size of the data.
    const uint64_t *mine = trn__desc_parts(trn__comm_desc(c, c->seq, c->rank));
    uint64_t skip_lo = mine[2 * c->rank], skip_hi = skip_lo + mine[2 * c->rank + 1];
    for (int j = 0; j < c->size && skip_lo < skip_hi; j++) {
        uint64_t o = mine[2 * j], l = mine[2 * j + 1];
        if (j != c->rank && l > 0 && o < skip_hi && o + l > skip_lo) skip_hi = skip_lo;
    }
    for (uint64_t lo = 0; lo < max_bytes; lo += window) {
        uint64_t round = c->rounds++;
        if (lo < src_bytes) {
            uint64_t hi = src_bytes - lo < window ? src_bytes : lo + window;
            unsigned char *slot = trn__comm_slot(c, round, c->rank);
            uint64_t a = skip_lo > lo ? skip_lo : lo, b = skip_hi < hi ? skip_hi : hi;
            if (a < b) {  // publish around the skipped bytes
                memcpy(slot, s + lo, a - lo);
                memcpy(slot + (b - lo), s + b, hi - b);
            } else {
                memcpy(slot, s + lo, hi - lo);
            }
        }
        st = trn__comm_barrier(c, what);
        if (st != TRN_SUCCESS) return st;
        if (dst == NULL) continue;
        for (int i = 0; i < c->size; i++) {
            if (dst[i] == NULL) continue;
            uint64_t *p = trn__desc_parts(trn__comm_desc(c, c->seq, i));
            uint64_t off = p[2 * c->rank], len = p[2 * c->rank + 1];
            uint64_t a = off > lo ? off : lo;
            uint64_t b = off + len < lo + window ? off + len : lo + window;
            if (a < b)
                memcpy((unsigned char *)dst[i] + (a - off),
                       i == c->rank ? s + a : trn__comm_slot(c, round, i) + (a - lo), b - a);
        }
    }
    return TRN_SUCCESS;
}

trn_status trn_comm_exchange(trn_comm *c, const char *what, const void *src, size_t src_bytes,
                             const size_t *part_off, const size_t *part_len, void *const *dst,
                             const size_t *dst_len) {
    trn_status st = check_comm(c);
    if (st != TRN_SUCCESS) return st;
    int root = c->has_agree ? c->agree.root : -1;
    if (root < -1 || root >= c->size) {
        trn__set_error(TRN_ERROR_INVALID_ARGUMENT,
                       "neuron %s: root %d is not a rank of a group of %d", what, root, c->size);
        return refuse(c, what);
    }
    return exchange(c, what, root, src, src_bytes, part_off, part_len, dst, dst_len);
}

trn_status trn_comm_broadcast(trn_comm *c, void *buf, size_t nbytes, int root) {
    trn_status st = check_comm(c);
    if (st != TRN_SUCCESS) return st;
    if (root < 0 || root >= c->size) {
        trn__set_error(TRN_ERROR_INVALID_ARGUMENT,
                       "neuron broadcast: root %d is not a rank of a group of "
                       "%d",
                       root, c->size);
        return refuse(c, "broadcast");
    }
    void *dst[TRN_COMM_MAX_RANKS] = {0};
    size_t dst_len[TRN_COMM_MAX_RANKS] = {0};
    bool me = c->rank == root;
    if (!me) {
        dst[root] = buf;
        dst_len[root] = nbytes;
    }
    return exchange(c, "broadcast", root, me ? buf : NULL, me ? nbytes : 0, NULL, NULL, dst,
                    dst_len);
}
