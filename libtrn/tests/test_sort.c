// test_sort.c - sort (stable, both directions, NaN and -0.0 order, packed
// and wide keys, strided rows, parallel rows), topk (heap and sort paths)
// and unique (sorted and consecutive) against a simple stable reference.
// Runs again with TORCH_NEURONX_DEBUG_PROTECT_MEMORY=1.
#include <math.h>
#include <stdlib.h>

#include "internal.h"
#include "test.h"
#include "test_common_dev.h"

static trn_stream *g_stream;
static uint64_t rng = 88172645463325252ull;
static uint64_t rnd(void) {
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return rng;
}

// PyTorch's order: NaN largest, -0 == 0.
static int lt(double a, double b) { return (isnan(b) && !isnan(a)) || a < b; }

// Stable reference sort of indices of x[0..n).
static void ref_sort(const double *x, int64_t n, int desc, int64_t *idx) {
    for (int64_t i = 0; i < n; i++) idx[i] = i;
    for (int64_t i = 1; i < n; i++) {
        int64_t v = idx[i], j = i;
        for (; j > 0 && (desc ? lt(x[idx[j - 1]], x[v]) : lt(x[v], x[idx[j - 1]])); j--)
            idx[j] = idx[j - 1];
        idx[j] = v;
    }
}

static double pick_value(int kind) {
    uint64_t r = rnd() % 100;
    if (kind && r < 5) return NAN;
    if (kind && r < 10) return -0.0;
    if (kind && r < 15) return 0.0;
    return (double)(int)(rnd() % 41) - 20;  // many duplicates
}

// Frees one check's device input / values / indices and its host buffers.
static void release(void *d, void *dv, void *dx, void *h, void *hv, void *hx, void *ref) {
    trn_mem_free(d);
    trn_mem_free(dv);
    trn_mem_free(dx);
    free(h);
    free(hv);
    free(hx);
    free(ref);
}

static void check_sort_f32(int64_t rows, int64_t n, int desc) {
    float *h = malloc((size_t)(rows * n) * 4), *hv = malloc((size_t)(rows * n) * 4);
    int64_t *hx = malloc((size_t)(rows * n) * 8), *ref = malloc((size_t)n * 8);
    double *x = malloc((size_t)n * 8);
    // Rows along dim 0 of a [n, rows] matrix: stride rows.
    for (int64_t i = 0; i < rows * n; i++) h[i] = (float)pick_value(1);
    float *d = dev_alloc(g_stream, (size_t)(rows * n) * 4);
    float *dv = dev_alloc(g_stream, (size_t)(rows * n) * 4);
    int64_t *dx = dev_alloc(g_stream, (size_t)(rows * n) * 8);
    xfer(g_stream, d, h, (size_t)(rows * n) * 4);
    int64_t one = 1;
    trn_sort_desc s = {TRN_DTYPE_F32, desc, 1,    &rows, &one, &one, &one, n,
                       rows,          rows, rows, 0,     1,    d,    dv,   dx};
    CHECK_OK(trn_sort_launch(g_stream, &s));
    xfer(g_stream, hv, dv, (size_t)(rows * n) * 4);
    xfer(g_stream, hx, dx, (size_t)(rows * n) * 8);
    int ok = 1;
    for (int64_t r = 0; r < rows; r++) {
        for (int64_t i = 0; i < n; i++) x[i] = h[i * rows + r];
        ref_sort(x, n, desc, ref);
        for (int64_t i = 0; i < n; i++) {
            ok &= hx[i * rows + r] == ref[i];
            float want = (float)x[ref[i]], got = hv[i * rows + r];
            ok &= memcmp(&want, &got, 4) == 0;
        }
    }
    CHECK(ok);
    release(d, dv, dx, h, hv, hx, ref);
    free(x);
}

static void test_sort(void) {
    for (int desc = 0; desc < 2; desc++) {
        check_sort_f32(1, 20, desc);    // insertion sort
        check_sort_f32(3, 1000, desc);  // radix, strided rows
        check_sort_f32(500, 40, desc);  // many rows, parallel
    }
    // int64 (wide keys) with extremes, and uint8.
    enum { N = 777 };
    int64_t h[N], hv[N], hx[N], ref[N];
    double x[N];
    for (int i = 0; i < N; i++) h[i] = (int64_t)(rnd() % 7) - 3;
    h[3] = INT64_MIN;
    h[9] = INT64_MAX;
    for (int i = 0; i < N; i++) x[i] = (double)h[i];
    int64_t *d = dev_alloc(g_stream, sizeof h), *dv = dev_alloc(g_stream, sizeof h);
    int64_t *dx = dev_alloc(g_stream, sizeof h);
    xfer(g_stream, d, h, sizeof h);
    for (int desc = 0; desc < 2; desc++) {
        trn_sort_desc s = {
            TRN_DTYPE_I64, desc, 0, NULL, NULL, NULL, NULL, N, 1, 1, 1, 0, 1, d, dv, dx};
        CHECK_OK(trn_sort_launch(g_stream, &s));
        xfer(g_stream, hv, dv, sizeof hv);
        xfer(g_stream, hx, dx, sizeof hx);
        ref_sort(x, N, desc, ref);
        int ok = 1;
        for (int i = 0; i < N; i++) ok &= hx[i] == ref[i] && hv[i] == h[ref[i]];
        CHECK(ok);
    }
    uint8_t b[N], bv[N];
    for (int i = 0; i < N; i++) b[i] = (uint8_t)rnd();
    for (int i = 0; i < N; i++) x[i] = b[i];
    xfer(g_stream, d, b, N);
    trn_sort_desc s = {TRN_DTYPE_U8, 0, 0, NULL, NULL, NULL, NULL, N, 1, 1, 1, 0, 1, d, dv, dx};
    CHECK_OK(trn_sort_launch(g_stream, &s));
    xfer(g_stream, bv, dv, N);
    xfer(g_stream, hx, dx, sizeof hx);
    ref_sort(x, N, 0, ref);
    int ok = 1;
    for (int i = 0; i < N; i++) ok &= hx[i] == ref[i] && bv[i] == b[ref[i]];
    CHECK(ok);
    s.dtype = TRN_DTYPE_C64;
    CHECK_STATUS(trn_sort_launch(g_stream, &s), TRN_ERROR_UNSUPPORTED);
    trn_mem_free(d);
    trn_mem_free(dv);
    trn_mem_free(dx);
}

static void test_topk(void) {
    enum { N = 5000 };
    double *h = malloc(N * 8), *hv = malloc(N * 8);
    int64_t *hx = malloc(N * 8), *ref = malloc(N * 8);
    for (int i = 0; i < N; i++) h[i] = pick_value(1);
    double *d = dev_alloc(g_stream, N * 8), *dv = dev_alloc(g_stream, N * 8);
    int64_t *dx = dev_alloc(g_stream, N * 8);
    xfer(g_stream, d, h, N * 8);
    const int64_t ks[] = {1, 10, 600, 2500, N};
    for (int largest = 0; largest < 2; largest++)
        for (size_t q = 0; q < sizeof ks / sizeof ks[0]; q++) {
            const int64_t k = ks[q];
            trn_sort_desc s = {
                TRN_DTYPE_F64, largest, 0, NULL, NULL, NULL, NULL, N, 1, 1, 1, k, 1, d, dv, dx};
            CHECK_OK(trn_topk_launch(g_stream, &s));
            xfer(g_stream, hv, dv, (size_t)k * 8);
            xfer(g_stream, hx, dx, (size_t)k * 8);
            ref_sort(h, N, largest, ref);
            int ok = 1;
            for (int64_t i = 0; i < k; i++) {
                double want = h[ref[i]];
                ok &= memcmp(&want, &hv[i], 8) == 0 || (want == 0 && hv[i] == 0);
                ok &= hx[i] == ref[i];  // ties resolve to the earliest index
            }
            CHECK(ok);
        }
    trn_sort_desc bad = {TRN_DTYPE_F64, 0, 0, NULL, NULL, NULL, NULL, N, 1, 1, 1,
                         N + 1,         1, d, dv,   dx};
    CHECK_STATUS(trn_topk_launch(g_stream, &bad), TRN_ERROR_INVALID_ARGUMENT);
    release(d, dv, dx, h, hv, hx, ref);
}

static void test_unique(void) {
    float h[12] = {3, NAN, 1, 3, -0.0f, 0, NAN, 1, 1, 2, 2, 3};
    float *d = dev_alloc(g_stream, sizeof h), *dv = dev_alloc(g_stream, sizeof h), hv[12];
    int64_t *di = dev_alloc(g_stream, 12 * 8), *dc = dev_alloc(g_stream, 12 * 8);
    int64_t hi[12], hc[12], nu = -1;
    xfer(g_stream, d, h, sizeof h);
    trn_unique_desc u = {TRN_DTYPE_F32, 0, 12, d, dv, di, dc, &nu};
    CHECK_OK(trn_unique_launch(g_stream, &u));
    CHECK_OK(trn_stream_synchronize(g_stream));
    CHECK_INT(nu, 6);  // -0/0, 1, 2, 3, NaN, NaN
    xfer(g_stream, hv, dv, sizeof hv);
    xfer(g_stream, hi, di, sizeof hi);
    xfer(g_stream, hc, dc, sizeof hc);
    CHECK(hv[0] == 0 && signbit(hv[0]) && hv[1] == 1 && hv[2] == 2 && hv[3] == 3);
    CHECK(isnan(hv[4]) && isnan(hv[5]));
    const int64_t wc[6] = {2, 3, 2, 3, 1, 1}, wi[12] = {3, 4, 1, 3, 0, 0, 5, 1, 1, 2, 2, 3};
    int ok = 1;
    for (int i = 0; i < 6; i++) ok &= hc[i] == wc[i];
    for (int i = 0; i < 12; i++) ok &= hi[i] == wi[i];
    CHECK(ok);
    u.consecutive = 1;
    u.counts = NULL;
    CHECK_OK(trn_unique_launch(g_stream, &u));
    CHECK_OK(trn_stream_synchronize(g_stream));
    CHECK_INT(nu, 9);  // 3 NaN 1 3 (-0 0) NaN (1 1) (2 2) 3
    xfer(g_stream, hi, di, sizeof hi);
    const int64_t ci[12] = {0, 1, 2, 3, 4, 4, 5, 6, 6, 7, 7, 8};
    ok = 1;
    for (int i = 0; i < 12; i++) ok &= hi[i] == ci[i];
    CHECK(ok);
    trn_mem_free(d);
    trn_mem_free(dv);
    trn_mem_free(di);
    trn_mem_free(dc);
}

TEST_MAIN_DEFAULT_STREAM(test_sort, test_topk, test_unique)
