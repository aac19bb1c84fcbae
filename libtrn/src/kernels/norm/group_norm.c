// group_norm.c - owns the group norm forward/backward kernels (trn/group_norm.h).
//
// A (batch item, group) pair is one contiguous row of (channels / groups) *
// spatial elements: both passes split these rows across the thread pool.
// Statistics are summed in double per channel run, so they do not depend on
// how the work is split. The backward pass stores each (batch item,
// channel)'s sums of dy * x and dy in a scratch buffer; dweight / dbias are
// then reduced over the batch from it (channels * n values, done serially).
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "norm_common.h"
#include "trn/group_norm.h"

// Elements per parallel piece.
#define GRAIN 32768

typedef struct gn_args {
    trn_dtype dtype, pdt, sdt;
    int64_t n, channels, spatial, groups;
    const void *x, *dy, *weight, *bias, *mean_in, *rstd_in;
    void *y, *mean, *rstd, *dx, *dweight, *dbias;
    double eps;
    int backward;
} gn_args;

_Static_assert(sizeof(gn_args) <= TRN_TASK_MAX_ARGS, "group norm args too large");

// Per-launch state shared by the pieces.
typedef struct gn_run {
    const gn_args *a;
    double *sums;  // backward: [n, channels, 2] (sum dy (x - mean), sum dy), or NULL
} gn_run;

static double param_or(const gn_args *a, const void *p, int64_t c, double dflt) {
    return p ? trn__load_real(a->pdt, p, c) : dflt;
}

#define DEFINE_GN(E, N, T, C, V, LD, ST)                                                           \
    static void fwd_##N(void *ctx, int64_t r0, int64_t r1) {                                       \
        const gn_args *a = ((const gn_run *)ctx)->a;                                               \
        const int64_t S = a->spatial, cg = a->channels / a->groups, len = cg * S;                  \
        for (int64_t r = r0; r < r1; r++) {                                                        \
            const T *x = (const T *)a->x + r * len;                                                \
            T *y = (T *)a->y + r * len;                                                            \
            /* Sums in double: sequential scalar loops either way (no  */                          \
            /* reassociation), and a float sum of 100 +- 1 data is off */                          \
            /* by more than CPU's.                                      */                         \
            double sum = 0, sq = 0;                                                                \
            for (int64_t i = 0; i < len; i++) sum += (double)LD(x[i]);                             \
            const double mean = sum / (double)len;                                                 \
            for (int64_t i = 0; i < len; i++) {                                                    \
                const double d = (double)LD(x[i]) - mean;                                          \
                sq += d * d;                                                                       \
            }                                                                                      \
            const double rstd = 1.0 / sqrt(sq / (double)len + a->eps);                             \
            if (a->mean) trn__store_real(a->sdt, a->mean, r, mean);                                \
            if (a->rstd) trn__store_real(a->sdt, a->rstd, r, rstd);                                \
            const int64_t c0 = (r % a->groups) * cg;                                               \
            for (int64_t c = 0; c < cg; c++) {                                                     \
                const double w = param_or(a, a->weight, c0 + c, 1.0);                              \
                const double b = param_or(a, a->bias, c0 + c, 0.0);                                \
                /* (x - mean) * alpha + b, the mean as hi + lo floats:  */                         \
                /* x * alpha + (b - mean * alpha) cancels large terms.  */                         \
                const C alpha = (C)(rstd * w), beta = (C)b;                                        \
                const C mhi = (C)mean, mlo = (C)(mean - (double)mhi);                              \
                const T *xc = x + c * S;                                                           \
                T *yc = y + c * S;                                                                 \
                for (int64_t i = 0; i < S; i++)                                                    \
                    yc[i] = ST((((C)LD(xc[i]) - mhi) - mlo) * alpha + beta);                       \
            }                                                                                      \
        }                                                                                          \
    }                                                                                              \
    static void bwd_##N(void *ctx, int64_t r0, int64_t r1) {                                       \
        const gn_run *run = ctx;                                                                   \
        const gn_args *a = run->a;                                                                 \
        const int64_t S = a->spatial, cg = a->channels / a->groups, len = cg * S;                  \
        for (int64_t r = r0; r < r1; r++) {                                                        \
            const T *x = (const T *)a->x + r * len;                                                \
            const T *dy = (const T *)a->dy + r * len;                                              \
            const int64_t c0 = (r % a->groups) * cg;                                               \
            const double mean = trn__load_real(a->sdt, a->mean_in, r);                             \
            const double rstd = trn__load_real(a->sdt, a->rstd_in, r);                             \
            /* sums of w dy (x - mean) and w dy, in double: centred, */                            \
            /* so a large mean does not cancel them.                  */                           \
            double sum1 = 0, sum2 = 0;                                                             \
            for (int64_t c = 0; c < cg; c++) {                                                     \
                double ds = 0, db = 0;                                                             \
                for (int64_t i = 0; i < S; i++) {                                                  \
                    const double g = (double)LD(dy[c * S + i]);                                    \
                    ds += g * ((double)LD(x[c * S + i]) - mean);                                   \
                    db += g;                                                                       \
                }                                                                                  \
                const double w = param_or(a, a->weight, c0 + c, 1.0);                              \
                sum1 += ds * w;                                                                    \
                sum2 += db * w;                                                                    \
                if (run->sums) {                                                                   \
                    double *o = run->sums + 2 * ((r / a->groups) * a->channels + c0 + c);          \
                    o[0] = ds;                                                                     \
                    o[1] = db;                                                                     \
                }                                                                                  \
            }                                                                                      \
            if (!a->dx) continue;                                                                  \
            const double s = 1.0 / (double)len;                                                    \
            const double bc = -sum1 * rstd * rstd * rstd * s;                                      \
            const double cc = -sum2 * rstd * s;                                                    \
            const C mhi = (C)mean, mlo = (C)(mean - (double)mhi);                                  \
            T *dx = (T *)a->dx + r * len;                                                          \
            for (int64_t c = 0; c < cg; c++) {                                                     \
                const C k = (C)(rstd * param_or(a, a->weight, c0 + c, 1.0));                       \
                const C b = (C)bc, cst = (C)cc;                                                    \
                for (int64_t i = 0; i < S; i++)                                                    \
                    dx[c * S + i] = ST(k * (C)LD(dy[c * S + i]) +                                  \
                                       b * (((C)LD(x[c * S + i]) - mhi) - mlo) + cst);             \
            }                                                                                      \
        }                                                                                          \
    }

TRN_KIT_FLOAT_TYPES(DEFINE_GN)

typedef void (*piece_fn)(void *, int64_t, int64_t);

static void pick(trn_dtype d, piece_fn *fwd, piece_fn *bwd) {
    switch (d) {
#define CASE(E, N, ...)                                                                            \
    case E:                                                                                        \
        *fwd = fwd_##N;                                                                            \
        *bwd = bwd_##N;                                                                            \
        return;
        TRN_KIT_FLOAT_TYPES(CASE)
#undef CASE
    default: *fwd = *bwd = NULL;
    }
}

int trn_group_norm_supports(trn_dtype dtype, trn_dtype param_dtype, trn_dtype stat_dtype) {
    return trn__norm_dtype_pair_ok(dtype, param_dtype) &&
           trn__norm_dtype_pair_ok(dtype, stat_dtype);
}

// dweight / dbias from the per-(batch item, channel) sums.
static void reduce_params(const gn_args *a, const double *sums) {
    const int64_t cg = a->channels / a->groups;
    for (int64_t c = 0; c < a->channels; c++) {
        double gw = 0, gb = 0;
        for (int64_t b = 0; b < a->n && a->spatial > 0; b++) {
            const double *s = sums + 2 * (b * a->channels + c);
            const int64_t r = b * a->groups + c / cg;
            const double rstd = trn__load_real(a->sdt, a->rstd_in, r);
            gw += s[0] * rstd;  // s[0]: sum of dy (x - mean)
            gb += s[1];
        }
        if (a->dweight) trn__store_real(a->pdt, a->dweight, c, gw);
        if (a->dbias) trn__store_real(a->pdt, a->dbias, c, gb);
    }
}

static trn_status gn_task(void *args) {
    const gn_args *a = args;
    const size_t data = (size_t)(a->n * a->channels * a->spatial) * trn_dtype_size(a->dtype);
    const size_t par = (size_t)a->channels * trn_dtype_size(a->pdt);
    const size_t stat = (size_t)(a->n * a->groups) * trn_dtype_size(a->sdt);
    trn__access_set rg = {.count = 0};
    trn__access_add(&rg, a->x, data);
    trn__access_add(&rg, a->dy, data);
    trn__access_add(&rg, a->y, data);
    trn__access_add(&rg, a->dx, data);
    trn__access_add(&rg, a->weight, par);
    trn__access_add(&rg, a->bias, par);
    trn__access_add(&rg, a->dweight, par);
    trn__access_add(&rg, a->dbias, par);
    trn__access_add(&rg, a->backward ? a->mean_in : a->mean, stat);
    trn__access_add(&rg, a->backward ? a->rstd_in : a->rstd, stat);
    trn_status st = trn__access_begin(&rg);
    gn_run run = {a, NULL};
    if (st == TRN_SUCCESS && a->backward && (a->dweight || a->dbias)) {
        run.sums = calloc((size_t)(a->n * a->channels) * 2 + 1, sizeof(double));
        if (run.sums == NULL)
            st = trn__set_error(TRN_ERROR_OUT_OF_MEMORY, "group norm: out of host memory");
    }
    if (st == TRN_SUCCESS) {
        piece_fn fwd, bwd;
        pick(a->dtype, &fwd, &bwd);
        const int64_t len = a->channels / a->groups * a->spatial;
        const int64_t grain = trn__grain(GRAIN, len);
        if (len > 0) {
            trn_parallel_for(a->n * a->groups, grain, a->backward ? bwd : fwd, &run);
        } else if (!a->backward) {
            // Empty groups: mean 0 and rstd NaN (the 0 / 0 variance), as CPU.
            for (int64_t r = 0; r < a->n * a->groups; r++) {
                if (a->mean) trn__store_real(a->sdt, a->mean, r, 0.0);
                if (a->rstd) trn__store_real(a->sdt, a->rstd, r, NAN);
            }
        }
        if (run.sums) reduce_params(a, run.sums);
    }
    free(run.sums);
    trn__access_end(&rg);
    return st;
}

static trn_status check_common(trn_stream *stream, const void *d, trn_dtype dtype, trn_dtype pd,
                               trn_dtype sd, int64_t n, int64_t channels, int64_t spatial,
                               int64_t groups, const char *fn) {
    trn_status st = trn__norm_check_dtypes(stream, d, trn_group_norm_supports(dtype, pd, sd), fn,
                                           dtype, "params", pd, "stats", sd);
    if (st != TRN_SUCCESS) return st;
    int64_t k;
    if (n < 0 || channels < 0 || spatial < 0 || groups <= 0 || channels % groups != 0 ||
        __builtin_mul_overflow(n, channels, &k) || __builtin_mul_overflow(k, spatial, &k) ||
        __builtin_mul_overflow(k, 8, &k))
        return trn__set_error(
            TRN_ERROR_INVALID_ARGUMENT, "%s: invalid sizes [%lld, %lld, %lld] with %lld groups", fn,
            (long long)n, (long long)channels, (long long)spatial, (long long)groups);
    return trn__fork_check();
}

trn_status trn_group_norm_launch(trn_stream *stream, const trn_group_norm_desc *d) {
    trn_status st =
        check_common(stream, d, d ? d->dtype : TRN_DTYPE_F32, d ? d->param_dtype : TRN_DTYPE_F32,
                     d ? d->stat_dtype : TRN_DTYPE_F32, d ? d->n : 0, d ? d->channels : 0,
                     d ? d->spatial : 0, d ? d->groups : 1, "trn_group_norm_launch");
    if (st != TRN_SUCCESS || d->n * d->channels == 0) return st;
    if (d->spatial > 0 && (d->x == NULL || d->y == NULL))
        return trn__set_error(TRN_ERROR_INVALID_ARGUMENT, "trn_group_norm_launch: x or y is NULL");
    const gn_args a = {.dtype = d->dtype,
                       .pdt = d->param_dtype,
                       .sdt = d->stat_dtype,
                       .n = d->n,
                       .channels = d->channels,
                       .spatial = d->spatial,
                       .groups = d->groups,
                       .x = d->x,
                       .weight = d->weight,
                       .bias = d->bias,
                       .y = d->y,
                       .mean = d->mean,
                       .rstd = d->rstd,
                       .eps = d->eps};
    return trn_stream_launch(stream, gn_task, &a, sizeof a);
}

trn_status trn_group_norm_backward_launch(trn_stream *stream,
                                          const trn_group_norm_backward_desc *d) {
    trn_status st =
        check_common(stream, d, d ? d->dtype : TRN_DTYPE_F32, d ? d->param_dtype : TRN_DTYPE_F32,
                     d ? d->stat_dtype : TRN_DTYPE_F32, d ? d->n : 0, d ? d->channels : 0,
                     d ? d->spatial : 0, d ? d->groups : 1, "trn_group_norm_backward_launch");
    if (st != TRN_SUCCESS || d->channels == 0) return st;
    const int64_t numel = d->n * d->channels * d->spatial;
    if ((numel > 0 && (d->x == NULL || d->dy == NULL)) ||
        (d->n > 0 && (d->mean == NULL || d->rstd == NULL)))
        return trn__set_error(TRN_ERROR_INVALID_ARGUMENT,
                              "trn_group_norm_backward_launch: an input pointer is NULL");
    const gn_args a = {.backward = 1,
                       .dtype = d->dtype,
                       .pdt = d->param_dtype,
                       .sdt = d->stat_dtype,
                       .n = d->n,
                       .channels = d->channels,
                       .spatial = d->spatial,
                       .groups = d->groups,
                       .x = numel > 0 ? d->x : NULL,
                       .dy = numel > 0 ? d->dy : NULL,
                       .mean_in = d->n > 0 ? d->mean : NULL,
                       .rstd_in = d->n > 0 ? d->rstd : NULL,
                       .weight = d->weight,
                       .dx = numel > 0 ? d->dx : NULL,
                       .dweight = d->dweight,
                       .dbias = d->dbias};
    return trn_stream_launch(stream, gn_task, &a, sizeof a);
}
