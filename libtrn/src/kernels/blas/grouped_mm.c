// grouped_mm.c - owns the grouped-mm kernel declared in trn/grouped_mm.h:
// validation at launch, and a task that reads the group boundaries and runs
// each group's product through the matmul kernel's body (matmul_run.h).
// The scaled grouped product (float8 operands, rowwise scales) is one task
// too: widen, the float32 group loop, then the scales.
#include <stdlib.h>
#include <string.h>

#include "trn/convert.h"

#include "../kit/launch.h"
#include "matmul_run.h"
#include "trn/grouped_mm.h"

// Largest piece of a group's varying dim handed to one matmul run.
enum { GMM_PIECE_MAX = 1024 };

typedef struct gmm_args {
    trn_grouped_mm_desc d;
    int64_t a_span, b_span, c_span;  // bytes from each base pointer
} gmm_args;

_Static_assert(sizeof(gmm_args) <= TRN_TASK_MAX_ARGS, "grouped_mm args too large");

bool trn_grouped_mm_supports(trn_dtype dtype) {
    return dtype == TRN_DTYPE_F32 || dtype == TRN_DTYPE_BF16 || dtype == TRN_DTYPE_F16;
}

// Bytes from the base pointer to one past the last element (strides >= 0).
static bool span3(const int64_t sizes[3], const int64_t strides[3], int64_t es, int64_t *out) {
    int64_t last = 0;
    for (int i = 0; i < 3; i++) {
        if (sizes[i] == 0) {
            *out = 0;
            return true;
        }
        int64_t reach;
        if (__builtin_mul_overflow(sizes[i] - 1, strides[i], &reach) ||
            __builtin_add_overflow(last, reach, &last))
            return false;
    }
    return !__builtin_add_overflow(last, 1, &last) && !__builtin_mul_overflow(last, es, out);
}

// The next piece of a group's varying dim: GMM_PIECE_MAX, else the
// multiple of 32 below len, else len (< 32). At most two runs per group
// below the cap, and at most 63 distinct piece sizes, so the matmul plans
// they need are few and repeat whatever the counts are.
static int64_t piece_of(int64_t len) {
    if (len >= GMM_PIECE_MAX) return GMM_PIECE_MAX;
    return len >= 32 ? (len & ~(int64_t)31) : len;
}

static const char *elem(const void *base, int64_t off, int64_t es) {
    return (const char *)base + off * es;
}

// One group: rows [r0, r1) for 2D_3D, columns [r0, r1) for 3D_2D, the
// whole matrices otherwise (K range [r0, r1) for 2D_2D).
static trn_status run_group(const trn_grouped_mm_desc *d, int64_t g, int64_t r0, int64_t r1) {
    const int64_t es = (int64_t)trn_dtype_size(d->dtype);
    trn_matmul_desc mm;
    memset(&mm, 0, sizeof mm);
    mm.dtype = d->dtype;
    mm.batch = 1;
    mm.alpha = 1.0;
    mm.m = d->m;
    mm.n = d->n;
    mm.k = d->k;
    for (int i = 0; i < 3; i++) {
        mm.a_strides[i] = d->a_strides[i];
        mm.b_strides[i] = d->b_strides[i];
        mm.c_strides[i] = d->c_strides[i];
    }
    const int64_t *as = d->a_strides, *bs = d->b_strides, *cs = d->c_strides;
    switch (d->layout) {
    case TRN_GMM_2D_3D:
        for (int64_t r = r0; r < r1;) {
            const int64_t len = piece_of(r1 - r);
            mm.m = len;
            mm.a = elem(d->a, r * as[1], es);
            mm.b = elem(d->b, g * bs[0], es);
            mm.c = (void *)elem(d->c, r * cs[1], es);
            trn_status st = trn__matmul_run_now(&mm);
            if (st != TRN_SUCCESS) return st;
            r += len;
        }
        return TRN_SUCCESS;
    case TRN_GMM_3D_2D:
        for (int64_t r = r0; r < r1;) {
            const int64_t len = piece_of(r1 - r);
            mm.n = len;
            mm.a = elem(d->a, g * as[0], es);
            mm.b = elem(d->b, r * bs[2], es);
            mm.c = (void *)elem(d->c, r * cs[2], es);
            trn_status st = trn__matmul_run_now(&mm);
            if (st != TRN_SUCCESS) return st;
            r += len;
        }
        return TRN_SUCCESS;
    case TRN_GMM_2D_2D:
        // The whole K range in one run: pieces would round the partial
        // sums to `dtype` between them.
        mm.k = r1 - r0;
        mm.a = elem(d->a, r0 * as[2], es);
        mm.b = elem(d->b, r0 * bs[1], es);
        mm.c = (void *)elem(d->c, g * cs[0], es);
        return trn__matmul_run_now(&mm);
    case TRN_GMM_3D_3D:
        mm.a = elem(d->a, g * as[0], es);
        mm.b = elem(d->b, g * bs[0], es);
        mm.c = (void *)elem(d->c, g * cs[0], es);
        return trn__matmul_run_now(&mm);
    }
    return TRN_SUCCESS;
}

// Every group of d, its boundaries read from offs (checked) as they run.
static trn_status run_groups(const trn_grouped_mm_desc *d) {
    trn_status st = TRN_SUCCESS;
    const int64_t limit = d->layout == TRN_GMM_2D_3D   ? d->m
                          : d->layout == TRN_GMM_3D_2D ? d->n
                                                       : d->k;
    int64_t prev = 0;
    for (int64_t g = 0; g < d->groups && st == TRN_SUCCESS; g++) {
        int64_t end = prev;
        if (d->offs) {
            end = d->offs[g];
            if (end < prev || end > limit) {
                st =
                    trn__set_error(TRN_ERROR_INVALID_ARGUMENT,
                                   "grouped_mm: offs must be non-decreasing and at most %lld, "
                                   "got offs[%lld] = %lld after %lld",
                                   (long long)limit, (long long)g, (long long)end, (long long)prev);
                break;
            }
        }
        st = run_group(d, g, prev, end);
        prev = end;
    }
    return st;
}

static trn_status gmm_task(void *args) {
    const gmm_args *a = args;
    const trn_grouped_mm_desc *d = &a->d;
    trn__access_set acc;
    memset(&acc, 0, sizeof acc);
    trn__access_add(&acc, d->a, (size_t)a->a_span);
    trn__access_add(&acc, d->b, (size_t)a->b_span);
    trn__access_add(&acc, d->c, (size_t)a->c_span);
    if (d->offs) trn__access_add(&acc, d->offs, (size_t)d->groups * sizeof(int32_t));
    trn_status st = trn__access_begin(&acc);
    if (st != TRN_SUCCESS) return st;
    st = run_groups(d);
    trn__access_end(&acc);
    return st;
}

trn_status trn_grouped_mm_launch(trn_stream *stream, const trn_grouped_mm_desc *desc) {
    static const char fn[] = "trn_grouped_mm_launch";
    trn_status st = trn__check_launch(stream, desc, fn);
    if (st != TRN_SUCCESS) return st;
    if ((unsigned)desc->dtype >= TRN_DTYPE_COUNT || !trn_grouped_mm_supports(desc->dtype))
        return trn__set_error(TRN_ERROR_UNSUPPORTED, "%s: dtype %s is not supported", fn,
                              trn_dtype_name(desc->dtype));
    if ((unsigned)desc->layout > TRN_GMM_2D_2D)
        return trn__set_error(TRN_ERROR_INVALID_ARGUMENT, "%s: invalid layout", fn);
    if (desc->groups < 1 || desc->m < 0 || desc->n < 0 || desc->k < 0)
        return trn__set_error(TRN_ERROR_INVALID_ARGUMENT,
                              "%s: need groups >= 1 and sizes >= 0 (groups %lld, m %lld, n %lld, "
                              "k %lld)",
                              fn, (long long)desc->groups, (long long)desc->m, (long long)desc->n,
                              (long long)desc->k);
    if ((desc->offs == NULL) != (desc->layout == TRN_GMM_3D_3D))
        return trn__set_error(TRN_ERROR_INVALID_ARGUMENT,
                              "%s: offs is required except for the 3D_3D layout, where it must "
                              "be NULL",
                              fn);
    for (int i = 0; i < 3; i++)
        if (desc->a_strides[i] < 0 || desc->b_strides[i] < 0 || desc->c_strides[i] < 0)
            return trn__set_error(TRN_ERROR_INVALID_ARGUMENT, "%s: negative strides", fn);
    st = trn__fork_check();
    if (st != TRN_SUCCESS) return st;
    gmm_args a;
    memset(&a, 0, sizeof a);
    a.d = *desc;
    trn_grouped_mm_desc *d = &a.d;
    const int64_t G = d->groups;
    const bool a3 = d->layout == TRN_GMM_3D_3D || d->layout == TRN_GMM_3D_2D;
    const bool b3 = d->layout == TRN_GMM_2D_3D || d->layout == TRN_GMM_3D_3D;
    const bool c3 = d->layout == TRN_GMM_3D_3D || d->layout == TRN_GMM_2D_2D;
    if (!a3) d->a_strides[0] = 0;
    if (!b3) d->b_strides[0] = 0;
    if (!c3) d->c_strides[0] = 0;
    const int64_t asz[3] = {a3 ? G : 1, d->m, d->k}, bsz[3] = {b3 ? G : 1, d->k, d->n},
                  csz[3] = {c3 ? G : 1, d->m, d->n};
    const int64_t es = (int64_t)trn_dtype_size(d->dtype);
    if (!span3(asz, d->a_strides, es, &a.a_span) || !span3(bsz, d->b_strides, es, &a.b_span) ||
        !span3(csz, d->c_strides, es, &a.c_span))
        return trn__set_error(TRN_ERROR_INVALID_ARGUMENT, "%s: strides overflow", fn);
    if (a.c_span == 0) return TRN_SUCCESS;
    if (d->c == NULL || (a.a_span > 0 && d->a == NULL) || (a.b_span > 0 && d->b == NULL))
        return trn__set_error(TRN_ERROR_INVALID_ARGUMENT, "%s: NULL operand", fn);
    return trn_stream_launch(stream, gmm_task, &a, sizeof a);
}

// ---- scaled grouped products ---------------------------------------------------

typedef struct sgmm_args {
    trn_scaled_grouped_mm_desc d;
    int64_t a_span, b_span, c_span, sa_count, sb_count;
} sgmm_args;

_Static_assert(sizeof(sgmm_args) <= TRN_TASK_MAX_ARGS, "scaled_grouped_mm args too large");

static bool is_f8_operand(trn_dtype t) {
    return t == TRN_DTYPE_F8E4M3FN || t == TRN_DTYPE_F8E5M2 || t == TRN_DTYPE_F8E4M3FNUZ ||
           t == TRN_DTYPE_F8E5M2FNUZ;
}

static float f8_to_float(trn_dtype t, uint8_t c) {
    switch (t) {
    case TRN_DTYPE_F8E4M3FN: return trn_fp8_e4m3fn_to_float(c);
    case TRN_DTYPE_F8E5M2: return trn_fp8_e5m2_to_float(c);
    case TRN_DTYPE_F8E4M3FNUZ: return trn_fp8_e4m3fnuz_to_float(c);
    default: return trn_fp8_e5m2fnuz_to_float(c);
    }
}

// Widens a (G, rows, cols) 8-bit operand read through `strides` into a
// contiguous float32 copy (exact), through a table of the 256 codes.
static void widen(trn_dtype t, const uint8_t *src, const int64_t strides[3], int64_t groups,
                  int64_t rows, int64_t cols, float *dst) {
    float lut[256];
    for (int c = 0; c < 256; c++) lut[c] = f8_to_float(t, (uint8_t)c);
    for (int64_t g = 0; g < groups; g++)
        for (int64_t r = 0; r < rows; r++) {
            const uint8_t *row = src + g * strides[0] + r * strides[1];
            for (int64_t j = 0; j < cols; j++) *dst++ = lut[row[j * strides[2]]];
        }
}

static trn_status sgmm_task(void *args) {
    const sgmm_args *a = args;
    const trn_scaled_grouped_mm_desc *d = &a->d;
    trn__access_set acc;
    memset(&acc, 0, sizeof acc);
    trn__access_add(&acc, d->a, (size_t)a->a_span);
    trn__access_add(&acc, d->b, (size_t)a->b_span);
    trn__access_add(&acc, d->c, (size_t)a->c_span);
    trn__access_add(&acc, d->scale_a, (size_t)a->sa_count * sizeof(float));
    trn__access_add(&acc, d->scale_b, (size_t)a->sb_count * sizeof(float));
    if (d->offs) trn__access_add(&acc, d->offs, (size_t)d->groups * sizeof(int32_t));
    trn_status st = trn__access_begin(&acc);
    if (st != TRN_SUCCESS) return st;
    const bool a3 = d->layout == TRN_GMM_3D_3D;
    const int64_t G = d->groups, m = d->m, n = d->n, k = d->k, ga = a3 ? G : 1;
    float *wa = malloc((size_t)(ga * m * k) * sizeof(float) + 1);
    float *wb = malloc((size_t)(G * k * n) * sizeof(float) + 1);
    float *sum = calloc((size_t)(ga * m * n) + 1, sizeof(float));  // rows past offs: 0
    if (wa == NULL || wb == NULL || sum == NULL) {
        st = trn__set_error(TRN_ERROR_OUT_OF_MEMORY, "scaled_grouped_mm: no staging memory");
    } else {
        widen(d->a_dtype, d->a, d->a_strides, ga, m, k, wa);
        widen(d->b_dtype, d->b, d->b_strides, G, k, n, wb);
        trn_grouped_mm_desc f;
        memset(&f, 0, sizeof f);
        f.dtype = TRN_DTYPE_F32;
        f.layout = d->layout;
        f.groups = G;
        f.m = m;
        f.n = n;
        f.k = k;
        f.a = wa;
        f.a_strides[0] = a3 ? m * k : 0;
        f.a_strides[1] = k;
        f.a_strides[2] = 1;
        f.b = wb;
        f.b_strides[0] = k * n;
        f.b_strides[1] = n;
        f.b_strides[2] = 1;
        f.c = sum;
        f.c_strides[0] = a3 ? m * n : 0;
        f.c_strides[1] = n;
        f.c_strides[2] = 1;
        f.offs = d->offs;
        st = run_groups(&f);
    }
    if (st == TRN_SUCCESS) {
        // (sum * scale_a[row]) * scale_b[group, col], rounded once. 2D_3D
        // rows past offs[G-1] take the last group's scales (as the eager
        // composition's clamp) on their zero sums.
        int64_t g = 0, end = a3 ? m : (G > 0 ? d->offs[0] : m);
        const bool bf16 = d->out_dtype == TRN_DTYPE_BF16;
        for (int64_t gg = 0; gg < ga; gg++)
            for (int64_t r = 0; r < m; r++) {
                if (!a3)
                    while (r >= end && g < G - 1) end = d->offs[++g];
                const int64_t grp = a3 ? gg : g;
                const float sa = d->scale_a[gg * m + r];
                const float *sb = d->scale_b + grp * n;
                const float *src = sum + (gg * m + r) * n;
                const int64_t o = (gg * m + r) * n;
                for (int64_t j = 0; j < n; j++) {
                    const float v = (src[j] * sa) * sb[j];
                    if (bf16)
                        ((uint16_t *)d->c)[o + j] = trn_float_to_bf16(v);
                    else
                        ((float *)d->c)[o + j] = v;
                }
            }
    }
    free(wa);
    free(wb);
    free(sum);
    trn__access_end(&acc);
    return st;
}

trn_status trn_scaled_grouped_mm_launch(trn_stream *stream,
                                        const trn_scaled_grouped_mm_desc *desc) {
    static const char fn[] = "trn_scaled_grouped_mm_launch";
    trn_status st = trn__check_launch(stream, desc, fn);
    if (st != TRN_SUCCESS) return st;
    if ((unsigned)desc->a_dtype >= TRN_DTYPE_COUNT || (unsigned)desc->b_dtype >= TRN_DTYPE_COUNT ||
        !is_f8_operand(desc->a_dtype) || !is_f8_operand(desc->b_dtype) ||
        !(desc->out_dtype == TRN_DTYPE_F32 || desc->out_dtype == TRN_DTYPE_BF16))
        return trn__set_error(TRN_ERROR_UNSUPPORTED,
                              "%s: needs 8-bit float operands and a float32 or bfloat16 output",
                              fn);
    if (desc->layout != TRN_GMM_2D_3D && desc->layout != TRN_GMM_3D_3D)
        return trn__set_error(TRN_ERROR_UNSUPPORTED, "%s: only the 2D_3D and 3D_3D layouts", fn);
    if (desc->groups < 1 || desc->m < 0 || desc->n < 0 || desc->k < 0)
        return trn__set_error(TRN_ERROR_INVALID_ARGUMENT, "%s: need groups >= 1 and sizes >= 0",
                              fn);
    if ((desc->offs == NULL) != (desc->layout == TRN_GMM_3D_3D))
        return trn__set_error(TRN_ERROR_INVALID_ARGUMENT,
                              "%s: offs is required for 2D_3D and must be NULL for 3D_3D", fn);
    for (int i = 0; i < 3; i++)
        if (desc->a_strides[i] < 0 || desc->b_strides[i] < 0)
            return trn__set_error(TRN_ERROR_INVALID_ARGUMENT, "%s: negative strides", fn);
    st = trn__fork_check();
    if (st != TRN_SUCCESS) return st;
    sgmm_args a;
    memset(&a, 0, sizeof a);
    a.d = *desc;
    trn_scaled_grouped_mm_desc *d = &a.d;
    const bool a3 = d->layout == TRN_GMM_3D_3D;
    const int64_t G = d->groups, ga = a3 ? G : 1;
    if (!a3) d->a_strides[0] = 0;
    const int64_t asz[3] = {ga, d->m, d->k}, bsz[3] = {G, d->k, d->n}, csz[3] = {ga, d->m, d->n};
    const int64_t cst[3] = {d->m * d->n, d->n, 1};
    if (!span3(asz, d->a_strides, 1, &a.a_span) || !span3(bsz, d->b_strides, 1, &a.b_span) ||
        !span3(csz, cst, (int64_t)trn_dtype_size(d->out_dtype), &a.c_span) ||
        __builtin_mul_overflow(ga, d->m, &a.sa_count) ||
        __builtin_mul_overflow(G, d->n, &a.sb_count))
        return trn__set_error(TRN_ERROR_INVALID_ARGUMENT, "%s: sizes overflow", fn);
    if (a.c_span == 0) return TRN_SUCCESS;
    if (d->c == NULL || d->scale_a == NULL || d->scale_b == NULL ||
        (a.a_span > 0 && d->a == NULL) || (a.b_span > 0 && d->b == NULL))
        return trn__set_error(TRN_ERROR_INVALID_ARGUMENT, "%s: NULL operand", fn);
    return trn_stream_launch(stream, sgmm_task, &a, sizeof a);
}
