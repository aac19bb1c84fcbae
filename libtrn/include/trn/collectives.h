// trn/collectives.h - the intra-host collective engine: ranks of one host
// exchange data through one shared-memory region per process group.
//
// Who owns what: the region is an anonymous memfd (it never appears in
// /dev/shm, so a crash can leave nothing behind). Rank 0 creates it with
// trn_comm_region_create(); every rank, rank 0 included, maps it with
// trn_comm_attach() on a descriptor it obtained out of band (the c10d layer
// passes "/proc/<pid>/fd/<fd>" through the process group's store) and may
// close that descriptor right after. trn_comm_destroy() unmaps; the memory is
// freed by the kernel once the last rank unmapped it.
//
// All calls are blocking and must be made by every rank of the group in the
// same order (send/recv excepted). Each collective first exchanges a small
// descriptor (sequence number, kind, sizes, root, what trn_comm_agree_next
// adds), so mismatched calls, shapes or roots fail on every rank with a clear
// error instead of hanging or moving the wrong data. An argument error one
// rank finds fails that collective on every rank too (that rank takes part
// as a stand-in, see trn_comm_fail_call), so the ranks stay in step. A wait
// that passes the timeout, a peer that died, or trn_comm_abort() from another
// rank makes the call fail with TRN_ERROR_SYSTEM and a message naming the
// collective and the ranks involved. After a timeout or abort the
// communicator stays failed (like an aborted NCCL communicator).
#ifndef TRN_COLLECTIVES_H
#define TRN_COLLECTIVES_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "trn/dtype.h"
#include "trn/status.h"

#ifdef __cplusplus
extern "C" {
#endif

// Largest group that one region serves.
#define TRN_COMM_MAX_RANKS 256

typedef struct trn_comm trn_comm;

typedef enum trn_redop {
    TRN_REDOP_SUM,
    TRN_REDOP_PROD,
    TRN_REDOP_MIN,
    TRN_REDOP_MAX,
    TRN_REDOP_BAND,
    TRN_REDOP_BOR,
    TRN_REDOP_BXOR,
    TRN_REDOP_COUNT
} trn_redop;

// What happens to a reduced value before it is stored: nothing, divided by
// the group size (ReduceOp.AVG) or multiplied by a factor (PREMUL_SUM, whose
// factor distributes over the sum). Floating-point and complex dtypes only.
typedef struct trn_reduce_post {
    bool divide_by_size;
    bool scale;
    double factor;
} trn_reduce_post;

// Creates a region for `size` ranks; *fd is a descriptor the caller closes
// once every rank attached.
trn_status trn_comm_region_create(int size, int *fd);
// Maps the region behind `fd` as `rank` and returns once every rank of the
// group attached; timeout_ms bounds every wait (<= 0: wait forever). Fails if
// the region was made for another size, or a rank never came.
trn_status trn_comm_attach(int fd, int rank, int size, int64_t timeout_ms, trn_comm **comm);
// Unmaps; comm may be NULL. Never waits for peers.
void trn_comm_destroy(trn_comm *comm);
// Fails every current and future call of every rank with `why`.
void trn_comm_abort(trn_comm *comm, const char *why);
void trn_comm_set_timeout(trn_comm *comm, int64_t timeout_ms);
int trn_comm_rank(const trn_comm *comm);
int trn_comm_size(const trn_comm *comm);
// Whether large collectives read peers' buffers directly (process_vm_readv,
// one copy) rather than through the region's slots. Decided by all ranks
// together at the first collective of at least 32 KiB: on when every rank
// can read every other one and none set TORCH_NEURONX_DIST_SINGLE_COPY=0;
// false before that.
bool trn_comm_single_copy(const trn_comm *comm);

// What the ranks of the next collective must agree on beyond what the engine
// sees itself (it compares the kind of collective, element counts and
// dtypes of reductions, reduce ops, roots of reduce and broadcast, and the
// byte counts of every part moved): the root of a gather or scatter built on
// trn_comm_exchange, the caller's element type where only bytes move (an
// int32 all_gather into float32 tensors would otherwise succeed), and which
// tensor of a coalesced call this is (ranks passing 2 and 3 tensors would
// otherwise pair the third with the next collective). It travels in the
// descriptor every collective already exchanges, so agreeing costs no extra
// synchronization; a disagreement fails the collective on every rank with
// an error naming the field and both ranks' values.
#define TRN_COMM_DTYPE_NAME_MAX 16
typedef struct trn_comm_agree {
    int root;                             // -1: the collective has none
    char dtype[TRN_COMM_DTYPE_NAME_MAX];  // "float32"; "": not checked
    uint32_t part, parts;                 // parts 0: not a coalesced call
} trn_comm_agree;

// Applies `agree` to the next collective this communicator starts (then it
// is forgotten). Collectives of one communicator are made from one thread
// in the same order on every rank, so "the next" is well defined.
void trn_comm_agree_next(trn_comm *comm, const trn_comm_agree *agree);

// Takes this rank's place in the next collective when this rank could not
// make the call (its arguments failed a check the other ranks' passed): every
// rank's collective then fails with TRN_ERROR_INVALID_ARGUMENT naming this
// rank and `why`, and the ranks stay in step (no later call pairs with the
// wrong collective). Returns that error here too.
trn_status trn_comm_fail_call(trn_comm *comm, const char *what, const char *why);

// Whether `op` is defined for `dtype` (and the post step for it); on false
// the thread's last error says why.
trn_status trn_comm_check_reduce(trn_dtype dtype, trn_redop op, const trn_reduce_post *post);

// Applies `post` to `count` elements of `buf` in place (for transports that
// reduce by plain SUM themselves, e.g. Gloo, which lacks PREMUL_SUM).
trn_status trn_reduce_post_apply(void *buf, size_t count, trn_dtype dtype,
                                 const trn_reduce_post *post, int size);

// Every rank contributes `count` elements of `in`; every rank (allreduce),
// only `root` (reduce) receives the reduction in `out`. in == out is allowed.
// The reduction is evaluated in rank order for every element, so all ranks
// get bit-identical results.
trn_status trn_comm_allreduce(trn_comm *comm, const void *in, void *out, size_t count,
                              trn_dtype dtype, trn_redop op, const trn_reduce_post *post);
trn_status trn_comm_reduce(trn_comm *comm, const void *in, void *out, size_t count, trn_dtype dtype,
                           trn_redop op, const trn_reduce_post *post, int root);
// `in` holds size blocks of `count` elements; rank r receives the reduction
// of everyone's block r in `out` (count elements).
trn_status trn_comm_reduce_scatter(trn_comm *comm, const void *in, void *out, size_t count,
                                   trn_dtype dtype, trn_redop op, const trn_reduce_post *post);

// The general data movement: every rank publishes `src` (src_bytes) cut into
// one part per destination rank j (part_off[j], part_len[j] bytes; NULL
// arrays mean "the whole buffer for everyone"); every rank then copies the
// part addressed to it by rank i into dst[i], expecting dst_len[i] bytes
// (dst == NULL or dst[i] == NULL: reads nothing from i). A part length that
// differs from what its reader expects fails on every rank.
// `what` names the collective in errors ("allgather", "all_to_all", ...).
trn_status trn_comm_exchange(trn_comm *comm, const char *what, const void *src, size_t src_bytes,
                             const size_t *part_off, const size_t *part_len, void *const *dst,
                             const size_t *dst_len);
// All ranks publish a buffer of `nbytes`; `root`'s lands in every buf.
trn_status trn_comm_broadcast(trn_comm *comm, void *buf, size_t nbytes, int root);
trn_status trn_comm_barrier(trn_comm *comm);

// Point-to-point: an ordered byte stream per (sender, receiver) pair, so a
// send and a recv between the same two ranks match in call order. Progress
// is non-blocking so one thread can drive many requests at once (a pipeline
// stage sends and receives at the same time).
typedef struct trn_p2p_req {
    bool is_send;
    int peer;  // rank; -1 for a receive from any source
    int64_t tag;
    void *buf;
    size_t nbytes;
    // Progress state, zero-initialise.
    size_t done;
    int stage;   // 0: header pending, 1: payload, 2: finished
    int source;  // the matched peer (set for any-source receives)
    int64_t started_ns;
    int64_t checked_ns;  // last liveness check of the peer
} trn_p2p_req;

// Moves as much of `req` as the peer allows. *finished tells whether it
// completed; an error (tag or size mismatch, dead peer, timeout, abort) ends
// the request and leaves the message in the thread's last error.
trn_status trn_comm_p2p_progress(trn_comm *comm, trn_p2p_req *req, bool *finished);

#ifdef __cplusplus
}
#endif
#endif
