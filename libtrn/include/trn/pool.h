// trn/pool.h - 2-d max pooling (with indices) and average pooling, forward
// and backward. 1-d pooling is the 2-d kernel with a height of 1.
//
// Owned by the pooling family (libtrn/src/kernels/pool/pool2d.c). The C++ layer
// (torch_neuronx/csrc/aten/pool.cpp) checks arguments and computes output
// sizes with PyTorch's rules, makes operands contiguous and hands over
// `planes` independent [in_h, in_w] images (batch * channels). Results follow
// PyTorch CPU: max pooling propagates NaN and its index is the flat position
// h * in_w + w in the plane; average pooling divides by divisor when it is
// nonzero (PyTorch allows any nonzero divisor_override, negative too), else
// by the window size counting padding (count_include_pad) or not.
// Dtypes: F16, BF16, F32, F64 (float accumulation, double for F64).
#ifndef TRN_POOL_H
#define TRN_POOL_H

#include <stdint.h>

#include "trn/dtype.h"
#include "trn/status.h"
#include "trn/stream.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum trn_pool_mode { TRN_POOL_MAX = 0, TRN_POOL_AVG = 1 } trn_pool_mode;

typedef struct trn_pool2d_geometry {
    int64_t planes, in_h, in_w, out_h, out_w;
    int64_t kh, kw, sh, sw, ph, pw, dh, dw;  // kernel, stride, padding, dilation
    int count_include_pad;                   // average only
    int64_t divisor;                         // average only; 0 = none (may be negative)
} trn_pool2d_geometry;

typedef struct trn_pool2d_desc {
    trn_dtype dtype;
    trn_pool_mode mode;
    trn_pool2d_geometry g;
    const void *x;     // [planes, in_h, in_w]
    void *y;           // [planes, out_h, out_w]
    int64_t *indices;  // max: [planes, out_h, out_w]; average: unused
} trn_pool2d_desc;

trn_status trn_pool2d_launch(trn_stream *stream, const trn_pool2d_desc *desc);

typedef struct trn_pool2d_backward_desc {
    trn_dtype dtype;
    trn_pool_mode mode;
    trn_pool2d_geometry g;
    const void *dy;          // [planes, out_h, out_w]
    const int64_t *indices;  // max only
    void *dx;                // [planes, in_h, in_w], fully written
} trn_pool2d_backward_desc;

trn_status trn_pool2d_backward_launch(trn_stream *stream, const trn_pool2d_backward_desc *desc);

// Whether the dtype is supported; never sets an error.
int trn_pool_supports(trn_dtype dtype);

#ifdef __cplusplus
}
#endif
#endif
