// trn/group_norm.h - group normalization forward and backward kernels.
//
// Owned by the group-norm family (libtrn/src/kernels/norm/group_norm.c). The C++
// layer (torch_neuronx/csrc/aten/group_norm.cpp) checks shapes with PyTorch's
// rules, makes operands contiguous and hands over [n, channels, spatial]
// views: channels split into `groups` groups of channels / groups channels,
// and every (batch item, group) is normalized over its
// (channels / groups) * spatial elements, then scaled and shifted per channel.
//
// Dtypes: x / y / dy / dx are F16, BF16, F32 or F64, all the same. weight /
// bias (and their grads) have `param_dtype`: x's dtype, or F32 with a 16-bit
// x (PyTorch's mixed-type group norm). mean / rstd ([n, groups]) have
// `stat_dtype`: x's dtype or F32. Arithmetic is float32 (statistics summed in
// double) for 16-bit and float32 data, double for float64; results are
// rounded once on store.
#ifndef TRN_GROUP_NORM_H
#define TRN_GROUP_NORM_H

#include <stdint.h>

#include "trn/dtype.h"
#include "trn/status.h"
#include "trn/stream.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct trn_group_norm_desc {
    trn_dtype dtype, param_dtype, stat_dtype;
    int64_t n, channels, spatial, groups;  // groups > 0 divides channels
    const void *x;                         // [n, channels, spatial]
    const void *weight, *bias;             // [channels] or NULL (1 / 0)
    void *y;                               // [n, channels, spatial]
    void *mean, *rstd;                     // [n, groups] each, or NULL
    double eps;
} trn_group_norm_desc;

// y = (x - mean) * rstd * weight[c] + bias[c], rstd = 1 / sqrt(var + eps)
// with the biased variance of the group. Empty groups (spatial == 0) get
// mean 0 and rstd NaN, as PyTorch CPU.
trn_status trn_group_norm_launch(trn_stream *stream, const trn_group_norm_desc *desc);

typedef struct trn_group_norm_backward_desc {
    trn_dtype dtype, param_dtype, stat_dtype;
    int64_t n, channels, spatial, groups;
    const void *dy, *x;       // [n, channels, spatial]
    const void *mean, *rstd;  // [n, groups]
    const void *weight;       // [channels] or NULL (1)
    void *dx;                 // [n, channels, spatial] or NULL
    void *dweight, *dbias;    // [channels] each, or NULL
} trn_group_norm_backward_desc;

// dx = rstd w dy + b x + c per group (b, c from the group sums of w dy x and
// w dy); dweight[c] = sum over n of (sum dy x - mean sum dy) rstd;
// dbias[c] = sum of dy.
trn_status trn_group_norm_backward_launch(trn_stream *stream,
                                          const trn_group_norm_backward_desc *desc);

// Whether the dtype combination is supported; never sets an error.
int trn_group_norm_supports(trn_dtype dtype, trn_dtype param_dtype, trn_dtype stat_dtype);

#ifdef __cplusplus
}
#endif
#endif
