// trn/fill.h - creation kernels: fill, arange/linspace, tril/triu.
//
// Owned by the shape family (libtrn/src/kernels/pointwise/fill.c; the C++ side is
// torch_neuronx/csrc/aten/shape.cpp). The C++ layer decides shapes, dtypes
// and errors with PyTorch's own checks; these kernels only write memory.
// ALL STRIDES ARE IN ELEMENTS.
#ifndef TRN_FILL_H
#define TRN_FILL_H

#include <stdint.h>

#include "trn/copy.h"
#include "trn/dtype.h"
#include "trn/status.h"
#include "trn/stream.h"

#ifdef __cplusplus
extern "C" {
#endif

// out[...] = value for every element of an arbitrary strided view (any
// dtype). The value is `value` (its first element-size bytes, the element's
// representation in `dtype`), or, when value_ptr is not NULL, the element
// value_ptr points to, read when the task runs (a 0-d device tensor of the
// same dtype: no host synchronization needed). Contiguous runs are filled at
// memset speed and split across the thread pool when large.
typedef struct trn_fill_desc {
    trn_dtype dtype;
    int ndim;  // 0..TRN_MAX_DIMS
    const int64_t *sizes;
    void *out;
    const int64_t *strides;  // elements, nonzero for size > 1
    unsigned char value[16];
    const void *value_ptr;  // NULL: use value
} trn_fill_desc;

trn_status trn_fill_launch(trn_stream *stream, const trn_fill_desc *desc);

// 1-d ranges, out[i * stride] for i in [0, n). Real dtypes only.
//  ARANGE   integer dtypes: istart + istep * i in 64-bit integers;
//           float32/float64: start + step * i in double, rounded once;
//           float16/bfloat16: in float32 (PyTorch's accumulate type).
//  LINSPACE PyTorch's formula: step = (end - start) / (n - 1) and
//           i < n / 2 ? start + step * i : end - step * (n - 1 - i),
//           computed in the dtype for float32/float64 (float32 for the
//           16-bit floats), in double for integer dtypes (start and end
//           already converted to the dtype by the caller), then truncated.
typedef enum trn_range_kind { TRN_RANGE_ARANGE, TRN_RANGE_LINSPACE } trn_range_kind;

typedef struct trn_range_desc {
    trn_range_kind kind;
    trn_dtype dtype;
    int64_t n;
    void *out;
    int64_t stride;           // elements
    double start, step, end;  // floating arange / every linspace
    int64_t istart, istep;    // integer arange
} trn_range_desc;

trn_status trn_range_launch(trn_stream *stream, const trn_range_desc *desc);

// tril (upper = 0) / triu (upper = 1) over the last two dims of an
// ndim >= 2 view: out[..., i, j] = in[..., i, j] where j - i <= diagonal
// (tril) / j - i >= diagonal (triu), else zero. Any dtype (only element
// sizes matter). in == out with equal strides works in place (only the
// zeroed part is written).
typedef struct trn_tri_desc {
    int upper;
    int64_t diagonal;
    trn_dtype dtype;
    int ndim;  // 2..TRN_MAX_DIMS
    const int64_t *sizes;
    const void *in;
    const int64_t *in_strides;
    void *out;
    const int64_t *out_strides;
} trn_tri_desc;

trn_status trn_tri_launch(trn_stream *stream, const trn_tri_desc *desc);

#ifdef __cplusplus
}
#endif
#endif
