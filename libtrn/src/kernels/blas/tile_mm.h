// tile_mm.h - register-blocked float32 product of small tiles, for kernels
// that walk a larger problem tile by tile (fused attention). Calling a
// library GEMM per 64 x 64 tile costs more in dispatch than the product;
// the naive triple loop reloads and stores C once per multiply-add.
//
// C[m][n] (+)= A . B, with A read as A[r * ars + p * acs] (so a transposed
// operand costs nothing: ars = 1), B row-major (B[p * ldb + j]) and C
// row-major. The inner kernel keeps a 6 x 32 block of C in vector
// registers over the whole k loop: per step 4 loads of B, 6 broadcasts of A
// and 24 fused multiply-adds (1.8x the rate of a 4 x 32 block on Zen,
// measured; with AVX-512VL's 32 vector registers nothing spills).
#ifndef TRN_KERNELS_TILE_MM_H
#define TRN_KERNELS_TILE_MM_H

#include <math.h>
#include <stdint.h>

#if defined(__AVX2__) && defined(__FMA__)
#include <immintrin.h>

// Blocks of R rows x 32 columns. The accumulators are named variables, not
// an array: GCC kept an array's copy on the stack and stored it on every k
// step (2x slower).
#define TRN__MM_DECL(r) __m256 c##r##0, c##r##1, c##r##2, c##r##3
#define TRN__MM_INIT(r)                                                                            \
    do {                                                                                           \
        if (accumulate) {                                                                          \
            c##r##0 = _mm256_loadu_ps(c + (r)*ldc);                                                \
            c##r##1 = _mm256_loadu_ps(c + (r)*ldc + 8);                                            \
            c##r##2 = _mm256_loadu_ps(c + (r)*ldc + 16);                                           \
            c##r##3 = _mm256_loadu_ps(c + (r)*ldc + 24);                                           \
        } else {                                                                                   \
            c##r##0 = c##r##1 = c##r##2 = c##r##3 = _mm256_setzero_ps();                           \
        }                                                                                          \
    } while (0)
#define TRN__MM_STEP(r)                                                                            \
    do {                                                                                           \
        const __m256 av = _mm256_broadcast_ss(a + (r)*ars + p * acs);                              \
        c##r##0 = _mm256_fmadd_ps(av, b0, c##r##0);                                                \
        c##r##1 = _mm256_fmadd_ps(av, b1, c##r##1);                                                \
        c##r##2 = _mm256_fmadd_ps(av, b2, c##r##2);                                                \
        c##r##3 = _mm256_fmadd_ps(av, b3, c##r##3);                                                \
    } while (0)
#define TRN__MM_STORE(r)                                                                           \
    do {                                                                                           \
        _mm256_storeu_ps(c + (r)*ldc, c##r##0);                                                    \
        _mm256_storeu_ps(c + (r)*ldc + 8, c##r##1);                                                \
        _mm256_storeu_ps(c + (r)*ldc + 16, c##r##2);                                               \
        _mm256_storeu_ps(c + (r)*ldc + 24, c##r##3);                                               \
    } while (0)
#define TRN__MM_LOADB()                                                                            \
    const __m256 b0 = _mm256_loadu_ps(b + p * ldb);                                                \
    const __m256 b1 = _mm256_loadu_ps(b + p * ldb + 8);                                            \
    const __m256 b2 = _mm256_loadu_ps(b + p * ldb + 16);                                           \
    const __m256 b3 = _mm256_loadu_ps(b + p * ldb + 24)

static inline void trn__tile_mm_6x32(int64_t k, const float *a, int64_t ars, int64_t acs,
                                     const float *b, int64_t ldb, float *c, int64_t ldc,
                                     int accumulate) {
    TRN__MM_DECL(0);
    TRN__MM_DECL(1);
    TRN__MM_DECL(2);
    TRN__MM_DECL(3);
    TRN__MM_DECL(4);
    TRN__MM_DECL(5);
    TRN__MM_INIT(0);
    TRN__MM_INIT(1);
    TRN__MM_INIT(2);
    TRN__MM_INIT(3);
    TRN__MM_INIT(4);
    TRN__MM_INIT(5);
    for (int64_t p = 0; p < k; p++) {
        TRN__MM_LOADB();
        TRN__MM_STEP(0);
        TRN__MM_STEP(1);
        TRN__MM_STEP(2);
        TRN__MM_STEP(3);
        TRN__MM_STEP(4);
        TRN__MM_STEP(5);
    }
    TRN__MM_STORE(0);
    TRN__MM_STORE(1);
    TRN__MM_STORE(2);
    TRN__MM_STORE(3);
    TRN__MM_STORE(4);
    TRN__MM_STORE(5);
}
static inline void trn__tile_mm_4x32(int64_t k, const float *a, int64_t ars, int64_t acs,
                                     const float *b, int64_t ldb, float *c, int64_t ldc,
                                     int accumulate) {
    TRN__MM_DECL(0);
    TRN__MM_DECL(1);
    TRN__MM_DECL(2);
    TRN__MM_DECL(3);
    TRN__MM_INIT(0);
    TRN__MM_INIT(1);
    TRN__MM_INIT(2);
    TRN__MM_INIT(3);
    for (int64_t p = 0; p < k; p++) {
        TRN__MM_LOADB();
        TRN__MM_STEP(0);
        TRN__MM_STEP(1);
        TRN__MM_STEP(2);
        TRN__MM_STEP(3);
    }
    TRN__MM_STORE(0);
    TRN__MM_STORE(1);
    TRN__MM_STORE(2);
    TRN__MM_STORE(3);
}
static inline void trn__tile_mm_1x32(int64_t k, const float *a, int64_t ars, int64_t acs,
                                     const float *b, int64_t ldb, float *c, int64_t ldc,
                                     int accumulate) {
    TRN__MM_DECL(0);
    TRN__MM_INIT(0);
    for (int64_t p = 0; p < k; p++) {
        TRN__MM_LOADB();
        TRN__MM_STEP(0);
    }
    TRN__MM_STORE(0);
}
// One row x 8 columns (the columns past the last block of 32).
static inline void trn__tile_mm_1x8(int64_t k, const float *a, int64_t acs, const float *b,
                                    int64_t ldb, float *c, int accumulate) {
    __m256 acc = accumulate ? _mm256_loadu_ps(c) : _mm256_setzero_ps();
    for (int64_t p = 0; p < k; p++)
        acc = _mm256_fmadd_ps(_mm256_broadcast_ss(a + p * acs), _mm256_loadu_ps(b + p * ldb), acc);
    _mm256_storeu_ps(c, acc);
}

static inline int64_t trn__tile_mm_simd_cols(int64_t n) { return n / 8 * 8; }
#else
static inline int64_t trn__tile_mm_simd_cols(int64_t n) {
    (void)n;
    return 0;
}
#endif

// Band limits for causal tiles: row r of C needs only the terms p in
// [r + plo, r + phi] (the others multiply zeros) and only the columns
// >= r + clo (the others are masked out afterwards, so they are left
// unwritten). A block of rows runs the union of its rows' ranges.
typedef struct trn_tile_band {
    int64_t plo, phi, clo;
} trn_tile_band;
#define TRN_TILE_UNBOUNDED (INT64_C(1) << 60)

static inline void trn__tile_range(const trn_tile_band *bd, int64_t i, int64_t rows, int64_t k,
                                   int64_t *p0, int64_t *p1) {
    const int64_t lo = i + bd->plo, hi = i + rows + bd->phi;
    *p0 = lo > 0 ? lo : 0;
    *p1 = hi < k ? hi : k;
    if (*p1 < *p0) *p1 = *p0;
}

static inline void trn_tile_mm_band(int64_t m, int64_t n, int64_t k, const float *a, int64_t ars,
                                    int64_t acs, const float *b, int64_t ldb, float *c, int64_t ldc,
                                    int accumulate, trn_tile_band bd) {
    const int64_t nv = trn__tile_mm_simd_cols(n);
    int64_t p0, p1;
#if defined(__AVX2__) && defined(__FMA__)
#define TRN__TILE_CALL(KERNEL, ROWS)                                                               \
    do {                                                                                           \
        trn__tile_range(&bd, i, ROWS, k, &p0, &p1);                                                \
        if (j + 32 > i + bd.clo && (p1 > p0 || !accumulate))                                       \
            KERNEL(p1 - p0, a + i * ars + p0 * acs, ars, acs, b + p0 * ldb + j, ldb,               \
                   c + i * ldc + j, ldc, accumulate);                                              \
    } while (0)
    int64_t j = 0;
    for (; j + 32 <= nv; j += 32) {
        int64_t i = 0;
        for (; i + 6 <= m; i += 6) TRN__TILE_CALL(trn__tile_mm_6x32, 6);
        for (; i + 4 <= m; i += 4) TRN__TILE_CALL(trn__tile_mm_4x32, 4);
        for (; i < m; i++) TRN__TILE_CALL(trn__tile_mm_1x32, 1);
    }
#undef TRN__TILE_CALL
    for (; j < nv; j += 8)
        for (int64_t i = 0; i < m; i++) {
            trn__tile_range(&bd, i, 1, k, &p0, &p1);
            if (j + 8 > i + bd.clo && (p1 > p0 || !accumulate))
                trn__tile_mm_1x8(p1 - p0, a + i * ars + p0 * acs, acs, b + p0 * ldb + j, ldb,
                                 c + i * ldc + j, accumulate);
        }
#endif
    // Columns past the last full vector (and every column without AVX2/FMA).
    // Each element is one fused multiply-add chain over p in order; the chain
    // lives in a register (through C in memory it paid a store-to-load round
    // trip per step), and four rows' chains run interleaved where the band
    // gives them the same terms: a decode step's attention scores (one query
    // column, S^T = K . q) are all tail. The order within each chain, and so
    // every bit, is that of one row at a time.
    if (nv < n) {
        int64_t i = 0;
        for (; i + 4 <= m; i += 4) {
            int64_t q0, q1;
            trn__tile_range(&bd, i, 1, k, &p0, &p1);
            trn__tile_range(&bd, i + 3, 1, k, &q0, &q1);
            if (q0 != p0 || q1 != p1) break;  // banded rows: one at a time below
            const float *a0 = a + i * ars, *a1 = a0 + ars, *a2 = a1 + ars, *a3 = a2 + ars;
            for (int64_t jj = nv; jj < n; jj++) {
                float *cr = c + i * ldc + jj;
                float s0 = accumulate ? cr[0] : 0.0f, s1 = accumulate ? cr[ldc] : 0.0f;
                float s2 = accumulate ? cr[2 * ldc] : 0.0f, s3 = accumulate ? cr[3 * ldc] : 0.0f;
                for (int64_t p = p0; p < p1; p++) {
                    const float bv = b[p * ldb + jj];
                    s0 = fmaf(a0[p * acs], bv, s0);
                    s1 = fmaf(a1[p * acs], bv, s1);
                    s2 = fmaf(a2[p * acs], bv, s2);
                    s3 = fmaf(a3[p * acs], bv, s3);
                }
                cr[0] = s0;
                cr[ldc] = s1;
                cr[2 * ldc] = s2;
                cr[3 * ldc] = s3;
            }
        }
        for (; i < m; i++) {
            float *cr = c + i * ldc;
            trn__tile_range(&bd, i, 1, k, &p0, &p1);
            for (int64_t jj = nv; jj < n; jj++) {
                float s = accumulate ? cr[jj] : 0.0f;
                for (int64_t p = p0; p < p1; p++)
                    s = fmaf(a[i * ars + p * acs], b[p * ldb + jj], s);
                cr[jj] = s;
            }
        }
    }
}

static inline void trn_tile_mm(int64_t m, int64_t n, int64_t k, const float *a, int64_t ars,
                               int64_t acs, const float *b, int64_t ldb, float *c, int64_t ldc,
                               int accumulate) {
    const trn_tile_band all = {-TRN_TILE_UNBOUNDED, TRN_TILE_UNBOUNDED, -TRN_TILE_UNBOUNDED};
    trn_tile_mm_band(m, n, k, a, ars, acs, b, ldb, c, ldc, accumulate, all);
}

#endif
