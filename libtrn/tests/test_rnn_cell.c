// test_rnn_cell.c - fused LSTM / GRU cells: forward against a double
// reference of the cell equations (float64, float32, bfloat16; with and
// without biases; a batch large enough to run in parallel), backward against
// central finite differences of that reference (float64), bias gradients as
// batch sums (also of an empty batch), and argument errors.
#include <math.h>
#include <stdlib.h>

#include "internal.h"
#include "test.h"
#include "trn/convert.h"
#include "trn/rnn_cell.h"

static trn_stream *g_stream;

static double frand(unsigned *s) {
    *s = *s * 1103515245u + 12345u;
    return ((*s >> 8) & 0xffff) / 32768.0 - 1.0;
}

static double sigm(double x) { return 1 / (1 + exp(-x)); }

// The cell equations, written out directly (biases may be NULL).
static void lstm_ref(int B, int H, const double *ig, const double *hg, const double *bi,
                     const double *bh, const double *cx, double *hy, double *cy) {
    for (int b = 0; b < B; b++)
        for (int j = 0; j < H; j++) {
            double p[4];
            for (int k = 0; k < 4; k++) {
                const int c = k * H + j;
                p[k] = ig[b * 4 * H + c] + hg[b * 4 * H + c] + (bi ? bi[c] : 0) + (bh ? bh[c] : 0);
            }
            const double c = sigm(p[1]) * cx[b * H + j] + sigm(p[0]) * tanh(p[2]);
            cy[b * H + j] = c;
            hy[b * H + j] = sigm(p[3]) * tanh(c);
        }
}

static void gru_ref(int B, int H, const double *ig, const double *hg, const double *bi,
                    const double *bh, const double *hx, double *hy) {
    for (int b = 0; b < B; b++)
        for (int j = 0; j < H; j++) {
            const double *i = ig + b * 3 * H + j, *h = hg + b * 3 * H + j;
            const double r = sigm(i[0] + h[0] + (bi ? bi[j] : 0) + (bh ? bh[j] : 0));
            const double z = sigm(i[H] + h[H] + (bi ? bi[H + j] : 0) + (bh ? bh[H + j] : 0));
            const double n = tanh(i[2 * H] + (bi ? bi[2 * H + j] : 0) +
                                  r * (h[2 * H] + (bh ? bh[2 * H + j] : 0)));
            hy[b * H + j] = (1 - z) * n + z * hx[b * H + j];
        }
}

enum { B = 3, H = 4, G4 = 4 * H, G3 = 3 * H };

static void fill(unsigned *s, double *p, int n, double scale) {
    for (int i = 0; i < n; i++) p[i] = scale * frand(s);
}

// One small case: its operands, and which optional ones it passes. The loss
// is the weighted sum of the outputs whose gradient the backward computes.
typedef struct lstm_case {
    double ig[B * G4], hg[B * G4], bi[G4], bh[G4], cx[B * H], gh[B * H], gc[B * H];
    int with_bias, with_gh;
} lstm_case;

static double lstm_loss(const void *ctx) {
    const lstm_case *t = ctx;
    double hy[B * H], cy[B * H], l = 0;
    lstm_ref(B, H, t->ig, t->hg, t->with_bias ? t->bi : NULL, t->with_bias ? t->bh : NULL, t->cx,
             hy, cy);
    for (int e = 0; e < B * H; e++) l += (t->with_gh ? t->gh[e] * hy[e] : 0) + t->gc[e] * cy[e];
    return l;
}

typedef struct gru_case {
    double ig[B * G3], hg[B * G3], bi[G3], bh[G3], hx[B * H], go[B * H];
    int with_bias;
} gru_case;

static double gru_loss(const void *ctx) {
    const gru_case *t = ctx;
    double hy[B * H], l = 0;
    gru_ref(B, H, t->ig, t->hg, t->with_bias ? t->bi : NULL, t->with_bias ? t->bh : NULL, t->hx,
            hy);
    for (int e = 0; e < B * H; e++) l += t->go[e] * hy[e];
    return l;
}

// d loss / d p[k] by central differences (p points into ctx).
static double numgrad(double *p, int k, double (*loss)(const void *), const void *ctx) {
    const double save = p[k], h = 1e-6;
    p[k] = save + h;
    const double up = loss(ctx);
    p[k] = save - h;
    const double down = loss(ctx);
    p[k] = save;
    return (up - down) / (2 * h);
}

static void test_lstm_f64(int with_bias, int with_gh) {
    unsigned s = 7u + (unsigned)with_bias;
    static lstm_case t;
    t.with_bias = with_bias, t.with_gh = with_gh;
    fill(&s, t.ig, B * G4, 2), fill(&s, t.hg, B * G4, 1), fill(&s, t.bi, G4, 0.5);
    fill(&s, t.bh, G4, 0.5), fill(&s, t.cx, B * H, 1.5), fill(&s, t.gh, B * H, 1);
    fill(&s, t.gc, B * H, 1);
    const double *pbi = with_bias ? t.bi : NULL, *pbh = with_bias ? t.bh : NULL;
    double hy[B * H], cy[B * H], ws[B * G4], rhy[B * H], rcy[B * H];
    trn_lstm_cell_desc d = {TRN_DTYPE_F64, B, H, t.ig, t.hg, pbi, pbh, t.cx, hy, cy, ws};
    CHECK_OK(trn_lstm_cell_launch(g_stream, &d));
    double gg[B * G4], gcx[B * H], gb[G4];
    trn_lstm_cell_backward_desc bd = {
        TRN_DTYPE_F64,        B, H, with_gh ? t.gh : NULL, t.gc, t.cx, cy, ws, gg, gcx,
        with_bias ? gb : NULL};
    CHECK_OK(trn_lstm_cell_backward_launch(g_stream, &bd));
    CHECK_OK(trn_stream_synchronize(g_stream));
    lstm_ref(B, H, t.ig, t.hg, pbi, pbh, t.cx, rhy, rcy);
    double worst = 0;
    for (int e = 0; e < B * H; e++)
        worst = fmax(worst, fmax(fabs(hy[e] - rhy[e]), fabs(cy[e] - rcy[e])));
    CHECK(worst < 1e-12);
    // The workspace holds the activated gates i, f, g, o.
    const double p0 = t.ig[0] + t.hg[0] + (with_bias ? t.bi[0] + t.bh[0] : 0);
    const double p2 = t.ig[2 * H] + t.hg[2 * H] + (with_bias ? t.bi[2 * H] + t.bh[2 * H] : 0);
    CHECK(fabs(ws[0] - sigm(p0)) < 1e-12 && fabs(ws[2 * H] - tanh(p2)) < 1e-12);
    worst = 0;
    for (int k = 0; k < B * G4; k++)
        worst = fmax(worst, fabs(gg[k] - numgrad(t.ig, k, lstm_loss, &t)));
    for (int e = 0; e < B * H; e++)
        worst = fmax(worst, fabs(gcx[e] - numgrad(t.cx, e, lstm_loss, &t)));
    if (with_bias)
        for (int c = 0; c < G4; c++)
            worst = fmax(worst, fabs(gb[c] - numgrad(t.bi, c, lstm_loss, &t)));
    CHECK(worst < 1e-7);
}

static void test_gru_f64(int with_bias) {
    unsigned s = 11u + (unsigned)with_bias;
    static gru_case t;
    t.with_bias = with_bias;
    fill(&s, t.ig, B * G3, 2), fill(&s, t.hg, B * G3, 1), fill(&s, t.bi, G3, 0.5);
    fill(&s, t.bh, G3, 0.5), fill(&s, t.hx, B * H, 1), fill(&s, t.go, B * H, 1);
    const double *pbi = with_bias ? t.bi : NULL, *pbh = with_bias ? t.bh : NULL;
    double hy[B * H], ws[B * 5 * H], rhy[B * H];
    trn_gru_cell_desc d = {TRN_DTYPE_F64, B, H, t.ig, t.hg, pbi, pbh, t.hx, hy, ws};
    CHECK_OK(trn_gru_cell_launch(g_stream, &d));
    double gi[B * G3], gh[B * G3], ghx[B * H], gbi[G3], gbh[G3];
    trn_gru_cell_backward_desc bd = {
        TRN_DTYPE_F64, B, H, t.go, ws, gi, gh, ghx, with_bias ? gbi : NULL, with_bias ? gbh : NULL};
    CHECK_OK(trn_gru_cell_backward_launch(g_stream, &bd));
    CHECK_OK(trn_stream_synchronize(g_stream));
    gru_ref(B, H, t.ig, t.hg, pbi, pbh, t.hx, rhy);
    double worst = 0;
    for (int e = 0; e < B * H; e++) worst = fmax(worst, fabs(hy[e] - rhy[e]));
    CHECK(worst < 1e-12);
    // Workspace rows keep r, z, n, hx, h_n + b_hn.
    CHECK(ws[3 * H + 1] == t.hx[1]);
    CHECK(fabs(ws[4 * H] - (t.hg[2 * H] + (with_bias ? t.bh[2 * H] : 0))) < 1e-15);
    worst = 0;
    for (int k = 0; k < B * G3; k++) {
        worst = fmax(worst, fabs(gi[k] - numgrad(t.ig, k, gru_loss, &t)));
        worst = fmax(worst, fabs(gh[k] - numgrad(t.hg, k, gru_loss, &t)));
    }
    for (int e = 0; e < B * H; e++)
        worst = fmax(worst, fabs(ghx[e] - numgrad(t.hx, e, gru_loss, &t)));
    if (with_bias)
        for (int c = 0; c < G3; c++) {
            worst = fmax(worst, fabs(gbi[c] - numgrad(t.bi, c, gru_loss, &t)));
            worst = fmax(worst, fabs(gbh[c] - numgrad(t.bh, c, gru_loss, &t)));
        }
    CHECK(worst < 1e-7);
}

// float32 and bfloat16 on a batch big enough to be split across threads.
static void test_low_precision_parallel(trn_dtype dt, double tol) {
    enum { BB = 64, HH = 300 };
    const int n4 = BB * 4 * HH, n3 = BB * 3 * HH, n = BB * HH;
    double *ig = malloc(sizeof(double) * n4), *hg = malloc(sizeof(double) * n4);
    double *bi = malloc(sizeof(double) * 4 * HH), *bh = malloc(sizeof(double) * 4 * HH);
    double *prev = malloc(sizeof(double) * n), *rhy = malloc(sizeof(double) * n);
    double *rcy = malloc(sizeof(double) * n);
    const size_t es = trn_dtype_size(dt);
    char *buf = malloc(es * (size_t)(2 * n4 + 8 * HH + n + 2 * n + 5 * n + n4 + 4 * HH));
    unsigned s = 5;
    fill(&s, ig, n4, 2), fill(&s, hg, n4, 1), fill(&s, bi, 4 * HH, 0.5);
    fill(&s, bh, 4 * HH, 0.5), fill(&s, prev, n, 1);
    // Device-dtype copies (rounded), and the reference computed from them.
    char *p = buf;
// clang-format off
#define TAKE(name, count)  \
    void *name = p;        \
    p += es * (size_t)(count);
    TAKE(xig, n4) TAKE(xhg, n4) TAKE(xbi, 4 * HH) TAKE(xbh, 4 * HH) TAKE(xprev, n)
    TAKE(xhy, n) TAKE(xcy, n) TAKE(xws, 5 * n) TAKE(xgg, n4) TAKE(xgb, 4 * HH)
#undef TAKE
        // clang-format on
        double *srcs[] = {ig, hg, bi, bh, prev};
    void *dsts[] = {xig, xhg, xbi, xbh, xprev};
    const int counts[] = {n4, n4, 4 * HH, 4 * HH, n};
    for (int t = 0; t < 5; t++)
        for (int i = 0; i < counts[t]; i++) {
            if (dt == TRN_DTYPE_F32) {
                ((float *)dsts[t])[i] = (float)srcs[t][i];
                srcs[t][i] = ((float *)dsts[t])[i];
            } else {
                ((uint16_t *)dsts[t])[i] = trn_float_to_bf16((float)srcs[t][i]);
                srcs[t][i] = trn_bf16_to_float(((uint16_t *)dsts[t])[i]);
            }
        }
#define GET(ptr, i)                                                                                \
    (dt == TRN_DTYPE_F32 ? (double)((float *)(ptr))[i] : trn_bf16_to_float(((uint16_t *)(ptr))[i]))
    trn_lstm_cell_desc d = {dt, BB, HH, xig, xhg, xbi, xbh, xprev, xhy, xcy, xws};
    CHECK_OK(trn_lstm_cell_launch(g_stream, &d));
    // grad_hy absent, grad_cy = the forward's cy (any values do).
    trn_lstm_cell_backward_desc bd = {dt, BB, HH, NULL, xcy, xprev, xcy, xws, xgg, xhy, xgb};
    CHECK_OK(trn_lstm_cell_backward_launch(g_stream, &bd));
    CHECK_OK(trn_stream_synchronize(g_stream));
    lstm_ref(BB, HH, ig, hg, bi, bh, prev, rhy, rcy);
    double worst = 0;
    for (int e = 0; e < n; e++) worst = fmax(worst, fabs(GET(xcy, e) - rcy[e]));
    CHECK(worst < tol);
    // The bias gradient is the batch sum of the stored gate gradients.
    worst = 0;
    for (int c = 0; c < 4 * HH; c++) {
        double sum = 0;
        for (int b = 0; b < BB; b++) sum += GET(xgg, b * 4 * HH + c);
        worst = fmax(worst, fabs(GET(xgb, c) - sum) / fmax(1, fabs(sum)));
    }
    CHECK(worst < tol);
    trn_gru_cell_desc gd = {dt, BB, HH, xig, xhg, xbi, xbh, xprev, xhy, xws};
    CHECK_OK(trn_gru_cell_launch(g_stream, &gd));
    CHECK_OK(trn_stream_synchronize(g_stream));
    // The GRU reads its gates as [BB, 3 HH] rows of the same buffers.
    for (int i = 0; i < n3; i++) ig[i] = GET(xig, i), hg[i] = GET(xhg, i);
    gru_ref(BB, HH, ig, hg, bi, bh, prev, rhy);
    worst = 0;
    for (int e = 0; e < n; e++) worst = fmax(worst, fabs(GET(xhy, e) - rhy[e]));
    CHECK(worst < tol);
#undef GET
    free(buf), free(ig), free(hg), free(bi), free(bh), free(prev), free(rhy), free(rcy);
}

static void test_empty_and_errors(void) {
    // No rows: bias gradients are zeros (an empty sum), nothing else is read.
    float gb[G4] = {1, 2, 3}, gbh[G3] = {4, 5};
    trn_lstm_cell_backward_desc bd = {TRN_DTYPE_F32, 0,    H,    NULL, NULL, NULL,
                                      NULL,          NULL, NULL, NULL, gb};
    CHECK_OK(trn_lstm_cell_backward_launch(g_stream, &bd));
    trn_gru_cell_backward_desc gd = {TRN_DTYPE_F32, 0, H, NULL, NULL, NULL, NULL, NULL, gb, gbh};
    CHECK_OK(trn_gru_cell_backward_launch(g_stream, &gd));
    CHECK_OK(trn_stream_synchronize(g_stream));
    CHECK(gb[0] == 0 && gb[2] == 0 && gb[G4 - 1] == 0 && gbh[0] == 0 && gbh[1] == 0);
    // Errors: NULL stream / descriptor, integer dtype, negative or
    // overflowing sizes, a missing required pointer.
    float x[B * G4] = {0}, y[B * H];
    trn_lstm_cell_desc d = {TRN_DTYPE_F32, B, H, x, x, NULL, NULL, x, y, y, NULL};
    CHECK_INT(trn_lstm_cell_launch(g_stream, &d), TRN_ERROR_INVALID_ARGUMENT);
    CHECK_INT(trn_lstm_cell_launch(NULL, &d), TRN_ERROR_INVALID_ARGUMENT);
    CHECK_INT(trn_gru_cell_launch(g_stream, NULL), TRN_ERROR_INVALID_ARGUMENT);
    d.dtype = TRN_DTYPE_I32;
    CHECK_INT(trn_lstm_cell_launch(g_stream, &d), TRN_ERROR_UNSUPPORTED);
    CHECK(!trn_rnn_cell_supports(TRN_DTYPE_I64) && trn_rnn_cell_supports(TRN_DTYPE_BF16));
    d.dtype = TRN_DTYPE_F32;
    d.hidden = -1;
    CHECK_INT(trn_lstm_cell_launch(g_stream, &d), TRN_ERROR_INVALID_ARGUMENT);
    d.hidden = INT64_MAX / 2;
    CHECK_INT(trn_lstm_cell_launch(g_stream, &d), TRN_ERROR_INVALID_ARGUMENT);
    trn_gru_cell_backward_desc g2 = {TRN_DTYPE_F32, B, H, x, NULL, x, x, y, NULL, NULL};
    CHECK_INT(trn_gru_cell_backward_launch(g_stream, &g2), TRN_ERROR_INVALID_ARGUMENT);
}

int main(void) {
    CHECK_OK(trn_stream_get_default(0, &g_stream));
    test_lstm_f64(1, 1);
    test_lstm_f64(0, 1);
    test_lstm_f64(1, 0);
    test_gru_f64(1);
    test_gru_f64(0);
    test_low_precision_parallel(TRN_DTYPE_F32, 1e-5);
    test_low_precision_parallel(TRN_DTYPE_BF16, 2e-2);
    test_empty_and_errors();
    return TEST_REPORT();
}
