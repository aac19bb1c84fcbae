// test_rms_norm.c - RMS norm forward against a double reference (float32,
// float64 and bfloat16 with a float32 weight), backward (dx, dweight)
// against finite differences of the float64 forward, and argument errors.
#include <math.h>
#include <stdlib.h>

#include "internal.h"
#include "test.h"
#include "trn/convert.h"
#include "trn/rms_norm.h"

static trn_stream *g_stream;

static double frand(unsigned *s) {
    *s = *s * 1103515245u + 12345u;
    return ((*s >> 8) & 0xffff) / 32768.0 - 1.0;
}

enum { R = 5, K = 9, N = R * K };

static double loss(const double *x, const double *w, const double *dy) {
    double y[N];
    trn_rms_norm_desc d = {TRN_DTYPE_F64, TRN_DTYPE_F64, TRN_DTYPE_F64, R, K, x, w, y, NULL, 1e-6};
    CHECK_OK(trn_rms_norm_launch(g_stream, &d));
    CHECK_OK(trn_stream_synchronize(g_stream));
    double l = 0;
    for (int i = 0; i < N; i++) l += dy[i] * y[i];
    return l;
}

static void test_forward(void) {
    float x[N], y[N], w[K], rstd[R];
    unsigned s = 5;
    for (int i = 0; i < N; i++) x[i] = (float)(2 * frand(&s));
    for (int k = 0; k < K; k++) w[k] = (float)frand(&s);
    trn_rms_norm_desc d = {TRN_DTYPE_F32, TRN_DTYPE_F32, TRN_DTYPE_F32, R, K, x, w, y, rstd, 1e-6};
    CHECK_OK(trn_rms_norm_launch(g_stream, &d));
    CHECK_OK(trn_stream_synchronize(g_stream));
    double worst = 0;
    for (int r = 0; r < R; r++) {
        double sq = 0;
        for (int k = 0; k < K; k++) sq += (double)x[r * K + k] * x[r * K + k];
        const double inv = 1 / sqrt(sq / K + 1e-6);
        CHECK(fabs(rstd[r] - inv) < 1e-6 * inv);
        for (int k = 0; k < K; k++)
            worst = fmax(worst, fabs(y[r * K + k] - x[r * K + k] * inv * w[k]));
    }
    CHECK(worst < 1e-5);
    // bfloat16 data, float32 weight, no rstd wanted.
    uint16_t xb[N], yb[N];
    for (int i = 0; i < N; i++) xb[i] = trn_float_to_bf16(x[i]);
    d.dtype = TRN_DTYPE_BF16;
    d.x = xb;
    d.y = yb;
    d.rstd = NULL;
    CHECK_OK(trn_rms_norm_launch(g_stream, &d));
    CHECK_OK(trn_stream_synchronize(g_stream));
    worst = 0;
    for (int i = 0; i < N; i++) worst = fmax(worst, fabs(trn_bf16_to_float(yb[i]) - y[i]));
    CHECK(worst < 0.05);
}

static void test_backward(void) {
    double x[N], dy[N], w[K], y[N], rstd[R], dx[N], dw[K];
    unsigned s = 9;
    for (int i = 0; i < N; i++) x[i] = 2 * frand(&s), dy[i] = frand(&s);
    for (int k = 0; k < K; k++) w[k] = frand(&s) + 1.5;
    trn_rms_norm_desc f = {TRN_DTYPE_F64, TRN_DTYPE_F64, TRN_DTYPE_F64, R, K, x, w, y, rstd, 1e-6};
    CHECK_OK(trn_rms_norm_launch(g_stream, &f));
    trn_rms_norm_backward_desc d = {
        TRN_DTYPE_F64, TRN_DTYPE_F64, TRN_DTYPE_F64, R, K, dy, x, rstd, w, dx, dw};
    CHECK_OK(trn_rms_norm_backward_launch(g_stream, &d));
    CHECK_OK(trn_stream_synchronize(g_stream));
    const double h = 1e-6;
    double worst = 0;
    for (int i = 0; i < N; i++) {
        const double x0 = x[i];
        x[i] = x0 + h;
        const double lp = loss(x, w, dy);
        x[i] = x0 - h;
        const double lm = loss(x, w, dy);
        x[i] = x0;
        worst = fmax(worst, fabs(dx[i] - (lp - lm) / (2 * h)));
    }
    for (int k = 0; k < K; k++) {
        const double w0 = w[k];
        w[k] = w0 + h;
        const double lp = loss(x, w, dy);
        w[k] = w0 - h;
        const double lm = loss(x, w, dy);
        w[k] = w0;
        worst = fmax(worst, fabs(dw[k] - (lp - lm) / (2 * h)));
    }
    CHECK(worst < 1e-6);
    // No rows: dweight is written as zeros.
    dw[0] = 5;
    trn_rms_norm_backward_desc e = {
        TRN_DTYPE_F64, TRN_DTYPE_F64, TRN_DTYPE_F64, 0, K, NULL, NULL, NULL, w, NULL, dw};
    CHECK_OK(trn_rms_norm_backward_launch(g_stream, &e));
    CHECK_OK(trn_stream_synchronize(g_stream));
    CHECK(dw[0] == 0);
}

static void test_errors(void) {
    float x[4], y[4];
    trn_rms_norm_desc d = {TRN_DTYPE_F32, TRN_DTYPE_F32, TRN_DTYPE_F64, 2, 2, x, NULL, y,
                           NULL,          1e-6};
    CHECK_INT(trn_rms_norm_launch(g_stream, &d), TRN_ERROR_UNSUPPORTED);  // rstd must be F32
    d.stat_dtype = TRN_DTYPE_F32;
    d.cols = 0;
    CHECK_INT(trn_rms_norm_launch(g_stream, &d), TRN_ERROR_INVALID_ARGUMENT);
    d.cols = 2;
    d.x = NULL;
    CHECK_INT(trn_rms_norm_launch(g_stream, &d), TRN_ERROR_INVALID_ARGUMENT);
    CHECK_INT(trn_rms_norm_launch(NULL, &d), TRN_ERROR_INVALID_ARGUMENT);
    CHECK_INT(trn_rms_norm_backward_launch(g_stream, NULL), TRN_ERROR_INVALID_ARGUMENT);
    trn_clear_error();
}

TEST_MAIN_DEFAULT_STREAM(test_forward, test_backward, test_errors)
