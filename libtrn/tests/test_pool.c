// test_pool.c - 2-d max / average pooling forward and backward against a
// direct reference (padding, stride, dilation, count_include_pad, divisor),
// NaN propagation, and argument errors (bad geometry, out-of-plane index).
#include <math.h>
#include <stdlib.h>

#include "internal.h"
#include "test.h"
#include "trn/pool.h"

static trn_stream *g_stream;

enum { P = 3, H = 9, W = 8 };

static float frand(unsigned *s) {
    *s = *s * 1103515245u + 12345u;
    return (float)(((*s >> 8) & 0xffff) / 32768.0 - 1.0);
}

static int64_t out_size(int64_t in, int64_t k, int64_t s, int64_t p, int64_t d) {
    return (in + 2 * p - d * (k - 1) - 1) / s + 1;
}

static void test_max(void) {
    static float x[P * H * W], y[P * H * W], dy[P * H * W], dx[P * H * W], ref[P * H * W];
    static int64_t ix[P * H * W];
    unsigned s = 7;
    for (int i = 0; i < P * H * W; i++) x[i] = frand(&s), dy[i] = frand(&s);
    x[5] = NAN;
    trn_pool2d_geometry g = {P, H, W, 0, 0, 3, 2, 2, 1, 1, 0, 1, 2, 0, 0};
    g.out_h = out_size(H, 3, 2, 1, 1);
    g.out_w = out_size(W, 2, 1, 0, 2);
    trn_pool2d_desc d = {TRN_DTYPE_F32, TRN_POOL_MAX, g, x, y, ix};
    CHECK_OK(trn_pool2d_launch(g_stream, &d));
    CHECK_OK(trn_stream_synchronize(g_stream));
    int bad = 0;
    memset(ref, 0, sizeof ref);
    for (int p = 0; p < P; p++)
        for (int oh = 0; oh < g.out_h; oh++)
            for (int ow = 0; ow < g.out_w; ow++) {
                float m = -INFINITY;
                int64_t best = -1;
                for (int kh = 0; kh < 3; kh++)
                    for (int kw = 0; kw < 2; kw++) {
                        const int h = oh * 2 - 1 + kh, w = ow * 1 + kw * 2;
                        if (h < 0 || h >= H || w >= W) continue;
                        const float v = x[p * H * W + h * W + w];
                        if (best < 0 || v > m || isnan(v)) m = v, best = h * W + w;
                    }
                const int o = p * (int)(g.out_h * g.out_w) + oh * (int)g.out_w + ow;
                bad += ix[o] != best || !(y[o] == m || (isnan(y[o]) && isnan(m)));
                ref[p * H * W + best] += dy[o];
            }
    CHECK_INT(bad, 0);
    trn_pool2d_backward_desc bd = {TRN_DTYPE_F32, TRN_POOL_MAX, g, dy, ix, dx};
    CHECK_OK(trn_pool2d_backward_launch(g_stream, &bd));
    CHECK_OK(trn_stream_synchronize(g_stream));
    double worst = 0;
    for (int i = 0; i < P * H * W; i++) worst = fmax(worst, fabs(dx[i] - ref[i]));
    CHECK(worst < 1e-6);
    // An index outside its plane is an error, not a wild write.
    ix[4] = H * W;
    CHECK_OK(trn_pool2d_backward_launch(g_stream, &bd));
    CHECK_INT(trn_stream_synchronize(g_stream), TRN_ERROR_INVALID_ARGUMENT);
}

static void test_avg(void) {
    static float x[P * H * W], y[P * H * W], dy[P * H * W], dx[P * H * W], ref[P * H * W];
    unsigned s = 11;
    for (int i = 0; i < P * H * W; i++) x[i] = frand(&s), dy[i] = frand(&s);
    for (int cip = 0; cip < 2; cip++) {
        trn_pool2d_geometry g = {P, H, W, 0, 0, 3, 3, 2, 2, 1, 1, 1, 1, cip, 0};
        g.out_h = out_size(H, 3, 2, 1, 1);
        g.out_w = out_size(W, 3, 2, 1, 1);
        trn_pool2d_desc d = {TRN_DTYPE_F32, TRN_POOL_AVG, g, x, y, NULL};
        CHECK_OK(trn_pool2d_launch(g_stream, &d));
        trn_pool2d_backward_desc bd = {TRN_DTYPE_F32, TRN_POOL_AVG, g, dy, NULL, dx};
        CHECK_OK(trn_pool2d_backward_launch(g_stream, &bd));
        CHECK_OK(trn_stream_synchronize(g_stream));
        memset(ref, 0, sizeof ref);
        double worst = 0;
        for (int p = 0; p < P; p++)
            for (int oh = 0; oh < g.out_h; oh++)
                for (int ow = 0; ow < g.out_w; ow++) {
                    double sum = 0;
                    int n = 0;
                    for (int h = oh * 2 - 1; h < oh * 2 + 2; h++)
                        for (int w = ow * 2 - 1; w < ow * 2 + 2; w++)
                            if (h >= 0 && h < H && w >= 0 && w < W)
                                sum += x[p * H * W + h * W + w], n++;
                    const int he = oh * 2 + 2 < H + 1 ? oh * 2 + 2 : H + 1;
                    const int we = ow * 2 + 2 < W + 1 ? ow * 2 + 2 : W + 1;
                    const int div = cip ? (he - (oh * 2 - 1)) * (we - (ow * 2 - 1)) : n;
                    const int o = p * (int)(g.out_h * g.out_w) + oh * (int)g.out_w + ow;
                    worst = fmax(worst, fabs(y[o] - sum / div));
                    for (int h = oh * 2 - 1; h < oh * 2 + 2; h++)
                        for (int w = ow * 2 - 1; w < ow * 2 + 2; w++)
                            if (h >= 0 && h < H && w >= 0 && w < W)
                                ref[p * H * W + h * W + w] += dy[o] / div;
                }
        for (int i = 0; i < P * H * W; i++) worst = fmax(worst, fabs(dx[i] - ref[i]));
        CHECK(worst < 1e-5);
    }
    trn_pool2d_geometry g = {P, H, W, 4, 4, 2, 2, 2, 2, 0, 0, 1, 1, 0, 5};
    trn_pool2d_desc d = {TRN_DTYPE_F32, TRN_POOL_AVG, g, x, y, NULL};
    CHECK_OK(trn_pool2d_launch(g_stream, &d));
    CHECK_OK(trn_stream_synchronize(g_stream));
    CHECK(fabs(y[0] - (x[0] + x[1] + x[W] + x[W + 1]) / 5) < 1e-6);
    d.g.sh = 0;
    CHECK_INT(trn_pool2d_launch(g_stream, &d), TRN_ERROR_INVALID_ARGUMENT);
    d.g.sh = 2;
    d.dtype = TRN_DTYPE_I64;
    CHECK_INT(trn_pool2d_launch(g_stream, &d), TRN_ERROR_UNSUPPORTED);
    CHECK_INT(trn_pool2d_launch(NULL, &d), TRN_ERROR_INVALID_ARGUMENT);
}

TEST_MAIN_DEFAULT_STREAM(test_max, test_avg)
