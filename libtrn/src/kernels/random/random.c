// random.c - owns the random fill kernel (trn/random.h).
//
// Element i hashes (seed, offset + i) with splitmix64; normal values take a
// second hash of the same counter from a second lane (the seed moved by an
// odd constant), so every element uses its own counter only and a fill at
// offset o never shares values with the fill at o + n that follows it.
// Uniforms take the top 53 bits, so float64 gets a full-precision value and
// no dtype sees exactly 1.
#include <math.h>
#include <string.h>

#include "../kit/launch.h"
#include "../kit/counter_rng.h"
#include "../kit/dtype_io.h"
#include "trn/parallel.h"
#include "trn/random.h"

#define GRAIN 16384

typedef struct rand_args {
    trn_random_desc d;
} rand_args;

// The second Box-Muller lane: far from the first for any reachable counter.
#define LANE2 0xD1B54A32D192ED03ull

// Uniform in the open interval (0, 1): the midpoints of trn__rng_unit()'s steps, so
// log() and tan(pi * (u - 1/2)) never see an endpoint.
static inline double open_unit(uint64_t h) { return ((double)(h >> 11) + 0.5) * 0x1p-53; }

// Geometric trials, clamped so that the integer conversion stays defined
// for p near 0 (2^62 trials is far beyond any reachable count).
static int64_t geometric(uint64_t h, double p) {
    const double k = ceil(log(open_unit(h)) / log1p(-p));
    return k < 0x1p62 ? (int64_t)k : (int64_t)1 << 62;
}

static void store_int(trn_dtype d, void *p, int64_t i, int64_t v) {
    switch (d) {
    case TRN_DTYPE_BOOL: ((uint8_t *)p)[i] = v != 0; break;  // geometric counts > 1 too
    case TRN_DTYPE_U8:
    case TRN_DTYPE_I8: ((uint8_t *)p)[i] = (uint8_t)v; break;
    case TRN_DTYPE_I16: ((int16_t *)p)[i] = (int16_t)v; break;
    case TRN_DTYPE_I32: ((int32_t *)p)[i] = (int32_t)v; break;
    case TRN_DTYPE_I64: ((int64_t *)p)[i] = v; break;
    default: trn__store_real(d, p, i, (double)v); break;
    }
}

static double sample(const trn_random_desc *d, int64_t i) {
    const uint64_t c = d->offset + (uint64_t)i;
    const uint64_t h = trn__rng_hash(d->seed, c);
    switch (d->dist) {
    case TRN_RANDOM_UNIFORM: return d->a + (d->b - d->a) * trn__rng_unit(h);
    case TRN_RANDOM_NORMAL:
    case TRN_RANDOM_LOG_NORMAL: {
        const double u1 = 1.0 - trn__rng_unit(h);  // (0, 1]
        const double u2 = trn__rng_unit(trn__rng_hash(d->seed + LANE2, c));
        const double z = d->a + d->b * sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
        return d->dist == TRN_RANDOM_NORMAL ? z : exp(z);
    }
    case TRN_RANDOM_EXPONENTIAL: return -log1p(-trn__rng_unit(h)) / d->a;
    case TRN_RANDOM_CAUCHY: return d->a + d->b * tan(3.141592653589793 * (open_unit(h) - 0.5));
    default: return 0.0;
    }
}

static void rand_piece(void *ctx, int64_t b, int64_t e) {
    const trn_random_desc *d = &((const rand_args *)ctx)->d;
    const uint64_t s = d->seed, off = d->offset;
    if (d->dist == TRN_RANDOM_BERNOULLI) {
        for (int64_t i = b; i < e; i++)
            store_int(d->dtype, d->out, i,
                      trn__rng_unit(trn__rng_hash(s, off + (uint64_t)i)) < d->a);
    } else if (d->dist == TRN_RANDOM_INTEGER) {
        for (int64_t i = b; i < e; i++)
            store_int(d->dtype, d->out, i,
                      d->from + (int64_t)(trn__rng_hash(s, off + (uint64_t)i) % d->range));
    } else if (d->dist == TRN_RANDOM_GEOMETRIC) {
        for (int64_t i = b; i < e; i++)
            store_int(d->dtype, d->out, i, geometric(trn__rng_hash(s, off + (uint64_t)i), d->a));
    } else if (d->dtype == TRN_DTYPE_F32) {
        float *o = d->out;
        const float hi = (float)d->b, lo = (float)d->a;
        const int uni = d->dist == TRN_RANDOM_UNIFORM;
        for (int64_t i = b; i < e; i++) {
            const float v = (float)sample(d, i);
            o[i] = uni && v >= hi ? lo : v;  // rounding up to `b` wraps to `a`, as CUDA
        }
    } else {
        for (int64_t i = b; i < e; i++) {
            trn__store_real(d->dtype, d->out, i, sample(d, i));
            if (d->dist == TRN_RANDOM_UNIFORM && trn__load_real(d->dtype, d->out, i) >= d->b)
                trn__store_real(d->dtype, d->out, i, d->a);
        }
    }
}

static trn_status rand_task(void *args) {
    rand_args *a = args;
    const size_t bytes = (size_t)a->d.n * trn_dtype_size(a->d.dtype);
    trn_status st = trn__mem_access_begin(a->d.out, bytes);
    if (st != TRN_SUCCESS) return st;
    trn_parallel_for(a->d.n, GRAIN, rand_piece, a);
    trn__mem_access_end(a->d.out, bytes);
    return st;
}

static int is_float(trn_dtype t) {
    return t == TRN_DTYPE_F16 || t == TRN_DTYPE_BF16 || t == TRN_DTYPE_F32 || t == TRN_DTYPE_F64;
}

uint64_t trn_random_key(uint64_t seed, uint64_t counter) { return trn__rng_hash(seed, counter); }

trn_status trn_random_launch(trn_stream *stream, const trn_random_desc *d) {
    if (stream == NULL || d == NULL) return trn__check_launch(stream, d, "trn_random_launch");
    if ((unsigned)d->dist >= TRN_RANDOM_DIST_COUNT || (unsigned)d->dtype >= TRN_DTYPE_COUNT)
        return trn__set_error(TRN_ERROR_INVALID_ARGUMENT,
                              "trn_random_launch: invalid distribution or dtype");
    const int fl = d->dist == TRN_RANDOM_UNIFORM || d->dist == TRN_RANDOM_NORMAL ||
                   d->dist == TRN_RANDOM_EXPONENTIAL || d->dist == TRN_RANDOM_LOG_NORMAL ||
                   d->dist == TRN_RANDOM_CAUCHY;
    if (fl && !is_float(d->dtype))
        return trn__set_error(TRN_ERROR_UNSUPPORTED,
                              "trn_random_launch: this distribution needs a floating dtype, got %s",
                              trn_dtype_name(d->dtype));
    if (d->dist == TRN_RANDOM_INTEGER && d->range == 0)
        return trn__set_error(TRN_ERROR_INVALID_ARGUMENT, "trn_random_launch: empty integer range");
    if (d->dist == TRN_RANDOM_EXPONENTIAL && !(d->a > 0))
        return trn__set_error(TRN_ERROR_INVALID_ARGUMENT,
                              "trn_random_launch: exponential rate must be positive");
    if ((d->dist == TRN_RANDOM_LOG_NORMAL || d->dist == TRN_RANDOM_CAUCHY) && !(d->b > 0))
        return trn__set_error(TRN_ERROR_INVALID_ARGUMENT,
                              "trn_random_launch: log-normal / Cauchy scale must be positive");
    if (d->dist == TRN_RANDOM_GEOMETRIC && !(d->a > 0 && d->a < 1))
        return trn__set_error(TRN_ERROR_INVALID_ARGUMENT,
                              "trn_random_launch: geometric probability must be in (0, 1)");
    if (d->dist == TRN_RANDOM_BERNOULLI && !(d->a >= 0 && d->a <= 1))
        return trn__set_error(TRN_ERROR_INVALID_ARGUMENT,
                              "trn_random_launch: bernoulli probability must be in [0, 1]");
    if (d->n < 0)
        return trn__set_error(TRN_ERROR_INVALID_ARGUMENT, "trn_random_launch: negative size");
    trn_status st = trn__fork_check();
    if (st != TRN_SUCCESS || d->n == 0) return st;
    if (d->out == NULL)
        return trn__set_error(TRN_ERROR_INVALID_ARGUMENT, "trn_random_launch: out is NULL");
    rand_args a = {*d};
    return trn_stream_launch(stream, rand_task, &a, sizeof a);
}
