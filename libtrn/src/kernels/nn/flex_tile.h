// nn/flex_tile.h - owns the tile product of the flex attention kernel
// (flex_attention.c): C[m][n] (+)= A . B with the operand layout of
// blas/tile_mm.h's trn_tile_mm (A read as A[r * ars + p * acs], B and C
// row-major), in 16-float vectors where the CPU has AVX-512F and n is a
// multiple of 32, else trn_tile_mm. Private to src/kernels.
//
// Why not trn_tile_mm alone: its 6 x 32 block in 8-float vectors needs 24
// accumulators plus 4 B vectors, and GCC folds the B loads into the
// multiply-adds (24 loads and 6 broadcasts per k step), which makes the
// flex forward's 64 x 64 x 64 tiles load-bound on Zen 4 (perf: half the
// FMA rate). An 8 x 32 block in 16-float vectors holds 16 accumulators and
// 2 B vectors with registers to spare: per k step 2 loads, 8 broadcasts
// and 16 multiply-adds of twice the width.
#ifndef TRN_KERNELS_NN_FLEX_TILE_H
#define TRN_KERNELS_NN_FLEX_TILE_H

#include <stdint.h>

#include "../blas/tile_mm.h"

#if defined(__AVX512F__)
#include <immintrin.h>

// Accumulators of row r as named variables (an array was kept on the stack;
// see tile_mm.h).
#define FLEX__DECL(r) __m512 c##r##0, c##r##1
#define FLEX__INIT(r)                                                                              \
    do {                                                                                           \
        if (accumulate) {                                                                          \
            c##r##0 = _mm512_loadu_ps(c + (r)*ldc);                                                \
            c##r##1 = _mm512_loadu_ps(c + (r)*ldc + 16);                                           \
        } else {                                                                                   \
            c##r##0 = c##r##1 = _mm512_setzero_ps();                                               \
        }                                                                                          \
    } while (0)
#define FLEX__STEP(r)                                                                              \
    do {                                                                                           \
        const __m512 av = _mm512_set1_ps(a[(r)*ars + p * acs]);                                    \
        c##r##0 = _mm512_fmadd_ps(av, b0, c##r##0);                                                \
        c##r##1 = _mm512_fmadd_ps(av, b1, c##r##1);                                                \
    } while (0)
#define FLEX__STORE(r)                                                                             \
    do {                                                                                           \
        _mm512_storeu_ps(c + (r)*ldc, c##r##0);                                                    \
        _mm512_storeu_ps(c + (r)*ldc + 16, c##r##1);                                               \
    } while (0)

// Rows [0, 8) x columns [0, 32) of C.
static inline void trn__flex_mm_8x32(int64_t k, const float *a, int64_t ars, int64_t acs,
                                     const float *b, int64_t ldb, float *c, int64_t ldc,
                                     int accumulate) {
    FLEX__DECL(0);
    FLEX__DECL(1);
    FLEX__DECL(2);
    FLEX__DECL(3);
    FLEX__DECL(4);
    FLEX__DECL(5);
    FLEX__DECL(6);
    FLEX__DECL(7);
    FLEX__INIT(0);
    FLEX__INIT(1);
    FLEX__INIT(2);
    FLEX__INIT(3);
    FLEX__INIT(4);
    FLEX__INIT(5);
    FLEX__INIT(6);
    FLEX__INIT(7);
    for (int64_t p = 0; p < k; p++) {
        const __m512 b0 = _mm512_loadu_ps(b + p * ldb);
        const __m512 b1 = _mm512_loadu_ps(b + p * ldb + 16);
        FLEX__STEP(0);
        FLEX__STEP(1);
        FLEX__STEP(2);
        FLEX__STEP(3);
        FLEX__STEP(4);
        FLEX__STEP(5);
        FLEX__STEP(6);
        FLEX__STEP(7);
    }
    FLEX__STORE(0);
    FLEX__STORE(1);
    FLEX__STORE(2);
    FLEX__STORE(3);
    FLEX__STORE(4);
    FLEX__STORE(5);
    FLEX__STORE(6);
    FLEX__STORE(7);
}

// One row x 32 columns (the rows past the last block of 8).
static inline void trn__flex_mm_1x32(int64_t k, const float *a, int64_t acs, const float *b,
                                     int64_t ldb, float *c, int accumulate) {
    const int64_t ars = 0, ldc = 0;
    (void)ars;
    (void)ldc;
    FLEX__DECL(0);
    FLEX__INIT(0);
    for (int64_t p = 0; p < k; p++) {
        const __m512 b0 = _mm512_loadu_ps(b + p * ldb);
        const __m512 b1 = _mm512_loadu_ps(b + p * ldb + 16);
        FLEX__STEP(0);
    }
    FLEX__STORE(0);
}
#undef FLEX__DECL
#undef FLEX__INIT
#undef FLEX__STEP
#undef FLEX__STORE
#endif

static inline void trn__flex_mm(int64_t m, int64_t n, int64_t k, const float *a, int64_t ars,
                                int64_t acs, const float *b, int64_t ldb, float *c, int64_t ldc,
                                int accumulate) {
#if defined(__AVX512F__)
    if (n % 32 == 0) {
        for (int64_t j = 0; j < n; j += 32) {
            int64_t i = 0;
            for (; i + 8 <= m; i += 8)
                trn__flex_mm_8x32(k, a + i * ars, ars, acs, b + j, ldb, c + i * ldc + j, ldc,
                                  accumulate);
            for (; i < m; i++)
                trn__flex_mm_1x32(k, a + i * ars, acs, b + j, ldb, c + i * ldc + j, accumulate);
        }
        return;
    }
#endif
    trn_tile_mm(m, n, k, a, ars, acs, b, ldb, c, ldc, accumulate);
}

#endif
