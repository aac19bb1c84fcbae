// ew_gelu.c - the erf GELU's float32 / float16 form (trn/scalar.h's
// trn_sc_gelu_f32_form) over a block, each of its two branches computed only
// for the elements that take it.
//
// The form selects between a 5-term fit for |u| < 0.5 (u = x / sqrt(2),
// ~10 vector operations) and the erfc form elsewhere (exp(-x^2 / 2), a
// division and a 9-term fit: ~48), and a vector loop over the select pays
// for both in every lane. Here each 16-lane vector's |u| >= 0.5 lanes are
// packed (vcompressps) into a buffer, the erfc form runs over the packed
// buffer only, the small form over the block, and the packed results are
// put back in place (vexpandps). Both branches are trn/scalar.h's own
// functions, so each element gets the bits the select gives: Adaptive
// Eager's fused code, which computes the select, stays bit-identical. For
// BERT's activations (about half the lanes small) the block runs ~1.25x
// faster; with every lane big it costs what the select costs (the packing
// is ~5 % of the erfc form).
#include "ew_gelu.h"

#include <stdint.h>

#include "trn/scalar.h"

#if defined(__AVX512F__)
#include <immintrin.h>

// Elements per pass: the packed buffer and the masks stay in L1.
#define GELU_CHUNK 512

// The erfc form over packed values, in place (n a multiple of 16).
static void big_run(int n, float *v) {
    for (int i = 0; i < n; i++) v[i] = trn_sc_gelu_f32_big(v[i]);
}
static void small_run(int n, float *restrict o, const float *restrict a) {
    for (int i = 0; i < n; i++) o[i] = trn_sc_gelu_f32_small(a[i]);
}

// n a multiple of 16, at most GELU_CHUNK.
static void chunk16(int n, float *o, const float *a) {
    _Alignas(64) float packed[GELU_CHUNK + 16];
    _Alignas(64) float small[GELU_CHUNK];
    __mmask16 big[GELU_CHUNK / 16];
    // The select's test, !(|x * (1 / sqrt(2))| < 0.5): NaN lanes are big.
    const __m512 c = _mm512_set1_ps(0.70710678118654752f), half = _mm512_set1_ps(0.5f);
    int nb = 0;
    for (int v = 0; v < n / 16; v++) {
        const __m512 x = _mm512_loadu_ps(a + 16 * v);
        const __mmask16 m =
            _mm512_cmp_ps_mask(_mm512_abs_ps(_mm512_mul_ps(x, c)), half, _CMP_NLT_UQ);
        big[v] = m;
        // Compressed in a register and stored whole: a compressing store
        // to memory is microcoded on AMD Zen 4.
        _mm512_storeu_ps(packed + nb, _mm512_maskz_compress_ps(m, x));
        nb += __builtin_popcount(m);
    }
    // The last vector's unused lanes hold 0 (zeroed by the compress or
    // here), a finite input.
    _mm512_storeu_ps(packed + nb, _mm512_setzero_ps());
    big_run((nb + 15) & ~15, packed);
    small_run(n, small, a);
    nb = 0;
    for (int v = 0; v < n / 16; v++) {
        const __mmask16 m = big[v];
        const __m512 r =
            _mm512_mask_expand_ps(_mm512_load_ps(small + 16 * v), m, _mm512_loadu_ps(packed + nb));
        _mm512_storeu_ps(o + 16 * v, r);
        nb += __builtin_popcount(m);
    }
}

void trn__ew_gelu_f32_run(int n, float *o, const float *a) {
    int i = 0;
    for (; i + 16 <= n; i += GELU_CHUNK) {
        const int m = n - i < GELU_CHUNK ? (n - i) & ~15 : GELU_CHUNK;
        chunk16(m, o + i, a + i);
        if (m < GELU_CHUNK) {
            i += m;
            break;
        }
    }
    for (; i < n; i++) o[i] = trn_sc_gelu_f32_form(a[i]);
}
#else
void trn__ew_gelu_f32_run(int n, float *o, const float *a) {
    for (int i = 0; i < n; i++) o[i] = trn_sc_gelu_f32_form(a[i]);
}
#endif
