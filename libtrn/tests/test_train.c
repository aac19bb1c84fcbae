// test_train.c - layer norm (forward/backward against a double reference and
// finite differences of the definition), nll_loss (reductions, weights,
// ignore_index, out-of-range targets) and dropout (mask statistics,
// reproducibility, thread-split independence).
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"
#include "test.h"
#include "trn/convert.h"

static trn_stream *g_stream;

static double frand(unsigned *s) {
    *s = *s * 1103515245u + 12345u;
    return ((*s >> 8) & 0xffff) / 32768.0 - 1.0;
}

static void test_layer_norm(void) {
    enum { R = 37, C = 83 };
    static float x[R * C], y[R * C], w[C], b[C], mean[R], rstd[R], dy[R * C], dx[R * C];
    static float dw[C], db[C];
    unsigned s = 1;
    for (int i = 0; i < R * C; i++) x[i] = (float)(3 * frand(&s) + 1), dy[i] = (float)frand(&s);
    for (int j = 0; j < C; j++) w[j] = (float)frand(&s), b[j] = (float)frand(&s);
    trn_layer_norm_desc d = {TRN_DTYPE_F32, TRN_DTYPE_F32, TRN_DTYPE_F32, R, C, x, w, b, y,
                             mean,          rstd,          1e-5};
    CHECK_OK(trn_layer_norm_launch(g_stream, &d));
    CHECK_OK(trn_stream_synchronize(g_stream));
    double worst = 0;
    static double xh[R * C];
    for (int r = 0; r < R; r++) {
        double m = 0, v = 0;
        for (int j = 0; j < C; j++) m += x[r * C + j];
        m /= C;
        for (int j = 0; j < C; j++) v += (x[r * C + j] - m) * (x[r * C + j] - m);
        const double rs = 1.0 / sqrt(v / C + 1e-5);
        CHECK(fabs(mean[r] - m) < 1e-5 && fabs(rstd[r] - rs) < 1e-5 * rs);
        for (int j = 0; j < C; j++) {
            xh[r * C + j] = (x[r * C + j] - m) * rs;
            const double want = xh[r * C + j] * w[j] + b[j];
            worst = fmax(worst, fabs(y[r * C + j] - want));
        }
    }
    CHECK(worst < 1e-5);
    trn_layer_norm_backward_desc bd = {
        TRN_DTYPE_F32, TRN_DTYPE_F32, TRN_DTYPE_F32, R, C, dy, x, mean, rstd, w, dx, dw, db};
    CHECK_OK(trn_layer_norm_backward_launch(g_stream, &bd));
    CHECK_OK(trn_stream_synchronize(g_stream));
    worst = 0;
    for (int r = 0; r < R; r++) {
        double s1 = 0, s2 = 0;
        for (int j = 0; j < C; j++) {
            s1 += w[j] * dy[r * C + j];
            s2 += w[j] * dy[r * C + j] * xh[r * C + j];
        }
        for (int j = 0; j < C; j++) {
            const double want = rstd[r] * (w[j] * dy[r * C + j] - s1 / C - xh[r * C + j] * s2 / C);
            worst = fmax(worst, fabs(dx[r * C + j] - want));
        }
    }
    CHECK(worst < 1e-4);
    worst = 0;
    for (int j = 0; j < C; j++) {
        double gw = 0, gb = 0;
        for (int r = 0; r < R; r++) gw += dy[r * C + j] * xh[r * C + j], gb += dy[r * C + j];
        worst = fmax(worst, fmax(fabs(dw[j] - gw), fabs(db[j] - gb)));
    }
    CHECK(worst < 1e-4);
    // bfloat16 data with float32 parameters and stats; no weight/bias.
    static uint16_t xb[R * C], yb[R * C];
    for (int i = 0; i < R * C; i++) xb[i] = trn_float_to_bf16(x[i]);
    trn_layer_norm_desc d2 = {
        TRN_DTYPE_BF16, TRN_DTYPE_F32, TRN_DTYPE_F32, R, C, xb, NULL, NULL, yb, mean, rstd, 1e-5};
    CHECK_OK(trn_layer_norm_launch(g_stream, &d2));
    CHECK_OK(trn_stream_synchronize(g_stream));
    worst = 0;
    for (int i = 0; i < R * C; i++) worst = fmax(worst, fabs(trn_bf16_to_float(yb[i]) - xh[i]));
    CHECK(worst < 0.05);
    // Unsupported combination and invalid sizes.
    d2.param_dtype = TRN_DTYPE_F64;
    CHECK_INT(trn_layer_norm_launch(g_stream, &d2), TRN_ERROR_UNSUPPORTED);
    d.cols = 0;
    CHECK_INT(trn_layer_norm_launch(g_stream, &d), TRN_ERROR_INVALID_ARGUMENT);
    CHECK_INT(trn_layer_norm_launch(NULL, &d), TRN_ERROR_INVALID_ARGUMENT);
}

// The forward takes rows four at a time through its statistics: a launch
// of 7 rows (4 grouped, 3 alone) must give each row the bits of a launch of
// that row alone. Rows with mean ~100 make x - mean depend on the mean's
// low float part (GCC 12's vectorizer once dropped it for grouped rows:
// 1-ulp differences in y).
static void test_layer_norm_rows_grouped(void) {
    enum { R = 7, CMAX = 300 };
    static const int64_t cols[] = {256, 17, 300, 16};
    static float x[R * CMAX], y[R * CMAX], y1[CMAX], w[CMAX], b[CMAX], mean[R], rstd[R];
    static double xd[R * CMAX], yd[R * CMAX], yd1[CMAX], wd[CMAX], bd[CMAX], meand[R], rstdd[R];
    unsigned s = 7;
    for (int k = 0; k < 4; k++) {
        const int64_t n = cols[k];
        for (int i = 0; i < R * n; i++) x[i] = (float)(100 + 3 * frand(&s)), xd[i] = x[i];
        for (int j = 0; j < n; j++)
            w[j] = (float)frand(&s), b[j] = (float)frand(&s), wd[j] = w[j], bd[j] = b[j];
        trn_layer_norm_desc d = {TRN_DTYPE_F32, TRN_DTYPE_F32, TRN_DTYPE_F32, R, n, x, w, b, y,
                                 mean,          rstd,          1e-5};
        CHECK_OK(trn_layer_norm_launch(g_stream, &d));
        trn_layer_norm_desc dd = {TRN_DTYPE_F64, TRN_DTYPE_F64, TRN_DTYPE_F64, R, n, xd, wd, bd, yd,
                                  meand,         rstdd,         1e-5};
        CHECK_OK(trn_layer_norm_launch(g_stream, &dd));
        CHECK_OK(trn_stream_synchronize(g_stream));
        for (int r = 0; r < R; r++) {
            float m1, r1;
            double md1, rd1;
            trn_layer_norm_desc d1 = {
                TRN_DTYPE_F32, TRN_DTYPE_F32, TRN_DTYPE_F32, 1, n, x + r * n, w, b, y1,
                &m1,           &r1,           1e-5};
            CHECK_OK(trn_layer_norm_launch(g_stream, &d1));
            trn_layer_norm_desc dd1 = {
                TRN_DTYPE_F64, TRN_DTYPE_F64, TRN_DTYPE_F64, 1,   n, xd + r * n, wd, bd,
                yd1,           &md1,          &rd1,          1e-5};
            CHECK_OK(trn_layer_norm_launch(g_stream, &dd1));
            CHECK_OK(trn_stream_synchronize(g_stream));
            CHECK(memcmp(y1, y + r * n, (size_t)n * sizeof(float)) == 0);
            CHECK(memcmp(&m1, mean + r, sizeof m1) == 0 && memcmp(&r1, rstd + r, sizeof r1) == 0);
            CHECK(memcmp(yd1, yd + r * n, (size_t)n * sizeof(double)) == 0);
            CHECK(memcmp(&md1, meand + r, sizeof md1) == 0 &&
                  memcmp(&rd1, rstdd + r, sizeof rd1) == 0);
        }
    }
}

static void test_nll_loss(void) {
    enum { N = 6, C = 5 };
    float in[N * C], w[C] = {1, 2, 0.5f, 1.5f, 3}, out[N], tw, gi[N * C], go[N];
    int64_t t[N] = {0, 4, -100, 2, 2, 1};
    unsigned s = 7;
    for (int i = 0; i < N * C; i++) in[i] = (float)frand(&s);
    for (int i = 0; i < N; i++) go[i] = (float)(i + 1);
    double sum = 0, wsum = 0;
    for (int i = 0; i < N; i++)
        if (t[i] != -100) sum += -w[t[i]] * in[i * C + t[i]], wsum += w[t[i]];
    for (int red = 0; red < 3; red++) {
        trn_nll_loss_desc d = {
            TRN_DTYPE_F32, TRN_DTYPE_I64, (trn_reduction)red, N, C, 1, -100, in, t, w, out, &tw};
        CHECK_OK(trn_nll_loss_launch(g_stream, &d));
        CHECK_OK(trn_stream_synchronize(g_stream));
        if (red == TRN_REDUCTION_NONE) {
            CHECK(out[2] == 0.0f && fabs(out[1] + w[4] * in[1 * C + 4]) < 1e-6);
        } else {
            const double want = red == TRN_REDUCTION_MEAN ? sum / wsum : sum;
            CHECK(fabs(out[0] - want) < 1e-5 && fabs(tw - wsum) < 1e-5);
        }
        trn_nll_loss_backward_desc bd = {
            TRN_DTYPE_F32, TRN_DTYPE_I64, (trn_reduction)red, N, C, 1, -100, go, t, w, &tw, gi};
        CHECK_OK(trn_nll_loss_backward_launch(g_stream, &bd));
        CHECK_OK(trn_stream_synchronize(g_stream));
        const double g0 =
            red == TRN_REDUCTION_NONE ? go[1] : (red == TRN_REDUCTION_MEAN ? go[0] / tw : go[0]);
        CHECK(fabs(gi[1 * C + 4] + w[4] * g0) < 1e-5);
        CHECK(gi[1 * C + 3] == 0.0f && gi[2 * C + 0] == 0.0f);
    }
    t[3] = 5;
    trn_nll_loss_desc d = {
        TRN_DTYPE_F32, TRN_DTYPE_I64, TRN_REDUCTION_SUM, N, C, 1, -100, in, t, NULL, out, &tw};
    CHECK_OK(trn_nll_loss_launch(g_stream, &d));
    CHECK_INT(trn_stream_synchronize(g_stream), TRN_ERROR_INVALID_ARGUMENT);
    CHECK(strstr(trn_last_error(), "Target 5 is out of bounds.") != NULL);
    d.dtype = TRN_DTYPE_I32;
    CHECK_INT(trn_nll_loss_launch(g_stream, &d), TRN_ERROR_UNSUPPORTED);
}

static void test_dropout(void) {
    enum { N = 200000 };
    float *x = malloc(N * sizeof(float)), *o = malloc(N * sizeof(float));
    uint8_t *m = malloc(N), *m2 = malloc(N);
    CHECK(x && o && m && m2);
    if (!(x && o && m && m2)) return;
    for (int i = 0; i < N; i++) x[i] = 2.0f;
    trn_dropout_desc d = {TRN_DTYPE_F32, N, x, o, m, 0.25, 1.0 / 0.75, 42, 0};
    CHECK_OK(trn_dropout_launch(g_stream, &d));
    CHECK_OK(trn_stream_synchronize(g_stream));
    int kept = 0, bad = 0;
    for (int i = 0; i < N; i++) {
        kept += m[i];
        bad += m[i] ? fabsf(o[i] - 2.0f / 0.75f) > 1e-6f : o[i] != 0.0f;
    }
    CHECK_INT(bad, 0);
    CHECK(fabs(kept / (double)N - 0.75) < 0.01);
    // Mask only, same seed: same mask; another seed: a different one.
    trn_dropout_desc d2 = {TRN_DTYPE_F32, N, NULL, NULL, m2, 0.25, 0, 42, 0};
    CHECK_OK(trn_dropout_launch(g_stream, &d2));
    CHECK_OK(trn_stream_synchronize(g_stream));
    CHECK(memcmp(m, m2, N) == 0);
    d2.seed = 43;
    CHECK_OK(trn_dropout_launch(g_stream, &d2));
    CHECK_OK(trn_stream_synchronize(g_stream));
    CHECK(memcmp(m, m2, N) != 0);
    // Offsets: a mask of elements [k, N) at offset 5 + k is that part of the
    // mask of [0, N) at offset 5 (DTensor shards).
    d2.seed = 42, d2.offset = 5;
    CHECK_OK(trn_dropout_launch(g_stream, &d2));
    d2.n = N - 1000, d2.mask = m + 1000, d2.offset = 5 + 1000;
    CHECK_OK(trn_dropout_launch(g_stream, &d2));
    d2.n = 1000, d2.mask = m, d2.offset = 5;
    CHECK_OK(trn_dropout_launch(g_stream, &d2));
    CHECK_OK(trn_stream_synchronize(g_stream));
    d2.n = N, d2.mask = m2;
    CHECK(memcmp(m, m2, N) == 0);
    d2.p = 1.5;
    CHECK_INT(trn_dropout_launch(g_stream, &d2), TRN_ERROR_INVALID_ARGUMENT);
    free(x);
    free(o);
    free(m);
    free(m2);
}

TEST_MAIN_DEFAULT_STREAM(test_layer_norm, test_layer_norm_rows_grouped, test_nll_loss, test_dropout)
