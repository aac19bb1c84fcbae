// dropout.c - owns the dropout / bernoulli mask kernel (trn/loss.h).
//
// The mask bit of element i depends only on (seed, offset + i) through the
// splitmix64 hash of kit/counter_rng.h, so results do not depend on how the
// pool splits the range and a (seed, offset) reproduces its mask exactly.
#include <string.h>

#include "../kit/dtype_io.h"
#include "../kit/launch.h"
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

#define DEFINE_DROP(N, T, C, LD, ST)                                                               \
    static void drop_##N(const drop_args *a, int64_t b, int64_t e) {                               \
        const T *x = a->x;                                                                         \
        T *o = a->out;                                                                             \
        const C s = (C)a->scale;                                                                   \
        for (int64_t i = b; i < e; i++) {                                                          \
            const uint8_t k = keep_bit(a, i);                                                      \
            a->mask[i] = k;                                                                        \
            o[i] = ST(k ? (C)LD(x[i]) * s : (C)0);                                                 \
        }                                                                                          \
    }
#define DROP_X(E, N, T, C, V, LD, ST) DEFINE_DROP(N, T, C, LD, ST)
TRN_KIT_FLOAT_TYPES(DROP_X)
#undef DROP_X

static void drop_piece(void *ctx, int64_t b, int64_t e) {
    const drop_args *a = ctx;
    if (a->out == NULL) {
        for (int64_t i = b; i < e; i++) a->mask[i] = keep_bit(a, i);
        return;
    }
    switch (a->dtype) {
#define CASE(E, N, ...)                                                                            \
    case E: drop_##N(a, b, e); break;
        TRN_KIT_FLOAT_TYPES(CASE)
#undef CASE
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
    if (stream == NULL || d == NULL) return trn__check_launch(stream, d, "trn_dropout_launch");
    if (!trn__is_float_dtype(d->dtype))
        return trn__set_error(TRN_ERROR_UNSUPPORTED, "trn_dropout_launch: dtype %s not supported",
                              trn_dtype_name(d->dtype));
    if (d->n < 0 || !(d->p >= 0.0 && d->p <= 1.0))
        return trn__set_error(TRN_ERROR_INVALID_ARGUMENT,
                              "trn_dropout_launch: invalid size or probability");
    trn_status s = trn__fork_check();
    if (s != TRN_SUCCESS || d->n == 0) return s;
    if (d->mask == NULL || (d->out != NULL && d->x == NULL))
        return trn__set_error(TRN_ERROR_INVALID_ARGUMENT, "trn_dropout_launch: a pointer is NULL");
    drop_args a = {d->dtype, d->n,    d->x,     d->out, d->mask, (float)(1.0 - d->p),
                   d->scale, d->seed, d->offset};
    return trn_stream_launch(stream, drop_task, &a, sizeof a);
}
