// ew_bf16.c - bfloat16 relu, threshold_backward, add / sub (alpha +-1) and
// mul on the 16-bit data itself; div and the activations of Llama / GPT-2
// (silu, sigmoid, tanh, exp and their backward) widened in short chunks.
// Through elementwise.c's staged float path every block of these was
// widened by a per-dtype loader, run, and narrowed by a per-dtype storer:
// for relu / add the staging, not the op, was ~85 % of their time
// (ResNet-18 under autocast: 13 relu, 13 threshold_backward and 12 adds a
// step, `load_block` + `store_f` ~2.2 ms against ~0.45 ms in the ops).
//
// Each function gives the staged path's bits: a bfloat16 widened to float is
// exact, the op is the same float expression, and a value that passes
// through unchanged is its own bfloat16 except that trn_float_to_bf16 sets a
// NaN's quiet bit (0x0040), done here too. One exception: a product of two
// NaNs is either operand's NaN (x86 returns the instruction's first
// operand's, and the compiler orders a commutative op's operands as it
// likes, in the float path as here).
#include "ew_bf16.h"

#include <math.h>
#include <stdbool.h>
#include <stdint.h>

#include "../kit/bf16_store.h"
#include "ew_gelu.h"
#include "trn/convert.h"

#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VL__)
#include <immintrin.h>
#define EW_BF16_AVX512 1
#endif

static inline uint16_t quiet16(uint16_t v) {
    return (v & 0x7FFFu) > 0x7F80u ? (uint16_t)(v | 0x0040u) : v;
}

// relu: x > 0 ? x : (NaN ? x : 0). Integer only: positive is sign clear and
// nonzero; the loop vectorizes at every level.
static void relu_bf16(int n, void *o_, const void *a_, const void *b_, const void *c_,
                      const trn_sc_ctx *cp) {
    (void)b_;
    (void)c_;
    (void)cp;
    uint16_t *o = o_;
    const uint16_t *a = a_;
    for (int i = 0; i < n; i++) {
        const uint16_t v = a[i];
        const uint16_t pos = (int16_t)v > 0 ? v : 0;
        o[i] = (v & 0x7FFFu) > 0x7F80u ? (uint16_t)(v | 0x0040u) : pos;
    }
}

// threshold_backward(grad a, out b): b <= t ? 0 : a, compared in float (t
// need not be a bfloat16; a NaN b compares false and keeps a).
static void threshold_backward_bf16(int n, void *o_, const void *a_, const void *b_, const void *c_,
                                    const trn_sc_ctx *cp) {
    (void)c_;
    uint16_t *o = o_;
    const uint16_t *a = a_, *b = b_;
    const float t = (float)cp->p[0];
    int i = 0;
#ifdef EW_BF16_AVX512
    const __m512 vt = _mm512_set1_ps(t);
    const __m256i mag = _mm256_set1_epi16(0x7FFF), inf = _mm256_set1_epi16(0x7F80);
    const __m256i qbit = _mm256_set1_epi16(0x0040);
    for (; i + 16 <= n; i += 16) {
        const __m256i bv = _mm256_loadu_si256((const __m256i *)(const void *)(b + i));
        const __m512 bf = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(bv), 16));
        const __mmask16 keep = _mm512_cmp_ps_mask(bf, vt, _CMP_NLE_UQ);
        __m256i av = _mm256_loadu_si256((const __m256i *)(const void *)(a + i));
        const __mmask16 nan = _mm256_cmpgt_epi16_mask(_mm256_and_si256(av, mag), inf);
        av = _mm256_mask_blend_epi16(nan, av, _mm256_or_si256(av, qbit));
        _mm256_storeu_si256((__m256i *)(void *)(o + i), _mm256_maskz_mov_epi16(keep, av));
    }
#endif
    for (; i < n; i++) o[i] = trn_bf16_to_float(b[i]) <= t ? 0 : quiet16(a[i]);
}

// a + alpha * b with alpha +-1 (fmaf as trn_sc_add_f's float32 form, what
// elementwise.c runs for all-bfloat16 operands with alpha +-1) or a * b
// (trn_sc_mul_f), rounded once. Memory-bound, so computed in registers with
// no float buffer between widening and rounding.
static inline float binary_f(float a, float b, float alpha, bool mul) {
    return mul ? a * b : fmaf(alpha, b, a);
}

static inline void binary_bf16(int n, uint16_t *o, const uint16_t *a, const uint16_t *b,
                               float alpha, bool mul) {
    int i = 0;
#if defined(EW_BF16_AVX512) && defined(__AVX512BF16__)
    // vcvtneps2bf16 rounds as trn_float_to_bf16 but flushes denormal inputs:
    // a group holding a nonzero denormal result takes the scalar form
    // (kit/bf16_store.h's rule).
    const __m512 va = _mm512_set1_ps(alpha);
    const __m512i abs_mask = _mm512_set1_epi32(0x7FFFFFFF), one = _mm512_set1_epi32(1);
    const __m512i denormal_max = _mm512_set1_epi32(0x007FFFFF);
    for (; i + 16 <= n; i += 16) {
        const __m256i av = _mm256_loadu_si256((const __m256i *)(const void *)(a + i));
        const __m256i bv = _mm256_loadu_si256((const __m256i *)(const void *)(b + i));
        const __m512 af = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(av), 16));
        const __m512 bf = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(bv), 16));
        const __m512 r = mul ? _mm512_mul_ps(af, bf) : _mm512_fmadd_ps(va, bf, af);
        const __m512i rm = _mm512_and_si512(_mm512_castps_si512(r), abs_mask);
        if (_mm512_cmplt_epu32_mask(_mm512_sub_epi32(rm, one), denormal_max)) {
            for (int k = i; k < i + 16; k++)
                o[k] = trn_float_to_bf16(
                    binary_f(trn_bf16_to_float(a[k]), trn_bf16_to_float(b[k]), alpha, mul));
        } else {
            _mm256_storeu_si256((__m256i *)(void *)(o + i), (__m256i)_mm512_cvtneps_pbh(r));
        }
    }
#endif
    for (; i < n; i++)
        o[i] = trn_float_to_bf16(
            binary_f(trn_bf16_to_float(a[i]), trn_bf16_to_float(b[i]), alpha, mul));
}

static void add_bf16(int n, void *o, const void *a, const void *b, const void *c,
                     const trn_sc_ctx *cp) {
    (void)c;
    (void)cp;
    binary_bf16(n, o, a, b, 1.0f, false);
}

static void sub_bf16(int n, void *o, const void *a, const void *b, const void *c,
                     const trn_sc_ctx *cp) {
    (void)c;
    (void)cp;
    binary_bf16(n, o, a, b, -1.0f, false);
}

static void mul_bf16(int n, void *o, const void *a, const void *b, const void *c,
                     const trn_sc_ctx *cp) {
    (void)c;
    (void)cp;
    binary_bf16(n, o, a, b, 1.0f, true);
}

// Ops whose float32 form does not read the storage type (no round16):
// widened VIA_F_CHUNK values at a time, the trn/scalar.h function, rounded by
// bf16_store.h: the staged path's three steps and its bits, without
// run_block's per-block bookkeeping (Llama's bfloat16 silu_backward on
// [8, 64, 544]: 211 -> 197 us; CPU 196).
#define VIA_F_CHUNK 256
#define VIA_F1(FN)                                                                                 \
    static void FN##_bf16(int n, void *o_, const void *a_, const void *b_, const void *c_,         \
                          const trn_sc_ctx *cp) {                                                  \
        (void)b_;                                                                                  \
        (void)c_;                                                                                  \
        uint16_t *o = o_;                                                                          \
        const uint16_t *a = a_;                                                                    \
        const trn_sc_ctx ctx = *cp;                                                                \
        float fa[VIA_F_CHUNK], fo[VIA_F_CHUNK];                                                    \
        for (int i0 = 0; i0 < n; i0 += VIA_F_CHUNK) {                                              \
            const int m = n - i0 < VIA_F_CHUNK ? n - i0 : VIA_F_CHUNK;                             \
            for (int i = 0; i < m; i++) fa[i] = trn_bf16_to_float(a[i0 + i]);                      \
            for (int i = 0; i < m; i++) fo[i] = trn_sc_##FN##_f(fa[i], &ctx);                      \
            trn__bf16_store_run((char *)(o + i0), (const char *)fo, m);                            \
        }                                                                                          \
    }
#define VIA_F2(FN)                                                                                 \
    static void FN##_bf16(int n, void *o_, const void *a_, const void *b_, const void *c_,         \
                          const trn_sc_ctx *cp) {                                                  \
        (void)c_;                                                                                  \
        uint16_t *o = o_;                                                                          \
        const uint16_t *a = a_, *b = b_;                                                           \
        const trn_sc_ctx ctx = *cp;                                                                \
        float fa[VIA_F_CHUNK], fb[VIA_F_CHUNK], fo[VIA_F_CHUNK];                                   \
        for (int i0 = 0; i0 < n; i0 += VIA_F_CHUNK) {                                              \
            const int m = n - i0 < VIA_F_CHUNK ? n - i0 : VIA_F_CHUNK;                             \
            for (int i = 0; i < m; i++) {                                                          \
                fa[i] = trn_bf16_to_float(a[i0 + i]);                                              \
                fb[i] = trn_bf16_to_float(b[i0 + i]);                                              \
            }                                                                                      \
            for (int i = 0; i < m; i++) fo[i] = trn_sc_##FN##_f(fa[i], fb[i], &ctx);               \
            trn__bf16_store_run((char *)(o + i0), (const char *)fo, m);                            \
        }                                                                                          \
    }
VIA_F2(div)
VIA_F1(silu)
VIA_F2(silu_backward)
VIA_F1(sigmoid)
VIA_F2(sigmoid_backward)
VIA_F1(tanh)
VIA_F2(tanh_backward)
VIA_F1(exp)

// The erf GELU and its backward read round16 (their bfloat16 forms,
// trn/scalar.h); this path only computes bfloat16 results, where the staged
// path's ctx has round16 == 2: a constant here, so the loops vectorize. The
// forward goes through ew_gelu.c (each branch only where taken).
static void gelu_bf16(int n, void *o_, const void *a_, const void *b_, const void *c_,
                      const trn_sc_ctx *cp) {
    (void)b_;
    (void)c_;
    (void)cp;
    uint16_t *o = o_;
    const uint16_t *a = a_;
    // Longer chunks than VIA_F_CHUNK: ew_gelu.c's packed erfc form gets ~16 %
    // of the lanes, and its loop's set-up is paid per call.
    enum { GELU_BF16_CHUNK = 1024 };
    _Alignas(64) float fa[GELU_BF16_CHUNK];
    _Alignas(64) float fo[GELU_BF16_CHUNK];
    for (int i0 = 0; i0 < n; i0 += GELU_BF16_CHUNK) {
        const int m = n - i0 < GELU_BF16_CHUNK ? n - i0 : GELU_BF16_CHUNK;
        for (int i = 0; i < m; i++) fa[i] = trn_bf16_to_float(a[i0 + i]);
        trn__ew_gelu_bf16_run(m, fo, fa);
        trn__bf16_store_run((char *)(o + i0), (const char *)fo, m);
    }
}
static void gelu_backward_bf16(int n, void *o_, const void *a_, const void *b_, const void *c_,
                               const trn_sc_ctx *cp) {
    (void)c_;
    uint16_t *o = o_;
    const uint16_t *a = a_, *b = b_;
    trn_sc_ctx ctx = *cp;
    ctx.round16 = 2;
    float fa[VIA_F_CHUNK], fb[VIA_F_CHUNK], fo[VIA_F_CHUNK];
    for (int i0 = 0; i0 < n; i0 += VIA_F_CHUNK) {
        const int m = n - i0 < VIA_F_CHUNK ? n - i0 : VIA_F_CHUNK;
        for (int i = 0; i < m; i++) {
            fa[i] = trn_bf16_to_float(a[i0 + i]);
            fb[i] = trn_bf16_to_float(b[i0 + i]);
        }
        for (int i = 0; i < m; i++) fo[i] = trn_sc_gelu_backward_f(fa[i], fb[i], &ctx);
        trn__bf16_store_run((char *)(o + i0), (const char *)fo, m);
    }
}

trn__ew_bf16_block trn__ew_bf16_block_of(trn_ew_op op, double alpha) {
    switch (op) {
    case TRN_EW_MUL: return mul_bf16;
    case TRN_EW_DIV: return div_bf16;
    case TRN_EW_SILU: return silu_bf16;
    case TRN_EW_SILU_BACKWARD: return silu_backward_bf16;
    case TRN_EW_SIGMOID: return sigmoid_bf16;
    case TRN_EW_SIGMOID_BACKWARD: return sigmoid_backward_bf16;
    case TRN_EW_TANH: return tanh_bf16;
    case TRN_EW_TANH_BACKWARD: return tanh_backward_bf16;
    case TRN_EW_EXP: return exp_bf16;
    case TRN_EW_GELU: return gelu_bf16;
    case TRN_EW_GELU_BACKWARD: return gelu_backward_bf16;
    case TRN_EW_RELU: return relu_bf16;
    case TRN_EW_THRESHOLD_BACKWARD: return threshold_backward_bf16;
    // fmaf(alpha, b, a) with sub's -alpha: the sign of alpha picks the function.
    case TRN_EW_ADD: return alpha == 1.0 ? add_bf16 : alpha == -1.0 ? sub_bf16 : NULL;
    case TRN_EW_SUB: return alpha == 1.0 ? sub_bf16 : alpha == -1.0 ? add_bf16 : NULL;
    default: return NULL;
    }
}
