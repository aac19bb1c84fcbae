// test_random.c - the random fill kernel: moments of each distribution,
// ranges (log-normal, Cauchy and geometric included), reproducibility from a seed (and independence of the thread
// split), a different seed giving different values, argument errors; offsets: a
// fill of elements [k, n) at offset o + k is that part of a fill of [0, n) at
// offset o (what DTensor's shards rely on), and consecutive fills differ.
#include <math.h>
#include <stdlib.h>

#include "test.h"
#include "trn/random.h"

static trn_stream *g_stream;
enum { N = 200000 };

static void fill(trn_random_desc *d) {
    CHECK_OK(trn_random_launch(g_stream, d));
    CHECK_OK(trn_stream_synchronize(g_stream));
}

static void moments(const float *x, double *mean, double *var) {
    double s = 0, s2 = 0;
    for (int i = 0; i < N; i++) s += x[i], s2 += (double)x[i] * x[i];
    *mean = s / N;
    *var = s2 / N - *mean * *mean;
}

static void test_float_dists(void) {
    float *x = malloc(N * sizeof *x), *y = malloc(N * sizeof *y);
    double m, v;
    trn_random_desc d = {TRN_RANDOM_UNIFORM, TRN_DTYPE_F32, N, x, -1.0, 3.0, 0, 0, 7, 0};
    fill(&d);
    int out = 0;
    for (int i = 0; i < N; i++) out += x[i] < -1.0f || x[i] >= 3.0f;
    CHECK_INT(out, 0);
    moments(x, &m, &v);
    CHECK(fabs(m - 1.0) < 0.02 && fabs(v - 16.0 / 12) < 0.02);
    d.out = y;  // same seed: same values
    fill(&d);
    CHECK(memcmp(x, y, N * sizeof *x) == 0);
    d.seed = 8;
    fill(&d);
    CHECK(memcmp(x, y, N * sizeof *x) != 0);
    trn_random_desc nd = {TRN_RANDOM_NORMAL, TRN_DTYPE_F32, N, x, 2.0, 0.5, 0, 0, 1, 0};
    fill(&nd);
    moments(x, &m, &v);
    CHECK(fabs(m - 2.0) < 0.01 && fabs(v - 0.25) < 0.01);
    trn_random_desc ed = {TRN_RANDOM_EXPONENTIAL, TRN_DTYPE_F32, N, x, 4.0, 0, 0, 0, 1, 0};
    fill(&ed);
    moments(x, &m, &v);
    int neg = 0;
    for (int i = 0; i < N; i++) neg += x[i] < 0;
    CHECK_INT(neg, 0);
    CHECK(fabs(m - 0.25) < 0.005 && fabs(v - 1.0 / 16) < 0.005);
    free(x);
    free(y);
}

// Log-normal: log(x) is normal(mean, std); Cauchy: median and quartiles
// (it has no mean), every value finite in float64.
static void test_heavy_tails(void) {
    double *x = malloc(N * sizeof *x);
    trn_random_desc ld = {TRN_RANDOM_LOG_NORMAL, TRN_DTYPE_F64, N, x, 0.5, 0.25, 0, 0, 3, 0};
    fill(&ld);
    double s = 0, s2 = 0;
    int bad = 0;
    for (int i = 0; i < N; i++) {
        bad += !(x[i] > 0);
        const double l = log(x[i]);
        s += l, s2 += l * l;
    }
    CHECK_INT(bad, 0);
    CHECK(fabs(s / N - 0.5) < 0.005 && fabs(s2 / N - 0.25 - 0.0625) < 0.005);
    trn_random_desc cd = {TRN_RANDOM_CAUCHY, TRN_DTYPE_F64, N, x, 1.0, 2.0, 0, 0, 4, 0};
    fill(&cd);
    int below = 0, q1 = 0, q3 = 0;
    bad = 0;
    for (int i = 0; i < N; i++) {
        bad += !isfinite(x[i]);
        below += x[i] < 1.0, q1 += x[i] < -1.0, q3 += x[i] < 3.0;  // quartiles: median -+ scale
    }
    CHECK_INT(bad, 0);
    CHECK(fabs(below / (double)N - 0.5) < 0.01);
    CHECK(fabs(q1 / (double)N - 0.25) < 0.01 && fabs(q3 / (double)N - 0.75) < 0.01);
    // Scale and probability errors.
    cd.b = 0;
    CHECK_INT(trn_random_launch(g_stream, &cd), TRN_ERROR_INVALID_ARGUMENT);
    ld.b = -1;
    CHECK_INT(trn_random_launch(g_stream, &ld), TRN_ERROR_INVALID_ARGUMENT);
    free(x);
}

// Geometric(p): values >= 1, mean 1/p, P(k = 1) = p; integer and float outputs.
static void test_geometric(void) {
    int32_t *k = malloc(N * sizeof *k);
    trn_random_desc gd = {TRN_RANDOM_GEOMETRIC, TRN_DTYPE_I32, N, k, 0.25, 0, 0, 0, 9, 0};
    fill(&gd);
    double s = 0;
    int ones = 0, bad = 0;
    for (int i = 0; i < N; i++) s += k[i], ones += k[i] == 1, bad += k[i] < 1;
    CHECK_INT(bad, 0);
    CHECK(fabs(s / N - 4.0) < 0.05 && fabs(ones / (double)N - 0.25) < 0.01);
    float *f = malloc(N * sizeof *f);
    gd.dtype = TRN_DTYPE_F32;
    gd.out = f;
    fill(&gd);
    int same = 0;
    for (int i = 0; i < N; i++) same += f[i] == (float)k[i];  // same seed, same draws
    CHECK_INT(same, N);
    gd.a = 1.0;
    CHECK_INT(trn_random_launch(g_stream, &gd), TRN_ERROR_INVALID_ARGUMENT);
    gd.a = 0.0;
    CHECK_INT(trn_random_launch(g_stream, &gd), TRN_ERROR_INVALID_ARGUMENT);
    free(k);
    free(f);
}

static void test_discrete(void) {
    int64_t *k = malloc(N * sizeof *k);
    trn_random_desc d = {TRN_RANDOM_INTEGER, TRN_DTYPE_I64, N, k, 0, 0, -3, 7, 5, 0};
    fill(&d);
    int64_t count[7] = {0};
    int out = 0;
    for (int i = 0; i < N; i++) {
        if (k[i] < -3 || k[i] > 3)
            out++;
        else
            count[k[i] + 3]++;
    }
    CHECK_INT(out, 0);
    for (int j = 0; j < 7; j++) CHECK(fabs(count[j] / (double)N - 1.0 / 7) < 0.01);
    uint8_t *b = malloc(N);
    trn_random_desc bd = {TRN_RANDOM_BERNOULLI, TRN_DTYPE_BOOL, N, b, 0.3, 0, 0, 0, 5, 0};
    fill(&bd);
    int64_t ones = 0, bad = 0;
    for (int i = 0; i < N; i++) ones += b[i] == 1, bad += b[i] > 1;
    CHECK_INT(bad, 0);
    CHECK(fabs(ones / (double)N - 0.3) < 0.01);
    // Errors.
    bd.a = 1.5;
    CHECK_INT(trn_random_launch(g_stream, &bd), TRN_ERROR_INVALID_ARGUMENT);
    d.range = 0;
    CHECK_INT(trn_random_launch(g_stream, &d), TRN_ERROR_INVALID_ARGUMENT);
    trn_random_desc nd = {TRN_RANDOM_NORMAL, TRN_DTYPE_I32, N, k, 0, 1, 0, 0, 1, 0};
    CHECK_INT(trn_random_launch(g_stream, &nd), TRN_ERROR_UNSUPPORTED);
    CHECK_INT(trn_random_launch(g_stream, NULL), TRN_ERROR_INVALID_ARGUMENT);
    free(k);
    free(b);
}

// Every distribution: two shards at offsets o and o + k equal the whole fill
// at offset o; a normal fill at o + n shares no value with the one at o.
static void test_offsets(void) {
    enum { M = 4096, K = 1000 };
    double *whole = malloc(M * sizeof *whole), *parts = malloc(M * sizeof *parts);
    CHECK(whole && parts);
    if (!(whole && parts)) return;
    const trn_random_dist dists[] = {
        TRN_RANDOM_UNIFORM, TRN_RANDOM_NORMAL,     TRN_RANDOM_BERNOULLI, TRN_RANDOM_EXPONENTIAL,
        TRN_RANDOM_INTEGER, TRN_RANDOM_LOG_NORMAL, TRN_RANDOM_CAUCHY,    TRN_RANDOM_GEOMETRIC};
    for (size_t t = 0; t < sizeof dists / sizeof dists[0]; t++) {
        const double a =
            dists[t] == TRN_RANDOM_BERNOULLI || dists[t] == TRN_RANDOM_GEOMETRIC ? 0.3 : 1.0;
        trn_random_desc d = {dists[t], TRN_DTYPE_F64, M, whole, a, 2.0, -5, 100, 77, 12};
        fill(&d);
        d.n = K, d.out = parts;
        fill(&d);
        d.n = M - K, d.out = parts + K, d.offset = 12 + K;
        fill(&d);
        CHECK(memcmp(whole, parts, M * sizeof *whole) == 0);
        d.n = M, d.out = parts, d.offset = 13;  // another offset: other values
        fill(&d);
        int same = 0;
        for (int i = 0; i < M; i++) same += whole[i] == parts[i];
        CHECK(same < M * 7 / 10);  // bernoulli(0.3) pairs agree 58% of the time
    }
    trn_random_desc nd = {TRN_RANDOM_NORMAL, TRN_DTYPE_F64, M, whole, 0, 1, 0, 0, 9, 0};
    fill(&nd);
    nd.out = parts, nd.offset = M;
    fill(&nd);
    int shared = 0;
    for (int i = 0; i < M; i++)
        for (int j = 0; j < M; j++) shared += whole[i] == parts[j];
    CHECK_INT(shared, 0);
    free(whole);
    free(parts);
}

TEST_MAIN_DEFAULT_STREAM(test_offsets, test_float_dists, test_discrete, test_heavy_tails,
                         test_geometric)
