// loss.c - owns the nll_loss forward/backward kernels (trn/loss.h).
//
// The forward reads one element per target (batch * inner elements), so it
// runs serially with double accumulators; the backward writes the whole
// grad_input (batch * classes * inner) and splits the batch across the
// thread pool.
#include <math.h>
#include <string.h>

#include "../kit/launch.h"
#include "../kit/dtype_io.h"
#include "trn/convert.h"
#include "trn/loss.h"
#include "trn/parallel.h"

typedef struct nll_args {
    trn_dtype dtype, target_dtype;
    trn_reduction reduction;
    int backward;
    int64_t batch, classes, inner, ignore_index;
    const void *input, *target, *weight, *grad_output, *total_weight_in;
    void *out, *total_weight, *grad_input;
} nll_args;

_Static_assert(sizeof(nll_args) <= TRN_TASK_MAX_ARGS, "nll args too large");

static int64_t ld_target(const nll_args *a, int64_t i) {
    return a->target_dtype == TRN_DTYPE_U8 ? (int64_t)((const uint8_t *)a->target)[i]
                                           : ((const int64_t *)a->target)[i];
}

// Returns the first out-of-range target, or ignore_index when all are valid.
static int64_t check_targets(const nll_args *a) {
    const int64_t n = a->batch * a->inner;
    for (int64_t i = 0; i < n; i++) {
        const int64_t t = ld_target(a, i);
        if (t != a->ignore_index && (t < 0 || t >= a->classes)) return t;
    }
    return a->ignore_index;
}

static void nll_forward(const nll_args *a) {
    const int64_t C = a->classes, I = a->inner;
    double total = 0, wsum = 0;
    for (int64_t b = 0; b < a->batch; b++) {
        for (int64_t i = 0; i < I; i++) {
            const int64_t t = ld_target(a, b * I + i);
            double v = 0;
            if (t != a->ignore_index) {
                const double w = a->weight ? trn__load_real(a->dtype, a->weight, t) : 1.0;
                v = -w * trn__load_real(a->dtype, a->input, (b * C + t) * I + i);
                wsum += w;
            }
            if (a->reduction == TRN_REDUCTION_NONE)
                trn__store_real(a->dtype, a->out, b * I + i, v);
            else
                total += v;
        }
    }
    if (a->reduction == TRN_REDUCTION_NONE) {
        trn__store_real(a->dtype, a->total_weight, 0, 0.0);
        return;
    }
    const int64_t n = a->batch * I;
    if (a->reduction == TRN_REDUCTION_MEAN) total = n == 0 ? NAN : total / wsum;
    trn__store_real(a->dtype, a->out, 0, total);
    trn__store_real(a->dtype, a->total_weight, 0, wsum);
}

static void nll_backward_piece(void *ctx, int64_t b0, int64_t b1) {
    const nll_args *a = ctx;
    const int64_t C = a->classes, I = a->inner;
    const size_t es = trn_dtype_size(a->dtype);
    memset((char *)a->grad_input + (size_t)(b0 * C * I) * es, 0, (size_t)((b1 - b0) * C * I) * es);
    double scale = 1.0;
    if (a->reduction != TRN_REDUCTION_NONE) {
        scale = trn__load_real(a->dtype, a->grad_output, 0);
        if (a->reduction == TRN_REDUCTION_MEAN)
            scale /= trn__load_real(a->dtype, a->total_weight_in, 0);
    }
    for (int64_t b = b0; b < b1; b++) {
        for (int64_t i = 0; i < I; i++) {
            const int64_t t = ld_target(a, b * I + i);
            if (t == a->ignore_index) continue;
            const double w = a->weight ? trn__load_real(a->dtype, a->weight, t) : 1.0;
            const double g = a->reduction == TRN_REDUCTION_NONE
                                 ? trn__load_real(a->dtype, a->grad_output, b * I + i)
                                 : scale;
            trn__store_real(a->dtype, a->grad_input, (b * C + t) * I + i, -w * g);
        }
    }
}

static trn_status nll_task(void *args) {
    const nll_args *a = args;
    const size_t es = trn_dtype_size(a->dtype);
    const size_t tsz = (size_t)(a->batch * a->inner) * trn_dtype_size(a->target_dtype);
    const size_t isz = (size_t)(a->batch * a->classes * a->inner) * es;
    const size_t osz =
        (a->reduction == TRN_REDUCTION_NONE ? (size_t)(a->batch * a->inner) : 1) * es;
    trn__access_set rg = {.count = 0};
    trn__access_add(&rg, a->target, tsz);
    trn__access_add(&rg, a->weight, (size_t)a->classes * es);
    if (!a->backward) {
        trn__access_add(&rg, a->input, isz);
        trn__access_add(&rg, a->out, osz);
        trn__access_add(&rg, a->total_weight, es);
    } else {
        trn__access_add(&rg, a->grad_output, osz);
        trn__access_add(&rg, a->total_weight_in, es);
        trn__access_add(&rg, a->grad_input, isz);
    }
    trn_status s = trn__access_begin(&rg);
    if (s == TRN_SUCCESS) {
        const int64_t bad = check_targets(a);
        if (bad != a->ignore_index) {
            s = trn__set_error(TRN_ERROR_INVALID_ARGUMENT, "Target %lld is out of bounds.",
                               (long long)bad);
        } else if (!a->backward) {
            nll_forward(a);
        } else {
            int64_t grain = 16384 / (a->classes * a->inner > 0 ? a->classes * a->inner : 1);
            trn_parallel_for(a->batch, grain < 1 ? 1 : grain, nll_backward_piece, (void *)a);
        }
    }
    trn__access_end(&rg);
    return s;
}

int trn_nll_loss_supports(trn_dtype dtype, trn_dtype target_dtype) {
    return (dtype == TRN_DTYPE_F16 || dtype == TRN_DTYPE_BF16 || dtype == TRN_DTYPE_F32 ||
            dtype == TRN_DTYPE_F64) &&
           (target_dtype == TRN_DTYPE_I64 || target_dtype == TRN_DTYPE_U8);
}

static trn_status check(trn_stream *stream, const void *d, trn_dtype dt, trn_dtype tdt,
                        trn_reduction red, int64_t batch, int64_t classes, int64_t inner,
                        const char *fn) {
    const trn_status null_st = trn__check_launch(stream, d, fn);
    if (null_st != TRN_SUCCESS) return null_st;
    if (!trn_nll_loss_supports(dt, tdt))
        return trn__set_error(TRN_ERROR_UNSUPPORTED, "%s: dtypes %s / target %s not supported", fn,
                              trn_dtype_name(dt), trn_dtype_name(tdt));
    if ((unsigned)red > TRN_REDUCTION_SUM)
        return trn__set_error(TRN_ERROR_INVALID_ARGUMENT, "%s: invalid reduction %d", fn, (int)red);
    int64_t n;
    if (batch < 0 || classes < 0 || inner < 0 || __builtin_mul_overflow(batch, classes, &n) ||
        __builtin_mul_overflow(n, inner, &n) || __builtin_mul_overflow(n, 8, &n))
        return trn__set_error(TRN_ERROR_INVALID_ARGUMENT, "%s: invalid sizes", fn);
    return trn__fork_check();
}

trn_status trn_nll_loss_launch(trn_stream *stream, const trn_nll_loss_desc *d) {
    trn_status s =
        check(stream, d, d ? d->dtype : TRN_DTYPE_F32, d ? d->target_dtype : TRN_DTYPE_I64,
              d ? d->reduction : TRN_REDUCTION_NONE, d ? d->batch : 0, d ? d->classes : 0,
              d ? d->inner : 0, "trn_nll_loss_launch");
    if (s != TRN_SUCCESS) return s;
    if (d->reduction == TRN_REDUCTION_NONE && d->batch * d->inner == 0) return TRN_SUCCESS;
    if (d->out == NULL || d->total_weight == NULL ||
        (d->batch * d->inner > 0 && (d->input == NULL || d->target == NULL)))
        return trn__set_error(TRN_ERROR_INVALID_ARGUMENT, "trn_nll_loss_launch: a pointer is NULL");
    const nll_args a = {.dtype = d->dtype,
                        .target_dtype = d->target_dtype,
                        .reduction = d->reduction,
                        .batch = d->batch,
                        .classes = d->classes,
                        .inner = d->inner,
                        .ignore_index = d->ignore_index,
                        .input = d->input,
                        .target = d->target,
                        .weight = d->weight,
                        .out = d->out,
                        .total_weight = d->total_weight};
    return trn_stream_launch(stream, nll_task, &a, sizeof a);
}

trn_status trn_nll_loss_backward_launch(trn_stream *stream, const trn_nll_loss_backward_desc *d) {
    trn_status s =
        check(stream, d, d ? d->dtype : TRN_DTYPE_F32, d ? d->target_dtype : TRN_DTYPE_I64,
              d ? d->reduction : TRN_REDUCTION_NONE, d ? d->batch : 0, d ? d->classes : 0,
              d ? d->inner : 0, "trn_nll_loss_backward_launch");
    if (s != TRN_SUCCESS) return s;
    if (d->batch * d->classes * d->inner == 0) return TRN_SUCCESS;
    if (d->grad_output == NULL || d->target == NULL || d->total_weight == NULL ||
        d->grad_input == NULL)
        return trn__set_error(TRN_ERROR_INVALID_ARGUMENT,
                              "trn_nll_loss_backward_launch: a pointer is NULL");
    const nll_args a = {.backward = 1,
                        .dtype = d->dtype,
                        .target_dtype = d->target_dtype,
                        .reduction = d->reduction,
                        .batch = d->batch,
                        .classes = d->classes,
                        .inner = d->inner,
                        .ignore_index = d->ignore_index,
                        .grad_output = d->grad_output,
                        .target = d->target,
                        .weight = d->weight,
                        .total_weight_in = d->total_weight,
                        .grad_input = d->grad_input};
    return trn_stream_launch(stream, nll_task, &a, sizeof a);
}
