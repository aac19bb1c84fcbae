// trn/foreach.h - one launch over a list of tensors: the elementwise
// _foreach_* ops, _foreach_norm, and the fused optimizer steps (Adam, AdamW,
// SGD) that PyTorch's optimizers run with foreach=True / fused=True.
//
// Owned by libtrn/src/kernels/train/foreach.c; the C++ adapter is
// torch_neuronx/csrc/aten/foreach.cpp, which takes the fast path only when
// every list position holds dense tensors of one floating dtype and equal
// sizes (else it runs PyTorch's per-tensor loop of native ops).
//
// The tensor array is copied at launch; the data pointers must stay valid
// until the task has run. Every tensor is contiguous. Work is split into
// chunks of at most 64 Ki elements across all tensors, so one big and many
// small tensors balance over the thread pool.
//
// Arithmetic: float32 for F32/F16/BF16 (16-bit values are rounded once on
// store), double for F64; scalars are rounded to the compute type first, as
// PyTorch's CPU kernels do.
#ifndef TRN_FOREACH_H
#define TRN_FOREACH_H

#include <stdint.h>

#include "trn/dtype.h"
#include "trn/status.h"
#include "trn/stream.h"

#ifdef __cplusplus
extern "C" {
#endif

// y is b[i] (list variants) or the scalar (scalar variants); z is c[i].
typedef enum trn_foreach_op {
    TRN_FOREACH_ADD = 0,    // a + alpha * y
    TRN_FOREACH_SUB,        // a - alpha * y
    TRN_FOREACH_MUL,        // a * y
    TRN_FOREACH_DIV,        // a / y
    TRN_FOREACH_MAXIMUM,    // NaN-propagating max(a, y)
    TRN_FOREACH_MINIMUM,    // NaN-propagating min(a, y)
    TRN_FOREACH_CLAMP_MIN,  // a is NaN ? a : max(a, y)
    TRN_FOREACH_CLAMP_MAX,  // a is NaN ? a : min(a, y)
    TRN_FOREACH_POW,        // a ** y
    TRN_FOREACH_RPOW,       // y ** a (scalar base)
    TRN_FOREACH_ADDCMUL,    // a + s * b * c
    TRN_FOREACH_ADDCDIV,    // a + s * (b / c)
    TRN_FOREACH_LERP,       // a + w * (b - a), w = c[i] (b_list and c) or s
    TRN_FOREACH_SQRT,
    TRN_FOREACH_NEG,
    TRN_FOREACH_ABS,
    TRN_FOREACH_EXP,
    TRN_FOREACH_RECIPROCAL,
    TRN_FOREACH_ZERO,  // out = 0
    TRN_FOREACH_NORM,  // out (one element) = ||a||_ord, ord 1, 2 or inf
    TRN_FOREACH_OP_COUNT
} trn_foreach_op;

typedef struct trn_foreach_tensor {
    void *out;              // n elements (NORM: one element)
    const void *a, *b, *c;  // n elements each, or NULL where the op has none
    int64_t n;
    double scalar;  // y / s / w of the scalar variants
} trn_foreach_tensor;

typedef struct trn_foreach_desc {
    trn_foreach_op op;
    trn_dtype dtype;  // of every tensor (F16, BF16, F32, F64)
    int64_t count;
    const trn_foreach_tensor *tensors;
    double alpha;  // ADD / SUB
    // When non-NULL, a one-element tensor whose value replaces every
    // tensor's scalar, read when the task runs (no host synchronization).
    const void *scalar_tensor;
    trn_dtype scalar_dtype;
    double ord;  // NORM: 1, 2 or INFINITY
    // ADD / SUB on F16 / BF16 round as ATen's CPU add does (alpha and a
    // scalar operand rounded to the 16-bit type; a + alpha * b rounded once in its
    // vectorized body, alpha * b rounded to 16 bits first in its scalar
    // tail). cpu_block: elements per step of that body (2 vectors), 0 for
    // "no tail"; cpu_threads: the CPU thread count splitting its range.
    int64_t cpu_block;
    int cpu_threads;
} trn_foreach_desc;

int trn_foreach_supports(trn_foreach_op op, trn_dtype dtype);
trn_status trn_foreach_launch(trn_stream *stream, const trn_foreach_desc *desc);

// ---- fused optimizers ------------------------------------------------------------
// Both skip the whole step when found_inf (a one-element float32 tensor) is
// nonzero, and divide the gradients by grad_scale (one-element float32)
// first, writing the unscaled gradients back, as PyTorch's fused kernels.
typedef struct trn_fused_adam_tensor {
    void *param, *grad, *exp_avg, *exp_avg_sq;
    void *max_exp_avg_sq;  // amsgrad only, else NULL
    const float *step;     // one element, already incremented for this step
    int64_t n;
} trn_fused_adam_tensor;

typedef struct trn_fused_adam_desc {
    trn_dtype dtype;  // param, grad and states
    int64_t count;
    const trn_fused_adam_tensor *tensors;
    double lr, beta1, beta2, weight_decay, eps;
    int amsgrad, maximize;
    int adamw;                            // decoupled weight decay
    const float *grad_scale, *found_inf;  // NULL: absent
} trn_fused_adam_desc;

typedef struct trn_fused_sgd_tensor {
    void *param, *grad;
    void *momentum_buffer;  // NULL when momentum == 0
    int64_t n;
} trn_fused_sgd_tensor;

typedef struct trn_fused_sgd_desc {
    trn_dtype dtype;
    int64_t count;
    const trn_fused_sgd_tensor *tensors;
    double weight_decay, momentum, lr, dampening;
    int nesterov, maximize, is_first_step;
    const float *grad_scale, *found_inf;
} trn_fused_sgd_desc;

trn_status trn_fused_adam_launch(trn_stream *stream, const trn_fused_adam_desc *desc);
trn_status trn_fused_sgd_launch(trn_stream *stream, const trn_fused_sgd_desc *desc);

#ifdef __cplusplus
}
#endif
#endif
