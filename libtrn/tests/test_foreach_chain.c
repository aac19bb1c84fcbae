// test_foreach_chain.c - trn_foreach_chain_launch (trn/foreach_chain.h): a
// chain run chunk-major gives the bytes of its ops launched one by one
// (float32 and bfloat16, a multi-chunk tensor, odd and empty ones), a
// scratch output is never stored, overlapping operands run op by op (same
// bytes), Adam's step run as one loop (foreach_adam_chain.h) gives the
// bytes of its ops, and argument errors.
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "test.h"
#include "trn/convert.h"
#include "trn/foreach_chain.h"
#include "trn/metrics.h"

static trn_stream *g_stream;

enum { NT = 4, NOPS = 5 };
static const int64_t sizes[NT] = {40000, 7, 0, 1000};

static double frand(unsigned *s) {
    *s = *s * 1103515245u + 12345u;
    return ((*s >> 8) & 0xffff) / 32768.0 - 1.0;
}

// Lists p, g, m (filled) and t (sentinel bytes) of dtype d, n elements each.
typedef struct lists {
    void *p[NT], *g[NT], *m[NT], *t[NT];
} lists;

static void fill(lists *l, trn_dtype d, unsigned seed) {
    const size_t es = trn_dtype_size(d);
    for (int i = 0; i < NT; i++) {
        void **all[4] = {&l->p[i], &l->g[i], &l->m[i], &l->t[i]};
        for (int k = 0; k < 4; k++) {
            *all[k] = malloc((size_t)(sizes[i] + 1) * es);
            for (int64_t j = 0; j < sizes[i]; j++) {
                const float v = k == 3 ? 0 : (float)(frand(&seed) + (k == 2 ? 1.5 : 0));
                if (d == TRN_DTYPE_BF16)
                    ((uint16_t *)*all[k])[j] = trn_float_to_bf16(v);
                else
                    ((float *)*all[k])[j] = v;
            }
            if (k == 3) memset(*all[k], 0x5a, (size_t)sizes[i] * es);
        }
    }
}

static void release(lists *l) {
    for (int i = 0; i < NT; i++) free(l->p[i]), free(l->g[i]), free(l->m[i]), free(l->t[i]);
}

// An optimizer-like chain: p *= 0.99; m = m + 0.5 * g * g; t = sqrt(m);
// t = t + alpha 1e-3 (ADD scalar); p = p + (-0.01) * (g / t).
static void build(lists *l, trn_dtype d, trn_foreach_tensor ts[NOPS][NT], trn_foreach_desc *ops) {
    for (int i = 0; i < NT; i++) {
        const int64_t n = sizes[i];
        ts[0][i] = (trn_foreach_tensor){l->p[i], l->p[i], NULL, NULL, n, 0.99};
        ts[1][i] = (trn_foreach_tensor){l->m[i], l->m[i], l->g[i], l->g[i], n, 0.5};
        ts[2][i] = (trn_foreach_tensor){l->t[i], l->m[i], NULL, NULL, n, 0};
        ts[3][i] = (trn_foreach_tensor){l->t[i], l->t[i], NULL, NULL, n, 1e-3};
        ts[4][i] = (trn_foreach_tensor){l->p[i], l->p[i], l->g[i], l->t[i], n, -0.01};
    }
    const trn_foreach_op op[NOPS] = {TRN_FOREACH_MUL, TRN_FOREACH_ADDCMUL, TRN_FOREACH_SQRT,
                                     TRN_FOREACH_ADD, TRN_FOREACH_ADDCDIV};
    for (int k = 0; k < NOPS; k++) {
        memset(&ops[k], 0, sizeof ops[k]);
        ops[k].op = op[k];
        ops[k].dtype = d;
        ops[k].count = NT;
        ops[k].tensors = ts[k];
        ops[k].alpha = k == 3 ? 0.75 : 1.0;  // 16-bit add with alpha: rounded by index
        ops[k].ord = 2;
        ops[k].cpu_block = 32;
        ops[k].cpu_threads = 1;
    }
}

static int same(lists *a, lists *b, trn_dtype d, int with_t) {
    const size_t es = trn_dtype_size(d);
    for (int i = 0; i < NT; i++) {
        const size_t n = (size_t)sizes[i] * es;
        if (memcmp(a->p[i], b->p[i], n) || memcmp(a->m[i], b->m[i], n) ||
            (with_t && memcmp(a->t[i], b->t[i], n)))
            return 0;
    }
    return 1;
}

static void test_bits(trn_dtype d) {
    lists one, chain, scr;
    fill(&one, d, 7), fill(&chain, d, 7), fill(&scr, d, 7);
    trn_foreach_tensor ts[NOPS][NT];
    trn_foreach_desc ops[NOPS];
    build(&one, d, ts, ops);
    for (int k = 0; k < NOPS; k++) CHECK_OK(trn_foreach_launch(g_stream, &ops[k]));
    int64_t f0 = 0, f1 = 0, u0 = 0, u1 = 0;
    trn_foreach_chain_counts(&f0, &u0);
    build(&chain, d, ts, ops);
    CHECK_OK(trn_foreach_chain_launch(g_stream, ops, NOPS, NULL));
    CHECK_OK(trn_stream_synchronize(g_stream));
    CHECK(same(&one, &chain, d, 1));
    // sqrt's output in scratch: p and m the same, t never written
    const unsigned char scratch[NOPS] = {0, 0, 1, 0, 0};
    build(&scr, d, ts, ops);
    CHECK_OK(trn_foreach_chain_launch(g_stream, ops, NOPS, scratch));
    CHECK_OK(trn_stream_synchronize(g_stream));
    trn_foreach_chain_counts(&f1, &u1);
    CHECK_INT(f1 - f0, 2);
    CHECK_INT(u1 - u0, 0);
    CHECK(same(&one, &scr, d, 0));
    CHECK(sizes[0] == 0 || ((unsigned char *)scr.t[0])[5] == 0x5a);
    release(&one), release(&chain), release(&scr);
}

// Position 1's g overlaps position 0's (read only: a write reached from two
// positions races in a single launch too): the chain runs op by op.
static void test_overlap(void) {
    enum { N = 30000 };
    float *p1 = malloc(2 * N * sizeof(float)), *p2 = malloc(2 * N * sizeof(float));
    float *g = malloc(2 * N * sizeof(float));
    unsigned s = 9;
    for (int i = 0; i < 2 * N; i++) p1[i] = p2[i] = (float)frand(&s), g[i] = (float)frand(&s);
    trn_foreach_tensor ts[2][2];
    trn_foreach_desc ops[2];
    for (int pass = 0; pass < 2; pass++) {
        float *p = pass ? p2 : p1;
        ts[0][0] = (trn_foreach_tensor){p, p, g, NULL, N, 0};
        ts[0][1] = (trn_foreach_tensor){p + N, p + N, g + N / 2, NULL, N, 0};
        ts[1][0] = (trn_foreach_tensor){p, p, NULL, NULL, N, 1.5};
        ts[1][1] = (trn_foreach_tensor){p + N, p + N, NULL, NULL, N, 1.5};
        for (int k = 0; k < 2; k++) {
            memset(&ops[k], 0, sizeof ops[k]);
            ops[k].op = k ? TRN_FOREACH_MUL : TRN_FOREACH_ADD;
            ops[k].dtype = TRN_DTYPE_F32;
            ops[k].count = 2;
            ops[k].tensors = ts[k];
            ops[k].alpha = 1;
        }
        if (pass == 0) {
            for (int k = 0; k < 2; k++) CHECK_OK(trn_foreach_launch(g_stream, &ops[k]));
        } else {
            int64_t u0 = 0, u1 = 0;
            trn_foreach_chain_counts(NULL, &u0);
            CHECK_OK(trn_foreach_chain_launch(g_stream, ops, 2, NULL));
            CHECK_OK(trn_stream_synchronize(g_stream));
            trn_foreach_chain_counts(NULL, &u1);
            CHECK_INT(u1 - u0, 1);
        }
    }
    CHECK_OK(trn_stream_synchronize(g_stream));
    CHECK(memcmp(p1, p2, 2 * N * sizeof(float)) == 0);
    free(p1), free(p2), free(g);
}

static double adam_loops(void) {
    trn_metric_info m[TRN_METRICS_MAX];
    const size_t n = trn_metrics_list(m, TRN_METRICS_MAX);
    for (size_t i = 0; i < n && i < TRN_METRICS_MAX; i++)
        if (strcmp(m[i].name, "ForeachChainAdamLoops") == 0) return m[i].sum;
    return 0;
}

// PyTorch's foreach Adam / AdamW step (7 or 8 ops) on float32 lists P, G, M,
// V and the denominator D: the chain takes the one-loop form and its bytes
// are those of the ops launched one by one, for AdamW (weight decay) and
// Adam, lerp weights on both sides of 0.5, D in scratch or stored, divisor
// and step scalars per tensor or from a scalar tensor. Values include zero
// and subnormal second moments, a NaN and infinite gradients.
static void test_adam(int wd, double w, int scratch_d, int scalar_tensor) {
    enum { NA = 4, NL = 5 };
    static const int64_t na[NA] = {40000, 7, 0, 1000};
    float *l[2][NL][NA];
    unsigned s = 11;
    for (int t = 0; t < NA; t++)
        for (int k = 0; k < NL; k++) {
            l[0][k][t] = malloc((size_t)(na[t] + 1) * sizeof(float));
            l[1][k][t] = malloc((size_t)(na[t] + 1) * sizeof(float));
            for (int64_t j = 0; j < na[t]; j++) {
                float v = (float)frand(&s);
                if (k == 3) v = v * v * 1e-3f;  // exp_avg_sq >= 0
                if (k == 3 && j % 97 == 3) v = j % 2 ? 0.0f : 1e-41f;
                if (k == 1 && j == 5) v = NAN;
                if (k == 1 && j == 6) v = -INFINITY;
                if (k == 4) v = 0;
                l[0][k][t][j] = l[1][k][t][j] = v;
            }
        }
    const float div_by = 0.75f;  // the scalar tensor's value (divisor of D)
    trn_foreach_tensor ts[2][8][NA];
    trn_foreach_desc ops[2][8];
    const trn_foreach_op op[8] = {TRN_FOREACH_MUL,     TRN_FOREACH_LERP,   TRN_FOREACH_MUL,
                                  TRN_FOREACH_ADDCMUL, TRN_FOREACH_SQRT,   TRN_FOREACH_DIV,
                                  TRN_FOREACH_ADD,     TRN_FOREACH_ADDCDIV};
    const int first = wd ? 0 : 1, nops = 8 - first;
    for (int r = 0; r < 2; r++) {
        for (int t = 0; t < NA; t++) {
            // an empty tensor's data pointer may be NULL (PyTorch's are)
            float *P = l[r][0][t], *G = na[t] ? l[r][1][t] : NULL, *M = l[r][2][t];
            float *V = l[r][3][t];
            float *D = l[r][4][t];
            const int64_t n = na[t];
            ts[r][0][t] = (trn_foreach_tensor){P, P, NULL, NULL, n, 0.999};
            ts[r][1][t] = (trn_foreach_tensor){M, M, G, NULL, n, w};
            ts[r][2][t] = (trn_foreach_tensor){V, V, NULL, NULL, n, 0.999};
            ts[r][3][t] = (trn_foreach_tensor){V, V, G, G, n, 1 - 0.999};
            ts[r][4][t] = (trn_foreach_tensor){D, V, NULL, NULL, n, 0};
            ts[r][5][t] = (trn_foreach_tensor){D, D, NULL, NULL, n, 0.1 + 0.2 * t};
            ts[r][6][t] = (trn_foreach_tensor){D, D, NULL, NULL, n, 1e-8};
            ts[r][7][t] = (trn_foreach_tensor){P, P, M, D, n, -0.01 * (t + 1)};
        }
        for (int k = 0; k < 8; k++) {
            memset(&ops[r][k], 0, sizeof ops[r][k]);
            ops[r][k].op = op[k];
            ops[r][k].dtype = TRN_DTYPE_F32;
            ops[r][k].count = NA;
            ops[r][k].tensors = ts[r][k];
            ops[r][k].alpha = 1.0;
            ops[r][k].ord = 2;
        }
        if (scalar_tensor) {
            ops[r][5].scalar_tensor = &div_by;
            ops[r][5].scalar_dtype = TRN_DTYPE_F32;
        }
    }
    for (int k = first; k < 8; k++) CHECK_OK(trn_foreach_launch(g_stream, &ops[0][k]));
    unsigned char scratch[8] = {0};
    scratch[4 - first] = (unsigned char)scratch_d;
    const double loops0 = adam_loops();
    CHECK_OK(trn_foreach_chain_launch(g_stream, &ops[1][first], nops, scratch));
    CHECK_OK(trn_stream_synchronize(g_stream));
    CHECK(adam_loops() == loops0 + 1);
    for (int t = 0; t < NA; t++)
        for (int k = 0; k < NL; k++) {
            if (k == 4 && scratch_d) continue;
            CHECK(memcmp(l[0][k][t], l[1][k][t], (size_t)na[t] * sizeof(float)) == 0);
        }
    if (scratch_d) CHECK(l[1][4][0][5] == 0.0f);  // D never stored
    for (int r = 0; r < 2; r++)
        for (int t = 0; t < NA; t++)
            for (int k = 0; k < NL; k++) free(l[r][k][t]);
}

// Adam steps inside a longer chain: a clip-like _foreach_mul_ of the grads,
// two AdamW steps back to back (the first's D in scratch, the second's
// stored), then zero_grad's _foreach_zero_: both steps run as loops, same
// bytes as the ops one by one. With a _foreach_neg of the grads into a
// scratch list first (maximize), the step reads that list: no loop, same
// bytes.
static void test_adam_in_chain(int neg) {
    enum { NA = 3, NL = 7, NOPS_MAX = 19 };
    static const int64_t na[NA] = {40000, 0, 333};
    float *l[2][NL][NA];
    unsigned s = 23;
    for (int t = 0; t < NA; t++)
        for (int k = 0; k < NL; k++) {
            l[0][k][t] = malloc((size_t)(na[t] + 1) * sizeof(float));
            l[1][k][t] = malloc((size_t)(na[t] + 1) * sizeof(float));
            for (int64_t j = 0; j < na[t]; j++) {
                float v = (float)frand(&s);
                if (k == 3) v = v * v * 1e-3f;
                if (k >= 4) v = 0;
                l[0][k][t][j] = l[1][k][t][j] = v;
            }
        }
    // lists: 0 P, 1 G, 2 M, 3 V, 4 D1, 5 D2, 6 G' (neg's output)
    trn_foreach_tensor ts[2][NOPS_MAX][NA];
    trn_foreach_desc ops[2][NOPS_MAX];
    trn_foreach_op op[NOPS_MAX];
    int nops = 0;
    for (int r = 0; r < 2; r++) {
        int k = 0;
        for (int t = 0; t < NA; t++) {
            float *P = l[r][0][t], *G = l[r][1][t], *M = l[r][2][t], *V = l[r][3][t];
            float *D1 = l[r][4][t], *D2 = l[r][5][t], *Gn = l[r][6][t];
            const int64_t n = na[t];
            float *g = neg ? Gn : G;
            k = 0;
            if (neg) {
                op[k] = TRN_FOREACH_NEG;
                ts[r][k++][t] = (trn_foreach_tensor){Gn, G, NULL, NULL, n, 0};
            }
            op[k] = TRN_FOREACH_MUL;  // clip
            ts[r][k++][t] = (trn_foreach_tensor){G, G, NULL, NULL, n, 0.5};
            for (int step = 0; step < 2; step++) {
                float *D = step ? D2 : D1;
                const double bc = 0.2 + 0.1 * step;
                op[k] = TRN_FOREACH_MUL;
                ts[r][k++][t] = (trn_foreach_tensor){P, P, NULL, NULL, n, 0.999};
                op[k] = TRN_FOREACH_LERP;
                ts[r][k++][t] = (trn_foreach_tensor){M, M, g, NULL, n, 0.1};
                op[k] = TRN_FOREACH_MUL;
                ts[r][k++][t] = (trn_foreach_tensor){V, V, NULL, NULL, n, 0.999};
                op[k] = TRN_FOREACH_ADDCMUL;
                ts[r][k++][t] = (trn_foreach_tensor){V, V, g, g, n, 1e-3};
                op[k] = TRN_FOREACH_SQRT;
                ts[r][k++][t] = (trn_foreach_tensor){D, V, NULL, NULL, n, 0};
                op[k] = TRN_FOREACH_DIV;
                ts[r][k++][t] = (trn_foreach_tensor){D, D, NULL, NULL, n, bc};
                op[k] = TRN_FOREACH_ADD;
                ts[r][k++][t] = (trn_foreach_tensor){D, D, NULL, NULL, n, 1e-8};
                op[k] = TRN_FOREACH_ADDCDIV;
                ts[r][k++][t] = (trn_foreach_tensor){P, P, M, D, n, -0.01 / bc};
            }
            op[k] = TRN_FOREACH_ZERO;
            ts[r][k++][t] = (trn_foreach_tensor){G, G, NULL, NULL, n, 0};
        }
        nops = k;
        for (int j = 0; j < nops; j++) {
            memset(&ops[r][j], 0, sizeof ops[r][j]);
            ops[r][j].op = op[j];
            ops[r][j].dtype = TRN_DTYPE_F32;
            ops[r][j].count = NA;
            ops[r][j].tensors = ts[r][j];
            ops[r][j].alpha = 1.0;
            ops[r][j].ord = 2;
        }
    }
    for (int j = 0; j < nops; j++) CHECK_OK(trn_foreach_launch(g_stream, &ops[0][j]));
    unsigned char scratch[NOPS_MAX] = {0};
    scratch[neg ? 6 : 5] = 1;  // the first step's D
    if (neg) scratch[0] = 1;   // G'
    const double loops0 = adam_loops();
    CHECK_OK(trn_foreach_chain_launch(g_stream, ops[1], nops, scratch));
    CHECK_OK(trn_stream_synchronize(g_stream));
    CHECK(adam_loops() == loops0 + (neg ? 0 : 2));
    for (int t = 0; t < NA; t++)
        for (int k = 0; k < NL; k++) {
            if (k == 4 || (k == 6 && neg)) continue;  // scratch lists
            CHECK(memcmp(l[0][k][t], l[1][k][t], (size_t)na[t] * sizeof(float)) == 0);
        }
    for (int r = 0; r < 2; r++)
        for (int t = 0; t < NA; t++)
            for (int k = 0; k < NL; k++) free(l[r][k][t]);
}

static void test_errors(void) {
    float x[4] = {1, 2, 3, 4};
    trn_foreach_tensor t = {x, x, NULL, NULL, 4, 2.0};
    trn_foreach_desc d;
    memset(&d, 0, sizeof d);
    d.op = TRN_FOREACH_MUL;
    d.dtype = TRN_DTYPE_F32;
    d.count = 1;
    d.tensors = &t;
    CHECK_INT(trn_foreach_chain_launch(g_stream, &d, 0, NULL), TRN_ERROR_INVALID_ARGUMENT);
    CHECK_INT(trn_foreach_chain_launch(NULL, &d, 1, NULL), TRN_ERROR_INVALID_ARGUMENT);
    trn_foreach_desc two[2] = {d, d};
    two[1].op = TRN_FOREACH_NORM;
    CHECK_INT(trn_foreach_chain_launch(g_stream, two, 2, NULL), TRN_ERROR_UNSUPPORTED);
    two[1].op = TRN_FOREACH_ADDCMUL;  // no b / c operands
    CHECK_INT(trn_foreach_chain_launch(g_stream, two, 2, NULL), TRN_ERROR_INVALID_ARGUMENT);
    CHECK_OK(trn_foreach_chain_launch(g_stream, two, 1, NULL));
    CHECK_OK(trn_stream_synchronize(g_stream));
    CHECK(x[3] == 8.0f);
}

int main(void) {
    CHECK_OK(trn_stream_get_default(0, &g_stream));
    test_bits(TRN_DTYPE_F32);
    test_bits(TRN_DTYPE_BF16);
    test_overlap();
    test_adam(1, 0.1, 1, 0);
    test_adam(0, 0.1, 0, 1);
    test_adam(1, 0.7, 0, 0);
    test_adam(0, 0.6, 1, 1);
    test_adam_in_chain(0);
    test_adam_in_chain(1);
    test_errors();
    return TEST_REPORT();
}
