// scaled_mm.c - owns the scaled-mm kernel declared in trn/scaled_mm.h:
// widening of the 8-bit operands into float32 staging buffers, the product
// through the matmul kernel's body (matmul_run.h), and the epilogue that
// applies the scales and bias and rounds to the output dtype; MX block
// scales are folded into the widening instead.
#include <math.h>
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

// MX (e8m0 block) scaling: the element (i, j) of the stored operand (global
// row gi = r0 + i) times its block scale. k_is_col: the stored rows are the
// m (or n) index and the columns run along K (A, or a column-major B read as
// B^T); else rows run along K (a row-major B). The 8-bit codes go through a
// 256-entry table of their float32 values.
typedef struct mx_src {
    const uint8_t *scale;  // swizzled, see trn/scaled_mm.h
    int64_t tiles_k;       // 4-column tiles per 128 rows: ceil(ceil(k / 32) / 4)
    bool k_is_col;
} mx_src;

static inline int64_t mx_index(const mx_src *mx, int64_t row, int64_t kblock) {
    return ((row >> 7) * mx->tiles_k + (kblock >> 2)) * 512 + (row & 31) * 16 +
           ((row & 127) >> 5) * 4 + (kblock & 3);
}

static float fp8_to_float(trn_dtype t, uint8_t c) {
    switch (t) {
    case TRN_DTYPE_F8E4M3FN: return trn_fp8_e4m3fn_to_float(c);
    case TRN_DTYPE_F8E5M2: return trn_fp8_e5m2_to_float(c);
    case TRN_DTYPE_F8E4M3FNUZ: return trn_fp8_e4m3fnuz_to_float(c);
    default: return trn_fp8_e5m2fnuz_to_float(c);
    }
}

static void widen_mx(trn_dtype t, const uint8_t *src, const int64_t s[2], int64_t r0, int64_t rows,
                     int64_t cols, const mx_src *mx, bool bf16, void *dst) {
    float lut[256];
    for (int c = 0; c < 256; c++) lut[c] = fp8_to_float(t, (uint8_t)c);
    float *df = dst;
    uint16_t *dh = dst;
    for (int64_t i = 0; i < rows; i++) {
        const int64_t gi = r0 + i;
        const uint8_t *row = src + i * s[0];
        float *of = df + i * cols;
        uint16_t *oh = dh + i * cols;
        // Along K: one scale per run of 32 columns.
        for (int64_t j0 = 0; mx->k_is_col && j0 < cols; j0 += 32) {
            const float sc = trn_fp8_e8m0fnu_to_float(mx->scale[mx_index(mx, gi, j0 >> 5)]);
            const int64_t j1 = cols - j0 < 32 ? cols : j0 + 32;
            if (bf16)
                for (int64_t j = j0; j < j1; j++)
                    oh[j] = (uint16_t)(trn_fp32_to_bits(lut[row[j * s[1]]] * sc) >> 16);
            else
                for (int64_t j = j0; j < j1; j++) of[j] = lut[row[j * s[1]]] * sc;
        }
        // Across K (a row-major B): one scale per column, fixed block.
        for (int64_t j = 0; !mx->k_is_col && j < cols; j++) {
            const float v =
                lut[row[j * s[1]]] * trn_fp8_e8m0fnu_to_float(mx->scale[mx_index(mx, j, gi >> 5)]);
            if (bf16)
                oh[j] = (uint16_t)(trn_fp32_to_bits(v) >> 16);
            else
                of[j] = v;
        }
    }
}

// Whether every MX scale in use keeps the scaled 8-bit values exact in
// bfloat16: 2^(c-127) with c in [17, 239] keeps e5m2's smallest subnormal
// (2^-16) at or above 2^-126 and its largest value (57344 < 2^16) below
// 2^128. The padding of the swizzled layout is not read.
static bool mx_bf16_exact(const mx_src *mx, int64_t rows, int64_t k) {
    const int64_t kb = (k + 31) / 32;
    for (int64_t r = 0; r < rows; r++)
        for (int64_t b = 0; b < kb; b++) {
            const uint8_t c = mx->scale[mx_index(mx, r, b)];
            if (c < 17 || c > 239) return false;
        }
    return true;
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
    const bool mx = d->mx_scale_a != NULL;  // scales already in the operands
    for (int64_t i = r0; i < r1; i++) {
        const float sa = mx ? 1.0f : d->scale_a[d->scale_a_count == 1 ? 0 : i * d->scale_a_stride];
        char *row = (char *)d->c + i * d->c_strides[0] * (int64_t)trn_dtype_size(d->out_dtype);
        for (int64_t j = 0; j < n; j++) {
            const float sb =
                mx ? 1.0f : d->scale_b[d->scale_b_count == 1 ? 0 : j * d->scale_b_stride];
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
    const mx_src *mx;  // NULL: no MX scales
} smm_par;

static void smm_piece(void *ctx, int64_t r0, int64_t r1) {
    const smm_par *p = ctx;
    if (p->what == 2) {
        epilogue(p->d, p->acc, r0, r1);
        return;
    }
    const uint8_t *src = p->src + r0 * p->s[0];
    if (p->mx)
        widen_mx(p->t, src, p->s, r0, r1 - r0, p->cols, p->mx, p->bf16,
                 p->bf16 ? (void *)((uint16_t *)p->dst + r0 * p->cols)
                         : (void *)((float *)p->dst + r0 * p->cols));
    else if (p->bf16)
        widen_bf16(p->t, src, p->s, r1 - r0, p->cols, (uint16_t *)p->dst + r0 * p->cols);
    else
        widen(p->t, src, p->s, r1 - r0, p->cols, (float *)p->dst + r0 * p->cols);
}

static void par_rows(smm_par *p, int64_t rows) {
    trn_parallel_for(rows, trn__grain(65536, p->what == 2 ? p->d->n : p->cols), smm_piece, p);
}

// Widens an 8-bit operand (rows x cols at strides s) into dst, row-major.
static void widen_par(const trn_scaled_mm_desc *d, bool bf16, trn_dtype t, const void *src,
                      const int64_t s[2], int64_t rows, int64_t cols, void *dst, const mx_src *mx) {
    smm_par p = {d, 0, bf16, t, src, {s[0], s[1]}, cols, dst, NULL, mx};
    par_rows(&p, rows);
}

// wc (m x n) = float32 product of columns [k0, k0 + kk) of wa (m x k,
// row-major) with rows [k0, k0 + kk) of wb (element strides b_rs, b_cs).
static trn_status f32_product(const trn_scaled_mm_desc *d, const float *wa, const float *wb,
                              int64_t b_rs, int64_t b_cs, int64_t k0, int64_t kk, float *wc) {
    trn_matmul_desc mm;
    memset(&mm, 0, sizeof mm);
    mm.dtype = TRN_DTYPE_F32;
    mm.batch = 1;
    mm.m = d->m;
    mm.n = d->n;
    mm.k = kk;
    mm.a = wa + k0;
    mm.a_strides[1] = d->k;
    mm.a_strides[2] = 1;
    mm.b = wb + k0 * b_rs;
    mm.b_strides[1] = b_rs;
    mm.b_strides[2] = b_cs;
    mm.c = wc;
    mm.c_strides[1] = d->n;
    mm.c_strides[2] = 1;
    mm.alpha = 1.0;
    return trn__matmul_run_now(&mm);
}

// MX scales with extreme exponents: one float32 product per 32-element K
// block of the unscaled operands, each scaled by 2^(ea + eb) in one step
// (ldexpf: no intermediate overflow) and summed in float32, block by block.
// A NaN scale (0xFF) makes its block's terms NaN.
static trn_status mx_blockwise(const trn_scaled_mm_desc *d, const mx_src *mxa, const mx_src *mxb,
                               const float *wa, const float *wb, int64_t b_rs, int64_t b_cs,
                               float *wc) {
    const int64_t m = d->m, n = d->n;
    float *part = malloc((size_t)(m * n > 0 ? m * n : 1) * sizeof(float));
    if (part == NULL)
        return trn__set_error(TRN_ERROR_OUT_OF_MEMORY,
                              "scaled_mm: out of host memory for %lld float32 values",
                              (long long)(m * n));
    for (int64_t i = 0; i < m * n; i++) wc[i] = 0.0f;
    trn_status st = TRN_SUCCESS;
    for (int64_t k0 = 0, blk = 0; k0 < d->k && st == TRN_SUCCESS; k0 += 32, blk++) {
        const int64_t kk = d->k - k0 < 32 ? d->k - k0 : 32;
        st = f32_product(d, wa, wb, b_rs, b_cs, k0, kk, part);
        for (int64_t i = 0; i < m && st == TRN_SUCCESS; i++) {
            const uint8_t ca = mxa->scale[mx_index(mxa, i, blk)];
            for (int64_t j = 0; j < n; j++) {
                const uint8_t cb = mxb->scale[mx_index(mxb, j, blk)];
                const float p = part[i * n + j];
                wc[i * n + j] +=
                    ca == 0xFF || cb == 0xFF ? NAN : ldexpf(p, (int)ca + (int)cb - 254);
            }
        }
    }
    free(part);
    return st;
}

static trn_status smm_task(void *args) {
    const smm_args *a = args;
    const trn_scaled_mm_desc *d = &a->d;
    trn__access_set acc;
    memset(&acc, 0, sizeof acc);
    trn__access_add(&acc, d->a, (size_t)a->a_span);
    trn__access_add(&acc, d->b, (size_t)a->b_span);
    trn__access_add(&acc, d->c, (size_t)a->c_span);
    if (d->mx_scale_a) {
        trn__access_add(&acc, d->mx_scale_a, (size_t)a->sa_span);
        trn__access_add(&acc, d->mx_scale_b, (size_t)a->sb_span);
    } else {
        trn__access_add(&acc, d->scale_a, (size_t)a->sa_span);
        trn__access_add(&acc, d->scale_b, (size_t)a->sb_span);
    }
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
    const int64_t tiles_k = ((d->k + 31) / 32 + 3) / 4;
    const mx_src mxa = {d->mx_scale_a, tiles_k, true}, mxb = {d->mx_scale_b, tiles_k, bt};
    const bool mx = d->mx_scale_a != NULL;
    const bool fold = !mx || (mx_bf16_exact(&mxa, d->m, d->k) && mx_bf16_exact(&mxb, d->n, d->k));
    const mx_src *pa = mx && fold ? &mxa : NULL, *pb = mx && fold ? &mxb : NULL;
    // Fast path: exact bfloat16 operands (MX scales folded in), oneDNN's
    // bfloat16 product with a float32 result (AVX512-BF16). Elsewhere:
    // float32 operands and GEMM. MX scales that would take the scaled
    // values out of bfloat16's normal range go block by block instead.
    st = TRN_ERROR_UNSUPPORTED;
    if (fold) {
        widen_par(d, true, d->a_dtype, d->a, d->a_strides, d->m, d->k, wa, pa);
        widen_par(d, true, d->b_dtype, d->b, bsrc_s, b_rows, b_cols, wb, pb);
        st = trn__matmul_bf16_f32_now(d->m, d->n, d->k, (const uint16_t *)wa, (const uint16_t *)wb,
                                      b_rs, b_cs, wc);
        if (st == TRN_ERROR_UNSUPPORTED) trn_clear_error();
    }
    if (st == TRN_ERROR_UNSUPPORTED) {
        widen_par(d, false, d->a_dtype, d->a, d->a_strides, d->m, d->k, wa, pa);
        widen_par(d, false, d->b_dtype, d->b, bsrc_s, b_rows, b_cols, wb, pb);
        st = fold ? f32_product(d, wa, wb, b_rs, b_cs, 0, d->k, wc)
                  : mx_blockwise(d, &mxa, &mxb, wa, wb, b_rs, b_cs, wc);
    }
    if (st == TRN_SUCCESS) {
        smm_par p = {d, 2, false, TRN_DTYPE_F32, NULL, {0, 0}, 0, NULL, wc, NULL};
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

int64_t trn_scaled_mm_mx_scale_bytes(int64_t rows, int64_t k) {
    if (rows < 0 || k < 0) return -1;
    const int64_t row_tiles = rows / 128 + (rows % 128 != 0);
    const int64_t k_tiles = (k / 32 + (k % 32 != 0) + 3) / 4;
    int64_t out;
    if (__builtin_mul_overflow(row_tiles, k_tiles, &out) ||
        __builtin_mul_overflow(out, (int64_t)512, &out))
        return -1;
    return out;
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
    const bool mx = d->mx_scale_a != NULL || d->mx_scale_b != NULL;
    if (mx && (d->mx_scale_a == NULL || d->mx_scale_b == NULL))
        return trn__set_error(TRN_ERROR_INVALID_ARGUMENT, "%s: MX scaling needs both scales", fn);
    if (mx && !((d->a_dtype == TRN_DTYPE_F8E4M3FN || d->a_dtype == TRN_DTYPE_F8E5M2) &&
                (d->b_dtype == TRN_DTYPE_F8E4M3FN || d->b_dtype == TRN_DTYPE_F8E5M2)))
        return trn__set_error(TRN_ERROR_UNSUPPORTED,
                              "%s: MX scaling takes float8_e4m3fn or float8_e5m2 operands, not %s "
                              "and %s",
                              fn, trn_dtype_name(d->a_dtype), trn_dtype_name(d->b_dtype));
    if (!mx && (d->scale_a == NULL || d->scale_b == NULL ||
                !(d->scale_a_count == 1 || d->scale_a_count == d->m) ||
                !(d->scale_b_count == 1 || d->scale_b_count == d->n)))
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
    if (mx) {
        a.sa_span = trn_scaled_mm_mx_scale_bytes(d->m, d->k);
        a.sb_span = trn_scaled_mm_mx_scale_bytes(d->n, d->k);
        if (a.sa_span < 0 || a.sb_span < 0)
            return trn__set_error(TRN_ERROR_INVALID_ARGUMENT, "%s: MX scale size overflows", fn);
    }
    if (!span2(d->m, d->k, d->a_strides, 1, &a.a_span) ||
        !span2(d->k, d->n, d->b_strides, 1, &a.b_span) ||
        !span2(d->m, d->n, d->c_strides, (int64_t)trn_dtype_size(d->out_dtype), &a.c_span) ||
        (!mx && !span2(d->scale_a_count, 1, d->scale_a_count == 1 ? one : sas, 4, &a.sa_span)) ||
        (!mx && !span2(d->scale_b_count, 1, d->scale_b_count == 1 ? one : sbs, 4, &a.sb_span)) ||
        (d->bias && !span2(d->n, 1, bis, (int64_t)trn_dtype_size(d->bias_dtype), &a.bias_span)))
        return trn__set_error(TRN_ERROR_INVALID_ARGUMENT, "%s: strides overflow", fn);
    if (a.c_span == 0) return TRN_SUCCESS;
    if (d->c == NULL || (d->k > 0 && (d->a == NULL || d->b == NULL)))
        return trn__set_error(TRN_ERROR_INVALID_ARGUMENT, "%s: NULL operand", fn);
    return trn_stream_launch(stream, smm_task, &a, sizeof a);
}
