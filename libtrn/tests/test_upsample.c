// test_upsample.c - nearest / nearest-exact / bilinear / bicubic source positions on
// hand-checked cases, the backward as the exact adjoint of the forward
// (<up(x), g> == <x, up_backward(g)>) in float64, a bfloat16 run, and
// argument errors.
#include <math.h>
#include <stdlib.h>

#include "internal.h"
#include "test.h"
#include "trn/convert.h"
#include "trn/upsample.h"

static trn_stream *g_stream;

static double frand(unsigned *s) {
    *s = *s * 1103515245u + 12345u;
    return ((*s >> 8) & 0xffff) / 32768.0 - 1.0;
}

static trn_upsample_desc desc1d(trn_upsample_mode m, int64_t in, int64_t out, const void *src,
                                void *dst) {
    trn_upsample_desc d = {TRN_DTYPE_F32, m, 0, 1, {1, 1, in}, {1, 1, out}, {0, 0, 0}, src, dst, 1};
    return d;
}

static void test_positions(void) {
    const float x[3] = {10, 20, 30};
    float y[5];
    // in 3 -> out 5, scale 0.6: nearest floor(o * 0.6) = 0 0 1 1 2;
    // exact floor((o + 0.5) * 0.6) = 0 0 1 2 2.
    trn_upsample_desc d = desc1d(TRN_UPSAMPLE_NEAREST, 3, 5, x, y);
    CHECK_OK(trn_upsample_launch(g_stream, &d));
    CHECK_OK(trn_stream_synchronize(g_stream));
    CHECK(y[0] == 10 && y[1] == 10 && y[2] == 20 && y[3] == 20 && y[4] == 30);
    d.mode = TRN_UPSAMPLE_NEAREST_EXACT;
    CHECK_OK(trn_upsample_launch(g_stream, &d));
    CHECK_OK(trn_stream_synchronize(g_stream));
    CHECK(y[0] == 10 && y[1] == 10 && y[2] == 20 && y[3] == 30 && y[4] == 30);
    // An explicit scale factor wins over in / out: scale 2 on 3 -> 5 reads o / 2.
    d.mode = TRN_UPSAMPLE_NEAREST;
    d.scales[2] = 2.0;
    CHECK_OK(trn_upsample_launch(g_stream, &d));
    CHECK_OK(trn_stream_synchronize(g_stream));
    CHECK(y[0] == 10 && y[1] == 10 && y[2] == 20 && y[3] == 20 && y[4] == 30);
    // Bilinear 1 x 2 -> 1 x 3 with align_corners: 10 15 20. 1 x 2 -> 1 x 4
    // with half-pixel positions (o + 0.5) / 2 - 0.5, clamped at 0 and at the
    // last pixel: 10 12.5 17.5 20.
    const float x2[2] = {10, 20};
    float y3[3], y4[4];
    trn_upsample_desc b = {
        TRN_DTYPE_F32, TRN_UPSAMPLE_BILINEAR, 1, 1, {1, 1, 2}, {1, 1, 3}, {0, 0, 0}, x2, y3, 1};
    CHECK_OK(trn_upsample_launch(g_stream, &b));
    CHECK_OK(trn_stream_synchronize(g_stream));
    CHECK(y3[0] == 10 && y3[1] == 15 && y3[2] == 20);
    b.align_corners = 0;
    b.out_size[2] = 4;
    b.dst = y4;
    CHECK_OK(trn_upsample_launch(g_stream, &b));
    CHECK_OK(trn_stream_synchronize(g_stream));
    CHECK(y4[0] == 10 && y4[1] == 12.5 && y4[2] == 17.5 && y4[3] == 20);
}

// Infinities through linear: a 1-d op (spatial_dims 1) has no h / d taps,
// so -inf between -inf and -2 stays -inf (ATen's linear kernel); the same
// sizes as a 2-d op keep the h tap of weight 0 (ATen's bilinear: 0 * inf is
// NaN there too).
static void test_linear_infinities(void) {
    const float x[4] = {-INFINITY, -2.0f, 1.0f, INFINITY};
    float y[5];
    trn_upsample_desc d = desc1d(TRN_UPSAMPLE_BILINEAR, 4, 5, x, y);
    d.align_corners = 1;
    CHECK_OK(trn_upsample_launch(g_stream, &d));
    CHECK_OK(trn_stream_synchronize(g_stream));
    // sources 0, 0.75, 1.5, 2.25, 3: -inf, -inf, -0.5, +inf, 1 * inf + 0 * inf
    CHECK(y[0] == -INFINITY && y[1] == -INFINITY && y[2] == -0.5f && y[3] == INFINITY);
    CHECK(isnan(y[4]));
    d.spatial_dims = 2;
    CHECK_OK(trn_upsample_launch(g_stream, &d));
    CHECK_OK(trn_stream_synchronize(g_stream));
    CHECK(isnan(y[0]) && isnan(y[1]) && y[2] == -0.5f && isnan(y[3]));
}

// <up(x), g> == <x, up_backward(g)> for one configuration, float64.
static void check_adjoint(trn_upsample_mode m, int align, const int64_t in[3],
                          const int64_t out[3]) {
    enum { P = 3 };
    const int64_t ni = P * in[0] * in[1] * in[2], no = P * out[0] * out[1] * out[2];
    double *x = malloc(sizeof(double) * ni), *gi = malloc(sizeof(double) * ni);
    double *y = malloc(sizeof(double) * no), *g = malloc(sizeof(double) * no);
    unsigned s = 17;
    for (int64_t i = 0; i < ni; i++) x[i] = frand(&s);
    for (int64_t i = 0; i < no; i++) g[i] = frand(&s);
    trn_upsample_desc d = {
        TRN_DTYPE_F64, m, align, P, {in[0], in[1], in[2]}, {out[0], out[1], out[2]},
        {0, 0, 0},     x, y,     3};
    CHECK_OK(trn_upsample_launch(g_stream, &d));
    d.src = g;
    d.dst = gi;
    CHECK_OK(trn_upsample_backward_launch(g_stream, &d));
    CHECK_OK(trn_stream_synchronize(g_stream));
    double a = 0, b = 0;
    for (int64_t i = 0; i < no; i++) a += y[i] * g[i];
    for (int64_t i = 0; i < ni; i++) b += x[i] * gi[i];
    CHECK(fabs(a - b) < 1e-9 * (1 + fabs(a)));
    free(x);
    free(gi);
    free(y);
    free(g);
}

static void test_backward_adjoint(void) {
    const int64_t in3[3] = {2, 3, 4}, out3[3] = {3, 7, 5}, down3[3] = {1, 2, 3};
    check_adjoint(TRN_UPSAMPLE_NEAREST, 0, in3, out3);
    check_adjoint(TRN_UPSAMPLE_NEAREST_EXACT, 0, in3, out3);
    check_adjoint(TRN_UPSAMPLE_NEAREST, 0, in3, down3);
    const int64_t in2[3] = {1, 3, 4}, out2[3] = {1, 5, 9}, small2[3] = {1, 2, 3};
    check_adjoint(TRN_UPSAMPLE_BILINEAR, 0, in2, out2);
    check_adjoint(TRN_UPSAMPLE_BILINEAR, 1, in2, out2);
    check_adjoint(TRN_UPSAMPLE_BILINEAR, 0, in2, small2);
    check_adjoint(TRN_UPSAMPLE_BILINEAR, 0, in3, out3);  // trilinear
    check_adjoint(TRN_UPSAMPLE_BILINEAR, 1, in3, out3);
    check_adjoint(TRN_UPSAMPLE_BILINEAR, 0, in3, down3);
    check_adjoint(TRN_UPSAMPLE_BICUBIC, 0, in2, out2);
    check_adjoint(TRN_UPSAMPLE_BICUBIC, 1, in2, out2);
    check_adjoint(TRN_UPSAMPLE_BICUBIC, 0, in2, small2);
}

// Bicubic: the four weights sum to 1 (a constant stays constant), a linear
// ramp is reproduced away from the clamped borders (Keys' kernel is exact
// for linear data), and a 3-d request is refused.
static void test_bicubic(void) {
    double x[6 * 6], y[11 * 11];
    for (int i = 0; i < 36; i++) x[i] = 2.5;
    trn_upsample_desc d = {
        TRN_DTYPE_F64, TRN_UPSAMPLE_BICUBIC, 1, 1, {1, 6, 6}, {1, 11, 11}, {0, 0, 0}, x, y, 2};
    CHECK_OK(trn_upsample_launch(g_stream, &d));
    CHECK_OK(trn_stream_synchronize(g_stream));
    double worst = 0;
    for (int i = 0; i < 121; i++) worst = fmax(worst, fabs(y[i] - 2.5));
    CHECK(worst < 1e-12);
    for (int h = 0; h < 6; h++)
        for (int w = 0; w < 6; w++) x[h * 6 + w] = 3.0 * w - h;
    CHECK_OK(trn_upsample_launch(g_stream, &d));
    CHECK_OK(trn_stream_synchronize(g_stream));
    // align_corners 6 -> 11: output o sits at o / 2; rows / columns 2..8
    // only read taps inside the input.
    worst = 0;
    for (int oh = 2; oh <= 8; oh++)
        for (int ow = 2; ow <= 8; ow++)
            worst = fmax(worst, fabs(y[oh * 11 + ow] - (3.0 * ow / 2 - oh / 2.0)));
    CHECK(worst < 1e-12);
    d.in_size[0] = d.out_size[0] = 2;
    CHECK_INT(trn_upsample_launch(g_stream, &d), TRN_ERROR_INVALID_ARGUMENT);
    trn_clear_error();
}

static void test_bf16(void) {
    // bfloat16 backward: 4 outputs summed into 1 input, rounded once.
    uint16_t g[4], gi[1];
    for (int i = 0; i < 4; i++) g[i] = trn_float_to_bf16(1.0f + 1.0f / 128);
    trn_upsample_desc d = {
        TRN_DTYPE_BF16, TRN_UPSAMPLE_NEAREST, 0, 1, {1, 1, 1}, {1, 2, 2}, {0, 0, 0}, g, gi, 2};
    CHECK_OK(trn_upsample_backward_launch(g_stream, &d));
    CHECK_OK(trn_stream_synchronize(g_stream));
    CHECK(trn_bf16_to_float(gi[0]) == 4.0f + 4.0f / 128);
}

static void test_errors(void) {
    float x[4] = {1, 2, 3, 4}, y[4];
    trn_upsample_desc d = desc1d(TRN_UPSAMPLE_NEAREST, 0, 4, x, y);
    CHECK_INT(trn_upsample_launch(g_stream, &d), TRN_ERROR_INVALID_ARGUMENT);
    d = desc1d(TRN_UPSAMPLE_NEAREST, 2, 4, x, NULL);
    CHECK_INT(trn_upsample_launch(g_stream, &d), TRN_ERROR_INVALID_ARGUMENT);
    // Integers: the nearest forward moves them; arithmetic modes refuse them.
    d = desc1d(TRN_UPSAMPLE_NEAREST, 2, 4, x, y);
    d.dtype = TRN_DTYPE_I32;
    CHECK_OK(trn_upsample_launch(g_stream, &d));
    CHECK_OK(trn_stream_synchronize(g_stream));
    CHECK(memcmp(&y[2], &x[1], sizeof(float)) == 0);
    CHECK_INT(trn_upsample_backward_launch(g_stream, &d), TRN_ERROR_UNSUPPORTED);
    d.mode = TRN_UPSAMPLE_BILINEAR;
    CHECK_INT(trn_upsample_launch(g_stream, &d), TRN_ERROR_UNSUPPORTED);
    d.dtype = TRN_DTYPE_F32;
    d = desc1d(TRN_UPSAMPLE_NEAREST, 2, 4, x, y);
    d.mode = (trn_upsample_mode)7;
    CHECK_INT(trn_upsample_launch(g_stream, &d), TRN_ERROR_INVALID_ARGUMENT);
    CHECK_INT(trn_upsample_backward_launch(NULL, &d), TRN_ERROR_INVALID_ARGUMENT);
    trn_clear_error();
}

TEST_MAIN_DEFAULT_STREAM(test_positions, test_linear_infinities, test_bicubic,
                         test_backward_adjoint, test_bf16, test_errors)
