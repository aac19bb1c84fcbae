// trn/batch_norm.h - batch normalization forward (training with running-stat
// update, or eval) and backward kernels.
//
// Owned by the batch-norm family (libtrn/src/kernels/norm/batch_norm.c). The C++
// layer (torch_neuronx/csrc/aten/batch_norm.cpp) checks shapes with
// PyTorch's rules, makes operands contiguous and hands over [batch, channels,
// spatial] views: every channel is normalized over batch * spatial elements.
//
// Dtypes: x / y / dy / dx are F16, BF16, F32 or F64, all the same. Every
// per-channel vector (weight, bias, running stats, saved stats and their
// grads) has `param_dtype`: x's dtype, or F32 with a 16-bit x (PyTorch's
// mixed-type batch norm). Per-channel sums are double. float32 and float64
// y / dx are formed in double and rounded once; 16-bit y / dx in float32
// (dx in double where a channel's dx cancels). Statistics come from one pass
// of raw sums (x, x^2) with a cancellation test, and a second pass about the
// mean where it fails (kernels/norm/batch_norm.c).
#ifndef TRN_BATCH_NORM_H
#define TRN_BATCH_NORM_H

#include <stdint.h>

#include "trn/dtype.h"
#include "trn/status.h"
#include "trn/stream.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct trn_batch_norm_desc {
    trn_dtype dtype, param_dtype;
    int64_t batch, channels, spatial;
    const void *x;                     // [batch, channels, spatial]
    const void *weight, *bias;         // [channels] or NULL (1 / 0)
    void *running_mean, *running_var;  // [channels] or NULL
    void *y;                           // [batch, channels, spatial]
    void *save_mean, *save_invstd;     // [channels] or NULL (training only)
    int training;
    double momentum, eps;
} trn_batch_norm_desc;

// training: normalizes with the batch statistics (biased variance), writes
// them to save_mean / save_invstd, and when running stats are given updates
// running = (1 - momentum) running + momentum stat, with the unbiased variance
// (sum of squares / (n - 1)). eval: normalizes with the running statistics
// (both required). batch * spatial == 0 in training leaves y empty and stores
// NaN statistics, as PyTorch does.
trn_status trn_batch_norm_launch(trn_stream *stream, const trn_batch_norm_desc *desc);

typedef struct trn_batch_norm_backward_desc {
    trn_dtype dtype, param_dtype;
    int64_t batch, channels, spatial;
    const void *dy, *x;         // [batch, channels, spatial]
    const void *weight;         // [channels] or NULL (1)
    const void *mean;           // [channels]: training: saved mean; eval: running mean
    const void *invstd_or_var;  // training: saved invstd; eval: running var
    int training;
    double eps;             // eval only: invstd = 1 / sqrt(var + eps)
    void *dx;               // [batch, channels, spatial] or NULL
    void *dweight, *dbias;  // [channels] each, or NULL
} trn_batch_norm_backward_desc;

// training: dx = w invstd (dy - mean(dy) - xhat mean(dy xhat)); eval:
// dx = w invstd dy. dweight = sum dy xhat, dbias = sum dy (per channel).
trn_status trn_batch_norm_backward_launch(trn_stream *stream,
                                          const trn_batch_norm_backward_desc *desc);

// Whether the dtype combination is supported; never sets an error.
int trn_batch_norm_supports(trn_dtype dtype, trn_dtype param_dtype);

#ifdef __cplusplus
}
#endif
#endif
