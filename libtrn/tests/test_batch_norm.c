// test_batch_norm.c - batch norm forward (training: batch stats, saved stats,
// running-stat update with momentum and unbiased variance; eval), backward
// (training and eval) against a double reference, and argument errors.
#include <math.h>
#include <stdlib.h>

#include "internal.h"
#include "test.h"
#include "trn/batch_norm.h"

static trn_stream *g_stream;

static double frand(unsigned *s) {
    *s = *s * 1103515245u + 12345u;
    return ((*s >> 8) & 0xffff) / 32768.0 - 1.0;
}

enum { B = 5, C = 7, S = 13, N = B * C * S };

static void test_forward_backward(void) {
    static float x[N], y[N], dy[N], dx[N];
    float w[C], bias[C], rm[C], rv[C], sm[C], si[C], dw[C], db[C];
    double mean[C], var[C];
    unsigned s = 3;
    for (int i = 0; i < N; i++) x[i] = (float)(2 * frand(&s) + 0.5), dy[i] = (float)frand(&s);
    for (int c = 0; c < C; c++)
        w[c] = (float)frand(&s), bias[c] = (float)frand(&s), rm[c] = 0.25f, rv[c] = 2.0f;
    for (int c = 0; c < C; c++) {
        double m = 0, v = 0;
        for (int b = 0; b < B; b++)
            for (int i = 0; i < S; i++) m += x[(b * C + c) * S + i];
        m /= B * S;
        for (int b = 0; b < B; b++)
            for (int i = 0; i < S; i++) v += pow(x[(b * C + c) * S + i] - m, 2);
        mean[c] = m, var[c] = v;
    }
    trn_batch_norm_desc d = {TRN_DTYPE_F32, TRN_DTYPE_F32, B, C, S, x, w, bias, rm, rv, y, sm, si,
                             1, 0.1, 1e-5};
    CHECK_OK(trn_batch_norm_launch(g_stream, &d));
    CHECK_OK(trn_stream_synchronize(g_stream));
    double worst = 0;
    for (int c = 0; c < C; c++) {
        const double inv = 1 / sqrt(var[c] / (B * S) + 1e-5);
        CHECK(fabs(sm[c] - mean[c]) < 1e-6 && fabs(si[c] - inv) < 1e-5 * inv);
        CHECK(fabs(rm[c] - (0.9 * 0.25 + 0.1 * mean[c])) < 1e-6);
        CHECK(fabs(rv[c] - (0.9 * 2.0 + 0.1 * var[c] / (B * S - 1))) < 1e-5);
        for (int b = 0; b < B; b++)
            for (int i = 0; i < S; i++) {
                const int k = (b * C + c) * S + i;
                worst = fmax(worst, fabs(y[k] - ((x[k] - mean[c]) * inv * w[c] + bias[c])));
            }
    }
    CHECK(worst < 1e-5);
    // Backward, training.
    trn_batch_norm_backward_desc bd = {TRN_DTYPE_F32, TRN_DTYPE_F32, B, C, S, dy, x, w, sm, si,
                                       1, 1e-5, dx, dw, db};
    CHECK_OK(trn_batch_norm_backward_launch(g_stream, &bd));
    CHECK_OK(trn_stream_synchronize(g_stream));
    worst = 0;
    for (int c = 0; c < C; c++) {
        double g = 0, gx = 0;
        const double inv = si[c];
        for (int b = 0; b < B; b++)
            for (int i = 0; i < S; i++) {
                const int k = (b * C + c) * S + i;
                g += dy[k], gx += dy[k] * (x[k] - mean[c]) * inv;
            }
        worst = fmax(worst, fmax(fabs(dw[c] - gx), fabs(db[c] - g)));
        for (int b = 0; b < B; b++)
            for (int i = 0; i < S; i++) {
                const int k = (b * C + c) * S + i;
                const double xh = (x[k] - mean[c]) * inv;
                const double want = w[c] * inv * (dy[k] - g / (B * S) - xh * gx / (B * S));
                worst = fmax(worst, fabs(dx[k] - want));
            }
    }
    CHECK(worst < 1e-4);
    // Eval: running stats are read, not written; backward is w invstd dy.
    const float rm0 = rm[2], rv0 = rv[2];
    d.training = 0;
    CHECK_OK(trn_batch_norm_launch(g_stream, &d));
    bd.training = 0;
    bd.mean = rm;
    bd.invstd_or_var = rv;
    CHECK_OK(trn_batch_norm_backward_launch(g_stream, &bd));
    CHECK_OK(trn_stream_synchronize(g_stream));
    CHECK(rm[2] == rm0 && rv[2] == rv0);
    worst = 0;
    for (int k = 0; k < N; k++) {
        const int c = (k / S) % C;
        const double inv = 1 / sqrt(rv[c] + 1e-5);
        worst = fmax(worst, fabs(y[k] - ((x[k] - rm[c]) * inv * w[c] + bias[c])));
        worst = fmax(worst, fabs(dx[k] - dy[k] * inv * w[c]));
    }
    CHECK(worst < 1e-5);
    // No affine parameters, no running stats (track_running_stats=False).
    trn_batch_norm_desc d3 = {TRN_DTYPE_F32, TRN_DTYPE_F32, B, C, S, x, NULL, NULL, NULL, NULL,
                              y, NULL, NULL, 1, 0.1, 1e-5};
    CHECK_OK(trn_batch_norm_launch(g_stream, &d3));
    CHECK_OK(trn_stream_synchronize(g_stream));
    worst = 0;
    for (int k = 0; k < N; k++) {
        const int c = (k / S) % C;
        worst = fmax(worst, fabs(y[k] - (x[k] - mean[c]) / sqrt(var[c] / (B * S) + 1e-5)));
    }
    CHECK(worst < 1e-5);
    // Errors: eval without running stats, bad dtypes, NULL stream, bad sizes.
    d3.training = 0;
    CHECK_INT(trn_batch_norm_launch(g_stream, &d3), TRN_ERROR_INVALID_ARGUMENT);
    d3.training = 1;
    d3.param_dtype = TRN_DTYPE_F64;
    CHECK_INT(trn_batch_norm_launch(g_stream, &d3), TRN_ERROR_UNSUPPORTED);
    CHECK_INT(trn_batch_norm_launch(NULL, &d), TRN_ERROR_INVALID_ARGUMENT);
    d.channels = -1;
    CHECK_INT(trn_batch_norm_launch(g_stream, &d), TRN_ERROR_INVALID_ARGUMENT);
    CHECK_INT(trn_batch_norm_backward_launch(g_stream, NULL), TRN_ERROR_INVALID_ARGUMENT);
}

int main(void) {
    CHECK_OK(trn_stream_get_default(0, &g_stream));
    test_forward_backward();
    return TEST_REPORT();
}
