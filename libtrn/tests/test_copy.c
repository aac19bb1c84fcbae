// test_copy.c - the copy kernel: every dtype pair on simple values,
// PyTorch's results for NaN/inf/out-of-range/fractional values, float16 and
// bfloat16 rounding, complex rules, layouts (strided, negative strides,
// broadcast, zero-size, 0-d, size-1 dims, many dims), device memory round
// trips and invalid descriptors. Expected values come from PyTorch 2.x on
// x86-64 (its scalar conversion path).
#include <math.h>
#include <stdlib.h>

#include "internal.h"
#include "test.h"
#include "trn/convert.h"

static trn_stream *g_stream;

static const trn_dtype all_dtypes[] = {
#define ALL_DTYPES(name, size, text) name,
    TRN_DTYPE_LIST(ALL_DTYPES)
#undef ALL_DTYPES
};
#define NDTYPES ((int)(sizeof all_dtypes / sizeof all_dtypes[0]))

static bool is_complex(trn_dtype d) { return d == TRN_DTYPE_C64 || d == TRN_DTYPE_C128; }
static bool is_float(trn_dtype d) {
    return d == TRN_DTYPE_F16 || d == TRN_DTYPE_BF16 || d == TRN_DTYPE_F32 || d == TRN_DTYPE_F64 ||
           is_complex(d);
}
static bool is_signed(trn_dtype d) {
    return d == TRN_DTYPE_I8 || d == TRN_DTYPE_I16 || d == TRN_DTYPE_I32 || d == TRN_DTYPE_I64 ||
           is_float(d);
}

// Writes v (exactly representable in d) as element i of an array of d.
static void put(trn_dtype d, void *base, int64_t i, double v) {
    char *p = (char *)base + i * (int64_t)trn_dtype_size(d);
    switch (d) {
    case TRN_DTYPE_BOOL: {
        uint8_t x = v != 0;
        memcpy(p, &x, 1);
        break;
    }
    case TRN_DTYPE_U8: {
        uint8_t x = (uint8_t)v;
        memcpy(p, &x, 1);
        break;
    }
    case TRN_DTYPE_I8: {
        int8_t x = (int8_t)v;
        memcpy(p, &x, 1);
        break;
    }
    case TRN_DTYPE_I16: {
        int16_t x = (int16_t)v;
        memcpy(p, &x, 2);
        break;
    }
    case TRN_DTYPE_U16: {
        uint16_t x = (uint16_t)v;
        memcpy(p, &x, 2);
        break;
    }
    case TRN_DTYPE_I32: {
        int32_t x = (int32_t)v;
        memcpy(p, &x, 4);
        break;
    }
    case TRN_DTYPE_U32: {
        uint32_t x = (uint32_t)v;
        memcpy(p, &x, 4);
        break;
    }
    case TRN_DTYPE_I64: {
        int64_t x = (int64_t)v;
        memcpy(p, &x, 8);
        break;
    }
    case TRN_DTYPE_U64: {
        uint64_t x = (uint64_t)v;
        memcpy(p, &x, 8);
        break;
    }
    case TRN_DTYPE_F16: {
        uint16_t x = trn_float_to_half((float)v);
        memcpy(p, &x, 2);
        break;
    }
    case TRN_DTYPE_BF16: {
        uint16_t x = trn_float_to_bf16((float)v);
        memcpy(p, &x, 2);
        break;
    }
    case TRN_DTYPE_F32: {
        float x = (float)v;
        memcpy(p, &x, 4);
        break;
    }
    case TRN_DTYPE_F64: memcpy(p, &v, 8); break;
    case TRN_DTYPE_C64: {
        float x[2] = {(float)v, 0};
        memcpy(p, x, 8);
        break;
    }
    case TRN_DTYPE_C128: {
        double x[2] = {v, 0};
        memcpy(p, x, 16);
        break;
    }
    default: break;
    }
}

// Element i of an array of d, as double (real part for complex).
static double get(trn_dtype d, const void *base, int64_t i) {
    const char *p = (const char *)base + i * (int64_t)trn_dtype_size(d);
    switch (d) {
    case TRN_DTYPE_BOOL:
    case TRN_DTYPE_U8: {
        uint8_t x;
        memcpy(&x, p, 1);
        return x;
    }
    case TRN_DTYPE_I8: {
        int8_t x;
        memcpy(&x, p, 1);
        return x;
    }
    case TRN_DTYPE_I16: {
        int16_t x;
        memcpy(&x, p, 2);
        return x;
    }
    case TRN_DTYPE_U16: {
        uint16_t x;
        memcpy(&x, p, 2);
        return x;
    }
    case TRN_DTYPE_I32: {
        int32_t x;
        memcpy(&x, p, 4);
        return x;
    }
    case TRN_DTYPE_U32: {
        uint32_t x;
        memcpy(&x, p, 4);
        return x;
    }
    case TRN_DTYPE_I64: {
        int64_t x;
        memcpy(&x, p, 8);
        return (double)x;
    }
    case TRN_DTYPE_U64: {
        uint64_t x;
        memcpy(&x, p, 8);
        return (double)x;
    }
    case TRN_DTYPE_F16: {
        uint16_t x;
        memcpy(&x, p, 2);
        return trn_half_to_float(x);
    }
    case TRN_DTYPE_BF16: {
        uint16_t x;
        memcpy(&x, p, 2);
        return trn_bf16_to_float(x);
    }
    case TRN_DTYPE_F32:
    case TRN_DTYPE_C64: {
        float x;
        memcpy(&x, p, 4);
        return x;
    }
    case TRN_DTYPE_F64:
    case TRN_DTYPE_C128: {
        double x;
        memcpy(&x, p, 8);
        return x;
    }
    default: return 0;
    }
}

static double get_imag(trn_dtype d, const void *base, int64_t i) {
    const char *p = (const char *)base + i * (int64_t)trn_dtype_size(d);
    if (d == TRN_DTYPE_C64) {
        float x;
        memcpy(&x, p + 4, 4);
        return x;
    }
    if (d == TRN_DTYPE_C128) {
        double x;
        memcpy(&x, p + 8, 8);
        return x;
    }
    return 0;
}

// Contiguous 1-d copy of n elements, synchronised.
static trn_status copy1(void *dst, trn_dtype dd, const void *src, trn_dtype sd, int64_t n) {
    int64_t one = 1;
    trn_copy_desc c = {1, &n, dst, &one, dd, src, &one, sd};
    trn_status st = trn_copy_launch(g_stream, &c);
    if (st != TRN_SUCCESS) return st;
    return trn_stream_synchronize(g_stream);
}

static void test_all_pairs(void) {
    static const double values[] = {0, 1, 2, 7, 100, 127, -1, -100, 2.5, -2.75};
    enum { N = sizeof values / sizeof values[0] };
    _Alignas(16) unsigned char src[N * 16], dst[N * 16 + 16];
    int bad_before = test_failed;
    for (int a = 0; a < NDTYPES; a++) {
        for (int b = 0; b < NDTYPES; b++) {
            trn_dtype sd = all_dtypes[a], dd = all_dtypes[b];
            // 8-bit floats hold few of these values exactly: test_fp8_gemm.c
            // and tests/test_fp8_dtypes.py cover their conversions.
            if (trn_dtype_is_fp8(sd) || trn_dtype_is_fp8(dd)) continue;
            int n = 0;
            double used[N];
            for (int i = 0; i < N; i++) {
                double v = values[i];
                if (sd == TRN_DTYPE_BOOL && v != 0 && v != 1) continue;
                if (!is_signed(sd) && v < 0) continue;
                if (!is_float(sd) && v != floor(v)) continue;
                used[n] = v;
                put(sd, src, n++, v);
            }
            memset(dst, 0xAB, sizeof dst);
            CHECK_OK(copy1(dst, dd, src, sd, n));
            for (int i = 0; i < n; i++) {
                double v = used[i], want;
                if (dd == TRN_DTYPE_BOOL)
                    want = v != 0;
                else if (is_float(dd))
                    want = v;
                else
                    want = trunc(v);
                if (!is_signed(dd) && want < 0) {  // two's complement wrap
                    int bits = 8 * (int)trn_dtype_size(dd);
                    want += bits == 64 ? 18446744073709551616.0 : ldexp(1, bits);
                }
                double got = get(dd, dst, i);
                if (got != want || get_imag(dd, dst, i) != 0) {
                    test_fail_header(__FILE__, __LINE__);
                    fprintf(stderr, "%s -> %s of %g: got %.17g, want %.17g\n", trn_dtype_name(sd),
                            trn_dtype_name(dd), v, got, want);
                } else {
                    test_passed++;
                }
            }
            // Nothing beyond n elements was written.
            size_t end = (size_t)n * trn_dtype_size(dd);
            CHECK(dst[end] == 0xAB);
        }
    }
    if (test_failed != bad_before) fprintf(stderr, "  (in test_all_pairs)\n");
}

// Float -> integer for special values, as PyTorch computes it.
#define NSPECIAL 15
static const double special[NSPECIAL] = {NAN,    INFINITY, -INFINITY, 1e10,   -1e10,
                                         3e9,    -3e9,     1e20,      -1e20,  300.7,
                                         -300.7, 2.5,      -2.5,      -129.5, 70000.0};
#define I64MIN INT64_MIN
#define I32MIN INT32_MIN
static const int64_t want_i64[NSPECIAL] = {
    I64MIN, I64MIN, I64MIN, 10000000000, -10000000000, 3000000000, -3000000000, I64MIN,
    I64MIN, 300,    -300,   2,           -2,           -129,       70000};
static const int64_t want_i32[NSPECIAL] = {I32MIN, I32MIN, I32MIN, I32MIN, I32MIN,
                                           I32MIN, I32MIN, I32MIN, I32MIN, 300,
                                           -300,   2,      -2,     -129,   70000};
static const int64_t want_i16[NSPECIAL] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 300, -300, 2, -2, -129, 4464};
static const int64_t want_i8[NSPECIAL] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 44, -44, 2, -2, 127, 112};
static const int64_t want_u8[NSPECIAL] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 44, 212, 2, 254, 127, 112};
static const int64_t want_u16[NSPECIAL] = {0, 0,   0,     0, 0,     0,     0,   0,
                                           0, 300, 65236, 2, 65534, 65407, 4464};
static const int64_t want_u32[NSPECIAL] = {
    0, 0,   0,          1410065408, 2884901888, 3000000000, 1294967296, 0,
    0, 300, 4294966996, 2,          4294967294, 4294967167, 70000};
#define U64(x) ((uint64_t)(x))
#define P63 (UINT64_C(1) << 63)
static const uint64_t want_u64[NSPECIAL] = {P63,
                                            0,
                                            P63,
                                            10000000000u,
                                            U64(0) - 10000000000u,
                                            3000000000u,
                                            U64(0) - 3000000000u,
                                            0,
                                            P63,
                                            300,
                                            U64(0) - 300,
                                            2,
                                            U64(0) - 2,
                                            U64(0) - 129,
                                            70000};

static uint64_t get_bits(trn_dtype d, const void *base, int i) {
    size_t n = trn_dtype_size(d);
    uint64_t x = 0;
    memcpy(&x, (const char *)base + (size_t)i * n, n);  // little endian
    return x;
}

static void check_special_target(trn_dtype sd, const void *src, trn_dtype dd, const void *want,
                                 bool want_is_u64) {
    _Alignas(16) unsigned char dst[NSPECIAL * 16];
    CHECK_OK(copy1(dst, dd, src, sd, NSPECIAL));
    size_t n = trn_dtype_size(dd);
    uint64_t mask = n == 8 ? UINT64_MAX : (UINT64_C(1) << (8 * n)) - 1;
    for (int i = 0; i < NSPECIAL; i++) {
        uint64_t w =
            want_is_u64 ? ((const uint64_t *)want)[i] : (uint64_t)((const int64_t *)want)[i];
        uint64_t got = get_bits(dd, dst, i);
        if ((w & mask) == got) {
            test_passed++;
        } else {
            test_fail_header(__FILE__, __LINE__);
            fprintf(stderr, "%s -> %s of %g: got %llu, want %llu\n", trn_dtype_name(sd),
                    trn_dtype_name(dd), special[i], (unsigned long long)got,
                    (unsigned long long)(w & mask));
        }
    }
}

static void test_special_values(void) {
    static const trn_dtype sources[] = {TRN_DTYPE_F32, TRN_DTYPE_F64, TRN_DTYPE_C64,
                                        TRN_DTYPE_C128};
    for (size_t k = 0; k < sizeof sources / sizeof sources[0]; k++) {
        trn_dtype sd = sources[k];
        _Alignas(16) unsigned char src[NSPECIAL * 16];
        memset(src, 0, sizeof src);
        for (int i = 0; i < NSPECIAL; i++) put(sd, src, i, special[i]);
        check_special_target(sd, src, TRN_DTYPE_I64, want_i64, false);
        check_special_target(sd, src, TRN_DTYPE_I32, want_i32, false);
        check_special_target(sd, src, TRN_DTYPE_I16, want_i16, false);
        check_special_target(sd, src, TRN_DTYPE_I8, want_i8, false);
        check_special_target(sd, src, TRN_DTYPE_U8, want_u8, false);
        check_special_target(sd, src, TRN_DTYPE_U16, want_u16, false);
        check_special_target(sd, src, TRN_DTYPE_U32, want_u32, false);
        check_special_target(sd, src, TRN_DTYPE_U64, want_u64, true);
        uint8_t b[NSPECIAL];
        CHECK_OK(copy1(b, TRN_DTYPE_BOOL, src, sd, NSPECIAL));
        for (int i = 0; i < NSPECIAL; i++) CHECK_INT(b[i], 1);  // NaN too
        // Floats keep NaN and infinities.
        float f[NSPECIAL];
        CHECK_OK(copy1(f, TRN_DTYPE_F32, src, sd, NSPECIAL));
        CHECK(isnan(f[0]) && isinf(f[1]) && f[1] > 0 && isinf(f[2]) && f[2] < 0);
    }
    // float16 / bfloat16 sources: NaN and infinities to integers.
    uint16_t h[3] = {0x7E00, 0x7C00, 0xFC00}, bf[3] = {0x7FC0, 0x7F80, 0xFF80};
    int32_t i32[3];
    int16_t i16[3];
    CHECK_OK(copy1(i32, TRN_DTYPE_I32, h, TRN_DTYPE_F16, 3));
    CHECK(i32[0] == INT32_MIN && i32[1] == INT32_MIN && i32[2] == INT32_MIN);
    CHECK_OK(copy1(i16, TRN_DTYPE_I16, bf, TRN_DTYPE_BF16, 3));
    CHECK(i16[0] == 0 && i16[1] == 0 && i16[2] == 0);
    uint8_t b[3];
    CHECK_OK(copy1(b, TRN_DTYPE_BOOL, h, TRN_DTYPE_F16, 3));
    CHECK(b[0] == 1 && b[1] == 1 && b[2] == 1);
}

static void test_half_rounding(void) {
    // float32 -> float16, round to nearest even (values checked with PyTorch)
    const float f[] = {1 + 0x1p-11f, 1 + 3 * 0x1p-11f, 0x1p-24f, 0x1p-25f, 3 * 0x1p-25f,
                       65504.0f,     65519.99f,        6e-5f,    65520.0f, -65520.0f,
                       1e-8f,        3.4e38f,          -0.0f};
    const uint16_t want_h[] = {0x3C00, 0x3C02, 0x0001, 0x0000, 0x0002, 0x7BFF, 0x7BFF,
                               0x03EF, 0x7C00, 0xFC00, 0x0000, 0x7C00, 0x8000};
    enum { NF = sizeof f / sizeof f[0] };
    uint16_t h[NF];
    CHECK_OK(copy1(h, TRN_DTYPE_F16, f, TRN_DTYPE_F32, NF));
    for (int i = 0; i < NF; i++) CHECK_INT(h[i], want_h[i]);

    const float g[] = {1 + 0x1p-8f, 1 + 3 * 0x1p-8f, 3.4e38f, -3.4e38f,
                       0x1p-133f,   1e-40f,          1.0f,    -2.5f};
    const uint16_t want_b[] = {0x3F80, 0x3F82, 0x7F80, 0xFF80, 0x0001, 0x0001, 0x3F80, 0xC020};
    enum { NG = sizeof g / sizeof g[0] };
    uint16_t b[NG];
    CHECK_OK(copy1(b, TRN_DTYPE_BF16, g, TRN_DTYPE_F32, NG));
    for (int i = 0; i < NG; i++) CHECK_INT(b[i], want_b[i]);

    // NaN stays NaN, with its sign.
    const float nans[2] = {NAN, -NAN};
    CHECK_OK(copy1(h, TRN_DTYPE_F16, nans, TRN_DTYPE_F32, 2));
    CHECK_INT(h[0], 0x7E00);
    CHECK_INT(h[1], 0xFE00);
    CHECK_OK(copy1(b, TRN_DTYPE_BF16, nans, TRN_DTYPE_F32, 2));
    CHECK(isnan(trn_bf16_to_float(b[0])) && !(b[0] & 0x8000));
    CHECK(isnan(trn_bf16_to_float(b[1])) && (b[1] & 0x8000));
    // A signalling-looking NaN whose payload sits in the dropped bits.
    const uint32_t snan_bits = 0x7F800001u;
    float snan;
    memcpy(&snan, &snan_bits, 4);
    CHECK_OK(copy1(b, TRN_DTYPE_BF16, &snan, TRN_DTYPE_F32, 1));
    CHECK(isnan(trn_bf16_to_float(b[0])));

    // float64 goes through float32 (as c10 does), int64 -> float32 rounds once.
    double d = 1 + 0x1p-11 + 0x1p-40;
    CHECK_OK(copy1(h, TRN_DTYPE_F16, &d, TRN_DTYPE_F64, 1));
    CHECK_INT(h[0], 0x3C00);
    CHECK_OK(copy1(b, TRN_DTYPE_BF16, &d, TRN_DTYPE_F64, 1));
    CHECK_INT(b[0], 0x3F80);
    int64_t big = (INT64_C(1) << 62) + (INT64_C(1) << 38) + 1;
    float bf;
    CHECK_OK(copy1(&bf, TRN_DTYPE_F32, &big, TRN_DTYPE_I64, 1));
    CHECK(bf == 0x1p62f + 0x1p39f);
    uint64_t umax = UINT64_MAX;
    CHECK_OK(copy1(&bf, TRN_DTYPE_F32, &umax, TRN_DTYPE_U64, 1));
    CHECK(bf == 0x1p64f);
    int64_t ints[2] = {70000, (1 << 24) + 1};
    CHECK_OK(copy1(h, TRN_DTYPE_F16, ints, TRN_DTYPE_I64, 1));
    CHECK_INT(h[0], 0x7C00);
    CHECK_OK(copy1(b, TRN_DTYPE_BF16, ints + 1, TRN_DTYPE_I64, 1));
    CHECK(trn_bf16_to_float(b[0]) == 16777216.0f);
    double huge = 1e300;
    CHECK_OK(copy1(&bf, TRN_DTYPE_F32, &huge, TRN_DTYPE_F64, 1));
    CHECK(isinf(bf));

    // Every float16 and bfloat16 survives a round trip through float32.
    enum { ALL = 65536 };
    uint16_t *bits = malloc(ALL * sizeof *bits), *back = malloc(ALL * sizeof *back);
    float *wide = malloc(ALL * sizeof *wide);
    CHECK(bits && back && wide);
    if (!bits || !back || !wide) goto out;
    for (int i = 0; i < ALL; i++) bits[i] = (uint16_t)i;
    for (int pass = 0; pass < 2; pass++) {
        trn_dtype t = pass == 0 ? TRN_DTYPE_F16 : TRN_DTYPE_BF16;
        CHECK_OK(copy1(wide, TRN_DTYPE_F32, bits, t, ALL));
        CHECK_OK(copy1(back, t, wide, TRN_DTYPE_F32, ALL));
        int mismatches = 0;
        for (int i = 0; i < ALL; i++) {
            bool nan = isnan(wide[i]);
            bool is_nan_bits = pass == 0 ? (i & 0x7C00) == 0x7C00 && (i & 0x3FF)
                                         : (i & 0x7F80) == 0x7F80 && (i & 0x7F);
            if (nan != is_nan_bits)
                mismatches++;
            else if (!nan && back[i] != bits[i])
                mismatches++;
            else if (nan &&
                     !isnan(pass == 0 ? trn_half_to_float(back[i]) : trn_bf16_to_float(back[i])))
                mismatches++;
        }
        CHECK_INT(mismatches, 0);
    }
    // Exact widening of a few known patterns.
    CHECK(trn_half_to_float(0x0001) == 0x1p-24f);
    CHECK(trn_half_to_float(0x7BFF) == 65504.0f);
    CHECK(trn_half_to_float(0x3555) == 0x1.554p-2f);
    CHECK(trn_half_to_float(0x8000) == 0.0f && signbit(trn_half_to_float(0x8000)));
out:
    free(bits);
    free(back);
    free(wide);
}

// Contiguous float32 -> bfloat16 runs long enough for the vector path
// (bf16_store.h: vcvtneps2bf16, with groups of 16 holding a denormal
// converted in software): every bit pattern class, denormals in some groups
// only, an unaligned start, bit for bit trn_float_to_bf16.
static void test_bf16_runs(void) {
    enum { N = 4099 };
    uint32_t *bits = malloc((N + 1) * sizeof *bits);
    uint16_t *got = malloc(N * sizeof *got);
    CHECK(bits != NULL && got != NULL);
    uint64_t x = 0x9E3779B97F4A7C15ull;
    for (int i = 0; i < N + 1; i++) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        uint32_t u = (uint32_t)(x >> 32);
        const int group = i / 16;
        if (group % 5 == 0 && i % 16 == 3)
            u &= 0x807FFFFFu;  // denormal or zero
        else if (group % 7 == 1 && i % 16 == 9)
            u |= 0x7F800000u;  // inf or NaN
        else if (group % 3 == 2 && i % 16 == 5)
            u = (u & 0xFFFF0000u) | 0x8000u;  // tie
        else if (group % 5 != 0)
            u = (u & 0x807FFFFFu) | ((u % 200 + 27) << 23);  // normal
        bits[i] = u;
    }
    float *src = malloc((N + 1) * sizeof *src);
    CHECK(src != NULL);
    memcpy(src, bits, (N + 1) * sizeof *src);
    CHECK_OK(copy1(got, TRN_DTYPE_BF16, src + 1, TRN_DTYPE_F32, N));
    int bad = 0;
    for (int i = 0; i < N; i++) bad += got[i] != trn_float_to_bf16(src[i + 1]);
    CHECK_INT(bad, 0);
    free(bits), free(got), free(src);
}

static void test_complex(void) {
    float c64[6] = {3, 4, 0, 1, 0, 0};
    double c128[6];
    CHECK_OK(copy1(c128, TRN_DTYPE_C128, c64, TRN_DTYPE_C64, 3));
    CHECK(c128[0] == 3 && c128[1] == 4 && c128[2] == 0 && c128[3] == 1);
    float re[3];
    CHECK_OK(copy1(re, TRN_DTYPE_F32, c64, TRN_DTYPE_C64, 3));
    CHECK(re[0] == 3 && re[1] == 0 && re[2] == 0);
    uint8_t b[3];
    CHECK_OK(copy1(b, TRN_DTYPE_BOOL, c64, TRN_DTYPE_C64, 3));
    CHECK(b[0] == 1 && b[1] == 1 && b[2] == 0);  // 1j is true
    int32_t i[3];
    CHECK_OK(copy1(i, TRN_DTYPE_I32, c128, TRN_DTYPE_C128, 3));
    CHECK(i[0] == 3 && i[1] == 0);
    double big[2] = {1e40, 5};
    float small[2];
    CHECK_OK(copy1(small, TRN_DTYPE_C64, big, TRN_DTYPE_C128, 1));
    CHECK(isinf(small[0]) && small[1] == 5);
    uint16_t h = 0x3C00;  // 1.0
    CHECK_OK(copy1(small, TRN_DTYPE_C64, &h, TRN_DTYPE_F16, 1));
    CHECK(small[0] == 1 && small[1] == 0);
    uint8_t t = 1;
    CHECK_OK(copy1(c128, TRN_DTYPE_C128, &t, TRN_DTYPE_BOOL, 1));
    CHECK(c128[0] == 1 && c128[1] == 0);
    // Odd bool bytes count as true.
    uint8_t odd[2] = {2, 0};
    int32_t oi[2];
    CHECK_OK(copy1(oi, TRN_DTYPE_I32, odd, TRN_DTYPE_BOOL, 2));
    CHECK(oi[0] == 1 && oi[1] == 0);
}

// Launches a copy with arrays that go out of scope before it runs.
static trn_status launch_nd(int ndim, const int64_t *sizes, void *dst, const int64_t *dstr,
                            trn_dtype dd, const void *src, const int64_t *sstr, trn_dtype sd) {
    int64_t s[TRN_MAX_DIMS], a[TRN_MAX_DIMS], b[TRN_MAX_DIMS];
    memcpy(s, sizes, (size_t)ndim * 8);
    memcpy(a, dstr, (size_t)ndim * 8);
    memcpy(b, sstr, (size_t)ndim * 8);
    trn_copy_desc c = {ndim, s, dst, a, dd, src, b, sd};
    trn_status st = trn_copy_launch(g_stream, &c);
    memset(s, 0x7F, sizeof s);  // the kernel must not read these any more
    memset(a, 0x7F, sizeof a);
    memset(b, 0x7F, sizeof b);
    return st;
}

static void test_layouts(void) {
    // Transpose a 3x4 float32 matrix (strided source) into int64.
    float m[12];
    for (int i = 0; i < 12; i++) m[i] = (float)i;
    int64_t t[12];
    int64_t sizes[2] = {4, 3}, dstr[2] = {3, 1}, sstr[2] = {1, 4};
    CHECK_OK(launch_nd(2, sizes, t, dstr, TRN_DTYPE_I64, m, sstr, TRN_DTYPE_F32));
    CHECK_OK(trn_stream_synchronize(g_stream));
    int bad = 0;
    for (int r = 0; r < 4; r++)
        for (int c = 0; c < 3; c++) bad += t[r * 3 + c] != c * 4 + r;
    CHECK_INT(bad, 0);

    // Same dtype, strided, each element size; negative source stride.
    static const trn_dtype by_size[] = {TRN_DTYPE_U8, TRN_DTYPE_I16, TRN_DTYPE_F32, TRN_DTYPE_F64,
                                        TRN_DTYPE_C128};
    for (size_t k = 0; k < 5; k++) {
        trn_dtype d = by_size[k];
        _Alignas(16) unsigned char src[10 * 16], dst[10 * 16];
        for (int i = 0; i < 10; i++) put(d, src, i, i + 1);
        int64_t n = 5, ds = 1, ss = -2;
        // src starts at the last even element and walks backwards.
        const char *start = (const char *)src + 8 * trn_dtype_size(d);
        CHECK_OK(launch_nd(1, &n, dst, &ds, d, start, &ss, d));
        CHECK_OK(trn_stream_synchronize(g_stream));
        bad = 0;
        for (int i = 0; i < 5; i++) bad += get(d, dst, i) != 9 - 2 * i;
        CHECK_INT(bad, 0);
    }

    // Broadcast: a row (src stride 0 on dim 0) into a 3x4 matrix, converting.
    int32_t row[4] = {1, 2, 3, 4};
    double out[12];
    int64_t bs[2] = {3, 4}, bd[2] = {4, 1}, bsrc[2] = {0, 1};
    CHECK_OK(launch_nd(2, bs, out, bd, TRN_DTYPE_F64, row, bsrc, TRN_DTYPE_I32));
    CHECK_OK(trn_stream_synchronize(g_stream));
    bad = 0;
    for (int i = 0; i < 12; i++) bad += out[i] != row[i % 4];
    CHECK_INT(bad, 0);
    // A scalar broadcast to 1000 elements, same dtype.
    float one = 1.5f, many[1000];
    int64_t n = 1000, s1 = 1, s0 = 0;
    CHECK_OK(launch_nd(1, &n, many, &s1, TRN_DTYPE_F32, &one, &s0, TRN_DTYPE_F32));
    CHECK_OK(trn_stream_synchronize(g_stream));
    bad = 0;
    for (int i = 0; i < 1000; i++) bad += many[i] != 1.5f;
    CHECK_INT(bad, 0);

    // Zero-size: nothing is touched, NULL pointers are fine.
    int64_t zs[2] = {0, 5}, zst[2] = {0, 0};
    CHECK_OK(launch_nd(2, zs, NULL, zst, TRN_DTYPE_F32, NULL, zst, TRN_DTYPE_I8));
    float guard = 7;
    CHECK_OK(launch_nd(2, zs, &guard, zst, TRN_DTYPE_F32, &one, zst, TRN_DTYPE_F32));
    CHECK_OK(trn_stream_synchronize(g_stream));
    CHECK(guard == 7);

    // 0-d: one element.
    double scalar = -3.75;
    int16_t s16 = 0;
    trn_copy_desc c0 = {0, NULL, &s16, NULL, TRN_DTYPE_I16, &scalar, NULL, TRN_DTYPE_F64};
    CHECK_OK(trn_copy_launch(g_stream, &c0));
    CHECK_OK(trn_stream_synchronize(g_stream));
    CHECK_INT(s16, -3);

    // Size-1 dims may have any stride, including 0 on the destination.
    int64_t os[3] = {1, 4, 1}, od[3] = {0, 1, 0}, osrc[3] = {99, 2, -5};
    int32_t evens[8] = {0, 1, 2, 3, 4, 5, 6, 7}, got[4];
    CHECK_OK(launch_nd(3, os, got, od, TRN_DTYPE_I32, evens, osrc, TRN_DTYPE_I32));
    CHECK_OK(trn_stream_synchronize(g_stream));
    CHECK(got[0] == 0 && got[1] == 2 && got[2] == 4 && got[3] == 6);

    // Contiguous 3-d coalesces into one memmove; a 64-d descriptor fits.
    static float a3[2 * 3 * 4], b3[2 * 3 * 4];
    for (int i = 0; i < 24; i++) a3[i] = (float)i * 0.5f;
    int64_t s3[3] = {2, 3, 4}, st3[3] = {12, 4, 1};
    CHECK_OK(launch_nd(3, s3, b3, st3, TRN_DTYPE_F32, a3, st3, TRN_DTYPE_F32));
    CHECK_OK(trn_stream_synchronize(g_stream));
    CHECK(memcmp(a3, b3, sizeof a3) == 0);
    int64_t s64[TRN_MAX_DIMS], d64[TRN_MAX_DIMS], r64[TRN_MAX_DIMS];
    for (int i = 0; i < TRN_MAX_DIMS; i++) {
        s64[i] = i % 8 == 0 ? 2 : 1;  // 8 dims of size 2, in 64 dims
        d64[i] = 1;
        r64[i] = 1;
    }
    int64_t stride = 1;
    for (int i = TRN_MAX_DIMS - 1; i >= 0; i--) {
        if (s64[i] == 2) {
            d64[i] = stride;            // contiguous destination
            r64[i] = 256 / stride / 2;  // source with reversed dim order
            stride *= 2;
        }
    }
    uint8_t src256[256], dst256[256];
    for (int i = 0; i < 256; i++) src256[i] = (uint8_t)i;
    CHECK_OK(launch_nd(TRN_MAX_DIMS, s64, dst256, d64, TRN_DTYPE_U8, src256, r64, TRN_DTYPE_U8));
    CHECK_OK(trn_stream_synchronize(g_stream));
    bad = 0;
    for (int i = 0; i < 256; i++) {
        int rev = 0;  // bit-reversal of i over 8 bits
        for (int bit = 0; bit < 8; bit++) rev |= ((i >> bit) & 1) << (7 - bit);
        bad += dst256[i] != rev;
    }
    CHECK_INT(bad, 0);

    // A big contiguous conversion.
    enum { BIG = 1 << 20 };
    int32_t *bi = malloc(BIG * sizeof *bi);
    double *bd2 = malloc(BIG * sizeof *bd2);
    CHECK(bi && bd2);
    if (bi && bd2) {
        for (int i = 0; i < BIG; i++) bi[i] = i - BIG / 2;
        CHECK_OK(copy1(bd2, TRN_DTYPE_F64, bi, TRN_DTYPE_I32, BIG));
        bad = 0;
        for (int i = 0; i < BIG; i++) bad += bd2[i] != i - BIG / 2;
        CHECK_INT(bad, 0);
    }
    free(bi);
    free(bd2);
}

static void test_device_memory(void) {
    // host -> device -> device (other device, converting) -> host
    float h[256], back[256];
    for (int i = 0; i < 256; i++) h[i] = (float)i - 100.25f;
    void *d0, *d1;
    CHECK_OK(trn_mem_alloc(0, sizeof h, NULL, &d0));
    CHECK_OK(trn_mem_alloc(1, 256 * 8, NULL, &d1));
    int64_t n = 256, one = 1;
    trn_copy_desc c = {1, &n, d0, &one, TRN_DTYPE_F32, h, &one, TRN_DTYPE_F32};
    CHECK_OK(trn_copy_launch(g_stream, &c));
    trn_copy_desc c2 = {1, &n, d1, &one, TRN_DTYPE_F64, d0, &one, TRN_DTYPE_F32};
    CHECK_OK(trn_copy_launch(g_stream, &c2));
    trn_copy_desc c3 = {1, &n, back, &one, TRN_DTYPE_F32, d1, &one, TRN_DTYPE_F64};
    CHECK_OK(trn_copy_launch(g_stream, &c3));
    CHECK_OK(trn_stream_synchronize(g_stream));
    CHECK(memcmp(h, back, sizeof h) == 0);
    // Strided read of device memory (protect mode: exact extent).
    int64_t half = 128, two = 2;
    float evens[128];
    trn_copy_desc c4 = {1, &half, evens, &one, TRN_DTYPE_F32, d0, &two, TRN_DTYPE_F32};
    CHECK_OK(trn_copy_launch(g_stream, &c4));
    CHECK_OK(trn_stream_synchronize(g_stream));
    CHECK(evens[5] == h[10] && evens[127] == h[254]);
    if (trn_mem_protect_enabled()) {
        // A copy running past its block is caught as a deferred error.
        int64_t too_many = 257;
        float sink[257];
        trn_copy_desc c5 = {1, &too_many, sink, &one, TRN_DTYPE_F32, d0, &one, TRN_DTYPE_F32};
        CHECK_OK(trn_copy_launch(g_stream, &c5));
        CHECK_STATUS(trn_stream_synchronize(g_stream), TRN_ERROR_INVALID_POINTER);
        CHECK_CONTAINS(trn_last_error(), "runs past the end");
    }
    CHECK_OK(trn_mem_free(d0));
    CHECK_OK(trn_mem_free(d1));
}

static void test_invalid(void) {
    float a[4] = {0}, b[4] = {0};
    int64_t n = 4, one = 1, zero = 0, neg = -1;
    trn_copy_desc ok = {1, &n, a, &one, TRN_DTYPE_F32, b, &one, TRN_DTYPE_F32};
    trn_copy_desc c;
    CHECK_STATUS(trn_copy_launch(NULL, &ok), TRN_ERROR_INVALID_ARGUMENT);
    CHECK_STATUS(trn_copy_launch(g_stream, NULL), TRN_ERROR_INVALID_ARGUMENT);
    c = ok;
    c.ndim = -1;
    CHECK_STATUS(trn_copy_launch(g_stream, &c), TRN_ERROR_INVALID_ARGUMENT);
    CHECK_CONTAINS(trn_last_error(), "ndim -1");
    c = ok;
    c.ndim = TRN_MAX_DIMS + 1;
    CHECK_STATUS(trn_copy_launch(g_stream, &c), TRN_ERROR_INVALID_ARGUMENT);
    c = ok;
    c.sizes = NULL;
    CHECK_STATUS(trn_copy_launch(g_stream, &c), TRN_ERROR_INVALID_ARGUMENT);
    c = ok;
    c.src_strides = NULL;
    CHECK_STATUS(trn_copy_launch(g_stream, &c), TRN_ERROR_INVALID_ARGUMENT);
    c = ok;
    c.sizes = &neg;
    CHECK_STATUS(trn_copy_launch(g_stream, &c), TRN_ERROR_INVALID_ARGUMENT);
    CHECK_CONTAINS(trn_last_error(), "negative");
    c = ok;
    c.dst_dtype = TRN_DTYPE_COUNT;
    CHECK_STATUS(trn_copy_launch(g_stream, &c), TRN_ERROR_INVALID_ARGUMENT);
    CHECK_CONTAINS(trn_last_error(), "invalid dtype");
    c = ok;
    c.src_dtype = (trn_dtype)-3;
    CHECK_STATUS(trn_copy_launch(g_stream, &c), TRN_ERROR_INVALID_ARGUMENT);
    c = ok;
    c.dst = NULL;
    CHECK_STATUS(trn_copy_launch(g_stream, &c), TRN_ERROR_INVALID_ARGUMENT);
    CHECK_CONTAINS(trn_last_error(), "dst pointer is NULL");
    c = ok;
    c.src = NULL;
    CHECK_STATUS(trn_copy_launch(g_stream, &c), TRN_ERROR_INVALID_ARGUMENT);
    c = ok;
    c.dst_strides = &zero;
    CHECK_STATUS(trn_copy_launch(g_stream, &c), TRN_ERROR_INVALID_ARGUMENT);
    CHECK_CONTAINS(trn_last_error(), "dst stride of dim 0 is 0");
    int64_t huge = INT64_MAX / 2;
    c = ok;
    c.src_strides = &huge;
    CHECK_STATUS(trn_copy_launch(g_stream, &c), TRN_ERROR_INVALID_ARGUMENT);
    CHECK_CONTAINS(trn_last_error(), "overflow");
    int64_t sizes2[2] = {INT64_MAX, 4}, str2[2] = {1, 1};
    c = ok;
    c.ndim = 2;
    c.sizes = sizes2;
    c.dst_strides = str2;
    c.src_strides = str2;
    CHECK_STATUS(trn_copy_launch(g_stream, &c), TRN_ERROR_INVALID_ARGUMENT);
    CHECK_OK(trn_copy_launch(g_stream, &ok));
    CHECK_OK(trn_stream_synchronize(g_stream));
}

// Copies big enough to be split across the pool: pieces start mid-row and
// mid-matrix, in the contiguous 16-bit conversion loops and the strided
// ones, and every element must come out as the scalar conversion gives it.
static void test_parallel_pieces(void) {
    enum { A = 3, B = 301, C = 101, N = A * B * C };  // 91203 elements
    float *src = malloc(sizeof(float) * N);
    uint16_t *dst = malloc(sizeof(uint16_t) * N);
    float *back = malloc(sizeof(float) * N);
    CHECK(src != NULL && dst != NULL && back != NULL);
    if (src == NULL || dst == NULL || back == NULL) goto done;
    uint32_t state = 12345;
    for (int i = 0; i < N; i++) {
        state = state * 1664525u + 1013904223u;  // every bit pattern class
        memcpy(&src[i], &state, 4);
    }
    for (int k = 0; k < 2; k++) {
        const trn_dtype half = k == 0 ? TRN_DTYPE_BF16 : TRN_DTYPE_F16;
        // Contiguous f32 -> 16-bit, then 16-bit -> f32 transposed (strided).
        int64_t n = N, one = 1;
        CHECK_OK(launch_nd(1, &n, dst, &one, half, src, &one, TRN_DTYPE_F32));
        int64_t sizes[3] = {A, C, B}, dstr[3] = {B * C, B, 1}, sstr[3] = {B * C, 1, C};
        CHECK_OK(launch_nd(3, sizes, back, dstr, TRN_DTYPE_F32, dst, sstr, half));
        CHECK_OK(trn_stream_synchronize(g_stream));
        int bad = 0;
        for (int a = 0; a < A; a++)
            for (int b = 0; b < B; b++)
                for (int c = 0; c < C; c++) {
                    const int i = (a * B + b) * C + c;
                    const uint16_t want = half == TRN_DTYPE_BF16 ? trn_float_to_bf16(src[i])
                                                                 : trn_float_to_half(src[i]);
                    const float wf =
                        half == TRN_DTYPE_BF16 ? trn_bf16_to_float(want) : trn_half_to_float(want);
                    const float got = back[(a * C + c) * B + b];
                    bad += dst[i] != want;
                    bad += memcmp(&got, &wf, 4) != 0;
                }
        CHECK_INT(bad, 0);
    }
done:
    free(src);
    free(dst);
    free(back);
}

// 2-d transposes go through cache tiles: sizes that are not multiples of
// the tile, each element size the tiles handle, both directions.
static void test_transpose_tiles(void) {
    enum { R = 75, C = 130 };
    static uint64_t src[R * C], dst[R * C];
    for (int i = 0; i < R * C; i++)
        src[i] = UINT64_C(0x0101010101010101) * (uint64_t)(i % 251) + (uint64_t)i;
    static const trn_dtype by_size[] = {TRN_DTYPE_I16, TRN_DTYPE_F32, TRN_DTYPE_I64};
    for (int k = 0; k < 3; k++) {
        const trn_dtype d = by_size[k];
        const size_t es = trn_dtype_size(d);
        for (int dir = 0; dir < 2; dir++) {
            // dir 0: dst [C][R] contiguous <- src [R][C] read transposed;
            // dir 1: dst written transposed, src read contiguously.
            int64_t sizes[2] = {C, R}, dstr[2] = {R, 1}, sstr[2] = {1, C};
            if (dir == 1)
                sizes[0] = R, sizes[1] = C, dstr[0] = 1, dstr[1] = R, sstr[0] = C, sstr[1] = 1;
            memset(dst, 0, sizeof dst);
            CHECK_OK(launch_nd(2, sizes, dst, dstr, d, src, sstr, d));
            CHECK_OK(trn_stream_synchronize(g_stream));
            int bad = 0;
            for (int r = 0; r < R; r++)
                for (int c = 0; c < C; c++)
                    bad += memcmp((const char *)dst + ((int64_t)c * R + r) * es,
                                  (const char *)src + ((int64_t)r * C + c) * es, es) != 0;
            CHECK_INT(bad, 0);
        }
    }
}

int main(void) {
    if (trn_stream_get_default(0, &g_stream) != TRN_SUCCESS) {
        fprintf(stderr, "no stream: %s\n", trn_last_error());
        return 1;
    }
    test_all_pairs();
    test_special_values();
    test_half_rounding();
    test_bf16_runs();
    test_complex();
    test_layouts();
    test_parallel_pieces();
    test_transpose_tiles();
    test_device_memory();
    test_invalid();
    return TEST_REPORT();
}
