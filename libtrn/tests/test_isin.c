// test_isin.c - isin against a brute-force == reference: every dtype family,
// NaN and -0.0, invert, empty test set, parallel sizes, and argument errors.
// Runs again with TORCH_NEURONX_DEBUG_PROTECT_MEMORY=1.
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"
#include "test.h"
#include "test_common_dev.h"
#include "trn/convert.h"
#include "trn/isin.h"

static trn_stream *g_stream;

// Runs isin on host arrays (copied to the device) and returns the n results.
static uint8_t *run(trn_dtype dt, const void *el, int64_t n, const void *te, int64_t m,
                    int invert) {
    size_t es = trn_dtype_size(dt);
    void *de = dev_alloc(g_stream, (size_t)n * es), *dt_ = dev_alloc(g_stream, (size_t)m * es);
    uint8_t *dout = dev_alloc(g_stream, (size_t)n), *out = malloc((size_t)n + 1);
    xfer(g_stream, de, el, (size_t)n * es);
    xfer(g_stream, dt_, te, (size_t)m * es);
    trn_isin_desc d = {dt, invert, n, m, de, dt_, dout};
    CHECK_OK(trn_isin_launch(g_stream, &d));
    CHECK_OK(trn_stream_synchronize(g_stream));
    xfer(g_stream, out, dout, (size_t)n);
    trn_mem_free(de);
    trn_mem_free(dt_);
    trn_mem_free(dout);
    return out;
}

// Equality of el[i] and te[j] in the elements' own type (the reference).
typedef int (*eq_fn)(const void *el, int64_t i, const void *te, int64_t j);
static int eq_f64(const void *el, int64_t i, const void *te, int64_t j) {
    return ((const double *)el)[i] == ((const double *)te)[j];
}
static int eq_i64(const void *el, int64_t i, const void *te, int64_t j) {
    return ((const int64_t *)el)[i] == ((const int64_t *)te)[j];
}

// Results that differ from a brute-force search of the test set.
static int64_t mismatches(const uint8_t *out, const void *el, int64_t n, const void *te, int64_t m,
                          int invert, eq_fn eq) {
    int64_t bad = 0;
    for (int64_t i = 0; i < n; i++) {
        int found = 0;
        for (int64_t j = 0; j < m && !found; j++) found = eq(el, i, te, j);
        bad += out[i] != (uint8_t)(found ^ invert);
    }
    return bad;
}

static void check_f64(const double *el, int64_t n, const double *te, int64_t m) {
    for (int invert = 0; invert < 2; invert++) {
        uint8_t *out = run(TRN_DTYPE_F64, el, n, te, m, invert);
        CHECK_INT(mismatches(out, el, n, te, m, invert, eq_f64), 0);
        free(out);
    }
}

static void test_float(void) {
    double el[] = {1.0, -0.0, NAN, 2.5, 3.0, -7.0, 0.0, INFINITY};
    double te[] = {0.0, NAN, 3.0, INFINITY, 3.0};
    check_f64(el, 8, te, 5);
    check_f64(el, 8, te, 0);  // empty test set: nothing found
    // float32 / float16 / bfloat16: the same values, same answers.
    float f[8], ft[5];
    uint16_t h[8], ht[5], b[8], bt[5];
    for (int i = 0; i < 8; i++) {
        f[i] = (float)el[i];
        h[i] = trn_float_to_half(f[i]);
        b[i] = trn_float_to_bf16(f[i]);
    }
    for (int i = 0; i < 5; i++) {
        ft[i] = (float)te[i];
        ht[i] = trn_float_to_half(ft[i]);
        bt[i] = trn_float_to_bf16(ft[i]);
    }
    const uint8_t want[8] = {0, 1, 0, 0, 1, 0, 1, 1};
    uint8_t *o1 = run(TRN_DTYPE_F32, f, 8, ft, 5, 0), *o2 = run(TRN_DTYPE_F16, h, 8, ht, 5, 0),
            *o3 = run(TRN_DTYPE_BF16, b, 8, bt, 5, 0);
    CHECK(memcmp(o1, want, 8) == 0);
    CHECK(memcmp(o2, want, 8) == 0);
    CHECK(memcmp(o3, want, 8) == 0);
    free(o1);
    free(o2);
    free(o3);
}

static void test_int(void) {
    // int64 extremes (not exact in double) and a parallel-sized input.
    const int64_t n = 100000, m = 37;
    int64_t *el = malloc((size_t)n * 8), te[37];
    for (int64_t j = 0; j < m; j++) te[j] = (j * 7919) % 1000 - 500;
    te[0] = INT64_MAX;
    te[1] = INT64_MIN;
    for (int64_t i = 0; i < n; i++) el[i] = (i * 31) % 1001 - 500;
    el[0] = INT64_MAX - 1;  // same double as INT64_MAX, different integer
    el[1] = INT64_MIN;
    for (int invert = 0; invert < 2; invert++) {
        uint8_t *out = run(TRN_DTYPE_I64, el, n, te, m, invert);
        CHECK_INT(mismatches(out, el, n, te, m, invert, eq_i64), 0);
        CHECK_INT(out[0], invert);
        CHECK_INT(out[1], !invert);
        free(out);
    }
    free(el);
    int8_t e8[] = {-128, -1, 0, 127, 5}, t8[] = {-1, 127};
    uint8_t *o = run(TRN_DTYPE_I8, e8, 5, t8, 2, 0);
    const uint8_t w8[5] = {0, 1, 0, 1, 0};
    CHECK(memcmp(o, w8, 5) == 0);
    free(o);
}

static void test_errors(void) {
    int64_t x = 1;
    uint8_t out;
    trn_isin_desc d = {TRN_DTYPE_C64, 0, 1, 1, &x, &x, &out};
    CHECK_STATUS(trn_isin_launch(g_stream, &d), TRN_ERROR_UNSUPPORTED);
    d.dtype = TRN_DTYPE_I64;
    d.n = -1;
    CHECK_STATUS(trn_isin_launch(g_stream, &d), TRN_ERROR_INVALID_ARGUMENT);
    d.n = 1;
    d.out = NULL;
    CHECK_STATUS(trn_isin_launch(g_stream, &d), TRN_ERROR_INVALID_ARGUMENT);
    CHECK_STATUS(trn_isin_launch(NULL, &d), TRN_ERROR_INVALID_ARGUMENT);
}

TEST_MAIN_DEFAULT_STREAM(test_float, test_int, test_errors)
