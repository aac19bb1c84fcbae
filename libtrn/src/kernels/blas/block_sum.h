// block_sum.h - how every few-row float32 product (matmul.c's small, tile,
// row and transposed-row paths, weight_cache_mm.c's panels) adds the sums of
// its k blocks (TILE_KB / WC_KB terms, one fused multiply-add chain each)
// into an element's total: compensated (Knuth's TwoSum), the rounding error
// of each addition kept beside the total and added once at the end. Plain
// in-order additions left the total's error at 1.2-1.75x PyTorch CPU's on
// the Intel host (session 32: 4 x 300 by 300 x 2048, MKL's AVX-512 kernel
// keeps many partial sums per element); compensated, 1.0-1.2x. Every path
// adds the same blocks the same way, so they still agree bit for bit.
// A total that is not finite stays as it is (its compensation may be NaN).
#ifndef TRN_KERNELS_BLAS_BLOCK_SUM_H
#define TRN_KERNELS_BLAS_BLOCK_SUM_H

#include <math.h>

#if defined(__AVX512F__)
#include <immintrin.h>
#endif

static inline void trn__blk_add(float *c, float *comp, float s) {
    const float t = *c + s, bp = t - *c;
    *comp += (*c - (t - bp)) + (s - bp);
    *c = t;
}

static inline float trn__blk_total(float c, float comp) { return isfinite(c) ? c + comp : c; }

#if defined(__AVX512F__)
#define TRN__BLK_ADD512(c, comp, s)                                                                \
    do {                                                                                           \
        const __m512 t_ = _mm512_add_ps((c), (s));                                                 \
        const __m512 bp_ = _mm512_sub_ps(t_, (c));                                                 \
        (comp) = _mm512_add_ps((comp), _mm512_add_ps(_mm512_sub_ps((c), _mm512_sub_ps(t_, bp_)),   \
                                                     _mm512_sub_ps((s), bp_)));                    \
        (c) = t_;                                                                                  \
    } while (0)

static inline __m512 trn__blk_total512(__m512 c, __m512 comp) {
    const __mmask16 fin = _mm512_cmp_ps_mask(_mm512_sub_ps(c, c), _mm512_setzero_ps(), _CMP_EQ_OQ);
    return _mm512_mask_add_ps(c, fin, c, comp);
}
#endif

#endif
