// comm_internal.h - the shared-memory region's layout and the helpers that
// the collective files (comm.c, coll.c, reduce_op.c, p2p.c) share.
//
// Region layout (offsets in the header, everything 64-byte aligned):
//   header | rank control blocks [size] | descriptors [2][size] |
//   data slots [2][size] | pipes [size][size]
// Data slots and descriptors are double-buffered: a rank writes set k % 2
// while a slow peer may still read set (k - 1) % 2; the barrier of step k
// proves everyone is done with step k - 2.
#ifndef TRN_COMM_INTERNAL_H
#define TRN_COMM_INTERNAL_H

#include <stdatomic.h>

#include "../internal.h"
#include "trn/collectives.h"

#define TRN__COMM_MAGIC UINT64_C(0x74726e5f636f6c6c)  // "trn_coll"
#define TRN__COMM_WHAT_MAX 32
#define TRN__COMM_ERROR_MAX 224

// One cache line pair per rank so that arrivals do not false-share.
typedef struct trn__rank_ctl {
    _Alignas(128) _Atomic uint64_t arrive;  // barriers this rank passed into
    int32_t pid;
    // Single-copy path (direct.c): where this rank mapped the region (a
    // known readable address for the probe) and its vote, 1 yes / 2 no.
    _Atomic int32_t direct_vote;
    uint64_t base_addr;
} trn__rank_ctl;

// What a rank is about to do; peers compare them before moving data.
typedef struct trn__desc {
    uint64_t seq;
    char what[TRN__COMM_WHAT_MAX];
    int32_t dtype, redop, root, post_div;
    double post_factor;
    int32_t post_scale;
    // A stand-in for a call this rank could not make (trn_comm_fail_call);
    // its reason is `error`, at the end: only copied and read when set.
    int32_t failed;
    uint64_t count;      // elements (reductions)
    uint64_t src_bytes;  // published bytes (exchange)
    // This rank's buffers in its own address space, for peers' single-copy
    // reads (direct.c); no_direct: this call cannot take that path.
    uint64_t src_addr, dst_addr;
    int32_t no_direct;
    // trn_comm_agree_next's fields (its root is `root` above). What every
    // rank reads of every peer's descriptor stays within its first two cache
    // lines, as before these were added (but for dtype names over 11 chars).
    uint32_t part, parts;
    char agree_dtype[TRN_COMM_DTYPE_NAME_MAX];
    char error[TRN__COMM_ERROR_MAX];
    // Followed by size x {off, len} parts and size x expected (int64, -1 none).
} trn__desc;

typedef struct trn__region_hdr {
    uint64_t magic;
    int32_t size;
    int32_t reserved;
    uint64_t total_bytes;
    uint64_t slot_bytes, pipe_bytes, desc_bytes;
    uint64_t off_ctl, off_desc, off_slots, off_pipes;
    _Atomic int32_t aborted;
    char abort_msg[512];
    // Sleeping waiters (comm.c): every arrival and abort bumps `wake`, and
    // wakes the futex on it when `sleepers` says anyone sleeps there.
    _Alignas(128) _Atomic uint32_t wake;
    _Atomic int32_t sleepers;
} trn__region_hdr;

typedef struct trn__pipe_ctl {
    _Alignas(128) _Atomic uint64_t head;  // bytes the sender wrote, ever
    _Alignas(128) _Atomic uint64_t tail;  // bytes the receiver consumed, ever
} trn__pipe_ctl;

struct trn_comm {
    unsigned char *base;
    size_t map_bytes;
    trn__region_hdr *hdr;
    int rank, size;
    int64_t timeout_ms;
    uint64_t seq;       // collectives started
    uint64_t barriers;  // barriers entered
    uint64_t rounds;    // data rounds done (selects the slot set)
    int direct;         // single-copy path: 0 not voted yet, 1 on, -1 off
    void *scratch;      // direct.c's peer pieces, grown on demand
    size_t scratch_bytes;
    bool has_agree;  // trn_comm_agree_next for the next collective
    trn_comm_agree agree;
};

static inline trn__rank_ctl *trn__comm_ctl(trn_comm *c, int r) {
    return (trn__rank_ctl *)(c->base + c->hdr->off_ctl) + r;
}
static inline trn__desc *trn__comm_desc(trn_comm *c, uint64_t seq, int r) {
    return (trn__desc *)(c->base + c->hdr->off_desc +
                         ((seq & 1) * (uint64_t)c->size + (uint64_t)r) * c->hdr->desc_bytes);
}
// Parts (off, len pairs) and expected lengths that follow a descriptor.
static inline uint64_t *trn__desc_parts(trn__desc *d) { return (uint64_t *)(d + 1); }
static inline int64_t *trn__desc_expected(trn__desc *d, int size) {
    return (int64_t *)(trn__desc_parts(d) + 2 * (size_t)size);
}
static inline unsigned char *trn__comm_slot(trn_comm *c, uint64_t round, int r) {
    return c->base + c->hdr->off_slots +
           ((round & 1) * (uint64_t)c->size + (uint64_t)r) * c->hdr->slot_bytes;
}
static inline trn__pipe_ctl *trn__comm_pipe(trn_comm *c, int from, int to) {
    return (trn__pipe_ctl *)(c->base + c->hdr->off_pipes +
                             ((uint64_t)from * (uint64_t)c->size + (uint64_t)to) *
                                 (sizeof(trn__pipe_ctl) + c->hdr->pipe_bytes));
}

// comm.c
// Fails with the abort message if any rank aborted.
trn_status trn__comm_check_abort(trn_comm *c, const char *what);
// Enters the next barrier and waits for every rank (timeout, dead peers and
// aborts end the wait with an error naming `what` and the missing ranks).
trn_status trn__comm_barrier(trn_comm *c, const char *what);
// Whether rank r's process still runs (a zombie counts as dead).
bool trn__comm_peer_alive(trn_comm *c, int r);
// Records `msg` as this rank's error and every rank's abort reason.
trn_status trn__comm_fail(trn_comm *c, const char *fmt, ...) TRN__PRINTF(2, 3);
// Starts a collective: publishes `d` (seq is filled in, and the pending
// trn_comm_agree_next fields) plus its tail, waits for every rank, and
// checks that all ranks run the same collective with the same root and
// agreed fields, and that none stands in for a call it could not make.
trn_status trn__comm_begin(trn_comm *c, const trn__desc *d, const uint64_t *parts,
                           const int64_t *expected);

// reduce_op.c
// dst[i] = src[0][i] op src[1][i] op ... (rank order), then the post step.
void trn__reduce_run(void *dst, const void *const *src, int nsrc, size_t count, trn_dtype dtype,
                     trn_redop op, const trn_reduce_post *post, int size);

// direct.c: the single-copy path, taken when *use says so (decided alike
// on every rank from `max_bytes`, the largest rank's message, and a vote
// held once per communicator). Called after trn__comm_begin.
trn_status trn__direct_use(trn_comm *c, const char *what, uint64_t max_bytes, bool *use);
trn_status trn__direct_allreduce(trn_comm *c, const char *what, const void *in, void *out,
                                 size_t count, trn_dtype dtype, trn_redop op,
                                 const trn_reduce_post *post);
trn_status trn__direct_reduce_scatter(trn_comm *c, const char *what, const void *in, void *out,
                                      size_t count, trn_dtype dtype, trn_redop op,
                                      const trn_reduce_post *post);
trn_status trn__direct_exchange(trn_comm *c, const char *what, const void *src, void *const *dst);

#endif
