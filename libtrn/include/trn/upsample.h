// trn/upsample.h - nearest (1-d/2-d/3-d, legacy and "exact") and linear
// (linear 1-d, bilinear 2-d, trilinear 3-d) and bicubic 2-d upsampling / interpolation
// kernels, forward and backward.
//
// Owned by the upsample family (libtrn/src/kernels/nn/upsample.c). The C++
// layer (torch_neuronx/csrc/aten/upsample.cpp) checks shapes with PyTorch's
// rules, makes operands contiguous and hands over [planes, d, h, w] views
// (planes = batch * channels; a 1-d op has d = h = 1, a 2-d op d = 1).
//
// Source positions follow PyTorch's definitions: the scale of a dim is
// 1 / scales[k] when scales[k] > 0 (the caller's scale_factor) and
// in / out otherwise;
//   NEAREST        src = min(floor(o * scale), in - 1)  (float32 scale)
//   NEAREST_EXACT  src = min(floor((o + 0.5) * scale), in - 1)
//   BILINEAR       (every dim; a dim with in == out is the identity)
//                  align_corners: src = o * (in - 1) / (out - 1); else
//                  src = max((o + 0.5) * scale - 0.5, 0); the two taps are
//                  floor(src) and the next one (clamped), weighted by the
//                  distances.
//   BICUBIC        src as BILINEAR but not clamped at 0; taps floor(src) - 1
//                  .. + 2 clamped to the input, Keys' weights (A = -0.75) of
//                  the fraction; the forward rounds the weights to 16-bit
//                  dtypes first (as ATen's CPU kernel stores them).
// Dtypes: F16, BF16, F32, F64; the nearest forward (pure data movement) also
// takes every other dtype of 1, 2, 4 or 8 bytes. Arithmetic is float32 for 16-bit and float32
// data and double for float64; the backward accumulates each plane's
// gradient in that type and rounds once on store.
#ifndef TRN_UPSAMPLE_H
#define TRN_UPSAMPLE_H

#include <stdint.h>

#include "trn/dtype.h"
#include "trn/status.h"
#include "trn/stream.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum trn_upsample_mode {
    TRN_UPSAMPLE_NEAREST,
    TRN_UPSAMPLE_NEAREST_EXACT,
    TRN_UPSAMPLE_BILINEAR,  // linear in d, h and w (bi-/trilinear)
    TRN_UPSAMPLE_BICUBIC,   // cubic in h and w (d sizes must be 1); floating dtypes
} trn_upsample_mode;

typedef struct trn_upsample_desc {
    trn_dtype dtype;
    trn_upsample_mode mode;
    int align_corners;  // BILINEAR and BICUBIC
    int64_t planes;
    int64_t in_size[3], out_size[3];  // d, h, w; each >= 1 (planes may be 0)
    double scales[3];                 // d, h, w: scale factor, or <= 0 for none
    // forward: src [planes, in_size], dst [planes, out_size]
    // backward: src = grad of the output [planes, out_size],
    //           dst = grad of the input [planes, in_size] (overwritten)
    const void *src;
    void *dst;
    // The op's number of spatial dims (1 linear, 2 bilinear, 3 trilinear;
    // 0 counts as 3): the outer d / h dims an op lacks (size 1) carry no
    // linear tap of weight 0, whose 0 * inf would turn a 1-d op's -inf into
    // NaN where ATen's 1-d kernel has no such tap.
    int spatial_dims;
} trn_upsample_desc;

trn_status trn_upsample_launch(trn_stream *stream, const trn_upsample_desc *desc);
trn_status trn_upsample_backward_launch(trn_stream *stream, const trn_upsample_desc *desc);

// Whether the dtype is supported for the mode and direction; never sets an
// error.
int trn_upsample_supports(trn_dtype dtype, trn_upsample_mode mode, int backward);

#ifdef __cplusplus
}
#endif
#endif
