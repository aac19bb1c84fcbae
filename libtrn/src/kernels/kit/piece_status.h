// kit/piece_status.h - how a trn_parallel_for piece tells its task that it
// could not do its part. A piece that allocates scratch and gets NULL has no
// status to return (trn_parallel_fn is void) and no thread-safe way to set
// the task's error message (messages are per thread), so it records the
// failure here and returns; the task, after the join, turns it into
// TRN_ERROR_OUT_OF_MEMORY naming its op. Without it a piece's return left
// its share of the output unwritten and the op reported success.
//
// Cost: nothing on the hot path; a failing piece makes one relaxed store
// (trn_parallel_for's join orders it before the task's load).
#ifndef TRN_KERNELS_KIT_PIECE_STATUS_H
#define TRN_KERNELS_KIT_PIECE_STATUS_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include "../../internal.h"

typedef struct trn__piece_status {
    // Bytes of the allocation that failed (the last one recorded; SIZE_MAX:
    // not known); 0: none failed.
    _Atomic size_t oom_bytes;
} trn__piece_status;

static inline void trn__piece_status_init(trn__piece_status *s) { atomic_init(&s->oom_bytes, 0); }

// Records that a piece could not allocate `bytes` (0: a size not known here,
// e.g. a helper's allocation that returned NULL).
static inline void trn__piece_oom(trn__piece_status *s, size_t bytes) {
    atomic_store_explicit(&s->oom_bytes, bytes > 0 ? bytes : SIZE_MAX, memory_order_relaxed);
}

// malloc / calloc for a piece's scratch: NULL (and the failure recorded in
// s) when out of memory; the piece then returns without writing anything.
static inline void *trn__piece_malloc(trn__piece_status *s, size_t bytes) {
    void *p = malloc(bytes);
    if (p == NULL) trn__piece_oom(s, bytes);
    return p;
}

static inline void *trn__piece_calloc(trn__piece_status *s, size_t n, size_t size) {
    void *p = calloc(n, size);
    if (p == NULL) trn__piece_oom(s, n * size);
    return p;
}

// After trn_parallel_for: TRN_SUCCESS, or TRN_ERROR_OUT_OF_MEMORY with a
// message naming `op` when any piece failed (its output is then incomplete).
static inline trn_status trn__piece_status_raise(trn__piece_status *s, const char *op) {
    const size_t bytes = atomic_load_explicit(&s->oom_bytes, memory_order_relaxed);
    if (bytes == 0) return TRN_SUCCESS;
    if (bytes == SIZE_MAX)
        return trn__set_error(TRN_ERROR_OUT_OF_MEMORY,
                              "%s: out of host memory for a parallel piece's scratch", op);
    return trn__set_error(TRN_ERROR_OUT_OF_MEMORY,
                          "%s: out of host memory for a parallel piece's scratch (%zu bytes)", op,
                          bytes);
}

#endif
