// bf16_load.h - bfloat16 -> float32 widening loads of 8 and 16 lanes, for
// the kernels that read bfloat16 a vector at a time (reduce.c's column sums,
// batch_norm.c's sums and rows). Internal to libtrn.
//
// A bfloat16 is the high half of its float32 (the widening is exact). GCC 12
// compiles __builtin_convertvector(u16 -> u32) into two half-width widenings
// and an insert; with AVX2 (8 lanes) or AVX-512 (16 lanes) one vpmovzxwd
// from memory and a shift say what is meant. The portable forms are the
// fallback on other targets.
#ifndef TRN_BF16_LOAD_H
#define TRN_BF16_LOAD_H

#include <stdint.h>
#include <string.h>

#if defined(__AVX2__)
#include <immintrin.h>
#endif

typedef float trn__f32x8 __attribute__((vector_size(32)));
typedef float trn__f32x16 __attribute__((vector_size(64)));

// p[0..8) as float32 lanes; p needs no alignment.
static inline trn__f32x8 trn__bf16_load8(const uint16_t *p) {
#if defined(__AVX2__)
    const __m128i h = _mm_loadu_si128((const __m128i *)(const void *)p);
    return (trn__f32x8)_mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
#else
    typedef uint16_t u16x8 __attribute__((vector_size(16)));
    typedef uint32_t u32x8 __attribute__((vector_size(32)));
    u16x8 h;
    memcpy(&h, p, sizeof h);
    const u32x8 u = __builtin_convertvector(h, u32x8) << 16;
    trn__f32x8 f;
    memcpy(&f, &u, sizeof f);
    return f;
#endif
}

// p[0..16) as float32 lanes; p needs no alignment.
static inline trn__f32x16 trn__bf16_load16(const uint16_t *p) {
#if defined(__AVX512F__)
    const __m256i h = _mm256_loadu_si256((const __m256i *)(const void *)p);
    return (trn__f32x16)_mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
#else
    typedef uint16_t u16x16 __attribute__((vector_size(32)));
    typedef uint32_t u32x16 __attribute__((vector_size(64)));
    u16x16 h;
    memcpy(&h, p, sizeof h);
    const u32x16 u = __builtin_convertvector(h, u32x16) << 16;
    trn__f32x16 f;
    memcpy(&f, &u, sizeof f);
    return f;
#endif
}

#endif
