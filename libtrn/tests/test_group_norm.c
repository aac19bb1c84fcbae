// test_group_norm.c - group norm forward against a double reference (float32
// and float64), backward (dx, dweight, dbias) against finite differences of
// the float64 forward, a 16-bit run, and argument errors.
#include <math.h>
#include <stdlib.h>

#include "internal.h"
#include "test.h"
#include "trn/convert.h"
#include "trn/group_norm.h"

static trn_stream *g_stream;

static double frand(unsigned *s) {
    *s = *s * 1103515245u + 12345u;
    return ((*s >> 8) & 0xffff) / 32768.0 - 1.0;
}

enum { B = 2, C = 6, S = 5, G = 3, N = B * C * S };

// L = sum(dy * group_norm(x, w, b)) in float64.
static double loss(const double *x, const double *w, const double *b, const double *dy) {
    double y[N];
    trn_group_norm_desc d = {TRN_DTYPE_F64, TRN_DTYPE_F64, TRN_DTYPE_F64, B, C, S, G, x, w, b, y,
                             NULL,          NULL,          1e-5};
    CHECK_OK(trn_group_norm_launch(g_stream, &d));
    CHECK_OK(trn_stream_synchronize(g_stream));
    double l = 0;
    for (int i = 0; i < N; i++) l += dy[i] * y[i];
    return l;
}

static void test_forward(void) {
    static float x[N], y[N], w[C], b[C], mean[B * G], rstd[B * G];
    unsigned s = 7;
    for (int i = 0; i < N; i++) x[i] = (float)(3 * frand(&s) + 1);
    for (int c = 0; c < C; c++) w[c] = (float)frand(&s), b[c] = (float)frand(&s);
    trn_group_norm_desc d = {TRN_DTYPE_F32, TRN_DTYPE_F32, TRN_DTYPE_F32, B, C, S, G, x, w, b, y,
                             mean,          rstd,          1e-5};
    CHECK_OK(trn_group_norm_launch(g_stream, &d));
    CHECK_OK(trn_stream_synchronize(g_stream));
    const int len = C / G * S;
    double worst = 0;
    for (int r = 0; r < B * G; r++) {
        double m = 0, v = 0;
        for (int i = 0; i < len; i++) m += x[r * len + i];
        m /= len;
        for (int i = 0; i < len; i++) v += pow(x[r * len + i] - m, 2);
        const double inv = 1 / sqrt(v / len + 1e-5);
        CHECK(fabs(mean[r] - m) < 1e-6 && fabs(rstd[r] - inv) < 1e-6 * inv);
        for (int i = 0; i < len; i++) {
            const int c = (r % G) * (C / G) + i / S;
            worst = fmax(worst, fabs(y[r * len + i] - ((x[r * len + i] - m) * inv * w[c] + b[c])));
        }
    }
    CHECK(worst < 1e-5);
    // bfloat16 data with float32 parameters and statistics (mixed type).
    uint16_t xb[N], yb[N];
    for (int i = 0; i < N; i++) xb[i] = trn_float_to_bf16(x[i]);
    d.dtype = TRN_DTYPE_BF16;
    d.x = xb;
    d.y = yb;
    CHECK_OK(trn_group_norm_launch(g_stream, &d));
    CHECK_OK(trn_stream_synchronize(g_stream));
    worst = 0;
    for (int i = 0; i < N; i++) worst = fmax(worst, fabs(trn_bf16_to_float(yb[i]) - y[i]));
    CHECK(worst < 0.05);
}

static void test_backward(void) {
    static double x[N], dy[N], w[C], b[C], mean[B * G], rstd[B * G], y[N], dx[N];
    double dw[C], db[C];
    unsigned s = 11;
    for (int i = 0; i < N; i++) x[i] = 2 * frand(&s), dy[i] = frand(&s);
    for (int c = 0; c < C; c++) w[c] = frand(&s) + 1.5, b[c] = frand(&s);
    trn_group_norm_desc f = {TRN_DTYPE_F64, TRN_DTYPE_F64, TRN_DTYPE_F64, B, C, S, G, x, w, b, y,
                             mean,          rstd,          1e-5};
    CHECK_OK(trn_group_norm_launch(g_stream, &f));
    trn_group_norm_backward_desc d = {
        TRN_DTYPE_F64, TRN_DTYPE_F64, TRN_DTYPE_F64, B, C, S, G, dy, x, mean, rstd, w, dx, dw, db};
    CHECK_OK(trn_group_norm_backward_launch(g_stream, &d));
    CHECK_OK(trn_stream_synchronize(g_stream));
    const double h = 1e-6;
    double worst = 0;
    for (int i = 0; i < N; i++) {
        const double x0 = x[i];
        x[i] = x0 + h;
        const double lp = loss(x, w, b, dy);
        x[i] = x0 - h;
        const double lm = loss(x, w, b, dy);
        x[i] = x0;
        worst = fmax(worst, fabs(dx[i] - (lp - lm) / (2 * h)));
    }
    for (int c = 0; c < C; c++) {
        const double w0 = w[c], b0 = b[c];
        w[c] = w0 + h;
        double lp = loss(x, w, b, dy);
        w[c] = w0 - h;
        double lm = loss(x, w, b, dy);
        w[c] = w0;
        worst = fmax(worst, fabs(dw[c] - (lp - lm) / (2 * h)));
        b[c] = b0 + h;
        lp = loss(x, w, b, dy);
        b[c] = b0 - h;
        lm = loss(x, w, b, dy);
        b[c] = b0;
        worst = fmax(worst, fabs(db[c] - (lp - lm) / (2 * h)));
    }
    CHECK(worst < 1e-6);
    // Only the parameter grads; no weight.
    d.dx = NULL;
    d.weight = NULL;
    CHECK_OK(trn_group_norm_backward_launch(g_stream, &d));
    CHECK_OK(trn_stream_synchronize(g_stream));
    CHECK(isfinite(dw[0]) && isfinite(db[0]));
}

static void test_errors(void) {
    float x[12], y[12];
    trn_group_norm_desc d = {
        TRN_DTYPE_F32, TRN_DTYPE_F32, TRN_DTYPE_F32, 1, 4, 3, 3, x, NULL, NULL, y,
        NULL,          NULL,          1e-5};
    CHECK_INT(trn_group_norm_launch(g_stream, &d), TRN_ERROR_INVALID_ARGUMENT);  // 3 !| 4
    d.groups = 0;
    CHECK_INT(trn_group_norm_launch(g_stream, &d), TRN_ERROR_INVALID_ARGUMENT);
    d.groups = 2;
    d.dtype = TRN_DTYPE_I32;
    CHECK_INT(trn_group_norm_launch(g_stream, &d), TRN_ERROR_UNSUPPORTED);
    d.dtype = TRN_DTYPE_F32;
    d.param_dtype = TRN_DTYPE_F64;
    CHECK_INT(trn_group_norm_launch(g_stream, &d), TRN_ERROR_UNSUPPORTED);
    d.param_dtype = TRN_DTYPE_F32;
    d.y = NULL;
    CHECK_INT(trn_group_norm_launch(g_stream, &d), TRN_ERROR_INVALID_ARGUMENT);
    CHECK_INT(trn_group_norm_launch(NULL, &d), TRN_ERROR_INVALID_ARGUMENT);
    CHECK_INT(trn_group_norm_backward_launch(g_stream, NULL), TRN_ERROR_INVALID_ARGUMENT);
    trn_clear_error();
}

TEST_MAIN_DEFAULT_STREAM(test_forward, test_backward, test_errors)
