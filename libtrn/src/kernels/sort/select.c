// select.c - owns the order-statistic kernel (trn/select.h).
//
// Each row is copied into (key, index) pairs and reduced with quickselect:
// a three-way partition around the middle element's key, so rows full of
// equal values (integers, padding) stay linear. Keys are double for the
// floating types (every F16 / BF16 / F32 value is exact in double) and
// int64 for the integers; NaN sorts above every number. The returned value
// is the input element itself, so no dtype rounds. Rows split across the
// thread pool, each piece with its own scratch.
#include <math.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "../kit/launch.h"
#include "../kit/piece_status.h"
#include "trn/convert.h"
#include "trn/parallel.h"
#include "trn/select.h"

// Row elements per parallel piece.
#define GRAIN 32768

typedef struct select_args {
    trn_select_desc d;
    trn__piece_status *status;  // the pieces' failed allocations
} select_args;

typedef struct fpair {
    double key;
    int64_t idx;
} fpair;

typedef struct ipair {
    int64_t key;
    int64_t idx;
} ipair;

// NaN above every number; NaNs equal each other.
static inline int f_lt(double a, double b) { return isnan(b) ? !isnan(a) : a < b; }
static inline int i_lt(int64_t a, int64_t b) { return a < b; }

// Rearranges v[0..n) so that v[k] holds the k-th smallest key.
#define DEFINE_QSELECT(NAME, P, LT)                                                                \
    static void NAME(P *v, int64_t n, int64_t k) {                                                 \
        int64_t lo = 0, hi = n; /* k lies in [lo, hi) */                                           \
        while (hi - lo > 1) {                                                                      \
            /* Median of three keys as the pivot. */                                               \
            const int64_t mid = lo + (hi - lo) / 2;                                                \
            P a = v[lo], b = v[mid], c = v[hi - 1], piv;                                           \
            if (LT(b.key, a.key)) {                                                                \
                P t = a;                                                                           \
                a = b;                                                                             \
                b = t;                                                                             \
            }                                                                                      \
            if (LT(c.key, b.key)) b = LT(c.key, a.key) ? a : c;                                    \
            piv = b;                                                                               \
            /* Dutch flag: [lo, lt) < pivot, [lt, i) == pivot, (gt, hi) > pivot. */                \
            int64_t lt = lo, i = lo, gt = hi - 1;                                                  \
            while (i <= gt) {                                                                      \
                if (LT(v[i].key, piv.key)) {                                                       \
                    P t = v[lt];                                                                   \
                    v[lt] = v[i];                                                                  \
                    v[i] = t;                                                                      \
                    lt++, i++;                                                                     \
                } else if (LT(piv.key, v[i].key)) {                                                \
                    P t = v[gt];                                                                   \
                    v[gt] = v[i];                                                                  \
                    v[i] = t;                                                                      \
                    gt--;                                                                          \
                } else {                                                                           \
                    i++;                                                                           \
                }                                                                                  \
            }                                                                                      \
            if (k < lt)                                                                            \
                hi = lt;                                                                           \
            else if (k > gt)                                                                       \
                lo = gt + 1;                                                                       \
            else                                                                                   \
                return;                                                                            \
        }                                                                                          \
    }

DEFINE_QSELECT(select_f, fpair, f_lt)
DEFINE_QSELECT(select_i, ipair, i_lt)

static double load_f(trn_dtype t, const void *x, int64_t i) {
    switch (t) {
    case TRN_DTYPE_F16: return trn_half_to_float(((const uint16_t *)x)[i]);
    case TRN_DTYPE_BF16: return trn_bf16_to_float(((const uint16_t *)x)[i]);
    case TRN_DTYPE_F32: return ((const float *)x)[i];
    default: return ((const double *)x)[i];
    }
}

static int64_t load_i(trn_dtype t, const void *x, int64_t i) {
    switch (t) {
    case TRN_DTYPE_U8: return ((const uint8_t *)x)[i];
    case TRN_DTYPE_I8: return ((const int8_t *)x)[i];
    case TRN_DTYPE_I16: return ((const int16_t *)x)[i];
    case TRN_DTYPE_I32: return ((const int32_t *)x)[i];
    default: return ((const int64_t *)x)[i];
    }
}

static int is_float(trn_dtype t) {
    return t == TRN_DTYPE_F16 || t == TRN_DTYPE_BF16 || t == TRN_DTYPE_F32 || t == TRN_DTYPE_F64;
}

int trn_select_supports(trn_dtype t) {
    return is_float(t) || t == TRN_DTYPE_U8 || t == TRN_DTYPE_I8 || t == TRN_DTYPE_I16 ||
           t == TRN_DTYPE_I32 || t == TRN_DTYPE_I64;
}

// Index in the row of the selected element.
static int64_t select_row(const trn_select_desc *d, const void *row_base, int64_t row, void *buf) {
    const int64_t n = d->n, off = row * n;
    if (!is_float(d->dtype)) {
        ipair *v = buf;
        for (int64_t i = 0; i < n; i++)
            v[i].key = load_i(d->dtype, row_base, off + i), v[i].idx = i;
        const int64_t k = d->mode == TRN_SELECT_KTH ? d->k : (n - 1) / 2;
        select_i(v, n, k);
        return v[k].idx;
    }
    fpair *v = buf;
    int64_t nans = 0;
    for (int64_t i = 0; i < n; i++) {
        const double key = load_f(d->dtype, row_base, off + i);
        if (isnan(key)) {
            if (d->mode == TRN_SELECT_MEDIAN) return i;  // the first NaN
            nans++;
        }
        v[i].key = key, v[i].idx = i;
    }
    const int64_t m = n - nans;
    // (m - 1) / 2 truncates toward zero: an all-NaN row selects rank 0, a NaN.
    const int64_t k = d->mode == TRN_SELECT_KTH ? d->k : (m - 1) / 2;
    select_f(v, n, k);
    return v[k].idx;
}

static void select_piece(void *ctx, int64_t r0, int64_t r1) {
    const select_args *a = ctx;
    const trn_select_desc *d = &a->d;
    void *buf = trn__piece_malloc(a->status, (size_t)d->n * sizeof(fpair));
    if (buf == NULL) return;  // the task reports it
    const size_t es = trn_dtype_size(d->dtype);
    for (int64_t r = r0; r < r1; r++) {
        const int64_t j = select_row(d, d->x, r, buf);
        memcpy((char *)d->values + (size_t)r * es, (const char *)d->x + (size_t)(r * d->n + j) * es,
               es);
        if (d->indices) d->indices[r] = j;
    }
    free(buf);
}

static trn_status select_task(void *args) {
    select_args *a = args;
    const trn_select_desc *d = &a->d;
    const size_t es = trn_dtype_size(d->dtype);
    const size_t in_b = (size_t)(d->rows * d->n) * es, out_b = (size_t)d->rows * es;
    trn__access_set rg = {.count = 0};
    trn__access_add(&rg, d->x, in_b);
    trn__access_add(&rg, d->values, out_b);
    trn__access_add(&rg, d->indices, (size_t)d->rows * 8);
    trn_status st = trn__access_begin(&rg);
    if (st != TRN_SUCCESS) return st;
    trn__piece_status status;
    trn__piece_status_init(&status);
    a->status = &status;
    const int64_t grain = d->n >= GRAIN ? 1 : GRAIN / d->n;
    trn_parallel_for(d->rows, grain, select_piece, a);
    trn__access_end(&rg);
    return trn__piece_status_raise(&status, "select");
}

trn_status trn_select_launch(trn_stream *stream, const trn_select_desc *d) {
    if (stream == NULL || d == NULL) return trn__check_launch(stream, d, "trn_select_launch");
    if (!trn_select_supports(d->dtype))
        return trn__set_error(TRN_ERROR_UNSUPPORTED, "trn_select_launch: dtype %s is not supported",
                              trn_dtype_name(d->dtype));
    if ((unsigned)d->mode >= TRN_SELECT_MODE_COUNT)
        return trn__set_error(TRN_ERROR_INVALID_ARGUMENT, "trn_select_launch: unknown mode %d",
                              (int)d->mode);
    int64_t t;
    if (d->rows < 0 || d->n < 0 || (d->rows > 0 && d->n == 0) ||
        __builtin_mul_overflow(d->rows, d->n, &t) || __builtin_mul_overflow(t, 16, &t))
        return trn__set_error(TRN_ERROR_INVALID_ARGUMENT,
                              "trn_select_launch: invalid shape [%lld, %lld]", (long long)d->rows,
                              (long long)d->n);
    if (d->mode == TRN_SELECT_KTH && (d->k < 0 || d->k >= d->n) && d->rows > 0)
        return trn__set_error(TRN_ERROR_INVALID_ARGUMENT,
                              "trn_select_launch: k = %lld is outside [0, %lld)", (long long)d->k,
                              (long long)d->n);
    trn_status st = trn__fork_check();
    if (st != TRN_SUCCESS || d->rows == 0) return st;
    if (d->x == NULL || d->values == NULL)
        return trn__set_error(TRN_ERROR_INVALID_ARGUMENT, "trn_select_launch: x or values is NULL");
    select_args a = {*d, NULL};
    return trn_stream_launch(stream, select_task, &a, sizeof a);
}
