// test_fp8_gemm.c - the 8-bit float conversions (trn/convert.h) at their
// edges, and the grouped-mm (plain and scaled) and scaled-mm kernels (trn/grouped_mm.h,
// trn/scaled_mm.h) on small cases against plain C loops. Expected codes
// come from PyTorch 2.13 CPU (tests/test_fp8_dtypes.py checks all of them).
#include <math.h>
#include <stdlib.h>

#include "test.h"
#include "trn/convert.h"
#include "trn/grouped_mm.h"
#include "trn/scaled_mm.h"

static trn_stream *g_stream;

static void test_conversions(void) {
    CHECK_INT(trn_float_to_fp8_e4m3fn(448.0f), 0x7E);
    CHECK_INT(trn_float_to_fp8_e4m3fn(1e9f), 0x7E);  // saturates
    CHECK_INT(trn_float_to_fp8_e4m3fn(-INFINITY), 0xFE);
    CHECK_INT(trn_float_to_fp8_e4m3fn(NAN), 0x7F);
    CHECK_INT(trn_float_to_fp8_e4m3fn(0x1p-10f), 0x00);   // half the smallest subnormal: even
    CHECK_INT(trn_float_to_fp8_e4m3fn(0x1.8p-9f), 0x02);  // 1.5 steps -> 2 (even)
    CHECK_INT(trn_float_to_fp8_e5m2(61440.0f), 0x7C);     // tie -> even -> inf
    CHECK_INT(trn_float_to_fp8_e5m2(61439.0f), 0x7B);
    CHECK_INT(trn_float_to_fp8_e4m3fnuz(-0.0f), 0x00);   // no -0
    CHECK_INT(trn_float_to_fp8_e4m3fnuz(248.0f), 0x80);  // rounds past 240 -> NaN
    CHECK_INT(trn_float_to_fp8_e5m2fnuz(INFINITY), 0x80);
    CHECK_INT(trn_float_to_fp8_e8m0fnu(1.5f), 128);   // exactly half, normal: up
    CHECK_INT(trn_float_to_fp8_e8m0fnu(-3.0f), 129);  // sign ignored; 1.5 x 2 -> 4
    CHECK_INT(trn_float_to_fp8_e8m0fnu(0.0f), 0);
    CHECK(trn_fp8_e4m3fn_to_float(0x7E) == 448.0f);
    CHECK(trn_fp8_e5m2_to_float(0x7C) == INFINITY);
    CHECK(trn_fp8_e4m3fnuz_to_float(0x01) == 0x1p-10f);
    CHECK(trn_fp8_e8m0fnu_to_float(0) == 0x1p-127f);
    CHECK_INT(trn_fp32_to_bits(trn_fp8_e4m3fn_to_float(0xFF)), 0xFFF00000u);
    CHECK_INT(trn_fp32_to_bits(trn_fp8_e5m2fnuz_to_float(0x80)), 0x7F800001u);
    // Every finite code round-trips.
    for (int c = 0; c < 256; c++) {
        if (c != 0x7F && c != 0xFF)
            CHECK_INT(trn_float_to_fp8_e4m3fn(trn_fp8_e4m3fn_to_float((uint8_t)c)), c);
        if (c != 0x80)
            CHECK_INT(trn_float_to_fp8_e4m3fnuz(trn_fp8_e4m3fnuz_to_float((uint8_t)c)), c);
    }
}

// 2D_3D: rows [0,3) use B[0], [3,3) none, [3,5) B[2].
static void test_grouped_mm(void) {
    enum { M = 5, K = 3, N = 2, G = 3 };
    float a[M * K], b[G * K * N], c[M * N], want[M * N];
    for (int i = 0; i < M * K; i++) a[i] = (float)(i % 7) - 3.0f;
    for (int i = 0; i < G * K * N; i++) b[i] = (float)(i % 5) * 0.5f;
    const int32_t offs[G] = {3, 3, 5};
    for (int i = 0; i < M; i++) {
        const int g = i < 3 ? 0 : 2;
        for (int j = 0; j < N; j++) {
            float s = 0;
            for (int p = 0; p < K; p++) s += a[i * K + p] * b[g * K * N + p * N + j];
            want[i * N + j] = s;
        }
    }
    trn_grouped_mm_desc d = {0};
    d.dtype = TRN_DTYPE_F32;
    d.layout = TRN_GMM_2D_3D;
    d.groups = G;
    d.m = M;
    d.n = N;
    d.k = K;
    d.a = a;
    d.a_strides[1] = K;
    d.a_strides[2] = 1;
    d.b = b;
    d.b_strides[0] = K * N;
    d.b_strides[1] = N;
    d.b_strides[2] = 1;
    d.c = c;
    d.c_strides[1] = N;
    d.c_strides[2] = 1;
    d.offs = offs;
    CHECK_OK(trn_grouped_mm_launch(g_stream, &d));
    CHECK_OK(trn_stream_synchronize(g_stream));
    for (int i = 0; i < M * N; i++) CHECK(c[i] == want[i]);
    // Decreasing offs fail the task, with the reason.
    const int32_t bad[G] = {3, 2, 5};
    d.offs = bad;
    CHECK_OK(trn_grouped_mm_launch(g_stream, &d));
    CHECK(trn_stream_synchronize(g_stream) == TRN_ERROR_INVALID_ARGUMENT);
    CHECK_CONTAINS(trn_last_error(), "non-decreasing");
    d.offs = NULL;
    CHECK(trn_grouped_mm_launch(g_stream, &d) == TRN_ERROR_INVALID_ARGUMENT);
    d.dtype = TRN_DTYPE_I32;
    d.offs = offs;
    CHECK(trn_grouped_mm_launch(g_stream, &d) == TRN_ERROR_UNSUPPORTED);
}

// 2D_3D scaled grouped product: e4m3fn A, column-major e5m2 B, rows [0,2)
// group 0, group 1 empty, [2,4) group 2, row 4 past offs (zeros); the
// expected values are the float32 sums (exact here: small integers and
// halves), times scale_a[row] then scale_b[group, col].
static void test_scaled_grouped_mm(void) {
    enum { M = 5, K = 4, N = 3, G = 3 };
    uint8_t a[M * K], b[G * N * K];  // b stored (G, N, K): read as (G, K, N)
    float sa[M], sb[G * N], c[M * N];
    for (int i = 0; i < M * K; i++) a[i] = trn_float_to_fp8_e4m3fn((float)(i % 5) - 2.0f);
    for (int i = 0; i < G * N * K; i++) b[i] = trn_float_to_fp8_e5m2((float)(i % 3) * 0.5f);
    for (int i = 0; i < M; i++) sa[i] = 0.25f * (float)(i + 1);
    for (int i = 0; i < G * N; i++) sb[i] = 2.0f + (float)i;
    const int32_t offs[G] = {2, 2, 4};
    trn_scaled_grouped_mm_desc d = {0};
    d.a_dtype = TRN_DTYPE_F8E4M3FN;
    d.b_dtype = TRN_DTYPE_F8E5M2;
    d.out_dtype = TRN_DTYPE_F32;
    d.layout = TRN_GMM_2D_3D;
    d.groups = G;
    d.m = M;
    d.n = N;
    d.k = K;
    d.a = a;
    d.a_strides[1] = K;
    d.a_strides[2] = 1;
    d.b = b;
    d.b_strides[0] = N * K;
    d.b_strides[1] = 1;
    d.b_strides[2] = K;
    d.c = c;
    d.scale_a = sa;
    d.scale_b = sb;
    d.offs = offs;
    CHECK_OK(trn_scaled_grouped_mm_launch(g_stream, &d));
    CHECK_OK(trn_stream_synchronize(g_stream));
    for (int i = 0; i < M; i++) {
        const int g = i < 2 ? 0 : 2;
        for (int j = 0; j < N; j++) {
            float s = 0;
            for (int p = 0; p < K; p++)
                s += trn_fp8_e4m3fn_to_float(a[i * K + p]) *
                     trn_fp8_e5m2_to_float(b[g * N * K + j * K + p]);
            const float want = i < 4 ? (s * sa[i]) * sb[g * N + j] : 0.0f;
            CHECK(c[i * N + j] == want);
        }
    }
    d.layout = TRN_GMM_3D_2D;
    CHECK(trn_scaled_grouped_mm_launch(g_stream, &d) == TRN_ERROR_UNSUPPORTED);
    d.layout = TRN_GMM_2D_3D;
    d.a_dtype = TRN_DTYPE_F8E8M0FNU;
    CHECK(trn_scaled_grouped_mm_launch(g_stream, &d) == TRN_ERROR_UNSUPPORTED);
    d.a_dtype = TRN_DTYPE_F8E4M3FN;
    d.offs = NULL;
    CHECK(trn_scaled_grouped_mm_launch(g_stream, &d) == TRN_ERROR_INVALID_ARGUMENT);
}

// Rowwise scales, a column-major B and a bfloat16 output.
static void test_scaled_mm(void) {
    enum { M = 4, K = 8, N = 3 };
    uint8_t a[M * K], b[N * K];
    for (int i = 0; i < M * K; i++) a[i] = trn_float_to_fp8_e4m3fn((float)(i % 9) - 4.0f);
    for (int i = 0; i < N * K; i++) b[i] = trn_float_to_fp8_e5m2((float)(i % 4) * 0.25f);
    const float sa[M] = {1.0f, 0.5f, 2.0f, 4.0f}, sb[N] = {0.25f, 1.0f, 8.0f};
    uint16_t c[M * N];
    trn_scaled_mm_desc d = {0};
    d.a_dtype = TRN_DTYPE_F8E4M3FN;
    d.b_dtype = TRN_DTYPE_F8E5M2;
    d.out_dtype = TRN_DTYPE_BF16;
    d.m = M;
    d.n = N;
    d.k = K;
    d.a = a;
    d.a_strides[0] = K;
    d.a_strides[1] = 1;
    d.b = b;  // B[p][j] at b[j * K + p]
    d.b_strides[0] = 1;
    d.b_strides[1] = K;
    d.c = c;
    d.c_strides[0] = N;
    d.c_strides[1] = 1;
    d.scale_a = sa;
    d.scale_a_count = M;
    d.scale_a_stride = 1;
    d.scale_b = sb;
    d.scale_b_count = N;
    d.scale_b_stride = 1;
    CHECK_OK(trn_scaled_mm_launch(g_stream, &d));
    CHECK_OK(trn_stream_synchronize(g_stream));
    for (int i = 0; i < M; i++)
        for (int j = 0; j < N; j++) {
            float s = 0;
            for (int p = 0; p < K; p++)
                s += trn_fp8_e4m3fn_to_float(a[i * K + p]) * trn_fp8_e5m2_to_float(b[j * K + p]);
            CHECK_INT(c[i * N + j], trn_float_to_bf16(s * sa[i] * sb[j]));
        }
    d.scale_a_count = 2;  // neither 1 nor m
    CHECK(trn_scaled_mm_launch(g_stream, &d) == TRN_ERROR_INVALID_ARGUMENT);
    d.scale_a_count = M;
    d.a_dtype = TRN_DTYPE_F8E8M0FNU;
    CHECK(trn_scaled_mm_launch(g_stream, &d) == TRN_ERROR_UNSUPPORTED);
}

// MX block scales: K = 40 (two blocks, the second of 8), one row tile and
// one K tile of the swizzled layout (512 bytes each). Small exponents (the
// folded path) and then extreme ones (block by block), against a plain
// loop; power-of-two scales make the expected sums exact.
static void test_scaled_mm_mx(void) {
    enum { M = 3, K = 40, N = 2, KB = 2 };
    uint8_t a[M * K], b[K * N], sa[512] = {0}, sb[512] = {0};
    for (int i = 0; i < M * K; i++) a[i] = trn_float_to_fp8_e4m3fn((float)(i % 5) - 2.0f);
    for (int i = 0; i < K * N; i++) b[i] = trn_float_to_fp8_e5m2((float)(i % 3) - 1.0f);
    const int codes[2][2] = {{127, 129}, {254, 1}};  // {a, b} exponents per pass
    for (int pass = 0; pass < 2; pass++) {
        for (int r = 0; r < 3; r++)
            for (int c = 0; c < KB; c++) {
                // row r, block c of a 128x4 tile: (r % 32) * 16 + (r / 32) * 4 + c
                sa[r * 16 + c] = (uint8_t)(codes[pass][0] - c);
                if (r < N) sb[r * 16 + c] = (uint8_t)(codes[pass][1] + c);
            }
        float c[M * N];
        trn_scaled_mm_desc d = {0};
        d.a_dtype = TRN_DTYPE_F8E4M3FN;
        d.b_dtype = TRN_DTYPE_F8E5M2;
        d.out_dtype = TRN_DTYPE_F32;
        d.m = M;
        d.n = N;
        d.k = K;
        d.a = a;
        d.a_strides[0] = K;
        d.a_strides[1] = 1;
        d.b = b;  // row-major K x N
        d.b_strides[0] = N;
        d.b_strides[1] = 1;
        d.c = c;
        d.c_strides[0] = N;
        d.c_strides[1] = 1;
        d.mx_scale_a = sa;
        d.mx_scale_b = sb;
        CHECK_OK(trn_scaled_mm_launch(g_stream, &d));
        CHECK_OK(trn_stream_synchronize(g_stream));
        for (int i = 0; i < M; i++)
            for (int j = 0; j < N; j++) {
                double s = 0;
                for (int p = 0; p < K; p++)
                    s += ldexp((double)trn_fp8_e4m3fn_to_float(a[i * K + p]) *
                                   trn_fp8_e5m2_to_float(b[p * N + j]),
                               sa[i * 16 + p / 32] + sb[j * 16 + p / 32] - 254);
                CHECK(c[i * N + j] == (float)s);
            }
        if (pass == 1) {
            d.mx_scale_b = NULL;  // one MX scale only
            CHECK(trn_scaled_mm_launch(g_stream, &d) == TRN_ERROR_INVALID_ARGUMENT);
            d.mx_scale_b = sb;
            d.a_dtype = TRN_DTYPE_F8E4M3FNUZ;  // MX takes the OCP formats only
            CHECK(trn_scaled_mm_launch(g_stream, &d) == TRN_ERROR_UNSUPPORTED);
        }
    }
    CHECK_INT(trn_scaled_mm_mx_scale_bytes(3, 40), 512);
    CHECK_INT(trn_scaled_mm_mx_scale_bytes(129, 160), 2048);
}

int main(void) {
    if (trn_stream_get_default(0, &g_stream) != TRN_SUCCESS) {
        fprintf(stderr, "no stream: %s\n", trn_last_error());
        return 1;
    }
    test_conversions();
    test_grouped_mm();
    test_scaled_grouped_mm();
    test_scaled_mm();
    test_scaled_mm_mx();
    return TEST_REPORT();
}
