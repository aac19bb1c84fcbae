// dropout.c - owns the dropout / bernoulli mask kernel (trn/loss.h).
//
// The mask bit of element i depends only on (seed, offset + i) through the
// splitmix64 hash of kit/counter_rng.h, so results do not depend on how the
// pool splits the range and a (seed, offset) reproduces its mask exactly.
#include <string.h>

#include "../../internal.h"
#include "../kit/counter_rng.h"
#include "trn/convert.h"
#include "trn/loss.h"
#include "trn/parallel.h"

typedef struct drop_args {
    trn_dtype dtype;
    int64_t n;
    const void *x;
    void *out;
    uint8_t *mask;
    float keep;  // 1 - p, compared against 24-bit uniforms
    double scale;
    uint64_t seed, offset;
} drop_args;

static inline uint8_t keep_bit(const drop_args *a, int64_t i) {
    return (uint8_t)trn__rng_keep(trn__rng_hash(a->seed, a->offset + (uint64_t)i), a->keep);
}

#define DEFINE_DROP(N, T, C, LD, ST)                                             \
    static void drop_##N(const drop_args *a, int64_t b, int64_t e) {            \
        const T *x = a->x;                                                      \
        T *o = a->out;                                                          \
        const C s = (C)a->scale;                                                \
        for (int64_t i = b; i < e; i++) {                                       \
            const uint8_t k = keep_bit(a, i);                    \
            a->mask[i] = k;                                                     \
            o[i] = ST(k ? (C)LD(x[i]) * s : (C)0);                              \
        }                                                                       \
    }
#define LD_id(v) (v)
#define ST_id(v) (v)
DEFINE_DROP(f16, uint16_t, float, trn_half_to_float, trn_float_to_half)
DEFINE_DROP(bf16, uint16_t, float, trn_bf16_to_float, trn_float_to_bf16)
DEFINE_DROP(f32, float, float, LD_id, ST_id)
DEFINE_DROP(f64, double, double, LD_id, ST_id)

static void drop_piece(void *ctx, int64_t b, int64_t e) {
    const drop_args *a = ctx;
    if (a->out == NULL) {
        for (int64_t i = b; i < e; i++) a->mask[i] = keep_bit(a, i);
        return;
    }
    switch (a->dtype) {
    case TRN_DTYPE_F16: drop_f16(a, b, e); break;
    case TRN_DTYPE_BF16: drop_bf16(a, b, e); break;
    case TRN_DTYPE_F32: drop_f32(a, b, e); break;
    case TRN_DTYPE_F64: drop_f64(a, b, e); break;
    default: break;
    }
}

static trn_status drop_task(void *args) {
    drop_args *a = args;
    const size_t es = trn_dtype_size(a->dtype), n = (size_t)a->n;
    trn_status s = trn__mem_access_begin(a->mask, n);
    if (s != TRN_SUCCESS) return s;
    if (a->out) {
        s = trn__mem_access_begin(a->x, n * es);
        if (s == TRN_SUCCESS) {
            s = trn__mem_access_begin(a->out, n * es);
            if (s == TRN_SUCCESS) {
                trn_parallel_for(a->n, 32768, drop_piece, a);
                trn__mem_access_end(a->out, n * es);
            }
            trn__mem_access_end(a->x, n * es);
        }
    } else {
        trn_parallel_for(a->n, 32768, drop_piece, a);
    }
    trn__mem_access_end(a->mask, n);
    return s;
}

trn_status trn_dropout_launch(trn_stream *stream, const trn_dropout_desc *d) {
    if (stream == NULL || d == NULL)
        return trn__set_error(TRN_ERROR_INVALID_ARGUMENT,
                              "trn_dropout_launch: stream or descriptor is NULL");
    if (d->dtype != TRN_DTYPE_F16 && d->dtype != TRN_DTYPE_BF16 && d->dtype != TRN_DTYPE_F32 &&
        d->dtype != TRN_DTYPE_F64)
        return trn__set_error(TRN_ERROR_UNSUPPORTED, "trn_dropout_launch: dtype %s not supported",
                              trn_dtype_name(d->dtype));
    if (d->n < 0 || !(d->p >= 0.0 && d->p <= 1.0))
        return trn__set_error(TRN_ERROR_INVALID_ARGUMENT,
                              "trn_dropout_launch: invalid size or probability");
    trn_status s = trn__fork_check();
    if (s != TRN_SUCCESS || d->n == 0) return s;
    if (d->mask == NULL || (d->out != NULL && d->x == NULL))
        return trn__set_error(TRN_ERROR_INVALID_ARGUMENT, "trn_dropout_launch: a pointer is NULL");
    drop_args a = {d->dtype, d->n,  d->x,     d->out,   d->mask, (float)(1.0 - d->p),
                   d->scale, d->seed, d->offset};
    return trn_stream_launch(stream, drop_task, &a, sizeof a);
}
