// trn/sort.h - sort, topk and unique kernels.
//
// Owned by the shape family (libtrn/src/kernels/sort/sort.c; the C++ side is
// torch_neuronx/csrc/aten/shape.cpp). Real dtypes (bool, integers,
// float16/bfloat16/float32/float64). Order follows PyTorch: NaN sorts as
// larger than every number (all NaNs equal), -0.0 equals 0.0. Every sort is
// stable (equal elements keep their input order, in both directions), so
// sort(stable=False) gives the same result as stable=True.
//
// Elements are mapped to unsigned keys whose order is the requested one and
// sorted with an LSD radix sort (insertion sort for short rows); rows run in
// parallel. ALL STRIDES ARE IN ELEMENTS (of the array they index).
#ifndef TRN_SORT_H
#define TRN_SORT_H

#include <stdint.h>

#include "trn/copy.h"
#include "trn/dtype.h"
#include "trn/status.h"
#include "trn/stream.h"

#ifdef __cplusplus
extern "C" {
#endif

// Rows along one dim: row o of the input starts at in + in_outer offset of o
// and has len elements, in_stride apart. values (dtype) and indices (int64)
// receive the first `k` elements of the sorted row (k = len for a sort).
typedef struct trn_sort_desc {
    trn_dtype dtype;
    int descending;  // sort: descending; topk: largest
    int outer_ndim;  // 0..TRN_MAX_DIMS
    const int64_t *outer_sizes;
    const int64_t *in_outer_strides;
    const int64_t *val_outer_strides;
    const int64_t *idx_outer_strides;
    int64_t len, in_stride, val_stride, idx_stride;
    int64_t k;   // topk only: 0..len
    int sorted;  // topk only: 0 leaves the k in any order
    const void *in;
    void *values;
    int64_t *indices;
} trn_sort_desc;

int trn_sort_supports(trn_dtype dtype);
trn_status trn_sort_launch(trn_stream *stream, const trn_sort_desc *desc);
// The k smallest (largest when descending) of each row; with sorted, in
// order (ties by index). Indices of equal elements are the earliest ones.
trn_status trn_topk_launch(trn_stream *stream, const trn_sort_desc *desc);

// unique over a contiguous 1-d input of n elements. Sorted mode: values are
// the distinct elements ascending; consecutive mode: runs of equal adjacent
// elements collapse (input order kept). Equality is ==, so every NaN is its
// own element. Outputs have room for n elements (values dtype; inverse and
// counts int64, either may be NULL); *num_unique (host memory) receives the
// count when the task runs: synchronize before reading it.
typedef struct trn_unique_desc {
    trn_dtype dtype;
    int consecutive;
    int64_t n;
    const void *in;
    void *values;
    int64_t *inverse;
    int64_t *counts;
    int64_t *num_unique;
} trn_unique_desc;

trn_status trn_unique_launch(trn_stream *stream, const trn_unique_desc *desc);

#ifdef __cplusplus
}
#endif
#endif
