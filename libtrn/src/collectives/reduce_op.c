// reduce_op.c - the element-wise reductions of the collective engine: every
// ReduceOp for every device dtype, evaluated in rank order so that each rank
// computes bit-identical values, with the AVG / PREMUL_SUM post step.
// Signed integers wrap (computed unsigned, as torch does); float16 and
// bfloat16 accumulate in float32 and round once.
#include <string.h>

#include "comm_internal.h"
#include "trn/convert.h"

static bool is_float(trn_dtype t) {
    return t == TRN_DTYPE_F16 || t == TRN_DTYPE_BF16 || t == TRN_DTYPE_F32 || t == TRN_DTYPE_F64;
}
static bool is_complex(trn_dtype t) { return t == TRN_DTYPE_C64 || t == TRN_DTYPE_C128; }

static const char *redop_name(trn_redop op) {
    static const char *names[] = {"SUM", "PRODUCT", "MIN", "MAX", "BAND", "BOR", "BXOR"};
    return (unsigned)op < TRN_REDOP_COUNT ? names[op] : "invalid";
}

trn_status trn_comm_check_reduce(trn_dtype dtype, trn_redop op, const trn_reduce_post *post) {
    if ((unsigned)dtype >= TRN_DTYPE_COUNT || (unsigned)op >= TRN_REDOP_COUNT)
        return trn__set_error(TRN_ERROR_INVALID_ARGUMENT, "invalid dtype %d or reduce op %d",
                              (int)dtype, (int)op);
    bool bitwise = op == TRN_REDOP_BAND || op == TRN_REDOP_BOR || op == TRN_REDOP_BXOR;
    if (bitwise && (is_float(dtype) || is_complex(dtype)))
        return trn__set_error(TRN_ERROR_INVALID_ARGUMENT,
                              "ReduceOp.%s needs an integer or bool tensor, "
                              "got %s",
                              redop_name(op), trn_dtype_name(dtype));
    if ((op == TRN_REDOP_MIN || op == TRN_REDOP_MAX) && is_complex(dtype))
        return trn__set_error(TRN_ERROR_INVALID_ARGUMENT, "ReduceOp.%s is not defined for %s",
                              redop_name(op), trn_dtype_name(dtype));
    if (post && (post->divide_by_size || post->scale) && !(is_float(dtype) || is_complex(dtype)))
        return trn__set_error(TRN_ERROR_INVALID_ARGUMENT,
                              "ReduceOp.%s needs a floating-point or complex "
                              "tensor, got %s",
                              post->divide_by_size ? "AVG" : "PREMUL_SUM", trn_dtype_name(dtype));
    if (post && (post->divide_by_size || post->scale) && op != TRN_REDOP_SUM)
        return trn__set_error(TRN_ERROR_INVALID_ARGUMENT,
                              "AVG and PREMUL_SUM reduce by SUM, got %s", redop_name(op));
    return TRN_SUCCESS;
}

// dst op= src over n elements, for plain C types.
#define INT_LOOP(T, U)                                                                             \
    static void reduce_##T(T *d, const T *s, size_t n, trn_redop op) {                             \
        switch (op) {                                                                              \
        case TRN_REDOP_SUM:                                                                        \
            for (size_t i = 0; i < n; i++) d[i] = (T)((U)d[i] + (U)s[i]);                          \
            break;                                                                                 \
        case TRN_REDOP_PROD:                                                                       \
            for (size_t i = 0; i < n; i++) d[i] = (T)((U)d[i] * (U)s[i]);                          \
            break;                                                                                 \
        case TRN_REDOP_MIN:                                                                        \
            for (size_t i = 0; i < n; i++) d[i] = s[i] < d[i] ? s[i] : d[i];                       \
            break;                                                                                 \
        case TRN_REDOP_MAX:                                                                        \
            for (size_t i = 0; i < n; i++) d[i] = s[i] > d[i] ? s[i] : d[i];                       \
            break;                                                                                 \
        case TRN_REDOP_BAND:                                                                       \
            for (size_t i = 0; i < n; i++) d[i] = (T)(d[i] & s[i]);                                \
            break;                                                                                 \
        case TRN_REDOP_BOR:                                                                        \
            for (size_t i = 0; i < n; i++) d[i] = (T)(d[i] | s[i]);                                \
            break;                                                                                 \
        case TRN_REDOP_BXOR:                                                                       \
            for (size_t i = 0; i < n; i++) d[i] = (T)(d[i] ^ s[i]);                                \
            break;                                                                                 \
        default: break;                                                                            \
        }                                                                                          \
    }

typedef unsigned char uchar;
INT_LOOP(uint8_t, uint32_t)
INT_LOOP(int8_t, uint32_t)
INT_LOOP(int16_t, uint32_t)
INT_LOOP(uint16_t, uint32_t)
INT_LOOP(int32_t, uint32_t)
INT_LOOP(uint32_t, uint32_t)
INT_LOOP(int64_t, uint64_t)
INT_LOOP(uint64_t, uint64_t)

// NaN propagates through MIN/MAX, as torch.minimum/maximum do.
#define FLOAT_LOOP(T)                                                                              \
    static void reduce_##T(T *d, const T *s, size_t n, trn_redop op) {                             \
        switch (op) {                                                                              \
        case TRN_REDOP_SUM:                                                                        \
            for (size_t i = 0; i < n; i++) d[i] += s[i];                                           \
            break;                                                                                 \
        case TRN_REDOP_PROD:                                                                       \
            for (size_t i = 0; i < n; i++) d[i] *= s[i];                                           \
            break;                                                                                 \
        case TRN_REDOP_MIN:                                                                        \
            for (size_t i = 0; i < n; i++) d[i] = (s[i] < d[i] || s[i] != s[i]) ? s[i] : d[i];     \
            break;                                                                                 \
        case TRN_REDOP_MAX:                                                                        \
            for (size_t i = 0; i < n; i++) d[i] = (s[i] > d[i] || s[i] != s[i]) ? s[i] : d[i];     \
            break;                                                                                 \
        default: break;                                                                            \
        }                                                                                          \
    }
FLOAT_LOOP(float)
FLOAT_LOOP(double)

// Complex as interleaved (re, im) pairs: SUM and PROD only.
#define COMPLEX_LOOP(T)                                                                            \
    static void reduce_c_##T(T *d, const T *s, size_t n, trn_redop op) {                           \
        if (op == TRN_REDOP_SUM) {                                                                 \
            for (size_t i = 0; i < 2 * n; i++) d[i] += s[i];                                       \
            return;                                                                                \
        }                                                                                          \
        for (size_t i = 0; i < n; i++) {                                                           \
            T a = d[2 * i], b = d[2 * i + 1], c = s[2 * i], e = s[2 * i + 1];                      \
            d[2 * i] = a * c - b * e;                                                              \
            d[2 * i + 1] = a * e + b * c;                                                          \
        }                                                                                          \
    }
COMPLEX_LOOP(float)
COMPLEX_LOOP(double)

static void reduce_bool(uchar *d, const uchar *s, size_t n, trn_redop op) {
    switch (op) {
    case TRN_REDOP_SUM:
    case TRN_REDOP_MAX:
    case TRN_REDOP_BOR:
        for (size_t i = 0; i < n; i++) d[i] = (uchar)((d[i] | s[i]) != 0);
        break;
    case TRN_REDOP_BXOR:
        for (size_t i = 0; i < n; i++) d[i] = (uchar)((d[i] != 0) ^ (s[i] != 0));
        break;
    default:  // PROD, MIN, BAND
        for (size_t i = 0; i < n; i++) d[i] = (uchar)(d[i] != 0 && s[i] != 0);
        break;
    }
}

static void post_float(float *d, size_t n, const trn_reduce_post *p, int size) {
    if (p == NULL) return;
    if (p->divide_by_size)
        for (size_t i = 0; i < n; i++) d[i] /= (float)size;
    if (p->scale)
        for (size_t i = 0; i < n; i++) d[i] *= (float)p->factor;
}
static void post_double(double *d, size_t n, const trn_reduce_post *p, int size) {
    if (p == NULL) return;
    if (p->divide_by_size)
        for (size_t i = 0; i < n; i++) d[i] /= (double)size;
    if (p->scale)
        for (size_t i = 0; i < n; i++) d[i] *= p->factor;
}

// Half types: float32 blocks so the sum of all ranks is rounded once.
#define HALF_BLOCK 512
static void reduce_half(void *dst, const void *const *src, int nsrc, size_t count, bool bf16,
                        trn_redop op, const trn_reduce_post *post, int size) {
    float acc[HALF_BLOCK], in[HALF_BLOCK];
    uint16_t *d = dst;
    for (size_t base = 0; base < count; base += HALF_BLOCK) {
        size_t n = count - base < HALF_BLOCK ? count - base : HALF_BLOCK;
        for (int r = 0; r < nsrc; r++) {
            const uint16_t *s = (const uint16_t *)src[r] + base;
            float *t = r == 0 ? acc : in;
            for (size_t i = 0; i < n; i++)
                t[i] = bf16 ? trn_bf16_to_float(s[i]) : trn_half_to_float(s[i]);
            if (r > 0) reduce_float(acc, in, n, op);
        }
        post_float(acc, n, post, size);
        for (size_t i = 0; i < n; i++)
            d[base + i] = bf16 ? trn_float_to_bf16(acc[i]) : trn_float_to_half(acc[i]);
    }
}

void trn__reduce_run(void *dst, const void *const *src, int nsrc, size_t count, trn_dtype dtype,
                     trn_redop op, const trn_reduce_post *post, int size) {
    if (count == 0 || nsrc == 0) return;
    if (dtype == TRN_DTYPE_F16 || dtype == TRN_DTYPE_BF16) {
        reduce_half(dst, src, nsrc, count, dtype == TRN_DTYPE_BF16, op, post, size);
        return;
    }
    size_t esz = trn_dtype_size(dtype);
    // dst may be one of the later sources (a rank reducing into its own
    // slot): go through a small buffer so no source is overwritten early.
    for (int r = 1; r < nsrc; r++) {
        if (src[r] != dst) continue;
        _Alignas(64) unsigned char tmp[4096];
        size_t block = sizeof tmp / esz;
        const void *sub[TRN_COMM_MAX_RANKS];
        for (size_t base = 0; base < count; base += block) {
            size_t n = count - base < block ? count - base : block;
            for (int k = 0; k < nsrc; k++) sub[k] = (const unsigned char *)src[k] + base * esz;
            trn__reduce_run(tmp, sub, nsrc, n, dtype, op, post, size);
            memcpy((unsigned char *)dst + base * esz, tmp, n * esz);
        }
        return;
    }
    if (dst != src[0]) memmove(dst, src[0], count * esz);
    for (int r = 1; r < nsrc; r++) {
        const void *s = src[r];
        switch (dtype) {
        case TRN_DTYPE_BOOL: reduce_bool(dst, s, count, op); break;
        case TRN_DTYPE_U8: reduce_uint8_t(dst, s, count, op); break;
        case TRN_DTYPE_I8: reduce_int8_t(dst, s, count, op); break;
        case TRN_DTYPE_I16: reduce_int16_t(dst, s, count, op); break;
        case TRN_DTYPE_U16: reduce_uint16_t(dst, s, count, op); break;
        case TRN_DTYPE_I32: reduce_int32_t(dst, s, count, op); break;
        case TRN_DTYPE_U32: reduce_uint32_t(dst, s, count, op); break;
        case TRN_DTYPE_I64: reduce_int64_t(dst, s, count, op); break;
        case TRN_DTYPE_U64: reduce_uint64_t(dst, s, count, op); break;
        case TRN_DTYPE_F32: reduce_float(dst, s, count, op); break;
        case TRN_DTYPE_F64: reduce_double(dst, s, count, op); break;
        case TRN_DTYPE_C64: reduce_c_float(dst, s, count, op); break;
        case TRN_DTYPE_C128: reduce_c_double(dst, s, count, op); break;
        default: break;
        }
    }
    if (dtype == TRN_DTYPE_F32) post_float(dst, count, post, size);
    if (dtype == TRN_DTYPE_C64) post_float(dst, 2 * count, post, size);
    if (dtype == TRN_DTYPE_F64) post_double(dst, count, post, size);
    if (dtype == TRN_DTYPE_C128) post_double(dst, 2 * count, post, size);
}

trn_status trn_reduce_post_apply(void *buf, size_t count, trn_dtype dtype,
                                 const trn_reduce_post *post, int size) {
    trn_status st = trn_comm_check_reduce(dtype, TRN_REDOP_SUM, post);
    if (st != TRN_SUCCESS) return st;
    if (count > 0 && buf == NULL) return trn__set_error(TRN_ERROR_INVALID_ARGUMENT, "null buffer");
    const void *src[1] = {buf};
    trn__reduce_run(buf, src, 1, count, dtype, TRN_REDOP_SUM, post, size);
    return TRN_SUCCESS;
}
