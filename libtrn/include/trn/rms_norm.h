// trn/rms_norm.h - RMS normalization forward and backward kernels.
//
// Owned by the rms-norm family (libtrn/src/kernels/norm/rms_norm.c). The C++
// layer (torch_neuronx/csrc/aten/rms_norm.cpp) checks shapes with PyTorch's
// rules, makes operands contiguous and hands over flat [rows, cols] views:
// each row of `cols` elements is normalized on its own.
//
// Dtypes: x / y / dy / dx are F16, BF16, F32 or F64, all the same. weight
// (and dweight) has `param_dtype`, any of those four. rstd has `stat_dtype`:
// F32 for 16-bit and float32 x, F64 for float64 x (PyTorch's computation
// dtype). Arithmetic is float32 (sums of squares in double) for 16-bit and
// float32 data and double for float64; results are rounded once on store.
#ifndef TRN_RMS_NORM_H
#define TRN_RMS_NORM_H

#include <stdint.h>

#include "trn/dtype.h"
#include "trn/status.h"
#include "trn/stream.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct trn_rms_norm_desc {
    trn_dtype dtype, param_dtype, stat_dtype;
    int64_t rows, cols;
    const void *x;       // [rows, cols]
    const void *weight;  // [cols] or NULL (1)
    void *y;             // [rows, cols]
    void *rstd;          // [rows] or NULL when not wanted
    double eps;
} trn_rms_norm_desc;

// y = x * rstd * weight, rstd = 1 / sqrt(mean(x^2) + eps). rows == 0
// launches nothing; cols must be > 0 when rows > 0.
trn_status trn_rms_norm_launch(trn_stream *stream, const trn_rms_norm_desc *desc);

typedef struct trn_rms_norm_backward_desc {
    trn_dtype dtype, param_dtype, stat_dtype;
    int64_t rows, cols;
    const void *dy, *x;  // [rows, cols]
    const void *rstd;    // [rows]
    const void *weight;  // [cols] or NULL (1)
    void *dx;            // [rows, cols] or NULL
    void *dweight;       // [cols] or NULL
} trn_rms_norm_backward_desc;

// dx = rstd (w dy - xhat mean(w dy xhat)), xhat = x rstd;
// dweight = sum over rows of dy xhat.
trn_status trn_rms_norm_backward_launch(trn_stream *stream, const trn_rms_norm_backward_desc *desc);

// Whether the dtype combination is supported; never sets an error.
int trn_rms_norm_supports(trn_dtype dtype, trn_dtype param_dtype, trn_dtype stat_dtype);

#ifdef __cplusplus
}
#endif
#endif
