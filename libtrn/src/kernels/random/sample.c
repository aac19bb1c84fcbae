// sample.c - owns randperm and multinomial (trn/sample.h).
//
// Randomness is kit/counter_rng.h's hash of (seed, counter), as random.c: the
// permutation's step i uses counter i; multinomial's row r uses counters
// r * samples + s (with replacement) or r * categories + c (without), so
// rows are independent and split across the thread pool freely.
// Fisher-Yates is sequential by nature; it runs on one thread.
#include <math.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "../kit/launch.h"
#include "../kit/piece_status.h"
#include "../kit/counter_rng.h"
#include "../kit/dtype_io.h"
#include "trn/parallel.h"
#include "trn/sample.h"

static int is_float(trn_dtype t) {
    return t == TRN_DTYPE_F16 || t == TRN_DTYPE_BF16 || t == TRN_DTYPE_F32 || t == TRN_DTYPE_F64;
}

static int is_int(trn_dtype t) {
    return t == TRN_DTYPE_U8 || t == TRN_DTYPE_I8 || t == TRN_DTYPE_I16 || t == TRN_DTYPE_I32 ||
           t == TRN_DTYPE_I64;
}

static void store(trn_dtype d, void *p, int64_t i, int64_t v) {
    switch (d) {
    case TRN_DTYPE_U8:
    case TRN_DTYPE_I8: ((uint8_t *)p)[i] = (uint8_t)v; break;
    case TRN_DTYPE_I16: ((int16_t *)p)[i] = (int16_t)v; break;
    case TRN_DTYPE_I32: ((int32_t *)p)[i] = (int32_t)v; break;
    case TRN_DTYPE_I64: ((int64_t *)p)[i] = v; break;
    default: trn__store_real(d, p, i, (double)v); break;
    }
}

// ---- randperm ---------------------------------------------------------------

typedef struct perm_args {
    trn_randperm_desc d;
} perm_args;

static trn_status perm_task(void *args) {
    const trn_randperm_desc *d = &((perm_args *)args)->d;
    const size_t bytes = (size_t)d->n * trn_dtype_size(d->dtype);
    // Shuffled as int64 (in place when the output is int64).
    int64_t *v = d->dtype == TRN_DTYPE_I64 ? d->out : malloc((size_t)d->n * sizeof(int64_t));
    if (v == NULL) return trn__set_error(TRN_ERROR_OUT_OF_MEMORY, "randperm: out of host memory");
    trn_status st = trn__mem_access_begin(d->out, bytes);
    if (st == TRN_SUCCESS) {
        for (int64_t i = 0; i < d->n; i++) v[i] = i;
        for (int64_t i = d->n - 1; i > 0; i--) {
            // 64 random bits modulo i + 1: bias below 2^-20 for any n < 2^44.
            const int64_t j = (int64_t)(trn__rng_hash(d->seed, (uint64_t)i) % (uint64_t)(i + 1));
            const int64_t t = v[i];
            v[i] = v[j], v[j] = t;
        }
        if ((void *)v != d->out)
            for (int64_t i = 0; i < d->n; i++) store(d->dtype, d->out, i, v[i]);
        trn__mem_access_end(d->out, bytes);
    }
    if ((void *)v != d->out) free(v);
    return st;
}

trn_status trn_randperm_launch(trn_stream *stream, const trn_randperm_desc *d) {
    if (stream == NULL || d == NULL) return trn__check_launch(stream, d, "trn_randperm_launch");
    if (!is_int(d->dtype) && !is_float(d->dtype))
        return trn__set_error(TRN_ERROR_UNSUPPORTED,
                              "trn_randperm_launch: dtype %s is not supported",
                              trn_dtype_name(d->dtype));
    if (d->n < 0 || d->n > (INT64_MAX >> 4))
        return trn__set_error(TRN_ERROR_INVALID_ARGUMENT, "trn_randperm_launch: invalid n %lld",
                              (long long)d->n);
    trn_status st = trn__fork_check();
    if (st != TRN_SUCCESS || d->n == 0) return st;
    if (d->out == NULL)
        return trn__set_error(TRN_ERROR_INVALID_ARGUMENT, "trn_randperm_launch: out is NULL");
    perm_args a = {*d};
    return trn_stream_launch(stream, perm_task, &a, sizeof a);
}

// ---- multinomial --------------------------------------------------------------

typedef struct multi_args {
    trn_multinomial_desc d;
    atomic_int *bad;            // an invalid row
    trn__piece_status *status;  // a piece could not allocate its buffer
} multi_args;

typedef struct keyed {
    double key;
    int64_t idx;
} keyed;

// Largest key first; equal keys in category order (deterministic).
static int by_key_desc(const void *pa, const void *pb) {
    const keyed *a = pa, *b = pb;
    if (a->key != b->key) return a->key < b->key ? 1 : -1;
    return (a->idx > b->idx) - (a->idx < b->idx);
}

// Before b in the draw order: larger key, then smaller index.
static int before(const keyed *a, const keyed *b) {
    return a->key > b->key || (a->key == b->key && a->idx < b->idx);
}

// Moves the m first items of the draw order to k[0..m) (quickselect with a
// middle pivot), so only those m need sorting: one draw out of a 32k-entry
// vocabulary is linear, not n log n.
static void partial_top(keyed *k, int64_t n, int64_t m) {
    int64_t lo = 0, hi = n;  // the boundary m lies in [lo, hi]
    while (hi - lo > 1 && m > lo && m < hi) {
        const keyed piv = k[lo + (hi - lo) / 2];
        int64_t i = lo, j = hi - 1;
        while (i <= j) {  // Hoare: [lo, i) before-or-equal pivot, (j, hi) after-or-equal
            while (before(&k[i], &piv)) i++;
            while (before(&piv, &k[j])) j--;
            if (i <= j) {
                const keyed t = k[i];
                k[i] = k[j], k[j] = t;
                i++, j--;
            }
        }
        if (m <= j + 1)
            hi = j + 1;
        else if (m >= i)
            lo = i;
        else
            return;  // [j + 1, i) equals the pivot: boundary settled
    }
}

static void multi_piece(void *ctx, int64_t r0, int64_t r1) {
    const multi_args *a = ctx;
    const trn_multinomial_desc *d = &a->d;
    const int64_t nc = d->categories, ns = d->samples;
    // Cumulative weights (with replacement) or keys (without).
    void *buf = trn__piece_malloc(a->status,
                                  (size_t)nc * (d->replacement ? sizeof(double) : sizeof(keyed)));
    if (buf == NULL) return;  // the task reports it
    for (int64_t r = r0; r < r1; r++) {
        int64_t *out = d->out + r * ns;
        double total = 0;
        int64_t last_pos = -1;  // the last category with a positive weight
        int ok = 1;
        for (int64_t c = 0; c < nc; c++) {
            const double p = trn__load_real(d->dtype, d->probs, r * nc + c);
            if (!(p >= 0) || isinf(p)) ok = 0;
            if (p > 0) last_pos = c;
            total += p;
            if (d->replacement)
                ((double *)buf)[c] = total;
            else
                ((keyed *)buf)[c] = (keyed){0, c};
        }
        if (!ok || !(total > 0) || isinf(total)) {
            atomic_store(a->bad, 1);
            for (int64_t s = 0; s < ns; s++) out[s] = 0;  // defined output even on error
            continue;
        }
        if (d->replacement) {
            const double *cum = buf;
            for (int64_t s = 0; s < ns; s++) {
                const uint64_t h = trn__rng_hash(d->seed, (uint64_t)(r * ns + s));
                const double u = trn__rng_unit(h) * total;
                // First category whose cumulative weight exceeds u: zero
                // weights never are (their cumulative equals the previous).
                int64_t lo = 0, hi = nc;
                while (lo < hi) {
                    const int64_t mid = lo + (hi - lo) / 2;
                    if (cum[mid] > u)
                        hi = mid;
                    else
                        lo = mid + 1;
                }
                out[s] = lo < nc ? lo : last_pos;  // u rounded up to the total
            }
            continue;
        }
        keyed *k = buf;
        for (int64_t c = 0; c < nc; c++) {
            const double p = trn__load_real(d->dtype, d->probs, r * nc + c);
            const uint64_t h = trn__rng_hash(d->seed, (uint64_t)(r * nc + c));
            const double e = -log1p(-trn__rng_unit(h));  // Exp(1)
            k[c].key = p > 0 ? p / e : 0;                // e == 0 (u == 0) gives +inf: drawn first
        }
        partial_top(k, nc, ns);
        qsort(k, (size_t)ns, sizeof *k, by_key_desc);
        for (int64_t s = 0; s < ns; s++) out[s] = k[s].idx;
    }
    free(buf);
}

static trn_status multi_task(void *args) {
    multi_args *a = args;
    const trn_multinomial_desc *d = &a->d;
    const size_t in_b = (size_t)(d->rows * d->categories) * trn_dtype_size(d->dtype);
    const size_t out_b = (size_t)(d->rows * d->samples) * sizeof(int64_t);
    trn_status st = trn__mem_access_begin(d->probs, in_b);
    if (st != TRN_SUCCESS) return st;
    if ((st = trn__mem_access_begin(d->out, out_b)) != TRN_SUCCESS) {
        trn__mem_access_end(d->probs, in_b);
        return st;
    }
    atomic_int bad = 0;
    a->bad = &bad;
    trn__piece_status status;
    trn__piece_status_init(&status);
    a->status = &status;
    const int64_t per_row = d->categories + d->samples;
    trn_parallel_for(d->rows, per_row >= 16384 ? 1 : 16384 / per_row, multi_piece, a);
    trn__mem_access_end(d->out, out_b);
    trn__mem_access_end(d->probs, in_b);
    if (atomic_load(&bad))
        return trn__set_error(TRN_ERROR_INVALID_ARGUMENT,
                              "multinomial: probability tensor contains either `inf`, `nan` or "
                              "element < 0, or a row sums to 0");
    return trn__piece_status_raise(&status, "multinomial");
}

trn_status trn_multinomial_launch(trn_stream *stream, const trn_multinomial_desc *d) {
    if (stream == NULL || d == NULL) return trn__check_launch(stream, d, "trn_multinomial_launch");
    if (!is_float(d->dtype))
        return trn__set_error(TRN_ERROR_UNSUPPORTED,
                              "trn_multinomial_launch: dtype %s is not supported",
                              trn_dtype_name(d->dtype));
    int64_t t;
    if (d->rows < 0 || d->categories <= 0 || d->samples < 0 ||
        (!d->replacement && d->samples > d->categories) ||
        __builtin_mul_overflow(d->rows, d->categories, &t) || __builtin_mul_overflow(t, 16, &t) ||
        __builtin_mul_overflow(d->rows, d->samples, &t) || __builtin_mul_overflow(t, 8, &t))
        return trn__set_error(TRN_ERROR_INVALID_ARGUMENT,
                              "trn_multinomial_launch: invalid sizes (rows %lld, categories %lld, "
                              "samples %lld, replacement %d)",
                              (long long)d->rows, (long long)d->categories, (long long)d->samples,
                              d->replacement);
    trn_status st = trn__fork_check();
    if (st != TRN_SUCCESS || d->rows * d->samples == 0) return st;
    if (d->probs == NULL || d->out == NULL)
        return trn__set_error(TRN_ERROR_INVALID_ARGUMENT,
                              "trn_multinomial_launch: probs or out is NULL");
    multi_args a = {.d = *d};
    return trn_stream_launch(stream, multi_task, &a, sizeof a);
}
