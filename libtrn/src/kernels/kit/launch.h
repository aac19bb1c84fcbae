// kit/launch.h - owns what every kernel's launch and task repeat: the NULL
// stream/descriptor check, the fork check, the parallel grain, and (through
// internal.h) the one access-range helper, trn__access_set. Private to
// src/kernels; a kernel includes this and kit/dtype_io.h, not internal.h.
// The task skeleton that opens a strided kernel's memory ranges around its
// body (trn__access_run) lives here too.
#ifndef TRN_KERNELS_KIT_LAUNCH_H
#define TRN_KERNELS_KIT_LAUNCH_H

#include <stdint.h>

#include "../../internal.h"
#include "trn/parallel.h"
#include "trn/stream.h"

// The first check of every launch, with one message for every kernel.
static inline trn_status trn__check_launch(const trn_stream *stream, const void *desc,
                                           const char *fn) {
    if (stream == NULL || desc == NULL)
        return trn__set_error(TRN_ERROR_INVALID_ARGUMENT, "%s: stream or descriptor is NULL", fn);
    return TRN_SUCCESS;
}

// p + off bytes, for the lowest byte of a strided operand (off may be
// negative); integer arithmetic, so a pointer never leaves its object in C's
// eyes.
static inline const void *trn__offset_ptr(const void *p, int64_t off) {
    return (const void *)((uintptr_t)p + (uintptr_t)off);
}

// Adds the byte range a dim of `size` with element stride `stride` (element
// size es) reaches to [lo, hi]; 0 on overflow. Launches size the memory an
// operand touches with it.
static inline int trn__extent(int64_t size, int64_t stride, int64_t es, int64_t *lo, int64_t *hi) {
    int64_t bs, reach;
    if (__builtin_mul_overflow(stride, es, &bs) || __builtin_mul_overflow(bs, size - 1, &reach))
        return 0;
    return reach < 0 ? !__builtin_add_overflow(*lo, reach, lo)
                     : !__builtin_add_overflow(*hi, reach, hi);
}

// The task skeleton of a strided kernel: the byte ranges [base[k] + lo[k],
// + span[k]) of its n operands opened (protect mode; a NULL base or an empty
// span is skipped), run(args), the ranges closed in reverse.
static inline trn_status trn__access_run(trn_status (*run)(const void *), const void *args, int n,
                                         const void *const *base, const int64_t *lo,
                                         const int64_t *span) {
    trn__access_set r;
    r.count = 0;
    for (int k = 0; k < n; k++)
        if (base[k] != NULL) trn__access_add(&r, trn__offset_ptr(base[k], lo[k]), (size_t)span[k]);
    trn_status st = trn__access_begin(&r);
    if (st == TRN_SUCCESS) st = run(args);
    trn__access_end(&r);
    return st;
}

// trn__extent for a dim that may be empty: size <= 0 reaches nothing.
static inline int trn__extent_or_empty(int64_t size, int64_t stride, int64_t es, int64_t *lo,
                                       int64_t *hi) {
    return size <= 0 || trn__extent(size, stride, es, lo, hi);
}

// Bytes spanned by a [n0, n1, n2, n3] view with element strides s and
// element size es, from its first element (0 when any dim is empty).
static inline size_t trn__span4_bytes(const int64_t *n, const int64_t *s, size_t es) {
    int64_t last = 0;
    for (int k = 0; k < 4; k++) {
        if (n[k] == 0) return 0;
        last += (n[k] - 1) * s[k];
    }
    return (size_t)(last + 1) * es;
}

// Items per trn_parallel_for piece when an item costs `per` elements and a
// piece should cover about `elements` (at least one item).
static inline int64_t trn__grain(int64_t elements, int64_t per) {
    const int64_t g = elements / (per > 0 ? per : 1);
    return g > 1 ? g : 1;
}

#endif
