// pool/pool_common.h - owns the skeleton the 2-d and 3-d pooling kernels
// share: the task arguments both carry, the descriptor checks, the task body
// (access ranges, the split over planes, the deferred index/memory errors)
// and the backward's per-plane accumulator. Each kernel keeps only its
// window loops and its geometry. Private to src/kernels/pool.
#ifndef TRN_KERNELS_POOL_COMMON_H
#define TRN_KERNELS_POOL_COMMON_H

#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>

#include "../kit/dtype_io.h"
#include "../kit/launch.h"
#include "trn/pool.h"

// Output elements per parallel piece (each costs a window's worth of loads).
#define TRN__POOL_GRAIN 4096

// What a pooling task reads and writes, whatever its geometry. The kernel's
// argument struct starts with it, so the shared task body can reach it.
typedef struct trn__pool_io {
    trn_dtype dtype;
    trn_pool_mode mode;
    const void *x, *dy;
    void *y, *dx;
    int64_t *idx_out;
    const int64_t *idx_in;
    int backward;
    atomic_int *bad;  // backward: 1 = an index outside its plane, 2 = out of memory
} trn__pool_io;

// Per-plane sizes and loops of one task, for trn__pool_run.
typedef struct trn__pool_shape {
    int64_t planes, in_n, out_n;  // planes and elements per input / output plane
    int64_t fwd_reads;            // input elements a forward output reads (estimate)
    const char *outside;          // the error when a max index leaves its plane
} trn__pool_shape;

// A kernel's loops over [p0, p1) planes, one per floating dtype in
// TRN_KIT_FLOAT_TYPES order (F16, BF16, F32, F64).
typedef struct trn__pool_loops {
    trn_parallel_fn fwd[4], bwd[4];
} trn__pool_loops;

// Null/dtype/mode checks every pooling launch starts with.
trn_status trn__pool_check(const trn_stream *stream, const void *desc, trn_dtype dtype,
                           trn_pool_mode mode, const char *fn);
// The task body: picks the dtype's loop, opens the ranges, splits planes
// across the pool, and turns what the backward flagged into the task's error.
trn_status trn__pool_run(trn__pool_io *io, const trn__pool_shape *s, const trn__pool_loops *l,
                         void *ctx);
// The launch tail both kernels share, once the descriptor and geometry are
// checked: nothing to do without outputs (forward) / inputs (backward), the
// pointer checks, then the task. args (size bytes) starts with *io.
trn_status trn__pool_submit(trn_stream *stream, trn__pool_io *io, int64_t planes, int64_t in_n,
                            int64_t out_n, trn_task_fn task, size_t size, const char *fn);
// The forward's pointers (x, y, and indices for max) and a non-empty input.
trn_status trn__pool_check_forward(const trn__pool_io *io, int64_t in_n, const char *fn);
// The backward's pointers: dx always, dy and indices when there is an output.
trn_status trn__pool_check_backward(const trn__pool_io *io, int64_t out_n, const char *fn);

// The io of a forward / backward descriptor (2-d and 3-d have the same fields).
#define TRN__POOL_FORWARD_IO(d)                                                                    \
    ((trn__pool_io){.dtype = (d)->dtype,                                                           \
                    .mode = (d)->mode,                                                             \
                    .x = (d)->x,                                                                   \
                    .y = (d)->y,                                                                   \
                    .idx_out = (d)->mode == TRN_POOL_MAX ? (d)->indices : NULL})
#define TRN__POOL_BACKWARD_IO(d)                                                                   \
    ((trn__pool_io){.dtype = (d)->dtype,                                                           \
                    .mode = (d)->mode,                                                             \
                    .dy = (d)->dy,                                                                 \
                    .dx = (d)->dx,                                                                 \
                    .idx_in = (d)->mode == TRN_POOL_MAX ? (d)->indices : NULL,                     \
                    .backward = 1})

// Opens the backward's sum of plane p: 16-bit types accumulate in the compute
// type C (small additions would be lost), in `local` when the plane fits and
// else in `acc` (allocated once per piece, freed by the caller); float types
// accumulate straight into dx. The caller zeroes it. NULL: out of memory.
#define TRN__POOL_SUM_OPEN(T, C, dx, in_n, local, acc)                                             \
    trn__pool_sum_open(sizeof(T) == sizeof(C), (dx), (in_n), (local), sizeof(local) / sizeof(C),   \
                       (void **)&(acc), sizeof(C))
static inline void *trn__pool_sum_open(int in_place, void *dx, int64_t in_n, void *local,
                                       size_t local_n, void **acc, size_t csize) {
    void *sum = in_place ? dx : ((size_t)in_n <= local_n ? local : *acc);
    if (sum == NULL) {
        *acc = malloc((size_t)in_n * csize);
        sum = *acc;
    }
    return sum;
}

#endif
