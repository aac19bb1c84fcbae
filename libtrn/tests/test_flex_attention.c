// test_flex_attention.c - block-sparse FlexAttention (trn/flex_attention.h)
// against a direct double-precision evaluation of the definition: a causal
// mask given as partial and full key blocks (upper blocks absent), a
// score_mod adding a per-head bias read from a captured buffer, a
// non-linear score_mod (soft-capping) with its derivative, grouped-query
// heads, lengths that are not a multiple of the block, fully masked rows;
// plus argument errors.
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "test.h"
#include "trn/flex_attention.h"

static trn_stream *g_stream;

enum { B = 2, H = 4, HK = 2, L = 100, S = 100, E = 8, EV = 6, QB = 32, KB = 32 };
enum { NQB = (L + QB - 1) / QB, NKB = (S + KB - 1) / KB };

static float q[B * H * L * E], k[B * HK * S * E], v[B * HK * S * EV];
static float out[B * H * L * EV], lse[B * H * L], mx[B * H * L], dout[B * H * L * EV];
static float dq[B * H * L * E], dk[B * HK * S * E], dv[B * HK * S * EV];
static float bias[H] = {0.5f, -0.25f, 1.0f, 0.0f};
static int32_t kv_num[NQB], kv_idx[NQB * NKB], full_num[NQB], full_idx[NQB * NKB];

static double frand(unsigned *s) {
    *s = *s * 1103515245u + 12345u;
    return ((*s >> 8) & 0xffff) / 32768.0 - 1.0;
}

// Rows >= 10 see keys <= themselves (rows < 10 see nothing).
static int keep(int64_t i, int64_t j) { return i >= 10 && j <= i; }

static int g_softcap;

static float mod_one(const trn_flex_buffers *bf, float s, int64_t h) {
    const float *bb = bf->data[0];
    if (g_softcap) return 4.0f * tanhf(s / 4.0f);
    return s + bb[h * bf->strides[0][0]];
}

static void score_fn(const trn_flex_buffers *bf, int64_t b, int64_t h, int64_t i0, int64_t ni,
                     int64_t j0, int64_t nj, float *st, int64_t ld, int masked) {
    (void)b;
    for (int64_t j = 0; j < nj; j++)
        for (int64_t i = 0; i < ni; i++) {
            float *s = st + j * ld + i;
            *s = (masked && !keep(i0 + i, j0 + j)) ? -INFINITY : mod_one(bf, *s, h);
        }
}

static void grad_fn(const trn_flex_buffers *bf, int64_t b, int64_t h, int64_t i0, int64_t ni,
                    int64_t j0, int64_t nj, const float *st, float *dst, int64_t ld) {
    (void)bf, (void)b, (void)h, (void)i0, (void)j0;
    for (int64_t j = 0; j < nj; j++)
        for (int64_t i = 0; i < ni; i++) {
            const float t = tanhf(st[j * ld + i] / 4.0f);
            dst[j * ld + i] *= 1.0f - t * t;
        }
}

// Causal blocks: n < m full, n == m partial (diagonal), n > m absent; rows
// < 10 live in block 0, whose diagonal block is partial anyway.
static void make_blocks(void) {
    for (int m = 0; m < NQB; m++) {
        full_num[m] = m;
        for (int n = 0; n < m; n++) full_idx[m * NKB + n] = n;
        kv_num[m] = 1;
        kv_idx[m * NKB] = m;
    }
}

static void make_desc(trn_flex_attention_desc *d) {
    trn_flex_attention_desc z = {0};
    *d = z;
    d->dtype = TRN_DTYPE_F32;
    d->batch = B, d->heads = H, d->kv_heads = HK, d->q_len = L, d->kv_len = S;
    d->head_dim = E, d->v_dim = EV;
    d->q = q, d->q_strides[0] = H * L * E, d->q_strides[1] = L * E, d->q_strides[2] = E;
    d->k = k, d->k_strides[0] = HK * S * E, d->k_strides[1] = S * E, d->k_strides[2] = E;
    d->v = v, d->v_strides[0] = HK * S * EV, d->v_strides[1] = S * EV, d->v_strides[2] = EV;
    d->out = out, d->out_strides[0] = H * L * EV, d->out_strides[1] = L * EV,
    d->out_strides[2] = EV;
    d->lse = lse, d->max = mx;
    d->scale = 0.37;
    d->q_block = QB, d->kv_block = KB;
    d->mask_batch = 1, d->mask_heads = 1, d->mask_q_blocks = NQB, d->mask_kv_blocks = NKB;
    d->kv_num_blocks = kv_num, d->kv_indices = kv_idx;
    d->full_kv_num_blocks = full_num, d->full_kv_indices = full_idx;
    d->score_fn = score_fn;
    d->grad_fn = g_softcap ? grad_fn : NULL;
    d->buffers.count = 1;
    d->buffers.data[0] = bias;
    d->buffers.sizes[0][0] = H;
    d->buffers.strides[0][0] = 1;
    d->buffers.nbytes[0] = sizeof bias;
}

// Probabilities of row (b, h, i) in double (p[j]; all 0 for an empty row),
// and the raw scores s[j].
static void ref_probs(const trn_flex_attention_desc *d, int b, int h, int i, double *p, double *s) {
    const int hk = h / (H / HK);
    double m = -INFINITY;
    for (int j = 0; j < S; j++) {
        double t = 0;
        for (int e = 0; e < E; e++)
            t += (double)q[((b * H + h) * L + i) * E + e] * k[((b * HK + hk) * S + j) * E + e];
        s[j] = t * d->scale;
        p[j] = !keep(i, j) ? -INFINITY : g_softcap ? 4.0 * tanh(s[j] / 4.0) : s[j] + bias[h];
        m = fmax(m, p[j]);
    }
    double z = 0;
    for (int j = 0; j < S; j++) z += p[j] = m == -INFINITY ? 0 : exp(p[j] - m);
    for (int j = 0; j < S; j++) p[j] = z > 0 ? p[j] / z : 0;
}

static void check_against_reference(void) {
    trn_flex_attention_desc d;
    make_desc(&d);
    trn_flex_attention_backward_desc bd = {0};
    bd.fwd = d;
    bd.dout = dout;
    bd.dout_strides[0] = H * L * EV, bd.dout_strides[1] = L * EV, bd.dout_strides[2] = EV;
    bd.dq = dq, bd.dk = dk, bd.dv = dv;
    bd.dq_strides[0] = H * L * E, bd.dq_strides[1] = L * E, bd.dq_strides[2] = E;
    bd.dk_strides[0] = HK * S * E, bd.dk_strides[1] = S * E, bd.dk_strides[2] = E;
    bd.dv_strides[0] = HK * S * EV, bd.dv_strides[1] = S * EV, bd.dv_strides[2] = EV;
    CHECK_OK(trn_flex_attention_launch(g_stream, &d));
    CHECK_OK(trn_flex_attention_backward_launch(g_stream, &bd));
    CHECK_OK(trn_stream_synchronize(g_stream));
    static double rdq[B * H * L * E], rdk[B * HK * S * E], rdv[B * HK * S * EV];
    memset(rdq, 0, sizeof rdq), memset(rdk, 0, sizeof rdk), memset(rdv, 0, sizeof rdv);
    double worst = 0, worst_g = 0;
    int empty_ok = 1;
    for (int b = 0; b < B; b++)
        for (int h = 0; h < H; h++) {
            const int hk = h / (H / HK);
            for (int i = 0; i < L; i++) {
                double p[S], s[S], dp[S], o[EV] = {0}, dd = 0;
                ref_probs(&d, b, h, i, p, s);
                const float *go = dout + ((b * H + h) * L + i) * EV;
                for (int j = 0; j < S; j++)
                    for (int e = 0; e < EV; e++) o[e] += p[j] * v[((b * HK + hk) * S + j) * EV + e];
                for (int e = 0; e < EV; e++) {
                    worst = fmax(worst, fabs(o[e] - out[((b * H + h) * L + i) * EV + e]));
                    dd += o[e] * go[e];
                }
                if (i < 10)
                    empty_ok &= lse[(b * H + h) * L + i] == -INFINITY && o[0] == 0 &&
                                out[((b * H + h) * L + i) * EV] == 0.0f;
                for (int j = 0; j < S; j++) {
                    dp[j] = 0;
                    for (int e = 0; e < EV; e++) {
                        dp[j] += go[e] * v[((b * HK + hk) * S + j) * EV + e];
                        rdv[((b * HK + hk) * S + j) * EV + e] += p[j] * go[e];
                    }
                    double ds = p[j] * (dp[j] - dd);
                    if (g_softcap) {
                        const double t = tanh(s[j] / 4.0);
                        ds *= 1 - t * t;
                    }
                    ds *= d.scale;
                    for (int e = 0; e < E; e++) {
                        rdq[((b * H + h) * L + i) * E + e] +=
                            ds * k[((b * HK + hk) * S + j) * E + e];
                        rdk[((b * HK + hk) * S + j) * E + e] +=
                            ds * q[((b * H + h) * L + i) * E + e];
                    }
                }
            }
        }
    for (int x = 0; x < B * H * L * E; x++) worst_g = fmax(worst_g, fabs(rdq[x] - dq[x]));
    for (int x = 0; x < B * HK * S * E; x++) worst_g = fmax(worst_g, fabs(rdk[x] - dk[x]));
    for (int x = 0; x < B * HK * S * EV; x++) worst_g = fmax(worst_g, fabs(rdv[x] - dv[x]));
    CHECK(worst < 2e-5);
    CHECK(worst_g < 5e-5);
    CHECK(empty_ok);
}

static void argument_errors(void) {
    trn_flex_attention_desc d;
    make_desc(&d);
    d.kv_heads = 3;
    CHECK_INT(trn_flex_attention_launch(g_stream, &d), TRN_ERROR_INVALID_ARGUMENT);
    make_desc(&d);
    d.dtype = TRN_DTYPE_F64;
    CHECK_INT(trn_flex_attention_launch(g_stream, &d), TRN_ERROR_UNSUPPORTED);
    make_desc(&d);
    d.mask_heads = 3;
    CHECK_INT(trn_flex_attention_launch(g_stream, &d), TRN_ERROR_INVALID_ARGUMENT);
    make_desc(&d);
    d.score_fn = NULL;
    CHECK_INT(trn_flex_attention_launch(g_stream, &d), TRN_ERROR_INVALID_ARGUMENT);
    make_desc(&d);
    d.q_block = 0;
    CHECK_INT(trn_flex_attention_launch(g_stream, &d), TRN_ERROR_INVALID_ARGUMENT);
    CHECK_INT(trn_flex_attention_launch(g_stream, NULL), TRN_ERROR_INVALID_ARGUMENT);
    trn_flex_mods *m = NULL;
    CHECK_INT(trn_flex_mods_compile(NULL, NULL, &m), TRN_ERROR_INVALID_ARGUMENT);
}

int main(void) {
    CHECK_OK(trn_stream_get_default(0, &g_stream));
    unsigned seed = 7;
    for (size_t x = 0; x < sizeof q / sizeof *q; x++) q[x] = (float)frand(&seed);
    for (size_t x = 0; x < sizeof k / sizeof *k; x++) k[x] = (float)frand(&seed);
    for (size_t x = 0; x < sizeof v / sizeof *v; x++) v[x] = (float)frand(&seed);
    for (size_t x = 0; x < sizeof dout / sizeof *dout; x++) dout[x] = (float)frand(&seed);
    make_blocks();
    g_softcap = 0;
    check_against_reference();
    g_softcap = 1;
    check_against_reference();
    argument_errors();
    return TEST_REPORT();
}
