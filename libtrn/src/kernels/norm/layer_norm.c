// layer_norm.c - owns the layer norm forward/backward kernels (trn/norm.h):
// their per-row math; checks and the row driver are norm_common.h's.
//
// Rows are independent: the forward and the dx-only backward split rows
// across the thread pool. With dweight/dbias the backward is one pass over
// blocks of TRN__NORM_ROWBLOCK rows: each block writes its dx rows and its
// own double column partials, which the driver sums over blocks in order
// (no shared accumulator; the bits do not depend on the threads). weight/bias are
// converted once per launch into a compute-type buffer, so the per-element
// loops never switch on the parameter dtype.
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "norm_common.h"
#include "trn/norm.h"

#define ROWBLOCK TRN__NORM_ROWBLOCK

typedef trn__row_norm_args ln_args;

// Per-launch state shared by the pieces.
typedef trn__row_norm_ctx ln_run;

// Row sums: vector partial sums (vec_sum.h).

// acc1 += dy * w, acc2 += dy * w * xhat over the whole vectors of a row.
#define DX_SUMS(C, V, LD, WJ)                                                                      \
    for (int64_t i = 0; i < nv; i += L) {                                                          \
        C g[TRN_VLANES(V, C)], xh[TRN_VLANES(V, C)];                                               \
        for (int j = 0; j < L; j++) {                                                              \
            g[j] = (C)LD(dy[i + j]) * (WJ);                                                        \
            xh[j] = ((C)LD(x[i + j]) - mean) * rstd;                                               \
        }                                                                                          \
        V gv, xv;                                                                                  \
        memcpy(&gv, g, sizeof gv);                                                                 \
        memcpy(&xv, xh, sizeof xv);                                                                \
        acc1 += gv;                                                                                \
        acc2 += gv * xv;                                                                           \
    }

// s1 = mean of dy * w, s2 = mean of dy * w * xhat over the row (x, dy,
// mean, rstd, n and w in scope): the dx formula's two row constants.
#define DX_ROW_SUMS(C, V, LD)                                                                      \
    const int L = TRN_VLANES(V, C);                                                                \
    const int64_t nv = n - n % L;                                                                  \
    V acc1 = {0}, acc2 = {0};                                                                      \
    /* unswitched on w: a select here defeats the vectorizer */                                    \
    if (w) {                                                                                       \
        DX_SUMS(C, V, LD, w[i + j]);                                                               \
    } else {                                                                                       \
        DX_SUMS(C, V, LD, (C)1);                                                                   \
    }                                                                                              \
    C s1 = 0, s2 = 0;                                                                              \
    for (int j = 0; j < L; j++) {                                                                  \
        s1 += acc1[j];                                                                             \
        s2 += acc2[j];                                                                             \
    }                                                                                              \
    for (int64_t i = nv; i < n; i++) {                                                             \
        const C g = (C)LD(dy[i]) * (w ? w[i] : (C)1);                                              \
        s1 += g;                                                                                   \
        s2 += g * ((C)LD(x[i]) - mean) * rstd;                                                     \
    }                                                                                              \
    s1 /= (C)n;                                                                                    \
    s2 /= (C)n;

// total += sum over the row x[0..n) of EXPR (an expression of x[i + j]),
// squared when SQ is 1: lanes of V accumulate the whole lane groups, moved
// to the double total every TRN_VFLUSH_ELEMS elements (vec_sum.h), then the
// tail. Deterministic per shape.
#define LN_CHUNKS(V, C, EXPR, total, SQ)                                                           \
    do {                                                                                           \
        const int64_t nv_ = n - n % L;                                                             \
        for (int64_t i0 = 0; i0 < nv_; i0 += TRN_VFLUSH_ELEMS) {                                   \
            const int64_t i1 = nv_ - i0 < TRN_VFLUSH_ELEMS ? nv_ : i0 + TRN_VFLUSH_ELEMS;          \
            V acc_;                                                                                \
            memset(&acc_, 0, sizeof acc_);                                                         \
            for (int64_t i = i0; i < i1; i += L) {                                                 \
                C t_[TRN_VLANES(V, C)];                                                            \
                for (int j = 0; j < L; j++) t_[j] = (EXPR);                                        \
                V v_;                                                                              \
                memcpy(&v_, t_, sizeof v_);                                                        \
                acc_ += (SQ) ? v_ * v_ : v_;                                                       \
            }                                                                                      \
            TRN_VREDUCE(V, C, acc_, total);                                                        \
        }                                                                                          \
        C tail_ = 0;                                                                               \
        for (int64_t i = nv_; i < n; i++) {                                                        \
            const int j = 0;                                                                       \
            const C e_ = (EXPR);                                                                   \
            tail_ += (SQ) ? e_ * e_ : e_;                                                          \
        }                                                                                          \
        (total) += (double)tail_;                                                                  \
    } while (0)

// dx of one row (x, dy, dx, mean, rstd, w, s1, s2 in scope), then ACC(g, xh)
// per element with g = dy[i] and xh = (x[i] - mean) * rstd: nothing for dx
// alone, the block's dweight / dbias partials in the one-pass backward.
#define LN_DX_ROW(C, LD, ST, ACC)                                                                  \
    if (w)                                                                                         \
        for (int64_t i = 0; i < n; i++) {                                                          \
            const C g0 = (C)LD(dy[i]);                                                             \
            const C g = g0 * w[i];                                                                 \
            const C xh = ((C)LD(x[i]) - mean) * rstd;                                              \
            dx[i] = ST(rstd * (g - s1 - xh * s2));                                                 \
            ACC(g0, xh);                                                                           \
        }                                                                                          \
    else                                                                                           \
        for (int64_t i = 0; i < n; i++) {                                                          \
            const C g = (C)LD(dy[i]);                                                              \
            const C xh = ((C)LD(x[i]) - mean) * rstd;                                              \
            dx[i] = ST(rstd * (g - s1 - xh * s2));                                                 \
            ACC(g, xh);                                                                            \
        }
#define LN_DX_ONLY(g, xh) ((void)0)
#define LN_DX_PARTIALS(g, xh) (gw[i] += (double)((g) * (xh)), gb[i] += (double)(g))

#define DEFINE_LN(E, N, T, C, V, LD, ST)                                                           \
    static void fwd_##N(void *ctx, int64_t r0, int64_t r1) {                                       \
        const ln_run *run = ctx;                                                                   \
        const ln_args *a = run->a;                                                                 \
        const int64_t n = a->cols;                                                                 \
        const C *w = run->w, *b = run->b;                                                          \
        for (int64_t r = r0; r < r1; r++) {                                                        \
            const T *x = (const T *)a->x + r * n;                                                  \
            T *y = (T *)a->y + r * n;                                                              \
            const int L = TRN_VLANES(V, C);                                                        \
            /* Lane sums flushed to double every TRN_VFLUSH_ELEMS: the  */                         \
            /* mean of 100 +- 1 data stays exact to a few roundings.    */                         \
            double sum = 0, sq = 0;                                                                \
            LN_CHUNKS(V, C, (C)LD(x[i + j]), sum, 0);                                              \
            const double dmean = sum / (double)n;                                                  \
            /* x - mean with the mean as hi + lo floats (x - hi exact). */                         \
            const C mhi = (C)dmean, mlo = (C)(dmean - (double)mhi);                                \
            LN_CHUNKS(V, C, ((C)LD(x[i + j]) - mhi) - mlo, sq, 1);                                 \
            const C mean = mhi;                                                                    \
            const C rstd = (C)(1.0 / sqrt(sq / (double)n + a->eps));                               \
            if (w && b)                                                                            \
                for (int64_t i = 0; i < n; i++)                                                    \
                    y[i] = ST((((C)LD(x[i]) - mhi) - mlo) * rstd * w[i] + b[i]);                   \
            else if (w)                                                                            \
                for (int64_t i = 0; i < n; i++)                                                    \
                    y[i] = ST((((C)LD(x[i]) - mhi) - mlo) * rstd * w[i]);                          \
            else                                                                                   \
                for (int64_t i = 0; i < n; i++)                                                    \
                    y[i] = ST((((C)LD(x[i]) - mhi) - mlo) * rstd + (b ? b[i] : (C)0));             \
            if (a->mean) trn__store_real(a->stat_dtype, a->mean, r, dmean);                        \
            if (a->rstd) trn__store_real(a->stat_dtype, a->rstd, r, (double)rstd);                 \
            (void)mean;                                                                            \
        }                                                                                          \
    }                                                                                              \
    static void bwd_dx_##N(void *ctx, int64_t r0, int64_t r1) {                                    \
        const ln_run *run = ctx;                                                                   \
        const ln_args *a = run->a;                                                                 \
        const int64_t n = a->cols;                                                                 \
        const C *w = run->w;                                                                       \
        for (int64_t r = r0; r < r1; r++) {                                                        \
            const T *x = (const T *)a->x + r * n;                                                  \
            const T *dy = (const T *)a->dy + r * n;                                                \
            T *dx = (T *)a->dx + r * n;                                                            \
            const C mean = (C)trn__load_real(a->stat_dtype, a->mean_in, r);                        \
            const C rstd = (C)trn__load_real(a->stat_dtype, a->rstd_in, r);                        \
            DX_ROW_SUMS(C, V, LD);                                                                 \
            LN_DX_ROW(C, LD, ST, LN_DX_ONLY);                                                      \
        }                                                                                          \
    }                                                                                              \
    /* Row block blk (ROWBLOCK rows): dx when asked, and the block's */                            \
    /* dweight / dbias partials in double (a float sum over many   */                              \
    /* rows would round once per row: CPU's error or worse), summed */                             \
    /* in row order into part + blk * 2n (dweight then dbias); one  */                             \
    /* pass over dy and x instead of a second column walk.          */                             \
    static void bwd_dxw_##N(void *ctx, int64_t b0, int64_t b1) {                                   \
        const ln_run *run = ctx;                                                                   \
        const ln_args *a = run->a;                                                                 \
        const int64_t n = a->cols;                                                                 \
        const C *w = run->w;                                                                       \
        for (int64_t blk = b0; blk < b1; blk++) {                                                  \
            double *gw = run->part + blk * 2 * n, *gb = gw + n;                                    \
            for (int64_t i = 0; i < n; i++) gw[i] = gb[i] = 0;                                     \
            const int64_t r0 = blk * ROWBLOCK;                                                     \
            const int64_t r1 = a->rows - r0 < ROWBLOCK ? a->rows : r0 + ROWBLOCK;                  \
            for (int64_t r = r0; r < r1; r++) {                                                    \
                const T *x = (const T *)a->x + r * n;                                              \
                const T *dy = (const T *)a->dy + r * n;                                            \
                const C mean = (C)trn__load_real(a->stat_dtype, a->mean_in, r);                    \
                const C rstd = (C)trn__load_real(a->stat_dtype, a->rstd_in, r);                    \
                if (a->dx == NULL) {                                                               \
                    for (int64_t i = 0; i < n; i++) {                                              \
                        const C g = (C)LD(dy[i]);                                                  \
                        gw[i] += (double)(g * (((C)LD(x[i]) - mean) * rstd));                      \
                        gb[i] += (double)g;                                                        \
                    }                                                                              \
                    continue;                                                                      \
                }                                                                                  \
                T *dx = (T *)a->dx + r * n;                                                        \
                DX_ROW_SUMS(C, V, LD);                                                             \
                LN_DX_ROW(C, LD, ST, LN_DX_PARTIALS);                                              \
            }                                                                                      \
        }                                                                                          \
    }

TRN_KIT_FLOAT_TYPES(DEFINE_LN)

int trn_layer_norm_supports(trn_dtype dtype, trn_dtype param_dtype, trn_dtype stat_dtype) {
    return trn__norm_dtype_pair_ok(dtype, param_dtype) &&
           trn__norm_dtype_pair_ok(dtype, stat_dtype);
}

static trn__row_norm_fns pick(trn_dtype d) {
    switch (d) {
#define CASE(E, N, ...)                                                                            \
    case E: return (trn__row_norm_fns){fwd_##N, bwd_dx_##N, NULL, bwd_dxw_##N};
        TRN_KIT_FLOAT_TYPES(CASE)
#undef CASE
    default: return (trn__row_norm_fns){NULL, NULL, NULL, NULL};
    }
}

static trn_status check_common(trn_stream *stream, const void *d, trn_dtype dtype, trn_dtype pd,
                               trn_dtype sd, int64_t rows, int64_t cols, const char *fn) {
    return trn__row_norm_check(stream, d, trn_layer_norm_supports(dtype, pd, sd), fn, dtype,
                               "params", pd, "stats", sd, rows, cols);
}

trn_status trn_layer_norm_launch(trn_stream *stream, const trn_layer_norm_desc *d) {
    trn_status st =
        check_common(stream, d, d ? d->dtype : TRN_DTYPE_F32, d ? d->param_dtype : TRN_DTYPE_F32,
                     d ? d->stat_dtype : TRN_DTYPE_F32, d ? d->rows : 0, d ? d->cols : 0,
                     "trn_layer_norm_launch");
    if (st != TRN_SUCCESS || d->rows == 0) return st;
    if (d->x == NULL || d->y == NULL)
        return trn__set_error(TRN_ERROR_INVALID_ARGUMENT, "trn_layer_norm_launch: x or y is NULL");
    const ln_args a = {.dtype = d->dtype,
                       .param_dtype = d->param_dtype,
                       .stat_dtype = d->stat_dtype,
                       .rows = d->rows,
                       .cols = d->cols,
                       .x = d->x,
                       .weight = d->weight,
                       .bias = d->bias,
                       .y = d->y,
                       .mean = d->mean,
                       .rstd = d->rstd,
                       .eps = d->eps,
                       .fns = pick(d->dtype),
                       .what = "layer norm"};
    return trn_stream_launch(stream, trn__row_norm_task, &a, sizeof a);
}

trn_status trn_layer_norm_backward_launch(trn_stream *stream,
                                          const trn_layer_norm_backward_desc *d) {
    trn_status st =
        check_common(stream, d, d ? d->dtype : TRN_DTYPE_F32, d ? d->param_dtype : TRN_DTYPE_F32,
                     d ? d->stat_dtype : TRN_DTYPE_F32, d ? d->rows : 0, d ? d->cols : 0,
                     "trn_layer_norm_backward_launch");
    if (st != TRN_SUCCESS) return st;
    if (d->rows == 0 && d->cols > 0 && (d->dweight || d->dbias)) {
        // No rows: the parameter grads are zero sums - still written.
    } else if (d->rows == 0) {
        return TRN_SUCCESS;
    }
    if (d->x == NULL || d->dy == NULL || d->mean == NULL || d->rstd == NULL)
        if (d->rows > 0)
            return trn__set_error(TRN_ERROR_INVALID_ARGUMENT,
                                  "trn_layer_norm_backward_launch: an input pointer is NULL");
    const ln_args a = {.backward = 1,
                       .dtype = d->dtype,
                       .param_dtype = d->param_dtype,
                       .stat_dtype = d->stat_dtype,
                       .rows = d->rows,
                       .cols = d->cols,
                       .x = d->x,
                       .dy = d->dy,
                       .mean_in = d->mean,
                       .rstd_in = d->rstd,
                       .weight = d->weight,
                       .dx = d->dx,
                       .dweight = d->dweight,
                       .dbias = d->dbias,
                       .fns = pick(d->dtype),
                       .what = "layer norm"};
    return trn_stream_launch(stream, trn__row_norm_task, &a, sizeof a);
}
