// test_pool3d.c - 3-d max / average pooling (fixed windows with padding,
// stride, dilation, count_include_pad, divisor) and adaptive pooling
// forward and backward against direct references; NaN propagation, the
// 16-bit path, and argument errors (bad geometry, out-of-volume index).
#include <math.h>
#include <stdlib.h>

#include "internal.h"
#include "test.h"
#include "trn/convert.h"
#include "trn/pool3d.h"

static trn_stream *g_stream;

enum { P = 2, D = 5, H = 6, W = 7, N = P * D * H * W };

static float frand(unsigned *s) {
    *s = *s * 1103515245u + 12345u;
    return (float)(((*s >> 8) & 0xffff) / 32768.0 - 1.0);
}

static float x[N], dy[N], y[N], dx[N], ref[N];
static int64_t ix[N];

static void fill(unsigned seed) {
    for (int i = 0; i < N; i++) x[i] = frand(&seed), dy[i] = frand(&seed);
}

static int64_t at(int d, int h, int w) { return ((int64_t)d * H + h) * W + w; }

// Fixed 3-d max pool: kernel (2,3,2), stride (2,1,2), padding (1,1,0), dilation (1,2,1).
static void test_max(void) {
    fill(3);
    x[at(1, 2, 3)] = NAN;
    trn_pool3d_geometry g = {.planes = P,
                             .in = {D, H, W},
                             .k = {2, 3, 2},
                             .s = {2, 1, 2},
                             .p = {1, 1, 0},
                             .dil = {1, 2, 1}};
    for (int i = 0; i < 3; i++)
        g.out[i] = (g.in[i] + 2 * g.p[i] - g.dil[i] * (g.k[i] - 1) - 1) / g.s[i] + 1;
    const int64_t on = g.out[0] * g.out[1] * g.out[2];
    trn_pool3d_desc d = {TRN_DTYPE_F32, TRN_POOL_MAX, g, x, y, ix};
    CHECK_OK(trn_pool3d_launch(g_stream, &d));
    CHECK_OK(trn_stream_synchronize(g_stream));
    memset(ref, 0, sizeof ref);
    int bad = 0;
    for (int p = 0; p < P; p++)
        for (int od = 0; od < g.out[0]; od++)
            for (int oh = 0; oh < g.out[1]; oh++)
                for (int ow = 0; ow < g.out[2]; ow++) {
                    float m = -INFINITY;
                    int64_t best = -1;
                    for (int kd = 0; kd < 2; kd++)
                        for (int kh = 0; kh < 3; kh++)
                            for (int kw = 0; kw < 2; kw++) {
                                const int dd = od * 2 - 1 + kd, h = oh - 1 + 2 * kh,
                                          w = ow * 2 + kw;
                                if (dd < 0 || dd >= D || h < 0 || h >= H || w >= W) continue;
                                const float v = x[p * D * H * W + at(dd, h, w)];
                                if (best < 0 || v > m || isnan(v)) m = v, best = at(dd, h, w);
                            }
                    const int64_t o = p * on + (od * g.out[1] + oh) * g.out[2] + ow;
                    bad += ix[o] != best || !(y[o] == m || (isnan(y[o]) && isnan(m)));
                    ref[p * D * H * W + best] += dy[o];
                }
    CHECK_INT(bad, 0);
    trn_pool3d_backward_desc bd = {TRN_DTYPE_F32, TRN_POOL_MAX, g, dy, ix, dx};
    CHECK_OK(trn_pool3d_backward_launch(g_stream, &bd));
    CHECK_OK(trn_stream_synchronize(g_stream));
    double worst = 0;
    for (int i = 0; i < N; i++) worst = fmax(worst, fabs(dx[i] - ref[i]));
    CHECK(worst < 1e-6);
    ix[1] = D * H * W;  // outside its volume: an error, not a wild write
    CHECK_OK(trn_pool3d_backward_launch(g_stream, &bd));
    CHECK_INT(trn_stream_synchronize(g_stream), TRN_ERROR_INVALID_ARGUMENT);
}

// Fixed 3-d average: kernel 3, stride 2, padding 1, with and without
// counting padding, and a divisor.
static void test_avg(void) {
    fill(5);
    for (int mode = 0; mode < 3; mode++) {
        trn_pool3d_geometry g = {.planes = P,
                                 .in = {D, H, W},
                                 .k = {3, 3, 3},
                                 .s = {2, 2, 2},
                                 .p = {1, 1, 1},
                                 .dil = {1, 1, 1},
                                 .count_include_pad = mode == 1,
                                 .divisor = mode == 2 ? 4 : 0};
        for (int i = 0; i < 3; i++) g.out[i] = (g.in[i] + 2 - 3) / 2 + 1;
        const int64_t on = g.out[0] * g.out[1] * g.out[2];
        trn_pool3d_desc d = {TRN_DTYPE_F32, TRN_POOL_AVG, g, x, y, NULL};
        trn_pool3d_backward_desc bd = {TRN_DTYPE_F32, TRN_POOL_AVG, g, dy, NULL, dx};
        CHECK_OK(trn_pool3d_launch(g_stream, &d));
        CHECK_OK(trn_pool3d_backward_launch(g_stream, &bd));
        CHECK_OK(trn_stream_synchronize(g_stream));
        memset(ref, 0, sizeof ref);
        double worst = 0;
        for (int p = 0; p < P; p++)
            for (int od = 0; od < g.out[0]; od++)
                for (int oh = 0; oh < g.out[1]; oh++)
                    for (int ow = 0; ow < g.out[2]; ow++) {
                        double s = 0;
                        int n = 0, padded = 1;
                        const int lo[3] = {od * 2 - 1, oh * 2 - 1, ow * 2 - 1}, in[3] = {D, H, W};
                        for (int i = 0; i < 3; i++) {
                            const int e = lo[i] + 3 < in[i] + 1 ? lo[i] + 3 : in[i] + 1;
                            padded *= e - lo[i];
                        }
                        for (int dd = lo[0]; dd < lo[0] + 3; dd++)
                            for (int h = lo[1]; h < lo[1] + 3; h++)
                                for (int w = lo[2]; w < lo[2] + 3; w++)
                                    if (dd >= 0 && dd < D && h >= 0 && h < H && w >= 0 && w < W)
                                        s += x[p * D * H * W + at(dd, h, w)], n++;
                        const double div = mode == 2 ? 4 : mode == 1 ? padded : n;
                        const int64_t o = p * on + (od * g.out[1] + oh) * g.out[2] + ow;
                        worst = fmax(worst, fabs(y[o] - s / div));
                        for (int dd = lo[0]; dd < lo[0] + 3; dd++)
                            for (int h = lo[1]; h < lo[1] + 3; h++)
                                for (int w = lo[2]; w < lo[2] + 3; w++)
                                    if (dd >= 0 && dd < D && h >= 0 && h < H && w >= 0 && w < W)
                                        ref[p * D * H * W + at(dd, h, w)] += dy[o] / div;
                    }
        for (int i = 0; i < N; i++) worst = fmax(worst, fabs(dx[i] - ref[i]));
        CHECK(worst < 1e-5);
    }
}

// Adaptive windows [floor(o*in/out), ceil((o+1)*in/out)) for max and average.
static void test_adaptive(void) {
    fill(9);
    const int64_t out[3] = {3, 4, 5};
    trn_pool3d_geometry g = {.planes = P, .in = {D, H, W}, .out = {3, 4, 5}, .adaptive = 1};
    const int64_t on = out[0] * out[1] * out[2];
    static float ya[N], dxa[N], refa[N];
    trn_pool3d_desc d = {TRN_DTYPE_F32, TRN_POOL_MAX, g, x, y, ix};
    trn_pool3d_desc da = {TRN_DTYPE_F32, TRN_POOL_AVG, g, x, ya, NULL};
    trn_pool3d_backward_desc bd = {TRN_DTYPE_F32, TRN_POOL_MAX, g, dy, ix, dx};
    trn_pool3d_backward_desc bda = {TRN_DTYPE_F32, TRN_POOL_AVG, g, dy, NULL, dxa};
    CHECK_OK(trn_pool3d_launch(g_stream, &d));
    CHECK_OK(trn_pool3d_launch(g_stream, &da));
    CHECK_OK(trn_pool3d_backward_launch(g_stream, &bd));
    CHECK_OK(trn_pool3d_backward_launch(g_stream, &bda));
    CHECK_OK(trn_stream_synchronize(g_stream));
    memset(ref, 0, sizeof ref);
    memset(refa, 0, sizeof refa);
    int bad = 0;
    double worst = 0;
    const int in[3] = {D, H, W};
    for (int p = 0; p < P; p++)
        for (int64_t o = 0; o < on; o++) {
            const int64_t pos[3] = {o / (out[1] * out[2]), (o / out[2]) % out[1], o % out[2]};
            int b[3], e[3];
            for (int i = 0; i < 3; i++) {
                b[i] = (int)floor((double)pos[i] * in[i] / out[i]);
                e[i] = (int)ceil((double)(pos[i] + 1) * in[i] / out[i]);
            }
            float m = -INFINITY;
            int64_t best = -1;
            double s = 0;
            const int n = (e[0] - b[0]) * (e[1] - b[1]) * (e[2] - b[2]);
            for (int dd = b[0]; dd < e[0]; dd++)
                for (int h = b[1]; h < e[1]; h++)
                    for (int w = b[2]; w < e[2]; w++) {
                        const float v = x[p * D * H * W + at(dd, h, w)];
                        s += v;
                        refa[p * D * H * W + at(dd, h, w)] += dy[p * on + o] / n;
                        if (best < 0 || v > m) m = v, best = at(dd, h, w);
                    }
            bad += ix[p * on + o] != best || y[p * on + o] != m;
            worst = fmax(worst, fabs(ya[p * on + o] - s / n));
            ref[p * D * H * W + best] += dy[p * on + o];
        }
    CHECK_INT(bad, 0);
    for (int i = 0; i < N; i++)
        worst = fmax(worst, fmax(fabs(dx[i] - ref[i]), fabs(dxa[i] - refa[i])));
    CHECK(worst < 1e-5);
    // bfloat16 gives the same maxima (exact) and indices.
    static uint16_t xb[N], yb[N];
    static int64_t ixb[N];
    for (int i = 0; i < N; i++) xb[i] = trn_float_to_bf16(x[i]);
    trn_pool3d_desc db = {TRN_DTYPE_BF16, TRN_POOL_MAX, g, xb, yb, ixb};
    CHECK_OK(trn_pool3d_launch(g_stream, &db));
    CHECK_OK(trn_stream_synchronize(g_stream));
    bad = 0;
    for (int64_t o = 0; o < P * on; o++) bad += yb[o] != xb[(o / on) * D * H * W + ixb[o]];
    CHECK_INT(bad, 0);
}

static void test_errors(void) {
    trn_pool3d_geometry g = {.planes = 1,
                             .in = {2, 2, 2},
                             .out = {1, 1, 1},
                             .k = {2, 2, 2},
                             .s = {0, 1, 1},
                             .dil = {1, 1, 1}};
    trn_pool3d_desc d = {TRN_DTYPE_F32, TRN_POOL_MAX, g, x, y, ix};
    CHECK_INT(trn_pool3d_launch(g_stream, &d), TRN_ERROR_INVALID_ARGUMENT);  // zero stride
    d.g.s[0] = 1;
    d.dtype = TRN_DTYPE_I32;
    CHECK_INT(trn_pool3d_launch(g_stream, &d), TRN_ERROR_UNSUPPORTED);
    d.dtype = TRN_DTYPE_F32;
    d.indices = NULL;
    CHECK_INT(trn_pool3d_launch(g_stream, &d), TRN_ERROR_INVALID_ARGUMENT);
    CHECK_INT(trn_pool3d_launch(NULL, &d), TRN_ERROR_INVALID_ARGUMENT);
    CHECK_INT(trn_pool3d_launch(g_stream, NULL), TRN_ERROR_INVALID_ARGUMENT);
    d.g.adaptive = 1;
    d.g.out[0] = INT64_MAX;  // (out + 1) * in overflows
    CHECK_INT(trn_pool3d_launch(g_stream, &d), TRN_ERROR_INVALID_ARGUMENT);
}

TEST_MAIN_DEFAULT_STREAM(test_max, test_avg, test_adaptive, test_errors)
