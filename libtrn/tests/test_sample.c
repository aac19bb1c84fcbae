// test_sample.c - randperm (a permutation, reproducible per seed, different
// across seeds, every dtype) and multinomial (frequencies match the weights
// with replacement, zero weights never drawn, draws without replacement are
// distinct and favour heavy categories, invalid rows are errors).
#include <math.h>
#include <stdlib.h>

#include "internal.h"
#include "test.h"
#include "trn/sample.h"

static trn_stream *g_stream;

static void test_randperm(void) {
    enum { N = 1000 };
    static int64_t a[N], b[N], c[N];
    static int seen[N];
    trn_randperm_desc d = {TRN_DTYPE_I64, N, a, 42};
    CHECK_OK(trn_randperm_launch(g_stream, &d));
    d.out = b;
    CHECK_OK(trn_randperm_launch(g_stream, &d));
    d.out = c, d.seed = 43;
    CHECK_OK(trn_randperm_launch(g_stream, &d));
    CHECK_OK(trn_stream_synchronize(g_stream));
    int bad = 0, same_ab = 1, same_ac = 1, fixed = 0;
    for (int i = 0; i < N; i++) {
        bad += a[i] < 0 || a[i] >= N || seen[a[i]]++;
        same_ab &= a[i] == b[i];
        same_ac &= a[i] == c[i];
        fixed += a[i] == i;
    }
    CHECK_INT(bad, 0);
    CHECK(same_ab);
    CHECK(!same_ac);
    CHECK(fixed < 10);  // a shuffle, not the identity (expected 1 fixed point)
    float f[N];
    trn_randperm_desc df = {TRN_DTYPE_F32, N, f, 42};
    CHECK_OK(trn_randperm_launch(g_stream, &df));
    CHECK_OK(trn_stream_synchronize(g_stream));
    bad = 0;
    for (int i = 0; i < N; i++) bad += f[i] != (float)a[i];
    CHECK_INT(bad, 0);
    d.n = -1;
    CHECK_INT(trn_randperm_launch(g_stream, &d), TRN_ERROR_INVALID_ARGUMENT);
    d.n = 3, d.dtype = TRN_DTYPE_C64;
    CHECK_INT(trn_randperm_launch(g_stream, &d), TRN_ERROR_UNSUPPORTED);
}

static void test_multinomial(void) {
    enum { C = 4, S = 40000 };
    static int64_t out[2 * S];
    const float p[2 * C] = {1, 0, 2, 5, 0, 0, 3, 0};  // row 1: always category 2
    trn_multinomial_desc d = {TRN_DTYPE_F32, 2, C, S, 1, p, out, 7};
    CHECK_OK(trn_multinomial_launch(g_stream, &d));
    CHECK_OK(trn_stream_synchronize(g_stream));
    int count[C] = {0}, bad = 0;
    for (int s = 0; s < S; s++) {
        count[out[s]]++;
        bad += out[S + s] != 2;
    }
    CHECK_INT(bad, 0);
    CHECK_INT(count[1], 0);
    // Frequencies within 5 standard deviations of n * p.
    for (int c = 0; c < C; c++) {
        const double q = p[c] / 8.0, sd = sqrt(S * q * (1 - q));
        CHECK(fabs(count[c] - S * q) <= 5 * sd + 1e-9);
    }
    // Without replacement: distinct draws; the heaviest category comes first
    // most often (probability 5/8 for the first draw).
    int first3 = 0;
    for (int t = 0; t < 2000; t++) {
        int64_t o[3];
        trn_multinomial_desc dn = {TRN_DTYPE_F32, 1, C, 3, 0, p, o, (uint64_t)t};
        CHECK_OK(trn_multinomial_launch(g_stream, &dn));
        CHECK_OK(trn_stream_synchronize(g_stream));
        bad += o[0] == o[1] || o[0] == o[2] || o[1] == o[2];
        bad += o[0] == 1 || o[1] == 1;  // zero weight only as the last resort
        first3 += o[0] == 3;
    }
    CHECK_INT(bad, 0);
    CHECK(fabs(first3 / 2000.0 - 5.0 / 8.0) < 0.05);
    // Errors: a negative weight (reported by the task), a zero row, too many
    // draws without replacement, an unsupported dtype.
    const float neg[C] = {1, -1, 1, 1}, zero[C] = {0, 0, 0, 0};
    int64_t o[2];
    trn_multinomial_desc de = {TRN_DTYPE_F32, 1, C, 2, 1, neg, o, 1};
    CHECK_OK(trn_multinomial_launch(g_stream, &de));
    CHECK_INT(trn_stream_synchronize(g_stream), TRN_ERROR_INVALID_ARGUMENT);
    de.probs = zero;
    CHECK_OK(trn_multinomial_launch(g_stream, &de));
    CHECK_INT(trn_stream_synchronize(g_stream), TRN_ERROR_INVALID_ARGUMENT);
    de.replacement = 0, de.samples = C + 1;
    CHECK_INT(trn_multinomial_launch(g_stream, &de), TRN_ERROR_INVALID_ARGUMENT);
    de.samples = 1, de.dtype = TRN_DTYPE_I32;
    CHECK_INT(trn_multinomial_launch(g_stream, &de), TRN_ERROR_UNSUPPORTED);
}

TEST_MAIN_DEFAULT_STREAM(test_randperm, test_multinomial)
