// elementwise.c - owns the elementwise kernel: descriptor validation, the op
// table (which compute families each op has), and the task that runs it.
//
// The task walks the coalesced n-d index space in blocks of BLOCK elements:
// each input block is loaded into a contiguous buffer of the compute type
// (float, double or int64; scalars are pre-filled once), the op's block
// function maps the buffers (a tight loop over a trn/scalar.h function the
// compiler vectorizes), and the result is stored to the output dtype and
// stride. Operands already contiguous in the compute type are used in place,
// so float32 / float64 / int64 contiguous data is never copied. Only
// loaders and storers know dtypes and strides; only block functions know
// ops - which keeps the code size at ops x families, not ops x dtypes x
// layouts.
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../kit/launch.h"
#include "../kit/bf16_store.h"
#include "../kit/dims.h"
#include "ew_bf16.h"
#include "ew_gelu.h"
#include "trn/convert.h"
#include "trn/parallel.h"
#include "trn/scalar.h"

#define BLOCK 512
// Elements per block-function call when no operand is staged (ew_range).
#define UNSTAGED_CHUNK 16384
// Elements per parallel piece: below ~64K elements a second thread costs
// more than it saves.
#define PARALLEL_GRAIN 32768

// FAM_S16: bfloat16 bits moved as they are (neg's sign flip), never staged.
typedef enum family { FAM_F, FAM_D, FAM_I, FAM_S16 } family;

// dtype classes an op accepts
#define M_F (1u << 0)  // float16, bfloat16, float32, float64
#define M_I (1u << 1)  // uint8, int8, int16, int32, int64
#define M_B (1u << 2)  // bool
#define M_ALL (M_F | M_I | M_B)

typedef void (*block_fn)(int n, void *o, const void *a, const void *b, const void *c,
                         const trn_sc_ctx *ctx);

// ---- block functions ------------------------------------------------------------
// The loop body is instantiated twice: once with round16 known to be 0 (the
// float32 path, where the 16-bit rounding steps fold away) and once general.
#define UNSWITCH16(cp, LOOP)                                                                       \
    if ((cp)->round16 == 0) {                                                                      \
        trn_sc_ctx ctx = *(cp);                                                                    \
        ctx.round16 = 0;                                                                           \
        LOOP                                                                                       \
    } else {                                                                                       \
        const trn_sc_ctx ctx = *(cp);                                                              \
        LOOP                                                                                       \
    }
// add / sub round alpha * b to the storage type (trn_sc_r16): with round16
// a constant in each copy of the loop, only that type's rounding is left in
// it and the loop vectorizes (the general copy computes both and selects).
#define UNSWITCH16_3(cp, LOOP)                                                                     \
    if ((cp)->round16 == 2) {                                                                      \
        trn_sc_ctx ctx = *(cp);                                                                    \
        ctx.round16 = 2;                                                                           \
        LOOP                                                                                       \
    } else if ((cp)->round16 == 1) {                                                               \
        trn_sc_ctx ctx = *(cp);                                                                    \
        ctx.round16 = 1;                                                                           \
        LOOP                                                                                       \
    } else {                                                                                       \
        trn_sc_ctx ctx = *(cp);                                                                    \
        ctx.round16 = 0;                                                                           \
        LOOP                                                                                       \
    }
// One per (op, family): o[i] = op(a[i], b[i], c[i]). The context is copied
// to a local so stores through o cannot alias its parameters.

#define BLK1(FN, SUF, T)                                                                           \
    static void blk_##FN##_##SUF(int n, void *o_, const void *a_, const void *b_, const void *c_,  \
                                 const trn_sc_ctx *cp) {                                           \
        (void)b_;                                                                                  \
        (void)c_;                                                                                  \
        T *o = o_;                                                                                 \
        const T *a = a_;                                                                           \
        UNSWITCH16(cp, for (int i = 0; i < n; i++) o[i] = trn_sc_##FN##_##SUF(a[i], &ctx);)        \
    }
#define BLK2(FN, SUF, T)                                                                           \
    static void blk_##FN##_##SUF(int n, void *o_, const void *a_, const void *b_, const void *c_,  \
                                 const trn_sc_ctx *cp) {                                           \
        (void)c_;                                                                                  \
        T *o = o_;                                                                                 \
        const T *a = a_, *b = b_;                                                                  \
        UNSWITCH16(cp, for (int i = 0; i < n; i++) o[i] = trn_sc_##FN##_##SUF(a[i], b[i], &ctx);)  \
    }
#define BLK3(FN, SUF, T)                                                                           \
    static void blk_##FN##_##SUF(int n, void *o_, const void *a_, const void *b_, const void *c_,  \
                                 const trn_sc_ctx *cp) {                                           \
        T *o = o_;                                                                                 \
        const T *a = a_, *b = b_, *c = c_;                                                         \
        UNSWITCH16(cp, for (int i = 0; i < n; i++) o[i] =                                          \
                           trn_sc_##FN##_##SUF(a[i], b[i], c[i], &ctx);)                           \
    }
#define BLK2_16(FN)                                                                                \
    static void blk_##FN##_f(int n, void *o_, const void *a_, const void *b_, const void *c_,      \
                             const trn_sc_ctx *cp) {                                               \
        (void)c_;                                                                                  \
        float *o = o_;                                                                             \
        const float *a = a_, *b = b_;                                                              \
        UNSWITCH16_3(cp, for (int i = 0; i < n; i++) o[i] = trn_sc_##FN##_f(a[i], b[i], &ctx);)    \
    }
// Ops whose float math depends on which 16-bit type stores the result
// (GELU's bfloat16 form, scalar.h), or that round an intermediate to it
// (trn_sc_r16: pow's cube, logit, div's floor / trunc): one loop copy per
// storage type. The general copy computes both roundings and selects, and
// does not vectorize: bfloat16 pow(x, 3) ran at 4 ns an element, 13x CPU.
#define BLK1_16(FN)                                                                                \
    static void blk_##FN##_f(int n, void *o_, const void *a_, const void *b_, const void *c_,      \
                             const trn_sc_ctx *cp) {                                               \
        (void)b_;                                                                                  \
        (void)c_;                                                                                  \
        float *o = o_;                                                                             \
        const float *a = a_;                                                                       \
        UNSWITCH16_3(cp, for (int i = 0; i < n; i++) o[i] = trn_sc_##FN##_f(a[i], &ctx);)          \
    }
// GELU: trn_sc_gelu_f's float32 / float16 form or, for bfloat16 storage
// (round16 == 2), its bfloat16 form, through ew_gelu.c (each branch of the
// form's select computed only where taken; the same bits).
static void blk_gelu_f(int n, void *o_, const void *a_, const void *b_, const void *c_,
                       const trn_sc_ctx *cp) {
    (void)b_;
    (void)c_;
    float *o = o_;
    const float *a = a_;
    if (cp->round16 == 2)
        trn__ew_gelu_bf16_run(n, o, a);
    else
        trn__ew_gelu_f32_run(n, o, a);
}
// Predicates write bool bytes.
#define PRED1(FN, SUF, T)                                                                          \
    static void blk_##FN##_##SUF##p(int n, void *o_, const void *a_, const void *b_,               \
                                    const void *c_, const trn_sc_ctx *cp) {                        \
        (void)b_;                                                                                  \
        (void)c_;                                                                                  \
        (void)cp;                                                                                  \
        uint8_t *o = o_;                                                                           \
        const T *a = a_;                                                                           \
        for (int i = 0; i < n; i++) o[i] = (uint8_t)trn_sc_##FN##_##SUF##p(a[i]);                  \
    }
#define PRED2(FN, SUF, T)                                                                          \
    static void blk_##FN##_##SUF##p(int n, void *o_, const void *a_, const void *b_,               \
                                    const void *c_, const trn_sc_ctx *cp) {                        \
        (void)c_;                                                                                  \
        (void)cp;                                                                                  \
        uint8_t *o = o_;                                                                           \
        const T *a = a_, *b = b_;                                                                  \
        for (int i = 0; i < n; i++) o[i] = (uint8_t)trn_sc_##FN##_##SUF##p(a[i], b[i]);            \
    }

// float32 o[i] = op(a[i], b) for b broadcast along the row (one value, read
// once): a row of RMSNorm's x * rsqrt(mean) without spreading b first.
#define BLK2_BS(FN)                                                                                \
    static void blk_##FN##_fbs(int n, void *o_, const void *a_, const void *b_, const void *c_,    \
                               const trn_sc_ctx *cp) {                                             \
        (void)c_;                                                                                  \
        float *o = o_;                                                                             \
        const float *a = a_;                                                                       \
        const float b = *(const float *)b_;                                                        \
        UNSWITCH16(cp, for (int i = 0; i < n; i++) o[i] = trn_sc_##FN##_f(a[i], b, &ctx);)         \
    }

// Ops with float and double versions; "I" adds the integer version.
#define FD1(FN) BLK1(FN, f, float) BLK1(FN, dd, double)
#define FDI1(FN) FD1(FN) BLK1(FN, i, int64_t)
#define FD2(FN) BLK2(FN, f, float) BLK2(FN, dd, double)
#define FDI2(FN) FD2(FN) BLK2(FN, i, int64_t)
#define FD3(FN) BLK3(FN, f, float) BLK3(FN, dd, double)
#define FDI3(FN) FD3(FN) BLK3(FN, i, int64_t)
#define P1(FN) PRED1(FN, f, float) PRED1(FN, d, double) PRED1(FN, i, int64_t)
#define P2(FN) PRED2(FN, f, float) PRED2(FN, d, double) PRED2(FN, i, int64_t)

// clang-format off
FDI1(abs) FDI1(neg) FDI1(sign) FDI1(relu) FDI1(floor) FDI1(ceil) FDI1(round)
FDI1(trunc) FD1(frac) FD1(sqrt) FD1(rsqrt) FD1(reciprocal)
BLK1(bitwise_not, i, int64_t)
P1(logical_not) P1(isnan) P1(isinf) P1(isfinite) P1(isposinf) P1(isneginf)
FD1(nan_to_num) FDI1(hardtanh) FD1(hardsigmoid) FD1(hardswish) FD1(leaky_relu)
FD1(exp) FD1(exp2) FD1(expm1) FD1(log) FD1(log2) FD1(log10) FD1(log1p)
FD1(sin) FD1(cos) FD1(tan) FD1(asin) FD1(acos) FD1(atan) FD1(sinh) FD1(cosh)
FD1(tanh) FD1(sigmoid) BLK1_16(logit) BLK1(logit, dd, double) FD1(erf) FD1(erfc) FD1(erfinv) BLK1(gelu, dd, double)
FD1(gelu_tanh) FD1(silu) FD1(mish) FD1(softplus) FD1(elu) FD1(round_decimals)
BLK2_16(add) BLK2(add, dd, double) BLK2(add, i, int64_t)
BLK2_16(sub) BLK2(sub, dd, double) BLK2(sub, i, int64_t) FDI2(mul) FD2(div)
BLK2_16(div_trunc) BLK2(div_trunc, dd, double) BLK2(div_trunc, i, int64_t)
BLK2_16(div_floor) BLK2(div_floor, dd, double) BLK2(div_floor, i, int64_t)
FDI2(remainder) FDI2(fmod) FDI2(maximum) FDI2(minimum) FDI2(fmax) FDI2(fmin)
FD2(copysign) P2(eq) P2(ne) P2(lt) P2(le) P2(gt) P2(ge) P2(logical_and)
P2(logical_or) P2(logical_xor)
BLK2(bitwise_and, i, int64_t) BLK2(bitwise_or, i, int64_t)
BLK2(bitwise_xor, i, int64_t) BLK2(lshift, i, int64_t) BLK2(rshift, i, int64_t)
FDI2(pow) FD2(atan2) FD2(hypot)
FD1(pow_square) FD1(pow_one) FD1(pow_zero)
BLK1_16(pow_cube) BLK1(pow_cube, dd, double) BLK1_16(pow_inv_square) BLK1(pow_inv_square, dd, double)
FD2(threshold_backward) FD2(sigmoid_backward) FD2(tanh_backward) FD2(hardtanh_backward)
FD2(leaky_relu_backward) FD2(hardsigmoid_backward) FD2(hardswish_backward)
BLK2_16(gelu_backward) BLK2(gelu_backward, dd, double)
FD2(gelu_tanh_backward) FD2(silu_backward) FD2(elu_backward) FD2(softplus_backward)
FD2(mish_backward)
FDI3(where) FDI3(clamp) FD3(lerp) FDI3(addcmul) FD3(addcdiv)
BLK2_BS(add) BLK2_BS(sub) BLK2_BS(mul) BLK2_BS(div)
    // clang-format on

    // ---- op table ---------------------------------------------------------------------
    typedef struct op_info {
    const char *name;
    int arity;
    bool pred;        // writes bool
    unsigned dtypes;  // M_* classes
    block_fn fam[3];  // by family; NULL where the op has none
} op_info;

#define ENTRY_FD(OP, FN, AR, M)                                                                    \
    [TRN_EW_##OP] = {#OP, AR, false, M, {blk_##FN##_f, blk_##FN##_dd, NULL}}
#define ENTRY_FDI(OP, FN, AR, M)                                                                   \
    [TRN_EW_##OP] = {#OP, AR, false, M, {blk_##FN##_f, blk_##FN##_dd, blk_##FN##_i}}
#define ENTRY_I(OP, FN, AR, M) [TRN_EW_##OP] = {#OP, AR, false, M, {NULL, NULL, blk_##FN##_i}}
#define ENTRY_P(OP, FN, AR, M)                                                                     \
    [TRN_EW_##OP] = {#OP, AR, true, M, {blk_##FN##_fp, blk_##FN##_dp, blk_##FN##_ip}}

static const op_info ops[TRN_EW_OP_COUNT] = {
    ENTRY_FDI(ABS, abs, 1, M_ALL),
    ENTRY_FDI(NEG, neg, 1, M_F | M_I),
    ENTRY_FDI(SIGN, sign, 1, M_ALL),
    ENTRY_FDI(RELU, relu, 1, M_F | M_I),
    ENTRY_FDI(FLOOR, floor, 1, M_F | M_I),
    ENTRY_FDI(CEIL, ceil, 1, M_F | M_I),
    ENTRY_FDI(ROUND, round, 1, M_F | M_I),
    ENTRY_FDI(TRUNC, trunc, 1, M_F | M_I),
    ENTRY_FD(FRAC, frac, 1, M_F),
    ENTRY_FD(SQRT, sqrt, 1, M_F),
    ENTRY_FD(RSQRT, rsqrt, 1, M_F),
    ENTRY_FD(RECIPROCAL, reciprocal, 1, M_F),
    ENTRY_I(BITWISE_NOT, bitwise_not, 1, M_I | M_B),
    ENTRY_P(LOGICAL_NOT, logical_not, 1, M_ALL),
    ENTRY_P(ISNAN, isnan, 1, M_ALL),
    ENTRY_P(ISINF, isinf, 1, M_ALL),
    ENTRY_P(ISPOSINF, isposinf, 1, M_ALL),
    ENTRY_P(ISNEGINF, isneginf, 1, M_ALL),
    ENTRY_P(ISFINITE, isfinite, 1, M_ALL),
    ENTRY_FD(NAN_TO_NUM, nan_to_num, 1, M_F),
    ENTRY_FDI(HARDTANH, hardtanh, 1, M_F | M_I),
    ENTRY_FD(HARDSIGMOID, hardsigmoid, 1, M_F),
    ENTRY_FD(HARDSWISH, hardswish, 1, M_F),
    ENTRY_FD(LEAKY_RELU, leaky_relu, 1, M_F),
    ENTRY_FD(EXP, exp, 1, M_F),
    ENTRY_FD(EXP2, exp2, 1, M_F),
    ENTRY_FD(EXPM1, expm1, 1, M_F),
    ENTRY_FD(LOG, log, 1, M_F),
    ENTRY_FD(LOG2, log2, 1, M_F),
    ENTRY_FD(LOG10, log10, 1, M_F),
    ENTRY_FD(LOG1P, log1p, 1, M_F),
    ENTRY_FD(SIN, sin, 1, M_F),
    ENTRY_FD(COS, cos, 1, M_F),
    ENTRY_FD(TAN, tan, 1, M_F),
    ENTRY_FD(ASIN, asin, 1, M_F),
    ENTRY_FD(ACOS, acos, 1, M_F),
    ENTRY_FD(ATAN, atan, 1, M_F),
    ENTRY_FD(SINH, sinh, 1, M_F),
    ENTRY_FD(COSH, cosh, 1, M_F),
    ENTRY_FD(TANH, tanh, 1, M_F),
    ENTRY_FD(SIGMOID, sigmoid, 1, M_F),
    ENTRY_FD(LOGIT, logit, 1, M_F),
    ENTRY_FD(ERF, erf, 1, M_F),
    ENTRY_FD(ERFC, erfc, 1, M_F),
    ENTRY_FD(ERFINV, erfinv, 1, M_F),
    ENTRY_FD(GELU, gelu, 1, M_F),
    ENTRY_FD(GELU_TANH, gelu_tanh, 1, M_F),
    ENTRY_FD(SILU, silu, 1, M_F),
    ENTRY_FD(MISH, mish, 1, M_F),
    ENTRY_FD(SOFTPLUS, softplus, 1, M_F),
    ENTRY_FD(ELU, elu, 1, M_F),
    ENTRY_FD(ROUND_DECIMALS, round_decimals, 1, M_F),
    ENTRY_FDI(ADD, add, 2, M_ALL),
    ENTRY_FDI(SUB, sub, 2, M_F | M_I),
    ENTRY_FDI(MUL, mul, 2, M_ALL),
    ENTRY_FD(DIV, div, 2, M_F),
    ENTRY_FDI(DIV_TRUNC, div_trunc, 2, M_F | M_I),
    ENTRY_FDI(DIV_FLOOR, div_floor, 2, M_F | M_I),
    ENTRY_FDI(REMAINDER, remainder, 2, M_F | M_I),
    ENTRY_FDI(FMOD, fmod, 2, M_F | M_I),
    ENTRY_FDI(MAXIMUM, maximum, 2, M_ALL),
    ENTRY_FDI(MINIMUM, minimum, 2, M_ALL),
    ENTRY_FDI(FMAX, fmax, 2, M_ALL),
    ENTRY_FDI(FMIN, fmin, 2, M_ALL),
    ENTRY_FD(COPYSIGN, copysign, 2, M_F),
    ENTRY_P(EQ, eq, 2, M_ALL),
    ENTRY_P(NE, ne, 2, M_ALL),
    ENTRY_P(LT, lt, 2, M_ALL),
    ENTRY_P(LE, le, 2, M_ALL),
    ENTRY_P(GT, gt, 2, M_ALL),
    ENTRY_P(GE, ge, 2, M_ALL),
    ENTRY_P(LOGICAL_AND, logical_and, 2, M_ALL),
    ENTRY_P(LOGICAL_OR, logical_or, 2, M_ALL),
    ENTRY_P(LOGICAL_XOR, logical_xor, 2, M_ALL),
    ENTRY_I(BITWISE_AND, bitwise_and, 2, M_I | M_B),
    ENTRY_I(BITWISE_OR, bitwise_or, 2, M_I | M_B),
    ENTRY_I(BITWISE_XOR, bitwise_xor, 2, M_I | M_B),
    ENTRY_I(LSHIFT, lshift, 2, M_I),
    ENTRY_I(RSHIFT, rshift, 2, M_I),
    ENTRY_FDI(POW, pow, 2, M_F | M_I),
    ENTRY_FD(ATAN2, atan2, 2, M_F),
    ENTRY_FD(HYPOT, hypot, 2, M_F),
    ENTRY_FD(THRESHOLD_BACKWARD, threshold_backward, 2, M_F),
    ENTRY_FD(SIGMOID_BACKWARD, sigmoid_backward, 2, M_F),
    ENTRY_FD(TANH_BACKWARD, tanh_backward, 2, M_F),
    ENTRY_FD(HARDTANH_BACKWARD, hardtanh_backward, 2, M_F),
    ENTRY_FD(LEAKY_RELU_BACKWARD, leaky_relu_backward, 2, M_F),
    ENTRY_FD(HARDSIGMOID_BACKWARD, hardsigmoid_backward, 2, M_F),
    ENTRY_FD(HARDSWISH_BACKWARD, hardswish_backward, 2, M_F),
    ENTRY_FD(GELU_BACKWARD, gelu_backward, 2, M_F),
    ENTRY_FD(GELU_TANH_BACKWARD, gelu_tanh_backward, 2, M_F),
    ENTRY_FD(SILU_BACKWARD, silu_backward, 2, M_F),
    ENTRY_FD(ELU_BACKWARD, elu_backward, 2, M_F),
    ENTRY_FD(SOFTPLUS_BACKWARD, softplus_backward, 2, M_F),
    ENTRY_FD(MISH_BACKWARD, mish_backward, 2, M_F),
    ENTRY_FDI(WHERE, where, 3, M_ALL),
    ENTRY_FDI(CLAMP, clamp, 3, M_ALL),
    ENTRY_FD(LERP, lerp, 3, M_F),
    ENTRY_FDI(ADDCMUL, addcmul, 3, M_F | M_I),
    ENTRY_FD(ADDCDIV, addcdiv, 3, M_F),
};

int trn_ew_op_arity(trn_ew_op op) { return (unsigned)op < TRN_EW_OP_COUNT ? ops[op].arity : 0; }
const char *trn_ew_op_name(trn_ew_op op) {
    return (unsigned)op < TRN_EW_OP_COUNT ? ops[op].name : "invalid";
}
int trn_ew_op_is_predicate(trn_ew_op op) { return (unsigned)op < TRN_EW_OP_COUNT && ops[op].pred; }

static unsigned dtype_class(trn_dtype d) {
    switch (d) {
    case TRN_DTYPE_F16:
    case TRN_DTYPE_BF16:
    case TRN_DTYPE_F32:
    case TRN_DTYPE_F64: return M_F;
    case TRN_DTYPE_U8:
    case TRN_DTYPE_I8:
    case TRN_DTYPE_I16:
    case TRN_DTYPE_I32:
    case TRN_DTYPE_I64: return M_I;
    case TRN_DTYPE_BOOL: return M_B;
    default: return 0;
    }
}

int trn_ew_supports(trn_ew_op op, trn_dtype dtype) {
    if ((unsigned)op >= TRN_EW_OP_COUNT || (unsigned)dtype >= TRN_DTYPE_COUNT) return 0;
    return (ops[op].dtypes & dtype_class(dtype)) != 0;
}

int trn_ew_supports_operand(trn_ew_op op, trn_dtype dtype, trn_dtype operand, int is_output) {
    if (!trn_ew_supports(op, dtype) || (unsigned)operand >= TRN_DTYPE_COUNT) return 0;
    const unsigned oc = dtype_class(operand);
    if (oc == 0) return 0;
    // Integer compute never reads floating inputs (promotion forbids it), and
    // floating results are only stored to floating outputs.
    if (dtype_class(dtype) != M_F) return is_output || oc != M_F || ops[op].pred ? 1 : 0;
    return !is_output || ops[op].pred || oc == M_F;
}

static pthread_once_t f64_once = PTHREAD_ONCE_INIT;
static int f64_native;
static void f64_read(void) {
    const char *v = getenv("TORCH_NEURONX_NATIVE_FLOAT64");
    f64_native = v != NULL && strcmp(v, "1") == 0;
}
int trn_float64_native(void) {
    pthread_once(&f64_once, f64_read);
    return f64_native;
}

static family family_of(trn_dtype d) {
    if (d == TRN_DTYPE_F64) return trn_float64_native() ? FAM_D : FAM_F;
    return dtype_class(d) == M_F ? FAM_F : FAM_I;
}

static size_t compute_size(family f) { return f == FAM_F ? 4 : (f == FAM_S16 ? 2 : 8); }

// The dtype whose memory layout is the compute type itself.
static trn_dtype native_of(family f) {
    return f == FAM_F     ? TRN_DTYPE_F32
           : f == FAM_D   ? TRN_DTYPE_F64
           : f == FAM_S16 ? TRN_DTYPE_BF16
                          : TRN_DTYPE_I64;
}

// neg of bfloat16 as its sign bit flipped, as CPU's Vectorized<BFloat16>::neg,
// plus the quiet bit on a NaN: then it is bit for bit the float path's
// bf16 -> float -> negate -> trn_float_to_bf16 (a widened bfloat16 has no
// low bits for the rounding to carry; the conversion quiets a signalling
// NaN), which fused groups compute, so they stay bit-identical. Rows of a
// RoPE half ([.., 32] of [.., 64]) staged through float ran 4.7x CPU's time.
static void blk_neg_bits16(int n, void *o_, const void *a_, const void *b_, const void *c_,
                           const trn_sc_ctx *cp) {
    (void)b_;
    (void)c_;
    (void)cp;
    uint16_t *o = o_;
    const uint16_t *a = a_;
    for (int i = 0; i < n; i++) {
        const uint16_t v = a[i];
        o[i] = (uint16_t)((v ^ 0x8000u) | ((v & 0x7FFFu) > 0x7F80u ? 0x0040u : 0u));
    }
}

// ---- loaders and storers ---------------------------------------------------------
#define LOAD_CASES(CT)                                                                             \
    case TRN_DTYPE_BOOL:                                                                           \
    case TRN_DTYPE_U8:                                                                             \
        for (int i = 0; i < n; i++) o[i] = (CT)(uint8_t)src[i * s];                                \
        break;                                                                                     \
    case TRN_DTYPE_I8:                                                                             \
        for (int i = 0; i < n; i++) o[i] = (CT)(int8_t)src[i * s];                                 \
        break;                                                                                     \
    case TRN_DTYPE_I16:                                                                            \
        for (int i = 0; i < n; i++) o[i] = (CT)load_i16(src + i * s);                              \
        break;                                                                                     \
    case TRN_DTYPE_I32:                                                                            \
        for (int i = 0; i < n; i++) o[i] = (CT)load_i32(src + i * s);                              \
        break;                                                                                     \
    case TRN_DTYPE_I64:                                                                            \
        for (int i = 0; i < n; i++) o[i] = (CT)load_i64(src + i * s);                              \
        break;                                                                                     \
    case TRN_DTYPE_F16:                                                                            \
        if (s == 2)                                                                                \
            for (int i = 0; i < n; i++) o[i] = (CT)trn_half_to_float(load_u16(src + i * 2));       \
        else                                                                                       \
            for (int i = 0; i < n; i++) o[i] = (CT)trn_half_to_float(load_u16(src + i * s));       \
        break;                                                                                     \
    case TRN_DTYPE_BF16:                                                                           \
        if (s == 2)                                                                                \
            for (int i = 0; i < n; i++) o[i] = (CT)trn_bf16_to_float(load_u16(src + i * 2));       \
        else                                                                                       \
            for (int i = 0; i < n; i++) o[i] = (CT)trn_bf16_to_float(load_u16(src + i * s));       \
        break;                                                                                     \
    case TRN_DTYPE_F32:                                                                            \
        if (s == 4)                                                                                \
            for (int i = 0; i < n; i++) o[i] = (CT)load_f32(src + i * 4);                          \
        else                                                                                       \
            for (int i = 0; i < n; i++) o[i] = (CT)load_f32(src + i * s);                          \
        break;                                                                                     \
    case TRN_DTYPE_F64:                                                                            \
        if (s == 8)                                                                                \
            for (int i = 0; i < n; i++) o[i] = (CT)load_f64(src + i * 8);                          \
        else                                                                                       \
            for (int i = 0; i < n; i++) o[i] = (CT)load_f64(src + i * s);                          \
        break;                                                                                     \
    default: break;

static inline uint16_t load_u16(const char *p) {
    uint16_t v;
    memcpy(&v, p, 2);
    return v;
}
static inline int16_t load_i16(const char *p) {
    int16_t v;
    memcpy(&v, p, 2);
    return v;
}
static inline int32_t load_i32(const char *p) {
    int32_t v;
    memcpy(&v, p, 4);
    return v;
}
static inline int64_t load_i64(const char *p) {
    int64_t v;
    memcpy(&v, p, 8);
    return v;
}
static inline float load_f32(const char *p) {
    float v;
    memcpy(&v, p, 4);
    return v;
}
static inline double load_f64(const char *p) {
    double v;
    memcpy(&v, p, 8);
    return v;
}

static void load_f(trn_dtype d, const char *src, int64_t s, int n, float *o) {
    switch (d) { LOAD_CASES(float) }
}
static void load_d(trn_dtype d, const char *src, int64_t s, int n, double *o) {
    switch (d) { LOAD_CASES(double) }
}
static void load_i(trn_dtype d, const char *src, int64_t s, int n, int64_t *o) {
    // Float sources never reach the integer family (validated at launch).
    switch (d) {
    case TRN_DTYPE_BOOL:
    case TRN_DTYPE_U8:
        for (int i = 0; i < n; i++) o[i] = (uint8_t)src[i * s];
        break;
    case TRN_DTYPE_I8:
        for (int i = 0; i < n; i++) o[i] = (int8_t)src[i * s];
        break;
    case TRN_DTYPE_I16:
        for (int i = 0; i < n; i++) o[i] = load_i16(src + i * s);
        break;
    case TRN_DTYPE_I32:
        for (int i = 0; i < n; i++) o[i] = load_i32(src + i * s);
        break;
    case TRN_DTYPE_I64:
        for (int i = 0; i < n; i++) o[i] = load_i64(src + i * s);
        break;
    default: break;
    }
}

static void load_block(family f, trn_dtype d, const char *src, int64_t s, int n, void *o) {
    if (s == 0 && n > 1) {
        // A broadcast operand (stride 0 along the row, e.g. RMSNorm's
        // x * rsqrt(mean) with [.., 1]): one value converted, then filled.
        // The strided loop gathered the same element n times (4x slower
        // than CPU's mul on rows of 256).
        load_block(f, d, src, 0, 1, o);
        if (f == FAM_F) {
            float *v = o;
            const float x = v[0];
            for (int i = 1; i < n; i++) v[i] = x;
        } else if (f == FAM_D) {
            double *v = o;
            const double x = v[0];
            for (int i = 1; i < n; i++) v[i] = x;
        } else {
            int64_t *v = o;
            const int64_t x = v[0];
            for (int i = 1; i < n; i++) v[i] = x;
        }
        return;
    }
    if (f == FAM_F)
        load_f(d, src, s, n, o);
    else if (f == FAM_D)
        load_d(d, src, s, n, o);
    else
        load_i(d, src, s, n, o);
}

// Stores convert the compute type to the output dtype. Floating results go
// only to floating dtypes; integer and predicate results to any dtype.
#define STORE_FLOAT_CASES(T)                                                                       \
    case TRN_DTYPE_F32:                                                                            \
        if (s == 4)                                                                                \
            for (int i = 0; i < n; i++) {                                                          \
                float x = (float)v[i];                                                             \
                memcpy(dst + i * 4, &x, 4);                                                        \
            }                                                                                      \
        else                                                                                       \
            for (int i = 0; i < n; i++) {                                                          \
                float x = (float)v[i];                                                             \
                memcpy(dst + i * s, &x, 4);                                                        \
            }                                                                                      \
        break;                                                                                     \
    case TRN_DTYPE_F64:                                                                            \
        if (s == 8)                                                                                \
            for (int i = 0; i < n; i++) {                                                          \
                double x = (double)v[i];                                                           \
                memcpy(dst + i * 8, &x, 8);                                                        \
            }                                                                                      \
        else                                                                                       \
            for (int i = 0; i < n; i++) {                                                          \
                double x = (double)v[i];                                                           \
                memcpy(dst + i * s, &x, 8);                                                        \
            }                                                                                      \
        break;                                                                                     \
    case TRN_DTYPE_F16:                                                                            \
        if (s == 2)                                                                                \
            for (int i = 0; i < n; i++) {                                                          \
                uint16_t x = trn_float_to_half((float)v[i]);                                       \
                memcpy(dst + i * 2, &x, 2);                                                        \
            }                                                                                      \
        else                                                                                       \
            for (int i = 0; i < n; i++) {                                                          \
                uint16_t x = trn_float_to_half((float)v[i]);                                       \
                memcpy(dst + i * s, &x, 2);                                                        \
            }                                                                                      \
        break;                                                                                     \
    case TRN_DTYPE_BF16:                                                                           \
        if (s == 2)                                                                                \
            for (int i = 0; i < n; i++) {                                                          \
                uint16_t x = trn_float_to_bf16((float)v[i]);                                       \
                memcpy(dst + i * 2, &x, 2);                                                        \
            }                                                                                      \
        else                                                                                       \
            for (int i = 0; i < n; i++) {                                                          \
                uint16_t x = trn_float_to_bf16((float)v[i]);                                       \
                memcpy(dst + i * s, &x, 2);                                                        \
            }                                                                                      \
        break;
#define STORE_INT_CASES(T)                                                                         \
    case TRN_DTYPE_BOOL:                                                                           \
        for (int i = 0; i < n; i++) dst[i * s] = (char)(v[i] != 0);                                \
        break;                                                                                     \
    case TRN_DTYPE_U8:                                                                             \
    case TRN_DTYPE_I8:                                                                             \
        for (int i = 0; i < n; i++) dst[i * s] = (char)(uint8_t)(uint64_t)v[i];                    \
        break;                                                                                     \
    case TRN_DTYPE_I16:                                                                            \
        for (int i = 0; i < n; i++) {                                                              \
            uint16_t x = (uint16_t)(uint64_t)v[i];                                                 \
            memcpy(dst + i * s, &x, 2);                                                            \
        }                                                                                          \
        break;                                                                                     \
    case TRN_DTYPE_I32:                                                                            \
        for (int i = 0; i < n; i++) {                                                              \
            uint32_t x = (uint32_t)(uint64_t)v[i];                                                 \
            memcpy(dst + i * s, &x, 4);                                                            \
        }                                                                                          \
        break;                                                                                     \
    case TRN_DTYPE_I64:                                                                            \
        for (int i = 0; i < n; i++) {                                                              \
            int64_t x = (int64_t)v[i];                                                             \
            memcpy(dst + i * s, &x, 8);                                                            \
        }                                                                                          \
        break;

static void store_f(trn_dtype d, const float *v, char *dst, int64_t s, int n) {
    if (d == TRN_DTYPE_BF16 && s == 2) {  // every contiguous bfloat16 result
        trn__bf16_store_run(dst, (const char *)v, n);
        return;
    }
    switch (d) { STORE_FLOAT_CASES(float) default : break; }
}
static void store_d(trn_dtype d, const double *v, char *dst, int64_t s, int n) {
    switch (d) { STORE_FLOAT_CASES(double) default : break; }
}
static void store_i(trn_dtype d, const int64_t *v, char *dst, int64_t s, int n) {
    switch (d) { STORE_INT_CASES(int64_t) STORE_FLOAT_CASES(int64_t) default : break; }
}
static void store_pred(trn_dtype d, const uint8_t *v, char *dst, int64_t s, int n) {
    switch (d) { STORE_INT_CASES(uint8_t) STORE_FLOAT_CASES(uint8_t) default : break; }
}

// ---- task ---------------------------------------------------------------------------

typedef struct ew_args {
    trn_ew_op op;
    trn_dtype dtype, out_dtype;
    family fam;
    int arity;
    int ndim;  // >= 1
    trn_sc_ctx ctx;
    block_fn fn;  // the op's block function (or a constant-exponent pow's)
    char *out;
    const char *in[3];
    bool is_scalar[3];
    trn_dtype in_dtype[3];
    // How a tensor input of another dtype is cast once loaded (in_cast_block).
    unsigned char in_cast[3];
    // How the result is cast to the compute dtype before it is stored to an
    // output of another dtype (out_cast_block): an integer op computed in a
    // narrower dtype than int64 (bool, int8..int32) into, say, an int64 or
    // float16 `out=`. ATen's TensorIterator computes in the common dtype and
    // casts on store, so bool + bool into int64 is 1 (logical or), not 2.
    unsigned char out_cast;
    union {
        float f;
        double d;
        int64_t i;
    } sval[3];  // scalar in compute type
    // Byte ranges touched, relative to the pointers (protect mode).
    int64_t lo[4], span[4];
    // 16-bit ADD / SUB rounding as ATen's CPU kernel (trn_ew_desc.cpu_block).
    bool add16, cpu_vec;
    int cpu_threads;
    int64_t cpu_block, numel;
    int64_t dims[5 * TRN_MAX_DIMS];  // sizes, out strides, 3 x in strides
} ew_args;

_Static_assert(sizeof(ew_args) <= TRN_TASK_MAX_ARGS, "elementwise args too large");

typedef struct ew_run {
    const ew_args *a;
    bool zero_division;  // integer division by zero seen by some piece
} ew_run;

static bool int_division(trn_ew_op op) {
    return op == TRN_EW_DIV_TRUNC || op == TRN_EW_DIV_FLOOR || op == TRN_EW_REMAINDER ||
           op == TRN_EW_FMOD;
}

// ATen's CPU loop over the op's n elements (same order and coalescing as
// here: both walk TensorIterator's shape): split over threads in equal
// chunks once n reaches its grain, each chunk walked in runs of the
// innermost dim (`row` elements, cut at chunk ends); a run executes
// cpu_block elements per vector step and leaves len % cpu_block to its
// scalar loop. Returns where the scalar part of the run holding element j
// starts; *run_end gets the run's end.
#define ATEN_GRAIN 32768
static int64_t cpu_tail_start(const ew_args *a, int64_t row, int64_t j, int64_t *run_end) {
    int64_t cb = 0, ce = a->numel;
    if (a->numel >= ATEN_GRAIN && a->cpu_threads > 1) {
        int64_t nt = (a->numel + ATEN_GRAIN - 1) / ATEN_GRAIN;
        if (nt > a->cpu_threads) nt = a->cpu_threads;
        const int64_t cs = (a->numel + nt - 1) / nt;
        cb = j / cs * cs;
        ce = cb + cs < a->numel ? cb + cs : a->numel;
    }
    const int64_t rs = j - j % row;
    const int64_t start = rs > cb ? rs : cb;
    const int64_t end = rs + row < ce ? rs + row : ce;
    *run_end = end;
    if (!a->cpu_vec) return start;
    const int64_t len = end - start;
    return end - (a->cpu_block > 0 ? len % a->cpu_block : 0);
}

// The block function computed every element as CPU's scalar tail does
// (a + r16(alpha * b)); elements CPU runs in its vector body are
// recomputed fused, one tight loop per stretch of them. j0: linear index of
// the block's first element.
static void add16_body(const ew_args *a, float *o, const float *x, const float *y, int n,
                       int64_t j0) {
    const int64_t row = a->dims[a->ndim - 1];
    const float alpha = (float)(a->op == TRN_EW_SUB ? -a->ctx.p[0] : a->ctx.p[0]);
    const bool bf16 = a->ctx.round16 == 2;
    int i = 0;
    while (i < n) {
        int64_t run_end;
        const int64_t tail = cpu_tail_start(a, row, j0 + i, &run_end);
        const int fused_end = tail - j0 < n ? (int)(tail - j0) : n;
        if (bf16) {
            for (int k = i; k < fused_end; k++)
                o[k] = trn_bf16_to_float(trn_float_to_bf16(fmaf(alpha, y[k], x[k])));
        } else {
            for (int k = i; k < fused_end; k++)
                o[k] = trn_half_to_float(trn_float_to_half(fmaf(alpha, y[k], x[k])));
        }
        i = run_end - j0 < n ? (int)(run_end - j0) : n;
    }
}

// in_cast values: a loaded input block rounded to float16 / bfloat16, or
// wrapped to the integer compute dtype (bits, signedness in ctx).
enum { CAST_NONE, CAST_F16, CAST_BF16, CAST_WRAP };

static void in_cast_block(int mode, const trn_sc_ctx *ctx, int n, void *buf) {
    if (mode == CAST_F16 || mode == CAST_BF16) {
        float *f = buf;
        if (mode == CAST_F16)
            for (int i = 0; i < n; i++) f[i] = trn_half_to_float(trn_float_to_half(f[i]));
        else
            for (int i = 0; i < n; i++) f[i] = trn_bf16_to_float(trn_float_to_bf16(f[i]));
    } else if (mode == CAST_WRAP && ctx->bits < 64) {
        int64_t *v = buf;
        const uint64_t mask = (UINT64_C(1) << ctx->bits) - 1;
        const uint64_t top = UINT64_C(1) << (ctx->bits - 1);
        for (int i = 0; i < n; i++) {
            uint64_t u = (uint64_t)v[i] & mask;
            if (ctx->is_signed && (u & top)) u |= ~mask;
            v[i] = trn_sc_wrap_u64(u);
        }
    }
}

// A result block wrapped to the integer compute dtype (OUT_WRAP) or made
// 0 / 1 for a bool compute dtype (OUT_BOOL); see ew_args.out_cast.
enum { OUT_NONE, OUT_WRAP, OUT_BOOL };

static void out_cast_block(int mode, const trn_sc_ctx *ctx, int n, int64_t *v) {
    if (mode == OUT_BOOL)
        for (int i = 0; i < n; i++) v[i] = v[i] != 0;
    else if (mode == OUT_WRAP)
        in_cast_block(CAST_WRAP, ctx, n, v);
}

// Runs `rows` rows of n elements (rows * n <= BLOCK); pointers and byte
// strides given: is / os along a row, irs / ors from row to row (read only
// when rows > 1: such rows are staged one after another in the buffers,
// so the block function and the fix-ups run once for all of them). j0:
// linear index of the first element (the rows are consecutive in it).
static bool run_block(const ew_args *a, block_fn fn, char *out, int64_t os, const char *const in[3],
                      const int64_t is[3], int n, int64_t j0, void *scal[3], void *tmp[4], int rows,
                      const int64_t irs[3], int64_t ors) {
    const size_t cs = compute_size(a->fam);
    const trn_dtype nat = native_of(a->fam);
    const void *buf[3] = {NULL, NULL, NULL};
    for (int k = 0; k < a->arity; k++) {
        if (a->is_scalar[k]) {
            buf[k] = scal[k];
        } else if (rows == 1 && a->in_dtype[k] == nat && is[k] == (int64_t)cs && !a->in_cast[k]) {
            buf[k] = in[k];
        } else {
            for (int r = 0; r < rows; r++)
                load_block(a->fam, a->in_dtype[k], in[k] + r * irs[k], is[k], n,
                           (char *)tmp[k] + (size_t)r * (size_t)n * cs);
            if (a->in_cast[k]) in_cast_block(a->in_cast[k], &a->ctx, n * rows, tmp[k]);
            buf[k] = tmp[k];
        }
    }
    n *= rows;
    if (a->fam == FAM_I && int_division(a->op)) {
        const int64_t *b = buf[1];
        int zero = 0;
        for (int i = 0; i < n; i++) zero |= b[i] == 0;
        if (zero) return false;
    }
    const bool direct = rows == 1 && a->out_dtype == (ops[a->op].pred ? TRN_DTYPE_BOOL : nat) &&
                        os == (int64_t)(ops[a->op].pred ? 1 : cs) && !a->out_cast;
    void *obuf = direct ? (void *)out : tmp[3];
    fn(n, obuf, buf[0], buf[1], buf[2], &a->ctx);
    if (a->out_cast) out_cast_block(a->out_cast, &a->ctx, n, obuf);
    if (a->add16) add16_body(a, obuf, buf[0], buf[1], n, j0);
    // Beyond 2^19 pi/2 the inline three-part reduction is no longer exact.
    if (a->fam == FAM_F && (a->op == TRN_EW_SIN || a->op == TRN_EW_COS || a->op == TRN_EW_TAN)) {
        const float *x = buf[0];
        float *o = obuf;
        for (int i = 0; i < n; i++) {
            if (fabsf(x[i]) > 8e5f && fabsf(x[i]) < INFINITY) {
                double v = x[i];
                o[i] = (float)(a->op == TRN_EW_SIN   ? sin(v)
                               : a->op == TRN_EW_COS ? cos(v)
                                                     : tan(v));
            }
        }
    }
    if (!direct) {
        const int rn = n / rows;
        const size_t vs = ops[a->op].pred ? 1 : cs;
        for (int r = 0; r < rows; r++) {
            const void *v = (const char *)obuf + (size_t)r * (size_t)rn * vs;
            char *o = out + r * ors;
            if (ops[a->op].pred)
                store_pred(a->out_dtype, v, o, os, rn);
            else if (a->fam == FAM_F)
                store_f(a->out_dtype, v, o, os, rn);
            else if (a->fam == FAM_D)
                store_d(a->out_dtype, v, o, os, rn);
            else
                store_i(a->out_dtype, v, o, os, rn);
        }
    }
    return true;
}

// The float32 block function taking input 1 as one value, if op has one.
static block_fn bcast_b_fn(trn_ew_op op) {
    switch (op) {
    case TRN_EW_ADD: return blk_add_fbs;
    case TRN_EW_SUB: return blk_sub_fbs;
    case TRN_EW_MUL: return blk_mul_fbs;
    case TRN_EW_DIV: return blk_div_fbs;
    default: return NULL;
    }
}

// buf[0 .. n) = the compute-type value at src (a row-broadcast operand).
static const void *spread(family f, const char *src, int n, void *buf) {
    if (f == FAM_F) {
        float *v = buf;
        const float x = load_f32(src);
        for (int i = 0; i < n; i++) v[i] = x;
    } else if (f == FAM_D) {
        double *v = buf;
        const double x = load_f64(src);
        for (int i = 0; i < n; i++) v[i] = x;
    } else {
        int64_t *v = buf;
        const int64_t x = load_i64(src);
        for (int i = 0; i < n; i++) v[i] = x;
    }
    return buf;
}

// g rows of n elements of size es from src (rows srs bytes apart; 0: one
// row repeated) to dst (rows drs bytes apart). Typed loops: a memcpy call
// per 128-byte row cost as much as the block-function call that packing
// saves.
static void copy_rows(char *dst, int64_t drs, const char *src, int64_t srs, int g, int n,
                      size_t es) {
    for (int r = 0; r < g; r++) {
        char *d = dst + r * drs;
        const char *s = src + r * srs;
        if (es == 4) {
            float *restrict dv = (float *)d;
            const float *restrict sv = (const float *)s;
            for (int i = 0; i < n; i++) dv[i] = sv[i];
        } else if (es == 8) {
            double *restrict dv = (double *)d;
            const double *restrict sv = (const double *)s;
            for (int i = 0; i < n; i++) dv[i] = sv[i];
        } else {
            memcpy(d, s, (size_t)n * es);
        }
    }
}

// Runs the linear range [begin, end) of the coalesced index space.
static void ew_range(void *vrun, int64_t begin, int64_t end) {
    ew_run *run = vrun;
    const ew_args *a = run->a;
    const int nd = a->ndim;
    const int64_t *size = a->dims;
    const int64_t *ostr = a->dims + nd;
    const int64_t *istr[3] = {a->dims + 2 * nd, a->dims + 3 * nd, a->dims + 4 * nd};
    const int inner = nd - 1;
    const int64_t row = size[inner];
    block_fn fn = a->fn;
    // When every operand is a tensor already contiguous in the compute type
    // (float32 / int64 / native float64 data, and the output too), nothing
    // is staged: the block function runs over whole stretches of a row at
    // once instead of BLOCK elements (per-block bookkeeping cost float32
    // mul 20% at L2-resident sizes).
    const size_t cs = compute_size(a->fam);
    const trn_dtype nat = native_of(a->fam);
    bool unstaged = a->out_dtype == (ops[a->op].pred ? TRN_DTYPE_BOOL : nat) &&
                    ostr[inner] == (int64_t)(ops[a->op].pred ? 1 : cs) && !a->out_cast;
    // Tensor operands broadcast along the row (inner stride 0: RMSNorm's
    // x * rsqrt(mean) with [.., 1]) are otherwise unstaged too: per row,
    // their one value is spread over a buffer and the block function runs
    // on the row directly. Staged through run_block, a [8, 64, 256] *
    // [8, 64, 1] mul took 1.8x CPU's time (per-row bookkeeping).
    bool row_bcast = false;
    bool bcast[3] = {false, false, false};
    for (int k = 0; k < a->arity; k++) {
        const bool base = !a->is_scalar[k] && a->in_dtype[k] == nat && !a->in_cast[k];
        bcast[k] = base && istr[k][inner] == 0 && row > 1 && a->fam != FAM_S16;
        row_bcast = row_bcast || bcast[k];
        unstaged = unstaged && base && (istr[k][inner] == (int64_t)cs || bcast[k]);
    }
    // Broadcast rows are spread into BLOCK-element buffers, so the row
    // path takes them only when a row fits one (else they are staged).
    if (row_bcast && row > BLOCK) unstaged = false;
    const int64_t chunk = unstaged && !row_bcast ? UNSTAGED_CHUNK : BLOCK;
    // A float32 binary op whose input 1 alone is broadcast along the row
    // reads that one value in its block function (no spread buffer).
    const block_fn bfn = unstaged && a->fam == FAM_F && a->arity == 2 && bcast[1] && !bcast[0] &&
                                 fn == ops[a->op].fam[FAM_F]
                             ? bcast_b_fn(a->op)
                             : NULL;

    // Buffers: 3 inputs + output of BLOCK compute elements, scalars pre-filled.
    _Alignas(64) char tmpmem[4][BLOCK * 8];
    _Alignas(64) char scalmem[3][BLOCK * 8];
    void *tmp[4] = {tmpmem[0], tmpmem[1], tmpmem[2], tmpmem[3]};
    void *scal[3] = {scalmem[0], scalmem[1], scalmem[2]};
    const int fill = end - begin < BLOCK ? (int)(end - begin) : BLOCK;
    for (int k = 0; k < a->arity; k++) {
        if (!a->is_scalar[k]) continue;
        for (int i = 0; i < fill; i++) {
            if (a->fam == FAM_F)
                ((float *)scal[k])[i] = a->sval[k].f;
            else if (a->fam == FAM_D)
                ((double *)scal[k])[i] = a->sval[k].d;
            else
                ((int64_t *)scal[k])[i] = a->sval[k].i;
        }
    }
    // Multi-index of `begin` over the outer dims.
    int64_t index[TRN_MAX_DIMS];
    int64_t rem = begin / row, col = begin % row;
    for (int d = inner - 1; d >= 0; d--) {
        index[d] = rem % size[d];
        rem /= size[d];
    }
    // Whole rows that fit one block-function call run back to back along
    // the next dim out (short rows: a RoPE half of 32, a [.., 1] broadcast
    // row of 256); rows with nothing to fix up after the block function
    // (add16, integer division checks, large-argument sin/cos/tan) call it
    // directly. Per row, the offset walk and run_block's checks cost more
    // than the row itself: negating a [8, 4, 64, 32] slice took 4.6x CPU.
    const bool direct_rows =
        unstaged && !a->add16 && !(a->fam == FAM_I && int_division(a->op)) &&
        !(a->fam == FAM_F && (a->op == TRN_EW_SIN || a->op == TRN_EW_COS || a->op == TRN_EW_TAN));
    int64_t pos = begin;
    while (pos < end) {
        int64_t off_o = 0, off_i[3] = {0, 0, 0};
        for (int d = 0; d < inner; d++) {
            off_o += index[d] * ostr[d];
            for (int k = 0; k < 3; k++) off_i[k] += index[d] * istr[k][d];
        }
        if (inner >= 1 && col == 0 && row <= chunk && end - pos >= 2 * row) {
            const int d1 = inner - 1;
            int64_t cnt = size[d1] - index[d1];
            if (cnt > (end - pos) / row) cnt = (end - pos) / row;
            const int n = (int)row;
            const int64_t irs[3] = {istr[0][d1], istr[1][d1], istr[2][d1]};
            const int64_t is[3] = {istr[0][inner], istr[1][inner], istr[2][inner]};
            // Staged rows of up to a quarter block go BLOCK / row at a time
            // (longer rows gain less than the copy of in-place operands costs).
            // So do unstaged float32 / float64 rows of up to a quarter block
            // (`packed`): strided operands copied back to back, one
            // block-function call for the group. Called per row, the call
            // cost as much as the row: negating Llama's RoPE half ([8, 4, 64,
            // 32] of a transposed [.., 64]) ran at 0.4-0.5x CPU.
            const size_t oes = ops[a->op].pred ? 1 : cs;
            const bool packed = direct_rows && bfn == NULL && !row_bcast && 4 * row <= BLOCK &&
                                (a->fam == FAM_F || a->fam == FAM_D);
            const int64_t group =
                packed ? BLOCK / row : (direct_rows || 4 * row > BLOCK ? 1 : BLOCK / row);
            for (int64_t r = 0; r < cnt; r += group) {
                const int g = (int)(cnt - r < group ? cnt - r : group);
                const char *in[3];
                for (int k = 0; k < 3; k++)
                    in[k] = a->in[k] == NULL ? NULL : a->in[k] + off_i[k] + r * irs[k];
                char *o = a->out + off_o + r * ostr[d1];
                if (packed) {
                    const void *op[3] = {in[0], in[1], in[2]};
                    for (int k = 0; k < a->arity; k++) {
                        if (g == 1 || irs[k] == (int64_t)(row * (int64_t)cs)) continue;
                        copy_rows(tmp[k], (int64_t)(row * (int64_t)cs), in[k], irs[k], g, n, cs);
                        op[k] = tmp[k];
                    }
                    const bool out_rows = ostr[d1] == (int64_t)(row * (int64_t)oes) || g == 1;
                    fn(n * g, out_rows ? (void *)o : tmp[3], op[0], op[1], op[2], &a->ctx);
                    if (!out_rows)
                        copy_rows(o, ostr[d1], tmp[3], (int64_t)(row * (int64_t)oes), g, n, oes);
                } else if (direct_rows && bfn != NULL) {
                    bfn(n, o, in[0], in[1], NULL, &a->ctx);
                } else if (direct_rows) {
                    const void *op[3] = {in[0], in[1], in[2]};
                    for (int k = 0; k < a->arity; k++)
                        if (bcast[k]) op[k] = spread(a->fam, in[k], n, tmp[k]);
                    fn(n, o, op[0], op[1], op[2], &a->ctx);
                } else if (!run_block(a, fn, o, ostr[inner], in, is, n, pos + r * row, scal, tmp, g,
                                      irs, ostr[d1])) {
                    run->zero_division = true;
                    return;
                }
            }
            pos += cnt * row;
            index[d1] += cnt - 1;  // the last row's step is the carry below
            for (int d = d1; d >= 0; d--) {
                if (++index[d] < size[d]) break;
                index[d] = 0;
            }
            continue;
        }
        const int64_t stop = col + (end - pos < row - col ? end - pos : row - col);
        for (int64_t c = col; c < stop; c += chunk) {
            const int n = (int)(stop - c < chunk ? stop - c : chunk);
            const char *in[3];
            int64_t is[3];
            for (int k = 0; k < 3; k++) {
                in[k] = a->in[k] == NULL ? NULL : a->in[k] + off_i[k] + c * istr[k][inner];
                is[k] = istr[k][inner];
            }
            if (!run_block(a, fn, a->out + off_o + c * ostr[inner], ostr[inner], in, is, n,
                           pos + (c - col), scal, tmp, 1, is, 0)) {
                run->zero_division = true;
                return;
            }
        }
        pos += stop - col;
        col = 0;
        for (int d = inner - 1; d >= 0; d--) {
            if (++index[d] < size[d]) break;
            index[d] = 0;
        }
    }
}

static trn_status ew_exec(const void *args) {
    ew_args *a = (ew_args *)args;
    int64_t numel = 1;
    for (int d = 0; d < a->ndim; d++) numel *= a->dims[d];
    ew_run run = {a, false};
    trn_parallel_for(numel, PARALLEL_GRAIN, ew_range, &run);
    return run.zero_division ? trn__set_error(TRN_ERROR_INVALID_ARGUMENT, "ZeroDivisionError")
                             : TRN_SUCCESS;
}

static trn_status ew_task(void *args) {
    const ew_args *a = args;
    return trn__access_run(ew_exec, a, 4, (const void *[]){a->out, a->in[0], a->in[1], a->in[2]},
                           a->lo, a->span);
}

// ---- launch ---------------------------------------------------------------------------

// pow(tensor, constant) for the exponents ATen's CPU kernel special-cases
// (x**2 in RMSNorm, x**3 in GELU-new): a unary block function on input 0,
// ~20x faster than the general exp(e log|x|) path and bit-identical to CPU.
static void pow_fast_path(ew_args *a) {
    if (a->op != TRN_EW_POW || a->fam == FAM_I || a->is_scalar[0] || !a->is_scalar[1]) return;
    const double e = a->fam == FAM_F ? (double)a->sval[1].f : a->sval[1].d;
    static const block_fn fns[TRN_SC_POW_SPECIAL_COUNT][2] = {
        [TRN_SC_POW_ONE] = {blk_pow_one_f, blk_pow_one_dd},
        [TRN_SC_POW_ZERO] = {blk_pow_zero_f, blk_pow_zero_dd},
        [TRN_SC_POW_SQUARE] = {blk_pow_square_f, blk_pow_square_dd},
        [TRN_SC_POW_CUBE] = {blk_pow_cube_f, blk_pow_cube_dd},
        [TRN_SC_POW_SQRT] = {blk_sqrt_f, blk_sqrt_dd},
        [TRN_SC_POW_RSQRT] = {blk_rsqrt_f, blk_rsqrt_dd},
        [TRN_SC_POW_RECIPROCAL] = {blk_reciprocal_f, blk_reciprocal_dd},
        [TRN_SC_POW_INV_SQUARE] = {blk_pow_inv_square_f, blk_pow_inv_square_dd},
    };
    const trn_sc_pow_special c = trn_sc_pow_special_of(e, a->ctx.round16 == 1);
    if (c == TRN_SC_POW_GENERAL) return;
    a->fn = fns[c][a->fam == FAM_F ? 0 : 1];
    a->arity = 1;  // the exponent is baked into fn
}

static trn_status invalid(const char *what) {
    return trn__set_error(TRN_ERROR_INVALID_ARGUMENT, "trn_ew_launch: %s", what);
}

trn_status trn_ew_launch(trn_stream *stream, const trn_ew_desc *desc) {
    if (stream == NULL || desc == NULL) return invalid("stream or descriptor is NULL");
    if ((unsigned)desc->op >= TRN_EW_OP_COUNT) return invalid("invalid op");
    if ((unsigned)desc->dtype >= TRN_DTYPE_COUNT || (unsigned)desc->out_dtype >= TRN_DTYPE_COUNT)
        return invalid("invalid dtype");
    trn_ew_op op = desc->op;
    // ~ on bool is logical not (PyTorch's bitwise_not of bool).
    if (op == TRN_EW_BITWISE_NOT && desc->dtype == TRN_DTYPE_BOOL) op = TRN_EW_LOGICAL_NOT;
    const op_info *info = &ops[op];
    if (!trn_ew_supports(op, desc->dtype))
        return trn__set_error(TRN_ERROR_UNSUPPORTED,
                              "elementwise %s does not support dtype %s on neuron", info->name,
                              trn_dtype_name(desc->dtype));
    if (!trn_ew_supports_operand(op, desc->dtype, desc->out_dtype, 1))
        return trn__set_error(TRN_ERROR_UNSUPPORTED,
                              "elementwise %s computed in %s cannot write a %s output", info->name,
                              trn_dtype_name(desc->dtype), trn_dtype_name(desc->out_dtype));
    const int nd = desc->ndim;
    if (nd < 0 || nd > TRN_MAX_DIMS) return invalid("ndim out of range");
    if (nd > 0 && (desc->sizes == NULL || desc->out_strides == NULL))
        return invalid("sizes or strides are NULL");
    int64_t numel = 1;
    for (int d = 0; d < nd; d++) {
        if (desc->sizes[d] < 0) return invalid("negative size");
        if (__builtin_mul_overflow(numel, desc->sizes[d], &numel))
            return invalid("element count overflows");
    }
    trn_status st = trn__fork_check();
    if (st != TRN_SUCCESS || numel == 0) return st;
    if (desc->out == NULL) return invalid("output pointer is NULL");

    // Only the fixed part is cleared: the ~2.5 KiB dims tail is written by
    // trn_kit_dims_pack and only that much of it is launched (`used`).
    ew_args a;
    memset(&a, 0, offsetof(ew_args, dims));
    a.op = op;
    a.dtype = desc->dtype;
    a.out_dtype = desc->out_dtype;
    a.fam = family_of(desc->dtype);
    a.arity = info->arity;
    a.out = desc->out;
    for (int k = 0; k < 4; k++) {
        a.ctx.p[k] = desc->params[k];
        const double v = desc->params[k];
        a.ctx.ip[k] = (v >= -0x1p63 && v < 0x1p63) ? (int64_t)v : 0;
    }
    a.ctx.bits = (int)trn_dtype_size(desc->dtype) * 8;
    a.ctx.is_signed = desc->dtype != TRN_DTYPE_U8 && desc->dtype != TRN_DTYPE_BOOL;
    a.ctx.round16 = desc->dtype == TRN_DTYPE_F16 ? 1 : (desc->dtype == TRN_DTYPE_BF16 ? 2 : 0);
    for (int k = 0; k < a.arity; k++) {
        // Scalars: WHERE's condition is bool, others are in the compute dtype.
        const trn_dtype kd = desc->in[k] != NULL              ? desc->in_dtype[k]
                             : (op == TRN_EW_WHERE && k == 0) ? TRN_DTYPE_BOOL
                                                              : desc->dtype;
        if (desc->in[k] != NULL && !(op == TRN_EW_WHERE && k == 0 && kd == TRN_DTYPE_BOOL) &&
            !trn_ew_supports_operand(op, desc->dtype, kd, 0))
            return trn__set_error(TRN_ERROR_UNSUPPORTED,
                                  "elementwise %s computed in %s cannot read a %s input",
                                  info->name, trn_dtype_name(desc->dtype), trn_dtype_name(kd));
        a.in_dtype[k] = kd;
        if (desc->in[k] == NULL) {
            a.is_scalar[k] = true;
            const bool int_valued = dtype_class(kd) != M_F;
            const double f = int_valued ? (double)desc->scalar_in[k].i : desc->scalar_in[k].f;
            if (a.fam == FAM_F)
                a.sval[k].f = (float)f;
            else if (a.fam == FAM_D)
                a.sval[k].d = f;
            else
                a.sval[k].i = int_valued ? desc->scalar_in[k].i
                                         : (f >= -0x1p63 && f < 0x1p63 ? (int64_t)f : 0);
        } else {
            if (nd > 0 && desc->in_strides[k] == NULL) return invalid("input strides are NULL");
            a.in[k] = desc->in[k];
        }
    }
    a.fn = ops[op].fam[a.fam];
    pow_fast_path(&a);
    // Coalesce: drop size-1 dims; merge a dim into its outer neighbour when
    // every operand is laid out contiguously across both. Track byte ranges.
    trn_kit_dims dims;
    trn_kit_dims_init(&dims, 4);
    int64_t hi[4] = {0, 0, 0, 0};
    const size_t osize = trn_dtype_size(a.out_dtype);
    for (int d = 0; d < nd; d++) {
        const int64_t sz = desc->sizes[d];
        if (sz == 1) continue;
        int64_t s[4];
        s[0] = desc->out_strides[d];
        for (int k = 0; k < 3; k++) s[k + 1] = a.in[k] != NULL ? desc->in_strides[k][d] : 0;
        if (s[0] == 0) return invalid("output stride is 0 on a dim of size > 1");
        for (int k = 0; k < 4; k++) {
            int64_t reach;
            if (__builtin_mul_overflow(s[k], sz - 1, &reach))
                return invalid("strides overflow the address space");
            if (reach < 0)
                a.lo[k] += reach;
            else
                hi[k] += reach;
        }
        trn_kit_dims_push(&dims, sz, s);
    }
    trn_kit_dims_finish(&dims, (const int64_t[]){0, 0, 0, 0});
    const int n = dims.n;
    a.span[0] = hi[0] - a.lo[0] + (int64_t)osize;
    for (int k = 0; k < 3; k++)
        a.span[k + 1] =
            a.in[k] != NULL ? hi[k + 1] - a.lo[k + 1] + (int64_t)trn_dtype_size(a.in_dtype[k]) : 0;
    a.ndim = n;
    // A tensor input of another dtype is read as ATen's CPU kernels read it:
    // cast to the compute dtype, as TensorIterator casts every input to the
    // common dtype (a float32 0-dim tensor in a float16 op is rounded to
    // float16; an int64 one in a uint8 op wraps). Except, as there, a
    // broadcast second operand of mul and the divisions in float16 /
    // bfloat16: ATen's CPU kernel reads it unrounded (original_scalar_value).
    // That kernel also computes the whole quotient in float32, rounded once
    // on store (no rounding of a / b before trunc / floor).
    bool opmath = false;
    if (a.fam == FAM_F && a.ctx.round16 && a.arity == 2 &&
        (op == TRN_EW_MUL || op == TRN_EW_DIV || op == TRN_EW_DIV_TRUNC ||
         op == TRN_EW_DIV_FLOOR)) {
        opmath = a.is_scalar[1];
        if (!opmath) {
            opmath = true;
            for (int d = 0; d < n; d++) opmath = opmath && dims.stride[2][d] == 0;
        }
    }
    for (int k = 0; k < a.arity; k++) {
        if (a.is_scalar[k] || a.in_dtype[k] == desc->dtype || (op == TRN_EW_WHERE && k == 0))
            continue;
        if (a.fam == FAM_F && a.ctx.round16) {
            if (!(opmath && k == 1)) a.in_cast[k] = a.ctx.round16 == 1 ? CAST_F16 : CAST_BF16;
        } else if (a.fam == FAM_I && dtype_class(desc->dtype) == M_I &&
                   dtype_class(a.in_dtype[k]) == M_I &&
                   trn_dtype_size(a.in_dtype[k]) >= trn_dtype_size(desc->dtype)) {
            a.in_cast[k] = CAST_WRAP;
        }
    }
    if (opmath) a.ctx.round16 = 0;
    if (a.fam == FAM_I && !info->pred && a.out_dtype != desc->dtype)
        a.out_cast = desc->dtype == TRN_DTYPE_BOOL ? OUT_BOOL
                     : a.ctx.bits < 64             ? OUT_WRAP
                                                   : OUT_NONE;
    if ((op == TRN_EW_ADD || op == TRN_EW_SUB) && a.fam == FAM_F && a.ctx.round16) {
        // ATen casts alpha to the 16-bit type, and so a scalar operand
        // (TensorIterator casts it to the common dtype). Its vector body needs
        // the innermost dim contiguous in every operand, or one input broadcast.
        a.add16 = true;
        a.ctx.p[0] = trn_sc_r16((float)a.ctx.p[0], &a.ctx);
        for (int k = 0; k < 2; k++)
            if (a.is_scalar[k]) a.sval[k].f = trn_sc_r16(a.sval[k].f, &a.ctx);
        a.cpu_block = desc->cpu_block;
        a.cpu_threads = desc->cpu_threads;
        a.numel = numel;
        const int in0 = n - 1;
        bool contiguous = dims.stride[0][in0] == (int64_t)osize || dims.size[in0] == 1;
        int broadcast = 0;
        for (int k = 0; k < 2; k++) {
            const int64_t s = a.in[k] != NULL ? dims.stride[k + 1][in0] : 0;
            if (s == 0)
                broadcast++;
            else
                contiguous = contiguous && s == (int64_t)trn_dtype_size(a.in_dtype[k]);
        }
        a.cpu_vec = contiguous && broadcast < 2;
        // With alpha +-1 (after its rounding) r16(alpha * b) is exact, so
        // both of CPU's paths compute the one rounding of a +- b.
        if (fabs(a.ctx.p[0]) == 1.0) {
            a.add16 = false;
            // ... and when every tensor operand is stored in the 16-bit type
            // (scalars are rounded above), +-b is already exact in it: the
            // float32 loop (one fma, no rounding step) gives the same bits.
            // bfloat16 add_ ran 25% slower than mul through the rounding.
            bool exact = true;
            for (int k = 0; k < 2; k++)
                exact = exact && (a.is_scalar[k] || a.in_dtype[k] == desc->dtype);
            if (exact) a.ctx.round16 = 0;
        }
    }
    if (op == TRN_EW_NEG && desc->dtype == TRN_DTYPE_BF16 && a.out_dtype == TRN_DTYPE_BF16 &&
        !a.is_scalar[0] && a.in_dtype[0] == TRN_DTYPE_BF16 && dims.stride[0][n - 1] == 2 &&
        dims.stride[1][n - 1] == 2) {
        // Rows contiguous in both: ew_range runs it unstaged (see FAM_S16).
        a.fam = FAM_S16;
        a.fn = blk_neg_bits16;
    }
    // bfloat16 relu / threshold_backward / add (ResNet's, ew_bf16.c): the
    // same bits on the 16-bit data when every operand is a bfloat16 tensor
    // with contiguous rows (add / sub only in their one-rounding form).
    if (a.fam == FAM_F && desc->dtype == TRN_DTYPE_BF16 && a.out_dtype == TRN_DTYPE_BF16 &&
        dims.stride[0][n - 1] == 2 && !a.add16 && !a.out_cast &&
        (a.ctx.round16 == 0 || (op != TRN_EW_ADD && op != TRN_EW_SUB))) {
        trn__ew_bf16_block f = trn__ew_bf16_block_of(op, a.ctx.p[0]);
        for (int k = 0; k < a.arity && f != NULL; k++)
            if (a.is_scalar[k] || a.in_dtype[k] != TRN_DTYPE_BF16 || a.in_cast[k] ||
                dims.stride[k + 1][n - 1] != 2)
                f = NULL;
        if (f != NULL) {
            a.fam = FAM_S16;
            a.fn = f;
        }
    }
    const int64_t *end = trn_kit_dims_pack(&dims, a.dims);
    const size_t used = (size_t)((const char *)end - (const char *)&a);
    return trn_stream_launch(stream, ew_task, &a, used);
}
