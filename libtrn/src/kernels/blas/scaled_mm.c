// scaled_mm.c - owns the scaled-mm kernel declared in trn/scaled_mm.h:
// widening of the 8-bit operands into float32 staging buffers, the product
// through the matmul kernel's body (matmul_run.h), and the epilogue that
// applies the scales and bias and rounds to the output dtype.
#include <stdlib.h>
#include <string.h>

#include "../kit/launch.h"
#include "matmul_run.h"
#include "trn/convert.h"
#include "trn/parallel.h"
#include "trn/scaled_mm.h"

typedef struct smm_args {
    trn_scaled_mm_desc d;
    int64_t a_span, b_span, c_span, sa_span, sb_span, bias_span;
} smm_args;

_Static_assert(sizeof(smm_args) <= TRN_TASK_MAX_ARGS, "scaled_mm args too large");

static bool is_operand(trn_dtype t) {
    return t == TRN_DTYPE_F8E4M3FN || t == TRN_DTYPE_F8E5M2 || t == TRN_DTYPE_F8E4M3FNUZ ||
           t == TRN_DTYPE_F8E5M2FNUZ;
}

static bool is_wide(trn_dtype t) {
    return t == TRN_DTYPE_F32 || t == TRN_DTYPE_BF16 || t == TRN_DTYPE_F16;
}

bool trn_scaled_mm_supports(trn_dtype a_dtype, trn_dtype b_dtype, trn_dtype out_dtype) {
    return is_operand(a_dtype) && is_operand(b_dtype) &&
           (is_wide(out_dtype) || is_operand(out_dtype));
}

// rows x cols of 8-bit `t` at strides s -> contiguous float32.
static void widen(trn_dtype t, const uint8_t *src, const int64_t s[2], int64_t rows, int64_t cols,
                  float *dst) {
#define WIDEN(CONV)                                                                                \
    for (int64_t i = 0; i < rows; i++)                                                             \
        for (int64_t j = 0; j < cols; j++) dst[i * cols + j] = CONV(src[i * s[0] + j * s[1]]);     \
    break;
    switch (t) {
    case TRN_DTYPE_F8E4M3FN: WIDEN(trn_fp8_e4m3fn_to_float)
    case TRN_DTYPE_F8E5M2: WIDEN(trn_fp8_e5m2_to_float)
    case TRN_DTYPE_F8E4M3FNUZ: WIDEN(trn_fp8_e4m3fnuz_to_float)
    case TRN_DTYPE_F8E5M2FNUZ: WIDEN(trn_fp8_e5m2fnuz_to_float)
    default: break;
    }
#undef WIDEN
}

// The same into bfloat16 (exact as well: 8-bit floats have at most 4
// significant bits and exponents within bfloat16's range).
static void widen_bf16(trn_dtype t, const uint8_t *src, const int64_t s[2], int64_t rows,
                       int64_t cols, uint16_t *dst) {
#define WIDEN(CONV)                                                                                \
    for (int64_t i = 0; i < rows; i++)                                                             \
        for (int64_t j = 0; j < cols; j++)                                                         \
            dst[i * cols + j] =                                                                    \
                (uint16_t)(trn_fp32_to_bits(CONV(src[i * s[0] + j * s[1]])) >> 16);                \
    break;
    switch (t) {
    case TRN_DTYPE_F8E4M3FN: WIDEN(trn_fp8_e4m3fn_to_float)
    case TRN_DTYPE_F8E5M2: WIDEN(trn_fp8_e5m2_to_float)
    case TRN_DTYPE_F8E4M3FNUZ: WIDEN(trn_fp8_e4m3fnuz_to_float)
    case TRN_DTYPE_F8E5M2FNUZ: WIDEN(trn_fp8_e5m2fnuz_to_float)
    default: break;
    }
#undef WIDEN
}

static float load_any(trn_dtype t, const void *p, int64_t i) {
    switch (t) {
    case TRN_DTYPE_BF16: return trn_bf16_to_float(((const uint16_t *)p)[i]);
    case TRN_DTYPE_F16: return trn_half_to_float(((const uint16_t *)p)[i]);
    default: return ((const float *)p)[i];
    }
}

static void epilogue(const trn_scaled_mm_desc *d, const float *acc, int64_t r0, int64_t r1) {
    const int64_t n = d->n;
    for (int64_t i = r0; i < r1; i++) {
        const float sa = d->scale_a[d->scale_a_count == 1 ? 0 : i * d->scale_a_stride];
        char *row = (char *)d->c + i * d->c_strides[0] * (int64_t)trn_dtype_size(d->out_dtype);
        for (int64_t j = 0; j < n; j++) {
            const float sb = d->scale_b[d->scale_b_count == 1 ? 0 : j * d->scale_b_stride];
            float v = acc[i * n + j] * sa * sb;
            if (d->bias) v += load_any(d->bias_dtype, d->bias, j * d->bias_stride);
            const int64_t off = j * d->c_strides[1];
            switch (d->out_dtype) {
            case TRN_DTYPE_BF16: ((uint16_t *)row)[off] = trn_float_to_bf16(v); break;
            case TRN_DTYPE_F16: ((uint16_t *)row)[off] = trn_float_to_half(v); break;
            case TRN_DTYPE_F8E4M3FN: ((uint8_t *)row)[off] = trn_float_to_fp8_e4m3fn(v); break;
            case TRN_DTYPE_F8E5M2: ((uint8_t *)row)[off] = trn_float_to_fp8_e5m2(v); break;
            case TRN_DTYPE_F8E4M3FNUZ: ((uint8_t *)row)[off] = trn_float_to_fp8_e4m3fnuz(v); break;
            case TRN_DTYPE_F8E5M2FNUZ: ((uint8_t *)row)[off] = trn_float_to_fp8_e5m2fnuz(v); break;
            default: ((float *)row)[off] = v; break;
            }
        }
    }
}

// Row ranges of the widening and the epilogue over libtrn's pool: on a
// 1024^3 product they cost half as much as the bfloat16 GEMM serially.
typedef struct smm_par {
    const trn_scaled_mm_desc *d;
    int what;  // 0: widen A, 1: widen B (as stored: B or B^T rows), 2: epilogue
    bool bf16;
    trn_dtype t;
    const uint8_t *src;
    int64_t s[2], cols;
    void *dst;
    const float *acc;
} smm_par;

static void smm_piece(void *ctx, int64_t r0, int64_t r1) {
    const smm_par *p = ctx;
    if (p->what == 2) {
        epilogue(p->d, p->acc, r0, r1);
        return;
    }
    const uint8_t *src = p->src + r0 * p->s[0];
    if (p->bf16)
        widen_bf16(p->t, src, p->s, r1 - r0, p->cols, (uint16_t *)p->dst + r0 * p->cols);
    else
        widen(p->t, src, p->s, r1 - r0, p->cols, (float *)p->dst + r0 * p->cols);
}

static void par_rows(smm_par *p, int64_t rows) {
    trn_parallel_for(rows, trn__grain(65536, p->what == 2 ? p->d->n : p->cols), smm_piece, p);
}

// Widens an 8-bit operand (rows x cols at strides s) into dst, row-major.
static void widen_par(const trn_scaled_mm_desc *d, bool bf16, trn_dtype t, const void *src,
                      const int64_t s[2], int64_t rows, int64_t cols, void *dst) {
    smm_par p = {d, 0, bf16, t, src, {s[0], s[1]}, cols, dst, NULL};
    par_rows(&p, rows);
}

static trn_status smm_task(void *args) {
    const smm_args *a = args;
    const trn_scaled_mm_desc *d = &a->d;
    trn__access_set acc;
    memset(&acc, 0, sizeof acc);
    trn__access_add(&acc, d->a, (size_t)a->a_span);
    trn__access_add(&acc, d->b, (size_t)a->b_span);
    trn__access_add(&acc, d->c, (size_t)a->c_span);
    trn__access_add(&acc, d->scale_a, (size_t)a->sa_span);
    trn__access_add(&acc, d->scale_b, (size_t)a->sb_span);
    if (d->bias) trn__access_add(&acc, d->bias, (size_t)a->bias_span);
    trn_status st = trn__access_begin(&acc);
    if (st != TRN_SUCCESS) return st;
    const size_t na = (size_t)(d->m * d->k), nb = (size_t)(d->k * d->n), nc = (size_t)(d->m * d->n);
    float *buf = malloc((na + nb + nc) * sizeof(float));
    if (buf == NULL) {
        trn__access_end(&acc);
        return trn__set_error(TRN_ERROR_OUT_OF_MEMORY,
                              "scaled_mm: out of host memory for %zu float32 staging values",
                              na + nb + nc);
    }
    float *wa = buf, *wb = buf + na, *wc = buf + na + nb;
    // B is widened in its memory order: a column-major B (cuBLAS's layout,
    // mat2 = W.t()) becomes a row-major B^T, read by the GEMM with strides.
    const bool bt = d->b_strides[0] < d->b_strides[1];
    const int64_t bs_t[2] = {d->b_strides[1], d->b_strides[0]};
    const int64_t *bsrc_s = bt ? bs_t : d->b_strides;
    const int64_t b_rows = bt ? d->n : d->k, b_cols = bt ? d->k : d->n;
    const int64_t b_rs = bt ? 1 : d->n, b_cs = bt ? d->k : 1;
    // Fast path: exact bfloat16 operands, oneDNN's bfloat16 product with a
    // float32 result (AVX512-BF16). Elsewhere: float32 operands and GEMM.
    widen_par(d, true, d->a_dtype, d->a, d->a_strides, d->m, d->k, wa);
    widen_par(d, true, d->b_dtype, d->b, bsrc_s, b_rows, b_cols, wb);
    st = trn__matmul_bf16_f32_now(d->m, d->n, d->k, (const uint16_t *)wa, (const uint16_t *)wb,
                                  b_rs, b_cs, wc);
    if (st == TRN_ERROR_UNSUPPORTED) {
        trn_clear_error();
        widen_par(d, false, d->a_dtype, d->a, d->a_strides, d->m, d->k, wa);
        widen_par(d, false, d->b_dtype, d->b, bsrc_s, b_rows, b_cols, wb);
        trn_matmul_desc mm;
        memset(&mm, 0, sizeof mm);
        mm.dtype = TRN_DTYPE_F32;
        mm.batch = 1;
        mm.m = d->m;
        mm.n = d->n;
        mm.k = d->k;
        mm.a = wa;
        mm.a_strides[1] = d->k;
        mm.a_strides[2] = 1;
        mm.b = wb;
        mm.b_strides[1] = b_rs;
        mm.b_strides[2] = b_cs;
        mm.c = wc;
        mm.c_strides[1] = d->n;
        mm.c_strides[2] = 1;
        mm.alpha = 1.0;
        st = trn__matmul_run_now(&mm);
    }
    if (st == TRN_SUCCESS) {
        smm_par p = {d, 2, false, TRN_DTYPE_F32, NULL, {0, 0}, 0, NULL, wc};
        par_rows(&p, d->m);
    }
    free(buf);
    trn__access_end(&acc);
    return st;
}

static bool span2(int64_t r, int64_t c, const int64_t s[2], int64_t es, int64_t *out) {
    if (r == 0 || c == 0) {
        *out = 0;
        return true;
    }
    int64_t x, y, last;
    if (__builtin_mul_overflow(r - 1, s[0], &x) || __builtin_mul_overflow(c - 1, s[1], &y) ||
        __builtin_add_overflow(x, y, &last) || __builtin_add_overflow(last, 1, &last))
        return false;
    return !__builtin_mul_overflow(last, es, out);
}

trn_status trn_scaled_mm_launch(trn_stream *stream, const trn_scaled_mm_desc *desc) {
    static const char fn[] = "trn_scaled_mm_launch";
    trn_status st = trn__check_launch(stream, desc, fn);
    if (st != TRN_SUCCESS) return st;
    const trn_scaled_mm_desc *d = desc;
    if ((unsigned)d->a_dtype >= TRN_DTYPE_COUNT || (unsigned)d->b_dtype >= TRN_DTYPE_COUNT ||
        (unsigned)d->out_dtype >= TRN_DTYPE_COUNT ||
        !trn_scaled_mm_supports(d->a_dtype, d->b_dtype, d->out_dtype))
        return trn__set_error(TRN_ERROR_UNSUPPORTED, "%s: unsupported dtypes", fn);
    if (d->m < 0 || d->n < 0 || d->k < 0)
        return trn__set_error(TRN_ERROR_INVALID_ARGUMENT, "%s: negative size", fn);
    if (d->scale_a == NULL || d->scale_b == NULL ||
        !(d->scale_a_count == 1 || d->scale_a_count == d->m) ||
        !(d->scale_b_count == 1 || d->scale_b_count == d->n))
        return trn__set_error(TRN_ERROR_INVALID_ARGUMENT,
                              "%s: scale_a needs 1 or m values and scale_b 1 or n values", fn);
    if (d->bias && !is_wide(d->bias_dtype))
        return trn__set_error(TRN_ERROR_INVALID_ARGUMENT, "%s: bias dtype %s", fn,
                              trn_dtype_name(d->bias_dtype));
    for (int i = 0; i < 2; i++)
        if (d->a_strides[i] < 0 || d->b_strides[i] < 0 || d->c_strides[i] < 0)
            return trn__set_error(TRN_ERROR_INVALID_ARGUMENT, "%s: negative strides", fn);
    if (d->scale_a_stride < 0 || d->scale_b_stride < 0 || d->bias_stride < 0)
        return trn__set_error(TRN_ERROR_INVALID_ARGUMENT, "%s: negative strides", fn);
    st = trn__fork_check();
    if (st != TRN_SUCCESS) return st;
    smm_args a;
    memset(&a, 0, sizeof a);
    a.d = *d;
    const int64_t one[2] = {0, 0};
    const int64_t sas[2] = {d->scale_a_stride, 0}, sbs[2] = {d->scale_b_stride, 0},
                  bis[2] = {d->bias_stride, 0};
    if (!span2(d->m, d->k, d->a_strides, 1, &a.a_span) ||
        !span2(d->k, d->n, d->b_strides, 1, &a.b_span) ||
        !span2(d->m, d->n, d->c_strides, (int64_t)trn_dtype_size(d->out_dtype), &a.c_span) ||
        !span2(d->scale_a_count, 1, d->scale_a_count == 1 ? one : sas, 4, &a.sa_span) ||
        !span2(d->scale_b_count, 1, d->scale_b_count == 1 ? one : sbs, 4, &a.sb_span) ||
        (d->bias && !span2(d->n, 1, bis, (int64_t)trn_dtype_size(d->bias_dtype), &a.bias_span)))
        return trn__set_error(TRN_ERROR_INVALID_ARGUMENT, "%s: strides overflow", fn);
    if (a.c_span == 0) return TRN_SUCCESS;
    if (d->c == NULL || (d->k > 0 && (d->a == NULL || d->b == NULL)))
        return trn__set_error(TRN_ERROR_INVALID_ARGUMENT, "%s: NULL operand", fn);
    return trn_stream_launch(stream, smm_task, &a, sizeof a);
}
