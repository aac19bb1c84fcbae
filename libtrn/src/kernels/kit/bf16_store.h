// bf16_store.h - contiguous float32 -> bfloat16 runs, for the kernels whose
// bfloat16 stores are hot (elementwise results, autocast's casts in copy.c).
//
// Where the compiler targets AVX512-BF16 (-march=native on such a CPU),
// vcvtneps2bf16 converts 16 floats in one instruction, 1.9x the rate of the
// select-based trn_float_to_bf16 loop. The instruction rounds to nearest
// even and quiets NaNs exactly as trn_float_to_bf16 does, but flushes
// denormal inputs to zero, so a group of 16 holding a denormal takes the
// scalar conversion: the same bits for all 2^32 inputs (checked
// exhaustively). Internal to libtrn.
#ifndef TRN_BF16_STORE_H
#define TRN_BF16_STORE_H

#include <stdint.h>
#include <string.h>

#include "trn/convert.h"

#if defined(__AVX512BF16__) && defined(__AVX512F__)
#include <immintrin.h>
#endif

static inline void trn__bf16_store_one(char *dst, float v) {
    const uint16_t b = trn_float_to_bf16(v);
    memcpy(dst, &b, 2);
}

// dst[i] = bfloat16(src[i]) for i < n; dst and src need no alignment.
static inline void trn__bf16_store_run(char *dst, const char *src, int64_t n) {
    int64_t i = 0;
#if defined(__AVX512BF16__) && defined(__AVX512F__)
    const __m512i abs_mask = _mm512_set1_epi32(0x7FFFFFFF), one = _mm512_set1_epi32(1);
    const __m512i denormal_max = _mm512_set1_epi32(0x007FFFFF);
    for (; i + 16 <= n; i += 16) {
        const __m512 x = _mm512_loadu_ps(src + 4 * i);
        const __m512i mag = _mm512_and_si512(_mm512_castps_si512(x), abs_mask);
        // mag - 1 < 0x7FFFFF (unsigned): a nonzero denormal.
        if (_mm512_cmplt_epu32_mask(_mm512_sub_epi32(mag, one), denormal_max)) {
            for (int64_t k = i; k < i + 16; k++) {
                float v;
                memcpy(&v, src + 4 * k, 4);
                trn__bf16_store_one(dst + 2 * k, v);
            }
        } else {
            _mm256_storeu_si256((__m256i *)(void *)(dst + 2 * i), (__m256i)_mm512_cvtneps_pbh(x));
        }
    }
#endif
    for (; i < n; i++) {
        float v;
        memcpy(&v, src + 4 * i, 4);
        trn__bf16_store_one(dst + 2 * i, v);
    }
}

#endif
