// test_attention.c - fused attention (trn/attention.h) against a direct
// double-precision evaluation of the definition: forward and backward with
// an additive mask, a bool mask, causal masking, grouped-query heads, more
// keys than one tile, and dropout (reproducible from the seed; the backward
// agrees with the forward's mask through a finite-difference check),
// gradients into strided storage; plus argument errors.
#include <math.h>
#include <stdlib.h>

#include "test.h"
#include "trn/attention.h"

static trn_stream *g_stream;

enum { B = 2, H = 4, HK = 2, L = 70, S = 83, E = 8, EV = 5 };

static double frand(unsigned *s) {
    *s = *s * 1103515245u + 12345u;
    return ((*s >> 8) & 0xffff) / 32768.0 - 1.0;
}

static float q[B * H * L * E], k[B * HK * S * E], v[B * HK * S * EV], mask[L * S];
static unsigned char bmask[L * S];
static float out[B * H * L * EV], lse[B * H * L], dout[B * H * L * EV];
static float dq[B * H * L * E], dk[B * HK * S * E], dv[B * HK * S * EV], dmask[B * H * L * S];

static void make_desc(trn_attention_desc *d, int mask_kind, int causal) {
    trn_attention_desc z = {0};
    *d = z;
    d->dtype = TRN_DTYPE_F32;
    d->batch = B, d->heads = H, d->kv_heads = HK, d->q_len = L, d->kv_len = S;
    d->head_dim = E, d->v_dim = EV;
    d->q = q, d->q_strides[0] = H * L * E, d->q_strides[1] = L * E, d->q_strides[2] = E;
    d->k = k, d->k_strides[0] = HK * S * E, d->k_strides[1] = S * E, d->k_strides[2] = E;
    d->v = v, d->v_strides[0] = HK * S * EV, d->v_strides[1] = S * EV, d->v_strides[2] = EV;
    d->out = out, d->out_strides[0] = H * L * EV, d->out_strides[1] = L * EV,
    d->out_strides[2] = EV;
    d->lse = lse;
    d->scale = 0.37;
    d->causal = causal;
    if (mask_kind == 1) d->mask = mask, d->mask_dtype = TRN_DTYPE_F32;
    if (mask_kind == 2) d->mask = bmask, d->mask_dtype = TRN_DTYPE_BOOL;
    d->mask_strides[2] = S, d->mask_strides[3] = 1;  // [L, S] broadcast over B, H
}

// Softmax probabilities of row (b, h, i) in double; p[j].
// The backward of d into the globals dq, dk, dv (and dmask: NULL for none).
static trn_attention_backward_desc backward_desc(const trn_attention_desc *d, float *dmask_out) {
    return (trn_attention_backward_desc){.fwd = *d,
                                         .dout = dout,
                                         .dout_strides = {H * L * EV, L * EV, EV},
                                         .dq = dq,
                                         .dk = dk,
                                         .dv = dv,
                                         .dmask = dmask_out};
}

static void ref_probs(const trn_attention_desc *d, int b, int h, int i, double *p) {
    const int hk = h / (H / HK);
    double mx = -INFINITY;
    for (int j = 0; j < S; j++) {
        double s = 0;
        for (int e = 0; e < E; e++)
            s += (double)q[((b * H + h) * L + i) * E + e] * k[((b * HK + hk) * S + j) * E + e];
        s *= d->scale;
        if (d->mask == mask) s += mask[i * S + j];
        if (d->mask == bmask && !bmask[i * S + j]) s = -INFINITY;
        if (d->causal && j > i) s = -INFINITY;
        p[j] = s;
        mx = fmax(mx, s);
    }
    double sum = 0;
    for (int j = 0; j < S; j++) sum += p[j] = mx == -INFINITY ? 0 : exp(p[j] - mx);
    for (int j = 0; j < S; j++) p[j] = sum > 0 ? p[j] / sum : 0;
}

// Checks out against the reference; checks dq/dk/dv/dmask against the
// analytic gradient of L = sum(out * dout).
static void check_case(int mask_kind, int causal) {
    trn_attention_desc d;
    make_desc(&d, mask_kind, causal);
    CHECK_OK(trn_attention_launch(g_stream, &d));
    trn_attention_backward_desc bd = backward_desc(&d, dmask);
    CHECK_OK(trn_attention_backward_launch(g_stream, &bd));
    CHECK_OK(trn_stream_synchronize(g_stream));
    static double rdq[B * H * L * E], rdk[B * HK * S * E], rdv[B * HK * S * EV];
    memset(rdq, 0, sizeof rdq), memset(rdk, 0, sizeof rdk), memset(rdv, 0, sizeof rdv);
    double worst = 0, worst_g = 0, worst_m = 0;
    double p[S], dp[S];
    for (int b = 0; b < B; b++)
        for (int h = 0; h < H; h++)
            for (int i = 0; i < L; i++) {
                const int hk = h / (H / HK);
                ref_probs(&d, b, h, i, p);
                double dd = 0;
                for (int e = 0; e < EV; e++) {
                    double o = 0;
                    for (int j = 0; j < S; j++) o += p[j] * v[((b * HK + hk) * S + j) * EV + e];
                    worst = fmax(worst, fabs(o - out[((b * H + h) * L + i) * EV + e]));
                    dd += o * dout[((b * H + h) * L + i) * EV + e];
                }
                for (int j = 0; j < S; j++) {
                    double g = 0;
                    for (int e = 0; e < EV; e++) {
                        const double go = dout[((b * H + h) * L + i) * EV + e];
                        g += go * v[((b * HK + hk) * S + j) * EV + e];
                        rdv[((b * HK + hk) * S + j) * EV + e] += p[j] * go;
                    }
                    dp[j] = p[j] * (g - dd);
                    worst_m = fmax(worst_m, fabs(dp[j] - dmask[((b * H + h) * L + i) * S + j]));
                    for (int e = 0; e < E; e++) {
                        rdq[((b * H + h) * L + i) * E + e] +=
                            d.scale * dp[j] * k[((b * HK + hk) * S + j) * E + e];
                        rdk[((b * HK + hk) * S + j) * E + e] +=
                            d.scale * dp[j] * q[((b * H + h) * L + i) * E + e];
                    }
                }
            }
    for (int t = 0; t < B * H * L * E; t++) worst_g = fmax(worst_g, fabs(rdq[t] - dq[t]));
    for (int t = 0; t < B * HK * S * E; t++) worst_g = fmax(worst_g, fabs(rdk[t] - dk[t]));
    for (int t = 0; t < B * HK * S * EV; t++) worst_g = fmax(worst_g, fabs(rdv[t] - dv[t]));
    CHECK(worst < 2e-5);
    CHECK(worst_g < 5e-5);
    CHECK(worst_m < 2e-5);
}

// Dropout: same seed, same output; another seed differs; the backward's
// gradient of sum(out * dout) w.r.t. v matches a finite difference of the
// forward (which only holds if both use the same mask).
static void test_dropout(void) {
    trn_attention_desc d;
    make_desc(&d, 0, 0);
    d.dropout_p = 0.3;
    d.seed = 1234;
    static float out1[B * H * L * EV];
    CHECK_OK(trn_attention_launch(g_stream, &d));
    CHECK_OK(trn_stream_synchronize(g_stream));
    memcpy(out1, out, sizeof out);
    CHECK_OK(trn_attention_launch(g_stream, &d));
    CHECK_OK(trn_stream_synchronize(g_stream));
    CHECK(memcmp(out1, out, sizeof out) == 0);
    trn_attention_backward_desc bd = backward_desc(&d, NULL);
    CHECK_OK(trn_attention_backward_launch(g_stream, &bd));
    CHECK_OK(trn_stream_synchronize(g_stream));
    const int idx = 3 * EV + 2;  // an element of v[0, 0]
    const float h = 1e-2f, saved = v[idx];
    double f[2];
    for (int s = 0; s < 2; s++) {
        v[idx] = saved + (s ? h : -h);
        CHECK_OK(trn_attention_launch(g_stream, &d));
        CHECK_OK(trn_stream_synchronize(g_stream));
        double acc = 0;
        for (int t = 0; t < B * H * L * EV; t++) acc += (double)out[t] * dout[t];
        f[s] = acc;
    }
    v[idx] = saved;
    CHECK(fabs((f[1] - f[0]) / (2 * h) - dv[idx]) < 1e-3);
    d.seed = 99;
    CHECK_OK(trn_attention_launch(g_stream, &d));
    CHECK_OK(trn_stream_synchronize(g_stream));
    CHECK(memcmp(out1, out, sizeof out) != 0);
}

// Gradients into [B, rows, heads, width] storage (strides given, as the
// adapter asks for): the same bits as the contiguous gradients, moved.
static void test_strided_grads(void) {
    trn_attention_desc d;
    make_desc(&d, 0, 1);
    CHECK_OK(trn_attention_launch(g_stream, &d));
    trn_attention_backward_desc bd = backward_desc(&d, NULL);
    CHECK_OK(trn_attention_backward_launch(g_stream, &bd));
    static float sq[B * H * L * E], sk[B * HK * S * E], sv[B * HK * S * EV];
    trn_attention_backward_desc sd = bd;
    sd.dq = sq, sd.dk = sk, sd.dv = sv;
    const int64_t qs[3] = {L * H * E, E, H * E}, ks[3] = {S * HK * E, E, HK * E},
                  vs[3] = {S * HK * EV, EV, HK * EV};
    memcpy(sd.dq_strides, qs, sizeof qs);
    memcpy(sd.dk_strides, ks, sizeof ks);
    memcpy(sd.dv_strides, vs, sizeof vs);
    CHECK_OK(trn_attention_backward_launch(g_stream, &sd));
    CHECK_OK(trn_stream_synchronize(g_stream));
    int same = 1;
    for (int b = 0; b < B; b++)
        for (int h = 0; h < H; h++)
            for (int i = 0; i < L; i++)
                for (int e = 0; e < E; e++)
                    same &= dq[((b * H + h) * L + i) * E + e] ==
                            sq[b * qs[0] + h * qs[1] + i * qs[2] + e];
    for (int b = 0; b < B; b++)
        for (int h = 0; h < HK; h++)
            for (int j = 0; j < S; j++) {
                for (int e = 0; e < E; e++)
                    same &= dk[((b * HK + h) * S + j) * E + e] ==
                            sk[b * ks[0] + h * ks[1] + j * ks[2] + e];
                for (int e = 0; e < EV; e++)
                    same &= dv[((b * HK + h) * S + j) * EV + e] ==
                            sv[b * vs[0] + h * vs[1] + j * vs[2] + e];
            }
    CHECK(same);
}

// Keys in one tile (60 of the 83): the forward keeps the probabilities and
// the backward reads them instead of recomputing exp(s - lse). The output's
// bits are unchanged; the gradients (and the mask gradient) agree with the
// recomputing backward to rounding; a fully masked row (bool mask row 5)
// still gives zeros. No probabilities past one key tile or with dropout.
static void test_kept_probs(int mask_kind, int causal) {
    enum { SK = 60 };
    static float o0[B * H * L * EV], g0[B * H * L * E + B * HK * SK * (E + EV)];
    static float m0[B * H * L * SK], m1[B * H * L * SK];
    trn_attention_desc d;
    make_desc(&d, mask_kind, causal);
    d.kv_len = SK;
    const int64_t n = trn_attention_probs_floats(&d);
    CHECK(n == (int64_t)B * H * 2 * 64 * 64);
    float *kept = malloc((size_t)n * sizeof(float));
    CHECK(kept != NULL);
    if (kept == NULL) return;
    trn_attention_backward_desc bd = backward_desc(&d, m0);
    CHECK_OK(trn_attention_launch(g_stream, &d));
    CHECK_OK(trn_attention_backward_launch(g_stream, &bd));
    CHECK_OK(trn_stream_synchronize(g_stream));
    memcpy(o0, out, sizeof o0);
    memcpy(g0, dq, sizeof(float) * B * H * L * E);
    memcpy(g0 + B * H * L * E, dk, sizeof(float) * B * HK * SK * E);
    memcpy(g0 + B * H * L * E + B * HK * SK * E, dv, sizeof(float) * B * HK * SK * EV);
    d.probs = kept;
    bd.fwd = d;
    bd.dmask = m1;
    CHECK_OK(trn_attention_launch(g_stream, &d));
    CHECK_OK(trn_attention_backward_launch(g_stream, &bd));
    CHECK_OK(trn_stream_synchronize(g_stream));
    CHECK(memcmp(o0, out, sizeof o0) == 0);
    double worst = 0, big = 0;
    for (int t = 0; t < B * H * L * E; t++) worst = fmax(worst, fabs(g0[t] - dq[t]));
    for (int t = 0; t < B * HK * SK * E; t++)
        worst = fmax(worst, fabs(g0[B * H * L * E + t] - dk[t]));
    for (int t = 0; t < B * HK * SK * EV; t++)
        worst = fmax(worst, fabs(g0[B * H * L * E + B * HK * SK * E + t] - dv[t]));
    for (int t = 0; t < B * H * L * SK; t++) worst = fmax(worst, fabs(m0[t] - m1[t]));
    for (int t = 0; t < B * H * L * E; t++) big = fmax(big, fabs(dq[t]));
    CHECK(worst < 1e-5);
    CHECK(big > 1e-2);  // the comparison is not between zeros
    if (mask_kind == 2)
        for (int b = 0; b < B; b++)
            for (int h = 0; h < H; h++)
                for (int e = 0; e < E; e++) CHECK(dq[((b * H + h) * L + 5) * E + e] == 0.0f);
    free(kept);
    d.probs = NULL;
    d.dropout_p = 0.1;
    CHECK(trn_attention_probs_floats(&d) == 0);
    d.dropout_p = 0.0;
    d.kv_len = 65;
    CHECK(trn_attention_probs_floats(&d) == 0);
}

static void test_errors(void) {
    trn_attention_desc d;
    make_desc(&d, 0, 0);
    d.kv_heads = 3;
    CHECK_INT(trn_attention_launch(g_stream, &d), TRN_ERROR_INVALID_ARGUMENT);
    make_desc(&d, 0, 0);
    d.dtype = TRN_DTYPE_F64;
    CHECK_INT(trn_attention_launch(g_stream, &d), TRN_ERROR_UNSUPPORTED);
    make_desc(&d, 0, 0);
    d.dropout_p = 1.5;
    CHECK_INT(trn_attention_launch(g_stream, &d), TRN_ERROR_INVALID_ARGUMENT);
    make_desc(&d, 0, 0);
    d.q = NULL;
    CHECK_INT(trn_attention_launch(g_stream, &d), TRN_ERROR_INVALID_ARGUMENT);
    CHECK_INT(trn_attention_launch(g_stream, NULL), TRN_ERROR_INVALID_ARGUMENT);
}

int main(void) {
    CHECK_OK(trn_stream_get_default(0, &g_stream));
    unsigned s = 7;
    for (size_t t = 0; t < sizeof q / sizeof *q; t++) q[t] = (float)frand(&s);
    for (size_t t = 0; t < sizeof k / sizeof *k; t++) k[t] = (float)frand(&s);
    for (size_t t = 0; t < sizeof v / sizeof *v; t++) v[t] = (float)frand(&s);
    for (size_t t = 0; t < sizeof dout / sizeof *dout; t++) dout[t] = (float)frand(&s);
    for (int t = 0; t < L * S; t++) mask[t] = (float)frand(&s), bmask[t] = frand(&s) > -0.5;
    for (int j = 0; j < S; j++) bmask[5 * S + j] = 0;  // row 5 fully masked: output 0
    check_case(0, 0);
    check_case(1, 0);
    check_case(2, 0);
    check_case(0, 1);
    test_dropout();
    test_strided_grads();
    test_kept_probs(1, 0);
    test_kept_probs(2, 0);
    test_kept_probs(0, 1);
    test_errors();
    return TEST_REPORT();
}
