// isin.c - owns the membership kernel of trn/isin.h.
//
// Every value becomes an unsigned 64-bit key whose equality is the dtype's
// ==: integers as their bits (zero-extended), floats with -0.0 made +0.0;
// a NaN gets no key (it equals nothing). The keys of test_elements are
// sorted once (qsort: the test set is usually small, and this runs on the
// stream's thread), then each element is a binary search, in parallel over
// elements. O((n + m) log m) instead of the O(n * m) of comparing all pairs.
#include <stdlib.h>
#include <string.h>

#include "../kit/launch.h"
#include "trn/convert.h"
#include "trn/isin.h"
#include "trn/isin.h"
#include "trn/parallel.h"

#define GRAIN (16 * 1024)  // elements per parallel piece

// Key of element i of p; returns 0 for a NaN (no key), else 1.
static int key_of(trn_dtype dt, const void *p, int64_t i, uint64_t *key) {
    switch (dt) {
    case TRN_DTYPE_BOOL: *key = ((const uint8_t *)p)[i] != 0; return 1;
    case TRN_DTYPE_U8: *key = ((const uint8_t *)p)[i]; return 1;
    case TRN_DTYPE_I8: *key = (uint64_t)(int64_t)((const int8_t *)p)[i]; return 1;
    case TRN_DTYPE_I16: *key = (uint64_t)(int64_t)((const int16_t *)p)[i]; return 1;
    case TRN_DTYPE_I32: *key = (uint64_t)(int64_t)((const int32_t *)p)[i]; return 1;
    case TRN_DTYPE_I64: *key = (uint64_t)((const int64_t *)p)[i]; return 1;
    case TRN_DTYPE_U16: *key = ((const uint16_t *)p)[i]; return 1;
    case TRN_DTYPE_U32: *key = ((const uint32_t *)p)[i]; return 1;
    case TRN_DTYPE_U64: *key = ((const uint64_t *)p)[i]; return 1;
    case TRN_DTYPE_F64: {
        double v = ((const double *)p)[i];
        if (v != v) return 0;
        if (v == 0) v = 0.0;
        memcpy(key, &v, 8);
        return 1;
    }
    default: {  // float family: exact in float32
        float v = dt == TRN_DTYPE_F32   ? ((const float *)p)[i]
                  : dt == TRN_DTYPE_F16 ? trn_half_to_float(((const uint16_t *)p)[i])
                                        : trn_bf16_to_float(((const uint16_t *)p)[i]);
        if (v != v) return 0;
        if (v == 0) v = 0.0f;
        uint32_t b;
        memcpy(&b, &v, 4);
        *key = b;
        return 1;
    }
    }
}

int trn_isin_supports(trn_dtype dtype) {
    return (unsigned)dtype < TRN_DTYPE_COUNT && dtype != TRN_DTYPE_C64 && dtype != TRN_DTYPE_C128;
}

static int cmp_u64(const void *a, const void *b) {
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return (x > y) - (x < y);
}

typedef struct isin_ctx {
    const trn_isin_desc *d;
    const uint64_t *keys;  // sorted test keys
    int64_t nk;
} isin_ctx;

static void isin_piece(void *vctx, int64_t begin, int64_t end) {
    const isin_ctx *c = vctx;
    const uint8_t miss = c->d->invert ? 1 : 0;
    for (int64_t i = begin; i < end; i++) {
        uint64_t k;
        uint8_t r = miss;
        if (key_of(c->d->dtype, c->d->elements, i, &k)) {
            int64_t lo = 0, hi = c->nk;  // first key >= k
            while (lo < hi) {
                int64_t mid = lo + (hi - lo) / 2;
                if (c->keys[mid] < k)
                    lo = mid + 1;
                else
                    hi = mid;
            }
            if (lo < c->nk && c->keys[lo] == k) r = !miss;
        }
        c->d->out[i] = r;
    }
}

typedef struct isin_args {
    trn_isin_desc d;
} isin_args;

static trn_status isin_task(void *args) {
    const trn_isin_desc *d = &((isin_args *)args)->d;
    const size_t es = trn_dtype_size(d->dtype);
    trn__access_set rg = {.count = 0};
    trn__access_add(&rg, d->elements, (size_t)d->n * es);
    trn__access_add(&rg, d->test_elements, (size_t)d->m * es);
    trn__access_add(&rg, d->out, (size_t)d->n);
    trn_status st = trn__access_begin(&rg);
    if (st != TRN_SUCCESS) return st;
    uint64_t *keys = malloc((size_t)(d->m > 0 ? d->m : 1) * sizeof(uint64_t));
    if (keys == NULL) {
        st = trn__set_error(TRN_ERROR_OUT_OF_MEMORY, "trn_isin_launch: out of host memory");
        goto out;
    }
    int64_t nk = 0;
    for (int64_t j = 0; j < d->m; j++) nk += key_of(d->dtype, d->test_elements, j, &keys[nk]);
    qsort(keys, (size_t)nk, sizeof(uint64_t), cmp_u64);
    isin_ctx c = {d, keys, nk};
    trn_parallel_for(d->n, GRAIN, isin_piece, &c);
    free(keys);
out:
    trn__access_end(&rg);
    return st;
}

trn_status trn_isin_launch(trn_stream *stream, const trn_isin_desc *d) {
    static const char fn[] = "trn_isin_launch";
    if (stream == NULL || d == NULL) return trn__check_launch(stream, d, fn);
    if (!trn_isin_supports(d->dtype))
        return trn__set_error(TRN_ERROR_UNSUPPORTED, "%s: dtype %s is not supported", fn,
                              (unsigned)d->dtype < TRN_DTYPE_COUNT ? trn_dtype_name(d->dtype)
                                                                   : "invalid");
    if (d->n < 0 || d->m < 0)
        return trn__set_error(TRN_ERROR_INVALID_ARGUMENT, "%s: negative size", fn);
    trn_status st = trn__fork_check();
    if (st != TRN_SUCCESS) return st;
    if (d->n == 0) return TRN_SUCCESS;
    if (d->elements == NULL || d->out == NULL || (d->m > 0 && d->test_elements == NULL))
        return trn__set_error(TRN_ERROR_INVALID_ARGUMENT, "%s: a data pointer is NULL", fn);
    isin_args a = {*d};
    return trn_stream_launch(stream, isin_task, &a, sizeof a);
}
