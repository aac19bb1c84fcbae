// amp.c - owns GradScaler's kernels (trn/amp.h): the fused non-finite check
// + unscale of a gradient, and the loss-scale update.
//
// The check and the multiply share one pass over the data. Pieces of the
// parallel split each keep a local "saw a non-finite" flag and publish it
// with a relaxed atomic store of 1.0f, so no piece waits on another.
#include <math.h>
#include <stdatomic.h>
#include <string.h>

#include "../kit/dtype_io.h"
#include "../kit/launch.h"
#include "trn/amp.h"
#include "trn/convert.h"
#include "trn/parallel.h"

#define GRAIN 32768

typedef struct unscale_args {
    trn_dtype dtype;
    int64_t n;
    void *data;
    const float *inv_scale;
    float *found_inf;
} unscale_args;

typedef struct unscale_run {
    const unscale_args *a;
    float inv;
    atomic_int bad;
} unscale_run;

// Non-finite test that survives -ffinite-math-only style optimizations:
// an exponent field of all ones.
static inline int nonfinite_f32(float x) {
    uint32_t u;
    memcpy(&u, &x, 4);
    return (u & 0x7f800000u) == 0x7f800000u;
}
static inline int nonfinite_f64(double x) {
    uint64_t u;
    memcpy(&u, &x, 8);
    return (u & 0x7ff0000000000000ull) == 0x7ff0000000000000ull;
}

static void unscale_piece(void *ctx, int64_t b, int64_t e) {
    unscale_run *run = ctx;
    const unscale_args *a = run->a;
    const float inv = run->inv;
    int bad = 0;
    switch (a->dtype) {
    case TRN_DTYPE_F32: {
        float *x = a->data;
        for (int64_t i = b; i < e; i++) bad |= nonfinite_f32(x[i]);
        if (inv != 1.0f)
            for (int64_t i = b; i < e; i++) x[i] *= inv;
        break;
    }
    case TRN_DTYPE_F64: {
        double *x = a->data;
        for (int64_t i = b; i < e; i++) bad |= nonfinite_f64(x[i]);
        if (inv != 1.0f)
            for (int64_t i = b; i < e; i++) x[i] *= (double)inv;
        break;
    }
    case TRN_DTYPE_F16:
    case TRN_DTYPE_BF16: {
        uint16_t *x = a->data;
        const int half = a->dtype == TRN_DTYPE_F16;
        for (int64_t i = b; i < e; i++) {
            const float v = half ? trn_half_to_float(x[i]) : trn_bf16_to_float(x[i]);
            bad |= nonfinite_f32(v);
            if (inv != 1.0f) x[i] = half ? trn_float_to_half(v * inv) : trn_float_to_bf16(v * inv);
        }
        break;
    }
    default: break;
    }
    if (bad) atomic_store_explicit(&run->bad, 1, memory_order_relaxed);
}

static trn_status unscale_task(void *args) {
    unscale_args *a = args;
    const size_t bytes = (size_t)a->n * trn_dtype_size(a->dtype);
    trn__access_set rg = {.count = 0};
    trn__access_add(&rg, a->data, bytes);
    trn__access_add(&rg, a->inv_scale, 4);
    trn__access_add(&rg, a->found_inf, 4);
    trn_status st = trn__access_begin(&rg);
    if (st == TRN_SUCCESS) {
        unscale_run run = {a, *a->inv_scale, 0};
        trn_parallel_for(a->n, GRAIN, unscale_piece, &run);
        if (atomic_load(&run.bad)) *a->found_inf = 1.0f;
    }
    trn__access_end(&rg);
    return st;
}

trn_status trn_amp_unscale_launch(trn_stream *stream, const trn_amp_unscale_desc *d) {
    if (stream == NULL || d == NULL) return trn__check_launch(stream, d, "trn_amp_unscale_launch");
    if (!trn__is_float_dtype(d->dtype))
        return trn__set_error(TRN_ERROR_UNSUPPORTED,
                              "trn_amp_unscale_launch: dtype %s is not a floating type",
                              trn_dtype_name(d->dtype));
    if (d->n < 0)
        return trn__set_error(TRN_ERROR_INVALID_ARGUMENT, "trn_amp_unscale_launch: negative size");
    trn_status st = trn__fork_check();
    if (st != TRN_SUCCESS || d->n == 0) return st;
    if (d->data == NULL || d->inv_scale == NULL || d->found_inf == NULL)
        return trn__set_error(TRN_ERROR_INVALID_ARGUMENT,
                              "trn_amp_unscale_launch: a pointer is NULL");
    unscale_args a = {d->dtype, d->n, d->data, d->inv_scale, d->found_inf};
    return trn_stream_launch(stream, unscale_task, &a, sizeof a);
}

typedef struct update_args {
    trn_amp_update_scale_desc d;
} update_args;

static trn_status update_task(void *args) {
    const trn_amp_update_scale_desc *d = &((update_args *)args)->d;
    trn__access_set rg = {.count = 0};
    trn__access_add(&rg, d->scale, 4);
    trn__access_add(&rg, d->growth_tracker, 4);
    trn__access_add(&rg, d->found_inf, 4);
    trn_status st = trn__access_begin(&rg);
    if (st != TRN_SUCCESS) return st;
    if (*d->found_inf != 0.0f) {
        *d->scale = (float)((double)*d->scale * d->backoff_factor);
        *d->growth_tracker = 0;
    } else {
        const int64_t done = (int64_t)*d->growth_tracker + 1;
        if (done == d->growth_interval) {
            const float grown = (float)((double)*d->scale * d->growth_factor);
            if (isfinite(grown)) *d->scale = grown;
            *d->growth_tracker = 0;
        } else {
            *d->growth_tracker = (int32_t)done;
        }
    }
    trn__access_end(&rg);
    return st;
}

trn_status trn_amp_update_scale_launch(trn_stream *stream, const trn_amp_update_scale_desc *d) {
    if (stream == NULL || d == NULL)
        return trn__check_launch(stream, d, "trn_amp_update_scale_launch");
    if (d->scale == NULL || d->growth_tracker == NULL || d->found_inf == NULL)
        return trn__set_error(TRN_ERROR_INVALID_ARGUMENT,
                              "trn_amp_update_scale_launch: a pointer is NULL");
    trn_status st = trn__fork_check();
    if (st != TRN_SUCCESS) return st;
    update_args a = {*d};
    return trn_stream_launch(stream, update_task, &a, sizeof a);
}
