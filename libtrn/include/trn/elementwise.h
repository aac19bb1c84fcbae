// trn/elementwise.h - elementwise kernels: unary, binary and ternary ops
// over strided n-d operands, launched on a stream.
//
// The caller (PyTorch's TensorIterator, in the C++ layer) has already decided
// shapes, broadcasting and type promotion: every tensor input has the
// descriptor's `dtype`, the output has `dtype` or TRN_DTYPE_BOOL (predicates:
// comparisons, logical ops, isnan...), and WHERE's condition is BOOL.
// Float16 and bfloat16 are computed in float32 and rounded once on store,
// like PyTorch CPU. Each op's per-element math lives in trn/scalar.h.
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
#define TRN_EW_OP_LIST(X)                                                      \
    /* unary */                                                                \
    X(ABS, 1) X(NEG, 1) X(SIGN, 1) X(RELU, 1)                                  \
    X(FLOOR, 1) X(CEIL, 1) X(ROUND, 1) /* half to even */ X(TRUNC, 1)          \
    X(FRAC, 1) X(SQRT, 1) X(RSQRT, 1) X(RECIPROCAL, 1)                         \
    X(BITWISE_NOT, 1) X(LOGICAL_NOT, 1) /* -> bool */                          \
    X(ISNAN, 1) X(ISINF, 1) X(ISFINITE, 1) /* -> bool */                       \
    X(NAN_TO_NUM, 1)   /* p0 nan, p1 posinf, p2 neginf replacement */          \
    X(HARDTANH, 1)     /* p0 min, p1 max */                                    \
    X(HARDSIGMOID, 1) X(HARDSWISH, 1)                                          \
    X(LEAKY_RELU, 1)   /* p0 negative slope */                                 \
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
    /* ternary: inputs in order */                                             \
    X(WHERE, 3)    /* cond(bool), a, b */                                      \
    X(CLAMP, 3)    /* x, lo, hi; p0/p1 != 0: lo/hi present (else ignored) */   \
    X(LERP, 3)     /* start, end, weight */                                    \
    X(ADDCMUL, 3)  /* x + p0 * a * b */                                        \
    X(ADDCDIV, 3)  /* x + p0 * a / b */

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
    trn_dtype dtype;             // compute dtype = dtype of tensor inputs
    int ndim;                    // 0..TRN_MAX_DIMS
    const int64_t *sizes;        // ndim entries
    void *out;
    const int64_t *out_strides;  // bytes
    trn_dtype out_dtype;         // dtype, or BOOL for predicates
    const void *in[3];           // NULL: scalar operand, value in scalar_in
    const int64_t *in_strides[3];// bytes (ignored for scalar operands)
    trn_scalar scalar_in[3];
    double params[4];            // op parameters, see TRN_EW_OP_LIST
} trn_ew_desc;

// Validates (op/dtype support: TRN_ERROR_UNSUPPORTED naming both), copies
// the descriptor and enqueues the kernel. Integer division or remainder by
// zero fails the task with TRN_ERROR_INVALID_ARGUMENT "ZeroDivisionError",
// reported at the next synchronize (deferred, as every kernel error).
trn_status trn_ew_launch(trn_stream *stream, const trn_ew_desc *desc);
// Whether trn_ew_launch accepts (op, dtype); never sets an error.
int trn_ew_supports(trn_ew_op op, trn_dtype dtype);

#ifdef __cplusplus
}
#endif
#endif
