// rms_norm.c - owns the RMS norm forward/backward kernels (trn/rms_norm.h):
// their per-row math; checks and the row driver are norm_common.h's.
//
// Rows are independent: the forward and the dx part of the backward split
// rows across the thread pool. dweight is a column sum over all rows: it
// splits the columns instead (each piece walks every row over its own column
// range, so pieces never share an accumulator). The weight is converted once
// per launch into a compute-type buffer, so the per-element loops never
// switch on its dtype.
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "norm_common.h"
#include "trn/rms_norm.h"

#define COLBLOCK TRN__NORM_COLBLOCK

typedef trn__row_norm_args rms_args;

// Per-launch state shared by the pieces.
typedef trn__row_norm_ctx rms_run;

#define DEFINE_RMS(E, N, T, C, V, LD, ST)                                                          \
    static void fwd_##N(void *ctx, int64_t r0, int64_t r1) {                                       \
        const rms_run *run = ctx;                                                                  \
        const rms_args *a = run->a;                                                                \
        const int64_t n = a->cols;                                                                 \
        const C *w = run->w;                                                                       \
        for (int64_t r = r0; r < r1; r++) {                                                        \
            const T *x = (const T *)a->x + r * n;                                                  \
            T *y = (T *)a->y + r * n;                                                              \
            double sq = 0;                                                                         \
            for (int64_t i = 0; i < n; i++) {                                                      \
                const double v = (double)LD(x[i]);                                                 \
                sq += v * v;                                                                       \
            }                                                                                      \
            const C rstd = (C)(1.0 / sqrt(sq / (double)n + a->eps));                               \
            if (w)                                                                                 \
                for (int64_t i = 0; i < n; i++) y[i] = ST((C)LD(x[i]) * rstd * w[i]);              \
            else                                                                                   \
                for (int64_t i = 0; i < n; i++) y[i] = ST((C)LD(x[i]) * rstd);                     \
            if (a->rstd) trn__store_real(a->stat_dtype, a->rstd, r, (double)rstd);                 \
        }                                                                                          \
    }                                                                                              \
    static void bwd_dx_##N(void *ctx, int64_t r0, int64_t r1) {                                    \
        const rms_run *run = ctx;                                                                  \
        const rms_args *a = run->a;                                                                \
        const int64_t n = a->cols;                                                                 \
        const C *w = run->w;                                                                       \
        for (int64_t r = r0; r < r1; r++) {                                                        \
            const T *x = (const T *)a->x + r * n;                                                  \
            const T *dy = (const T *)a->dy + r * n;                                                \
            T *dx = (T *)a->dx + r * n;                                                            \
            const C rstd = (C)trn__load_real(a->stat_dtype, a->rstd_in, r);                        \
            double dot = 0;                                                                        \
            for (int64_t i = 0; i < n; i++)                                                        \
                dot += (double)((C)LD(dy[i]) * (w ? w[i] : (C)1) * (C)LD(x[i]));                   \
            /* mean(w dy xhat) / ... folded: dx = rstd (g - x rstd^2 dot / n) */                   \
            const C k = (C)(dot * (double)rstd * (double)rstd / (double)n);                        \
            for (int64_t i = 0; i < n; i++) {                                                      \
                const C g = (C)LD(dy[i]) * (w ? w[i] : (C)1);                                      \
                dx[i] = ST(rstd * (g - (C)LD(x[i]) * k));                                          \
            }                                                                                      \
        }                                                                                          \
    }                                                                                              \
    /* Columns [blk * COLBLOCK, ...) of dweight. */                                                \
    static void bwd_dw_##N(void *ctx, int64_t b0, int64_t b1) {                                    \
        const rms_args *a = ((const rms_run *)ctx)->a;                                             \
        const int64_t n = a->cols;                                                                 \
        for (int64_t blk = b0; blk < b1; blk++) {                                                  \
            const int64_t c0 = blk * COLBLOCK;                                                     \
            const int64_t wd = n - c0 < COLBLOCK ? n - c0 : COLBLOCK;                              \
            C gw[COLBLOCK];                                                                        \
            for (int64_t j = 0; j < wd; j++) gw[j] = 0;                                            \
            for (int64_t r = 0; r < a->rows; r++) {                                                \
                const T *x = (const T *)a->x + r * n + c0;                                         \
                const T *dy = (const T *)a->dy + r * n + c0;                                       \
                const C rstd = (C)trn__load_real(a->stat_dtype, a->rstd_in, r);                    \
                for (int64_t j = 0; j < wd; j++) gw[j] += (C)LD(dy[j]) * ((C)LD(x[j]) * rstd);     \
            }                                                                                      \
            for (int64_t j = 0; j < wd; j++)                                                       \
                trn__store_real(a->param_dtype, a->dweight, c0 + j, (double)gw[j]);                \
        }                                                                                          \
    }

TRN_KIT_FLOAT_TYPES(DEFINE_RMS)

int trn_rms_norm_supports(trn_dtype dtype, trn_dtype param_dtype, trn_dtype stat_dtype) {
    if (!trn__is_float_dtype(dtype) || !trn__is_float_dtype(param_dtype)) return 0;
    return stat_dtype == (dtype == TRN_DTYPE_F64 ? TRN_DTYPE_F64 : TRN_DTYPE_F32);
}

static trn__row_norm_fns pick(trn_dtype d) {
    switch (d) {
#define CASE(E, N, ...)                                                                            \
    case E: return (trn__row_norm_fns){fwd_##N, bwd_dx_##N, bwd_dw_##N, NULL};
        TRN_KIT_FLOAT_TYPES(CASE)
#undef CASE
    default: return (trn__row_norm_fns){NULL, NULL, NULL, NULL};
    }
}

static trn_status check_common(trn_stream *stream, const void *d, trn_dtype dtype, trn_dtype pd,
                               trn_dtype sd, int64_t rows, int64_t cols, const char *fn) {
    return trn__row_norm_check(stream, d, trn_rms_norm_supports(dtype, pd, sd), fn, dtype, "weight",
                               pd, "rstd", sd, rows, cols);
}

trn_status trn_rms_norm_launch(trn_stream *stream, const trn_rms_norm_desc *d) {
    trn_status st = check_common(
        stream, d, d ? d->dtype : TRN_DTYPE_F32, d ? d->param_dtype : TRN_DTYPE_F32,
        d ? d->stat_dtype : TRN_DTYPE_F32, d ? d->rows : 0, d ? d->cols : 0, "trn_rms_norm_launch");
    if (st != TRN_SUCCESS || d->rows == 0) return st;
    if (d->x == NULL || d->y == NULL)
        return trn__set_error(TRN_ERROR_INVALID_ARGUMENT, "trn_rms_norm_launch: x or y is NULL");
    const rms_args a = {.dtype = d->dtype,
                        .param_dtype = d->param_dtype,
                        .stat_dtype = d->stat_dtype,
                        .rows = d->rows,
                        .cols = d->cols,
                        .x = d->x,
                        .weight = d->weight,
                        .y = d->y,
                        .rstd = d->rstd,
                        .eps = d->eps,
                        .fns = pick(d->dtype),
                        .what = "rms norm"};
    return trn_stream_launch(stream, trn__row_norm_task, &a, sizeof a);
}

trn_status trn_rms_norm_backward_launch(trn_stream *stream, const trn_rms_norm_backward_desc *d) {
    trn_status st =
        check_common(stream, d, d ? d->dtype : TRN_DTYPE_F32, d ? d->param_dtype : TRN_DTYPE_F32,
                     d ? d->stat_dtype : TRN_DTYPE_F32, d ? d->rows : 0, d ? d->cols : 0,
                     "trn_rms_norm_backward_launch");
    if (st != TRN_SUCCESS) return st;
    if (d->rows == 0 && !(d->cols > 0 && d->dweight)) return TRN_SUCCESS;
    if (d->rows > 0 && (d->x == NULL || d->dy == NULL || d->rstd == NULL))
        return trn__set_error(TRN_ERROR_INVALID_ARGUMENT,
                              "trn_rms_norm_backward_launch: an input pointer is NULL");
    const rms_args a = {.backward = 1,
                        .dtype = d->dtype,
                        .param_dtype = d->param_dtype,
                        .stat_dtype = d->stat_dtype,
                        .rows = d->rows,
                        .cols = d->cols,
                        .x = d->x,
                        .dy = d->dy,
                        .rstd_in = d->rstd,
                        .weight = d->weight,
                        .dx = d->dx,
                        .dweight = d->dweight,
                        .fns = pick(d->dtype),
                        .what = "rms norm"};
    return trn_stream_launch(stream, trn__row_norm_task, &a, sizeof a);
}
