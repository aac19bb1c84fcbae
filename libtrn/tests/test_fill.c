// test_fill.c - fill (host value, device value, strided, every element
// size), arange/linspace (PyTorch's formulas) and tril/triu (copy, in
// place, batched, strided), plus invalid descriptors. Runs again with
// TORCH_NEURONX_DEBUG_PROTECT_MEMORY=1.
#include <math.h>
#include <stdlib.h>

#include "internal.h"
#include "test.h"
#include "test_common_dev.h"

static trn_stream *g_stream;

static void test_fill(void) {
    enum { N = 300000 };
    float *h = malloc(N * sizeof(float));
    float *d = dev_alloc(g_stream, N * sizeof(float));
    int64_t n = N, one = 1;
    trn_fill_desc f = {TRN_DTYPE_F32, 1, &n, d, &one, {0}, NULL};
    float v = 2.5f;
    memcpy(f.value, &v, 4);
    CHECK_OK(trn_fill_launch(g_stream, &f));
    xfer(g_stream, h, d, N * sizeof(float));
    int ok = 1;
    for (int i = 0; i < N; i++) ok &= h[i] == 2.5f;
    CHECK(ok);
    // Strided 2-d view: every other column of a 100 x 200 matrix.
    int64_t sz[2] = {100, 100}, st[2] = {200, 2};
    v = 0.0f;
    memcpy(f.value, &v, 4);
    f.ndim = 2;
    f.sizes = sz;
    f.strides = st;
    CHECK_OK(trn_fill_launch(g_stream, &f));
    xfer(g_stream, h, d, 20000 * sizeof(float));
    ok = 1;
    for (int i = 0; i < 20000; i++) ok &= h[i] == ((i % 2) ? 2.5f : 0.0f);
    CHECK(ok);
    // Value from device memory, int64.
    int64_t *di = dev_alloc(g_stream, 1000 * 8), hv = -7, hi[1000];
    int64_t *dv = dev_alloc(g_stream, 8);
    xfer(g_stream, dv, &hv, 8);
    int64_t m = 1000;
    trn_fill_desc g = {TRN_DTYPE_I64, 1, &m, di, &one, {0}, dv};
    CHECK_OK(trn_fill_launch(g_stream, &g));
    xfer(g_stream, hi, di, sizeof hi);
    ok = 1;
    for (int i = 0; i < 1000; i++) ok &= hi[i] == -7;
    CHECK(ok);
    // 16-byte elements (complex128), 0-d.
    double *dc = dev_alloc(g_stream, 16), c[2] = {1.5, -2}, back[2];
    trn_fill_desc z = {TRN_DTYPE_C128, 0, NULL, dc, NULL, {0}, NULL};
    memcpy(z.value, c, 16);
    CHECK_OK(trn_fill_launch(g_stream, &z));
    xfer(g_stream, back, dc, 16);
    CHECK(back[0] == 1.5 && back[1] == -2);
    // Zero-size and invalid.
    int64_t zero = 0;
    trn_fill_desc e = {TRN_DTYPE_F32, 1, &zero, NULL, &one, {0}, NULL};
    CHECK_OK(trn_fill_launch(g_stream, &e));
    int64_t two = 2, zs = 0;
    trn_fill_desc bad = {TRN_DTYPE_F32, 1, &two, d, &zs, {0}, NULL};
    CHECK_STATUS(trn_fill_launch(g_stream, &bad), TRN_ERROR_INVALID_ARGUMENT);
    CHECK_STATUS(trn_fill_launch(g_stream, NULL), TRN_ERROR_INVALID_ARGUMENT);
    trn_mem_free(d);
    trn_mem_free(di);
    trn_mem_free(dv);
    trn_mem_free(dc);
    free(h);
}

static void test_range(void) {
    enum { N = 1001 };
    float *d = dev_alloc(g_stream, N * 4), h[N];
    trn_range_desc r = {TRN_RANGE_LINSPACE, TRN_DTYPE_F32, N, d, 1, -1.0, 0, 3.0, 0, 0};
    CHECK_OK(trn_range_launch(g_stream, &r));
    xfer(g_stream, h, d, sizeof h);
    const float step = (3.0f - -1.0f) / (float)(N - 1);
    int ok = 1;
    for (int i = 0; i < N; i++) {
        float want = i < N / 2 ? -1.0f + step * (float)i : 3.0f - step * (float)(N - i - 1);
        ok &= h[i] == want;
    }
    CHECK(ok);
    CHECK(h[0] == -1.0f && h[N - 1] == 3.0f);
    // linspace of one element is start.
    r.n = 1;
    CHECK_OK(trn_range_launch(g_stream, &r));
    xfer(g_stream, h, d, 4);
    CHECK(h[0] == -1.0f);
    // Integer arange with a stride of 2.
    int32_t *di = dev_alloc(g_stream, 20 * 4), hi[20];
    trn_range_desc a = {TRN_RANGE_ARANGE, TRN_DTYPE_I32, 10, di, 2, 0, 0, 0, 5, -3};
    CHECK_OK(trn_range_launch(g_stream, &a));
    xfer(g_stream, hi, di, sizeof hi);
    ok = 1;
    for (int i = 0; i < 10; i++) ok &= hi[2 * i] == 5 - 3 * i;
    CHECK(ok);
    trn_range_desc b = {TRN_RANGE_ARANGE, TRN_DTYPE_BOOL, 3, di, 1, 0, 0, 0, 0, 1};
    CHECK_STATUS(trn_range_launch(g_stream, &b), TRN_ERROR_UNSUPPORTED);
    trn_mem_free(d);
    trn_mem_free(di);
}

static void test_tri(void) {
    enum { B = 2, R = 5, C = 7 };
    int64_t sz[3] = {B, R, C}, st[3] = {R * C, C, 1};
    double h[B * R * C], o[B * R * C];
    for (int i = 0; i < B * R * C; i++) h[i] = i + 1;
    double *din = dev_alloc(g_stream, sizeof h), *dout = dev_alloc(g_stream, sizeof h);
    xfer(g_stream, din, h, sizeof h);
    for (int upper = 0; upper < 2; upper++)
        for (int64_t diag = -6; diag <= 8; diag += 2) {
            trn_tri_desc t = {upper, diag, TRN_DTYPE_F64, 3, sz, din, st, dout, st};
            CHECK_OK(trn_tri_launch(g_stream, &t));
            xfer(g_stream, o, dout, sizeof o);
            int ok = 1;
            for (int b = 0; b < B; b++)
                for (int i = 0; i < R; i++)
                    for (int j = 0; j < C; j++) {
                        int keep = upper ? j - i >= diag : j - i <= diag;
                        int k = (b * R + i) * C + j;
                        ok &= o[k] == (keep ? h[k] : 0.0);
                    }
            CHECK(ok);
        }
    // In place on a transposed (column-major) view, int16.
    int16_t hs[R * C], os[R * C];
    for (int i = 0; i < R * C; i++) hs[i] = (int16_t)(i + 1);
    int16_t *ds = dev_alloc(g_stream, sizeof hs);
    xfer(g_stream, ds, hs, sizeof hs);
    int64_t tsz[2] = {C, R}, tst[2] = {1, C};  // rows = C, cols = R
    trn_tri_desc t = {0, 0, TRN_DTYPE_I16, 2, tsz, ds, tst, ds, tst};
    CHECK_OK(trn_tri_launch(g_stream, &t));
    xfer(g_stream, os, ds, sizeof os);
    int ok = 1;
    for (int i = 0; i < C; i++)
        for (int j = 0; j < R; j++) ok &= os[i + j * C] == (j <= i ? hs[i + j * C] : 0);
    CHECK(ok);
    trn_tri_desc bad = {0, 0, TRN_DTYPE_I16, 1, tsz, ds, tst, ds, tst};
    CHECK_STATUS(trn_tri_launch(g_stream, &bad), TRN_ERROR_INVALID_ARGUMENT);
    trn_mem_free(din);
    trn_mem_free(dout);
    trn_mem_free(ds);
}

TEST_MAIN_DEFAULT_STREAM(test_fill, test_range, test_tri)
