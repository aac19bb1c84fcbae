// trn/loss.h - negative log likelihood loss (forward and backward) and
// dropout with a counter-based random mask.
//
// Owned by the loss/training family (libtrn/src/kernels/nn/loss.c, random/dropout.c).
// The C++ layer (torch_neuronx/csrc/aten/train.cpp) checks shapes and
// arguments with PyTorch's rules and passes contiguous operands.
#ifndef TRN_LOSS_H
#define TRN_LOSS_H

#include <stdint.h>

#include "trn/dtype.h"
#include "trn/status.h"
#include "trn/stream.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum trn_reduction {
    TRN_REDUCTION_NONE = 0,  // PyTorch's at::Reduction values
    TRN_REDUCTION_MEAN = 1,
    TRN_REDUCTION_SUM = 2
} trn_reduction;

// input [batch, classes, inner] (inner = 1 for nll_loss, H*W... for
// nll_loss2d), target [batch, inner] of TRN_DTYPE_I64 or U8, weight
// [classes] or NULL. dtype (input, weight, output, total_weight): F16, BF16,
// F32, F64; sums accumulate in double. A target that is neither in
// [0, classes) nor ignore_index fails the task with TRN_ERROR_INVALID_ARGUMENT
// "Target %lld is out of bounds." (reported at the next synchronize).
typedef struct trn_nll_loss_desc {
    trn_dtype dtype, target_dtype;
    trn_reduction reduction;
    int64_t batch, classes, inner;
    int64_t ignore_index;
    const void *input, *target, *weight;
    // Forward: out is [batch, inner] (NONE) or one element; total_weight one
    // element (sum of the weights of counted targets; 0 for NONE).
    void *out, *total_weight;
} trn_nll_loss_desc;
trn_status trn_nll_loss_launch(trn_stream *stream, const trn_nll_loss_desc *desc);

// Backward: grad_input [batch, classes, inner] is written in full (zeros
// except at the targets): -weight[t] * g, g = grad_output[n, i] (NONE),
// grad_output / total_weight (MEAN) or grad_output (SUM).
typedef struct trn_nll_loss_backward_desc {
    trn_dtype dtype, target_dtype;
    trn_reduction reduction;
    int64_t batch, classes, inner;
    int64_t ignore_index;
    const void *grad_output;  // [batch, inner] (NONE) or one element
    const void *target, *weight, *total_weight;
    void *grad_input;
} trn_nll_loss_backward_desc;
trn_status trn_nll_loss_backward_launch(trn_stream *stream, const trn_nll_loss_backward_desc *desc);
int trn_nll_loss_supports(trn_dtype dtype, trn_dtype target_dtype);

// Dropout over n contiguous elements: keep[i] = u(seed, offset + i) < 1 - p
// with u uniform in [0, 1) from a counter-based hash (trn/random.h's), so a
// (seed, offset) gives the same mask whatever the thread split, and a shard
// at offset o + k gets elements k.. of the whole tensor's mask. out[i] = keep ? x * scale
// : 0 (rounded once), mask[i] = keep (bool bytes). out may be NULL (mask
// only, bernoulli) and x may be NULL then. dtype: F16, BF16, F32, F64.
typedef struct trn_dropout_desc {
    trn_dtype dtype;
    int64_t n;
    const void *x;
    void *out;
    uint8_t *mask;
    double p, scale;
    uint64_t seed;
    uint64_t offset;  // counter of element 0
} trn_dropout_desc;
trn_status trn_dropout_launch(trn_stream *stream, const trn_dropout_desc *desc);

#ifdef __cplusplus
}
#endif
#endif
