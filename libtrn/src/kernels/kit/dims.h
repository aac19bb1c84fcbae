// kit/dims.h - owns the coalescing of a strided iteration space that the
// launches of strided kernels (copy, fill, elementwise, cat, reduce, scan)
// share: size-1 dims dropped, a dim merged into its outer neighbour when
// every operand is laid out contiguously across the two, and the packing of
// the result into a task's argument words (the sizes, then each operand's
// strides), and the odometer their tasks walk the outer dims with. Each
// launch keeps its own checks (which strides may be 0, how the byte ranges
// are sized); only the bookkeeping lives here, so the kernels agree on what
// "contiguous across two dims" means.
#ifndef TRN_KERNELS_KIT_DIMS_H
#define TRN_KERNELS_KIT_DIMS_H

#include <stdint.h>
#include <string.h>

#include "trn/copy.h"  // TRN_MAX_DIMS

// The most operands (stride arrays) one iteration space walks together
// (elementwise: an output and three inputs).
#define TRN_KIT_DIMS_MAX_OPS 4

typedef struct trn_kit_dims {
    int n;    // dims kept
    int ops;  // operands
    int64_t size[TRN_MAX_DIMS];
    int64_t stride[TRN_KIT_DIMS_MAX_OPS][TRN_MAX_DIMS];
} trn_kit_dims;

static inline void trn_kit_dims_init(trn_kit_dims *d, int ops) {
    d->n = 0;
    d->ops = ops;
}

// Appends a dim of size sz where operand k has stride s[k], outermost first.
// A size-1 dim is dropped; a dim merges into the previous one when, for
// every operand, the previous stride is sz times this one (a product that
// overflows never matches).
static inline void trn_kit_dims_push(trn_kit_dims *d, int64_t sz, const int64_t *s) {
    if (sz == 1) return;
    int merge = d->n > 0;
    for (int k = 0; k < d->ops && merge; k++) {
        int64_t run;
        merge = !__builtin_mul_overflow(sz, s[k], &run) && d->stride[k][d->n - 1] == run;
    }
    const int at = merge ? d->n - 1 : d->n++;
    d->size[at] = merge ? d->size[at] * sz : sz;
    for (int k = 0; k < d->ops; k++) d->stride[k][at] = s[k];
}

// At least one dim: when every dim was dropped (a 0-d or all-ones shape),
// a single element with operand k's stride unit[k].
static inline void trn_kit_dims_finish(trn_kit_dims *d, const int64_t *unit) {
    if (d->n > 0) return;
    d->size[0] = 1;
    for (int k = 0; k < d->ops; k++) d->stride[k][0] = unit[k];
    d->n = 1;
}

// Writes the sizes, then each operand's strides (n words each) at p; returns
// the word after the last one written.
static inline int64_t *trn_kit_dims_pack(const trn_kit_dims *d, int64_t *p) {
    memcpy(p, d->size, (size_t)d->n * sizeof *p);
    p += d->n;
    for (int k = 0; k < d->ops; k++, p += d->n) memcpy(p, d->stride[k], (size_t)d->n * sizeof *p);
    return p;
}

// The dim a parallel launch splits into pieces: the outermost with at least
// `min_size` indices, so that each piece is a run of whole rows (long
// contiguous moves, each thread on its own cache lines); the innermost when
// none has. Splitting the largest dim instead cut wide rows into stripes: a
// cat of two [512, 1024] along the last dim ran 6x slower at two threads
// than at one, an index_select of [512, 2048] rows 3x CPU's time.
static inline int trn_kit_split_dim(int nd, const int64_t *size, int64_t min_size) {
    for (int d = 0; d < nd; d++)
        if (size[d] >= min_size) return d;
    return nd - 1;
}

// Advances a row-major odometer over nd dims (the last varying fastest),
// keeping up to three offsets in step: o_k moves by s_k (a NULL s1 / s2
// leaves its offset alone). Returns 0 after the last index (all back at 0).
static inline int trn_kit_odo_next(int nd, const int64_t *size, int64_t *idx, const int64_t *s0,
                                   int64_t *o0, const int64_t *s1, int64_t *o1, const int64_t *s2,
                                   int64_t *o2) {
    for (int d = nd - 1; d >= 0; d--) {
        if (++idx[d] < size[d]) {
            *o0 += s0[d];
            if (s1) *o1 += s1[d];
            if (s2) *o2 += s2[d];
            return 1;
        }
        idx[d] = 0;
        *o0 -= s0[d] * (size[d] - 1);
        if (s1) *o1 -= s1[d] * (size[d] - 1);
        if (s2) *o2 -= s2[d] * (size[d] - 1);
    }
    return 0;
}

#endif
