// test_attn_mm.c - the fused attention's AVX-512 tile products
// (src/kernels/nn/attn_mm.h) give blas/tile_mm.h's bits: every element the
// same fused multiply-add chain, causal bands included, and the epilogue's
// additions (the dK / dV chain sums) in the order of the pass they replace.
// The test build has no -march, so this file asks for AVX-512 itself and
// skips where the CPU lacks it.
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "test.h"

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#pragma GCC push_options
#pragma GCC target("avx2,fma,avx512f")
#include "kernels/nn/attn_mm.h"

static float rnd(unsigned *s) {
    *s = *s * 1103515245u + 12345u;
    return (float)((*s >> 8) & 0xFFFF) / 32768.0f - 1.0f;
}

static int same_bits(const float *x, const float *y, int64_t m, int64_t n, int64_t ldx,
                     int64_t ldy) {
    for (int64_t i = 0; i < m; i++)
        if (memcmp(x + i * ldx, y + i * ldy, (size_t)n * sizeof(float)) != 0) return 0;
    return 1;
}

// attn_mm_band vs tile_mm_band: shapes with tails past 64 / 16 / 8
// columns, both A layouts, accumulate on and off, the three causal bands.
static void test_band_bits(void) {
    const int64_t shapes[][3] = {{64, 64, 64}, {64, 64, 16}, {37, 80, 23}, {6, 16, 5},
                                 {70, 72, 64}, {5, 24, 40},  {1, 96, 3},   {64, 40, 64}};
    unsigned seed = 7;
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        const int64_t m = shapes[s][0], n = shapes[s][1], k = shapes[s][2];
        const int64_t ld = 128;  // rows wider than the tile, as views of [B, L, H, E]
        float *a = malloc(sizeof(float) * (size_t)(ld * ld));
        float *b = malloc(sizeof(float) * (size_t)(ld * ld));
        float *c0 = malloc(sizeof(float) * (size_t)(ld * ld));
        float *c1 = malloc(sizeof(float) * (size_t)(ld * ld));
        CHECK(a && b && c0 && c1);
        if (!a || !b || !c0 || !c1) return;
        for (int64_t i = 0; i < ld * ld; i++) {
            a[i] = rnd(&seed);
            b[i] = rnd(&seed);
            c0[i] = rnd(&seed);
        }
        for (int tr = 0; tr < 2; tr++)
            for (int acc = 0; acc < 2; acc++)
                for (int band = 0; band < 4; band++) {
                    trn_tile_band bd = {-TRN_TILE_UNBOUNDED, TRN_TILE_UNBOUNDED,
                                        -TRN_TILE_UNBOUNDED};
                    if (band == 1) bd.clo = -3;
                    if (band == 2) bd.plo = 5;
                    if (band == 3) bd.phi = -2;
                    const int64_t ars = tr ? 1 : ld, acs = tr ? ld : 1;
                    memcpy(c1, c0, sizeof(float) * (size_t)(ld * ld));
                    float *c2 = malloc(sizeof(float) * (size_t)(ld * ld));
                    CHECK(c2 != NULL);
                    if (!c2) continue;
                    memcpy(c2, c0, sizeof(float) * (size_t)(ld * ld));
                    trn_tile_mm_band(m, n, k, a, ars, acs, b, ld, c1, ld, acc, bd);
                    trn__attn_mm_band(m, n, k, a, ars, acs, b, ld, c2, ld, acc, bd);
                    // Columns a band leaves out may differ (left unwritten
                    // by one, computed by the other); every other one not.
                    int ok = 1;
                    for (int64_t i = 0; i < m; i++)
                        for (int64_t j = (band == 1 ? (i - 3 > 0 ? i - 3 : 0) : 0); j < n; j++)
                            if (memcmp(c1 + i * ld + j, c2 + i * ld + j, sizeof(float)) != 0)
                                ok = 0;
                    if (!ok)
                        fprintf(stderr, "attn_mm %lld x %lld x %lld tr %d acc %d band %d differs\n",
                                (long long)m, (long long)n, (long long)k, tr, acc, band);
                    CHECK(ok);
                    free(c2);
                }
        free(a);
        free(b);
        free(c0);
        free(c1);
    }
}

// The epilogue: chains of 16 terms from zero, added as kv_product's pass
// did, (x0 + x1) + (x2 + x3), then onto C (or as C).
static void test_epilogue_pairwise(void) {
    enum { M = 64, N = 64, K = 64, C = 16 };
    static float a[M * K], b[K * N], c[M * N], want[M * N], x[4][M * N], t[4][M * N];
    unsigned seed = 11;
    for (int i = 0; i < M * K; i++) a[i] = rnd(&seed);
    for (int i = 0; i < K * N; i++) b[i] = rnd(&seed);
    for (int nc = 2; nc <= 4; nc++)
        for (int acc = 0; acc < 2; acc++) {
            for (int i = 0; i < M * N; i++) c[i] = want[i] = rnd(&seed);
            for (int q = 0; q < nc; q++)
                trn_tile_mm(M, N, C, a + q * C, K, 1, b + q * C * N, N, x[q], N, 0);
            for (int i = 0; i < M * N; i++) {
                const float s = nc == 2   ? x[0][i] + x[1][i]
                                : nc == 3 ? (x[0][i] + x[1][i]) + x[2][i]
                                          : (x[0][i] + x[1][i]) + (x[2][i] + x[3][i]);
                want[i] = acc ? want[i] + s : s;
            }
            // attention.c's kv_product: the same stores (trn__attn_chain_dst).
            const trn_tile_band all = {-TRN_TILE_UNBOUNDED, TRN_TILE_UNBOUNDED,
                                       -TRN_TILE_UNBOUNDED};
            float *const tp[4] = {t[0], t[1], t[2], t[3]};
            for (int q = 0; q < nc; q++) {
                trn__attn_mm_ep ep;
                int64_t ldd;
                float *dst = trn__attn_chain_dst(q, nc, tp, N, c, N, acc, &ep, &ldd);
                trn__attn_mm_ep_band(M, N, C, a + q * C, K, 1, b + q * C * N, N, dst, ldd, all,
                                     &ep);
            }
            CHECK(same_bits(c, want, M, N, N, N));
        }
}

static int run_avx512(void) {
    test_band_bits();
    test_epilogue_pairwise();
    return 1;
}
#pragma GCC pop_options
#else
static int run_avx512(void) { return 0; }
#endif

int main(void) {
    int ran = 0;
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx512f")) ran = run_avx512();
#endif
    if (!ran) printf("no AVX-512 here: the tile products are tile_mm.h's own\n");
    TEST_REPORT();
}
