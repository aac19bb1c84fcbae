// trn/scalar.h - the per-element math of every elementwise op, written once.
//
// Owner: this header is the single definition of what an op computes on one
// element. The eager kernels (src/kernels/pointwise/elementwise.c) call these in tight
// loops over blocks of operands, and generated code will include it too, so
// everything here is static inline, free of global state and branch-free in
// the sense that matters for vectorization: conditionals are selects the
// compiler turns into blends, never early returns.
//
// Three compute families:
//   _f  float   - float32, float16, bfloat16 (and float64 under the default
//                 float64-as-float32 policy). Transcendentals do their range
//                 reduction and polynomial in double, then round once, so
//                 results sit within ~1 ulp of correctly rounded float32
//                 without any libm call (a libm call keeps a loop scalar).
//   _d  double  - float64 computed natively (opt-in); uses libm, whose
//                 double functions are correctly rounded or nearly so.
//   _i  int64_t - every integer dtype and bool; narrower types are computed
//                 in 64 bits with wrap-around (unsigned arithmetic, never
//                 signed overflow) and truncated on store, which gives the
//                 same bits as PyTorch computing in the narrow type.
// Predicates (comparisons, logical ops) return int 0/1.
//
// Every function takes the op's context: parameters (alpha, slopes, clamp
// bounds...) and, for the integer family, the bit width and signedness of the
// stored dtype (shifts depend on them).
#ifndef TRN_SCALAR_H
#define TRN_SCALAR_H

#include <math.h>
#include <stdint.h>
#include <string.h>

#include "trn/convert.h"

// Forced inline: these are only useful inlined into a vector loop, and a
// translation unit with many ops exceeds GCC's inlining budget otherwise
// (a call in the loop keeps it scalar: measured 14 ns/element for gelu).
#if defined(__GNUC__)
#define TRN_SC_INLINE static inline __attribute__((always_inline))
#else
#define TRN_SC_INLINE static inline
#endif

typedef struct trn_sc_ctx {
    double p[4];    // op parameters, as trn_ew_desc.params
    int64_t ip[4];  // the same, as integers (integer family)
    int bits;       // width of the stored dtype
    int is_signed;  // integer family: signedness of the stored dtype
    int round16;    // float family: 1 float16, 2 bfloat16 storage, else 0
} trn_sc_ctx;

#define TRN_SC_UNUSED(x) (void)(x)

// ---- bit helpers -------------------------------------------------------------
TRN_SC_INLINE uint64_t trn_sc_dbits(double x) {
    uint64_t u;
    memcpy(&u, &x, sizeof u);
    return u;
}
TRN_SC_INLINE double trn_sc_dfrom(uint64_t u) {
    double x;
    memcpy(&x, &u, sizeof x);
    return x;
}
TRN_SC_INLINE int64_t trn_sc_wrap_u64(uint64_t v) {
    int64_t r;
    memcpy(&r, &v, sizeof r);
    return r;
}
TRN_SC_INLINE int trn_sc_isnan(double x) { return x != x; }

// ---- double-internal kernels for the float family ---------------------------
// Accurate to ~1e-12 relative for float inputs (the float result is then
// rounded once); not meant as full double-precision functions.

// 2^n for an integer-valued double n in [-1022, 1023].
TRN_SC_INLINE double trn_sc_pow2i(double n) {
    const double shifter = 0x1.8p52;  // adding it puts n in the low mantissa bits
    uint64_t k = trn_sc_dbits(n + shifter);
    return trn_sc_dfrom(((k + 1023) & 0x7ff) << 52);
}

// r = x - n ln2 (n = round(x / ln2)), with ln2 split so n*ln2_hi is exact.
TRN_SC_INLINE double trn_sc_exp_reduce_d(double x, double *n) {
    *n = nearbyint(x * 1.4426950408889634);
    return (x - *n * 0.6931471803691238) - *n * 1.9082149292705877e-10;
}
// The Taylor series of e^r from the r^8 term down, Horner steps onto p
// (the sum of the higher terms' coefficients so far).
TRN_SC_INLINE double trn_sc_exp_taylor_tail_d(double p, double r) {
    p = p * r + 1.0 / 40320.0;
    p = p * r + 1.0 / 5040.0;
    p = p * r + 1.0 / 720.0;
    p = p * r + 1.0 / 120.0;
    p = p * r + 1.0 / 24.0;
    p = p * r + 1.0 / 6.0;
    p = p * r + 0.5;
    p = p * r + 1.0;
    return p * r + 1.0;
}

// e^x. Clamped to where float results under- or overflow: float needs only
// x in [-104, 89]; NaN passes through.
TRN_SC_INLINE double trn_sc_exp_d(double x) {
    double xc = x < -745.0 ? -745.0 : (x > 709.0 ? 709.0 : x);
    xc = trn_sc_isnan(xc) ? 0.0 : xc;
    double n;
    const double r = trn_sc_exp_reduce_d(xc, &n);
    // e^r on |r| <= 0.347: Taylor to r^11 (truncation < 1e-14 relative).
    double p = 1.0 / 39916800.0;
    p = p * r + 1.0 / 3628800.0;
    p = trn_sc_exp_taylor_tail_d(p * r + 1.0 / 362880.0, r);
    // Split the scale so n = -1074..1023 stays in 2^[-1022, 1023].
    const double h = nearbyint(n * 0.5);
    const double res = p * trn_sc_pow2i(h) * trn_sc_pow2i(n - h);
    return trn_sc_isnan(x) ? x : res;
}

// e^x - 1 without cancellation near 0.
TRN_SC_INLINE double trn_sc_expm1_d(double x) {
    // |x| < 0.25: Taylor to x^13 (truncation < 1e-16 relative).
    double p = 1.0 / 6227020800.0;
    p = p * x + 1.0 / 479001600.0;
    p = p * x + 1.0 / 39916800.0;
    p = p * x + 1.0 / 3628800.0;
    p = p * x + 1.0 / 362880.0;
    p = p * x + 1.0 / 40320.0;
    p = p * x + 1.0 / 5040.0;
    p = p * x + 1.0 / 720.0;
    p = p * x + 1.0 / 120.0;
    p = p * x + 1.0 / 24.0;
    p = p * x + 1.0 / 6.0;
    p = p * x + 0.5;
    // expm1 has x's sign: copysign keeps -0 (-0 + +0 would be +0).
    p = copysign(p * x * x + x, x);
    const double big = trn_sc_exp_d(x) - 1.0;
    return fabs(x) < 0.25 ? p : big;
}

// log(x) for x > 0 finite; x = m 2^e with m in [sqrt(1/2), sqrt(2)),
// log m = 2 atanh(s), s = (m-1)/(m+1), |s| <= 0.1716.
TRN_SC_INLINE double trn_sc_log_d(double x) {
    // Subnormal doubles never come from float inputs; scale them anyway.
    const int sub = x < 0x1p-1022;
    const uint64_t b = trn_sc_dbits(sub ? x * 0x1p54 : x);
    // Offset by sqrt(1/2)'s bits so the exponent field of the difference is e.
    const int64_t t = trn_sc_wrap_u64(b - UINT64_C(0x3fe6a09e667f3bcd));
    const int64_t e = t >> 52;
    const double m = trn_sc_dfrom(b - ((uint64_t)e << 52));
    const double ef = (double)e - (sub ? 54.0 : 0.0);
    const double s = (m - 1.0) / (m + 1.0);
    const double s2 = s * s;
    double p = 2.0 / 17.0;
    p = p * s2 + 2.0 / 15.0;
    p = p * s2 + 2.0 / 13.0;
    p = p * s2 + 2.0 / 11.0;
    p = p * s2 + 2.0 / 9.0;
    p = p * s2 + 2.0 / 7.0;
    p = p * s2 + 2.0 / 5.0;
    p = p * s2 + 2.0 / 3.0;
    p = p * s2 + 2.0;
    const double res = ef * 0.6931471805599453 + s * p;
    double out = res;
    out = x == 0.0 ? -INFINITY : out;
    out = x < 0.0 ? NAN : out;
    out = x == INFINITY ? INFINITY : out;
    out = trn_sc_isnan(x) ? x : out;
    return out;
}

// sin and cos of x reduced by pi/2 (Cody-Waite in three 33-bit parts: exact
// while k < 2^19, |x| < ~8e5; the kernels recompute larger arguments with
// libm, a rare path outside the vector loop).
TRN_SC_INLINE void trn_sc_sincos_d(double x, double *s, double *c) {
    const double xc = (trn_sc_isnan(x) || fabs(x) == INFINITY) ? 0.0 : x;
    const double k = nearbyint(xc * 0.6366197723675814);
    double r = xc - k * 1.5707963267341256;
    r = r - k * 6.077100506506192e-11;
    r = r - k * 2.0222662487959506e-21;
    const double r2 = r * r;
    double ps = -1.0 / 1307674368000.0;
    ps = ps * r2 + 1.0 / 6227020800.0;
    ps = ps * r2 - 1.0 / 39916800.0;
    ps = ps * r2 + 1.0 / 362880.0;
    ps = ps * r2 - 1.0 / 5040.0;
    ps = ps * r2 + 1.0 / 120.0;
    ps = ps * r2 - 1.0 / 6.0;
    const double sr = r + r * r2 * ps;
    double pc = 1.0 / 20922789888000.0;
    pc = pc * r2 - 1.0 / 87178291200.0;
    pc = pc * r2 + 1.0 / 479001600.0;
    pc = pc * r2 - 1.0 / 3628800.0;
    pc = pc * r2 + 1.0 / 40320.0;
    pc = pc * r2 - 1.0 / 720.0;
    pc = pc * r2 + 1.0 / 24.0;
    pc = pc * r2 - 0.5;
    const double cr = 1.0 + r2 * pc;
    const int64_t q = (int64_t)(k - 4.0 * floor(k * 0.25));  // k mod 4
    double sv = (q == 0) ? sr : (q == 1) ? cr : (q == 2) ? -sr : -cr;
    double cv = (q == 0) ? cr : (q == 1) ? -sr : (q == 2) ? -cr : sr;
    const int bad = trn_sc_isnan(x) || fabs(x) == INFINITY;
    *s = bad ? NAN : sv;
    *c = bad ? NAN : cv;
}

// atan on [0, inf]: reduce to |u| <= tan(pi/8) and sum the series.
TRN_SC_INLINE double trn_sc_atan_pos_d(double t) {
    const int inv = t > 1.0;
    const double a = inv ? 1.0 / t : t;  // [0, 1]
    const int shift = a > 0.41421356237309503;
    const double u = shift ? (a - 1.0) / (a + 1.0) : a;  // |u| <= 0.4142
    const double u2 = u * u;
    double p = -1.0 / 27.0;
    p = p * u2 + 1.0 / 25.0;
    p = p * u2 - 1.0 / 23.0;
    p = p * u2 + 1.0 / 21.0;
    p = p * u2 - 1.0 / 19.0;
    p = p * u2 + 1.0 / 17.0;
    p = p * u2 - 1.0 / 15.0;
    p = p * u2 + 1.0 / 13.0;
    p = p * u2 - 1.0 / 11.0;
    p = p * u2 + 1.0 / 9.0;
    p = p * u2 - 1.0 / 7.0;
    p = p * u2 + 1.0 / 5.0;
    p = p * u2 - 1.0 / 3.0;
    double r = u + u * u2 * p;
    r = shift ? r + 0.7853981633974483 : r;
    r = inv ? 1.5707963267948966 - r : r;
    return r;
}

TRN_SC_INLINE double trn_sc_atan_d(double x) {
    const double r = copysign(trn_sc_atan_pos_d(fabs(x)), x);
    return trn_sc_isnan(x) ? x : r;
}

TRN_SC_INLINE double trn_sc_atan2_d(double y, double x) {
    const double ax = fabs(x), ay = fabs(y);
    const double hi = ax > ay ? ax : ay, lo = ax > ay ? ay : ax;
    double t = lo / hi;
    t = hi == 0.0 ? 0.0 : t;
    t = (ax == INFINITY && ay == INFINITY) ? 1.0 : t;
    double r = trn_sc_atan_pos_d(t);
    r = ay > ax ? 1.5707963267948966 - r : r;
    r = signbit(x) ? 3.141592653589793 - r : r;
    r = copysign(r, y);
    return (trn_sc_isnan(x) || trn_sc_isnan(y)) ? x + y : r;
}

// erfc(z) for z >= 0.5 (the callers take 1 - erf below): t P(s) e^(-z^2)
// with t = 1 / (1 + z/2) in [0.16, 0.8] and s = 3.125 t - 1.5 in [-1, 1],
// P a degree-12 Chebyshev fit of erfc(z) e^(z^2) / t over z in [0.5, 10.5]
// turned into powers of s (relative error 8.8e-12 evaluated in double). The
// float32 erf, erfc and erfinv are this rounded once: within 0.5 ulp plus
// ~1e-4 ulp, where Numerical Recipes' erfcc fit (1.2e-7, the form used
// before) left float32 erfc at up to 2.3 ulp and a mean twice CPU's. z is a
// float32 value, so z^2 is exact in double; z is clamped at 10.5, where
// erfc (1e-49) is 0 as a float, and a NaN takes the clamp (callers return it).
TRN_SC_INLINE double trn_sc_erfc_pos_d(double z) {
    const double zc = z < 10.5 ? z : 10.5;
    const double t = 1.0 / (1.0 + 0.5 * zc);
    const double s = t * 3.125 - 1.5;
    double p = -6.229830447557055e-08;
    p = p * s - 1.9389570289168104e-08;
    p = p * s + 8.908696709959663e-07;
    p = p * s - 9.228270806780655e-07;
    p = p * s - 8.996983864801017e-06;
    p = p * s + 2.3048887507952553e-05;
    p = p * s + 9.712211788317707e-05;
    p = p * s - 0.0003860447110537385;
    p = p * s - 0.0016896868528118807;
    p = p * s + 0.005213572771383049;
    p = p * s + 0.05629886171551813;
    p = p * s + 0.21279464367802417;
    p = p * s + 0.4972705232601017;
    return t * p * trn_sc_exp_d(-zc * zc);
}

// float32 erfc; below |x| = 0.5, 1 - erf(x) from trn_sc_erf_f32_d's Taylor
// branch (8e-10 of erf <= 0.52: 1e-9 of erfc >= 0.48).
TRN_SC_INLINE double trn_sc_erf_f32_d(double xd);
TRN_SC_INLINE double trn_sc_erfc_d(double x) {
    const double pos = trn_sc_erfc_pos_d(fabs(x));
    double r = x < 0.0 ? 2.0 - pos : pos;
    r = fabs(x) < 0.5 ? 1.0 - trn_sc_erf_f32_d(x) : r;
    return trn_sc_isnan(x) ? x : r;
}

// erfinv: Giles' single-precision approximation (a few float ulp; the
// double family refines it with Newton steps on libm's erf). |y| = 1 gives
// +-inf, |y| > 1 NaN.
TRN_SC_INLINE double trn_sc_erfinv_d(double y) {
    double w = -trn_sc_log_d((1.0 - y) * (1.0 + y));
    double pa, pb;
    {
        const double v = w - 2.5;
        double p = 2.81022636e-08;
        p = 3.43273939e-07 + p * v;
        p = -3.5233877e-06 + p * v;
        p = -4.39150654e-06 + p * v;
        p = 0.00021858087 + p * v;
        p = -0.00125372503 + p * v;
        p = -0.00417768164 + p * v;
        p = 0.246640727 + p * v;
        p = 1.50140941 + p * v;
        pa = p;
    }
    {
        const double v = sqrt(w < 5.0 ? 5.0 : w) - 3.0;
        double p = -0.000200214257;
        p = 0.000100950558 + p * v;
        p = 0.00134934322 + p * v;
        p = -0.00367342844 + p * v;
        p = 0.00573950773 + p * v;
        p = -0.0076224613 + p * v;
        p = 0.00943887047 + p * v;
        p = 1.00167406 + p * v;
        p = 2.83297682 + p * v;
        pb = p;
    }
    double x = (w < 5.0 ? pa : pb) * y;
    x = fabs(y) == 1.0 ? copysign(INFINITY, y) : x;
    x = fabs(y) > 1.0 ? NAN : x;
    return trn_sc_isnan(y) ? y : x;
}

// ---- float-native kernels for the hottest float ops -------------------------
// exp and what builds on it (sigmoid, silu, tanh, gelu) run at memory speed
// only when the whole computation stays in 8-wide float vectors, so these
// are done in float with FMA (Cephes' minimax coefficients).
// trn_sc_expf is the only float32 exp in libtrn: the eager reductions
// (softmax, logsumexp), attention and RNN cells call it too, so eager and
// compiled graphs agree to the bit, tiny (subnormal) results included.

// e^xc = (1 + r + r^2 P(r)) 2^n for xc in [-104, 89]: n and r = xc - n ln2,
// ln2 in two parts (r_hi = xc - n ln2_hi is exact; r is rounded once, its
// error returned in *r_err when r_err is not NULL). (n from adding and
// subtracting 1.5 2^23 instead of a round and a conversion gives the same
// n, but made expf 7 % slower in a C loop: softmax's loops are not
// multiply-bound as GELU's are.)
TRN_SC_INLINE float trn_sc_exp_reduce_f(float xc, int32_t *ni, float *r_err) {
    const float n = nearbyintf(xc * 1.44269504088896341f);
    *ni = (int32_t)n;
    const float r_hi = fmaf(n, -0.693359375f, xc);
    const float r = fmaf(n, 2.12194440e-4f, r_hi);
    // r_hi - r is exact, or r so small that its error does not matter.
    if (r_err) *r_err = fmaf(n, 2.12194440e-4f, r_hi - r);
    return r;
}
TRN_SC_INLINE float trn_sc_exp_poly_f(float r) {
    float p = 1.9875691500e-4f;
    p = fmaf(p, r, 1.3981999507e-3f);
    p = fmaf(p, r, 8.3334519073e-3f);
    p = fmaf(p, r, 4.1665795894e-2f);
    p = fmaf(p, r, 1.6666665459e-1f);
    return fmaf(p, r, 5.0000001201e-1f);
}
// q = r + r^2 P(r) unrounded by a "+ 1" (|q| < 0.42): for tanh, which
// carries 1 + q exactly itself.
TRN_SC_INLINE float trn_sc_exp_reduced_q_f(float xc, int32_t *ni) {
    const float r = trn_sc_exp_reduce_f(xc, ni, (float *)0);
    return fmaf(trn_sc_exp_poly_f(r), r * r, r);
}
// p = e^xc / 2^n in [0.7, 1.5] (*ni = n). Formed as (1 + r) + (r^2 P + the
// error of 1 + r + the error of r): one rounding at the end instead of three
// (r, r + r^2 P, 1 + q), so float32 exp is within 0.67 ulp (was 1.01; CPU's
// 0.57) for 4 more operations (~15 % of an exp).
TRN_SC_INLINE float trn_sc_exp_reduced_f(float xc, int32_t *ni) {
    float r_err;
    const float r = trn_sc_exp_reduce_f(xc, ni, &r_err);
    const float one_r = 1.0f + r;
    const float lo = ((1.0f - one_r) + r) + r_err;
    return one_r + fmaf(trn_sc_exp_poly_f(r), r * r, lo);
}

// e^xc for xc already clamped to [-104, 89]: the bits trn_sc_expf gives (it
// repeats this scaling with its last factor zeroed below -104; test_reduce.c
// checks the two agree) and GELU's trn_sc_exp_nonpos_f matches for xc <= 0.
TRN_SC_INLINE float trn_sc_exp_clamped_f(float xc) {
    int32_t ni;
    const float p = trn_sc_exp_reduced_f(xc, &ni);
    // 2^n as two factors so n in [-150, 129] never leaves the exponent range.
    // n1 = floor(ni / 2) (arithmetic shift: no rounding fix-up for
    // negative ni); both factors stay normal for ni in [-150, 129].
    const int32_t n1 = ni >> 1, n2 = ni - n1;
    const float s1 = trn_fp32_from_bits((uint32_t)(n1 + 127) << 23);
    const float s2 = trn_fp32_from_bits((uint32_t)(n2 + 127) << 23);
    return p * s1 * s2;
}

TRN_SC_INLINE float trn_sc_expf(float x) {
    // Clamped with the operand order of maxps/minps, which turns a NaN into
    // the bound (patched at the end; keeps the casts defined) without a
    // separate NaN select: 20% faster, and bit-identical over all 2^32 inputs.
    float xc = x > -104.0f ? x : -104.0f;
    xc = xc < 89.0f ? xc : 89.0f;
    int32_t ni;
    const float p = trn_sc_exp_reduced_f(xc, &ni);
    const int32_t n1 = ni >> 1, n2 = ni - n1;
    const float s1 = trn_fp32_from_bits((uint32_t)(n1 + 127) << 23);
    // Every x <= -104 (masked scores: -inf) gives +0 (as trn_sc_exp_clamped_f
    // (-104) rounds to): the last factor is 0 there instead of 2^-75. p s1 s2
    // underflows at -104, and on Intel cores a vector product that underflows
    // takes a microcode assist - 4.0 instead of 0.4 ns an element, which ran
    // half-masked causal attention tiles at a fraction of their speed. 0 is
    // exact: no assist. Subnormal results (x in (-104, -87.3)) still pay it.
    // Bit-identical to trn_sc_exp_clamped_f over all 2^32 inputs.
    const float s2 = x > -104.0f ? trn_fp32_from_bits((uint32_t)(n2 + 127) << 23) : 0.0f;
    const float res = p * s1 * s2;
    return x != x ? x : res;
}

// tanh: odd polynomial below 0.625 (Cephes tanhf), 1 - 2 / (e^2x + 1) above.
// Above, the roundings of e, of e + 1, of the quotient and of 1 - s each
// cost up to half an ulp of s (s = 2 / (e + 1) is up to 0.445): 1.3 ulp at
// most, where CPU's tanh stays within 0.51. So e = (1 + q) 2^n is carried
// as A + B = (2^n + 1) + 2^n q with the sum's error (exact: 2^n + 1 is exact
// for n <= 23, past which s is below 2^-22 and its errors do not reach the
// result), s gets its remainder term (2 - s D is exact in one fma; / D as
// * s/2 suffices for a correction of 1e-8), and 1 - s its own error (|1| >=
// s): at most 0.64 ulp over [0, 12] (mean 0.236), for 35 % more time than
// the plain form. 2|x| is clamped at 20 (tanh rounds to 1 from 9.01 on);
// the polynomial side keeps x's sign (tanh(-0) = -0) and a NaN x.
TRN_SC_INLINE float trn_sc_tanhf(float x) {
    const float ax = fabsf(x);
    const float z = x * x;
    float p = -5.70498872745e-3f;
    p = fmaf(p, z, 2.06390887954e-2f);
    p = fmaf(p, z, -5.37397155531e-2f);
    p = fmaf(p, z, 1.33314422036e-1f);
    p = fmaf(p, z, -3.33332819422e-1f);
    const float small = copysignf(fmaf(p * z, x, x), x);
    int32_t ni;
    const float q = trn_sc_exp_reduced_q_f(2.0f * (ax < 10.0f ? ax : 10.0f), &ni);
    const float scale = trn_fp32_from_bits((uint32_t)(ni + 127) << 23);
    const float a = scale + 1.0f, b = scale * q;
    const float d = a + b, d_lo = b - (d - a);
    const float s = 2.0f / d;
    const float s_lo = fmaf(-s, d_lo, fmaf(-s, d, 2.0f)) * (0.5f * s);
    const float one_minus_s = 1.0f - s, om_lo = (1.0f - one_minus_s) - s;
    const float big = copysignf(one_minus_s + (om_lo - s_lo), x);
    return ax >= 0.625f ? big : small;
}

// erfc(z) exp(z^2) / t with t = 1 / (1 + z/2), for z >= 0.5 (t <= 0.8): a
// degree-8 least-squares fit in t (relative error 3e-8 in exact arithmetic,
// ~2e-7 evaluated in float), so that a caller which already has exp(-z^2)
// gets erfc without a second exponential.
TRN_SC_INLINE float trn_sc_erfcx_over_t(float t) {
    float p = -0.06404717180267212f;
    p = fmaf(p, t, 0.30736326941957137f);
    p = fmaf(p, t, -0.5306435109055988f);
    p = fmaf(p, t, 0.3231048733046364f);
    p = fmaf(p, t, -0.05435718925409558f);
    p = fmaf(p, t, 0.2130511853447452f);
    p = fmaf(p, t, 0.24081269977246564f);
    p = fmaf(p, t, 0.2826486924528142f);
    return fmaf(p, t, 0.2820729464986524f);
}

// e^a for a in [-16, 0] (erf's e^(-z^2), z <= 4) to 1e-11 relative: Taylor
// to r^9 on |r| <= 0.347 and one power of two (n in [-24, 0]); none of
// trn_sc_exp_d's clamps, NaN tests or split scale.
TRN_SC_INLINE double trn_sc_exp_erf_d(double a) {
    double n;
    const double r = trn_sc_exp_reduce_d(a, &n);
    return trn_sc_exp_taylor_tail_d(1.0 / 362880.0, r) * trn_sc_pow2i(n);
}

// float32 erf, computed in double and rounded once: within 0.5 ulp plus
// ~0.01 (the float form used before reached 3.1 ulp, CPU's 0.74). Below
// |x| = 0.5, x times the Taylor series of erf(x) / x to x^14 (truncation
// 8e-10 relative); above, 1 - t P(s) e^(-z^2) (trn_sc_erfc_pos_d's form
// with a degree-8 fit over z in [0.5, 4] only, t in [1/3, 0.8], s = (30 t -
// 17) / 7: 3.6e-10 of erfc <= 0.48), z clamped at 4, where erf is 1 in
// float. Fewer terms and a short exp than a general double erf (~40 % less
// time than the Taylor-to-x^20 and degree-12 erfc forms).
// trn_sc_erf_f32_d is the unrounded double (for erfinv's Newton step, x
// not NaN); trn_sc_erff is also NKI's prelude's.
TRN_SC_INLINE double trn_sc_erf_f32_d(double xd) {
    const double x2 = xd * xd;
    double p = -1.0 / (5040.0 * 15.0);
    p = p * x2 + 1.0 / (720.0 * 13.0);
    p = p * x2 - 1.0 / (120.0 * 11.0);
    p = p * x2 + 1.0 / (24.0 * 9.0);
    p = p * x2 - 1.0 / (6.0 * 7.0);
    p = p * x2 + 1.0 / (2.0 * 5.0);
    p = p * x2 - 1.0 / 3.0;
    p = p * x2 + 1.0;
    const double small = 1.1283791670955126 * xd * p;
    const double z = fabs(xd) < 4.0 ? fabs(xd) : 4.0;
    const double t = 1.0 / (1.0 + 0.5 * z);
    const double u = t * (30.0 / 7.0) - 17.0 / 7.0;
    double q = -6.315100553538829e-07;
    q = q * u + 4.6952265911865835e-07;
    q = q * u + 1.8259872506514364e-05;
    q = q * u - 4.193921776965439e-05;
    q = q * u - 0.0005916666998962314;
    q = q * u + 0.0012181678746066476;
    q = q * u + 0.031753764502474614;
    q = q * u + 0.17813058032343357;
    q = q * u + 0.5591259253553699;
    const double big = copysign(1.0 - t * q * trn_sc_exp_erf_d(-z * z), xd);
    return fabs(xd) < 0.5 ? small : big;
}
TRN_SC_INLINE float trn_sc_erff(float x) {
    const float r = (float)trn_sc_erf_f32_d(x);
    return x != x ? x : r;
}

// 1 + erf(u), u = x / sqrt(2), given e = exp(-x^2 / 2), for GELU results
// stored in bfloat16 (an 8-bit significand: half an ulp is 2e-3 relative),
// where the float32 form's small-|u| branch and last two terms buy nothing:
// erfc(z) exp(z^2) / t over t in [0.15, 1] (z <= 11.3, past where
// exp(-z^2) underflows float) as one degree-6 fit, relative error 1.8e-6.
// That moves the rounding of about 1 result in 1000 by one bfloat16 ulp; it
// costs 26 instead of 38 vector operations an element (BERT's erf GELU in
// bfloat16 ran at 0.4-0.6x PyTorch CPU). Near 0 (|u| < 0.5) this form is
// good to ~1 float32 ulp: far below bfloat16's rounding.
TRN_SC_INLINE float trn_sc_erfcx_over_t_bf16(float t) {
    float p = 8.593700081e-02f;
    p = fmaf(p, t, -3.488109410e-01f);
    p = fmaf(p, t, 3.782247901e-01f);
    p = fmaf(p, t, 4.559050873e-02f);
    p = fmaf(p, t, 2.786573768e-01f);
    p = fmaf(p, t, 2.781051099e-01f);
    return fmaf(p, t, 2.822943330e-01f);
}
TRN_SC_INLINE float trn_sc_one_plus_erf_e_bf16(float u, float e) {
    const float t = 1.0f / fmaf(0.5f, fabsf(u), 1.0f);
    const float ec = t * trn_sc_erfcx_over_t_bf16(t) * e;
    return u < 0.0f ? ec : 2.0f - ec;
}
// ---- float32 / float16 GELU pieces ------------------------------------------
// e^a for a in [-inf, 0] or NaN (GELU's exp(-x^2 / 2)): trn_sc_expf's
// arithmetic without its upper clamp and NaN patch, which GELU does not need
// (a NaN x makes the result NaN through its other factors). Same bits as
// trn_sc_expf for every a <= 0.
// n <= 0 here, so 2^n is one factor 2^(n + 64) (normal for n >= -190) times
// the constant 2^-64: p 2^(n + 64) is exact (p is in [0.7, 1.5]), so the one
// rounding is the last product's, as in trn_sc_exp_clamped_f's
// (p s1) s2 - the same bits for 4 fewer integer operations.
TRN_SC_INLINE float trn_sc_exp_nonpos_f(float a) {
    int32_t ni;
    const float p = trn_sc_exp_reduced_f(a > -104.0f ? a : -104.0f, &ni);
    return p * trn_fp32_from_bits((uint32_t)(ni + 64 + 127) << 23) * 0x1p-64f;
}
// e^a for a <= 0, -inf or NaN (a softmax's score minus its row max, where a
// NaN score must stay NaN): trn_sc_exp_nonpos_f with trn_sc_expf's NaN
// patch: trn_sc_expf's bits without its upper clamp and two-factor scaling
// (about 8 fewer vector instructions). Bit-identical for every a <= 43,
// not only a <= 0 (2^(n + 64) stays normal up to n = 63).
TRN_SC_INLINE float trn_sc_exp_nonpos_nan_f(float a) {
    const float e = trn_sc_exp_nonpos_f(a);
    return a != a ? a : e;
}
// exp(-x^2 / 2) with the rounding of x^2 / 2 corrected: that rounding is
// 2^-24 of an argument of up to ~100, i.e. up to 6e-6 relative in e (4-15
// float ulp in GELU's negative tail); e (1 + err) with the exact residual
// err from one fma takes it back to ~1 ulp for two vector operations.
// |x| is clamped at 14.5 (e is 0 from 14.43 on) so that the residual stays
// finite for infinite or huge x; a NaN x gives 0 here and NaN from GELU's
// other factors.
TRN_SC_INLINE float trn_sc_exp_neg_half_sq_f(float x) {
    const float ax = fabsf(x);
    const float xc = ax < 14.5f ? ax : 14.5f;
    const float a = -0.5f * xc * xc;
    const float e = trn_sc_exp_nonpos_f(a);
    return fmaf(e, fmaf(-0.5f * xc, xc, -a), e);
}
// erf(u) / u for |u| < 0.5 as c0 + s R(s), s = u^2: c0 is 2 / sqrt(pi)
// rounded to float and R a degree-3 fit of the rest (absolute error of
// u (c0 + s R) against erf(u) below 3.5e-9 over |u| <= 0.5), so the
// coefficient's own rounding is absorbed instead of biasing every result.
// Five terms instead of the Taylor series' eight plus a scaling.
TRN_SC_INLINE float trn_sc_erf_over_x_fit(float s) {
    float p = 0.005117231737333065f;
    p = fmaf(p, s, -0.026984621702378756f);
    p = fmaf(p, s, 0.11287160969502548f);
    p = fmaf(p, s, -0.3761291732281876f);
    return fmaf(p, s, 1.128379225730896f);
}
// 1 + erf(u) for |u| >= 0.5 given e = exp(-u^2): erfc(|u|) = t P(t) e.
TRN_SC_INLINE float trn_sc_one_plus_erf_big(float u, float e) {
    const float t = 1.0f / fmaf(0.5f, fabsf(u), 1.0f);
    const float ec = t * trn_sc_erfcx_over_t(t) * e;
    return u < 0.0f ? ec : 2.0f - ec;
}
// GELU for float32 / float16 results. Below |u| = 0.5 the result is
// x/2 + (x/2 u) Q(u^2) in one fma (no separate 1 + erf rounding); above,
// x/2 (1 + erf(u)) from the erfc form. Against float64, over [-13, 8]:
// mean error 0.30 ulp on |x| < 0.7 (the Taylor form: 0.40, CPU: 0.38),
// ~1 ulp in the negative tail (was 4-15), the same elsewhere; ~20 % fewer
// vector operations than the Taylor form with trn_sc_expf.
// The two branches are separate functions so that a kernel may evaluate each
// only on the elements that take it (elementwise.c's blk_gelu_f packs the
// |u| >= 0.5 lanes together): the select below is the definition, and each
// branch is the same expression in both places, so the bits are the same.
TRN_SC_INLINE int trn_sc_gelu_f32_is_small(float x) {
    return fabsf(x * 0.70710678118654752f) < 0.5f;
}
TRN_SC_INLINE float trn_sc_gelu_f32_small(float x) {
    const float hx = 0.5f * x, u = x * 0.70710678118654752f;
    // x/2 (1 + erf(u)) has x's sign; copysign keeps x = -0's (-0 + +0 = +0).
    return copysignf(fmaf(hx * u, trn_sc_erf_over_x_fit(u * u), hx), x);
}
// e = exp(-x^2 / 2) (trn_sc_exp_neg_half_sq_f).
TRN_SC_INLINE float trn_sc_gelu_f32_big_e(float x, float e) {
    const float hx = 0.5f * x, u = x * 0.70710678118654752f;
    return hx * trn_sc_one_plus_erf_big(u, e);
}
TRN_SC_INLINE float trn_sc_gelu_f32_big(float x) {
    return trn_sc_gelu_f32_big_e(x, trn_sc_exp_neg_half_sq_f(x));
}
// e outside the select: with it inside, GCC masks the exponential's
// operations by the branch and the loop ran 25 % slower.
TRN_SC_INLINE float trn_sc_gelu_f32_form(float x) {
    const float e = trn_sc_exp_neg_half_sq_f(x);
    const float small = trn_sc_gelu_f32_small(x);
    return trn_sc_gelu_f32_is_small(x) ? small : trn_sc_gelu_f32_big_e(x, e);
}
// GELU for results stored in bfloat16. For |u| < 1 (|x| < 1.41, 84 % of a
// unit normal's values): x/2 + (x/2 u) Q(u^2), Q a degree-5 fit of
// erf(u) / u over u^2 in [0, 1] (error 1.2e-7 evaluated in float; in 1 +
// erf relative 8e-7 at u = -1 where it is 0.157, below the erfc form's
// 1.8e-6), 10 vector operations instead of 26. The eager kernel
// (ew_gelu.c) runs the erfc form only on the other lanes, packed; BERT's
// bfloat16 GELU ran at 0.65x PyTorch CPU.
TRN_SC_INLINE float trn_sc_gelu_bf16_small(float x) {
    const float hx = 0.5f * x, u = x * 0.70710678118654752f, s = u * u;
    float q = -5.660098977386951e-04f;
    q = fmaf(q, s, 4.924775566905737e-03f);
    q = fmaf(q, s, -2.6717694476246834e-02f);
    q = fmaf(q, s, 1.12804114818573e-01f);
    q = fmaf(q, s, -3.761235475540161e-01f);
    q = fmaf(q, s, 1.1283791065216064f);
    return copysignf(fmaf(hx * u, q, hx), x);
}
TRN_SC_INLINE int trn_sc_gelu_bf16_is_small(float x) {
    return fabsf(x * 0.70710678118654752f) < 1.0f;
}
TRN_SC_INLINE float trn_sc_gelu_bf16_big(float x) {
    return 0.5f * x *
           trn_sc_one_plus_erf_e_bf16(x * 0.70710678118654752f, trn_sc_exp_nonpos_f(-0.5f * x * x));
}
TRN_SC_INLINE float trn_sc_gelu_bf16_form(float x) {
    const float big = trn_sc_gelu_bf16_big(x), small = trn_sc_gelu_bf16_small(x);
    return trn_sc_gelu_bf16_is_small(x) ? small : big;
}
TRN_SC_INLINE float trn_sc_gelu_backward_f32_form(float a, float b) {
    const float u = b * 0.70710678118654752f;
    const float e = trn_sc_exp_neg_half_sq_f(b);
    const float small = fmaf(u, trn_sc_erf_over_x_fit(u * u), 1.0f);
    const float cdf2 = fabsf(u) < 0.5f ? small : trn_sc_one_plus_erf_big(u, e);
    return a * (0.5f * cdf2 + b * 0.39894228040143268f * e);
}

// ---- float family ----------------------------------------------------------
// Rounds to the 16-bit storage type where ATen's CPU kernel computes a step
// in that type (its Vectorized<Half/BFloat16> ops round after every op), so
// results match it; a no-op for float32 storage.
TRN_SC_INLINE float trn_sc_r16(float x, const trn_sc_ctx *c) {
    const float h = trn_half_to_float(trn_float_to_half(x));
    const float b = trn_bf16_to_float(trn_float_to_bf16(x));
    return c->round16 == 1 ? h : (c->round16 == 2 ? b : x);
}

#define TRN_SC_F1(name, expr)                                                                      \
    TRN_SC_INLINE float trn_sc_##name##_f(float x, const trn_sc_ctx *c) {                          \
        TRN_SC_UNUSED(c);                                                                          \
        return (expr);                                                                             \
    }
#define TRN_SC_F2(name, expr)                                                                      \
    TRN_SC_INLINE float trn_sc_##name##_f(float a, float b, const trn_sc_ctx *c) {                 \
        TRN_SC_UNUSED(c);                                                                          \
        return (expr);                                                                             \
    }

TRN_SC_F1(abs, fabsf(x))
TRN_SC_F1(neg, -x)
// ATen's (0 < x) - (x < 0): +0 for both zeros and for NaN.
TRN_SC_F1(sign, (float)((x > 0.0f) - (x < 0.0f)))
TRN_SC_F1(relu, x > 0.0f ? x : (x != x ? x : 0.0f))
TRN_SC_F1(floor, floorf(x))
TRN_SC_F1(ceil, ceilf(x))
TRN_SC_F1(round, nearbyintf(x))
TRN_SC_F1(trunc, truncf(x))
TRN_SC_F1(frac, x - truncf(x))
TRN_SC_F1(sqrt, sqrtf(x))
TRN_SC_F1(rsqrt, 1.0f / sqrtf(x))
TRN_SC_F1(reciprocal, 1.0f / x)
TRN_SC_F1(hardsigmoid, x <= -3.0f ? 0.0f : (x >= 3.0f ? 1.0f : x / 6.0f + 0.5f))
// ATen's x * min(max(x + 3, 0), 6) / 6 (so -inf gives NaN, as -inf * 0).
TRN_SC_INLINE float trn_sc_hardswish_f(float x, const trn_sc_ctx *c) {
    TRN_SC_UNUSED(c);
    float t = x + 3.0f;
    t = t > 0.0f ? t : 0.0f;
    t = t < 6.0f ? t : 6.0f;
    return x * t / 6.0f;
}
TRN_SC_F1(leaky_relu, x > 0.0f ? x : x * (float)c->p[0])
TRN_SC_F1(hardtanh, x < (float)c->p[0] ? (float)c->p[0] : (x > (float)c->p[1] ? (float)c->p[1] : x))
TRN_SC_F1(exp, trn_sc_expf(x))
TRN_SC_F1(exp2, (float)trn_sc_exp_d((double)x * 0.6931471805599453))
TRN_SC_F1(expm1, (float)trn_sc_expm1_d(x))
TRN_SC_F1(log, (float)trn_sc_log_d(x))
TRN_SC_F1(log2, (float)(trn_sc_log_d(x) * 1.4426950408889634))
TRN_SC_F1(log10, (float)(trn_sc_log_d(x) * 0.4342944819032518))
TRN_SC_F1(atan, (float)trn_sc_atan_d(x))
TRN_SC_F1(erf, trn_sc_erff(x))
TRN_SC_F1(erfc, (float)trn_sc_erfc_d(x))
// Giles' approximation (a few float ulp: 2.2 at most, a mean 3x CPU's) and
// one Newton step on trn_sc_erf_f32_d (its 1e-9 is ample: the residual it
// forms is ~1e-7 of erf), which squares the relative error (~1e-7) away. +-inf (|y| = 1) and NaN skip the step (it would be 0 / 0).
TRN_SC_INLINE float trn_sc_erfinv_f32(float y) {
    const double x = trn_sc_erfinv_d(y);
    // 1 / erf'(x) = sqrt(pi) / 2 e^(x^2) needs float accuracy only (it scales
    // a step of 1e-7 relative); |x| < 4 for every |y| < 1 in float.
    const float xc = fabs(x) < 4.0 ? (float)x : 4.0f;
    const double slope = 0.88622692545275801 * trn_sc_expf(xc * xc);
    const double step = (trn_sc_erf_f32_d(x) - y) * slope;
    return (float)(fabs(x) < 6.0 ? x - step : x);
}
TRN_SC_F1(erfinv, trn_sc_erfinv_f32(x))

TRN_SC_INLINE float trn_sc_nan_to_num_f(float x, const trn_sc_ctx *c) {
    float r = x != x ? (float)c->p[0] : x;
    r = x == INFINITY ? (float)c->p[1] : r;
    return x == -INFINITY ? (float)c->p[2] : r;
}

TRN_SC_INLINE float trn_sc_log1p_f(float x, const trn_sc_ctx *c) {
    TRN_SC_UNUSED(c);
    // u = 1 + x rounds; log(u) * x / (u - 1) corrects the rounding.
    const double u = 1.0 + (double)x;
    const double d = u - 1.0;
    const double r = d == 0.0 ? (double)x : trn_sc_log_d(u) * ((double)x / (d == 0.0 ? 1.0 : d));
    return (float)(x == INFINITY ? (double)INFINITY : r);
}

TRN_SC_INLINE float trn_sc_sin_f(float x, const trn_sc_ctx *c) {
    TRN_SC_UNUSED(c);
    double s, co;
    trn_sc_sincos_d(x, &s, &co);
    return (float)s;
}
TRN_SC_INLINE float trn_sc_cos_f(float x, const trn_sc_ctx *c) {
    TRN_SC_UNUSED(c);
    double s, co;
    trn_sc_sincos_d(x, &s, &co);
    return (float)co;
}
TRN_SC_INLINE float trn_sc_tan_f(float x, const trn_sc_ctx *c) {
    TRN_SC_UNUSED(c);
    double s, co;
    trn_sc_sincos_d(x, &s, &co);
    return (float)(s / co);
}
TRN_SC_INLINE float trn_sc_asin_f(float x, const trn_sc_ctx *c) {
    TRN_SC_UNUSED(c);
    const double d = x;
    return (float)trn_sc_atan_d(d / sqrt((1.0 - d) * (1.0 + d)));
}
TRN_SC_INLINE float trn_sc_acos_f(float x, const trn_sc_ctx *c) {
    TRN_SC_UNUSED(c);
    // 2 atan(sqrt((1-x)/(1+x))) keeps full relative accuracy near x = 1.
    const double d = x;
    const double r = 2.0 * trn_sc_atan_pos_d(sqrt((1.0 - d) / (1.0 + d)));
    return (float)(d == -1.0 ? 3.141592653589793 : r);
}
TRN_SC_INLINE float trn_sc_sinh_f(float x, const trn_sc_ctx *c) {
    TRN_SC_UNUSED(c);
    const double d = x;
    const double e = trn_sc_exp_d(fabs(d));
    const double big = copysign(0.5 * (e - 1.0 / e), d);
    const double em1 = trn_sc_expm1_d(fabs(d));
    const double mid = copysign(0.5 * (em1 + em1 / (em1 + 1.0)), d);
    return (float)(fabs(d) < 1.0 ? mid : big);
}
TRN_SC_INLINE float trn_sc_cosh_f(float x, const trn_sc_ctx *c) {
    TRN_SC_UNUSED(c);
    const double e = trn_sc_exp_d(fabs((double)x));
    return (float)(0.5 * (e + 1.0 / e));
}
TRN_SC_INLINE double trn_sc_tanh_d(double d) {
    const double dc = d > 20.0 ? 20.0 : (d < -20.0 ? -20.0 : d);
    const double e = trn_sc_expm1_d(2.0 * dc);
    return e / (e + 2.0);
}
TRN_SC_F1(tanh, trn_sc_tanhf(x))
// As ATen's vectorized sigmoid and silu: 1 / (1 + e^-x), x / (1 + e^-x),
// for x >= -43, with e^-x from trn_sc_exp_nonpos_nan_f (trn_sc_expf's bits
// for arguments up to 43, ~8 fewer vector operations: silu and sigmoid ran
// at 0.84x PyTorch CPU's speed). Below -43, 1 + e^-x rounds to e^-x
// (> 2^62), so the results are e^x and x e^x, with e^x from the same call:
// nonzero down to the subnormals, where 1 / (1 + e^-x) gave 0 from x = -88.7
// on (e^-x overflowed; CPU's still does). x e^x carries the absolute error
// of a subnormal e^x (below x = -87.3) times |x|. NaN stays NaN; x = -inf
// gives 0 and NaN as before.
TRN_SC_INLINE float trn_sc_sigmoid_e_f(float x) {
    return trn_sc_exp_nonpos_nan_f(x < -43.0f ? x : -x);
}
TRN_SC_INLINE float trn_sc_sigmoid_f(float x, const trn_sc_ctx *c) {
    TRN_SC_UNUSED(c);
    const float e = trn_sc_sigmoid_e_f(x);
    return x < -43.0f ? e : 1.0f / (1.0f + e);
}
TRN_SC_INLINE float trn_sc_silu_f(float x, const trn_sc_ctx *c) {
    TRN_SC_UNUSED(c);
    const float e = trn_sc_sigmoid_e_f(x);
    return x < -43.0f ? x * e : x / (1.0f + e);
}

TRN_SC_INLINE float trn_sc_logit_f(float x, const trn_sc_ctx *c) {
    // p0 >= 0: clamp to [eps, 1 - eps] first; p0 < 0: no eps.
    double d = x;
    const double eps = c->p[0];
    d = eps >= 0.0 ? (d < eps ? eps : (d > 1.0 - eps ? 1.0 - eps : d)) : d;
    const float xf = trn_sc_r16((float)d, c);
    const float ratio = trn_sc_r16(xf / trn_sc_r16(1.0f - xf, c), c);
    return (float)trn_sc_log_d(ratio);
}

// gelu(x) = x/2 (1 + erf(x/sqrt2)); tanh form: x/2 (1 + tanh(sqrt(2/pi)(x + 0.044715 x^3))).
// 1 + erf and 1 + tanh are formed without cancellation for negative x
// (erfc, and 1 + tanh(y) = 2 / (1 + e^-2y)), so the tails are accurate.
TRN_SC_F1(gelu, (c)->round16 == 2 ? trn_sc_gelu_bf16_form(x) : trn_sc_gelu_f32_form(x))
TRN_SC_F1(gelu_tanh,
          x / (1.0f + trn_sc_expf(-1.59576912160573072f * fmaf(0.044715f * x * x, x, x))))

TRN_SC_INLINE double trn_sc_softplus_d(double d, double beta, double threshold) {
    const double z = d * beta;
    const double ez = trn_sc_exp_d(z > threshold ? 0.0 : z);
    // log1p(ez) via the same rounding correction as trn_sc_log1p_f.
    const double u = 1.0 + ez;
    const double du = u - 1.0;
    const double l = du == 0.0 ? ez : trn_sc_log_d(u) * (ez / (du == 0.0 ? 1.0 : du));
    return z > threshold ? d : l / beta;
}
TRN_SC_F1(softplus, (float)trn_sc_softplus_d(x, c->p[0], c->p[1]))
// mish(x) = x tanh(softplus(x)) (beta 1, threshold 20).
// At -inf softplus is 0 and the product NaN (-inf * 0), as ATen's formula.
TRN_SC_F1(mish,
          (float)((double)x *trn_sc_tanh_d(x == -INFINITY ? 0.0 : trn_sc_softplus_d(x, 1.0, 20.0))))
// elu: x > 0 ? scale x : scale alpha (e^{x input_scale} - 1); p = alpha, scale, input_scale.
TRN_SC_F1(elu, (float)(x > 0.0f ? c->p[1] * (double)x
                                : c->p[1] * c->p[0] * trn_sc_expm1_d((double)x * c->p[2])))

TRN_SC_INLINE float trn_sc_round_decimals_f(float x, const trn_sc_ctx *c) {
    // p0 = 10^|decimals|, p1 = 1 when decimals < 0 (as ATen's round_decimals).
    const float ten = (float)c->p[0];
    return c->p[1] != 0.0 ? nearbyintf(x / ten) * ten : nearbyintf(x * ten) / ten;
}

// Fused like ATen's vectorized float add (fmadd(b, alpha, a)); its 16-bit
// float path rounds alpha * b to the 16-bit type before adding.
TRN_SC_F2(add, c->round16 ? a + trn_sc_r16((float)c->p[0] * b, c) : fmaf((float)c->p[0], b, a))
TRN_SC_F2(sub, c->round16 ? a - trn_sc_r16((float)c->p[0] * b, c) : fmaf(-(float)c->p[0], b, a))
TRN_SC_F2(mul, a *b)
TRN_SC_F2(div, a / b)
TRN_SC_F2(div_trunc, truncf(trn_sc_r16(a / b, c)))
TRN_SC_F2(fmod, fmodf(a, b))
TRN_SC_F2(maximum, (a != a || b != b) ? a + b : (a < b ? b : a))
TRN_SC_F2(minimum, (a != a || b != b) ? a + b : (b < a ? b : a))
TRN_SC_F2(fmax, a != a ? b : (b != b ? a : (a < b ? b : a)))
TRN_SC_F2(fmin, a != a ? b : (b != b ? a : (b < a ? b : a)))
TRN_SC_F2(copysign, copysignf(a, b))
TRN_SC_F2(atan2, (float)trn_sc_atan2_d(a, b))
TRN_SC_F2(hypot, (fabsf(a) == INFINITY || fabsf(b) == INFINITY)
                     ? INFINITY
                     : (float)sqrt((double)a *a + (double)b * b))

// Python's %: the result takes the sign of the divisor (ATen's remainder).
TRN_SC_INLINE float trn_sc_remainder_f(float a, float b, const trn_sc_ctx *c) {
    TRN_SC_UNUSED(c);
    float m = fmodf(a, b);
    return (m != 0.0f && ((b < 0.0f) != (m < 0.0f))) ? m + b : m;
}

// ATen's div_floor_floating, step for step.
TRN_SC_INLINE float trn_sc_div_floor_f(float a, float b, const trn_sc_ctx *c) {
    const float mod = fmodf(a, b);
    float div = trn_sc_r16(trn_sc_r16(a - mod, c) / b, c);
    div = (mod != 0.0f && ((b < 0.0f) != (mod < 0.0f))) ? div - 1.0f : div;
    float fl = floorf(div);
    fl = (div - fl > 0.5f) ? fl + 1.0f : fl;
    const float r = div != 0.0f ? fl : copysignf(0.0f, a / b);
    return b == 0.0f ? a / b : r;
}

// pow through exp(b log|a|) in double, with C99's special cases. Zero and
// infinite a or b mostly fall out of the main path (log 0 = -inf, exp's
// clamp overflows the float result to inf or underflows it to 0), so only
// a few selects remain, none on b alone: a select of b's sign or parity
// between per-element values kept every pow loop scalar (20 ns an element,
// 16x CPU's).
TRN_SC_INLINE double trn_sc_pow_d(double a, double b) {
    const double ab = fabs(a);
    const int b_int = nearbyint(b) == b;
    // Odd: b / 2 (exact below 2^53) is not an integer.
    const double half_b = b * 0.5;
    const int b_odd = b_int & (fabs(b) < 0x1p53) & (nearbyint(half_b) != half_b);
    const int a_neg = (int)(trn_sc_dbits(a) >> 63);  // -0 too: pow(-0, 3) = -0
    double r = trn_sc_exp_d(b * trn_sc_log_d(ab));
    r = a_neg & b_odd ? -r : r;
    r = (a < 0.0) & (a != -INFINITY) & !b_int & (fabs(b) != INFINITY) ? NAN : r;
    r = (ab == 1.0) & (fabs(b) == INFINITY) ? 1.0 : r;
    r = trn_sc_isnan(a) | trn_sc_isnan(b) ? a + b : r;
    r = (b == 0.0) | (a == 1.0) ? 1.0 : r;
    return r;
}
TRN_SC_F2(pow, (float)trn_sc_pow_d(a, b))

// pow by a constant exponent: ATen's CPU kernel (pow_tensor_scalar_optimized)
// turns these exponents into multiplies / roots, so do we - same numerics
// and ~20x faster than the exp(b log|a|) path. A 16-bit type rounds after
// each multiply, as c10::Half / BFloat16 arithmetic does.
TRN_SC_F1(pow_square, x *x)
TRN_SC_F1(pow_one, x)  // ATen copies for exponent 1 (pow's backward asks for it)
// and fills ones for exponent 0, NaN included
TRN_SC_INLINE float trn_sc_pow_zero_f(float x, const trn_sc_ctx *c) {
    TRN_SC_UNUSED(x);
    TRN_SC_UNUSED(c);
    return 1.0f;
}
TRN_SC_INLINE float trn_sc_pow_cube_f(float x, const trn_sc_ctx *c) {
    return trn_sc_r16(x * x, c) * x;
}
TRN_SC_INLINE float trn_sc_pow_inv_square_f(float x, const trn_sc_ctx *c) {
    return 1.0f / trn_sc_r16(x * x, c);
}

// Which exponents of pow(x, e) by a scalar or literal e run as ATen CPU's
// special cases (x*x, x*x*x, sqrt, 1/x, ...) instead of the general
// exp(e log|x|) path. One answer for the eager kernel (elementwise.c's
// pow_fast_path) and compiled graphs (the renderer), so both give the same
// bits.
typedef enum trn_sc_pow_special {
    TRN_SC_POW_GENERAL = 0,  // no special case
    TRN_SC_POW_ONE,
    TRN_SC_POW_ZERO,
    TRN_SC_POW_SQUARE,
    TRN_SC_POW_CUBE,
    TRN_SC_POW_SQRT,
    TRN_SC_POW_RSQRT,
    TRN_SC_POW_RECIPROCAL,
    TRN_SC_POW_INV_SQUARE,
    TRN_SC_POW_SPECIAL_COUNT,
} trn_sc_pow_special;

// `half`: computed for float16 storage. ATen computes float16 with std::pow
// for every exponent, so only the cases that are one correctly rounded float
// operation (x*x, 1/x, and the trivial 1 and 0) round identically there.
static inline trn_sc_pow_special trn_sc_pow_special_of(double e, int half) {
    if (e == 1.0) return TRN_SC_POW_ONE;
    if (e == 0.0) return TRN_SC_POW_ZERO;
    if (e == 2.0) return TRN_SC_POW_SQUARE;
    if (e == -1.0) return TRN_SC_POW_RECIPROCAL;
    if (half) return TRN_SC_POW_GENERAL;
    if (e == 3.0) return TRN_SC_POW_CUBE;
    if (e == 0.5) return TRN_SC_POW_SQRT;
    if (e == -0.5) return TRN_SC_POW_RSQRT;
    if (e == -2.0) return TRN_SC_POW_INV_SQUARE;
    return TRN_SC_POW_GENERAL;
}

// The <name> of each case's trn_sc_<name>_f function (and the eager
// kernel's blk_<name>_* block functions).
static inline const char *trn_sc_pow_special_name(trn_sc_pow_special s) {
    switch (s) {
    case TRN_SC_POW_ONE: return "pow_one";
    case TRN_SC_POW_ZERO: return "pow_zero";
    case TRN_SC_POW_SQUARE: return "pow_square";
    case TRN_SC_POW_CUBE: return "pow_cube";
    case TRN_SC_POW_SQRT: return "sqrt";
    case TRN_SC_POW_RSQRT: return "rsqrt";
    case TRN_SC_POW_RECIPROCAL: return "reciprocal";
    case TRN_SC_POW_INV_SQUARE: return "pow_inv_square";
    default: return "pow";
    }
}

// Predicates.
#define TRN_SC_FP(name, expr)                                                                      \
    TRN_SC_INLINE int trn_sc_##name##_fp(float a, float b) { return (expr); }
TRN_SC_FP(eq, a == b)
TRN_SC_FP(ne, a != b)
TRN_SC_FP(lt, a < b)
TRN_SC_FP(le, a <= b)
TRN_SC_FP(gt, a > b)
TRN_SC_FP(ge, a >= b)
TRN_SC_FP(logical_and, (a != 0.0f) & (b != 0.0f))
TRN_SC_FP(logical_or, (a != 0.0f) | (b != 0.0f))
TRN_SC_FP(logical_xor, (a != 0.0f) ^ (b != 0.0f))
TRN_SC_INLINE int trn_sc_logical_not_fp(float a) { return a == 0.0f; }
TRN_SC_INLINE int trn_sc_isnan_fp(float a) { return a != a; }
TRN_SC_INLINE int trn_sc_isinf_fp(float a) { return fabsf(a) == INFINITY; }
TRN_SC_INLINE int trn_sc_isposinf_fp(float a) { return a == INFINITY; }
TRN_SC_INLINE int trn_sc_isneginf_fp(float a) { return a == -INFINITY; }
TRN_SC_INLINE int trn_sc_isfinite_fp(float a) { return fabsf(a) < INFINITY; }

// Ternary.
TRN_SC_INLINE float trn_sc_where_f(float cond, float a, float b, const trn_sc_ctx *c) {
    TRN_SC_UNUSED(c);
    return cond != 0.0f ? a : b;
}
// clamp: p0/p1 != 0 when the lower/upper bound is present; NaN propagates
// from x and from either bound (ATen: min(max(x, lo), hi) with NaN checks).
TRN_SC_INLINE float trn_sc_clamp_f(float x, float lo, float hi, const trn_sc_ctx *c) {
    float r = x;
    r = (c->p[0] != 0.0 && (lo != lo || r < lo)) ? lo : r;
    r = (c->p[1] != 0.0 && (hi != hi || r > hi)) ? hi : r;
    return x != x ? x : r;
}
// ATen's lerp: weight < 0.5 ? start + w (end - start) : end - (end - start)(1 - w).
TRN_SC_INLINE float trn_sc_lerp_f(float s, float e, float w, const trn_sc_ctx *c) {
    TRN_SC_UNUSED(c);
    const float d = e - s;
    return fabsf(w) < 0.5f ? s + w * d : e - d * (1.0f - w);
}
TRN_SC_INLINE float trn_sc_addcmul_f(float x, float a, float b, const trn_sc_ctx *c) {
    return x + (float)c->p[0] * a * b;
}
TRN_SC_INLINE float trn_sc_addcdiv_f(float x, float a, float b, const trn_sc_ctx *c) {
    return x + (float)c->p[0] * (a / b);
}

// ---- activation backward: (grad, x) -> grad * d act / dx (ATen's formulas) --
// sigmoid/tanh backward take the forward's output y instead of x.
TRN_SC_F2(threshold_backward, b <= (float)c->p[0] ? 0.0f : a)
TRN_SC_F2(sigmoid_backward, a *(1.0f - b) * b)
TRN_SC_F2(tanh_backward, a *(1.0f - b * b))
TRN_SC_F2(hardtanh_backward, (b <= (float)c->p[0] || b >= (float)c->p[1]) ? 0.0f : a)
TRN_SC_F2(leaky_relu_backward, b > 0.0f ? a : a * (float)c->p[0])
TRN_SC_F2(hardsigmoid_backward, (b > -3.0f && b < 3.0f) ? a / 6.0f : 0.0f)
TRN_SC_F2(hardswish_backward, b < -3.0f ? 0.0f : (b <= 3.0f ? a * (b / 3.0f + 0.5f) : a))
// d gelu = cdf(x) + x pdf(x). One exponential, exp(-x^2/2), serves the pdf
// and the erfc of the cdf's tails.
TRN_SC_INLINE float trn_sc_gelu_backward_f(float a, float b, const trn_sc_ctx *c) {
    // round16 is a constant in every loop copy and in generated code, so
    // only one form is left in each (fused and unfused stay bit-identical).
    const float e = trn_sc_exp_nonpos_f(-0.5f * b * b);
    const float cdf2 = trn_sc_one_plus_erf_e_bf16(b * 0.70710678118654752f, e);
    return c->round16 == 2 ? a * (0.5f * cdf2 + b * 0.39894228040143268f * e)
                           : trn_sc_gelu_backward_f32_form(a, b);
}
TRN_SC_INLINE float trn_sc_gelu_tanh_backward_f(float a, float b, const trn_sc_ctx *c) {
    TRN_SC_UNUSED(c);
    const float kb = 0.79788456080286536f, kk = 0.044715f;
    const float x2 = b * b;
    const float t = trn_sc_tanhf(kb * (b + kk * x2 * b));
    const float left_d = 0.5f * (1.0f + t);
    const float right_d = 0.5f * b * (1.0f - t * t) * kb * (1.0f + 3.0f * kk * x2);
    return a * (left_d + right_d);
}
TRN_SC_INLINE float trn_sc_silu_backward_f(float a, float b, const trn_sc_ctx *c) {
    TRN_SC_UNUSED(c);
    const float s = trn_sc_sigmoid_f(b, c);
    return a * s * (1.0f + b * (1.0f - s));
}
// p0 alpha, p1 scale, p2 input_scale, p3 != 0: b is the forward's result.
TRN_SC_INLINE float trn_sc_elu_backward_f(float a, float b, const trn_sc_ctx *c) {
    const float negcoef = (float)(c->p[0] * c->p[1]), poscoef = (float)c->p[1];
    const float negiptcoef = (float)c->p[2];
    const float neg = c->p[3] != 0.0 ? a * negiptcoef * (b + negcoef)
                                     : a * negiptcoef * negcoef * trn_sc_expf(b * negiptcoef);
    return b <= 0.0f ? neg : a * poscoef;
}
// p0 beta, p1 threshold.
TRN_SC_INLINE float trn_sc_softplus_backward_f(float a, float b, const trn_sc_ctx *c) {
    const float z = trn_sc_expf(b * (float)c->p[0]);
    return b * (float)c->p[0] > (float)c->p[1] ? a : a * z / (z + 1.0f);
}
TRN_SC_INLINE float trn_sc_mish_backward_f(float a, float b, const trn_sc_ctx *c) {
    TRN_SC_UNUSED(c);
    const float s = 1.0f / (1.0f + trn_sc_expf(-b));
    const float t = (float)trn_sc_tanh_d(trn_sc_softplus_d(b, 1.0, 20.0));
    return a * (t + b * s * (1.0f - t * t));
}

// ---- double family (float64 computed natively, with libm) -------------------
#define TRN_SC_D1(name, expr)                                                                      \
    TRN_SC_INLINE double trn_sc_##name##_dd(double x, const trn_sc_ctx *c) {                       \
        TRN_SC_UNUSED(c);                                                                          \
        return (expr);                                                                             \
    }
#define TRN_SC_D2(name, expr)                                                                      \
    TRN_SC_INLINE double trn_sc_##name##_dd(double a, double b, const trn_sc_ctx *c) {             \
        TRN_SC_UNUSED(c);                                                                          \
        return (expr);                                                                             \
    }
TRN_SC_D1(abs, fabs(x))
TRN_SC_D1(neg, -x)
TRN_SC_D1(sign, (double)((x > 0.0) - (x < 0.0)))  // as the float family
TRN_SC_D1(relu, x > 0.0 ? x : (x != x ? x : 0.0))
TRN_SC_D1(floor, floor(x))
TRN_SC_D1(ceil, ceil(x))
TRN_SC_D1(round, nearbyint(x))
TRN_SC_D1(trunc, trunc(x))
TRN_SC_D1(frac, x - trunc(x))
TRN_SC_D1(sqrt, sqrt(x))
TRN_SC_D1(rsqrt, 1.0 / sqrt(x))
TRN_SC_D1(reciprocal, 1.0 / x)
TRN_SC_D1(hardsigmoid, x <= -3.0 ? 0.0 : (x >= 3.0 ? 1.0 : x / 6.0 + 0.5))
TRN_SC_D1(hardswish, x *(x + 3.0 > 0.0 ? (x + 3.0 < 6.0 ? x + 3.0 : 6.0) : 0.0) / 6.0)
TRN_SC_D1(leaky_relu, x > 0.0 ? x : x * c->p[0])
TRN_SC_D1(hardtanh, x < c->p[0] ? c->p[0] : (x > c->p[1] ? c->p[1] : x))
TRN_SC_D1(exp, exp(x))
TRN_SC_D1(exp2, exp2(x))
TRN_SC_D1(expm1, expm1(x))
TRN_SC_D1(log, log(x))
TRN_SC_D1(log2, log2(x))
TRN_SC_D1(log10, log10(x))
TRN_SC_D1(log1p, log1p(x))
TRN_SC_D1(sin, sin(x))
TRN_SC_D1(cos, cos(x))
TRN_SC_D1(tan, tan(x))
TRN_SC_D1(asin, asin(x))
TRN_SC_D1(acos, acos(x))
TRN_SC_D1(atan, atan(x))
TRN_SC_D1(sinh, sinh(x))
TRN_SC_D1(cosh, cosh(x))
TRN_SC_D1(tanh, tanh(x))
TRN_SC_D1(sigmoid, 1.0 / (1.0 + exp(-x)))
TRN_SC_D1(silu, x / (1.0 + exp(-x)))
TRN_SC_D1(erf, erf(x))
TRN_SC_D1(erfc, erfc(x))
TRN_SC_D1(gelu, 0.5 * x * (1.0 + erf(x * 0.7071067811865476)))
TRN_SC_D1(gelu_tanh, 0.5 * x * (1.0 + tanh(0.7978845608028654 * (x + 0.044715 * x * x * x))))
TRN_SC_D1(softplus, x * c->p[0] > c->p[1] ? x : log1p(exp(x * c->p[0])) / c->p[0])
TRN_SC_D1(mish, x *tanh(x > 20.0 ? x : log1p(exp(x))))
TRN_SC_D1(elu, x > 0.0 ? c->p[1] * x : c->p[1] * c->p[0] * expm1(x * c->p[2]))

TRN_SC_INLINE double trn_sc_nan_to_num_dd(double x, const trn_sc_ctx *c) {
    double r = x != x ? c->p[0] : x;
    r = x == INFINITY ? c->p[1] : r;
    return x == -INFINITY ? c->p[2] : r;
}
TRN_SC_INLINE double trn_sc_logit_dd(double x, const trn_sc_ctx *c) {
    const double eps = c->p[0];
    const double d = eps >= 0.0 ? (x < eps ? eps : (x > 1.0 - eps ? 1.0 - eps : x)) : x;
    return log(d / (1.0 - d));
}
TRN_SC_INLINE double trn_sc_erfinv_dd(double y, const trn_sc_ctx *c) {
    TRN_SC_UNUSED(c);
    double x = trn_sc_erfinv_d(y);
    // Two more Newton steps on libm's erf for full double precision.
    for (int i = 0; i < 2; i++) {
        const double ok = fabs(x) < 6.0;
        const double step = (erf(x) - y) / (1.1283791670955126 * exp(-x * x));
        x = ok != 0.0 ? x - step : x;
    }
    return x;
}
TRN_SC_INLINE double trn_sc_round_decimals_dd(double x, const trn_sc_ctx *c) {
    const double ten = c->p[0];
    return c->p[1] != 0.0 ? nearbyint(x / ten) * ten : nearbyint(x * ten) / ten;
}

TRN_SC_D2(add, a + c->p[0] * b)
TRN_SC_D2(sub, a - c->p[0] * b)
TRN_SC_D2(mul, a *b)
TRN_SC_D2(div, a / b)
TRN_SC_D2(div_trunc, trunc(a / b))
TRN_SC_D2(fmod, fmod(a, b))
TRN_SC_D2(maximum, (a != a || b != b) ? a + b : (a < b ? b : a))
TRN_SC_D2(minimum, (a != a || b != b) ? a + b : (b < a ? b : a))
TRN_SC_D2(fmax, a != a ? b : (b != b ? a : (a < b ? b : a)))
TRN_SC_D2(fmin, a != a ? b : (b != b ? a : (b < a ? b : a)))
TRN_SC_D2(copysign, copysign(a, b))
TRN_SC_D2(atan2, atan2(a, b))
TRN_SC_D2(hypot, hypot(a, b))
TRN_SC_D2(pow, pow(a, b))
TRN_SC_D1(pow_square, x *x)
TRN_SC_D1(pow_one, x)
TRN_SC_INLINE double trn_sc_pow_zero_dd(double x, const trn_sc_ctx *c) {
    TRN_SC_UNUSED(x);
    TRN_SC_UNUSED(c);
    return 1.0;
}
TRN_SC_D1(pow_cube, x *x *x)
TRN_SC_D1(pow_inv_square, 1.0 / (x * x))
TRN_SC_D2(threshold_backward, b <= c->p[0] ? 0.0 : a)
TRN_SC_D2(sigmoid_backward, a *(1.0 - b) * b)
TRN_SC_D2(tanh_backward, a *(1.0 - b * b))
TRN_SC_D2(hardtanh_backward, (b <= c->p[0] || b >= c->p[1]) ? 0.0 : a)
TRN_SC_D2(leaky_relu_backward, b > 0.0 ? a : a * c->p[0])
TRN_SC_D2(hardsigmoid_backward, (b > -3.0 && b < 3.0) ? a / 6.0 : 0.0)
TRN_SC_D2(hardswish_backward, b < -3.0 ? 0.0 : (b <= 3.0 ? a * (b / 3.0 + 0.5) : a))
TRN_SC_D2(gelu_backward, a *(0.5 * (1.0 + erf(b * 0.7071067811865476)) +
                             b * 0.3989422804014327 * exp(-0.5 * b * b)))
TRN_SC_INLINE double trn_sc_gelu_tanh_backward_dd(double a, double b, const trn_sc_ctx *c) {
    TRN_SC_UNUSED(c);
    const double kb = 0.7978845608028654, kk = 0.044715;
    const double x2 = b * b;
    const double t = tanh(kb * (b + kk * x2 * b));
    return a * (0.5 * (1.0 + t) + 0.5 * b * (1.0 - t * t) * kb * (1.0 + 3.0 * kk * x2));
}
TRN_SC_INLINE double trn_sc_silu_backward_dd(double a, double b, const trn_sc_ctx *c) {
    TRN_SC_UNUSED(c);
    const double s = 1.0 / (1.0 + exp(-b));
    return a * s * (1.0 + b * (1.0 - s));
}
TRN_SC_INLINE double trn_sc_elu_backward_dd(double a, double b, const trn_sc_ctx *c) {
    const double negcoef = c->p[0] * c->p[1], poscoef = c->p[1], negiptcoef = c->p[2];
    const double neg = c->p[3] != 0.0 ? a * negiptcoef * (b + negcoef)
                                      : a * negiptcoef * negcoef * exp(b * negiptcoef);
    return b <= 0.0 ? neg : a * poscoef;
}
TRN_SC_INLINE double trn_sc_softplus_backward_dd(double a, double b, const trn_sc_ctx *c) {
    const double z = exp(b * c->p[0]);
    return b * c->p[0] > c->p[1] ? a : a * z / (z + 1.0);
}
TRN_SC_INLINE double trn_sc_mish_backward_dd(double a, double b, const trn_sc_ctx *c) {
    TRN_SC_UNUSED(c);
    const double s = 1.0 / (1.0 + exp(-b));
    const double t = tanh(b > 20.0 ? b : log1p(exp(b)));
    return a * (t + b * s * (1.0 - t * t));
}
TRN_SC_INLINE double trn_sc_remainder_dd(double a, double b, const trn_sc_ctx *c) {
    TRN_SC_UNUSED(c);
    double m = fmod(a, b);
    return (m != 0.0 && ((b < 0.0) != (m < 0.0))) ? m + b : m;
}
TRN_SC_INLINE double trn_sc_div_floor_dd(double a, double b, const trn_sc_ctx *c) {
    TRN_SC_UNUSED(c);
    const double mod = fmod(a, b);
    double div = (a - mod) / b;
    div = (mod != 0.0 && ((b < 0.0) != (mod < 0.0))) ? div - 1.0 : div;
    double fl = floor(div);
    fl = (div - fl > 0.5) ? fl + 1.0 : fl;
    const double r = div != 0.0 ? fl : copysign(0.0, a / b);
    return b == 0.0 ? a / b : r;
}
#define TRN_SC_DP(name, expr)                                                                      \
    TRN_SC_INLINE int trn_sc_##name##_dp(double a, double b) { return (expr); }
TRN_SC_DP(eq, a == b)
TRN_SC_DP(ne, a != b)
TRN_SC_DP(lt, a < b)
TRN_SC_DP(le, a <= b)
TRN_SC_DP(gt, a > b)
TRN_SC_DP(ge, a >= b)
TRN_SC_DP(logical_and, (a != 0.0) & (b != 0.0))
TRN_SC_DP(logical_or, (a != 0.0) | (b != 0.0))
TRN_SC_DP(logical_xor, (a != 0.0) ^ (b != 0.0))
TRN_SC_INLINE int trn_sc_logical_not_dp(double a) { return a == 0.0; }
TRN_SC_INLINE int trn_sc_isnan_dp(double a) { return a != a; }
TRN_SC_INLINE int trn_sc_isinf_dp(double a) { return fabs(a) == INFINITY; }
TRN_SC_INLINE int trn_sc_isposinf_dp(double a) { return a == INFINITY; }
TRN_SC_INLINE int trn_sc_isneginf_dp(double a) { return a == -INFINITY; }
TRN_SC_INLINE int trn_sc_isfinite_dp(double a) { return fabs(a) < INFINITY; }
TRN_SC_INLINE double trn_sc_where_dd(double cond, double a, double b, const trn_sc_ctx *c) {
    TRN_SC_UNUSED(c);
    return cond != 0.0 ? a : b;
}
TRN_SC_INLINE double trn_sc_clamp_dd(double x, double lo, double hi, const trn_sc_ctx *c) {
    double r = x;
    r = (c->p[0] != 0.0 && (lo != lo || r < lo)) ? lo : r;
    r = (c->p[1] != 0.0 && (hi != hi || r > hi)) ? hi : r;
    return x != x ? x : r;
}
TRN_SC_INLINE double trn_sc_lerp_dd(double s, double e, double w, const trn_sc_ctx *c) {
    TRN_SC_UNUSED(c);
    const double d = e - s;
    return fabs(w) < 0.5 ? s + w * d : e - d * (1.0 - w);
}
TRN_SC_INLINE double trn_sc_addcmul_dd(double x, double a, double b, const trn_sc_ctx *c) {
    return x + c->p[0] * a * b;
}
TRN_SC_INLINE double trn_sc_addcdiv_dd(double x, double a, double b, const trn_sc_ctx *c) {
    return x + c->p[0] * (a / b);
}

// ---- integer family (int64 compute; bool is 0/1) ------------------------------
TRN_SC_INLINE int64_t trn_sc_wrap(uint64_t v) {
    int64_t r;
    memcpy(&r, &v, sizeof r);
    return r;
}
#define TRN_SC_I1(name, expr)                                                                      \
    TRN_SC_INLINE int64_t trn_sc_##name##_i(int64_t x, const trn_sc_ctx *c) {                      \
        TRN_SC_UNUSED(c);                                                                          \
        return (expr);                                                                             \
    }
#define TRN_SC_I2(name, expr)                                                                      \
    TRN_SC_INLINE int64_t trn_sc_##name##_i(int64_t a, int64_t b, const trn_sc_ctx *c) {           \
        TRN_SC_UNUSED(c);                                                                          \
        return (expr);                                                                             \
    }
TRN_SC_I1(abs, x < 0 ? trn_sc_wrap(0u - (uint64_t)x) : x)
TRN_SC_I1(neg, trn_sc_wrap(0u - (uint64_t)x))
TRN_SC_I1(sign, (x > 0) - (x < 0))
TRN_SC_I1(relu, x > 0 ? x : 0)
TRN_SC_I1(floor, x)
TRN_SC_I1(ceil, x)
TRN_SC_I1(round, x)
TRN_SC_I1(trunc, x)
TRN_SC_I1(bitwise_not, ~x)
TRN_SC_I1(leaky_relu, x > 0 ? x : (int64_t)((double)x * c->p[0]))
TRN_SC_I1(hardtanh, x < c->ip[0] ? c->ip[0] : (x > c->ip[1] ? c->ip[1] : x))
TRN_SC_I1(hardsigmoid, x <= -3 ? 0 : (x >= 3 ? 1 : (x + 3) / 6))
TRN_SC_I1(hardswish, x <= -3 ? 0 : (x >= 3 ? x : x * (x + 3) / 6))
TRN_SC_I1(nan_to_num, x)

TRN_SC_I2(add, trn_sc_wrap((uint64_t)a + (uint64_t)c->ip[0] * (uint64_t)b))
TRN_SC_I2(sub, trn_sc_wrap((uint64_t)a - (uint64_t)c->ip[0] * (uint64_t)b))
TRN_SC_I2(mul, trn_sc_wrap((uint64_t)a *(uint64_t)b))
TRN_SC_I2(maximum, a < b ? b : a)
TRN_SC_I2(minimum, b < a ? b : a)
TRN_SC_I2(fmax, a < b ? b : a)
TRN_SC_I2(fmin, b < a ? b : a)
TRN_SC_I2(bitwise_and, a &b)
TRN_SC_I2(bitwise_or, a | b)
TRN_SC_I2(bitwise_xor, a ^ b)

// Division by zero is screened by the kernel (ZeroDivisionError) before these
// run; b = -1 is handled apart because INT64_MIN / -1 overflows.
TRN_SC_INLINE int64_t trn_sc_safe_b(int64_t b) { return (b == 0 || b == -1) ? 1 : b; }
TRN_SC_INLINE int64_t trn_sc_div_trunc_i(int64_t a, int64_t b, const trn_sc_ctx *c) {
    TRN_SC_UNUSED(c);
    return b == -1 ? trn_sc_wrap(0u - (uint64_t)a) : a / trn_sc_safe_b(b);
}
TRN_SC_INLINE int64_t trn_sc_div_floor_i(int64_t a, int64_t b, const trn_sc_ctx *c) {
    TRN_SC_UNUSED(c);
    const int64_t sb = trn_sc_safe_b(b);
    const int64_t q = a / sb, r = a % sb;
    const int64_t fl = (r != 0 && ((r < 0) != (sb < 0))) ? q - 1 : q;
    return b == -1 ? trn_sc_wrap(0u - (uint64_t)a) : fl;
}
TRN_SC_INLINE int64_t trn_sc_remainder_i(int64_t a, int64_t b, const trn_sc_ctx *c) {
    TRN_SC_UNUSED(c);
    const int64_t sb = trn_sc_safe_b(b);
    const int64_t r = a % sb;
    const int64_t m = (r != 0 && ((r < 0) != (sb < 0))) ? r + sb : r;
    return b == -1 ? 0 : m;
}
TRN_SC_INLINE int64_t trn_sc_fmod_i(int64_t a, int64_t b, const trn_sc_ctx *c) {
    TRN_SC_UNUSED(c);
    return b == -1 ? 0 : a % trn_sc_safe_b(b);
}
// Shifts as ATen: out-of-range counts give 0 (left) or the sign fill (right).
TRN_SC_INLINE int64_t trn_sc_lshift_i(int64_t a, int64_t b, const trn_sc_ctx *c) {
    const int64_t bounded = (b < 0 || b >= c->bits) ? 0 : b;
    const int64_t r = trn_sc_wrap((uint64_t)a << bounded);
    return (b < 0 || b >= c->bits) ? 0 : r;
}
TRN_SC_INLINE int64_t trn_sc_rshift_i(int64_t a, int64_t b, const trn_sc_ctx *c) {
    const int64_t max_shift = c->bits - (c->is_signed ? 1 : 0);
    const int64_t s = (b < 0 || b >= max_shift) ? max_shift : b;
    // a >= 0 for unsigned dtypes; arithmetic shift for signed ones. The
    // shift of a 64-bit value by 64 (uint64 only) is avoided by splitting.
    return (a >> (s > 62 ? 62 : s)) >> (s > 62 ? s - 62 : 0);
}
TRN_SC_INLINE int64_t trn_sc_copysign_i(int64_t a, int64_t b, const trn_sc_ctx *c) {
    TRN_SC_UNUSED(c);
    const int64_t m = a < 0 ? trn_sc_wrap(0u - (uint64_t)a) : a;
    return b < 0 ? trn_sc_wrap(0u - (uint64_t)m) : m;
}
// Integer power by squaring; negative exponents as ATen's powi.
TRN_SC_INLINE int64_t trn_sc_pow_i(int64_t a, int64_t b, const trn_sc_ctx *c) {
    TRN_SC_UNUSED(c);
    uint64_t result = 1, base = (uint64_t)a;
    int64_t e = b < 0 ? 0 : b;
    for (int i = 0; i < 64; i++) {
        result = (e & 1) ? result * base : result;
        base *= base;
        e >>= 1;
    }
    const int64_t neg = a == 1 ? 1 : (a == -1 ? ((b & 1) ? -1 : 1) : 0);
    return b < 0 ? neg : trn_sc_wrap(result);
}

#define TRN_SC_IP(name, expr)                                                                      \
    TRN_SC_INLINE int trn_sc_##name##_ip(int64_t a, int64_t b) { return (expr); }
TRN_SC_IP(eq, a == b)
TRN_SC_IP(ne, a != b)
TRN_SC_IP(lt, a < b)
TRN_SC_IP(le, a <= b)
TRN_SC_IP(gt, a > b)
TRN_SC_IP(ge, a >= b)
TRN_SC_IP(logical_and, (a != 0) & (b != 0))
TRN_SC_IP(logical_or, (a != 0) | (b != 0))
TRN_SC_IP(logical_xor, (a != 0) ^ (b != 0))
TRN_SC_INLINE int trn_sc_logical_not_ip(int64_t a) { return a == 0; }
TRN_SC_INLINE int trn_sc_isnan_ip(int64_t a) {
    TRN_SC_UNUSED(a);
    return 0;
}
TRN_SC_INLINE int trn_sc_isinf_ip(int64_t a) {
    TRN_SC_UNUSED(a);
    return 0;
}
TRN_SC_INLINE int trn_sc_isposinf_ip(int64_t a) {
    TRN_SC_UNUSED(a);
    return 0;
}
TRN_SC_INLINE int trn_sc_isneginf_ip(int64_t a) {
    TRN_SC_UNUSED(a);
    return 0;
}
TRN_SC_INLINE int trn_sc_isfinite_ip(int64_t a) {
    TRN_SC_UNUSED(a);
    return 1;
}

TRN_SC_INLINE int64_t trn_sc_where_i(int64_t cond, int64_t a, int64_t b, const trn_sc_ctx *c) {
    TRN_SC_UNUSED(c);
    return cond != 0 ? a : b;
}
TRN_SC_INLINE int64_t trn_sc_clamp_i(int64_t x, int64_t lo, int64_t hi, const trn_sc_ctx *c) {
    int64_t r = x;
    r = (c->p[0] != 0.0 && r < lo) ? lo : r;
    return (c->p[1] != 0.0 && r > hi) ? hi : r;
}
TRN_SC_INLINE int64_t trn_sc_addcmul_i(int64_t x, int64_t a, int64_t b, const trn_sc_ctx *c) {
    return trn_sc_wrap((uint64_t)x + (uint64_t)c->ip[0] * (uint64_t)a * (uint64_t)b);
}

#endif
