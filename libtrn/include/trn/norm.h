// trn/norm.h - layer normalization forward and backward kernels.
//
// Owned by the normalization family (libtrn/src/kernels/norm/layer_norm.c). The C++
// layer (torch_neuronx/csrc/aten/train.cpp) checks shapes with PyTorch's
// rules, makes operands contiguous and hands over flat [rows, cols] views:
// each row of `cols` elements is normalized on its own.
//
// Dtypes: x / y / dy / dx are F16, BF16, F32 or F64, all the same. weight /
// bias (and their grads) have `param_dtype`: the same dtype, or F32 with a
// 16-bit x (PyTorch's mixed-type layer norm). mean / rstd have `stat_dtype`:
// x's dtype or F32. Arithmetic is float32 for 16-bit and float32 data and
// double for float64; row statistics use two passes (mean, then the sum of
// squared deviations), results are rounded once on store.
// All operands are contiguous; nothing here has strides.
#ifndef TRN_NORM_H
#define TRN_NORM_H

#include <stdint.h>

#include "trn/dtype.h"
#include "trn/status.h"
#include "trn/stream.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct trn_layer_norm_desc {
    trn_dtype dtype, param_dtype, stat_dtype;
    int64_t rows, cols;
    const void *x;       // [rows, cols]
    const void *weight;  // [cols] or NULL (1)
    const void *bias;    // [cols] or NULL (0)
    void *y;             // [rows, cols]
    void *mean, *rstd;   // [rows] each, or NULL when not wanted
    double eps;
} trn_layer_norm_desc;

// y = (x - mean) * rstd * weight + bias, rstd = 1 / sqrt(var + eps) with the
// biased variance. rows == 0 launches nothing; cols must be > 0 when rows > 0.
trn_status trn_layer_norm_launch(trn_stream *stream, const trn_layer_norm_desc *desc);

typedef struct trn_layer_norm_backward_desc {
    trn_dtype dtype, param_dtype, stat_dtype;
    int64_t rows, cols;
    const void *dy, *x;       // [rows, cols]
    const void *mean, *rstd;  // [rows]
    const void *weight;       // [cols] or NULL (1)
    void *dx;                 // [rows, cols] or NULL
    void *dweight, *dbias;    // [cols] each, or NULL
} trn_layer_norm_backward_desc;

// dx = rstd (w dy - mean(w dy) - xhat mean(w dy xhat)), xhat = (x - mean) rstd;
// dweight = sum over rows of dy xhat; dbias = sum over rows of dy.
trn_status trn_layer_norm_backward_launch(trn_stream *stream,
                                          const trn_layer_norm_backward_desc *desc);
// Whether the dtype combination is supported; never sets an error.
int trn_layer_norm_supports(trn_dtype dtype, trn_dtype param_dtype, trn_dtype stat_dtype);

#ifdef __cplusplus
}
#endif
#endif
