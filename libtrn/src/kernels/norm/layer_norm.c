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

// dx of four rows (x0..x3, dy0..dy3, dx0..dx3, mn, rs, S1, S2, gw4, gb4 in scope; w or
// not by WI) and their dweight / dbias terms added to the block's partials
// once per column: the four products in double, summed pairwise, then to
// gw / gb. Row by row, the partials' double loads, adds and stores were
// about as much work as dx itself (dx alone 36.5 us, with the partials
// 64 us for BERT's [512, 256] at one thread). Each dx is LN_DX_ROW's.
// ivdep: the twelve row pointers and the partials never overlap, and the
// vectorizer's alias checks for so many (restrict on locals is not used)
// fell back to the scalar loop: 2.8x slower than row by row.
#define LN_DX4_COL(C, LD, ST, WI)                                                                  \
    _Pragma("GCC ivdep") for (int64_t i = 0; i < n; i++) {                                         \
        const C g0 = (C)LD(dy0[i]), g1 = (C)LD(dy1[i]), g2 = (C)LD(dy2[i]), g3 = (C)LD(dy3[i]);    \
        const C h0 = ((C)LD(x0[i]) - mn[0]) * rs[0], h1 = ((C)LD(x1[i]) - mn[1]) * rs[1];          \
        const C h2 = ((C)LD(x2[i]) - mn[2]) * rs[2], h3 = ((C)LD(x3[i]) - mn[3]) * rs[3];          \
        dx0[i] = ST(rs[0] * (g0 * (WI)-S1[0] - h0 * S2[0]));                                       \
        dx1[i] = ST(rs[1] * (g1 * (WI)-S1[1] - h1 * S2[1]));                                       \
        dx2[i] = ST(rs[2] * (g2 * (WI)-S1[2] - h2 * S2[2]));                                       \
        dx3[i] = ST(rs[3] * (g3 * (WI)-S1[3] - h3 * S2[3]));                                       \
        gw4[i] +=                                                                                  \
            ((double)(g0 * h0) + (double)(g1 * h1)) + ((double)(g2 * h2) + (double)(g3 * h3));     \
        gb4[i] += ((double)g0 + (double)g1) + ((double)g2 + (double)g3);                           \
    }

// v = the L elements at p as a V of C: one vector load when T is C, else
// converted lane by lane (LD).
#define LN_LOADV(V, C, T, LD, p, v)                                                                \
    do {                                                                                           \
        if (sizeof(T) == sizeof(C)) {                                                              \
            memcpy(&(v), (p), sizeof(v));                                                          \
        } else {                                                                                   \
            C t_[TRN_VLANES(V, C)];                                                                \
            for (int j = 0; j < TRN_VLANES(V, C); j++) t_[j] = (C)LD((p)[j]);                      \
            memcpy(&(v), t_, sizeof(v));                                                           \
        }                                                                                          \
    } while (0)

// totals[rr] += the sum over row rr (xs[rr], n elements) of EXPR, squared
// when SQ is 1, for R rows at once: lanes of V accumulate the whole lane
// groups (VEXPR: EXPR on a loaded vector), moved to the double total every
// TRN_VFLUSH_ELEMS elements (vec_sum.h), then the tail (EXPR uses xr, rr, i
// and j). Each row's sum is the same for any R; the rows only interleave:
// one row's sum is a chain of dependent vector adds, then of double adds
// (the flush), so rows of 256 floats one at a time were latency-bound.
#define LN_CHUNKS_ROWS(V, C, T, LD, R, xs, VEXPR, EXPR, totals, SQ)                                \
    do {                                                                                           \
        const int64_t nv_ = n - n % L;                                                             \
        for (int64_t i0 = 0; i0 < nv_; i0 += TRN_VFLUSH_ELEMS) {                                   \
            const int64_t i1 = nv_ - i0 < TRN_VFLUSH_ELEMS ? nv_ : i0 + TRN_VFLUSH_ELEMS;          \
            V acc_[R];                                                                             \
            memset(acc_, 0, sizeof acc_);                                                          \
            for (int64_t i = i0; i < i1; i += L) {                                                 \
                _Pragma("GCC unroll 4") for (int rr = 0; rr < (R); rr++) {                         \
                    V v_;                                                                          \
                    LN_LOADV(V, C, T, LD, (xs)[rr] + i, v_);                                       \
                    v_ = VEXPR(v_);                                                                \
                    acc_[rr] += (SQ) ? v_ * v_ : v_;                                               \
                }                                                                                  \
            }                                                                                      \
            for (int j_ = 0; j_ < L; j_++)                                                         \
                _Pragma("GCC unroll 4") for (int rr = 0; rr < (R); rr++)(totals)[rr] +=            \
                    acc_[rr][j_];                                                                  \
        }                                                                                          \
        _Pragma("GCC unroll 4") for (int rr = 0; rr < (R); rr++) {                                 \
            const T *xr = (xs)[rr];                                                                \
            C tail_ = 0;                                                                           \
            for (int64_t i = nv_; i < n; i++) {                                                    \
                const int j = 0;                                                                   \
                const C e_ = (EXPR);                                                               \
                tail_ += (SQ) ? e_ * e_ : e_;                                                      \
            }                                                                                      \
            (totals)[rr] += (double)tail_;                                                         \
        }                                                                                          \
    } while (0)
#define LN_V_ID(v) (v)
#define LN_V_CENTER(v) (((v)-mhi[rr]) - mlo[rr])

// The forward of R rows from r (a, n, w, b in scope): statistics for the R
// rows together (LN_CHUNKS_ROWS), then each row's y and stats as before.
#define LN_FWD_ROWS(V, C, T, LD, ST, R)                                                            \
    do {                                                                                           \
        const int L = TRN_VLANES(V, C);                                                            \
        const T *xs[R];                                                                            \
        for (int rr = 0; rr < (R); rr++) xs[rr] = (const T *)a->x + (r + rr) * n;                  \
        /* Lane sums flushed to double every TRN_VFLUSH_ELEMS: the  */                             \
        /* mean of 100 +- 1 data stays exact to a few roundings.    */                             \
        double sum[R], sq[R], dmean[R];                                                            \
        C mhi[R], mlo[R], rstd[R];                                                                 \
        for (int rr = 0; rr < (R); rr++) sum[rr] = sq[rr] = 0;                                     \
        LN_CHUNKS_ROWS(V, C, T, LD, R, xs, LN_V_ID, (C)LD(xr[i + j]), sum, 0);                     \
        for (int rr = 0; rr < (R); rr++) {                                                         \
            dmean[rr] = sum[rr] / (double)n;                                                       \
            /* x - mean with the mean as hi + lo floats (x - hi exact). */                         \
            C hi_ = (C)dmean[rr];                                                                  \
            /* GCC 12's vectorizer dropped the rounding of dmean to C  */                          \
            /* here (lo came out 0 for 4 rows): the empty asm makes it */                          \
            /* use the rounded value.                                  */                          \
            __asm__("" : "+x"(hi_));                                                               \
            mhi[rr] = hi_;                                                                         \
            mlo[rr] = (C)(dmean[rr] - (double)hi_);                                                \
        }                                                                                          \
        LN_CHUNKS_ROWS(V, C, T, LD, R, xs, LN_V_CENTER, ((C)LD(xr[i + j]) - mhi[rr]) - mlo[rr],    \
                       sq, 1);                                                                     \
        for (int rr = 0; rr < (R); rr++) rstd[rr] = (C)(1.0 / sqrt(sq[rr] / (double)n + a->eps));  \
        for (int rr = 0; rr < (R); rr++) {                                                         \
            const T *x = xs[rr];                                                                   \
            T *y = (T *)a->y + (r + rr) * n;                                                       \
            const C hi = mhi[rr], lo = mlo[rr], rs = rstd[rr];                                     \
            if (w && b)                                                                            \
                for (int64_t i = 0; i < n; i++)                                                    \
                    y[i] = ST((((C)LD(x[i]) - hi) - lo) * rs * w[i] + b[i]);                       \
            else if (w)                                                                            \
                for (int64_t i = 0; i < n; i++) y[i] = ST((((C)LD(x[i]) - hi) - lo) * rs * w[i]);  \
            else                                                                                   \
                for (int64_t i = 0; i < n; i++)                                                    \
                    y[i] = ST((((C)LD(x[i]) - hi) - lo) * rs + (b ? b[i] : (C)0));                 \
            if (a->mean) trn__store_real(a->stat_dtype, a->mean, r + rr, dmean[rr]);               \
            if (a->rstd) trn__store_real(a->stat_dtype, a->rstd, r + rr, (double)rs);              \
        }                                                                                          \
    } while (0)

// Rows go 4 at a time through the statistics (LN_FWD_ROWS), the rest one
// by one; every row's arithmetic is the same either way.
#define DEFINE_LN(E, N, T, C, V, LD, ST)                                                           \
    static void fwd_##N(void *ctx, int64_t r0, int64_t r1) {                                       \
        const ln_run *run = ctx;                                                                   \
        const ln_args *a = run->a;                                                                 \
        const int64_t n = a->cols;                                                                 \
        const C *w = run->w, *b = run->b;                                                          \
        int64_t r = r0;                                                                            \
        for (; r + 4 <= r1; r += 4) LN_FWD_ROWS(V, C, T, LD, ST, 4);                               \
        for (; r < r1; r++) LN_FWD_ROWS(V, C, T, LD, ST, 1);                                       \
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
            int64_t r = r0;                                                                        \
            if (a->dx != NULL)                                                                     \
                for (; r + 4 <= r1; r += 4) {                                                      \
                    C mn[4], rs[4], S1[4], S2[4];                                                  \
                    for (int rr = 0; rr < 4; rr++) {                                               \
                        const T *x = (const T *)a->x + (r + rr) * n;                               \
                        const T *dy = (const T *)a->dy + (r + rr) * n;                             \
                        const C mean = (C)trn__load_real(a->stat_dtype, a->mean_in, r + rr);       \
                        const C rstd = (C)trn__load_real(a->stat_dtype, a->rstd_in, r + rr);       \
                        DX_ROW_SUMS(C, V, LD);                                                     \
                        mn[rr] = mean;                                                             \
                        rs[rr] = rstd;                                                             \
                        S1[rr] = s1;                                                               \
                        S2[rr] = s2;                                                               \
                    }                                                                              \
                    const T *restrict x0 = (const T *)a->x + r * n, *restrict x1 = x0 + n;         \
                    const T *restrict x2 = x1 + n, *restrict x3 = x2 + n;                          \
                    const T *restrict dy0 = (const T *)a->dy + r * n, *restrict dy1 = dy0 + n;     \
                    const T *restrict dy2 = dy1 + n, *restrict dy3 = dy2 + n;                      \
                    T *restrict dx0 = (T *)a->dx + r * n, *restrict dx1 = dx0 + n;                 \
                    T *restrict dx2 = dx1 + n, *restrict dx3 = dx2 + n;                            \
                    double *restrict gw4 = gw, *restrict gb4 = gb;                                 \
                    if (w)                                                                         \
                        LN_DX4_COL(C, LD, ST, w[i])                                                \
                    else                                                                           \
                        LN_DX4_COL(C, LD, ST, (C)1)                                                \
                }                                                                                  \
            for (; r < r1; r++) {                                                                  \
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
