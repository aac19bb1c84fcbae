// norm.c - owns the layer norm forward/backward kernels (trn/norm.h).
//
// Rows are independent: the forward and the dx part of the backward split
// rows across the thread pool. dweight/dbias are column sums over all rows:
// they split the columns instead (each piece walks every row over its own
// column range, so pieces never share an accumulator). weight/bias are
// converted once per launch into a compute-type buffer, so the per-element
// loops never switch on the parameter dtype.
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../../internal.h"
#include "../kit/real_io.h"
#include "../kit/vec_sum.h"
#include "trn/convert.h"
#include "trn/norm.h"
#include "trn/parallel.h"

#define LD_id(v) (v)
#define LD_f16(v) trn_half_to_float(v)
#define LD_bf16(v) trn_bf16_to_float(v)
#define ST_id(v) (v)
#define ST_f16(v) trn_float_to_half(v)
#define ST_bf16(v) trn_float_to_bf16(v)

// Elements per parallel piece.
#define GRAIN 16384
// Columns per piece of the dweight/dbias sums.
#define COLBLOCK 64

typedef struct ln_args {
    trn_dtype dtype, param_dtype, stat_dtype;
    int64_t rows, cols;
    const void *x, *dy, *weight, *bias;
    const void *mean_in, *rstd_in;
    void *y, *mean, *rstd, *dx, *dweight, *dbias;
    double eps;
    int backward;
} ln_args;

_Static_assert(sizeof(ln_args) <= TRN_TASK_MAX_ARGS, "layer norm args too large");

// Per-launch state shared by the pieces.
typedef struct ln_run {
    const ln_args *a;
    const void *w, *b;  // weight / bias in the compute type (NULL: absent)
} ln_run;

// Row sums: vector partial sums (vec_sum.h).

// acc1 += dy * w, acc2 += dy * w * xhat over the whole vectors of a row.
#define DX_SUMS(C, V, LD, WJ)                                                     \
    for (int64_t i = 0; i < nv; i += L) {                                         \
        C g[TRN_VLANES(V, C)], xh[TRN_VLANES(V, C)];                                      \
        for (int j = 0; j < L; j++) {                                             \
            g[j] = (C)LD(dy[i + j]) * (WJ);                                       \
            xh[j] = ((C)LD(x[i + j]) - mean) * rstd;                              \
        }                                                                         \
        V gv, xv;                                                                 \
        memcpy(&gv, g, sizeof gv);                                                \
        memcpy(&xv, xh, sizeof xv);                                               \
        acc1 += gv;                                                               \
        acc2 += gv * xv;                                                          \
    }

#define DEFINE_LN(N, T, C, V, LD, ST)                                               \
    static void fwd_##N(void *ctx, int64_t r0, int64_t r1) {                      \
        const ln_run *run = ctx;                                                  \
        const ln_args *a = run->a;                                                \
        const int64_t n = a->cols;                                                \
        const C *w = run->w, *b = run->b;                                         \
        for (int64_t r = r0; r < r1; r++) {                                       \
            const T *x = (const T *)a->x + r * n;                                 \
            T *y = (T *)a->y + r * n;                                             \
            const int L = TRN_VLANES(V, C);                                           \
            const int64_t nv = n - n % L;                                         \
            V acc = {0};                                                          \
            for (int64_t i = 0; i < nv; i += L) {                                 \
                C t[TRN_VLANES(V, C)];                                                \
                for (int j = 0; j < L; j++) t[j] = (C)LD(x[i + j]);               \
                V tv;                                                             \
                memcpy(&tv, t, sizeof tv);                                        \
                acc += tv;                                                        \
            }                                                                     \
            C s = 0;                                                              \
            for (int j = 0; j < L; j++) s += acc[j];                              \
            for (int64_t i = nv; i < n; i++) s += (C)LD(x[i]);                    \
            const C mean = s / (C)n;                                              \
            V vacc = {0};                                                         \
            for (int64_t i = 0; i < nv; i += L) {                                 \
                C t[TRN_VLANES(V, C)];                                                \
                for (int j = 0; j < L; j++) t[j] = (C)LD(x[i + j]) - mean;        \
                V tv;                                                             \
                memcpy(&tv, t, sizeof tv);                                        \
                vacc += tv * tv;                                                  \
            }                                                                     \
            C v = 0;                                                              \
            for (int j = 0; j < L; j++) v += vacc[j];                             \
            for (int64_t i = nv; i < n; i++) {                                    \
                const C d = (C)LD(x[i]) - mean;                                   \
                v += d * d;                                                       \
            }                                                                     \
            const C rstd = (C)1 / (C)sqrt((double)(v / (C)n) + a->eps);           \
            if (w && b)                                                           \
                for (int64_t i = 0; i < n; i++)                                   \
                    y[i] = ST(((C)LD(x[i]) - mean) * rstd * w[i] + b[i]);         \
            else if (w)                                                           \
                for (int64_t i = 0; i < n; i++)                                   \
                    y[i] = ST(((C)LD(x[i]) - mean) * rstd * w[i]);                \
            else                                                                  \
                for (int64_t i = 0; i < n; i++)                                   \
                    y[i] = ST(((C)LD(x[i]) - mean) * rstd + (b ? b[i] : (C)0));   \
            if (a->mean) trn__store_real(a->stat_dtype, a->mean, r, (double)mean);      \
            if (a->rstd) trn__store_real(a->stat_dtype, a->rstd, r, (double)rstd);      \
        }                                                                         \
    }                                                                             \
    static void bwd_dx_##N(void *ctx, int64_t r0, int64_t r1) {                   \
        const ln_run *run = ctx;                                                  \
        const ln_args *a = run->a;                                                \
        const int64_t n = a->cols;                                                \
        const C *w = run->w;                                                      \
        for (int64_t r = r0; r < r1; r++) {                                       \
            const T *x = (const T *)a->x + r * n;                                 \
            const T *dy = (const T *)a->dy + r * n;                               \
            T *dx = (T *)a->dx + r * n;                                           \
            const C mean = (C)trn__load_real(a->stat_dtype, a->mean_in, r);             \
            const C rstd = (C)trn__load_real(a->stat_dtype, a->rstd_in, r);             \
            const int L = TRN_VLANES(V, C);                                           \
            const int64_t nv = n - n % L;                                         \
            V acc1 = {0}, acc2 = {0};                                             \
            /* unswitched on w: a select here defeats the vectorizer */           \
            if (w) {                                                              \
                DX_SUMS(C, V, LD, w[i + j]);                                      \
            } else {                                                              \
                DX_SUMS(C, V, LD, (C)1);                                          \
            }                                                                     \
            C s1 = 0, s2 = 0;                                                     \
            for (int j = 0; j < L; j++) {                                         \
                s1 += acc1[j];                                                    \
                s2 += acc2[j];                                                    \
            }                                                                     \
            for (int64_t i = nv; i < n; i++) {                                    \
                const C g = (C)LD(dy[i]) * (w ? w[i] : (C)1);                     \
                s1 += g;                                                          \
                s2 += g * ((C)LD(x[i]) - mean) * rstd;                            \
            }                                                                     \
            s1 /= (C)n;                                                           \
            s2 /= (C)n;                                                           \
            if (w)                                                                \
                for (int64_t i = 0; i < n; i++) {                                 \
                    const C g = (C)LD(dy[i]) * w[i];                              \
                    const C xh = ((C)LD(x[i]) - mean) * rstd;                     \
                    dx[i] = ST(rstd * (g - s1 - xh * s2));                        \
                }                                                                 \
            else                                                                  \
                for (int64_t i = 0; i < n; i++) {                                 \
                    const C g = (C)LD(dy[i]);                                     \
                    const C xh = ((C)LD(x[i]) - mean) * rstd;                     \
                    dx[i] = ST(rstd * (g - s1 - xh * s2));                        \
                }                                                                 \
        }                                                                         \
    }                                                                             \
    /* Columns [blk * COLBLOCK, ...) of dweight / dbias. */                       \
    static void bwd_dw_##N(void *ctx, int64_t b0, int64_t b1) {                   \
        const ln_run *run = ctx;                                                  \
        const ln_args *a = run->a;                                                \
        const int64_t n = a->cols;                                                \
        for (int64_t blk = b0; blk < b1; blk++) {                                 \
            const int64_t c0 = blk * COLBLOCK;                                    \
            const int64_t w = n - c0 < COLBLOCK ? n - c0 : COLBLOCK;              \
            C gw[COLBLOCK], gb[COLBLOCK];                                         \
            for (int64_t j = 0; j < w; j++) gw[j] = gb[j] = 0;                    \
            for (int64_t r = 0; r < a->rows; r++) {                               \
                const T *x = (const T *)a->x + r * n + c0;                        \
                const T *dy = (const T *)a->dy + r * n + c0;                      \
                const C mean = (C)trn__load_real(a->stat_dtype, a->mean_in, r);         \
                const C rstd = (C)trn__load_real(a->stat_dtype, a->rstd_in, r);         \
                for (int64_t j = 0; j < w; j++) {                                 \
                    const C g = (C)LD(dy[j]);                                     \
                    gw[j] += g * ((C)LD(x[j]) - mean) * rstd;                     \
                    gb[j] += g;                                                   \
                }                                                                 \
            }                                                                     \
            for (int64_t j = 0; j < w; j++) {                                     \
                if (a->dweight) trn__store_real(a->param_dtype, a->dweight, c0 + j, (double)gw[j]); \
                if (a->dbias) trn__store_real(a->param_dtype, a->dbias, c0 + j, (double)gb[j]); \
            }                                                                     \
        }                                                                         \
    }

DEFINE_LN(f16, uint16_t, float, trn__vec_f, LD_f16, ST_f16)
DEFINE_LN(bf16, uint16_t, float, trn__vec_f, LD_bf16, ST_bf16)
DEFINE_LN(f32, float, float, trn__vec_f, LD_id, ST_id)
DEFINE_LN(f64, double, double, trn__vec_d, LD_id, ST_id)

typedef void (*piece_fn)(void *, int64_t, int64_t);

static void pick(trn_dtype d, piece_fn *fwd, piece_fn *dx, piece_fn *dw) {
    switch (d) {
#define CASE(E, N)                                                                 \
    case E: *fwd = fwd_##N; *dx = bwd_dx_##N; *dw = bwd_dw_##N; return;
        CASE(TRN_DTYPE_F16, f16)
        CASE(TRN_DTYPE_BF16, bf16)
        CASE(TRN_DTYPE_F32, f32)
        CASE(TRN_DTYPE_F64, f64)
#undef CASE
    default: *fwd = *dx = *dw = NULL;
    }
}

int trn_layer_norm_supports(trn_dtype dtype, trn_dtype param_dtype, trn_dtype stat_dtype) {
    const int half = dtype == TRN_DTYPE_F16 || dtype == TRN_DTYPE_BF16;
    if (!half && dtype != TRN_DTYPE_F32 && dtype != TRN_DTYPE_F64) return 0;
    const int pok = param_dtype == dtype || (half && param_dtype == TRN_DTYPE_F32);
    const int sok = stat_dtype == dtype || (half && stat_dtype == TRN_DTYPE_F32);
    return pok && sok;
}

// Converts a [cols] parameter into the compute type (float or double).
static void *convert_param(trn_dtype d, const void *p, int64_t n, int is_double) {
    void *buf = malloc((size_t)n * (is_double ? 8 : 4) + 1);
    if (buf == NULL) return NULL;
    for (int64_t i = 0; i < n; i++) {
        const double v = trn__load_real(d, p, i);
        if (is_double) ((double *)buf)[i] = v;
        else ((float *)buf)[i] = (float)v;
    }
    return buf;
}

// Memory ranges the task touches (protect mode).
typedef struct ranges {
    const void *p[10];
    size_t n[10];
    int count, begun;
} ranges;
static void add_range(ranges *r, const void *p, size_t n) {
    if (p == NULL || n == 0) return;
    r->p[r->count] = p;
    r->n[r->count++] = n;
}
static trn_status begin_ranges(ranges *r) {
    for (r->begun = 0; r->begun < r->count; r->begun++) {
        trn_status st = trn__mem_access_begin(r->p[r->begun], r->n[r->begun]);
        if (st != TRN_SUCCESS) return st;
    }
    return TRN_SUCCESS;
}
static void end_ranges(ranges *r) {
    for (int k = r->begun - 1; k >= 0; k--) trn__mem_access_end(r->p[k], r->n[k]);
}

static trn_status ln_task(void *args) {
    const ln_args *a = args;
    const size_t es = trn_dtype_size(a->dtype), ps = trn_dtype_size(a->param_dtype);
    const size_t ss = trn_dtype_size(a->stat_dtype);
    const size_t data = (size_t)(a->rows * a->cols) * es;
    const size_t par = (size_t)a->cols * ps, stat = (size_t)a->rows * ss;
    ranges rg = {.count = 0};
    add_range(&rg, a->x, data);
    add_range(&rg, a->weight, par);
    if (!a->backward) {
        add_range(&rg, a->bias, par);
        add_range(&rg, a->y, data);
        add_range(&rg, a->mean, stat);
        add_range(&rg, a->rstd, stat);
    } else {
        add_range(&rg, a->dy, data);
        add_range(&rg, a->mean_in, stat);
        add_range(&rg, a->rstd_in, stat);
        add_range(&rg, a->dx, data);
        add_range(&rg, a->dweight, par);
        add_range(&rg, a->dbias, par);
    }
    trn_status st = begin_ranges(&rg);
    const int dbl = a->dtype == TRN_DTYPE_F64;
    void *w = NULL, *b = NULL;
    if (st == TRN_SUCCESS && a->weight) {
        w = convert_param(a->param_dtype, a->weight, a->cols, dbl);
        if (w == NULL) st = trn__set_error(TRN_ERROR_OUT_OF_MEMORY, "layer norm: out of host memory");
    }
    if (st == TRN_SUCCESS && a->bias && !a->backward) {
        b = convert_param(a->param_dtype, a->bias, a->cols, dbl);
        if (b == NULL) st = trn__set_error(TRN_ERROR_OUT_OF_MEMORY, "layer norm: out of host memory");
    }
    if (st == TRN_SUCCESS) {
        piece_fn fwd, dx, dw;
        pick(a->dtype, &fwd, &dx, &dw);
        ln_run run = {a, w, b};
        int64_t grain = GRAIN / (a->cols > 0 ? a->cols : 1);
        if (grain < 1) grain = 1;
        if (!a->backward) {
            trn_parallel_for(a->rows, grain, fwd, &run);
        } else {
            if (a->dx) trn_parallel_for(a->rows, grain, dx, &run);
            if (a->dweight || a->dbias) {
                const int64_t blocks = (a->cols + COLBLOCK - 1) / COLBLOCK;
                int64_t g = GRAIN / ((a->rows > 0 ? a->rows : 1) * COLBLOCK);
                trn_parallel_for(blocks, g < 1 ? 1 : g, dw, &run);
            }
        }
    }
    free(w);
    free(b);
    end_ranges(&rg);
    return st;
}

static trn_status check_common(trn_stream *stream, const void *d, trn_dtype dtype,
                               trn_dtype pd, trn_dtype sd, int64_t rows, int64_t cols,
                               const char *fn) {
    if (stream == NULL || d == NULL)
        return trn__set_error(TRN_ERROR_INVALID_ARGUMENT, "%s: stream or descriptor is NULL", fn);
    if (!trn_layer_norm_supports(dtype, pd, sd))
        return trn__set_error(TRN_ERROR_UNSUPPORTED,
                              "%s: dtypes %s (params %s, stats %s) are not supported", fn,
                              trn_dtype_name(dtype), trn_dtype_name(pd), trn_dtype_name(sd));
    int64_t n;
    if (rows < 0 || cols < 0 || (rows > 0 && cols == 0) ||
        __builtin_mul_overflow(rows, cols, &n) || __builtin_mul_overflow(n, 8, &n))
        return trn__set_error(TRN_ERROR_INVALID_ARGUMENT, "%s: invalid sizes [%lld, %lld]", fn,
                              (long long)rows, (long long)cols);
    return trn__fork_check();
}

trn_status trn_layer_norm_launch(trn_stream *stream, const trn_layer_norm_desc *d) {
    trn_status st = check_common(stream, d, d ? d->dtype : TRN_DTYPE_F32,
                                 d ? d->param_dtype : TRN_DTYPE_F32,
                                 d ? d->stat_dtype : TRN_DTYPE_F32, d ? d->rows : 0,
                                 d ? d->cols : 0, "trn_layer_norm_launch");
    if (st != TRN_SUCCESS || d->rows == 0) return st;
    if (d->x == NULL || d->y == NULL)
        return trn__set_error(TRN_ERROR_INVALID_ARGUMENT, "trn_layer_norm_launch: x or y is NULL");
    ln_args a;
    memset(&a, 0, sizeof a);
    a.dtype = d->dtype;
    a.param_dtype = d->param_dtype;
    a.stat_dtype = d->stat_dtype;
    a.rows = d->rows;
    a.cols = d->cols;
    a.x = d->x;
    a.weight = d->weight;
    a.bias = d->bias;
    a.y = d->y;
    a.mean = d->mean;
    a.rstd = d->rstd;
    a.eps = d->eps;
    return trn_stream_launch(stream, ln_task, &a, sizeof a);
}

trn_status trn_layer_norm_backward_launch(trn_stream *stream,
                                          const trn_layer_norm_backward_desc *d) {
    trn_status st = check_common(stream, d, d ? d->dtype : TRN_DTYPE_F32,
                                 d ? d->param_dtype : TRN_DTYPE_F32,
                                 d ? d->stat_dtype : TRN_DTYPE_F32, d ? d->rows : 0,
                                 d ? d->cols : 0, "trn_layer_norm_backward_launch");
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
    ln_args a;
    memset(&a, 0, sizeof a);
    a.backward = 1;
    a.dtype = d->dtype;
    a.param_dtype = d->param_dtype;
    a.stat_dtype = d->stat_dtype;
    a.rows = d->rows;
    a.cols = d->cols;
    a.x = d->x;
    a.dy = d->dy;
    a.mean_in = d->mean;
    a.rstd_in = d->rstd;
    a.weight = d->weight;
    a.dx = d->dx;
    a.dweight = d->dweight;
    a.dbias = d->dbias;
    return trn_stream_launch(stream, ln_task, &a, sizeof a);
}
