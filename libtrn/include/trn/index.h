// trn/index.h - indexing and data-movement kernels: gather / scatter through
// index tensors (index_select, gather, advanced indexing, embedding,
// scatter*, index_put, index_add), masks (masked_fill, masked_select,
// nonzero) and cat.
//
// Ownership: libtrn owns the element movement and every per-element check
// (an index out of range fails the task with TRN_ERROR_INVALID_ARGUMENT and
// "index 7 is out of bounds for dimension 0 with size 5", PyTorch's wording;
// as for every kernel the error is deferred to the next synchronize). The
// caller (the C++ layer, with PyTorch's own metadata helpers) owns shapes,
// broadcasting, restriding and dtype checks, and hands a flat descriptor.
//
// Layout conventions of trn_index_desc follow PyTorch's TensorIterator, which
// builds it: dims are listed innermost first (dim 0 varies fastest) and every
// stride is in BYTES. Index tensors are int64.
//
// Determinism: scatter tasks run single-threaded in iteration order, so
// accumulation order (and the float result) is fixed for a given descriptor.
#ifndef TRN_INDEX_H
#define TRN_INDEX_H

#include <stdint.h>

#include "trn/dtype.h"
#include "trn/status.h"
#include "trn/stream.h"

#ifdef __cplusplus
extern "C" {
#endif

#define TRN_INDEX_MAX_DIMS 25
#define TRN_INDEX_MAX_INDICES 8

typedef enum trn_index_reduce {
    TRN_INDEX_REDUCE_NONE = 0,  // plain store (the last write to a position wins)
    TRN_INDEX_REDUCE_ADD,       // dst += alpha * src (bool: logical or)
    TRN_INDEX_REDUCE_MUL,       // dst *= src (bool: logical and)
    TRN_INDEX_REDUCE_MEAN,      // sum, then divide by the count (floor for integers)
    TRN_INDEX_REDUCE_MAX,       // NaN propagates from src (PyTorch's scatter amax)
    TRN_INDEX_REDUCE_MIN,
    TRN_INDEX_REDUCE_COUNT_
} trn_index_reduce;

// One launch moves elements of an iteration space `sizes` between a direct
// side (strides only) and an indexed side (strides + index offsets):
//   gather  (scatter == 0): out[it]                      = src[it + off(it)]
//   scatter (scatter != 0): out[it + off(it)] (reduce)= src[it]
// where off(it) = sum_k idx_k[it] * indexed_strides[k], each idx_k checked
// against indexed_sizes[k] ([0, size), or [-size, size) with negative values
// wrapped when `wrap` is set). `dims[k]` is the dimension number the error
// message names.
typedef struct trn_index_desc {
    int scatter;
    trn_index_reduce reduce;  // scatter only; NONE for gather
    int include_self;         // MEAN: the destination's value counts once
    trn_dtype dtype;          // of out and src (reductions compute per dtype)
    int ndim;                 // 0..TRN_INDEX_MAX_DIMS
    const int64_t *sizes;     // innermost first
    void *out;
    const int64_t *out_strides;  // bytes
    const void *src;             // NULL: every element is `value`
    const int64_t *src_strides;  // bytes (ignored when src is NULL)
    unsigned char value[16];     // one element of dtype, used when src is NULL
    double alpha;                // ADD on floating dtypes (1 = plain add)
    int64_t alpha_int;           // ADD on integer dtypes
    int nidx;                    // 0..TRN_INDEX_MAX_INDICES
    const int64_t *idx[TRN_INDEX_MAX_INDICES];
    const int64_t *idx_strides[TRN_INDEX_MAX_INDICES];  // bytes
    int64_t indexed_sizes[TRN_INDEX_MAX_INDICES];
    int64_t indexed_strides[TRN_INDEX_MAX_INDICES];  // bytes
    int dims[TRN_INDEX_MAX_INDICES];
    int wrap;
    // MEAN only: the destination is contiguous with out_numel elements and
    // every indexed offset lands inside it (the count of a position is kept
    // at byte offset / element size).
    int64_t out_numel;
} trn_index_desc;

// Validates (ranges, dtype, limits: TRN_ERROR_UNSUPPORTED beyond the
// TRN_INDEX_MAX_* limits), copies and enqueues.
trn_status trn_index_launch(trn_stream *stream, const trn_index_desc *desc);

// ---- masks (src/kernels/index/mask.c) -------------------------------------------
// Dims innermost first, strides in bytes (TensorIterator order).
// masked_fill: out[it] = value where mask[it] (bool) is true.
typedef struct trn_mask_fill_desc {
    trn_dtype dtype;
    int ndim;
    const int64_t *sizes;
    void *out;
    const int64_t *out_strides;
    const void *mask;  // bool
    const int64_t *mask_strides;
    unsigned char value[16];  // one element of dtype
} trn_mask_fill_desc;
trn_status trn_mask_fill_launch(trn_stream *stream, const trn_mask_fill_desc *d);

// Row-major (outermost first) strided tensor of `dtype`; "nonzero" tests
// the value (-0.0 is zero, NaN is not; complex: either part).
typedef struct trn_nz_tensor {
    trn_dtype dtype;
    int ndim;              // 0..TRN_INDEX_MAX_DIMS
    const int64_t *sizes;  // outermost first
    const void *data;
    const int64_t *strides;  // ELEMENTS
} trn_nz_tensor;

// *count (a host or device int64) = number of nonzero elements. The caller
// reads it after synchronizing the stream.
trn_status trn_count_nonzero_launch(trn_stream *stream, const trn_nz_tensor *t, int64_t *count);
// nonzero: writes the coordinates of the first `count` nonzero elements in
// row-major order into out (int64 [count, ndim], row stride out_row_stride
// and column stride out_col_stride, in elements). Finding a different number
// of nonzeros than `count` (the tensor changed) fails the task.
trn_status trn_nonzero_launch(trn_stream *stream, const trn_nz_tensor *t, int64_t count,
                              int64_t *out, int64_t out_row_stride, int64_t out_col_stride);
// masked_select: `mask` (bool) and `src` share `t.sizes` (already broadcast);
// copies src elements where mask is true, in row-major order, to the
// contiguous out (count elements of src's dtype, out_stride elements apart).
trn_status trn_masked_select_launch(trn_stream *stream, const trn_nz_tensor *src,
                                    const trn_nz_tensor *mask, int64_t count, void *out,
                                    int64_t out_stride);

// ---- cat (src/kernels/index/cat.c) ----------------------------------------------
// Copies `ninputs` tensors of `dtype` into consecutive slices of out along
// `dim`. Sizes are outermost first and strides in ELEMENTS; input i has
// out's sizes except sizes[dim] = input_dim_sizes[i]. Inputs may be empty.
typedef struct trn_cat_input {
    const void *data;
    const int64_t *strides;  // ndim entries, elements
    int64_t dim_size;
} trn_cat_input;

typedef struct trn_cat_desc {
    trn_dtype dtype;
    int ndim;              // 1..TRN_INDEX_MAX_DIMS
    const int64_t *sizes;  // of out
    void *out;
    const int64_t *out_strides;  // elements
    int dim;
    int ninputs;
    const trn_cat_input *inputs;
} trn_cat_desc;
trn_status trn_cat_launch(trn_stream *stream, const trn_cat_desc *desc);

#ifdef __cplusplus
}
#endif
#endif
