// matmul.c - owns the matmul kernel declared in trn/blas.h: descriptor
// validation and stride normalisation at launch, the oneDNN path for float32
// and bfloat16 (natively where dnnl_common.c chooses it), float16 and the
// other bfloat16 products on the float32 path with widened operands (h16_run,
// h16_stage.c), and blocked C loops for float64 and the integer dtypes.
//
// oneDNN path: a plan (cached by geometry, see dnnl_common.h) holds the matmul
// primitive and, when an operand cannot be handed to it as is, a copy that
// stages the operand in a contiguous float32 buffer (dtype conversion, or
// strides that only oneDNN's slow reference kernel would accept). alpha is a
// static output scale and beta a "sum" post-op, both part of the key; a
// bias row (float32, or bfloat16 on the native path; alpha == 1) is the
// matmul's own bias argument.
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "block_sum.h"
#include "dnnl_common.h"
#include "h16_stage.h"
#include "../kit/launch.h"
#include "matmul_run.h"
#include "t16_transpose.h"
#include "tile_mm.h"
#include "weight_cache.h"
#include "trn/parallel.h"
#include "trn/blas.h"
#include "trn/bf16_path.h"
#include "trn/convert.h"
#include "trn/matmul_bias.h"

typedef struct mm_args {
    trn_matmul_desc d;
    const void *bias;  // NULL: none
    int64_t bias_stride;
    int64_t a_lo, a_span, b_lo, b_span, c_lo, c_span, bias_lo, bias_span;
} mm_args;

_Static_assert(sizeof(mm_args) <= TRN_TASK_MAX_ARGS, "matmul args too large");

bool trn_matmul_supports(trn_dtype dtype) {
    switch (dtype) {
    case TRN_DTYPE_F32:
    case TRN_DTYPE_BF16:
    case TRN_DTYPE_F16:
    case TRN_DTYPE_F64:
    case TRN_DTYPE_I8:
    case TRN_DTYPE_U8:
    case TRN_DTYPE_I16:
    case TRN_DTYPE_I32:
    case TRN_DTYPE_I64: return true;
    default: return false;
    }
}

static inline int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }

// ---- native bfloat16 ----------------------------------------------------------
// The CPU probe and the switch live in dnnl_common.c: convolution follows
// the same ones.
bool trn_matmul_bf16_native(void) { return trn__dnnl_bf16_native(); }

void trn_matmul_set_bf16_native(bool allow) { trn__dnnl_set_bf16_native(allow ? 1 : 0); }

void trn_matmul_set_bf16_default(void) { trn__dnnl_set_bf16_native(-1); }

// ---- C loops: float64 and integers ---------------------------------------------
// Rows of C in blocks of BI, columns in blocks of BJ accumulated in a local
// tile, so each B row segment is reused BI times from L1.
enum { BI = 4, BJ = 256 };

#define DEFINE_LOOP(NAME, T, ACC, ALPHA, BETA)                                                     \
    static void NAME(const trn_matmul_desc *d) {                                                   \
        const ACC alpha = (ACC)(ALPHA), beta = (ACC)(BETA);                                        \
        const bool read_c = d->beta != 0 || d->beta_int != 0;                                      \
        const int64_t *as = d->a_strides, *bs = d->b_strides, *cs = d->c_strides;                  \
        ACC acc[BI][BJ];                                                                           \
        for (int64_t t = 0; t < d->batch; t++) {                                                   \
            const T *A = (const T *)d->a + t * as[0];                                              \
            const T *B = (const T *)d->b + t * bs[0];                                              \
            T *C = (T *)d->c + t * cs[0];                                                          \
            for (int64_t i0 = 0; i0 < d->m; i0 += BI) {                                            \
                const int64_t ni = min64(BI, d->m - i0);                                           \
                for (int64_t j0 = 0; j0 < d->n; j0 += BJ) {                                        \
                    const int64_t nj = min64(BJ, d->n - j0);                                       \
                    memset(acc, 0, sizeof acc);                                                    \
                    for (int64_t p = 0; p < d->k; p++) {                                           \
                        const T *brow = B + p * bs[1] + j0 * bs[2];                                \
                        for (int64_t r = 0; r < ni; r++) {                                         \
                            const ACC av = (ACC)A[(i0 + r) * as[1] + p * as[2]];                   \
                            ACC *ar = acc[r];                                                      \
                            if (bs[2] == 1) {                                                      \
                                for (int64_t j = 0; j < nj; j++) ar[j] += av * (ACC)brow[j];       \
                            } else {                                                               \
                                for (int64_t j = 0; j < nj; j++)                                   \
                                    ar[j] += av * (ACC)brow[j * bs[2]];                            \
                            }                                                                      \
                        }                                                                          \
                    }                                                                              \
                    for (int64_t r = 0; r < ni; r++)                                               \
                        for (int64_t j = 0; j < nj; j++) {                                         \
                            T *cp = C + (i0 + r) * cs[1] + (j0 + j) * cs[2];                       \
                            ACC v = alpha * acc[r][j];                                             \
                            if (read_c) v += beta * (ACC)*cp;                                      \
                            *cp = (T)v;                                                            \
                        }                                                                          \
                }                                                                                  \
            }                                                                                      \
        }                                                                                          \
    }

// Integers accumulate in uint64_t: wrap-around is defined there, and the low
// bits equal those of PyTorch's same-width wrapping arithmetic.
DEFINE_LOOP(loop_f64, double, double, d->alpha, d->beta)
DEFINE_LOOP(loop_i8, int8_t, uint64_t, d->alpha_int, d->beta_int)
DEFINE_LOOP(loop_u8, uint8_t, uint64_t, d->alpha_int, d->beta_int)
DEFINE_LOOP(loop_i16, int16_t, uint64_t, d->alpha_int, d->beta_int)
DEFINE_LOOP(loop_i32, int32_t, uint64_t, d->alpha_int, d->beta_int)
DEFINE_LOOP(loop_i64, int64_t, uint64_t, d->alpha_int, d->beta_int)

// Every float32 product below TILE_MNK (and the few-row products past it)
// sums each element of C the same way, whichever path runs it: k in blocks
// of TILE_KB consecutive terms, each block one fused multiply-add chain in
// order from zero, the block sums added to the total in order from zero.
// One chain over all of k (until session 24) had 2.3-3.8x PyTorch CPU's
// largest error against a float64 reference on a decode step's products
// (1 x 256 by 256 x 256: 3.75x); blocks of 32 have 0.4-0.95x there (blocks
// of 16 did as well on those but not on a tiny Llama's first-step
// gradients, k = 64: tests/test_numerics_vs_f64.py). The paths still agree
// bit for bit: a row of C depends neither on how many rows the product has
// nor on the weight's layout. (Without AVX-512, TILE_F32 is tile_mm.h's
// trn_tile_mm, still one chain over k; there is no few-row path then.)
#define TILE_KB 32

// Small float products (m * n * k < SMALL_MNK): the same loop in float32,
// halves converted on load and rounded once on store. Below this size
// oneDNN's per-call cost (memory objects, plan lookup, stream) exceeds the
// arithmetic.
#define SMALL_MNK 32768
#define DEFINE_SMALL(NAME, T, LD, ST)                                                              \
    static void NAME(const trn_matmul_desc *d) {                                                   \
        const float alpha = (float)d->alpha, beta = (float)d->beta;                                \
        const bool read_c = d->beta != 0;                                                          \
        const int64_t *as = d->a_strides, *bs = d->b_strides, *cs = d->c_strides;                  \
        float acc[BI][BJ], cmp[BI][BJ], blk[BI][BJ];                                               \
        for (int64_t t = 0; t < d->batch; t++) {                                                   \
            const T *A = (const T *)d->a + t * as[0];                                              \
            const T *B = (const T *)d->b + t * bs[0];                                              \
            T *C = (T *)d->c + t * cs[0];                                                          \
            for (int64_t i0 = 0; i0 < d->m; i0 += BI) {                                            \
                const int64_t ni = min64(BI, d->m - i0);                                           \
                for (int64_t j0 = 0; j0 < d->n; j0 += BJ) {                                        \
                    const int64_t nj = min64(BJ, d->n - j0);                                       \
                    memset(acc, 0, sizeof acc);                                                    \
                    memset(cmp, 0, sizeof cmp);                                                    \
                    for (int64_t p0 = 0; p0 < d->k; p0 += TILE_KB) {                               \
                        memset(blk, 0, sizeof blk);                                                \
                        for (int64_t p = p0; p < min64(p0 + TILE_KB, d->k); p++) {                 \
                            const T *brow = B + p * bs[1] + j0 * bs[2];                            \
                            for (int64_t r = 0; r < ni; r++) {                                     \
                                const float av = LD(A[(i0 + r) * as[1] + p * as[2]]);              \
                                float *ar = blk[r];                                                \
                                if (bs[2] == 1) {                                                  \
                                    for (int64_t j = 0; j < nj; j++) ar[j] += av * LD(brow[j]);    \
                                } else {                                                           \
                                    for (int64_t j = 0; j < nj; j++)                               \
                                        ar[j] += av * LD(brow[j * bs[2]]);                         \
                                }                                                                  \
                            }                                                                      \
                        }                                                                          \
                        for (int64_t r = 0; r < ni; r++)                                           \
                            for (int64_t j = 0; j < nj; j++)                                       \
                                trn__blk_add(&acc[r][j], &cmp[r][j], blk[r][j]);                   \
                    }                                                                              \
                    for (int64_t r = 0; r < ni; r++)                                               \
                        for (int64_t j = 0; j < nj; j++) {                                         \
                            T *cp = C + (i0 + r) * cs[1] + (j0 + j) * cs[2];                       \
                            float v = alpha * trn__blk_total(acc[r][j], cmp[r][j]);                \
                            if (read_c) v += beta * LD(*cp);                                       \
                            *cp = ST(v);                                                           \
                        }                                                                          \
                }                                                                                  \
            }                                                                                      \
        }                                                                                          \
    }
#define LD_F32(x) (x)
#define ST_F32(x) (x)
DEFINE_SMALL(small_f32, float, LD_F32, ST_F32)

// Float32 products below TILE_MNK multiply-adds run on register-blocked
// tiles instead of oneDNN or small_f32: small_f32 keeps its accumulator
// tile in memory (a load and a store per multiply-add, and a 4 KiB memset
// per tile: a 32 x 10 x 64 product took 5.7 us), and below this size
// oneDNN's per-call cost (plan lookup, memory objects, malloc) is most of
// its time (32 x 64 x 32: 2.7 us). Each element of C is summed in the
// same TILE_KB blocks of fused multiply-add chains as in small_f32, so the
// bits equal small_f32's for every product both take.
#define TILE_MNK ((int64_t)1 << 19)

static bool tile_f32_fits(const trn_matmul_desc *d) {
    // The whole batch counts: the tiles run on one thread, oneDNN on all.
    return d->dtype == TRN_DTYPE_F32 && d->beta == 0 && d->batch * d->m * d->n * d->k < TILE_MNK;
}

#if defined(__AVX512F__)
// AVX-512: blocks of 4 rows x 32 columns (8 accumulators) or, where at
// most 16 columns are left, 8 rows x 16; a block's last columns are masked
// (a masked load reads nothing past the mask), so narrow products (n = 10)
// stay vectorized. Rows past m compute row m - 1 again and are not stored.
// Accumulators are named variables: GCC keeps an array of them in memory
// (tile_mm.h).
#define T16_ROW(r) const float *a##r = A + (i + ((r) < rows ? (r) : rows - 1)) * ars
// s: the current k block's chain (TILE_KB), c: the total it is added to.
#define T16_FMA1(r) s##r##0 = _mm512_fmadd_ps(_mm512_set1_ps(a##r[p * acs]), b0, s##r##0)
#define T16_FMA2(r)                                                                                \
    do {                                                                                           \
        const __m512 av = _mm512_set1_ps(a##r[p * acs]);                                           \
        s##r##0 = _mm512_fmadd_ps(av, b0, s##r##0);                                                \
        s##r##1 = _mm512_fmadd_ps(av, b1, s##r##1);                                                \
    } while (0)
// e: the compensation of c's additions (block_sum.h).
#define T16_ADD1(r) TRN__BLK_ADD512(c##r##0, e##r##0, s##r##0)
#define T16_ADD2(r)                                                                                \
    do {                                                                                           \
        TRN__BLK_ADD512(c##r##0, e##r##0, s##r##0);                                                \
        TRN__BLK_ADD512(c##r##1, e##r##1, s##r##1);                                                \
    } while (0)
#define T16_ST1(r)                                                                                 \
    if ((r) < rows)                                                                                \
    _mm512_mask_storeu_ps(C + (i + (r)) * ldc + j, m0, trn__blk_total512(c##r##0, e##r##0))
#define T16_ST2(r)                                                                                 \
    if ((r) < rows) {                                                                              \
        _mm512_mask_storeu_ps(C + (i + (r)) * ldc + j, m0, trn__blk_total512(c##r##0, e##r##0));   \
        _mm512_mask_storeu_ps(C + (i + (r)) * ldc + j + 16, m1,                                    \
                              trn__blk_total512(c##r##1, e##r##1));                                \
    }

static __mmask16 t16_mask(int64_t w) {
    return w >= 16 ? (__mmask16)0xFFFF : w <= 0 ? 0 : (__mmask16)((1u << w) - 1);
}

static void tile16_f32(int64_t m, int64_t n, int64_t k, const float *A, int64_t ars, int64_t acs,
                       const float *B, int64_t ldb, float *C, int64_t ldc) {
    for (int64_t j = 0; j < n; j += 32) {
        const __mmask16 m0 = t16_mask(n - j), m1 = t16_mask(n - j - 16);
        if (m1 == 0) {
            for (int64_t i = 0; i < m; i += 8) {
                const int64_t rows = m - i < 8 ? m - i : 8;
                T16_ROW(0);
                T16_ROW(1);
                T16_ROW(2);
                T16_ROW(3);
                T16_ROW(4);
                T16_ROW(5);
                T16_ROW(6);
                T16_ROW(7);
                __m512 c00 = _mm512_setzero_ps(), c10 = c00, c20 = c00, c30 = c00, c40 = c00,
                       c50 = c00, c60 = c00, c70 = c00;
                __m512 e00 = c00, e10 = c00, e20 = c00, e30 = c00, e40 = c00, e50 = c00, e60 = c00,
                       e70 = c00;
                for (int64_t p0 = 0; p0 < k; p0 += TILE_KB) {
                    __m512 s00 = _mm512_setzero_ps(), s10 = s00, s20 = s00, s30 = s00, s40 = s00,
                           s50 = s00, s60 = s00, s70 = s00;
                    for (int64_t p = p0; p < min64(p0 + TILE_KB, k); p++) {
                        const __m512 b0 = _mm512_maskz_loadu_ps(m0, B + p * ldb + j);
                        T16_FMA1(0);
                        T16_FMA1(1);
                        T16_FMA1(2);
                        T16_FMA1(3);
                        T16_FMA1(4);
                        T16_FMA1(5);
                        T16_FMA1(6);
                        T16_FMA1(7);
                    }
                    T16_ADD1(0);
                    T16_ADD1(1);
                    T16_ADD1(2);
                    T16_ADD1(3);
                    T16_ADD1(4);
                    T16_ADD1(5);
                    T16_ADD1(6);
                    T16_ADD1(7);
                }
                T16_ST1(0);
                T16_ST1(1);
                T16_ST1(2);
                T16_ST1(3);
                T16_ST1(4);
                T16_ST1(5);
                T16_ST1(6);
                T16_ST1(7);
            }
            continue;
        }
        for (int64_t i = 0; i < m; i += 4) {
            const int64_t rows = m - i < 4 ? m - i : 4;
            T16_ROW(0);
            T16_ROW(1);
            T16_ROW(2);
            T16_ROW(3);
            __m512 c00 = _mm512_setzero_ps(), c01 = c00, c10 = c00, c11 = c00, c20 = c00, c21 = c00,
                   c30 = c00, c31 = c00;
            __m512 e00 = c00, e01 = c00, e10 = c00, e11 = c00, e20 = c00, e21 = c00, e30 = c00,
                   e31 = c00;
            for (int64_t p0 = 0; p0 < k; p0 += TILE_KB) {
                __m512 s00 = _mm512_setzero_ps(), s01 = s00, s10 = s00, s11 = s00, s20 = s00,
                       s21 = s00, s30 = s00, s31 = s00;
                for (int64_t p = p0; p < min64(p0 + TILE_KB, k); p++) {
                    const __m512 b0 = _mm512_maskz_loadu_ps(m0, B + p * ldb + j);
                    const __m512 b1 = _mm512_maskz_loadu_ps(m1, B + p * ldb + j + 16);
                    T16_FMA2(0);
                    T16_FMA2(1);
                    T16_FMA2(2);
                    T16_FMA2(3);
                }
                T16_ADD2(0);
                T16_ADD2(1);
                T16_ADD2(2);
                T16_ADD2(3);
            }
            T16_ST2(0) T16_ST2(1) T16_ST2(2) T16_ST2(3)
        }
    }
}
#define TILE_F32(m, n, k, A, ars, acs, B, ldb, C, ldc)                                             \
    tile16_f32(m, n, k, A, ars, acs, B, ldb, C, ldc)

// packed[p * n + j] = B[j * ldbt + p] (B's rows contiguous along k), in
// 16 x 16 blocks transposed in registers, tails masked.
static void pack_transposed_ld(int64_t k, int64_t n, const float *B, int64_t ldbt, float *packed,
                               int64_t ld) {
    for (int64_t j0 = 0; j0 < n; j0 += 16)
        for (int64_t p0 = 0; p0 < k; p0 += 16) {
            const __mmask16 mp = t16_mask(k - p0), mj = t16_mask(n - j0);
            __m512 r[16], o[16];
            for (int i = 0; i < 16; i++)
                r[i] = j0 + i < n ? _mm512_maskz_loadu_ps(mp, B + (j0 + i) * ldbt + p0)
                                  : _mm512_setzero_ps();
            t16_transpose(r, o);
            for (int i = 0; i < 16 && p0 + i < k; i++)
                _mm512_mask_storeu_ps(packed + (p0 + i) * ld + j0, mj, o[i]);
        }
}
static void pack_transposed(int64_t k, int64_t n, const float *B, int64_t ldbt, float *packed) {
    pack_transposed_ld(k, n, B, ldbt, packed, n);
}
#define PACK_TRANSPOSED 1

// C (m <= 4 rows) = A.B with B's rows contiguous, B streamed row by row: a
// decode step's product (1 x 256 by 256 x 1024) reads a weight far larger
// than the L2 cache once, and tile16_f32 walks it a 128-byte column strip
// at a time (k rows 4 KiB apart, then again for the next strip), which the
// prefetchers follow badly. Here each row of B is read once, contiguously,
// into accumulators for up to ROW_COLS columns kept in L1. Each element of
// C is summed in the same TILE_KB blocks of fused multiply-add chains as in
// tile16_f32: the same bits.
#define ROW_M 4
// Whole rows of B up to ROW_COLS: splitting a row (512) made the reads
// strided again and GPT-2's 1 x 256 by 256 x 768 took 20 us instead of 14.
#define ROW_COLS 1024
static void row_f32(int64_t m, int64_t n, int64_t k, const float *A, int64_t ars, int64_t acs,
                    const float *B, int64_t ldb, float *C, int64_t ldc) {
    // acc: the totals; blk: the current k block's chains, added into acc
    // and cleared in the pass of the block's last term (no extra pass).
    float acc[ROW_M][ROW_COLS] __attribute__((aligned(64)));
    float cmp[ROW_M][ROW_COLS] __attribute__((aligned(64)));  // acc's compensation
    float blk[ROW_M][ROW_COLS] __attribute__((aligned(64)));
    const __m512 zero = _mm512_setzero_ps();
    for (int64_t j0 = 0; j0 < n; j0 += ROW_COLS) {
        const int64_t w = n - j0 < ROW_COLS ? n - j0 : ROW_COLS;
        for (int64_t r = 0; r < m; r++) {
            memset(acc[r], 0, (size_t)w * sizeof(float));
            memset(cmp[r], 0, (size_t)w * sizeof(float));
            memset(blk[r], 0, (size_t)w * sizeof(float));
        }
        for (int64_t p = 0; p < k; p++) {
            const float *b = B + p * ldb + j0;
            const bool last = (p + 1) % TILE_KB == 0 || p + 1 == k;
            for (int64_t r = 0; r < m; r++) {
                const __m512 av = _mm512_set1_ps(A[r * ars + p * acs]);
                float *sb = blk[r], *c = acc[r], *ce = cmp[r];
                if (!last) {
                    for (int64_t j = 0; j < w; j += 16) {
                        const __mmask16 mj = t16_mask(w - j);
                        const __m512 bv = _mm512_maskz_loadu_ps(mj, b + j);
                        _mm512_mask_storeu_ps(
                            sb + j, mj, _mm512_fmadd_ps(av, bv, _mm512_maskz_loadu_ps(mj, sb + j)));
                    }
                    continue;
                }
                for (int64_t j = 0; j < w; j += 16) {
                    const __mmask16 mj = t16_mask(w - j);
                    const __m512 bv = _mm512_maskz_loadu_ps(mj, b + j);
                    const __m512 t = _mm512_fmadd_ps(av, bv, _mm512_maskz_loadu_ps(mj, sb + j));
                    __m512 cv = _mm512_maskz_loadu_ps(mj, c + j),
                           ev = _mm512_maskz_loadu_ps(mj, ce + j);
                    TRN__BLK_ADD512(cv, ev, t);
                    _mm512_mask_storeu_ps(c + j, mj, cv);
                    _mm512_mask_storeu_ps(ce + j, mj, ev);
                    _mm512_mask_storeu_ps(sb + j, mj, zero);
                }
            }
        }
        for (int64_t r = 0; r < m; r++)
            for (int64_t j = 0; j < w; j += 16) {
                const __mmask16 mj = t16_mask(w - j);
                _mm512_mask_storeu_ps(C + r * ldc + j0 + j, mj,
                                      trn__blk_total512(_mm512_maskz_loadu_ps(mj, acc[r] + j),
                                                        _mm512_maskz_loadu_ps(mj, cmp[r] + j)));
            }
    }
}

// C (m <= 8 rows) = A.B where B is given transposed (Bt: n rows of k,
// B[p][j] = Bt[j * ldbt + p], as nn.Linear's weight): each 16 x 16 block of
// Bt is transposed in registers and used at once, so a decode-sized product
// (1 x 256 by 256 x 768) does not copy the whole weight into a packed
// buffer first (the copy took 3x the product's time). Each element of C is
// summed in the same TILE_KB blocks of fused multiply-add chains as in
// tile16_f32 on the packed copy: the same bits.
#define BT_ROWS 8
_Static_assert(TILE_KB % 16 == 0, "bt_rows ends k blocks on 16 x 16 transposed blocks");
// How far ahead along k bt_rows prefetches each weight row (floats): 1 KiB,
// the next strip's rows for k = 256 (C microbenchmark, 40 weights cycling,
// 1 x 256 by 256 x 544: 57 -> 43 us; 64: 47 us; F.linear, load ~4: 43-53 ->
// 22-31 us). A weight in L1/L2 pays ~12 % for the prefetch instructions
// (bench_decode_ops.py's one weight: 256 -> 544 15.0 -> 16.9 us).
#define BT_AHEAD 256
#define BT_LONG 1024
// One body per row count (M a constant after inlining): the accumulators
// and the transposed block stay in registers, and a full 16-deep block
// unrolls (a variable row count kept them on the stack: 2.5x slower).
static inline __attribute__((always_inline)) void bt_rows(const int M, int64_t n, int64_t k,
                                                          const float *A, int64_t ars, int64_t acs,
                                                          const float *Bt, int64_t ldbt, float *C,
                                                          int64_t ldc) {
    // Rows of BT_LONG floats or more are streams the hardware follows
    // (1 x 1024 by 1024 x 1024: 216-227 us without, 230-270 with).
    const bool prefetch = k < BT_LONG;
    for (int64_t j0 = 0; j0 < n; j0 += 16) {
        const __mmask16 mj = t16_mask(n - j0);
        __m512 c[BT_ROWS], e[BT_ROWS], s[BT_ROWS];
        for (int r = 0; r < M; r++) c[r] = e[r] = s[r] = _mm512_setzero_ps();
        for (int64_t p0 = 0; p0 < k; p0 += 16) {
            const __mmask16 mp = t16_mask(k - p0);
            __m512 r16[16], o[16];
            // The 16 rows are 16 streams 64 bytes at a time, which the
            // hardware prefetchers follow badly (a decode step's weight
            // comes from L3 or memory: the loads' misses were most of the
            // time). Ask for each row BT_AHEAD floats ahead, past a row's
            // end the next strip's row. Only the loads move; not the math.
            int64_t pa = p0 + BT_AHEAD, ja = j0;
            while (pa >= k) {  // short rows: strips further on
                pa -= (k + 15) & ~(int64_t)15;
                ja += 16;
            }
            for (int i = 0; i < 16; i++) {
                r16[i] = j0 + i < n ? _mm512_maskz_loadu_ps(mp, Bt + (j0 + i) * ldbt + p0)
                                    : _mm512_setzero_ps();
                if (prefetch && ja + i < n)
                    _mm_prefetch((const char *)(Bt + (ja + i) * ldbt + pa), _MM_HINT_T0);
            }
            t16_transpose(r16, o);
            // A k block (TILE_KB) spans TILE_KB / 16 transposed blocks.
            if (p0 % TILE_KB == 0)
                for (int r = 0; r < M; r++) s[r] = _mm512_setzero_ps();
            if (k - p0 >= 16) {
#pragma GCC unroll 16
                for (int i = 0; i < 16; i++)
                    for (int r = 0; r < M; r++)
                        s[r] = _mm512_fmadd_ps(_mm512_set1_ps(A[r * ars + (p0 + i) * acs]), o[i],
                                               s[r]);
            } else {
                for (int64_t i = 0; i < k - p0; i++)
                    for (int r = 0; r < M; r++)
                        s[r] = _mm512_fmadd_ps(_mm512_set1_ps(A[r * ars + (p0 + i) * acs]), o[i],
                                               s[r]);
            }
            if ((p0 + 16) % TILE_KB == 0 || p0 + 16 >= k)
                for (int r = 0; r < M; r++) TRN__BLK_ADD512(c[r], e[r], s[r]);
        }
        for (int r = 0; r < M; r++)
            _mm512_mask_storeu_ps(C + r * ldc + j0, mj, trn__blk_total512(c[r], e[r]));
    }
}

static void tile16_bt_f32(int64_t m, int64_t n, int64_t k, const float *A, int64_t ars, int64_t acs,
                          const float *Bt, int64_t ldbt, float *C, int64_t ldc) {
    switch (m) {
    case 1: bt_rows(1, n, k, A, ars, acs, Bt, ldbt, C, ldc); break;
    case 2: bt_rows(2, n, k, A, ars, acs, Bt, ldbt, C, ldc); break;
    case 3: bt_rows(3, n, k, A, ars, acs, Bt, ldbt, C, ldc); break;
    case 4: bt_rows(4, n, k, A, ars, acs, Bt, ldbt, C, ldc); break;
    case 5: bt_rows(5, n, k, A, ars, acs, Bt, ldbt, C, ldc); break;
    case 6: bt_rows(6, n, k, A, ars, acs, Bt, ldbt, C, ldc); break;
    case 7: bt_rows(7, n, k, A, ars, acs, Bt, ldbt, C, ldc); break;
    case 8: bt_rows(8, n, k, A, ars, acs, Bt, ldbt, C, ldc); break;
    default: break;  // the caller takes m <= BT_ROWS only
    }
}
#else
#define TILE_F32(m, n, k, A, ars, acs, B, ldb, C, ldc)                                             \
    trn_tile_mm(m, n, k, A, ars, acs, B, ldb, C, ldc, 0)
#endif

// B (k x n, column stride != 1) copied row-major into packed (ldb n).
static void pack_b(int64_t k, int64_t n, const float *B, const int64_t *bs, float *packed) {
#ifdef PACK_TRANSPOSED
    if (bs[1] == 1) {
        pack_transposed(k, n, B, bs[2], packed);
        return;
    }
#endif
    // In 16 x 16 blocks: the reads and the writes each stay in a few cache
    // lines (row by row, a transposed read misses per element).
    for (int64_t p0 = 0; p0 < k; p0 += 16)
        for (int64_t j0 = 0; j0 < n; j0 += 16) {
            const int64_t p1 = min64(p0 + 16, k), j1 = min64(j0 + 16, n);
            for (int64_t j = j0; j < j1; j++)
                for (int64_t p = p0; p < p1; p++) packed[p * n + j] = B[p * bs[1] + j * bs[2]];
        }
}

// C = alpha * A.B (+ the bias row) on tiles. A transposed B (column
// stride != 1) is first copied row-major: the tiles read B by rows. A C
// whose rows are not contiguous (a column-major output the compiler chose)
// gets the tiles' row-major result copied in, so every float32 product
// below TILE_MNK computes the same bits whatever the layouts (eager and
// compiled graphs agree). Returns false (nothing written) when a copy
// cannot be allocated; the caller then takes the other paths.
static bool tile_f32(const trn_matmul_desc *d, const float *bias, int64_t bias_stride) {
    const int64_t *as = d->a_strides, *bs = d->b_strides, *cs = d->c_strides;
    bool pack = bs[2] != 1 && d->n > 1;
    const bool direct = cs[2] == 1 || d->n == 1;
#ifdef PACK_TRANSPOSED
    // A few rows by a transposed B: transposed block by block in registers.
    const bool bt = pack && bs[1] == 1 && d->m <= BT_ROWS;
    if (bt) pack = false;
#endif
    float *packed = NULL, *rows = NULL;
    if ((pack && (packed = malloc((size_t)(d->k * d->n) * sizeof *packed)) == NULL) ||
        (!direct && (rows = malloc((size_t)(d->m * d->n) * sizeof *rows)) == NULL)) {
        free(packed);
        return false;
    }
    const float alpha = (float)d->alpha;
    for (int64_t t = 0; t < d->batch; t++) {
        const float *A = (const float *)d->a + t * as[0];
        const float *B = (const float *)d->b + t * bs[0];
        float *C = (float *)d->c + t * cs[0];
        int64_t ldb = bs[1];
        if (pack) {
            if (t == 0 || bs[0] != 0) pack_b(d->k, d->n, B, bs, packed);
            B = packed;
            ldb = d->n;
        }
        float *T = direct ? C : rows;
        const int64_t ldt = direct ? cs[1] : d->n;
#ifdef PACK_TRANSPOSED
        if (bt)
            tile16_bt_f32(d->m, d->n, d->k, A, as[1], as[2], B, bs[2], T, ldt);
        else if (d->m <= ROW_M && !pack && ldb >= 1)
            row_f32(d->m, d->n, d->k, A, as[1], as[2], B, ldb, T, ldt);
        else
#endif
            TILE_F32(d->m, d->n, d->k, A, as[1], as[2], B, ldb, T, ldt);
        // As small_f32: alpha times the sum, then the bias added (one
        // rounding each; alpha 1 changes nothing).
        if (alpha != 1.0f || bias != NULL || !direct)
            for (int64_t i = 0; i < d->m; i++)
                for (int64_t j = 0; j < d->n; j++) {
                    float v = alpha * T[i * ldt + j];
                    if (bias != NULL) v += bias[j * bias_stride];
                    C[i * cs[1] + j * cs[2]] = v;
                }
    }
    free(packed);
    free(rows);
    return true;
}
DEFINE_SMALL(small_f16, uint16_t, trn_half_to_float, trn_float_to_half)
DEFINE_SMALL(small_bf16, uint16_t, trn_bf16_to_float, trn_float_to_bf16)

// k == 0: C = beta * C (0 when beta is 0). Not a hot path.
#define DEFINE_SCALE(NAME, T, LOAD, STORE, BETA, ZERO)                                             \
    static void NAME(const trn_matmul_desc *d) {                                                   \
        const int64_t *cs = d->c_strides;                                                          \
        for (int64_t t = 0; t < d->batch; t++)                                                     \
            for (int64_t i = 0; i < d->m; i++)                                                     \
                for (int64_t j = 0; j < d->n; j++) {                                               \
                    T *cp = (T *)d->c + t * cs[0] + i * cs[1] + j * cs[2];                         \
                    if (BETA == ZERO)                                                              \
                        *cp = STORE(ZERO);                                                         \
                    else                                                                           \
                        *cp = STORE(BETA * LOAD(*cp));                                             \
                }                                                                                  \
    }
#define ID(x) (x)
#define U64(x) ((uint64_t)(x))
static inline float f16_load(uint16_t v) { return trn_half_to_float(v); }
static inline uint16_t f16_store(double v) { return trn_float_to_half((float)v); }
static inline float bf16_load(uint16_t v) { return trn_bf16_to_float(v); }
static inline uint16_t bf16_store(double v) { return trn_float_to_bf16((float)v); }
#define F32(x) ((float)(x))
DEFINE_SCALE(scale_f32, float, ID, F32, d->beta, 0.0)
DEFINE_SCALE(scale_f64, double, ID, ID, d->beta, 0.0)
DEFINE_SCALE(scale_f16, uint16_t, f16_load, f16_store, d->beta, 0.0)
DEFINE_SCALE(scale_bf16, uint16_t, bf16_load, bf16_store, d->beta, 0.0)
DEFINE_SCALE(scale_i8, int8_t, U64, (int8_t), U64(d->beta_int), U64(0))
DEFINE_SCALE(scale_u8, uint8_t, U64, (uint8_t), U64(d->beta_int), U64(0))
DEFINE_SCALE(scale_i16, int16_t, U64, (int16_t), U64(d->beta_int), U64(0))
DEFINE_SCALE(scale_i32, int32_t, U64, (int32_t), U64(d->beta_int), U64(0))
DEFINE_SCALE(scale_i64, int64_t, U64, (int64_t), U64(d->beta_int), U64(0))

// ---- oneDNN path ------------------------------------------------------------------

typedef struct mm_key {
    int64_t dtype;
    int64_t a_dims[3], b_dims[3], c_dims[3];
    int64_t as[3], bs[3], cs[3];
    double alpha, beta;
    int64_t bias;    // 1: a contiguous bias row of c_dims[2] entries, of `dtype`
    int64_t native;  // 1: bfloat16 operands may go to oneDNN as they are
    int64_t c_f32;   // 1: bfloat16 A and B, float32 C (direct only; matmul_run.h)
} mm_key;

enum { OP_A, OP_B, OP_C_IN, OP_C_OUT, OP_MM, OP_COUNT };

typedef struct mm_plan {
    dnnl_primitive_t prim[OP_COUNT];  // only OP_MM (staging: stage_in/out)
    dnnl_memory_desc_t scratch_md[OP_COUNT];
    size_t scratch_size;                        // max over the primitives
    dnnl_memory_desc_t user_md[3], comp_md[3];  // a, b, c
    dnnl_memory_desc_t bias_md;                 // when key.bias: as the caller's,
    dnnl_memory_desc_t bias_comp_md;            // and as the matmul reads it
    size_t bias_temp_size;                      // staged bias bytes (0: direct)
    size_t temp_size[3];                        // staging buffer bytes (0: direct)
    mm_key key;                                 // operand geometry, for staging
} mm_plan;

static void plan_destroy(mm_plan *p) {
    if (p == NULL) return;
    for (int i = 0; i < OP_COUNT; i++)
        if (p->prim[i]) dnnl_primitive_destroy(p->prim[i]);
    free(p);
}

static dnnl_data_type_t dnnl_type(trn_dtype t) {
    switch (t) {
    case TRN_DTYPE_BF16: return dnnl_bf16;
    case TRN_DTYPE_F16: return dnnl_f16;
    default: return dnnl_f32;
    }
}

// Creates the primitive of `pd` into plan slot `i`, recording its scratchpad.
static trn_status take_primitive(mm_plan *p, int i, dnnl_primitive_desc_t pd) {
    trn_status st = TRN_SUCCESS;
    const dnnl_memory_desc_t *smd = dnnl_primitive_desc_query_md(pd, dnnl_query_scratchpad_md, 0);
    if (smd) {
        p->scratch_md[i] = *smd;
        size_t sz = dnnl_memory_desc_get_size(smd);
        if (sz > p->scratch_size) p->scratch_size = sz;
    }
    TRN_DNNL_TRY(dnnl_primitive_create(&p->prim[i], pd), "matmul plan");
fail:
    return st;
}

static trn_status plan_build(const mm_key *key, mm_plan **out) {
    trn_status st = TRN_SUCCESS;
    dnnl_engine_t engine;
    dnnl_primitive_attr_t attr = NULL, plain_attr = NULL;
    dnnl_post_ops_t ops = NULL;
    dnnl_primitive_desc_t pd = NULL;
    mm_plan *p = calloc(1, sizeof *p);
    if (p == NULL)
        return trn__set_error(TRN_ERROR_OUT_OF_MEMORY, "out of host memory for a matmul plan");
    p->key = *key;
    st = trn__dnnl_engine(&engine);
    if (st != TRN_SUCCESS) goto fail;

    const dnnl_data_type_t udt = dnnl_type((trn_dtype)key->dtype);
    const int64_t *dims[3] = {key->a_dims, key->b_dims, key->c_dims};
    const int64_t *strides[3] = {key->as, key->bs, key->cs};
    dnnl_dims_t dd[3], ss[3];
    for (int i = 0; i < 3; i++) {
        memcpy(dd[i], dims[i], 3 * sizeof(int64_t));
        memcpy(ss[i], strides[i], 3 * sizeof(int64_t));
        const dnnl_data_type_t t = (i == 2 && key->c_f32) ? dnnl_f32 : udt;
        TRN_DNNL_TRY(dnnl_memory_desc_init_by_strides(&p->user_md[i], 3, dd[i], t, ss[i]),
                     "matmul operand layout");
    }
    const dnnl_memory_desc_t *bias_md = NULL;
    dnnl_dims_t bdims = {1, 1, key->c_dims[2]};
    if (key->bias) {
        TRN_DNNL_TRY(dnnl_memory_desc_init_by_tag(&p->bias_md, 3, bdims, udt, dnnl_abc),
                     "matmul bias layout");
        bias_md = &p->bias_md;
    }

    TRN_DNNL_TRY(dnnl_primitive_attr_create(&plain_attr), "matmul plan");
    TRN_DNNL_TRY(dnnl_primitive_attr_set_scratchpad_mode(plain_attr, dnnl_scratchpad_mode_user),
                 "matmul plan");
    TRN_DNNL_TRY(dnnl_primitive_attr_clone(&attr, plain_attr), "matmul plan");
    if (key->alpha != 1.0) {
        const float alpha = (float)key->alpha;
        TRN_DNNL_TRY(dnnl_primitive_attr_set_output_scales(attr, 1, 0, &alpha), "matmul alpha");
    }
    if (key->beta != 0.0) {
        TRN_DNNL_TRY(dnnl_post_ops_create(&ops), "matmul beta");
        TRN_DNNL_TRY(dnnl_post_ops_append_sum(ops, (float)key->beta), "matmul beta");
        TRN_DNNL_TRY(dnnl_primitive_attr_set_post_ops(attr, ops), "matmul beta");
    }

    // Direct: float32 (and native bfloat16) operands as they are, unless
    // only the reference kernel takes their strides. When the
    // implementation cannot be told, the primitive is kept: it computes the
    // right result either way, and staging would cost copies on every call.
    bool direct = false;
    if (udt == dnnl_f32 || (udt == dnnl_bf16 && key->native)) {
        dnnl_matmul_desc_t md;
        if (dnnl_matmul_desc_init(&md, &p->user_md[0], &p->user_md[1], bias_md, &p->user_md[2]) ==
                dnnl_success &&
            dnnl_primitive_desc_create(&pd, &md, attr, engine, NULL) == dnnl_success) {
            if (trn__dnnl_impl_of(pd) == TRN__DNNL_IMPL_REFERENCE) {
                dnnl_primitive_desc_destroy(pd);
                pd = NULL;
            } else {
                direct = true;
            }
        }
    }
    if (!direct && key->c_f32) {
        // Staging would convert C as bfloat16: the caller takes another path.
        st = trn__set_error(TRN_ERROR_UNSUPPORTED,
                            "no direct bfloat16 x bfloat16 -> float32 matmul");
        goto fail;
    }
    if (!direct) {
        for (int i = 0; i < 3; i++)
            TRN_DNNL_TRY(dnnl_memory_desc_init_by_tag(&p->comp_md[i], 3, dd[i], dnnl_f32, dnnl_abc),
                         "matmul staging layout");
        if (key->bias && udt != dnnl_f32) {
            // A bfloat16 bias row of a plan that fell back to staging.
            TRN_DNNL_TRY(
                dnnl_memory_desc_init_by_tag(&p->bias_comp_md, 3, bdims, dnnl_f32, dnnl_abc),
                "matmul bias staging layout");
            p->bias_temp_size = dnnl_memory_desc_get_size(&p->bias_comp_md);
            bias_md = &p->bias_comp_md;
        }
        dnnl_matmul_desc_t md;
        TRN_DNNL_TRY(
            dnnl_matmul_desc_init(&md, &p->comp_md[0], &p->comp_md[1], bias_md, &p->comp_md[2]),
            "matmul");
        TRN_DNNL_TRY(dnnl_primitive_desc_create(&pd, &md, attr, engine, NULL), "matmul");
        for (int i = 0; i < 3; i++) {
            if (dnnl_memory_desc_equal(&p->user_md[i], &p->comp_md[i])) continue;
            p->temp_size[i] = dnnl_memory_desc_get_size(&p->comp_md[i]);
        }
    }
    st = take_primitive(p, OP_MM, pd);
fail:
    if (pd) dnnl_primitive_desc_destroy(pd);
    if (ops) dnnl_post_ops_destroy(ops);
    if (attr) dnnl_primitive_attr_destroy(attr);
    if (plain_attr) dnnl_primitive_attr_destroy(plain_attr);
    if (st != TRN_SUCCESS) {
        plan_destroy(p);
        return st;
    }
    *out = p;
    return TRN_SUCCESS;
}

// Staging: an operand as a contiguous float32 batch of matrices, and the
// float32 result back into C, converting the dtype. Our own loops, because
// oneDNN 2.6's generic reorder (the only one for these layouts on an AVX2
// host) costs ~0.3 us per element - 100x the product it feeds.
static void stage_in(trn_dtype t, const void *src, const int64_t *dims, const int64_t *s,
                     float *dst) {
    for (int64_t b = 0; b < dims[0]; b++)
        for (int64_t i = 0; i < dims[1]; i++) {
            const int64_t base = b * s[0] + i * s[1];
            float *row = dst + (b * dims[1] + i) * dims[2];
            switch (t) {
            case TRN_DTYPE_BF16: {
                const uint16_t *p = (const uint16_t *)src + base;
                for (int64_t j = 0; j < dims[2]; j++) row[j] = trn_bf16_to_float(p[j * s[2]]);
                break;
            }
            case TRN_DTYPE_F16: {
                const uint16_t *p = (const uint16_t *)src + base;
                if (s[2] == 1) {
                    trn__f16_widen_run(p, row, dims[2]);
                    break;
                }
                for (int64_t j = 0; j < dims[2]; j++) row[j] = trn_half_to_float(p[j * s[2]]);
                break;
            }
            default: {
                const float *p = (const float *)src + base;
                for (int64_t j = 0; j < dims[2]; j++) row[j] = p[j * s[2]];
            }
            }
        }
}

static void stage_out(trn_dtype t, const float *src, const int64_t *dims, const int64_t *s,
                      void *dst) {
    for (int64_t b = 0; b < dims[0]; b++)
        for (int64_t i = 0; i < dims[1]; i++) {
            const int64_t base = b * s[0] + i * s[1];
            const float *row = src + (b * dims[1] + i) * dims[2];
            switch (t) {
            case TRN_DTYPE_BF16: {
                uint16_t *p = (uint16_t *)dst + base;
                for (int64_t j = 0; j < dims[2]; j++) p[j * s[2]] = trn_float_to_bf16(row[j]);
                break;
            }
            case TRN_DTYPE_F16: {
                uint16_t *p = (uint16_t *)dst + base;
                if (s[2] == 1) {
                    trn__f16_narrow_run(row, p, dims[2]);
                    break;
                }
                for (int64_t j = 0; j < dims[2]; j++) p[j * s[2]] = trn_float_to_half(row[j]);
                break;
            }
            default: {
                float *p = (float *)dst + base;
                for (int64_t j = 0; j < dims[2]; j++) p[j * s[2]] = row[j];
            }
            }
        }
}

static size_t align64(size_t n) { return (n + 63) & ~(size_t)63; }

static trn_status run_primitive(dnnl_primitive_t prim, dnnl_stream_t stream, int nargs,
                                const dnnl_exec_arg_t *args, const char *what) {
    trn_status st = TRN_SUCCESS;
    TRN_DNNL_TRY(dnnl_primitive_execute(prim, stream, nargs, args), what);
fail:
    return st;
}

static trn_status plan_execute(const mm_plan *p, const trn_matmul_desc *d, const void *bias_row) {
    trn_status st;
    dnnl_engine_t engine;
    dnnl_stream_t stream;
    if ((st = trn__dnnl_engine(&engine)) != TRN_SUCCESS) return st;
    if ((st = trn__dnnl_stream(&stream)) != TRN_SUCCESS) return st;

    size_t off[5], total = 0;
    for (int i = 0; i < 3; i++) {
        off[i] = total;
        total += align64(p->temp_size[i]);
    }
    off[3] = total;
    total += align64(p->scratch_size);
    off[4] = total;
    total += align64(p->bias_temp_size);
    char *ws;
    if ((st = trn__dnnl_workspace(total, (void **)&ws)) != TRN_SUCCESS) return st;

    // user[i]: the caller's memory; comp[i]: what the matmul reads/writes.
    dnnl_memory_t user[3] = {NULL, NULL, NULL}, comp[3] = {NULL, NULL, NULL}, bias = NULL;
    dnnl_memory_t scratch[OP_COUNT] = {NULL};
    if (p->key.bias && p->bias_temp_size != 0) {
        float *staged = (float *)(void *)(ws + off[4]);
        const uint16_t *row = bias_row;
        for (int64_t j = 0; j < p->key.c_dims[2]; j++) staged[j] = trn_bf16_to_float(row[j]);
        TRN_DNNL_TRY(dnnl_memory_create(&bias, &p->bias_comp_md, engine, staged), "matmul bias");
    } else if (p->key.bias) {
        TRN_DNNL_TRY(dnnl_memory_create(&bias, &p->bias_md, engine, (void *)bias_row),
                     "matmul bias");
    }
    void *ptrs[3] = {(void *)d->a, (void *)d->b, d->c};
    for (int i = 0; i < 3; i++) {
        TRN_DNNL_TRY(dnnl_memory_create(&user[i], &p->user_md[i], engine, ptrs[i]),
                     "matmul operand");
        if (p->temp_size[i] != 0)
            TRN_DNNL_TRY(dnnl_memory_create(&comp[i], &p->comp_md[i], engine, ws + off[i]),
                         "matmul staging buffer");
    }
    for (int i = 0; i < OP_COUNT; i++)
        if (p->prim[i] && p->scratch_md[i].ndims > 0)
            TRN_DNNL_TRY(dnnl_memory_create(&scratch[i], &p->scratch_md[i], engine, ws + off[3]),
                         "matmul scratchpad");

    const trn_dtype dt = (trn_dtype)p->key.dtype;
    const int64_t *kdims[3] = {p->key.a_dims, p->key.b_dims, p->key.c_dims};
    const int64_t *kstr[3] = {p->key.as, p->key.bs, p->key.cs};
    for (int i = 0; i < 3; i++)
        if (p->temp_size[i] != 0 && (i < 2 || p->key.beta != 0.0))
            stage_in(dt, ptrs[i], kdims[i], kstr[i], (float *)(void *)(ws + off[i]));
    {
        dnnl_exec_arg_t args[5] = {{DNNL_ARG_SRC, comp[0] ? comp[0] : user[0]},
                                   {DNNL_ARG_WEIGHTS, comp[1] ? comp[1] : user[1]},
                                   {DNNL_ARG_DST, comp[2] ? comp[2] : user[2]}};
        int nargs = 3;
        if (scratch[OP_MM]) args[nargs++] = (dnnl_exec_arg_t){DNNL_ARG_SCRATCHPAD, scratch[OP_MM]};
        if (bias) args[nargs++] = (dnnl_exec_arg_t){DNNL_ARG_BIAS, bias};
        if ((st = run_primitive(p->prim[OP_MM], stream, nargs, args, "matmul")) != TRN_SUCCESS)
            goto fail;
    }
    TRN_DNNL_TRY(dnnl_stream_wait(stream), "matmul");
    if (p->temp_size[2] != 0)
        stage_out(dt, (const float *)(void *)(ws + off[2]), kdims[2], kstr[2], d->c);
fail:
    for (int i = 0; i < 3; i++) {
        if (user[i]) dnnl_memory_destroy(user[i]);
        if (comp[i]) dnnl_memory_destroy(comp[i]);
    }
    if (bias) dnnl_memory_destroy(bias);
    for (int i = 0; i < OP_COUNT; i++)
        if (scratch[i]) dnnl_memory_destroy(scratch[i]);
    return st;
}

// Operand geometry for oneDNN: a broadcast batch (stride 0) becomes a batch
// dim of 1, and the batch stride of a single matrix gets a harmless value.
static void key_operand(int64_t batch, int64_t rows, int64_t cols, const int64_t *s, int64_t *dims,
                        int64_t *strides) {
    dims[0] = (batch > 1 && s[0] == 0) ? 1 : batch;
    dims[1] = rows;
    dims[2] = cols;
    strides[1] = s[1];
    strides[2] = s[2];
    strides[0] = dims[0] == 1 ? (rows - 1) * s[1] + (cols - 1) * s[2] + 1 : s[0];
    if (strides[0] <= 0) strides[0] = rows * cols;
}

// One oneDNN matmul (plan from the cache, or built) for the whole of `d`,
// adding the contiguous row `bias` (of d's dtype) unless it is NULL.
static trn_status run_plan(const trn_matmul_desc *d, const void *bias) {
    mm_key key;
    memset(&key, 0, sizeof key);
    key.dtype = d->dtype;
    key_operand(d->batch, d->m, d->k, d->a_strides, key.a_dims, key.as);
    key_operand(d->batch, d->k, d->n, d->b_strides, key.b_dims, key.bs);
    key_operand(d->batch, d->m, d->n, d->c_strides, key.c_dims, key.cs);
    key.alpha = d->alpha;
    key.beta = d->beta;
    key.bias = bias != NULL;
    key.native = d->dtype == TRN_DTYPE_BF16 && trn_matmul_bf16_native();

    mm_plan *plan = trn__plan_find(&key, sizeof key), *own = NULL;
    if (plan == NULL) {
        trn_status st = plan_build(&key, &own);
        if (st != TRN_SUCCESS) return st;
        plan = trn__plan_insert(&key, sizeof key, own);
        if (plan == own) {
            own = NULL;  // the cache keeps it
        } else if (plan != NULL) {
            plan_destroy(own);  // another thread inserted the same plan first
            own = NULL;
        } else {
            plan = own;  // cache full: use once, then destroy
        }
    }
    trn_status st = plan_execute(plan, d, bias);
    plan_destroy(own);
    return st;
}

// ---- blocked reduction (float32) ---------------------------------------------------
// oneDNN's float32 kernels keep each element of C in a register over the
// whole of k: one running sum of k products, whose rounding error grows
// with k (a 4096-long product was 2.2x PyTorch CPU's error against a
// float64 reference, rms; MKL accumulates k in blocks and adds them to C).
// So a float32 product with k > MM_KC runs as k blocks of at most MM_KC:
// the first writes alpha * A_0 B_0 + beta * C (+ the bias), each next one
// adds alpha * A_j B_j to C (beta 1). Rows of C go in groups that stay in
// the L2 cache over the k blocks (MM_C_BLOCK bytes), so C is read back
// from cache, not memory, but of at least MM_MIN_ROWS rows: each call packs
// its k block of B (kc x n) before use, once per row group, and with
// groups sized for L2 alone (32 rows at n = 4096) that packing cost more
// than the product (1024 x 4096 x 1024 ran at 23 G MAC/s, 46-47 with 256
// rows). A C group above L2 is re-read from L3 at 8 bytes per 128
// multiply-adds. Same bits whatever the split over the pool (blocks depend
// only on k and the row group, which splits never cut inside: pieces are
// whole row groups or batch slices, or column blocks).
#define MM_KC 128
#define MM_C_BLOCK ((int64_t)512 * 1024)
#define MM_MIN_ROWS 256
// The same floor for a piece of a product split over two or more threads.
// Both cores then stream their C groups through the one shared L3, and a
// 256-row group of a 1024-wide C (1 MiB, the whole of a core's L2) is read
// back from there for every k block: 512 x 1024 x 256 float32 nn with a
// bias ran 1.60-1.80 ms as two 256-row groups, 1.45-1.53 as two 128-row
// groups per piece, 512 x 768 x 256 0.97-0.98 -> 0.91-0.92 (2 threads,
// SCHED_FIFO, alternated per call in one process; session 30). One thread
// gains nothing from it (0.3-1 % slower: B's blocks packed twice as often).
// Same bits (bench/hash_gemm.py at 2 threads) as long as no group is thin:
// see the even groups below.
#define MM_PIECE_MIN_ROWS 128

static void normalize_matrix(int64_t rows, int64_t cols, int64_t *s);

// A k block after the first adds its product to C (beta 1). oneDNN 2.6's
// matmul (`gemm:jit`) runs that as sgemm with beta 1 and then passes over
// all of C again for the sum post-op that sgemm already applied
// (`jit_pp_kernel_t`: 5.6 % of such a call's samples on an Intel Xeon,
// perf with DNNL_JIT_PROFILE=2). dnnl_sgemm makes the same sgemm call
// (extended_sgemm, operands swapped for row-major) without that pass: same
// bits (bench/hash_gemm.py, 1 and 2 threads) for alpha 1; with another
// alpha 1 of its 333 results differed (addmm 33 x 3072 x 300, A
// transposed): the matmul applies that alpha elsewhere for some calls.
// False when the call is not one of those (the caller then runs the
// matmul), C untouched.
static bool sgemm_operand(const int64_t *s, char *trans, int64_t *ld) {
    if (s[2] == 1) {
        *trans = 'N';
        *ld = s[1];
    } else if (s[1] == 1) {
        *trans = 'T';
        *ld = s[2];
    } else {
        return false;
    }
    return *ld > 0 && *ld <= INT32_MAX;
}

static bool sgemm_add_block(const trn_matmul_desc *q) {
    char ta, tb;
    int64_t lda, ldb;
    if (q->alpha != 1.0 || q->beta != 1.0 || q->c_strides[2] != 1 || q->c_strides[1] > INT32_MAX ||
        !sgemm_operand(q->a_strides, &ta, &lda) || !sgemm_operand(q->b_strides, &tb, &ldb))
        return false;
    return dnnl_sgemm(ta, tb, q->m, q->n, q->k, 1.0f, q->a, lda, q->b, ldb, 1.0f, q->c,
                      q->c_strides[1]) == dnnl_success;
}

// The first k block as dnnl_sgemm too: the matmul's host path per call (plan
// lookup, memory objects, execution context) goes, and with a bias its pass
// over C (the same `jit_pp_kernel_t`, 3-4 % of an nn product with a bias;
// gemm32, session 32). The bias goes in as C's prior value: C is filled with
// the bias row and sgemm runs with beta 1, which rounds acc + bias once, as
// the matmul's bias pass does (bench/hash_gemm.py: all 333 results the same
// bits at 1 and 2 threads). Only where the matmul runs `gemm:jit` itself for
// these blocks (k blocks of a k-blocked product, batch 1, alpha 1, beta 0 or
// 1): a product of one block may take `brg:avx512_core`, which sums in
// another order. False (the caller runs the matmul, which overwrites C
// where it was filled) where it does not apply or sgemm fails.
static bool sgemm_first_block(const trn_matmul_desc *q, const void *bias) {
    char ta, tb;
    int64_t lda, ldb;
    if (q->alpha != 1.0 || (q->beta != 0.0 && (q->beta != 1.0 || bias != NULL)) ||
        q->c_strides[2] != 1 || q->c_strides[1] > INT32_MAX ||
        !sgemm_operand(q->a_strides, &ta, &lda) || !sgemm_operand(q->b_strides, &tb, &ldb))
        return false;
    float beta = (float)q->beta;
    if (bias != NULL) {
        for (int64_t i = 0; i < q->m; i++)
            memcpy((float *)q->c + i * q->c_strides[1], bias, (size_t)q->n * sizeof(float));
        beta = 1.0f;
    }
    return dnnl_sgemm(ta, tb, q->m, q->n, q->k, 1.0f, q->a, lda, q->b, ldb, beta, q->c,
                      q->c_strides[1]) == dnnl_success;
}

// `min_rows`: the floor of a row group, MM_MIN_ROWS or MM_PIECE_MIN_ROWS.
static trn_status run_kblocked_rows(const trn_matmul_desc *d, const void *bias, int64_t min_rows) {
    if (d->dtype != TRN_DTYPE_F32 || d->k <= MM_KC) return run_plan(d, bias);
    const int64_t es = (int64_t)sizeof(float);
    int64_t mb = MM_C_BLOCK / (d->n * es);
    mb = mb < min_rows ? min_rows : mb / 16 * 16;
    if (min_rows == MM_PIECE_MIN_ROWS && mb < d->m) {
        // Groups of even size: a thin last group (32 of a 160-row piece)
        // takes another of oneDNN's kernels, with other bits.
        const int64_t groups = (d->m + mb - 1) / mb;
        mb = ((d->m + groups - 1) / groups + 15) / 16 * 16;
    }
    const int64_t nk = (d->k + MM_KC - 1) / MM_KC, kc = (d->k + nk - 1) / nk;
    for (int64_t t = 0; t < d->batch; t++) {
        for (int64_t r0 = 0; r0 < d->m; r0 += mb) {
            for (int64_t k0 = 0; k0 < d->k; k0 += kc) {
                trn_matmul_desc q = *d;
                q.batch = 1;
                q.m = min64(mb, d->m - r0);
                q.k = min64(kc, d->k - k0);
                q.a = (const char *)d->a +
                      (t * d->a_strides[0] + r0 * d->a_strides[1] + k0 * d->a_strides[2]) * es;
                q.b = (const char *)d->b + (t * d->b_strides[0] + k0 * d->b_strides[1]) * es;
                q.c = (char *)d->c + (t * d->c_strides[0] + r0 * d->c_strides[1]) * es;
                q.a_strides[0] = q.b_strides[0] = q.c_strides[0] = 0;
                if (k0 > 0) q.beta = 1.0;
                normalize_matrix(q.m, q.k, q.a_strides);
                normalize_matrix(q.k, q.n, q.b_strides);
                normalize_matrix(q.m, q.n, q.c_strides);
                if (k0 > 0 ? sgemm_add_block(&q) : sgemm_first_block(&q, bias)) continue;
                trn_status st = run_plan(&q, k0 == 0 ? bias : NULL);
                if (st != TRN_SUCCESS) return st;
            }
        }
    }
    return TRN_SUCCESS;
}

static trn_status run_kblocked(const trn_matmul_desc *d, const void *bias) {
    return run_kblocked_rows(d, bias, MM_MIN_ROWS);
}

// ---- splitting over libtrn's pool --------------------------------------------------
// oneDNN would run each product on an OpenMP team of its own (one per
// calling thread), whose workers spin after every call: on a small host
// they take the cores libtrn's pool and the application need, and on a
// loaded machine a preempted team member stalls the whole product. Instead
// a product is cut into pieces (batch slices, else row or column blocks of
// C) that libtrn's pool hands out to whichever thread is ready, each piece
// one single-threaded oneDNN call. Pieces of one product share a geometry
// (except the last), so they add at most two plans to the cache.

// Below this many multiply-adds a product runs as one call on the launching
// thread: a hand-off would cost more than it saves.
#define SPLIT_MIN_MACS ((int64_t)1 << 20)
// Pieces per pool thread: more than one, so a thread that is descheduled
// mid-product leaves most of its share to the others.
#define SPLIT_PER_THREAD 2
// One piece per thread for float32 products run as k blocks (k > MM_KC):
// each piece is a k-block loop of oneDNN calls, and every call packs its
// block of B (row pieces) or of A (column pieces) again, so at two pieces
// per thread a 512-token model product (rows or columns cut in 4) packed
// its operand blocks twice as often as the arithmetic needs. Model set
// (20 products of bench_gemm_builds.py, 2 threads, process CPU time, load
// 6-7): 1.06x in all, up to 1.18x on 512 x 256 x 1024 nt (session 25).
#define KBLOCK_PER_THREAD 1
// One piece per thread for bfloat16 products too: every oneDNN bf16 call
// repacks its B (into the pairs of k that vdpbf16ps reads; A too when it
// is transposed, where oneDNN 2.6 runs gemm:jit), so four 128-row pieces
// of a 512-row product packed all of B four times for the two threads.
// GPT-2's bf16 mm shapes at two threads (SCHED_FIFO, 2 and 1 pieces a
// thread alternated per call, 12 x 5 calls, medians): nn 512x1024x256
// 635 -> 611 us, nn 512x768x256 480 -> 454, nt 512x256x256 167 -> 157, tn
// 256x1024x512 683 -> 651, tn 256x256x512 181 -> 171; none slower
// (session 31). The claim-based pool still gives a late thread's piece to
// the one that is ready.
#define BF16_PER_THREAD 1
// Pieces of a product split across threads are row blocks of C whenever
// each gets at least this many rows, even where C is wider than tall. Two
// column pieces running at once cost far more than their serial sum: at two
// threads (SCHED_FIFO, so both cores were ours) 512 x 1024 x 256 float32
// nn with a bias ran 2.09-2.13 ms as column halves against 1.51-1.54 as row
// halves (one thread 2.67), 512 x 768 x 256 1.47-1.49 vs 0.98-1.00, the
// weight gradient 256 x 768 x 512 tn 1.44-1.46 vs 1.00-1.05; run one after
// the other on one thread the column pieces cost what the whole product
// does (session 29). Thinner row pieces pack all of B for too few rows:
// 64 x 4096 x 1024 ran 3.1-3.4 ms as columns, 4.2-4.8 as 32-row pieces.
#define SPLIT_MIN_ROWS 64

typedef struct mm_split {
    trn_matmul_desc d;
    const void *bias;  // contiguous row of d's dtype, or NULL
    int axis;          // 0: batch, 1: rows of A and C, 2: columns of B and C
    int64_t step;      // items per piece along `axis`
    int64_t extent;    // items along `axis`
    trn__split_error error;
} mm_split;

static void split_piece(void *ctx, int64_t p0, int64_t p1) {
    mm_split *sp = ctx;
    const int64_t es = (int64_t)trn_dtype_size(sp->d.dtype);
    const int saved = trn__dnnl_serial_begin();
    for (int64_t p = p0; p < p1; p++) {
        if (trn__split_failed(&sp->error)) break;
        trn_matmul_desc d = sp->d;
        const void *bias = sp->bias;
        const int64_t lo = p * sp->step;
        const int64_t n = min64(sp->step, sp->extent - lo);
        if (n <= 0) break;
        const int64_t *as = d.a_strides, *bs = d.b_strides, *cs = d.c_strides;
        int64_t aoff = 0, boff = 0, coff;
        if (sp->axis == 0) {
            d.batch = n;
            aoff = lo * as[0];
            boff = lo * bs[0];
            coff = lo * cs[0];
        } else if (sp->axis == 1) {
            d.m = n;
            aoff = lo * as[1];
            coff = lo * cs[1];
        } else {
            d.n = n;
            boff = lo * bs[2];
            coff = lo * cs[2];
            if (bias) bias = (const char *)bias + lo * es;
        }
        normalize_matrix(d.m, d.k, d.a_strides);
        normalize_matrix(d.k, d.n, d.b_strides);
        normalize_matrix(d.m, d.n, d.c_strides);
        d.a = (const char *)d.a + aoff * es;
        d.b = (const char *)d.b + boff * es;
        d.c = (char *)d.c + coff * es;
        trn_clear_error();
        trn_status st = run_kblocked_rows(&d, bias, MM_PIECE_MIN_ROWS);
        if (st != TRN_SUCCESS) {
            trn__split_error_record(&sp->error, st);
            break;
        }
    }
    trn__dnnl_serial_end(saved);
}

#ifdef PACK_TRANSPOSED
// A k-blocked float32 product whose B is transposed (x W^T of nn.Linear,
// B's columns contiguous along k) runs on a row-major copy of B made here,
// once per product: oneDNN's gemm gives the same bits for B either way
// (bench/hash_gemm.py, 1 and 2 threads), but with B transposed each
// k-block call packs its block of B^T again, and at two threads each row
// piece packs all of it. 512 x 256 x 1024 took 2.70-2.78 ms of CPU time at
// one thread, 2.54-2.59 through the copy (256 x 256 x 1024: 1.43 -> 1.30;
// session 27). Rows of the copy whose length is a multiple of 1 KiB get
// 16 floats of padding: at n = 1024 the unpadded copy ran 3-4 % slower than
// no copy (4 KiB-aliased rows), padded it is even or ahead. alpha 1 only:
// oneDNN folds another alpha into its packing of B, which rounds
// differently for the two layouts. Below BT_COPY_MIN_ROWS rows of C the
// copy is amortized over too few rows; above BT_COPY_MAX_FLOATS the
// per-thread buffer would stay large.
#define BT_COPY_MIN_ROWS 256
#define BT_COPY_MAX_FLOATS ((int64_t)1 << 20)

static bool bt_copy_fits(const trn_matmul_desc *d) {
    const int64_t *bs = d->b_strides;
    return d->dtype == TRN_DTYPE_F32 && d->alpha == 1.0 && d->batch == 1 && d->k > MM_KC &&
           d->m >= BT_COPY_MIN_ROWS && d->n > 1 && bs[1] == 1 && bs[2] >= d->k &&
           d->k * d->n <= BT_COPY_MAX_FLOATS;
}

// The copy in strips of 16 columns over the pool, so it is not a serial
// step of a product split over it (~40 us of 1.3 ms at 512 x 256 x 1024 on
// two threads).
#define BT_COPY_GRAIN 4
typedef struct bt_strips {
    int64_t k, n;
    const float *b;
    int64_t ldbt;
    float *packed;
    int64_t ld;
} bt_strips;

static void bt_copy_strips(void *ctx, int64_t s0, int64_t s1) {
    const bt_strips *sp = ctx;
    const int64_t j0 = s0 * 16, j1 = min64(s1 * 16, sp->n);
    pack_transposed_ld(sp->k, j1 - j0, sp->b + j0 * sp->ldbt, sp->ldbt, sp->packed + j0, sp->ld);
}

// Rewrites d's B as a row-major copy in this thread's accumulation buffer
// (nothing else of matmul uses it; valid until the next user on this thread).
static trn_status bt_copy(trn_matmul_desc *d) {
    float *packed = NULL;
    const int64_t ld = d->n % 256 == 0 ? d->n + 16 : d->n;  // see above: 4 KiB aliasing
    trn_status st = trn__dnnl_accum_buffer((size_t)(d->k * ld) * sizeof(float), (void **)&packed);
    if (st != TRN_SUCCESS) return st;
    bt_strips sp = {d->k, d->n, (const float *)d->b, d->b_strides[2], packed, ld};
    trn_parallel_for((d->n + 15) / 16, BT_COPY_GRAIN, bt_copy_strips, &sp);
    d->b = packed;
    d->b_strides[0] = 0;
    d->b_strides[1] = ld;
    d->b_strides[2] = 1;
    return TRN_SUCCESS;
}
#endif

// Runs `d` (not both operands broadcast) as pieces over the pool, or as one
// single-threaded call when it is small or the pool has one thread.
static trn_status run_split(const trn_matmul_desc *in, const void *bias) {
    dnnl_engine_t engine;  // loads oneDNN, which finds its OpenMP runtime
    trn_status st = trn__dnnl_engine(&engine);
    if (st != TRN_SUCCESS) return st;
    trn_matmul_desc copy;
    const trn_matmul_desc *d = in;
#ifdef PACK_TRANSPOSED
    if (bt_copy_fits(in)) {
        copy = *in;
        if ((st = bt_copy(&copy)) != TRN_SUCCESS) return st;
        d = &copy;
    }
#else
    (void)copy;
#endif
    if (!trn__dnnl_can_serialize()) return run_kblocked(d, bias);  // oneDNN threads it
    const int threads = trn_parallel_threads();
    const int64_t macs = d->batch * d->m * d->n * d->k;
    const bool kblocked = d->dtype == TRN_DTYPE_F32 && d->k > MM_KC;
    const int per_thread = kblocked                     ? KBLOCK_PER_THREAD
                           : d->dtype == TRN_DTYPE_BF16 ? BF16_PER_THREAD
                                                        : SPLIT_PER_THREAD;
    int64_t want = (int64_t)threads * per_thread;
    if (macs / SPLIT_MIN_MACS < want) want = macs / SPLIT_MIN_MACS;
    if (threads <= 1 || want <= 1) {
        const int saved = trn__dnnl_serial_begin();
        st = run_kblocked(d, bias);
        trn__dnnl_serial_end(saved);
        return st;
    }
    // A real batch splits best (whole matrices per piece); else rows of C
    // (SPLIT_MIN_ROWS above), in blocks of whole cache lines of C where
    // possible; columns when C is wider than tall and row pieces would be thin.
    mm_split *sp = calloc(1, sizeof *sp);
    if (sp == NULL)
        return trn__set_error(TRN_ERROR_OUT_OF_MEMORY, "out of host memory for a matmul split");
    sp->d = *d;
    sp->bias = bias;
    const bool batched = d->batch >= want;
    sp->axis = batched ? 0 : (d->m >= d->n || d->m >= want * SPLIT_MIN_ROWS) ? 1 : 2;
    sp->extent = sp->axis == 0 ? d->batch : sp->axis == 1 ? d->m : d->n;
    int64_t step = (sp->extent + want - 1) / want;
    if (sp->axis != 0 && step > 16) step = (step + 15) / 16 * 16;
    sp->step = step;
    const int64_t pieces = (sp->extent + step - 1) / step;
    trn_parallel_for(pieces, 1, split_piece, sp);
    st = trn__split_error_raise(&sp->error);
    free(sp);
    return st;
}

static trn_status run_dnnl(const trn_matmul_desc *d, const void *bias) {
    if (d->batch > 1 && d->a_strides[0] == 0 && d->b_strides[0] == 0) {
        // Both operands broadcast: oneDNN wants a real batch on one side, so
        // run the single product once per output matrix.
        trn_matmul_desc one = *d;
        one.batch = 1;
        for (int64_t t = 0; t < d->batch; t++) {
            one.c = (char *)d->c + t * d->c_strides[0] * (int64_t)trn_dtype_size(d->dtype);
            trn_status st = run_split(&one, bias);
            if (st != TRN_SUCCESS) return st;
        }
        return TRN_SUCCESS;
    }
    return run_split(d, bias);
}

static bool is_small(const trn_matmul_desc *d) {
    return d->m < SMALL_MNK && d->n < SMALL_MNK && d->k < SMALL_MNK &&
           d->m * d->n * d->k < SMALL_MNK;
}

// Whether oneDNN's matmul adds the bias row itself: float32, or bfloat16
// where the native path runs, on the oneDNN path with no output scale
// (whether oneDNN scales before or after its bias is then moot), and a
// contiguous row. It adds the row to the float32 sum before the one
// rounding, as adding it through C (copied there, beta 1) would, without
// writing and reading C once more.
static bool bias_fused(const trn_matmul_desc *d, int64_t bias_stride) {
    const bool dtype_ok =
        d->dtype == TRN_DTYPE_F32 || (d->dtype == TRN_DTYPE_BF16 && trn_matmul_bf16_native());
    return dtype_ok && d->alpha == 1.0 && bias_stride == 1 && d->k > 0 && !is_small(d);
}

// C = bias row broadcast over every row of every matrix (same dtype: a
// plain element copy). Rows of C and a contiguous bias copy as whole rows:
// element by element, a bf16 nn.Linear's output took longer than its product.
static void broadcast_bias(const trn_matmul_desc *d, const void *bias, int64_t bias_stride) {
    const size_t es = trn_dtype_size(d->dtype);
    const int64_t *cs = d->c_strides;
    const bool rows = cs[2] == 1 && bias_stride == 1;
    for (int64_t t = 0; t < d->batch; t++)
        for (int64_t i = 0; i < d->m; i++) {
            char *row = (char *)d->c + (t * cs[0] + i * cs[1]) * (int64_t)es;
            if (rows) {
                memcpy(row, bias, (size_t)d->n * es);
                continue;
            }
            for (int64_t j = 0; j < d->n; j++)
                memcpy(row + j * cs[2] * (int64_t)es,
                       (const char *)bias + j * bias_stride * (int64_t)es, es);
        }
}

#ifdef PACK_TRANSPOSED
// A few float32 rows (up to 8, as the weight cache's panels: a cached and
// an uncached call give the same bits; until session 34 up to 4, and 5-8
// rows past TILE_MNK ran oneDNN) by a transposed B (nn.Linear's weight) of
// any size: tile16_bt_f32 over column strips, split across the pool, instead
// of oneDNN. One row by a weight past TILE_MNK (1 x 1024 by 1024 x 1024) is a
// matrix-vector product bound by streaming the weight, and oneDNN's took
// 1.5x MKL's sgemv time; the register transposes keep up with the stream.
// Each element of C is summed as below TILE_MNK (TILE_KB blocks), so a
// column's bits depend neither on the split nor on the thread count, and
// the error against a float64 reference stays below PyTorch CPU's (0.4-0.9x
// on 1 x 1024 by 1024 x 1024, 1 x 256 by 256 x 8192).
#define FEW_BT_ROWS 8
// Multiply-adds per piece: below this a pool hand-off costs more than it saves.
#define FEW_BT_PIECE_MACS ((int64_t)1 << 17)

typedef struct few_bt {
    trn_matmul_desc d;
    const float *bias;
    int64_t bias_stride;
} few_bt;

// One row by a row-major B (GPT-2's Conv1D weight, x @ W) takes the same
// pieces since session 34 (row_f32; before, oneDNN past TILE_MNK), so that
// the weight cache can serve it at any size with the uncached call's bits,
// and the uncached call runs at the stream's speed (1 x 768 by 768 x 2304:
// 146-180 us, oneDNN 285-299). Not 2-8 rows: row_f32 keeps its sums in
// memory and tile16_f32 walks B in column strips (4 x 1024 by 1024 x 1024:
// 260-331 us, oneDNN 115-131).
static bool few_rm(const trn_matmul_desc *d) {
    return d->m == 1 && d->b_strides[2] == 1 && d->b_strides[1] >= d->n;
}

static bool few_bt_fits(const trn_matmul_desc *d) {
    const int64_t *bs = d->b_strides, *cs = d->c_strides;
    // Direct into C (rows contiguous) and no packed copy: tile_f32 then
    // allocates nothing and cannot fail.
    return d->dtype == TRN_DTYPE_F32 && d->beta == 0 && d->k > 0 && d->batch == 1 &&
           d->m <= FEW_BT_ROWS && d->n > 1 && ((bs[1] == 1 && bs[2] != 1) || few_rm(d)) &&
           cs[2] == 1;
}

static void few_bt_piece(void *ctx, int64_t s0, int64_t s1) {
    const few_bt *f = ctx;
    trn_matmul_desc d = f->d;
    const int64_t j0 = s0 * 16, j1 = min64(s1 * 16, d.n);
    d.n = j1 - j0;
    d.b = (const float *)d.b + j0 * d.b_strides[2];
    d.c = (float *)d.c + j0;
    (void)tile_f32(&d, f->bias != NULL ? f->bias + j0 * f->bias_stride : NULL, f->bias_stride);
}

static void few_bt_run(const trn_matmul_desc *d, const float *bias, int64_t bias_stride) {
    const few_bt f = {*d, bias, bias_stride};
    const int64_t strips = (d->n + 15) / 16;
    int64_t grain = FEW_BT_PIECE_MACS / (16 * d->k * d->m);
    // Row-major: one run of columns per thread, each row of B read in runs as
    // long as they can be (row_f32: a row cut in 512-column pieces streamed
    // worse, 20 us instead of 14 for 1 x 256 by 256 x 768).
    const int threads = trn_parallel_threads();
    if (few_rm(d) && grain < (strips + threads - 1) / threads)
        grain = (strips + threads - 1) / threads;
    if (grain < 1) grain = 1;
    trn_parallel_for(strips, grain, few_bt_piece, (void *)&f);
}
#endif

static trn_status mm_run(const trn_matmul_desc *d, const void *bias, int64_t bias_stride);

// ---- float16, and bfloat16 off its native path ----------------------------------------
// A float16 product past SMALL_MNK runs as the float32 product of float32
// copies of A and B (and C when beta reads it, and the bias row), whose
// result is rounded to float16 once: h16_stage.h says why. So does a
// bfloat16 one where the core's float32 FMA outruns its vdpbf16ps
// (trn_matmul_bf16_native false, dnnl_common.c): the float32 kernels then
// run it 1.1-1.7x faster than oneDNN's bfloat16 ones, same contract (exact
// products, float32 sums, one rounding). The copies keep each operand's dim
// order, so transposed operands convert in contiguous runs and reach oneDNN
// transposed, as float32 ones do. Until session 32 the staging was inside
// each oneDNN call: every pool piece converted all of B again, element by
// element, and a transposed B in a strided gather.
static trn_status h16_run(const trn_matmul_desc *d, const void *bias, int64_t bias_stride) {
    const trn_dtype dt = d->dtype;
    trn_matmul_desc q = *d;
    q.dtype = TRN_DTYPE_F32;
    q.b_version = 0;  // the float32 copy is not the weight
    const int64_t rows[3] = {d->m, d->k, d->m}, cols[3] = {d->k, d->n, d->n};
    const int64_t *user[3] = {d->a_strides, d->b_strides, d->c_strides};
    int64_t *dense[3] = {q.a_strides, q.b_strides, q.c_strides};
    int64_t sizes[3][3], off[4], total = 0;
    for (int i = 0; i < 3; i++) {
        // A broadcast batch (stride 0) is copied once and stays broadcast.
        const bool bcast = d->batch > 1 && user[i][0] == 0;
        sizes[i][0] = bcast ? 1 : d->batch, sizes[i][1] = rows[i], sizes[i][2] = cols[i];
        off[i] = total;
        total += (trn__f16_dense_like(3, sizes[i], user[i], dense[i]) + 15) / 16 * 16;
        if (bcast) dense[i][0] = 0;
    }
    off[3] = total;
    if (bias != NULL) total += d->n;
    float *buf = NULL;
    trn_status st = trn__dnnl_stage_buffer((size_t)total * sizeof(float), (void **)&buf);
    if (st != TRN_SUCCESS) return st;
    q.a = buf + off[0], q.b = buf + off[1], q.c = buf + off[2];
    const void *ptrs[3] = {d->a, d->b, d->c};
    for (int i = 0; i < 3; i++)
        if (i < 2 || d->beta != 0)
            trn__h16_widen_nd(dt, 3, sizes[i], ptrs[i], user[i], buf + off[i], dense[i]);
    if (bias != NULL)
        trn__h16_widen_nd(dt, 1, &d->n, bias, &bias_stride, buf + off[3], &(int64_t){1});
    st = mm_run(&q, bias != NULL ? buf + off[3] : NULL, 1);
    if (st == TRN_SUCCESS)
        trn__h16_narrow_nd(dt, 3, sizes[2], buf + off[2], dense[2], d->c, user[2]);
    return st;
}

// Products of a real batch (both operands) keep the staging inside each
// oneDNN call: their pool pieces are whole matrices, so no piece converts
// another's operands, and each converts its own just before its product
// (32 x 64x64x64 bmm: 0.19 ms that way, 0.20 through the copies).
static bool h16_staged_whole(const trn_matmul_desc *d) {
    const bool h16 =
        d->dtype == TRN_DTYPE_F16 || (d->dtype == TRN_DTYPE_BF16 && !trn_matmul_bf16_native());
    return h16 && d->k > 0 && !is_small(d) &&
           (d->batch == 1 || d->a_strides[0] == 0 || d->b_strides[0] == 0);
}

static trn_status mm_run(const trn_matmul_desc *d, const void *bias, int64_t bias_stride) {
    // A weight reused by decode-sized products: its cached packed copy (and
    // every few-row bfloat16 product, cached or not: weight_cache_mm.c).
    if (trn__wcache_matmul(d, bias, bias_stride)) return TRN_SUCCESS;
    if (h16_staged_whole(d)) return h16_run(d, bias, bias_stride);
    if (d->k > 0 && tile_f32_fits(d) && tile_f32(d, bias, bias_stride)) return TRN_SUCCESS;
#ifdef PACK_TRANSPOSED
    if (few_bt_fits(d)) {
        few_bt_run(d, (const float *)bias, bias_stride);
        return TRN_SUCCESS;
    }
#endif
    trn_matmul_desc unfused;
    if (bias != NULL && !bias_fused(d, bias_stride)) {
        broadcast_bias(d, bias, bias_stride);
        bias = NULL;
        unfused = *d;
        unfused.beta = 1.0;
        unfused.beta_int = 1;
        d = &unfused;
    }
    if (d->k == 0) {
        switch (d->dtype) {
        case TRN_DTYPE_F32: scale_f32(d); break;
        case TRN_DTYPE_F64: scale_f64(d); break;
        case TRN_DTYPE_F16: scale_f16(d); break;
        case TRN_DTYPE_BF16: scale_bf16(d); break;
        case TRN_DTYPE_I8: scale_i8(d); break;
        case TRN_DTYPE_U8: scale_u8(d); break;
        case TRN_DTYPE_I16: scale_i16(d); break;
        case TRN_DTYPE_I32: scale_i32(d); break;
        case TRN_DTYPE_I64: scale_i64(d); break;
        default: break;
        }
        return TRN_SUCCESS;
    }
    if (is_small(d)) {
        switch (d->dtype) {
        case TRN_DTYPE_F32: small_f32(d); return TRN_SUCCESS;
        case TRN_DTYPE_F16: small_f16(d); return TRN_SUCCESS;
        case TRN_DTYPE_BF16: small_bf16(d); return TRN_SUCCESS;
        default: break;
        }
    }
    switch (d->dtype) {
    case TRN_DTYPE_F64: loop_f64(d); return TRN_SUCCESS;
    case TRN_DTYPE_I8: loop_i8(d); return TRN_SUCCESS;
    case TRN_DTYPE_U8: loop_u8(d); return TRN_SUCCESS;
    case TRN_DTYPE_I16: loop_i16(d); return TRN_SUCCESS;
    case TRN_DTYPE_I32: loop_i32(d); return TRN_SUCCESS;
    case TRN_DTYPE_I64: loop_i64(d); return TRN_SUCCESS;
    default: return run_dnnl(d, bias);
    }
}

static trn_status mm_task(void *args) {
    const mm_args *a = args;
    const trn_matmul_desc *d = &a->d;
    const void *alo = trn__offset_ptr(d->a, a->a_lo), *blo = trn__offset_ptr(d->b, a->b_lo),
               *clo = trn__offset_ptr(d->c, a->c_lo);
    trn_status st = trn__mem_access_begin(clo, (size_t)a->c_span);
    if (st != TRN_SUCCESS) return st;
    if (a->a_span > 0 && (st = trn__mem_access_begin(alo, (size_t)a->a_span)) != TRN_SUCCESS)
        goto end_c;
    if (a->b_span > 0 && (st = trn__mem_access_begin(blo, (size_t)a->b_span)) != TRN_SUCCESS)
        goto end_a;
    const void *biaslo = a->bias ? trn__offset_ptr(a->bias, a->bias_lo) : NULL;
    if (biaslo && (st = trn__mem_access_begin(biaslo, (size_t)a->bias_span)) != TRN_SUCCESS)
        goto end_b;
    st = mm_run(d, a->bias, a->bias_stride);
    if (biaslo) trn__mem_access_end(biaslo, (size_t)a->bias_span);
end_b:
    if (a->b_span > 0) trn__mem_access_end(blo, (size_t)a->b_span);
end_a:
    if (a->a_span > 0) trn__mem_access_end(alo, (size_t)a->a_span);
end_c:
    trn__mem_access_end(clo, (size_t)a->c_span);
    return st;
}

// ---- launch ------------------------------------------------------------------------

// Gives size-1 dims of a matrix strides that keep it a plain row- or
// column-major layout (their strides are never used to address memory).
static void normalize_matrix(int64_t rows, int64_t cols, int64_t *s) {
    if (rows == 1 && cols == 1) {
        s[1] = cols;
        s[2] = 1;
    } else if (rows == 1) {
        s[1] = s[2] == 1 ? cols : 1;
    } else if (cols == 1) {
        s[2] = s[1] == 1 ? rows : 1;
    }
}

static trn_status launch(trn_stream *stream, const trn_matmul_desc *desc, const void *bias,
                         int64_t bias_stride) {
    if (stream == NULL || desc == NULL)
        return trn__set_error(TRN_ERROR_INVALID_ARGUMENT,
                              "trn_matmul_launch: stream or descriptor is NULL");
    if ((unsigned)desc->dtype >= TRN_DTYPE_COUNT || !trn_matmul_supports(desc->dtype))
        return trn__set_error(TRN_ERROR_UNSUPPORTED, "trn_matmul_launch: dtype %s is not supported",
                              trn_dtype_name(desc->dtype));
    if (desc->batch < 0 || desc->m < 0 || desc->n < 0 || desc->k < 0)
        return trn__set_error(TRN_ERROR_INVALID_ARGUMENT,
                              "trn_matmul_launch: negative size (batch %lld, m %lld, n %lld, "
                              "k %lld)",
                              (long long)desc->batch, (long long)desc->m, (long long)desc->n,
                              (long long)desc->k);
    if (bias != NULL && (desc->beta != 0 || desc->beta_int != 0 || bias_stride < 0))
        return trn__set_error(TRN_ERROR_INVALID_ARGUMENT,
                              "trn_matmul_bias_launch: a bias needs beta == 0 and a "
                              "non-negative bias_stride (beta %g, bias_stride %lld)",
                              desc->beta, (long long)bias_stride);
    trn_status st = trn__fork_check();
    if (st != TRN_SUCCESS) return st;
    if (desc->batch == 0 || desc->m == 0 || desc->n == 0) return TRN_SUCCESS;

    mm_args a;
    memset(&a, 0, sizeof a);
    a.d = *desc;
    a.bias = bias;
    a.bias_stride = bias_stride;
    trn_matmul_desc *d = &a.d;
    const size_t es = trn_dtype_size(d->dtype);
    if (d->c == NULL || (d->k > 0 && (d->a == NULL || d->b == NULL)))
        return trn__set_error(TRN_ERROR_INVALID_ARGUMENT, "trn_matmul_launch: %s pointer is NULL",
                              d->c == NULL   ? "C"
                              : d->a == NULL ? "A"
                                             : "B");
    if ((d->m > 1 && d->c_strides[1] == 0) || (d->n > 1 && d->c_strides[2] == 0) ||
        (d->batch > 1 && d->c_strides[0] == 0))
        return trn__set_error(TRN_ERROR_INVALID_ARGUMENT,
                              "trn_matmul_launch: C has a zero stride in a dim of size > 1 "
                              "(overlapping writes)");
    for (int i = 0; i < 3; i++)
        if (d->a_strides[i] < 0 || d->b_strides[i] < 0 || d->c_strides[i] < 0)
            return trn__set_error(
                TRN_ERROR_INVALID_ARGUMENT,
                "trn_matmul_launch: negative strides are not supported "
                "(A %lld,%lld,%lld B %lld,%lld,%lld C %lld,%lld,%lld)",
                (long long)d->a_strides[0], (long long)d->a_strides[1], (long long)d->a_strides[2],
                (long long)d->b_strides[0], (long long)d->b_strides[1], (long long)d->b_strides[2],
                (long long)d->c_strides[0], (long long)d->c_strides[1], (long long)d->c_strides[2]);
    if (d->batch == 1) d->a_strides[0] = d->b_strides[0] = d->c_strides[0] = 0;
    normalize_matrix(d->m, d->k, d->a_strides);
    normalize_matrix(d->k, d->n, d->b_strides);
    normalize_matrix(d->m, d->n, d->c_strides);
    if (d->batch == 1) d->c_strides[0] = d->m * d->n;

    const int64_t asz[3] = {d->batch, d->m, d->k}, bsz[3] = {d->batch, d->k, d->n},
                  csz[3] = {d->batch, d->m, d->n};
    if (!trn__view_span(3, csz, d->c_strides, es, &a.c_lo, &a.c_span) ||
        (d->k > 0 && (!trn__view_span(3, asz, d->a_strides, es, &a.a_lo, &a.a_span) ||
                      !trn__view_span(3, bsz, d->b_strides, es, &a.b_lo, &a.b_span))) ||
        (bias != NULL && !trn__view_span(1, &d->n, &bias_stride, es, &a.bias_lo, &a.bias_span)))
        return trn__set_error(TRN_ERROR_INVALID_ARGUMENT,
                              "trn_matmul_launch: strides overflow the address space");
    // The weight cache keys B by its allocation as the host sees it now, not
    // by what its address holds when the kernel runs (weight_cache.h). Only
    // few-row products read it: the others (a backward's products, whose
    // operands carry versions) skip the allocator's lock.
    if (d->b_version != 0)
        d->b_version = d->batch == 1 && d->m <= TRN__WCACHE_MAX_ROWS
                           ? trn__mem_wcache_token(d->b, d->b_version)
                           : 0;
    return trn_stream_launch(stream, mm_task, &a, sizeof a);
}

trn_status trn_matmul_launch(trn_stream *stream, const trn_matmul_desc *desc) {
    return launch(stream, desc, NULL, 0);
}

// matmul_run.h: the normalisation launch() does, then the body mm_task runs.
trn_status trn__matmul_run_now(const trn_matmul_desc *desc) {
    trn_matmul_desc d = *desc;
    d.b_version = 0;  // runs inside a task: no launch-time token (launch())
    if (d.batch == 0 || d.m == 0 || d.n == 0) return TRN_SUCCESS;
    if (d.batch == 1) d.a_strides[0] = d.b_strides[0] = d.c_strides[0] = 0;
    normalize_matrix(d.m, d.k, d.a_strides);
    normalize_matrix(d.k, d.n, d.b_strides);
    normalize_matrix(d.m, d.n, d.c_strides);
    if (d.batch == 1) d.c_strides[0] = d.m * d.n;
    return mm_run(&d, NULL, 0);
}

// matmul_run.h: bfloat16 x bfloat16 -> float32, contiguous, on the native
// bfloat16 path only; rows of C in pieces over the pool as run_split cuts.
typedef struct bf16f32_split {
    int64_t m, n, k, step, b_rs, b_cs;
    const uint16_t *a, *b;
    float *c;
    trn__split_error error;
} bf16f32_split;

static trn_status bf16f32_plan_run(int64_t m, int64_t n, int64_t k, const uint16_t *a,
                                   const uint16_t *b, int64_t b_rs, int64_t b_cs, float *c) {
    mm_key key;
    memset(&key, 0, sizeof key);
    key.dtype = TRN_DTYPE_BF16;
    const int64_t as[3] = {m * k, k, 1}, bs[3] = {k * n, b_rs, b_cs}, cs[3] = {m * n, n, 1};
    key_operand(1, m, k, as, key.a_dims, key.as);
    key_operand(1, k, n, bs, key.b_dims, key.bs);
    key_operand(1, m, n, cs, key.c_dims, key.cs);
    key.alpha = 1.0;
    key.native = 1;
    key.c_f32 = 1;
    mm_plan *plan = trn__plan_find(&key, sizeof key), *own = NULL;
    if (plan == NULL) {
        trn_status st = plan_build(&key, &own);
        if (st != TRN_SUCCESS) return st;
        plan = trn__plan_insert(&key, sizeof key, own);
        if (plan == own || plan != NULL) {
            if (plan != own) plan_destroy(own);
            own = NULL;
        } else {
            plan = own;
        }
    }
    trn_matmul_desc d;
    memset(&d, 0, sizeof d);
    d.a = a;
    d.b = b;
    d.c = c;
    trn_status st = plan_execute(plan, &d, NULL);
    plan_destroy(own);
    return st;
}

static void bf16f32_piece(void *ctx, int64_t p0, int64_t p1) {
    bf16f32_split *sp = ctx;
    const int saved = trn__dnnl_serial_begin();
    for (int64_t p = p0; p < p1 && !trn__split_failed(&sp->error); p++) {
        const int64_t lo = p * sp->step, rows = min64(sp->step, sp->m - lo);
        if (rows <= 0) break;
        trn_clear_error();
        trn_status st = bf16f32_plan_run(rows, sp->n, sp->k, sp->a + lo * sp->k, sp->b, sp->b_rs,
                                         sp->b_cs, sp->c + lo * sp->n);
        if (st != TRN_SUCCESS) trn__split_error_record(&sp->error, st);
    }
    trn__dnnl_serial_end(saved);
}

trn_status trn__matmul_bf16_f32_now(int64_t m, int64_t n, int64_t k, const uint16_t *a,
                                    const uint16_t *b, int64_t b_rs, int64_t b_cs, float *c) {
    if (!trn_matmul_bf16_native())
        return trn__set_error(TRN_ERROR_UNSUPPORTED, "no native bfloat16 matmul on this CPU");
    if (m == 0 || n == 0 || k == 0)
        return trn__set_error(TRN_ERROR_UNSUPPORTED, "empty bfloat16 -> float32 product");
    dnnl_engine_t engine;
    trn_status st = trn__dnnl_engine(&engine);
    if (st != TRN_SUCCESS) return st;
    if (!trn__dnnl_can_serialize()) return bf16f32_plan_run(m, n, k, a, b, b_rs, b_cs, c);
    bf16f32_split sp;
    memset(&sp, 0, sizeof sp);
    sp.m = m;
    sp.n = n;
    sp.k = k;
    sp.a = a;
    sp.b = b;
    sp.b_rs = b_rs;
    sp.b_cs = b_cs;
    sp.c = c;
    int64_t want = (int64_t)trn_parallel_threads() * SPLIT_PER_THREAD;
    if ((m * n * k) / SPLIT_MIN_MACS < want) want = (m * n * k) / SPLIT_MIN_MACS;
    if (want < 1) want = 1;
    int64_t step = (m + want - 1) / want;
    if (step > 16) step = (step + 15) / 16 * 16;
    sp.step = step;
    trn_parallel_for((m + step - 1) / step, 1, bf16f32_piece, &sp);
    return trn__split_error_raise(&sp.error);
}

trn_status trn_matmul_bias_launch(trn_stream *stream, const trn_matmul_desc *desc, const void *bias,
                                  int64_t bias_stride) {
    if (bias == NULL)
        return trn__set_error(TRN_ERROR_INVALID_ARGUMENT, "trn_matmul_bias_launch: bias is NULL");
    return launch(stream, desc, bias, bias_stride);
}
