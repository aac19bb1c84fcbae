// gelu_ulps.c - erf GELU float32 over every float input, for
// bench/bench_gelu_ulps.py: the shipped form (trn/scalar.h) and candidate forms
// with fewer vector operations, as loops the compiler vectorizes as it does the
// eager kernels; a float64 reference (erfc-based: 1 + erf cancels in the negative
// tail); per-range max / mean error in float32 ulps. Built as a shared library
// by the driver (-O3 -march=x86-64-v4 -mprefer-vector-width=512, the kernels'
// avx512 level).
#include <math.h>
#include <stddef.h>
#include <stdint.h>

#include "trn/scalar.h"

// Candidate A (session 34): one erfc form at every x, no small-|u| branch.
// erfc(z) exp(z^2) / t, t = 1 / (1 + z/2), fitted over t in [0.163, 1]
// (z <= 10.3) with degree 9, relative error 5.2e-8 with float coefficients.
static inline float cand_erfcx_over_t9(float t) {
    float p = 1.1393412016e-02f;
    p = fmaf(p, t, -1.1852753162e-01f);
    p = fmaf(p, t, 4.1810387373e-01f);
    p = fmaf(p, t, -6.5602886677e-01f);
    p = fmaf(p, t, 4.1005262733e-01f);
    p = fmaf(p, t, -9.2547081411e-02f);
    p = fmaf(p, t, 2.2364501655e-01f);
    p = fmaf(p, t, 2.3902799189e-01f);
    p = fmaf(p, t, 2.8281399608e-01f);
    return fmaf(p, t, 2.8206655383e-01f);
}
// trn_sc_exp_nonpos_f without its clamp at -104: GELU's argument is >= -105.2
// (|x| clamped at 14.5), and below -104 the result rounds to +0 either way.
static inline float cand_exp_nonpos_nc(float a) {
    int32_t ni;
    const float p = trn_sc_exp_reduced_f(a, &ni);
    return p * trn_fp32_from_bits((uint32_t)(ni + 64 + 127) << 23) * 0x1p-64f;
}
static inline float cand_exp_neg_half_sq(float x) {
    const float ax = fabsf(x);
    const float xc = ax < 14.5f ? ax : 14.5f;
    const float a = -0.5f * xc * xc;
    const float e = cand_exp_nonpos_nc(a);
    return fmaf(e, fmaf(-0.5f * xc, xc, -a), e);
}
static inline float cand_gelu_A(float x) {
    const float hx = 0.5f * x, u = x * 0.70710678118654752f;
    const float e = cand_exp_neg_half_sq(x);
    const float t = 1.0f / fmaf(0.5f, fabsf(u), 1.0f);
    const float ec = t * cand_erfcx_over_t9(t) * e;
    return u < 0.0f ? hx * ec : fmaf(-hx, ec, x);
}
// Candidate C: the shipped form with the exp's clamp dropped (same bits?).
static inline float cand_gelu_C(float x) {
    const float hx = 0.5f * x, u = x * 0.70710678118654752f;
    const float e = cand_exp_neg_half_sq(x);
    const float small = copysignf(fmaf(hx * u, trn_sc_erf_over_x_fit(u * u), hx), x);
    return fabsf(u) < 0.5f ? small : hx * trn_sc_one_plus_erf_big(u, e);
}

#define LOOP(name, expr)                                                                           \
    void name(const float *restrict x, float *restrict y, size_t n) {                              \
        for (size_t i = 0; i < n; i++) {                                                           \
            const float v = x[i];                                                                  \
            y[i] = (expr);                                                                         \
        }                                                                                          \
    }
LOOP(gelu_shipped, trn_sc_gelu_f32_form(v))
LOOP(gelu_A, cand_gelu_A(v))
LOOP(gelu_C, cand_gelu_C(v))
LOOP(gelu_backward_shipped, trn_sc_gelu_backward_f32_form(1.0f, v))

// The float64 references: GELU and its derivative.
void gelu_refs(const float *x, double *rf, double *rb, size_t n) {
    for (size_t i = 0; i < n; i++) {
        const double v = x[i];
        const double cdf = 0.5 * erfc(-v * 0.70710678118654752440);
        rf[i] = v * cdf;
        rb[i] = cdf + v * exp(-0.5 * v * v) * 0.39894228040143267794;
    }
}

// Per range of x (9 ranges, edges below), acc[5 b ..] = max ulps, sum of
// ulps, count, NaN mismatches, the x of the max. An ulp is the float32
// spacing at |reference| (2^-149 for subnormal results), as
// tests/test_numerics_vs_f64.py measures it. Non-finite x are skipped.
static const double edges[8] = {-13, -8, -3, -0.7, 0.7, 3, 8, INFINITY};
void gelu_stats(const float *x, const float *y, const double *ref, size_t n, double *acc) {
    for (size_t i = 0; i < n; i++) {
        const float v = x[i];
        if (!isfinite(v)) continue;
        int b = 0;
        while (b < 8 && !(v < edges[b])) b++;
        double *a = acc + 5 * b;
        const double r = ref[i];
        if (isnan(y[i]) || isnan(r)) {
            if (isnan(y[i]) != isnan(r)) a[3] += 1;
            continue;
        }
        const float rf = (float)fabs(r);
        const double ulp = isinf(rf) ? ldexp(1.0, 104) : (double)nextafterf(rf, INFINITY) - rf;
        const double e = fabs((double)y[i] - r) / ulp;
        if (e > a[0]) {
            a[0] = e;
            a[4] = v;
        }
        a[1] += e;
        a[2] += 1;
    }
}

// Bit differences between two results (NaN == NaN).
size_t gelu_diff(const float *a, const float *b, size_t n) {
    size_t d = 0;
    for (size_t i = 0; i < n; i++) {
        uint32_t ua, ub;
        memcpy(&ua, a + i, 4);
        memcpy(&ub, b + i, 4);
        d += ua != ub && !(a[i] != a[i] && b[i] != b[i]);
    }
    return d;
}
