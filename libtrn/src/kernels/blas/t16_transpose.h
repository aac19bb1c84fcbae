// t16_transpose.h - a 16 x 16 float transpose in AVX-512 registers, for
// the kernels that read nn.Linear's weight (n rows of k) as k rows of n
// (matmul.c's few-row tiles, weight_cache_mm.c's packing).
#ifndef TRN_BLAS_T16_TRANSPOSE_H
#define TRN_BLAS_T16_TRANSPOSE_H

#if defined(__AVX512F__)
#include <immintrin.h>

// Transposes 16 x 16 floats in registers (unpack pairs, then pairs of
// pairs, then 128-bit lanes twice): r[i] holds row i, o[c] gets column c.
static inline void t16_transpose(__m512 r[16], __m512 o[16]) {
    __m512 t[16];
    for (int i = 0; i < 8; i++) {
        t[2 * i] = _mm512_unpacklo_ps(r[2 * i], r[2 * i + 1]);
        t[2 * i + 1] = _mm512_unpackhi_ps(r[2 * i], r[2 * i + 1]);
    }
    // r[4i + c], 128-bit lane L: rows 4i..4i+3 of column 4L + c.
    for (int i = 0; i < 4; i++) {
        const __m512d t0 = _mm512_castps_pd(t[4 * i]), t1 = _mm512_castps_pd(t[4 * i + 1]),
                      t2 = _mm512_castps_pd(t[4 * i + 2]), t3 = _mm512_castps_pd(t[4 * i + 3]);
        r[4 * i] = _mm512_castpd_ps(_mm512_unpacklo_pd(t0, t2));
        r[4 * i + 1] = _mm512_castpd_ps(_mm512_unpackhi_pd(t0, t2));
        r[4 * i + 2] = _mm512_castpd_ps(_mm512_unpacklo_pd(t1, t3));
        r[4 * i + 3] = _mm512_castpd_ps(_mm512_unpackhi_pd(t1, t3));
    }
    for (int c = 0; c < 4; c++) {
        const __m512 u0 = _mm512_shuffle_f32x4(r[c], r[4 + c], 0x88),
                     u1 = _mm512_shuffle_f32x4(r[c], r[4 + c], 0xdd),
                     u2 = _mm512_shuffle_f32x4(r[8 + c], r[12 + c], 0x88),
                     u3 = _mm512_shuffle_f32x4(r[8 + c], r[12 + c], 0xdd);
        o[c] = _mm512_shuffle_f32x4(u0, u2, 0x88);
        o[4 + c] = _mm512_shuffle_f32x4(u1, u3, 0x88);
        o[8 + c] = _mm512_shuffle_f32x4(u0, u2, 0xdd);
        o[12 + c] = _mm512_shuffle_f32x4(u1, u3, 0xdd);
    }
}

#endif
#endif
