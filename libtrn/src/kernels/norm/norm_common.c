// norm/norm_common.c - owns the normalization skeleton declared in
// norm_common.h (checks, parameter conversion, the row-norm driver).
#include "norm_common.h"

#include <stdio.h>
#include <stdlib.h>

int trn__norm_dtype_pair_ok(trn_dtype dtype, trn_dtype other) {
    const int half = dtype == TRN_DTYPE_F16 || dtype == TRN_DTYPE_BF16;
    if (!half && dtype != TRN_DTYPE_F32 && dtype != TRN_DTYPE_F64) return 0;
    return other == dtype || (half && other == TRN_DTYPE_F32);
}

trn_status trn__norm_check_dtypes(const trn_stream *stream, const void *desc, int supported,
                                  const char *fn, trn_dtype dtype, const char *param_label,
                                  trn_dtype param_dtype, const char *stat_label,
                                  trn_dtype stat_dtype) {
    trn_status st = trn__check_launch(stream, desc, fn);
    if (st != TRN_SUCCESS || supported) return st;
    char stats[64] = "";
    if (stat_label != NULL)
        snprintf(stats, sizeof stats, ", %s %s", stat_label, trn_dtype_name(stat_dtype));
    return trn__set_error(TRN_ERROR_UNSUPPORTED, "%s: dtypes %s (%s %s%s) are not supported", fn,
                          trn_dtype_name(dtype), param_label, trn_dtype_name(param_dtype), stats);
}

trn_status trn__norm_check_rows(int64_t rows, int64_t cols, const char *fn) {
    int64_t n;
    if (rows < 0 || cols < 0 || (rows > 0 && cols == 0) || __builtin_mul_overflow(rows, cols, &n) ||
        __builtin_mul_overflow(n, 8, &n))
        return trn__set_error(TRN_ERROR_INVALID_ARGUMENT, "%s: invalid sizes [%lld, %lld]", fn,
                              (long long)rows, (long long)cols);
    return trn__fork_check();
}

void *trn__norm_param_to_compute(trn_dtype d, const void *p, int64_t n, int is_double) {
    void *buf = malloc((size_t)n * (is_double ? 8 : 4) + 1);
    if (buf == NULL) return NULL;
    for (int64_t i = 0; i < n; i++) {
        const double v = trn__load_real(d, p, i);
        if (is_double)
            ((double *)buf)[i] = v;
        else
            ((float *)buf)[i] = (float)v;
    }
    return buf;
}

// dweight / dbias [c0, c1) from dxw's partials: blocks summed in order.
static void row_norm_sum_parts(void *ctx, int64_t c0, int64_t c1) {
    const trn__row_norm_ctx *run = ctx;
    const trn__row_norm_args *a = run->a;
    const int64_t n = a->cols, blocks = (a->rows + TRN__NORM_ROWBLOCK - 1) / TRN__NORM_ROWBLOCK;
    for (int64_t c = c0; c < c1; c++) {
        double gw = 0, gb = 0;
        for (int64_t k = 0; k < blocks; k++) {
            gw += run->part[2 * n * k + c];
            gb += run->part[2 * n * k + n + c];
        }
        if (a->dweight) trn__store_real(a->param_dtype, a->dweight, c, gw);
        if (a->dbias) trn__store_real(a->param_dtype, a->dbias, c, gb);
    }
}

static trn_status row_norm_run(const trn__row_norm_args *a, trn__row_norm_fns f,
                               trn__row_norm_ctx *run) {
    const int64_t grain = trn__grain(TRN__NORM_GRAIN, a->cols);
    if (!a->backward) {
        trn_parallel_for(a->rows, grain, f.fwd, run);
        return TRN_SUCCESS;
    }
    const int params = a->dweight || a->dbias;
    if (params && f.dxw) {
        const int64_t blocks = (a->rows + TRN__NORM_ROWBLOCK - 1) / TRN__NORM_ROWBLOCK;
        size_t bytes;
        if (__builtin_mul_overflow((size_t)blocks, (size_t)a->cols * 2 * sizeof(double), &bytes))
            return trn__set_error(TRN_ERROR_OUT_OF_MEMORY, "%s: partial sums too large", a->what);
        run->part = malloc(bytes + 1);
        if (run->part == NULL)
            return trn__set_error(TRN_ERROR_OUT_OF_MEMORY, "%s: out of host memory", a->what);
        const int64_t bgrain = grain / TRN__NORM_ROWBLOCK > 1 ? grain / TRN__NORM_ROWBLOCK : 1;
        trn_parallel_for(blocks, bgrain, f.dxw, run);
        trn_parallel_for(a->cols, trn__grain(TRN__NORM_GRAIN, 2 * (blocks > 0 ? blocks : 1)),
                         row_norm_sum_parts, run);
        free(run->part);
        run->part = NULL;
        return TRN_SUCCESS;
    }
    if (a->dx) trn_parallel_for(a->rows, grain, f.dx, run);
    if (params) {
        const int64_t blocks = (a->cols + TRN__NORM_COLBLOCK - 1) / TRN__NORM_COLBLOCK;
        const int64_t rows = a->rows > 0 ? a->rows : 1;
        trn_parallel_for(blocks, trn__grain(TRN__NORM_GRAIN, rows * TRN__NORM_COLBLOCK), f.dw, run);
    }
    return TRN_SUCCESS;
}

trn_status trn__row_norm_task(void *args) {
    const trn__row_norm_args *a = args;
    const size_t data = (size_t)(a->rows * a->cols) * trn_dtype_size(a->dtype);
    const size_t par = (size_t)a->cols * trn_dtype_size(a->param_dtype);
    const size_t stat = (size_t)a->rows * trn_dtype_size(a->stat_dtype);
    trn__access_set rg = {.count = 0};
    trn__access_add(&rg, a->x, data);
    trn__access_add(&rg, a->weight, par);
    if (!a->backward) {
        trn__access_add(&rg, a->bias, par);
        trn__access_add(&rg, a->y, data);
        trn__access_add(&rg, a->mean, stat);
        trn__access_add(&rg, a->rstd, stat);
    } else {
        trn__access_add(&rg, a->dy, data);
        trn__access_add(&rg, a->mean_in, stat);
        trn__access_add(&rg, a->rstd_in, stat);
        trn__access_add(&rg, a->dx, data);
        trn__access_add(&rg, a->dweight, par);
        trn__access_add(&rg, a->dbias, par);
    }
    trn_status st = trn__access_begin(&rg);
    const int dbl = a->dtype == TRN_DTYPE_F64;
    trn__row_norm_ctx run = {a, NULL, NULL, NULL};
    void *w = NULL, *b = NULL;
    if (st == TRN_SUCCESS && a->weight) {
        run.w = w = trn__norm_param_to_compute(a->param_dtype, a->weight, a->cols, dbl);
        if (w == NULL)
            st = trn__set_error(TRN_ERROR_OUT_OF_MEMORY, "%s: out of host memory", a->what);
    }
    if (st == TRN_SUCCESS && a->bias && !a->backward) {
        run.b = b = trn__norm_param_to_compute(a->param_dtype, a->bias, a->cols, dbl);
        if (b == NULL)
            st = trn__set_error(TRN_ERROR_OUT_OF_MEMORY, "%s: out of host memory", a->what);
    }
    if (st == TRN_SUCCESS) st = row_norm_run(a, a->fns, &run);
    free(w);
    free(b);
    trn__access_end(&rg);
    return st;
}

trn_status trn__row_norm_check(const trn_stream *stream, const void *desc, int supported,
                               const char *fn, trn_dtype dtype, const char *param_label,
                               trn_dtype param_dtype, const char *stat_label, trn_dtype stat_dtype,
                               int64_t rows, int64_t cols) {
    trn_status st = trn__norm_check_dtypes(stream, desc, supported, fn, dtype, param_label,
                                           param_dtype, stat_label, stat_dtype);
    return st != TRN_SUCCESS ? st : trn__norm_check_rows(rows, cols, fn);
}
