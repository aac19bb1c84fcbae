// test_elementwise.c - the elementwise kernel: accuracy of every float32
// transcendental against libm over dense sweeps (max error in float ulps),
// integer semantics (wrap-around, division rounding and by zero, shifts),
// predicates, layouts (strided, broadcast, scalar operands, zero-size, 0-d,
// in-place), on-the-fly dtype conversion, device memory, float64 in both
// policies' float path, 16-bit add / sub rounding as ATen's CPU loop, and
// invalid descriptors.
#include <math.h>
#include <stdlib.h>

#include "internal.h"
#include "test.h"
#include "trn/convert.h"
#include "trn/scalar.h"

#define FLT_MAX_D 3.4028234663852886e38

static trn_stream *g_stream;

// Runs a contiguous 1-d op: out[i] = op(a[i], b[i], c[i]).
static trn_status run1d(trn_ew_op op, trn_dtype dt, trn_dtype out_dt, int64_t n, void *out,
                        const void *a, const void *b, const void *c, const double *params) {
    int64_t sizes[1] = {n};
    int64_t os[1] = {(int64_t)trn_dtype_size(out_dt)};
    int64_t is[1] = {(int64_t)trn_dtype_size(dt)};
    int64_t cs[1] = {op == TRN_EW_WHERE ? 1 : (int64_t)trn_dtype_size(dt)};
    trn_ew_desc d;
    memset(&d, 0, sizeof d);
    d.op = op;
    d.dtype = dt;
    d.ndim = 1;
    d.sizes = sizes;
    d.out = out;
    d.out_strides = os;
    d.out_dtype = out_dt;
    const void *ins[3] = {a, b, c};
    for (int k = 0; k < 3; k++) {
        d.in[k] = ins[k];
        d.in_strides[k] = (op == TRN_EW_WHERE && k == 0) ? cs : is;
        d.in_dtype[k] = (op == TRN_EW_WHERE && k == 0) ? TRN_DTYPE_BOOL : dt;
    }
    if (params)
        for (int k = 0; k < 4; k++) d.params[k] = params[k];
    trn_status st = trn_ew_launch(g_stream, &d);
    if (st != TRN_SUCCESS) return st;
    return trn_stream_synchronize(g_stream);
}

// Distance in float ulps between got and the double reference.
static double ulps(float got, double want) {
    if (isnan(want)) return isnan(got) ? 0 : 1e9;
    if (isinf(want) || fabs(want) > FLT_MAX_D) return (double)got == (float)want ? 0 : 1e9;
    const float w = (float)want;
    if (got == w) return 0;
    const double ulp = fabs(want) < 0x1p-126 ? 0x1p-149 : ldexp(1.0, ilogb((float)fabs(want)) - 23);
    return fabs((double)got - want) / ulp;
}

typedef double (*ref1)(double);
static double ref_sigmoid(double x) { return 1.0 / (1.0 + exp(-x)); }
static double ref_silu(double x) { return x / (1.0 + exp(-x)); }
// References without the cancellation of 1 + erf / 1 + tanh for x < 0.
static double ref_gelu(double x) { return 0.5 * x * erfc(-x / sqrt(2.0)); }
static double ref_gelu_tanh(double x) {
    return x / (1.0 + exp(-2.0 * sqrt(2.0 / M_PI) * (x + 0.044715 * x * x * x)));
}
static double ref_mish(double x) { return x * tanh(log1p(exp(x))); }
static double ref_rsqrt(double x) { return 1.0 / sqrt(x); }

// Sweeps [lo, hi] with n points and returns the worst error in ulps; results
// smaller in magnitude than floor_abs may instead be off by floor_abs
// absolutely (where ATen's float formulas underflow or cancel, too).
static double sweep(trn_ew_op op, ref1 ref, double lo, double hi, int n, double floor_abs) {
    float *x = malloc(sizeof(float) * (size_t)n), *y = malloc(sizeof(float) * (size_t)n);
    if (!x || !y) abort();
    for (int i = 0; i < n; i++) x[i] = (float)(lo + (hi - lo) * i / (n - 1));
    CHECK_OK(run1d(op, TRN_DTYPE_F32, TRN_DTYPE_F32, n, y, x, NULL, NULL, NULL));
    double worst = 0;
    for (int i = 0; i < n; i++) {
        const double want = ref((double)x[i]);
        double e = ulps(y[i], want);
        // Below floor_abs in magnitude, an absolute error up to floor_abs is fine.
        if (fabs(want) < floor_abs) e = fabs((double)y[i] - want) <= floor_abs ? 0 : e;
        if (e > worst) {
            worst = e;
            if (e > 4 && worst < 1e3)
                fprintf(stderr, "  %s(%.9g) = %.9g, libm %.9g (%.1f ulp)\n", trn_ew_op_name(op),
                        x[i], y[i], want, e);
        }
    }
    free(x);
    free(y);
    return worst;
}

static void test_transcendental_accuracy(void) {
    struct {
        trn_ew_op op;
        ref1 ref;
        double lo, hi, max_ulp, floor_abs;
    } cases[] = {
        {TRN_EW_EXP, exp, -87, 89, 0.7, 0},
        // Subnormal results: p (rounded) times 2^n rounds a second time.
        {TRN_EW_EXP, exp, -104, -87, 1, 0},
        {TRN_EW_EXP2, exp2, -149, 128, 1, 0},
        {TRN_EW_EXPM1, expm1, -20, 88, 1, 0},
        {TRN_EW_EXPM1, expm1, -1e-3, 1e-3, 1, 0},
        {TRN_EW_LOG, log, 1e-30, 1e30, 1, 0},
        {TRN_EW_LOG, log, 0.5, 2, 1, 0},
        {TRN_EW_LOG2, log2, 1e-30, 1e30, 1, 0},
        {TRN_EW_LOG10, log10, 1e-30, 1e30, 1, 0},
        {TRN_EW_LOG1P, log1p, -0.999, 1e6, 1, 0},
        {TRN_EW_LOG1P, log1p, -1e-4, 1e-4, 1, 0},
        {TRN_EW_SIN, sin, -1e4, 1e4, 1, 1e-6},
        {TRN_EW_COS, cos, -1e4, 1e4, 1, 1e-6},
        {TRN_EW_SIN, sin, -1e9, 1e9, 1, 1e-6},
        {TRN_EW_TAN, tan, -100, 100, 1, 1e-6},
        {TRN_EW_ASIN, asin, -1, 1, 1, 0},
        {TRN_EW_ACOS, acos, -1, 1, 1, 0},
        {TRN_EW_ATAN, atan, -1e5, 1e5, 1, 0},
        {TRN_EW_SINH, sinh, -89, 89, 1, 0},
        {TRN_EW_SINH, sinh, -1e-3, 1e-3, 1, 0},
        {TRN_EW_COSH, cosh, -89, 89, 1, 0},
        {TRN_EW_TANH, tanh, -20, 20, 0.7, 0},
        {TRN_EW_TANH, tanh, -1e-3, 1e-3, 1, 0},
        // 1 / (1 + e^-x) in float, as ATen: e^-x overflows below -88.7.
        {TRN_EW_SIGMOID, ref_sigmoid, -100, 100, 2.5, 1e-37},
        {TRN_EW_SILU, ref_silu, -100, 100, 2.5, 1e-35},
        {TRN_EW_ERF, erf, -6, 6, 0.51, 0},
        {TRN_EW_ERF, erf, -1e-3, 1e-3, 0.51, 0},
        {TRN_EW_ERFC, erfc, -6, 10.5, 0.51, 0},
        // GELU is float-native for speed: within 8 ulp from -2 up; in the
        // negative tail (|result| < 0.05) the float rounding of x^2 / x^3
        // inside exp grows with |x| (to ~1.5e-5 relative at x = -10), where
        // ATen's float formula, through 1 + erf, loses every digit.
        {TRN_EW_GELU, ref_gelu, -2, 10, 10, 1e-6},
        {TRN_EW_GELU, ref_gelu, -10, -2, 128, 1e-20},
        {TRN_EW_GELU_TANH, ref_gelu_tanh, -2, 10, 8, 1e-6},
        {TRN_EW_GELU_TANH, ref_gelu_tanh, -10, -2, 128, 1e-20},
        {TRN_EW_MISH, ref_mish, -20, 20, 2, 1e-6},
        {TRN_EW_SQRT, sqrt, 0, 1e6, 0.5, 0},
        // 1/sqrt rounded twice, exactly as ATen's float rsqrt.
        {TRN_EW_RSQRT, ref_rsqrt, 1e-6, 1e6, 1.5, 0},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const double worst =
            sweep(cases[i].op, cases[i].ref, cases[i].lo, cases[i].hi, 200001, cases[i].floor_abs);
        if (worst > cases[i].max_ulp)
            fprintf(stderr, "%s on [%g, %g]: %.2f ulp (max %.1f)\n", trn_ew_op_name(cases[i].op),
                    cases[i].lo, cases[i].hi, worst, cases[i].max_ulp);
        CHECK(worst <= cases[i].max_ulp);
    }
}

static void test_special_values(void) {
    const float in[] = {NAN, INFINITY, -INFINITY, 0.0f, -0.0f, 1.0f, -1.0f};
    const int n = 7;
    float out[8];
    CHECK_OK(run1d(TRN_EW_EXP, TRN_DTYPE_F32, TRN_DTYPE_F32, n, out, in, NULL, NULL, NULL));
    CHECK(isnan(out[0]) && out[1] == INFINITY && out[2] == 0.0f && out[3] == 1.0f);
    CHECK_OK(run1d(TRN_EW_LOG, TRN_DTYPE_F32, TRN_DTYPE_F32, n, out, in, NULL, NULL, NULL));
    CHECK(isnan(out[0]) && out[1] == INFINITY && isnan(out[2]) && out[3] == -INFINITY &&
          out[5] == 0.0f && isnan(out[6]));
    CHECK_OK(run1d(TRN_EW_TANH, TRN_DTYPE_F32, TRN_DTYPE_F32, n, out, in, NULL, NULL, NULL));
    CHECK(isnan(out[0]) && out[1] == 1.0f && out[2] == -1.0f && out[3] == 0.0f);
    CHECK_OK(run1d(TRN_EW_SIN, TRN_DTYPE_F32, TRN_DTYPE_F32, n, out, in, NULL, NULL, NULL));
    CHECK(isnan(out[0]) && isnan(out[1]) && isnan(out[2]) && out[3] == 0.0f);
    CHECK_OK(run1d(TRN_EW_ERFINV, TRN_DTYPE_F32, TRN_DTYPE_F32, n, out, in, NULL, NULL, NULL));
    CHECK(isnan(out[0]) && isnan(out[1]) && out[3] == 0.0f && out[5] == INFINITY &&
          out[6] == -INFINITY);
    // pow special cases (C99 Annex F): every pair of special bases and
    // exponents, sign of zeros and infinities included (pow is straight-line
    // code with the zero / infinity cases falling out of exp(b log|a|)).
    enum { NS = 16, NP = NS * NS };
    const float sp[NS] = {0.0f, -0.0f, 1.0f, -1.0f, 2.0f,     -2.0f,     0.5f, -0.5f,
                          3.0f, -3.0f, 2.5f, -2.5f, INFINITY, -INFINITY, NAN,  0x1p40f};
    float base[NP], expo[NP], po[NP];
    for (int i = 0; i < NP; i++) base[i] = sp[i / NS], expo[i] = sp[i % NS];
    CHECK_OK(run1d(TRN_EW_POW, TRN_DTYPE_F32, TRN_DTYPE_F32, NP, po, base, expo, NULL, NULL));
    int pow_bad = 0;
    for (int i = 0; i < NP; i++) {
        const float want = powf(base[i], expo[i]);
        const int bad_i =
            !(isnan(want) ? isnan(po[i]) : (po[i] == want && signbit(po[i]) == signbit(want)));
        if (bad_i) printf("pow(%a, %a) = %a, C99 %a\n", base[i], expo[i], po[i], want);
        pow_bad += bad_i;
    }
    CHECK_INT(pow_bad, 0);
    // maximum propagates NaN, fmax ignores it.
    const float a2[] = {NAN, 1.0f, 2.0f}, b2[] = {1.0f, NAN, 3.0f};
    CHECK_OK(run1d(TRN_EW_MAXIMUM, TRN_DTYPE_F32, TRN_DTYPE_F32, 3, out, a2, b2, NULL, NULL));
    CHECK(isnan(out[0]) && isnan(out[1]) && out[2] == 3.0f);
    CHECK_OK(run1d(TRN_EW_FMAX, TRN_DTYPE_F32, TRN_DTYPE_F32, 3, out, a2, b2, NULL, NULL));
    CHECK(out[0] == 1.0f && out[1] == 1.0f && out[2] == 3.0f);
}

// tanh's big side carries e^2|x| + 1 and 2 / (e + 1) with their rounding
// errors (scalar.h): within 0.7 ulp of libm on every input tried - one float
// in 4096 over all bit patterns, plus every float near the 0.625 switch, 9.01
// (where tanh starts to round to 1) and the clamp at 10 - and tanh(-0) = -0.
static void test_tanh_accuracy(void) {
    enum { STRIDE = 4096, NEAR = 2048, N = (1 << 20) + 6 * NEAR };
    float *in = malloc(N * sizeof(float)), *out = malloc(N * sizeof(float));
    CHECK(in != NULL && out != NULL);
    if (in == NULL || out == NULL) {
        free(in);
        free(out);
        return;
    }
    int n = 0;
    for (uint64_t u = 0; u < (1ull << 32); u += STRIDE) {
        const uint32_t b = (uint32_t)u + (uint32_t)(u >> 12) % STRIDE;  // varied low bits
        memcpy(&in[n++], &b, 4);
    }
    const float centres[3] = {0.625f, 9.01f, 10.0f};
    for (int c = 0; c < 3; c++) {
        float lo = centres[c];
        for (int k = 0; k < NEAR / 2; k++) lo = nextafterf(lo, 0.0f);
        for (int k = 0; k < NEAR; k++, lo = nextafterf(lo, INFINITY)) {
            in[n++] = lo;
            in[n++] = -lo;
        }
    }
    CHECK_OK(run1d(TRN_EW_TANH, TRN_DTYPE_F32, TRN_DTYPE_F32, n, out, in, NULL, NULL, NULL));
    int bad = 0;
    for (int i = 0; i < n; i++) {
        const double want = tanh((double)in[i]);
        if (isnan(want) && isnan(out[i])) continue;
        const double e = want == 0 ? fabs((double)out[i]) : ulps(out[i], want);
        if (e > 0.7 || !signbit(out[i]) != !signbit(want)) {
            if (bad < 5) printf("tanh(%a) = %a, libm %a (%.2f ulp)\n", in[i], out[i], want, e);
            bad++;
        }
    }
    CHECK_INT(bad, 0);
    free(in);
    free(out);
}

static void test_integer_semantics(void) {
    const int64_t a[] = {7, -7, 7, -7, INT64_MIN, INT64_MAX, 5};
    const int64_t b[] = {2, 2, -2, -2, -1, 1, 3};
    int64_t out[7];
    CHECK_OK(run1d(TRN_EW_DIV_FLOOR, TRN_DTYPE_I64, TRN_DTYPE_I64, 7, out, a, b, NULL, NULL));
    CHECK(out[0] == 3 && out[1] == -4 && out[2] == -4 && out[3] == 3 && out[4] == INT64_MIN);
    CHECK_OK(run1d(TRN_EW_DIV_TRUNC, TRN_DTYPE_I64, TRN_DTYPE_I64, 7, out, a, b, NULL, NULL));
    CHECK(out[0] == 3 && out[1] == -3 && out[2] == -3 && out[3] == 3);
    CHECK_OK(run1d(TRN_EW_REMAINDER, TRN_DTYPE_I64, TRN_DTYPE_I64, 7, out, a, b, NULL, NULL));
    CHECK(out[0] == 1 && out[1] == 1 && out[2] == -1 && out[3] == -1 && out[4] == 0);
    CHECK_OK(run1d(TRN_EW_FMOD, TRN_DTYPE_I64, TRN_DTYPE_I64, 7, out, a, b, NULL, NULL));
    CHECK(out[0] == 1 && out[1] == -1 && out[2] == 1 && out[3] == -1);
    const double one[4] = {1, 0, 0, 0};
    CHECK_OK(run1d(TRN_EW_ADD, TRN_DTYPE_I64, TRN_DTYPE_I64, 7, out, a, b, NULL, one));
    CHECK(out[5] == INT64_MIN);  // wraps, as PyTorch
    // Division by zero is reported, not a crash.
    const int64_t z[] = {1, 0};
    trn_status st = run1d(TRN_EW_DIV_TRUNC, TRN_DTYPE_I64, TRN_DTYPE_I64, 2, out, a, z, NULL, NULL);
    CHECK_INT(st, TRN_ERROR_INVALID_ARGUMENT);
    CHECK(strstr(trn_last_error(), "ZeroDivisionError") != NULL);
    // Computed in a narrow integer dtype, stored to a wider output: the result
    // is that dtype's (TensorIterator computes in the common dtype, then casts
    // on store). bool + bool is a logical or (1, not 2); int8 wraps first.
    const uint8_t ta[] = {1, 1, 0}, tb[] = {1, 0, 0};
    int64_t o64[3];
    CHECK_OK(run1d(TRN_EW_ADD, TRN_DTYPE_BOOL, TRN_DTYPE_I64, 3, o64, ta, tb, NULL, one));
    CHECK(o64[0] == 1 && o64[1] == 1 && o64[2] == 0);
    float of[3];
    CHECK_OK(run1d(TRN_EW_ADD, TRN_DTYPE_BOOL, TRN_DTYPE_F32, 3, of, ta, tb, NULL, one));
    CHECK(of[0] == 1.0f && of[1] == 1.0f && of[2] == 0.0f);
    const int8_t p8[] = {100, -100, 5}, q8[] = {100, -100, 3};
    int16_t o16[3];
    CHECK_OK(run1d(TRN_EW_ADD, TRN_DTYPE_I8, TRN_DTYPE_I16, 3, o16, p8, q8, NULL, one));
    CHECK(o16[0] == -56 && o16[1] == 56 && o16[2] == 8);
    CHECK_OK(run1d(TRN_EW_MUL, TRN_DTYPE_I8, TRN_DTYPE_F32, 3, of, p8, q8, NULL, NULL));
    CHECK(of[0] == 16.0f && of[1] == 16.0f && of[2] == 15.0f);
    // Shifts on int8: out-of-range counts follow ATen.
    const int8_t s8[] = {-128, 64, 1, -1}, c8[] = {1, 1, 8, 9};
    int8_t o8[4];
    CHECK_OK(run1d(TRN_EW_LSHIFT, TRN_DTYPE_I8, TRN_DTYPE_I8, 4, o8, s8, c8, NULL, NULL));
    CHECK(o8[0] == 0 && o8[1] == -128 && o8[2] == 0 && o8[3] == 0);
    CHECK_OK(run1d(TRN_EW_RSHIFT, TRN_DTYPE_I8, TRN_DTYPE_I8, 4, o8, s8, c8, NULL, NULL));
    CHECK(o8[0] == -64 && o8[1] == 32 && o8[2] == 0 && o8[3] == -1);
    // uint8 wraps.
    const uint8_t u[] = {250, 3}, v[] = {10, 5};
    uint8_t ou[2];
    CHECK_OK(run1d(TRN_EW_ADD, TRN_DTYPE_U8, TRN_DTYPE_U8, 2, ou, u, v, NULL, one));
    CHECK(ou[0] == 4 && ou[1] == 8);
    CHECK_OK(run1d(TRN_EW_SUB, TRN_DTYPE_U8, TRN_DTYPE_U8, 2, ou, u, v, NULL, one));
    CHECK(ou[0] == 240 && ou[1] == 254);
    // bool: add is "or", ~ is "not".
    const uint8_t t[] = {1, 0, 1, 0}, f[] = {1, 1, 0, 0};
    uint8_t ob[4];
    CHECK_OK(run1d(TRN_EW_ADD, TRN_DTYPE_BOOL, TRN_DTYPE_BOOL, 4, ob, t, f, NULL, one));
    CHECK(ob[0] == 1 && ob[1] == 1 && ob[2] == 1 && ob[3] == 0);
    CHECK_OK(run1d(TRN_EW_BITWISE_NOT, TRN_DTYPE_BOOL, TRN_DTYPE_BOOL, 4, ob, t, NULL, NULL, NULL));
    CHECK(ob[0] == 0 && ob[1] == 1);
    // integer pow, negative exponents as ATen.
    const int64_t pa[] = {3, 2, -1, 2, 1}, pb[] = {4, 62, -3, -1, -5};
    CHECK_OK(run1d(TRN_EW_POW, TRN_DTYPE_I64, TRN_DTYPE_I64, 5, out, pa, pb, NULL, NULL));
    CHECK(out[0] == 81 && out[1] == (INT64_C(1) << 62) && out[2] == -1 && out[3] == 0 &&
          out[4] == 1);
}

static void test_layouts(void) {
    // out[i][j] = a[i][j] * s + b[j] (broadcast row), a transposed view.
    enum { R = 37, C = 600 };  // C > BLOCK: rows split into blocks
    static float a[C][R], b[C], out[R][C];
    for (int i = 0; i < R; i++)
        for (int j = 0; j < C; j++) a[j][i] = (float)(i * C + j);
    for (int j = 0; j < C; j++) b[j] = (float)j * 0.5f;
    int64_t sizes[2] = {R, C};
    int64_t os[2] = {C * 4, 4}, as[2] = {4, R * 4}, bs[2] = {0, 4};
    trn_ew_desc d;
    memset(&d, 0, sizeof d);
    d.op = TRN_EW_ADDCMUL;  // x + p0 * a * b with x = b-row, a = view, b = scalar 2
    d.dtype = TRN_DTYPE_F32;
    d.ndim = 2;
    d.sizes = sizes;
    d.out = out;
    d.out_strides = os;
    d.out_dtype = TRN_DTYPE_F32;
    d.in[0] = b;
    d.in_strides[0] = bs;
    d.in_dtype[0] = TRN_DTYPE_F32;
    d.in[1] = a;
    d.in_strides[1] = as;
    d.in_dtype[1] = TRN_DTYPE_F32;
    d.in[2] = NULL;
    d.scalar_in[2].f = 2.0;
    d.params[0] = 1.0;
    CHECK_OK(trn_ew_launch(g_stream, &d));
    CHECK_OK(trn_stream_synchronize(g_stream));
    int bad = 0;
    for (int i = 0; i < R; i++)
        for (int j = 0; j < C; j++) bad += out[i][j] != (float)j * 0.5f + 2.0f * (float)(i * C + j);
    CHECK_INT(bad, 0);

    // Zero-size and 0-d.
    int64_t zero[2] = {0, 5};
    d.sizes = zero;
    CHECK_OK(trn_ew_launch(g_stream, &d));
    float x0 = 3.0f, y0 = 0.0f;
    trn_ew_desc e;
    memset(&e, 0, sizeof e);
    e.op = TRN_EW_NEG;
    e.dtype = TRN_DTYPE_F32;
    e.out = &y0;
    e.out_dtype = TRN_DTYPE_F32;
    e.in[0] = &x0;
    e.in_dtype[0] = TRN_DTYPE_F32;
    CHECK_OK(trn_ew_launch(g_stream, &e));
    CHECK_OK(trn_stream_synchronize(g_stream));
    CHECK(y0 == -3.0f);

    // Mixed dtypes: int32 input, float32 compute, bfloat16 output; in place.
    int32_t ints[3] = {1, 4, 9};
    uint16_t bf[3];
    int64_t n3[1] = {3}, s4[1] = {4}, s2[1] = {2};
    trn_ew_desc m;
    memset(&m, 0, sizeof m);
    m.op = TRN_EW_SQRT;
    m.dtype = TRN_DTYPE_F32;
    m.ndim = 1;
    m.sizes = n3;
    m.out = bf;
    m.out_strides = s2;
    m.out_dtype = TRN_DTYPE_BF16;
    m.in[0] = ints;
    m.in_strides[0] = s4;
    m.in_dtype[0] = TRN_DTYPE_I32;
    CHECK_OK(trn_ew_launch(g_stream, &m));
    CHECK_OK(trn_stream_synchronize(g_stream));
    CHECK(trn_bf16_to_float(bf[0]) == 1.0f && trn_bf16_to_float(bf[1]) == 2.0f &&
          trn_bf16_to_float(bf[2]) == 3.0f);
    float inplace[4] = {1, 2, 3, 4};
    CHECK_OK(
        run1d(TRN_EW_MUL, TRN_DTYPE_F32, TRN_DTYPE_F32, 4, inplace, inplace, inplace, NULL, NULL));
    CHECK(inplace[3] == 16.0f);

    // A large launch runs on every thread and still covers each element once.
    const int64_t big = 1 << 20;
    float *x = malloc(sizeof(float) * big), *y = malloc(sizeof(float) * big);
    if (!x || !y) abort();
    for (int64_t i = 0; i < big; i++) x[i] = (float)i;
    const double two[4] = {2, 0, 0, 0};
    CHECK_OK(run1d(TRN_EW_ADD, TRN_DTYPE_F32, TRN_DTYPE_F32, big, y, x, x, NULL, two));
    bad = 0;
    for (int64_t i = 0; i < big; i++) bad += y[i] != 3.0f * (float)i;
    CHECK_INT(bad, 0);
    free(x);
    free(y);
}

static void test_device_memory(void) {
    // Device blocks (mprotect-ed under TORCH_NEURONX_DEBUG_PROTECT_MEMORY=1).
    void *da = NULL, *db = NULL;
    CHECK_OK(trn_mem_alloc(0, 1024 * 4, g_stream, &da));
    CHECK_OK(trn_mem_alloc(0, 1024, g_stream, &db));
    float host[1024];
    for (int i = 0; i < 1024; i++) host[i] = (float)i - 512.0f;
    int64_t n[1] = {1024}, s4[1] = {4}, s1[1] = {1};
    trn_copy_desc c = {
        1, n, da, (int64_t[]){1}, TRN_DTYPE_F32, host, (int64_t[]){1}, TRN_DTYPE_F32};
    CHECK_OK(trn_copy_launch(g_stream, &c));
    trn_ew_desc d;
    memset(&d, 0, sizeof d);
    d.op = TRN_EW_GT;
    d.dtype = TRN_DTYPE_F32;
    d.ndim = 1;
    d.sizes = n;
    d.out = db;
    d.out_strides = s1;
    d.out_dtype = TRN_DTYPE_BOOL;
    d.in[0] = da;
    d.in_strides[0] = s4;
    d.in_dtype[0] = TRN_DTYPE_F32;
    d.in[1] = NULL;
    d.scalar_in[1].f = 0.5;
    CHECK_OK(trn_ew_launch(g_stream, &d));
    uint8_t back[1024];
    trn_copy_desc r = {
        1, n, back, (int64_t[]){1}, TRN_DTYPE_BOOL, db, (int64_t[]){1}, TRN_DTYPE_BOOL};
    CHECK_OK(trn_copy_launch(g_stream, &r));
    CHECK_OK(trn_stream_synchronize(g_stream));
    int bad = 0;
    for (int i = 0; i < 1024; i++) bad += back[i] != (host[i] > 0.5f);
    CHECK_INT(bad, 0);
    CHECK_OK(trn_mem_free(da));
    CHECK_OK(trn_mem_free(db));
}

static void test_invalid(void) {
    float x = 1, y;
    int64_t n[1] = {1}, s[1] = {4};
    trn_ew_desc d;
    memset(&d, 0, sizeof d);
    d.op = TRN_EW_EXP;
    d.dtype = TRN_DTYPE_I64;  // exp has no integer version
    d.ndim = 1;
    d.sizes = n;
    d.out = &y;
    d.out_strides = s;
    d.out_dtype = TRN_DTYPE_I64;
    d.in[0] = &x;
    d.in_strides[0] = s;
    d.in_dtype[0] = TRN_DTYPE_I64;
    CHECK_INT(trn_ew_launch(g_stream, &d), TRN_ERROR_UNSUPPORTED);
    CHECK(strstr(trn_last_error(), "EXP") != NULL);
    CHECK(strstr(trn_last_error(), "int64") != NULL);
    d.dtype = TRN_DTYPE_C64;
    CHECK_INT(trn_ew_launch(g_stream, &d), TRN_ERROR_UNSUPPORTED);
    d.dtype = TRN_DTYPE_F32;
    d.out_dtype = TRN_DTYPE_I32;  // float results only to float outputs
    d.in_dtype[0] = TRN_DTYPE_F32;
    CHECK_INT(trn_ew_launch(g_stream, &d), TRN_ERROR_UNSUPPORTED);
    d.out_dtype = TRN_DTYPE_F32;
    d.op = (trn_ew_op)9999;
    CHECK_INT(trn_ew_launch(g_stream, &d), TRN_ERROR_INVALID_ARGUMENT);
    d.op = TRN_EW_EXP;
    d.ndim = TRN_MAX_DIMS + 1;
    CHECK_INT(trn_ew_launch(g_stream, &d), TRN_ERROR_INVALID_ARGUMENT);
    CHECK_INT(trn_ew_launch(NULL, &d), TRN_ERROR_INVALID_ARGUMENT);
    CHECK_INT(trn_ew_op_arity(TRN_EW_WHERE), 3);
    CHECK_STR(trn_ew_op_name(TRN_EW_ADD), "ADD");
    CHECK(trn_ew_op_is_predicate(TRN_EW_EQ) && !trn_ew_op_is_predicate(TRN_EW_ADD));
}

// Activation backward ops against double references of ATen's formulas
// (grad = 1.5 everywhere, x swept over [-8, 8]); error relative to
// max(|want|, 1): near the zero crossings of a derivative (gelu, mish) the
// float formulas cancel, in ATen as here.
static double dref(trn_ew_op op, double x, const double *p) {
    const double g = 1.5;
    const double s = 1.0 / (1.0 + exp(-x));
    switch (op) {
    case TRN_EW_THRESHOLD_BACKWARD: return x <= p[0] ? 0.0 : g;
    case TRN_EW_SIGMOID_BACKWARD: return g * (1.0 - x) * x;
    case TRN_EW_TANH_BACKWARD: return g * (1.0 - x * x);
    case TRN_EW_HARDTANH_BACKWARD: return (x <= p[0] || x >= p[1]) ? 0.0 : g;
    case TRN_EW_LEAKY_RELU_BACKWARD: return x > 0 ? g : g * p[0];
    case TRN_EW_HARDSIGMOID_BACKWARD: return (x > -3 && x < 3) ? g / 6.0 : 0.0;
    case TRN_EW_HARDSWISH_BACKWARD: return x < -3 ? 0.0 : (x <= 3 ? g * (x / 3.0 + 0.5) : g);
    case TRN_EW_GELU_BACKWARD:
        return g * (0.5 * erfc(-x / sqrt(2.0)) + x * exp(-0.5 * x * x) / sqrt(2.0 * M_PI));
    case TRN_EW_GELU_TANH_BACKWARD: {
        const double kb = sqrt(2.0 / M_PI), t = tanh(kb * (x + 0.044715 * x * x * x));
        return g * (0.5 * (1 + t) + 0.5 * x * (1 - t * t) * kb * (1 + 3 * 0.044715 * x * x));
    }
    case TRN_EW_SILU_BACKWARD: return g * s * (1 + x * (1 - s));
    case TRN_EW_ELU_BACKWARD: return x <= 0 ? g * p[2] * p[0] * p[1] * exp(x * p[2]) : g * p[1];
    case TRN_EW_SOFTPLUS_BACKWARD: return x * p[0] > p[1] ? g : g * s; /* beta 1 */
    case TRN_EW_MISH_BACKWARD: {
        const double t = tanh(log1p(exp(x)));
        return g * (t + x * s * (1 - t * t));
    }
    default: return NAN;
    }
}

static void test_activation_backward(void) {
    enum { N = 4001 };
    static float x[N], gr[N], out[N];
    static double xd[N], gd[N], outd[N];
    for (int i = 0; i < N; i++) {
        x[i] = (float)(-8.0 + 16.0 * i / (N - 1));
        xd[i] = x[i];
        gr[i] = 1.5f;
        gd[i] = 1.5;
    }
    struct {
        trn_ew_op op;
        double p[4];
    } cases[] = {
        {TRN_EW_THRESHOLD_BACKWARD, {0.5, 0, 0, 0}},
        {TRN_EW_SIGMOID_BACKWARD, {0}},
        {TRN_EW_TANH_BACKWARD, {0}},
        {TRN_EW_HARDTANH_BACKWARD, {-1, 1, 0, 0}},
        {TRN_EW_LEAKY_RELU_BACKWARD, {0.01, 0, 0, 0}},
        {TRN_EW_HARDSIGMOID_BACKWARD, {0}},
        {TRN_EW_HARDSWISH_BACKWARD, {0}},
        {TRN_EW_GELU_BACKWARD, {0}},
        {TRN_EW_GELU_TANH_BACKWARD, {0}},
        {TRN_EW_SILU_BACKWARD, {0}},
        {TRN_EW_ELU_BACKWARD, {1.0, 1.0507, 1.0, 0}},
        {TRN_EW_SOFTPLUS_BACKWARD, {1.0, 20.0, 0, 0}},
        {TRN_EW_MISH_BACKWARD, {0}},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        CHECK_OK(run1d(cases[c].op, TRN_DTYPE_F32, TRN_DTYPE_F32, N, out, gr, x, NULL, cases[c].p));
        double worst = 0;
        for (int i = 0; i < N; i++) {
            const double want = dref(cases[c].op, xd[i], cases[c].p);
            const double err = fabs(out[i] - want) / (fabs(want) > 1.0 ? fabs(want) : 1.0);
            if (err > worst) worst = err;
        }
        if (worst > 2e-5)
            fprintf(stderr, "%s: relative error %g\n", trn_ew_op_name(cases[c].op), worst);
        CHECK(worst <= 2e-5);
        // float64 computed natively must match the double reference closely
        // (only checked when the policy computes float64 in double).
        CHECK_OK(
            run1d(cases[c].op, TRN_DTYPE_F64, TRN_DTYPE_F64, N, outd, gd, xd, NULL, cases[c].p));
        worst = 0;
        for (int i = 0; i < N; i++) {
            const double want = dref(cases[c].op, xd[i], cases[c].p);
            const double err = fabs(outd[i] - want) / (fabs(want) > 1.0 ? fabs(want) : 1.0);
            if (err > worst) worst = err;
        }
        CHECK(worst <= (trn_float64_native() ? 1e-12 : 2e-5));
    }
    CHECK_INT(trn_ew_op_arity(TRN_EW_GELU_BACKWARD), 2);
}

// 16-bit ADD / SUB with alpha round as ATen's CPU add (trn_ew_desc.cpu_block):
// alpha rounded to bfloat16; fused in the vector body, alpha * b rounded
// first in the scalar tail of each thread's run (70000 elements over 2 CPU
// threads: runs of 35000, tails of 35000 % 32 = 24); strided: all tail.
static float bf16_round(float x) { return trn_bf16_to_float(trn_float_to_bf16(x)); }
static void test_add16_cpu_rounding(void) {
    enum { N = 70000 };
    uint16_t *a = malloc(N * 2), *b = malloc(N * 2), *o = malloc(N * 2);
    CHECK(a && b && o);
    if (!a || !b || !o) return;
    for (int i = 0; i < N; i++) {
        a[i] = trn_float_to_bf16((float)sin(i * 0.37) * 3.0f);
        b[i] = trn_float_to_bf16((float)cos(i * 0.11) * 2.0f);
    }
    const float alpha = bf16_round(2.7f);
    for (int sub = 0; sub < 2; sub++) {
        int64_t sizes[1] = {N}, st[1] = {2};
        trn_ew_desc d;
        memset(&d, 0, sizeof d);
        d.op = sub ? TRN_EW_SUB : TRN_EW_ADD;
        d.dtype = d.out_dtype = d.in_dtype[0] = d.in_dtype[1] = TRN_DTYPE_BF16;
        d.ndim = 1;
        d.sizes = sizes;
        d.out = o;
        d.out_strides = d.in_strides[0] = d.in_strides[1] = st;
        d.in[0] = a;
        d.in[1] = b;
        d.params[0] = 2.7;
        d.cpu_block = 32;
        d.cpu_threads = 2;
        CHECK_OK(trn_ew_launch(g_stream, &d));
        CHECK_OK(trn_stream_synchronize(g_stream));
        const float al = sub ? -alpha : alpha;
        int bad = 0, tails = 0;
        for (int i = 0; i < N; i++) {
            const float x = trn_bf16_to_float(a[i]), y = trn_bf16_to_float(b[i]);
            const int tail = i % 35000 >= 35000 - 24;
            tails += tail;
            const float want =
                tail ? bf16_round(x + bf16_round(al * y)) : bf16_round(fmaf(al, y, x));
            bad += o[i] != trn_float_to_bf16(want);
        }
        CHECK_INT(tails, 48);
        CHECK_INT(bad, 0);
    }
    // Every other element (inner stride 2 elements): ATen's scalar loop only.
    {
        int64_t sizes[1] = {N / 2}, st2[1] = {4}, so[1] = {2};
        trn_ew_desc d;
        memset(&d, 0, sizeof d);
        d.op = TRN_EW_ADD;
        d.dtype = d.out_dtype = d.in_dtype[0] = d.in_dtype[1] = TRN_DTYPE_BF16;
        d.ndim = 1;
        d.sizes = sizes;
        d.out = o;
        d.out_strides = so;
        d.in_strides[0] = d.in_strides[1] = st2;
        d.in[0] = a;
        d.in[1] = b;
        d.params[0] = 2.7;
        d.cpu_block = 32;
        d.cpu_threads = 2;
        CHECK_OK(trn_ew_launch(g_stream, &d));
        CHECK_OK(trn_stream_synchronize(g_stream));
        int bad = 0;
        for (int i = 0; i < N / 2; i++) {
            const float x = trn_bf16_to_float(a[2 * i]), y = trn_bf16_to_float(b[2 * i]);
            bad += o[i] != trn_float_to_bf16(bf16_round(x + bf16_round(alpha * y)));
        }
        CHECK_INT(bad, 0);
    }
    free(a);
    free(b);
    free(o);
}

// The GELU kernel computes each branch of trn/scalar.h's select only where
// it is taken (ew_gelu.c packs the big-|u| lanes): the bits must be the
// select's, which fused code computes. float32 over every 4096th bit
// pattern plus the thresholds' neighbourhoods (|u| = 0.5 and, for the
// bfloat16 form, 1), at odd lengths and offsets (tails) and in place;
// bfloat16 over all 65536 patterns.
static int gelu_same(float got, float want) {
    return (isnan(got) && isnan(want)) || memcmp(&got, &want, 4) == 0;
}
static void test_gelu_split_bits(void) {
    enum { STRIDE = 4096, NEAR = 1024, N = (1 << 20) + 8 * NEAR };
    float *in = malloc(N * sizeof(float)), *out = malloc(N * sizeof(float));
    uint16_t *hin = malloc(65536 * 2), *hout = malloc(65536 * 2);
    CHECK(in != NULL && out != NULL && hin != NULL && hout != NULL);
    if (in == NULL || out == NULL || hin == NULL || hout == NULL) {
        free(in);
        free(out);
        free(hin);
        free(hout);
        return;
    }
    int n = 0;
    for (uint64_t u = 0; u < (1ull << 32); u += STRIDE) {
        const uint32_t b = (uint32_t)u + (uint32_t)(u >> 12) % STRIDE;
        memcpy(&in[n++], &b, 4);
    }
    const float centres[2] = {0.70710678f, 1.41421356f};
    for (int c = 0; c < 2; c++) {
        float lo = centres[c];
        for (int k = 0; k < NEAR / 2; k++) lo = nextafterf(lo, 0.0f);
        for (int k = 0; k < NEAR; k++, lo = nextafterf(lo, INFINITY)) {
            in[n++] = lo;
            in[n++] = -lo;
        }
    }
    int bad = 0;
    const int offs[3] = {0, 3, 17};
    for (int t = 0; t < 3; t++) {
        const int m = n - offs[t] - t;  // odd lengths: tails after the packed vectors
        CHECK_OK(run1d(TRN_EW_GELU, TRN_DTYPE_F32, TRN_DTYPE_F32, m, out, in + offs[t], NULL, NULL,
                       NULL));
        for (int i = 0; i < m; i++) {
            const float want = trn_sc_gelu_f32_form(in[offs[t] + i]);
            if (!gelu_same(out[i], want)) {
                if (bad < 5) printf("gelu(%a) = %a, select %a\n", in[offs[t] + i], out[i], want);
                bad++;
            }
        }
    }
    memcpy(out, in, (size_t)n * sizeof(float));
    CHECK_OK(run1d(TRN_EW_GELU, TRN_DTYPE_F32, TRN_DTYPE_F32, n, out, out, NULL, NULL, NULL));
    for (int i = 0; i < n; i++) bad += !gelu_same(out[i], trn_sc_gelu_f32_form(in[i]));
    CHECK_INT(bad, 0);
    for (int i = 0; i < 65536; i++) hin[i] = (uint16_t)i;
    CHECK_OK(
        run1d(TRN_EW_GELU, TRN_DTYPE_BF16, TRN_DTYPE_BF16, 65536, hout, hin, NULL, NULL, NULL));
    int bad16 = 0;
    for (int i = 0; i < 65536; i++) {
        const float x = trn_bf16_to_float(hin[i]);
        const float got = trn_bf16_to_float(hout[i]);
        const float want = trn_bf16_to_float(trn_float_to_bf16(trn_sc_gelu_bf16_form(x)));
        if (!gelu_same(got, want)) {
            if (bad16 < 5) printf("bf16 gelu(%a) = %a, select %a\n", x, got, want);
            bad16++;
        }
    }
    CHECK_INT(bad16, 0);
    free(in);
    free(out);
    free(hin);
    free(hout);
}

int main(void) {
    if (trn_stream_get_default(0, &g_stream) != TRN_SUCCESS) {
        fprintf(stderr, "no default stream: %s\n", trn_last_error());
        return 1;
    }
    test_transcendental_accuracy();
    test_special_values();
    test_tanh_accuracy();
    test_gelu_split_bits();
    test_integer_semantics();
    test_layouts();
    test_device_memory();
    test_invalid();
    test_activation_backward();
    test_add16_cpu_rounding();
    return TEST_REPORT();
}
