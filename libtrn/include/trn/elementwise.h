// trn/elementwise.h - elementwise kernels: unary, binary and ternary ops
// over strided n-d operands, launched on a stream.
//
// The caller (PyTorch's TensorIterator, in the C++ layer) has already decided
// shapes, broadcasting and type promotion: `dtype` is the compute dtype.
// Like CUDA kernels, this one casts on the fly: a tensor input may have any
// supported dtype (converted on load), and the output any dtype the result
// may be stored in (predicates - comparisons, logical ops - and integer
// results to any dtype; floating results to floating dtypes).
// Float16 and bfloat16 are computed in float32 and rounded once on store,
// like PyTorch CPU. Float64 is computed in float32 too (TorchNeuron's
// behaviour; the result keeps dtype float64) unless
// TORCH_NEURONX_NATIVE_FLOAT64=1 (trn_float64_native()). Each op's
// per-element math lives in trn/scalar.h.
//
// Large launches are split across the host's cores (trn/parallel.h).
//
// Strides are in BYTES (TensorIterator's convention); 0 broadcasts. An input
// whose pointer is NULL is a scalar: its value is taken from `scalar_in`
// (already in the compute dtype's domain: .f for floating dtypes, .i for
// integer and bool dtypes) and never read from memory - so a host scalar may
// be freed right after the launch.
#ifndef TRN_ELEMENTWISE_H
#define TRN_ELEMENTWISE_H

#include <stdint.h>

#include "trn/copy.h"
#include "trn/dtype.h"
#include "trn/status.h"
#include "trn/stream.h"

#ifdef __cplusplus
extern "C" {
#endif

// X(name, operand count). Parameters (p[] = desc->params) in the comment.
// clang-format off
#define TRN_EW_OP_LIST(X)                                                      \
    /* unary */                                                                \
    X(ABS, 1) X(NEG, 1) X(SIGN, 1) X(RELU, 1)                                  \
    X(FLOOR, 1) X(CEIL, 1) X(ROUND, 1) /* half to even */ X(TRUNC, 1)          \
    X(FRAC, 1) X(SQRT, 1) X(RSQRT, 1) X(RECIPROCAL, 1)                         \
    X(BITWISE_NOT, 1) X(LOGICAL_NOT, 1) /* -> bool */                          \
    X(ISNAN, 1) X(ISINF, 1) X(ISFINITE, 1) /* -> bool */                       \
    X(ISPOSINF, 1) X(ISNEGINF, 1) /* -> bool */                                \
    X(NAN_TO_NUM, 1)   /* p0 nan, p1 posinf, p2 neginf replacement */          \
    X(HARDTANH, 1)     /* p0 min, p1 max */                                    \
    X(HARDSIGMOID, 1) X(HARDSWISH, 1)                                          \
    X(LEAKY_RELU, 1)   /* p0 negative slope */                                 \
    X(EXP, 1) X(EXP2, 1) X(EXPM1, 1) X(LOG, 1) X(LOG2, 1) X(LOG10, 1)          \
    X(LOG1P, 1) X(SIN, 1) X(COS, 1) X(TAN, 1) X(ASIN, 1) X(ACOS, 1)            \
    X(ATAN, 1) X(SINH, 1) X(COSH, 1) X(TANH, 1) X(SIGMOID, 1)                  \
    X(LOGIT, 1)        /* p0 eps (< 0: none) */                                \
    X(ERF, 1) X(ERFC, 1) X(ERFINV, 1)                                          \
    X(GELU, 1) X(GELU_TANH, 1) X(SILU, 1) X(MISH, 1)                           \
    X(SOFTPLUS, 1)     /* p0 beta, p1 threshold */                             \
    X(ELU, 1)          /* p0 alpha, p1 scale, p2 input_scale */                \
    X(ROUND_DECIMALS, 1) /* p0 10^|decimals|, p1 1 if decimals < 0 */          \
    /* binary */                                                               \
    X(ADD, 2) X(SUB, 2) /* a +- p0 * b (p0 = alpha) */                         \
    X(MUL, 2) X(DIV, 2) X(DIV_TRUNC, 2) X(DIV_FLOOR, 2)                        \
    X(REMAINDER, 2) /* Python %: sign of b */ X(FMOD, 2) /* C: sign of a */    \
    X(MAXIMUM, 2) X(MINIMUM, 2) /* NaN propagates */                           \
    X(FMAX, 2) X(FMIN, 2) /* NaN ignored */ X(COPYSIGN, 2)                     \
    X(EQ, 2) X(NE, 2) X(LT, 2) X(LE, 2) X(GT, 2) X(GE, 2) /* -> bool */        \
    X(LOGICAL_AND, 2) X(LOGICAL_OR, 2) X(LOGICAL_XOR, 2) /* -> bool */         \
    X(BITWISE_AND, 2) X(BITWISE_OR, 2) X(BITWISE_XOR, 2)                       \
    X(LSHIFT, 2) X(RSHIFT, 2)                                                  \
    X(POW, 2) X(ATAN2, 2) X(HYPOT, 2)                                          \
    /* activation backward: (grad, x); sigmoid/tanh: (grad, forward output) */ \
    X(THRESHOLD_BACKWARD, 2) /* p0 threshold: x <= p0 ? 0 : grad */          \
    X(SIGMOID_BACKWARD, 2) X(TANH_BACKWARD, 2)                                 \
    X(HARDTANH_BACKWARD, 2)  /* p0 min, p1 max */                              \
    X(LEAKY_RELU_BACKWARD, 2) /* p0 negative slope */                          \
    X(HARDSIGMOID_BACKWARD, 2) X(HARDSWISH_BACKWARD, 2)                        \
    X(GELU_BACKWARD, 2) X(GELU_TANH_BACKWARD, 2) X(SILU_BACKWARD, 2)           \
    X(ELU_BACKWARD, 2)  /* p0 alpha, p1 scale, p2 input_scale, p3 x is result */ \
    X(SOFTPLUS_BACKWARD, 2) /* p0 beta, p1 threshold */                        \
    X(MISH_BACKWARD, 2)                                                        \
    /* ternary: inputs in order */                                             \
    X(WHERE, 3)    /* cond(bool), a, b */                                      \
    X(CLAMP, 3)    /* x, lo, hi; p0/p1 != 0: lo/hi present (else ignored) */   \
    X(LERP, 3)     /* start, end, weight */                                    \
    X(ADDCMUL, 3)  /* x + p0 * a * b */                                        \
    X(ADDCDIV, 3)  /* x + p0 * a / b */
// clang-format on

typedef enum trn_ew_op {
#define TRN__EW_ENUM(name, arity) TRN_EW_##name,
    TRN_EW_OP_LIST(TRN__EW_ENUM)
#undef TRN__EW_ENUM
        TRN_EW_OP_COUNT
} trn_ew_op;

// Number of inputs of the op (1, 2 or 3); 0 for an invalid value.
int trn_ew_op_arity(trn_ew_op op);
const char *trn_ew_op_name(trn_ew_op op);
// Whether the op writes TRN_DTYPE_BOOL whatever its input dtype.
int trn_ew_op_is_predicate(trn_ew_op op);

typedef union trn_scalar {
    double f;
    int64_t i;
} trn_scalar;

typedef struct trn_ew_desc {
    trn_ew_op op;
    trn_dtype dtype;       // compute dtype = dtype of tensor inputs
    int ndim;              // 0..TRN_MAX_DIMS
    const int64_t *sizes;  // ndim entries
    void *out;
    const int64_t *out_strides;    // bytes
    trn_dtype out_dtype;           // dtype, or BOOL for predicates
    const void *in[3];             // NULL: scalar operand, value in scalar_in
    trn_dtype in_dtype[3];         // dtype of each tensor input (any of the
                                   // dtypes trn_ew_supports_dtypes accepts);
                                   // converted to the compute dtype on load
    const int64_t *in_strides[3];  // bytes (ignored for scalar operands)
    trn_scalar scalar_in[3];
    double params[4];  // op parameters, see TRN_EW_OP_LIST
    // ADD / SUB computed in F16 / BF16 round as ATen's CPU add does: alpha
    // rounded to the 16-bit type; a + alpha * b rounded once in its
    // vectorized body, alpha * b rounded to 16 bits first in its scalar
    // tail - the last len % cpu_block elements of each inner-loop run (every
    // element when the innermost dim is not contiguous or one-operand
    // broadcast), runs split over cpu_threads as ATen's parallel_for splits
    // them. cpu_block: elements per step of that body (2 vectors), 0 for
    // "no tail" (fused everywhere); cpu_threads: CPU thread count.
    int64_t cpu_block;
    int cpu_threads;
} trn_ew_desc;

// Validates (op/dtype support: TRN_ERROR_UNSUPPORTED naming both), copies
// the descriptor and enqueues the kernel. Integer division or remainder by
// zero fails the task with TRN_ERROR_INVALID_ARGUMENT "ZeroDivisionError",
// reported at the next synchronize (deferred, as every kernel error).
trn_status trn_ew_launch(trn_stream *stream, const trn_ew_desc *desc);
// Whether trn_ew_launch accepts (op, compute dtype); never sets an error.
int trn_ew_supports(trn_ew_op op, trn_dtype dtype);
// Whether an operand of dtype `operand` (input or output) may go with compute
// dtype `dtype` for `op`; never sets an error.
int trn_ew_supports_operand(trn_ew_op op, trn_dtype dtype, trn_dtype operand, int is_output);
// Whether float64 is computed natively (TORCH_NEURONX_NATIVE_FLOAT64=1) or,
// by default, in float32.
int trn_float64_native(void);

#ifdef __cplusplus
}
#endif
#endif
