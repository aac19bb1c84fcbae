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
                          trn_dtype_name(dtype), param_label, trn_dtype_name(param_dtype),
                          stats);
}

trn_status trn__norm_check_rows(int64_t rows, int64_t cols, const char *fn) {
    int64_t n;
    if (rows < 0 || cols < 0 || (rows > 0 && cols == 0) ||
        __builtin_mul_overflow(rows, cols, &n) || __builtin_mul_overflow(n, 8, &n))
        return trn__set_error(TRN_ERROR_INVALID_ARGUMENT, "%s: invalid sizes [%lld, %lld]", fn,
                              (long long)rows, (long long)cols);
    return trn__fork_check();
}

void *trn__norm_param_to_compute(trn_dtype d, const void *p, int64_t n, int is_double) {
    void *buf = malloc((size_t)n * (is_double ? 8 : 4) + 1);
    if (buf == NULL) return NULL;
    for (int64_t i = 0; i < n; i++) {
        const double v = trn__load_real(d, p, i);
        if (is_double) ((double *)buf)[i] = v;
        else ((float *)buf)[i] = (float)v;
    }
    return buf;
}

void trn__row_norm_run(const trn__row_norm_loops *l, void *run) {
    const int64_t grain = trn__grain(TRN__NORM_GRAIN, l->cols);
    if (!l->backward) {
        trn_parallel_for(l->rows, grain, l->fwd, run);
        return;
    }
    if (l->want_dx) trn_parallel_for(l->rows, grain, l->dx, run);
    if (l->want_dw) {
        const int64_t blocks = (l->cols + TRN__NORM_COLBLOCK - 1) / TRN__NORM_COLBLOCK;
        const int64_t rows = l->rows > 0 ? l->rows : 1;
        trn_parallel_for(blocks, trn__grain(TRN__NORM_GRAIN, rows * TRN__NORM_COLBLOCK),
                         l->dw, run);
    }
}
