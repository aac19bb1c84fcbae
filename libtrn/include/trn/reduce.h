// trn/reduce.h - reductions, scans (cumsum/cumprod) and softmax kernels.
//
// Owned by the reduction family (libtrn/src/kernels/reduce/reduce.c, scan.c,
// softmax.c). The C++ layer (torch_neuronx/csrc/aten/reduce.cpp) decides
// shapes, result dtypes and errors with PyTorch's own meta functions and hands
// these kernels flat descriptors; the kernels only compute.
//
// Reductions: the input is seen as an "outer" (kept) part and an "inner"
// (reduced) part. Each output element out[o] reduces the input block
// in[o-offset + sum_k i_k * inner_strides[k]] over every inner index. The
// kernel coalesces dimensions and picks a loop: a vectorized pairwise sum over
// a contiguous inner run, a "column" loop that accumulates whole input rows
// into a vector of partial results when the kept dim is the contiguous one
// (sum over dim 0 of a row-major matrix), or a strided loop otherwise.
// ALL STRIDES ARE IN ELEMENTS (of the array they index), 0 is allowed on the
// input side only.
//
// Accumulation follows PyTorch CPU: float16/bfloat16/float32 in float32
// (pairwise/blocked, so sums of millions of elements stay accurate), float64
// in double, integers in 64 bits (wrapping); VAR/STD in double (two-pass).
// Float16/bfloat16 results are rounded once on store.
#ifndef TRN_REDUCE_H
#define TRN_REDUCE_H

#include <stdint.h>

#include "trn/copy.h"
#include "trn/dtype.h"
#include "trn/status.h"
#include "trn/stream.h"

#ifdef __cplusplus
extern "C" {
#endif

// X(name). Dtype rules (the caller casts the input first where PyTorch does):
//  SUM, PROD           out dtype == in dtype, any real dtype
//  MEAN                float dtypes; sum / count (NaN for count 0)
//  AMAX, AMIN          out == in, any real dtype; NaN propagates
//  MAX, MIN            out == in (values), out2 int64 (first index of the
//                      extreme; a NaN counts as the extreme, first NaN wins);
//                      the index is row-major over the inner dims as given
//  ARGMAX, ARGMIN      out int64 (as MAX/MIN's indices)
//  VAR, STD            float dtypes; param = correction; n - correction <= 0
//                      gives inf/NaN as PyTorch
//  VAR_MEAN, STD_MEAN  out var/std, out2 mean (both in dtype)
//  NORM                float dtypes; param = p (0, 1, 2, +-inf, any other)
//  LOGSUMEXP           float dtypes; stable (max subtracted); empty -> -inf
//  ANY, ALL            out BOOL or U8 (0/1), any real input dtype
//  COUNT_NONZERO       out int64, any real input dtype
// Reductions with no identity (AMAX, AMIN, MAX, MIN, ARG*, NORM with p=-inf)
// over an empty inner part are rejected (TRN_ERROR_INVALID_ARGUMENT); the
// caller raises PyTorch's error before launching.
// clang-format off
#define TRN_REDUCE_OP_LIST(X)                                                  \
    X(SUM) X(PROD) X(MEAN) X(AMAX) X(AMIN) X(MAX) X(MIN) X(ARGMAX) X(ARGMIN)  \
    X(VAR) X(STD) X(VAR_MEAN) X(STD_MEAN) X(NORM) X(LOGSUMEXP) X(ANY) X(ALL)   \
    X(COUNT_NONZERO)
// clang-format on

typedef enum trn_reduce_op {
#define TRN__REDUCE_ENUM(name) TRN_REDUCE_##name,
    TRN_REDUCE_OP_LIST(TRN__REDUCE_ENUM)
#undef TRN__REDUCE_ENUM
        TRN_REDUCE_OP_COUNT
} trn_reduce_op;

const char *trn_reduce_op_name(trn_reduce_op op);

typedef struct trn_reduce_desc {
    trn_reduce_op op;
    trn_dtype dtype;      // input dtype
    trn_dtype out_dtype;  // see the table above
    const void *in;
    void *out;
    void *out2;      // MAX/MIN indices, *_MEAN means; else NULL
    int outer_ndim;  // 0..TRN_MAX_DIMS (0: one output element)
    const int64_t *outer_sizes;
    const int64_t *in_outer_strides;  // elements
    const int64_t *out_strides;       // elements, nonzero for size > 1
    const int64_t *out2_strides;      // elements (ignored without out2)
    int inner_ndim;                   // 0..TRN_MAX_DIMS (0: reduce one element)
    const int64_t *inner_sizes;
    const int64_t *in_inner_strides;  // elements
    double param;                     // VAR/STD: correction; NORM: p
} trn_reduce_desc;

// Whether the (op, input dtype, output dtype) triple is supported; never
// sets an error.
int trn_reduce_supports(trn_reduce_op op, trn_dtype dtype, trn_dtype out_dtype);
// Validates (TRN_ERROR_UNSUPPORTED for unsupported dtypes), copies the
// descriptor and enqueues the reduction.
trn_status trn_reduce_launch(trn_stream *stream, const trn_reduce_desc *desc);

// ---- scans ------------------------------------------------------------------
// out[..., i, ...] = in[..., 0, ...] (+|*) ... (+|*) in[..., i, ...] along one
// dim. in and out have the same dtype (any real dtype; the caller casts first
// as PyTorch does); accumulation as PyTorch CPU: double for floating dtypes,
// 64-bit wrapping for integers. Strides in elements. in and out may be the
// same memory (in-place) when their strides are equal.
typedef enum trn_scan_op { TRN_SCAN_CUMSUM, TRN_SCAN_CUMPROD } trn_scan_op;

typedef struct trn_scan_desc {
    trn_scan_op op;
    trn_dtype dtype;
    const void *in;
    void *out;
    int outer_ndim;  // dims other than the scanned one
    const int64_t *outer_sizes;
    const int64_t *in_outer_strides;
    const int64_t *out_outer_strides;
    int64_t len;                    // size of the scanned dim
    int64_t in_stride, out_stride;  // strides of the scanned dim
} trn_scan_desc;

int trn_scan_supports(trn_scan_op op, trn_dtype dtype);
trn_status trn_scan_launch(trn_stream *stream, const trn_scan_desc *desc);

// ---- softmax ----------------------------------------------------------------
// Contiguous tensors seen as [outer, dim, inner] (row-major), float dtypes
// (F16, BF16, F32, F64; halves computed in float32), all operands the same
// dtype. Forward: out = softmax(in) or log_softmax(in) along dim, stable
// (max subtracted). Backward: `in` is the forward output y, `grad` the
// incoming gradient g:
//   SOFTMAX_BACKWARD:     out = y * (g - sum(g * y))
//   LOG_SOFTMAX_BACKWARD: out = g - exp(y) * sum(g)
// out may alias in or grad exactly.
typedef enum trn_softmax_op {
    TRN_SOFTMAX,
    TRN_LOG_SOFTMAX,
    TRN_SOFTMAX_BACKWARD,
    TRN_LOG_SOFTMAX_BACKWARD
} trn_softmax_op;

typedef struct trn_softmax_desc {
    trn_softmax_op op;
    trn_dtype dtype;
    const void *in;
    const void *grad;  // backward only
    void *out;
    int64_t outer, dim, inner;
} trn_softmax_desc;

int trn_softmax_supports(trn_softmax_op op, trn_dtype dtype);
trn_status trn_softmax_launch(trn_stream *stream, const trn_softmax_desc *desc);

#ifdef __cplusplus
}
#endif
#endif
