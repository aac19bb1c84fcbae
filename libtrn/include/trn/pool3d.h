// trn/pool3d.h - 3-d max pooling (with indices) and average pooling, fixed
// or adaptive windows, forward and backward. Adaptive 1-d / 2-d pooling is
// this kernel with depth (and height) 1; max_pool3d / avg_pool3d use it
// with fixed windows. (2-d fixed-window pooling has its own kernel,
// trn/pool.h.)
//
// Owned by libtrn/src/kernels/pool/pool3d.c; the C++ adapter is
// torch_neuronx/csrc/aten/pool3d.cpp, which checks arguments and computes
// output sizes with PyTorch's rules and hands over `planes` contiguous
// [in_d, in_h, in_w] volumes. Results follow PyTorch CPU:
// - fixed windows: dimension i's window starts at o * stride - pad and spans
//   kernel taps `dil` apart (dilation is max only); average divides by
//   `divisor` when nonzero, else by the window size counting padding
//   (count_include_pad) or not.
// - adaptive windows: [floor(o * in / out), ceil((o + 1) * in / out)); the
//   average divides by the window's size.
// Max pooling propagates NaN; its index is the flat position
// d * in_h * in_w + h * in_w + w in the volume.
// Dtypes: F16, BF16, F32, F64 (float accumulation, double for F64).
#ifndef TRN_POOL3D_H
#define TRN_POOL3D_H

#include <stdint.h>

#include "trn/dtype.h"
#include "trn/pool.h"
#include "trn/status.h"
#include "trn/stream.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct trn_pool3d_geometry {
    int64_t planes;
    int64_t in[3], out[3];             // depth, height, width
    int64_t k[3], s[3], p[3], dil[3];  // fixed windows only: kernel, stride, padding, dilation
    int adaptive;                      // 1: adaptive windows (k, s, p, dil unused)
    int count_include_pad;             // fixed average only
    int64_t divisor;                   // fixed average only; 0 = none (may be negative)
} trn_pool3d_geometry;

typedef struct trn_pool3d_desc {
    trn_dtype dtype;
    trn_pool_mode mode;
    trn_pool3d_geometry g;
    const void *x;     // [planes, in...]
    void *y;           // [planes, out...]
    int64_t *indices;  // max: [planes, out...]; average: unused
} trn_pool3d_desc;

trn_status trn_pool3d_launch(trn_stream *stream, const trn_pool3d_desc *desc);

typedef struct trn_pool3d_backward_desc {
    trn_dtype dtype;
    trn_pool_mode mode;
    trn_pool3d_geometry g;
    const void *dy;          // [planes, out...]
    const int64_t *indices;  // max only
    void *dx;                // [planes, in...], fully written
} trn_pool3d_backward_desc;

trn_status trn_pool3d_backward_launch(trn_stream *stream, const trn_pool3d_backward_desc *desc);

#ifdef __cplusplus
}
#endif
#endif
