// nn/attn_mm.h - the fused attention's tile products on AVX-512.
//
// blas/tile_mm.h's trn_tile_mm_band works on 256-bit vectors: on cores with
// two 512-bit FMA units (Intel Xeon) that is half the multiply-add rate, and
// the tile products are most of SDPA's time (perf, BERT's 8 x 4 x 64 x 64
// forward: 68 % of the kernel). Here the same products run on blocks of 6
// (then 4, then 1) rows x 64 columns in zmm registers (24 accumulators; per
// step 4 loads of B, 6 broadcasts of A, 24 fused multiply-adds).
//
// Same semantics and the same bits as trn_tile_mm_band: each element of C
// is one fused multiply-add chain over p in order, from zero or from C,
// and the rows are grouped into blocks of 6 / 4 / 1 exactly as there, so a
// causal band gives every block the same range of terms. Columns past the
// last multiple of 32 go to trn_tile_mm_band itself. Private to
// src/kernels.
#ifndef TRN_KERNELS_NN_ATTN_MM_H
#define TRN_KERNELS_NN_ATTN_MM_H

#include <stdint.h>

#include "../blas/tile_mm.h"

// What a product adds before its store (attn_mm_ep_band): C = xa + acc,
// then xb + that, then the old C + that (cadd), each where given (NULL /
// 0: not); xa and xb are read with row stride ldx. Float additions in
// that order, so a caller can rebuild a pairwise sum of chains bit for bit
// without a pass over the chain tiles.
typedef struct trn__attn_mm_ep {
    const float *xa, *xb;
    int64_t ldx;
    int cadd;
} trn__attn_mm_ep;

// Where chain q of nc (2-4 chains of one k-split product, each from zero)
// is stored so that the products' stores rebuild the pairwise sum
// ((x0 + x1) + x2, or (x0 + x1) + (x2 + x3)) without a pass over the
// chain tiles: chain q goes to t[q] (row stride n), chain 1 adds t[0] and
// stays there, the last adds t[2] and / or t[0] and goes to C (onto C
// when `accumulate`). Fills *ep and *ldd; returns the destination.
static inline float *trn__attn_chain_dst(int64_t q, int64_t nc, float *const *t, int64_t n,
                                         float *c, int64_t ldc, int accumulate, trn__attn_mm_ep *ep,
                                         int64_t *ldd) {
    *ep = (trn__attn_mm_ep){NULL, NULL, n, 0};
    *ldd = n;
    float *dst = t[q];
    if (q == 1) {
        ep->xa = t[0];
        dst = t[0];
    }
    if (q == nc - 1) {
        ep->xa = nc == 4 ? t[2] : t[0];
        ep->xb = nc == 4 ? t[0] : NULL;
        ep->cadd = accumulate;
        dst = c;
        *ldd = ldc;
    }
    return dst;
}

#if defined(__AVX512F__)
#include <immintrin.h>

// W zmm columns (16 floats each) of one row; accumulators as named
// variables (tile_mm.h: GCC keeps an array of them in memory).
#define TRN__AMM_DECL(r) __m512 c##r##0, c##r##1, c##r##2, c##r##3
#define TRN__AMM_INIT(r)                                                                           \
    do {                                                                                           \
        c##r##0 = c##r##1 = c##r##2 = c##r##3 = _mm512_setzero_ps();                               \
        if (accumulate) {                                                                          \
            c##r##0 = _mm512_loadu_ps(c + (r)*ldc);                                                \
            if (W > 1) c##r##1 = _mm512_loadu_ps(c + (r)*ldc + 16);                                \
            if (W > 2) c##r##2 = _mm512_loadu_ps(c + (r)*ldc + 32);                                \
            if (W > 3) c##r##3 = _mm512_loadu_ps(c + (r)*ldc + 48);                                \
        }                                                                                          \
    } while (0)
#define TRN__AMM_STEP(r)                                                                           \
    do {                                                                                           \
        const __m512 av = _mm512_set1_ps(a[(r)*ars + p * acs]);                                    \
        c##r##0 = _mm512_fmadd_ps(av, b0, c##r##0);                                                \
        if (W > 1) c##r##1 = _mm512_fmadd_ps(av, b1, c##r##1);                                     \
        if (W > 2) c##r##2 = _mm512_fmadd_ps(av, b2, c##r##2);                                     \
        if (W > 3) c##r##3 = _mm512_fmadd_ps(av, b3, c##r##3);                                     \
    } while (0)
// The epilogue (trn__attn_mm_ep): acc = xa + acc, then xb + acc, then
// c + acc, each where given, before the store.
#define TRN__AMM_EP1(r, v, o)                                                                      \
    do {                                                                                           \
        if (xa) v = _mm512_add_ps(_mm512_loadu_ps(xa + (r)*ldx + (o)), v);                         \
        if (xb) v = _mm512_add_ps(_mm512_loadu_ps(xb + (r)*ldx + (o)), v);                         \
        if (cadd) v = _mm512_add_ps(_mm512_loadu_ps(c + (r)*ldc + (o)), v);                        \
        _mm512_storeu_ps(c + (r)*ldc + (o), v);                                                    \
    } while (0)
#define TRN__AMM_STORE(r)                                                                          \
    do {                                                                                           \
        TRN__AMM_EP1(r, c##r##0, 0);                                                               \
        if (W > 1) TRN__AMM_EP1(r, c##r##1, 16);                                                   \
        if (W > 2) TRN__AMM_EP1(r, c##r##2, 32);                                                   \
        if (W > 3) TRN__AMM_EP1(r, c##r##3, 48);                                                   \
    } while (0)

// R rows (1, 4 or 6) x 16 W columns; R and W are constants at every call,
// so the unused accumulators and branches fold away.
static inline __attribute__((always_inline)) void
trn__amm_block(const int R, const int W, int64_t k, const float *a, int64_t ars, int64_t acs,
               const float *b, int64_t ldb, float *c, int64_t ldc, int accumulate,
               const trn__attn_mm_ep *ep) {
    const float *const xa = ep ? ep->xa : NULL, *const xb = ep ? ep->xb : NULL;
    const int64_t ldx = ep ? ep->ldx : 0;
    const int cadd = ep ? ep->cadd : 0;
    TRN__AMM_DECL(0);
    TRN__AMM_DECL(1);
    TRN__AMM_DECL(2);
    TRN__AMM_DECL(3);
    TRN__AMM_DECL(4);
    TRN__AMM_DECL(5);
    TRN__AMM_INIT(0);
    if (R > 1) {
        TRN__AMM_INIT(1);
        TRN__AMM_INIT(2);
        TRN__AMM_INIT(3);
    }
    if (R > 4) {
        TRN__AMM_INIT(4);
        TRN__AMM_INIT(5);
    }
    for (int64_t p = 0; p < k; p++) {
        const float *bp = b + p * ldb;
        const __m512 b0 = _mm512_loadu_ps(bp);
        const __m512 b1 = W > 1 ? _mm512_loadu_ps(bp + 16) : b0;
        const __m512 b2 = W > 2 ? _mm512_loadu_ps(bp + 32) : b0;
        const __m512 b3 = W > 3 ? _mm512_loadu_ps(bp + 48) : b0;
        TRN__AMM_STEP(0);
        if (R > 1) {
            TRN__AMM_STEP(1);
            TRN__AMM_STEP(2);
            TRN__AMM_STEP(3);
        }
        if (R > 4) {
            TRN__AMM_STEP(4);
            TRN__AMM_STEP(5);
        }
    }
    TRN__AMM_STORE(0);
    if (R > 1) {
        TRN__AMM_STORE(1);
        TRN__AMM_STORE(2);
        TRN__AMM_STORE(3);
    }
    if (R > 4) {
        TRN__AMM_STORE(4);
        TRN__AMM_STORE(5);
    }
}

#define TRN__AMM_KERNEL(NAME, R, W)                                                                \
    static void NAME(int64_t k, const float *a, int64_t ars, int64_t acs, const float *b,          \
                     int64_t ldb, float *c, int64_t ldc, int accumulate,                           \
                     const trn__attn_mm_ep *ep) {                                                  \
        trn__amm_block(R, W, k, a, ars, acs, b, ldb, c, ldc, accumulate, ep);                      \
    }
TRN__AMM_KERNEL(trn__amm_6x64, 6, 4)
TRN__AMM_KERNEL(trn__amm_4x64, 4, 4)
TRN__AMM_KERNEL(trn__amm_1x64, 1, 4)
TRN__AMM_KERNEL(trn__amm_6x16, 6, 1)
TRN__AMM_KERNEL(trn__amm_4x16, 4, 1)
TRN__AMM_KERNEL(trn__amm_1x16, 1, 1)
#undef TRN__AMM_KERNEL

typedef void (*trn__amm_fn)(int64_t, const float *, int64_t, int64_t, const float *, int64_t,
                            float *, int64_t, int, const trn__attn_mm_ep *);

// Columns [j, j + width) of every row block, as trn_tile_mm_band's loop:
// a block runs the union of its rows' term ranges and is skipped where
// the band leaves all its columns out.
static inline void trn__amm_cols(trn__amm_fn f6, trn__amm_fn f4, trn__amm_fn f1, int64_t width,
                                 int64_t j, int64_t m, int64_t k, const float *a, int64_t ars,
                                 int64_t acs, const float *b, int64_t ldb, float *c, int64_t ldc,
                                 int accumulate, const trn_tile_band *bd,
                                 const trn__attn_mm_ep *ep) {
    int64_t p0, p1, i = 0;
    trn__attn_mm_ep at;  // ep at the block's first element
#define TRN__AMM_CALL(F, ROWS)                                                                     \
    do {                                                                                           \
        trn__tile_range(bd, i, ROWS, k, &p0, &p1);                                                 \
        if (j + width > i + bd->clo && (p1 > p0 || !accumulate)) {                                 \
            if (ep) {                                                                              \
                at = *ep;                                                                          \
                if (at.xa) at.xa += i * at.ldx + j;                                                \
                if (at.xb) at.xb += i * at.ldx + j;                                                \
            }                                                                                      \
            F(p1 - p0, a + i * ars + p0 * acs, ars, acs, b + p0 * ldb + j, ldb, c + i * ldc + j,   \
              ldc, accumulate, ep ? &at : NULL);                                                   \
        }                                                                                          \
    } while (0)
    for (; i + 6 <= m; i += 6) TRN__AMM_CALL(f6, 6);
    for (; i + 4 <= m; i += 4) TRN__AMM_CALL(f4, 4);
    for (; i < m; i++) TRN__AMM_CALL(f1, 1);
#undef TRN__AMM_CALL
}

static inline void trn__attn_mm_band(int64_t m, int64_t n, int64_t k, const float *a, int64_t ars,
                                     int64_t acs, const float *b, int64_t ldb, float *c,
                                     int64_t ldc, int accumulate, trn_tile_band bd) {
    int64_t j = 0;
    for (; j + 64 <= n; j += 64)
        trn__amm_cols(trn__amm_6x64, trn__amm_4x64, trn__amm_1x64, 64, j, m, k, a, ars, acs, b, ldb,
                      c, ldc, accumulate, &bd, NULL);
    // 16-column blocks only where tile_mm.h has 32-column ones: past the
    // last multiple of 32 it runs 8 columns a row at a time (each row its
    // own range of terms under a band), so those columns go to it.
    for (; j + 16 <= n / 32 * 32; j += 16)
        trn__amm_cols(trn__amm_6x16, trn__amm_4x16, trn__amm_1x16, 16, j, m, k, a, ars, acs, b, ldb,
                      c, ldc, accumulate, &bd, NULL);
    if (j < n) {
        // The rest through tile_mm.h, its columns counted from j.
        trn_tile_band rest = bd;
        rest.clo -= j;
        trn_tile_mm_band(m, n - j, k, a, ars, acs, b + j, ldb, c + j, ldc, accumulate, rest);
    }
}

// Whether attn_mm_ep_band takes n columns (blocks as attn_mm_band's).
static inline int trn__attn_mm_ep_ok(int64_t n) { return n % 32 == 0; }

// C = epilogue(A . B) (no accumulate: each chain from zero); n a multiple
// of 32 (trn__attn_mm_ep_ok).
static inline void trn__attn_mm_ep_band(int64_t m, int64_t n, int64_t k, const float *a,
                                        int64_t ars, int64_t acs, const float *b, int64_t ldb,
                                        float *c, int64_t ldc, trn_tile_band bd,
                                        const trn__attn_mm_ep *ep) {
    int64_t j = 0;
    for (; j + 64 <= n; j += 64)
        trn__amm_cols(trn__amm_6x64, trn__amm_4x64, trn__amm_1x64, 64, j, m, k, a, ars, acs, b, ldb,
                      c, ldc, 0, &bd, ep);
    for (; j + 16 <= n; j += 16)
        trn__amm_cols(trn__amm_6x16, trn__amm_4x16, trn__amm_1x16, 16, j, m, k, a, ars, acs, b, ldb,
                      c, ldc, 0, &bd, ep);
}
#else
static inline int trn__attn_mm_ep_ok(int64_t n) {
    (void)n;
    return 0;
}
static inline void trn__attn_mm_ep_band(int64_t m, int64_t n, int64_t k, const float *a,
                                        int64_t ars, int64_t acs, const float *b, int64_t ldb,
                                        float *c, int64_t ldc, trn_tile_band bd,
                                        const trn__attn_mm_ep *ep) {
    (void)m, (void)n, (void)k, (void)a, (void)ars, (void)acs, (void)b, (void)ldb, (void)c;
    (void)ldc, (void)bd, (void)ep;
}

static inline void trn__attn_mm_band(int64_t m, int64_t n, int64_t k, const float *a, int64_t ars,
                                     int64_t acs, const float *b, int64_t ldb, float *c,
                                     int64_t ldc, int accumulate, trn_tile_band bd) {
    trn_tile_mm_band(m, n, k, a, ars, acs, b, ldb, c, ldc, accumulate, bd);
}
#endif

#endif
