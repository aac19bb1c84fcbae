// test_compiler_fp8.c - 8-bit floats in generated code: casts to them
// (float32 -> every format, rounding as trn/convert.h's eager conversions,
// bit for bit), back to float32, a copy of every code (e5m2 NaN payloads
// kept), an 8-bit constant, and the builder refusing what generated code does
// not make (arithmetic, reductions, float8 -> bfloat16 / integer casts).
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "compiler_test.h"
#include "trn/convert.h"

enum { N = 1024 };

static const trn_dtype FORMATS[] = {TRN_DTYPE_F8E4M3FN, TRN_DTYPE_F8E5M2, TRN_DTYPE_F8E4M3FNUZ,
                                    TRN_DTYPE_F8E5M2FNUZ, TRN_DTYPE_F8E8M0FNU};

static uint8_t to_fp8(trn_dtype d, float f) {
    switch (d) {
    case TRN_DTYPE_F8E4M3FN: return trn_float_to_fp8_e4m3fn(f);
    case TRN_DTYPE_F8E5M2: return trn_float_to_fp8_e5m2(f);
    case TRN_DTYPE_F8E4M3FNUZ: return trn_float_to_fp8_e4m3fnuz(f);
    case TRN_DTYPE_F8E5M2FNUZ: return trn_float_to_fp8_e5m2fnuz(f);
    default: return trn_float_to_fp8_e8m0fnu(f);
    }
}

static float from_fp8(trn_dtype d, uint8_t c) {
    switch (d) {
    case TRN_DTYPE_F8E4M3FN: return trn_fp8_e4m3fn_to_float(c);
    case TRN_DTYPE_F8E5M2: return trn_fp8_e5m2_to_float(c);
    case TRN_DTYPE_F8E4M3FNUZ: return trn_fp8_e4m3fnuz_to_float(c);
    case TRN_DTYPE_F8E5M2FNUZ: return trn_fp8_e5m2fnuz_to_float(c);
    default: return trn_fp8_e8m0fnu_to_float(c);
    }
}

// x (float32) -> y = fp8(x), z = float32(y); w = copy of the codes c; k = a
// constant 0.3 as fp8.
static void test_format(trn_dtype d) {
    trn_graph *g;
    CHECK_INT(trn_graph_create(&g), TRN_SUCCESS);
    int64_t n[1] = {N}, st[1] = {1};
    int x, c, y, z, w, k, kc;
    CHECK_INT(trn_graph_input(g, TRN_DTYPE_F32, 1, n, st, &x), TRN_SUCCESS);
    CHECK_INT(trn_graph_input(g, d, 1, n, st, &c), TRN_SUCCESS);
    CHECK_INT(trn_graph_cast(g, x, d, &y), TRN_SUCCESS);
    CHECK_INT(trn_graph_cast(g, y, TRN_DTYPE_F32, &z), TRN_SUCCESS);
    CHECK_INT(trn_graph_cast(g, c, d, &w), TRN_SUCCESS);
    CHECK_INT(trn_graph_const(g, d, 0.3, 0, 1, n, &kc), TRN_SUCCESS);
    CHECK_INT(trn_graph_cast(g, kc, d, &k), TRN_SUCCESS);
    int outs[4] = {y, z, w, k};
    for (int i = 0; i < 4; i++) CHECK_INT(trn_graph_export(g, outs[i], NULL), TRN_SUCCESS);
    // Refused: the op runs as a host step instead.
    int r;
    CHECK_INT(trn_graph_pointwise(g, TRN_EW_ABS, TRN_DTYPE_F32, TRN_DTYPE_F32, 1, &c, NULL, &r),
              TRN_ERROR_UNSUPPORTED);
    CHECK_INT(trn_graph_reduce(g, TRN_GRAPH_MAX, c, d, 1, &r), TRN_ERROR_UNSUPPORTED);
    CHECK_INT(trn_graph_cast(g, c, TRN_DTYPE_BF16, &r), TRN_ERROR_UNSUPPORTED);
    CHECK_INT(trn_graph_cast(g, c, TRN_DTYPE_I32, &r), TRN_ERROR_UNSUPPORTED);
    trn_clear_error();
    trn_program *p = compile_named(g, NULL, "fp8");
    trn_graph_free(g);
    if (!p) return;
    float *X = malloc(N * sizeof(float)), *Z = malloc(N * sizeof(float));
    uint8_t C[N], Y[N], W[N], K[N];
    for (int i = 0; i < N; i++) {
        // Magnitudes over the formats' range, both signs, and specials.
        X[i] = ldexpf(1.0f + (float)(i % 37) / 37.0f, (i % 61) - 30) * (i & 1 ? -1.0f : 1.0f);
        C[i] = (uint8_t)i;
    }
    X[0] = NAN, X[2] = INFINITY, X[4] = -INFINITY, X[6] = -0.0f, X[8] = 1e30f;
    CHECK_INT(run_status(p, (int[]){x, c, y, z, w, k}, (void *[]){X, C, Y, Z, W, K}, 6),
              TRN_SUCCESS);
    int bad = 0;
    for (int i = 0; i < N; i++) {
        const uint8_t e = to_fp8(d, X[i]);
        const float ez = from_fp8(d, e);
        bad += Y[i] != e;
        bad += memcmp(&Z[i], &ez, sizeof ez) != 0;
        bad += W[i] != C[i];
        bad += K[i] != to_fp8(d, 0.3f);
    }
    CHECK_INT(bad, 0);
    free(X);
    free(Z);
    trn_program_free(p);
}

int main(void) {
    find_include_dir();
    for (size_t i = 0; i < sizeof FORMATS / sizeof FORMATS[0]; i++) test_format(FORMATS[i]);
    return TEST_REPORT();
}
