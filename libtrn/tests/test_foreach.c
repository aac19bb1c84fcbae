// test_foreach.c - list kernels (trn/foreach.h): elementwise ops over lists
// mixing a big tensor (several chunks) with small ones, norms, the fused
// Adam/AdamW/SGD steps against a per-element double reference, the
// found_inf skip and grad_scale unscaling, and argument errors.
#include <math.h>
#include <stdlib.h>

#include "test.h"
#include "trn/convert.h"
#include "trn/foreach.h"

static trn_stream *g_stream;

enum { NT = 3 };
static const int64_t sizes[NT] = {150000, 7, 1000};

static double frand(unsigned *s) {
    *s = *s * 1103515245u + 12345u;
    return ((*s >> 8) & 0xffff) / 32768.0 - 1.0;
}

static float *alloc_fill(int64_t n, unsigned *s, double lo) {
    float *p = malloc((size_t)n * sizeof(float));
    for (int64_t i = 0; i < n; i++) p[i] = (float)(lo + frand(s));
    return p;
}

static void test_elementwise(void) {
    unsigned s = 3;
    float *a[NT], *b[NT], *c[NT], *o[NT];
    trn_foreach_tensor ts[NT];
    for (int t = 0; t < NT; t++) {
        a[t] = alloc_fill(sizes[t], &s, 0), b[t] = alloc_fill(sizes[t], &s, 0);
        c[t] = alloc_fill(sizes[t], &s, 2.5), o[t] = alloc_fill(sizes[t], &s, 0);
        ts[t] = (trn_foreach_tensor){o[t], a[t], b[t], c[t], sizes[t], 0.25 * (t + 1)};
    }
    // addcdiv with per-tensor scalars
    trn_foreach_desc d = {
        TRN_FOREACH_ADDCDIV, TRN_DTYPE_F32, NT, ts, 1.0, NULL, TRN_DTYPE_F32, 2, 0, 0};
    CHECK_OK(trn_foreach_launch(g_stream, &d));
    CHECK_OK(trn_stream_synchronize(g_stream));
    double worst = 0;
    for (int t = 0; t < NT; t++)
        for (int64_t i = 0; i < sizes[t]; i++)
            worst = fmax(worst, fabs(o[t][i] - (a[t][i] + 0.25 * (t + 1) * (b[t][i] / c[t][i]))));
    CHECK(worst < 1e-6);
    // add List with alpha, in place into a
    for (int t = 0; t < NT; t++) ts[t] = (trn_foreach_tensor){a[t], a[t], b[t], NULL, sizes[t], 0};
    float keep0 = a[0][123456], b0 = b[0][123456];
    d = (trn_foreach_desc){
        TRN_FOREACH_ADD, TRN_DTYPE_F32, NT, ts, -0.5, NULL, TRN_DTYPE_F32, 2, 0, 0};
    CHECK_OK(trn_foreach_launch(g_stream, &d));
    CHECK_OK(trn_stream_synchronize(g_stream));
    CHECK(a[0][123456] == keep0 + -0.5f * b0);
    // mul by a scalar read from a "device" tensor when the task runs
    float factor = 3.0f;
    for (int t = 0; t < NT; t++) ts[t] = (trn_foreach_tensor){o[t], b[t], NULL, NULL, sizes[t], 0};
    d = (trn_foreach_desc){TRN_FOREACH_MUL, TRN_DTYPE_F32, NT, ts, 1,
                           &factor,         TRN_DTYPE_F32, 2,  0,  0};
    CHECK_OK(trn_foreach_launch(g_stream, &d));
    CHECK_OK(trn_stream_synchronize(g_stream));
    CHECK(o[1][3] == b[1][3] * 3.0f && o[0][149999] == b[0][149999] * 3.0f);
    // norms: 2, 1, inf
    float norms[NT];
    const double ords[3] = {2, 1, INFINITY};
    for (int k = 0; k < 3; k++) {
        for (int t = 0; t < NT; t++)
            ts[t] = (trn_foreach_tensor){&norms[t], b[t], NULL, NULL, sizes[t], 0};
        d = (trn_foreach_desc){TRN_FOREACH_NORM, TRN_DTYPE_F32, NT, ts, 1, NULL,
                               TRN_DTYPE_F32,    ords[k],       0,  0};
        CHECK_OK(trn_foreach_launch(g_stream, &d));
        CHECK_OK(trn_stream_synchronize(g_stream));
        for (int t = 0; t < NT; t++) {
            double r = 0;
            for (int64_t i = 0; i < sizes[t]; i++) {
                const double x = fabs(b[t][i]);
                r = k == 0 ? r + x * x : (k == 1 ? r + x : fmax(r, x));
            }
            if (k == 0) r = sqrt(r);
            CHECK(fabs(norms[t] - r) < 1e-4 * (1 + r));
        }
    }
    d.ord = 3;
    CHECK_INT(trn_foreach_launch(g_stream, &d), TRN_ERROR_UNSUPPORTED);
    d = (trn_foreach_desc){TRN_FOREACH_ADD, TRN_DTYPE_I32, NT, ts, 1, NULL, TRN_DTYPE_F32, 2, 0, 0};
    CHECK_INT(trn_foreach_launch(g_stream, &d), TRN_ERROR_UNSUPPORTED);
    ts[1].a = NULL;
    d.dtype = TRN_DTYPE_F32;
    CHECK_INT(trn_foreach_launch(g_stream, &d), TRN_ERROR_INVALID_ARGUMENT);
    for (int t = 0; t < NT; t++) free(a[t]), free(b[t]), free(c[t]), free(o[t]);
}

static float r16(float v) { return trn_bf16_to_float(trn_float_to_bf16(v)); }

// bfloat16 a - alpha * b as ATen's CPU sub: alpha rounded to bfloat16; in
// each thread's range (70000 elements on 2 threads: two of 35000) the
// vector body (32-element steps) rounds once, the last 35000 % 32 = 24
// elements round alpha * b to bfloat16 first.
static void test_add16_rounding(void) {
    enum { N16 = 70000 };
    uint16_t *a = malloc(N16 * 2), *b = malloc(N16 * 2), *o = malloc(N16 * 2);
    unsigned s = 9;
    for (int i = 0; i < N16; i++)
        a[i] = trn_float_to_bf16((float)frand(&s)), b[i] = trn_float_to_bf16((float)frand(&s));
    trn_foreach_tensor t = {o, a, b, NULL, N16, 0};
    trn_foreach_desc d = {
        TRN_FOREACH_SUB, TRN_DTYPE_BF16, 1, &t, 0.7, NULL, TRN_DTYPE_F32, 2, 32, 2};
    CHECK_OK(trn_foreach_launch(g_stream, &d));
    CHECK_OK(trn_stream_synchronize(g_stream));
    const float al = r16(-0.7f);
    int bad = 0, differ = 0;
    for (int i = 0; i < N16; i++) {
        const float x = trn_bf16_to_float(a[i]), y = trn_bf16_to_float(b[i]);
        const int tail = i % 35000 >= 35000 - 24;
        const float body = r16(fmaf(al, y, x)), scal = r16(x + r16(al * y));
        bad += trn_bf16_to_float(o[i]) != (tail ? scal : body);
        differ += body != scal;
    }
    CHECK_INT(bad, 0);
    CHECK(differ > 0);  // the two roundings do differ on these values
    d.cpu_block = 0;    // no tail: every element rounds once
    CHECK_OK(trn_foreach_launch(g_stream, &d));
    CHECK_OK(trn_stream_synchronize(g_stream));
    bad = 0;
    for (int i = 0; i < N16; i++)
        bad += trn_bf16_to_float(o[i]) !=
               r16(fmaf(al, trn_bf16_to_float(b[i]), trn_bf16_to_float(a[i])));
    CHECK_INT(bad, 0);
    free(a), free(b), free(o);
}

// One Adam(W) step in double for element values (p, g, m, v, mx).
static void ref_adam(double *p, double g, double *m, double *v, double *mx, double step, int adamw,
                     int amsgrad) {
    const double lr = 1e-2, b1 = 0.9, b2 = 0.99, wd = 0.1, eps = 1e-8;
    if (adamw)
        *p *= 1 - lr * wd;
    else
        g += *p * wd;
    *m += (1 - b1) * (g - *m);
    *v = *v * b2 + (1 - b2) * g * g;
    *mx = fmax(*mx, *v);
    const double den = sqrt(amsgrad ? *mx : *v) / sqrt(1 - pow(b2, step)) + eps;
    *p -= lr / (1 - pow(b1, step)) * *m / den;
}

static void test_adam(int adamw, int amsgrad) {
    unsigned s = 11;
    float *p[NT], *g[NT], *m[NT], *v[NT], *mx[NT];
    float step[NT] = {1, 3, 7};
    trn_fused_adam_tensor ts[NT];
    for (int t = 0; t < NT; t++) {
        p[t] = alloc_fill(sizes[t], &s, 0), g[t] = alloc_fill(sizes[t], &s, 0);
        m[t] = alloc_fill(sizes[t], &s, 0), v[t] = alloc_fill(sizes[t], &s, 1.5);
        mx[t] = alloc_fill(sizes[t], &s, 1.5);
        ts[t] = (trn_fused_adam_tensor){p[t],     g[t],    m[t], v[t], amsgrad ? mx[t] : NULL,
                                        &step[t], sizes[t]};
    }
    float scale = 4.0f, found = 0.0f;
    const int idx[NT] = {149999, 6, 500};
    double rp[NT], rm[NT], rv[NT], rmx[NT], rg[NT];
    for (int t = 0; t < NT; t++) {
        const int i = idx[t];
        rp[t] = p[t][i], rm[t] = m[t][i], rv[t] = v[t][i], rmx[t] = mx[t][i], rg[t] = g[t][i] / 4.0;
        ref_adam(&rp[t], rg[t], &rm[t], &rv[t], &rmx[t], step[t], adamw, amsgrad);
    }
    trn_fused_adam_desc d = {TRN_DTYPE_F32, NT,      ts, 1e-2,  0.9,    0.99,  0.1,
                             1e-8,          amsgrad, 0,  adamw, &scale, &found};
    CHECK_OK(trn_fused_adam_launch(g_stream, &d));
    CHECK_OK(trn_stream_synchronize(g_stream));
    for (int t = 0; t < NT; t++) {
        const int i = idx[t];
        CHECK(fabs(p[t][i] - rp[t]) < 1e-5 && fabs(m[t][i] - rm[t]) < 1e-6);
        CHECK(fabs(v[t][i] - rv[t]) < 1e-6 && fabs(g[t][i] - rg[t]) < 1e-7);
        if (amsgrad) CHECK(fabs(mx[t][i] - rmx[t]) < 1e-6);
    }
    // found_inf set: nothing changes
    found = 1.0f;
    const float before = p[0][0], gb = g[0][0];
    CHECK_OK(trn_fused_adam_launch(g_stream, &d));
    CHECK_OK(trn_stream_synchronize(g_stream));
    CHECK(p[0][0] == before && g[0][0] == gb);
    for (int t = 0; t < NT; t++) free(p[t]), free(g[t]), free(m[t]), free(v[t]), free(mx[t]);
}

static void test_sgd(void) {
    unsigned s = 5;
    float *p = alloc_fill(100000, &s, 0), *g = alloc_fill(100000, &s, 0),
          *buf = alloc_fill(100000, &s, 0);
    const double p0 = p[77777], g0 = g[77777], b0 = buf[77777];
    trn_fused_sgd_tensor t = {p, g, buf, 100000};
    trn_fused_sgd_desc d = {TRN_DTYPE_F32, 1, &t, 0.01, 0.9, 0.1, 0.2, 1, 0, 0, NULL, NULL};
    CHECK_OK(trn_fused_sgd_launch(g_stream, &d));
    CHECK_OK(trn_stream_synchronize(g_stream));
    const double gv = g0 + p0 * 0.01, bv = b0 * 0.9 + gv * 0.8, step = gv + bv * 0.9;
    CHECK(fabs(buf[77777] - bv) < 1e-6 && fabs(p[77777] - (p0 - 0.1 * step)) < 1e-6);
    d.count = -1;
    CHECK_INT(trn_fused_sgd_launch(g_stream, &d), TRN_ERROR_INVALID_ARGUMENT);
    free(p), free(g), free(buf);
}

int main(void) {
    CHECK_OK(trn_stream_get_default(0, &g_stream));
    test_elementwise();
    test_add16_rounding();
    test_adam(0, 0);
    test_adam(1, 1);
    test_sgd();
    return TEST_REPORT();
}
