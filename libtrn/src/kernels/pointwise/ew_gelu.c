// ew_gelu.c - the erf GELU's forms (trn/scalar.h: trn_sc_gelu_f32_form for
// float32 / float16 results, trn_sc_gelu_bf16_form for bfloat16 ones) over a
// block, each of a form's two branches computed only for the elements that
// take it.
//
// The float32 form selects between a 5-term fit for |u| < 0.5 (u = x /
// sqrt(2), ~10 vector operations) and the erfc form elsewhere (exp(-x^2 /
// 2), a division and a 9-term fit: ~48); the bfloat16 form between a 6-term
// fit for |u| < 1 (~10) and its shorter erfc form (~26). A vector loop over
// the select pays for both branches in every lane. Here each 16-lane
// vector's big-|u| lanes are packed (vcompressps) into a buffer, the erfc
// form runs over the packed buffer only, the small form over the block, and
// the packed results are put back in place (vexpandps). Both branches are
// trn/scalar.h's own functions, so each element gets the bits the select
// gives: Adaptive Eager's fused code, which computes the select, stays
// bit-identical. On BERT-like activations (unit normal: 52 % of the lanes
// small in float32, 84 % in bfloat16) the float32 block ran 1.24x faster;
// a pass with more than 3/4 of its lanes big runs the select's loop instead
// (at 72 % big the two cost the same).
#include "ew_gelu.h"

#include <stdint.h>

#include "trn/scalar.h"

#if defined(__AVX512F__)
#include <immintrin.h>

// Elements per pass: the packed buffer, the small form's results and the
// masks stay in L1 (8 KiB), and the loops' constants (~30 broadcasts before
// the erfc form's loop) are paid once per ~30 packed vectors.
#define GELU_CHUNK 1024

// One instantiation per form: SMALL / BIG its two branches, LIM the |u|
// where the select switches. big_run: the erfc form over packed values, in
// place (n a multiple of 16); chunk16: n a multiple of 16, at most
// GELU_CHUNK; run: any n.
#define GELU_SPLIT(NAME, SMALL, BIG, FORM, LIM)                                                    \
    static void NAME##_big_run(int n, float *v) {                                                  \
        for (int i = 0; i < n; i++) v[i] = BIG(v[i]);                                              \
    }                                                                                              \
    static void NAME##_small_run(int n, float *restrict o, const float *restrict a) {              \
        for (int i = 0; i < n; i++) o[i] = SMALL(a[i]);                                            \
    }                                                                                              \
    static void NAME##_chunk16(int n, float *o, const float *a) {                                  \
        _Alignas(64) float packed[GELU_CHUNK + 16];                                                \
        _Alignas(64) float small[GELU_CHUNK];                                                      \
        __mmask16 big[GELU_CHUNK / 16];                                                            \
        /* The select's test, !(|x * (1 / sqrt(2))| < LIM): NaN lanes are big. */                  \
        const __m512 c = _mm512_set1_ps(0.70710678118654752f), lim = _mm512_set1_ps(LIM);          \
        int nb = 0;                                                                                \
        for (int v = 0; v < n / 16; v++) {                                                         \
            const __m512 x = _mm512_loadu_ps(a + 16 * v);                                          \
            const __mmask16 m =                                                                    \
                _mm512_cmp_ps_mask(_mm512_abs_ps(_mm512_mul_ps(x, c)), lim, _CMP_NLT_UQ);          \
            big[v] = m;                                                                            \
            /* Compressed in a register and stored whole: a compressing */                         \
            /* store to memory is microcoded on AMD Zen 4. */                                      \
            _mm512_storeu_ps(packed + nb, _mm512_maskz_compress_ps(m, x));                         \
            nb += __builtin_popcount(m);                                                           \
        }                                                                                          \
        /* Mostly big lanes (at 72 % the packed passes cost what the select */                     \
        /* costs, at 97 % 12 % more): the select's loop. */                                        \
        if (4 * nb > 3 * n) {                                                                      \
            for (int i = 0; i < n; i++) o[i] = FORM(a[i]);                                         \
            return;                                                                                \
        }                                                                                          \
        /* The last vector's unused lanes hold 0 (zeroed by the compress or */                     \
        /* here), a finite input. */                                                               \
        _mm512_storeu_ps(packed + nb, _mm512_setzero_ps());                                        \
        NAME##_big_run((nb + 15) & ~15, packed);                                                   \
        NAME##_small_run(n, small, a);                                                             \
        nb = 0;                                                                                    \
        for (int v = 0; v < n / 16; v++) {                                                         \
            const __mmask16 m = big[v];                                                            \
            const __m512 r = _mm512_mask_expand_ps(_mm512_load_ps(small + 16 * v), m,              \
                                                   _mm512_loadu_ps(packed + nb));                  \
            _mm512_storeu_ps(o + 16 * v, r);                                                       \
            nb += __builtin_popcount(m);                                                           \
        }                                                                                          \
    }                                                                                              \
    void NAME(int n, float *o, const float *a) {                                                   \
        int i = 0;                                                                                 \
        while (n - i >= 16) {                                                                      \
            const int m = n - i < GELU_CHUNK ? (n - i) & ~15 : GELU_CHUNK;                         \
            NAME##_chunk16(m, o + i, a + i);                                                       \
            i += m;                                                                                \
        }                                                                                          \
        for (; i < n; i++) o[i] = FORM(a[i]);                                                      \
    }
GELU_SPLIT(trn__ew_gelu_f32_run, trn_sc_gelu_f32_small, trn_sc_gelu_f32_big, trn_sc_gelu_f32_form,
           0.5f)
GELU_SPLIT(trn__ew_gelu_bf16_run, trn_sc_gelu_bf16_small, trn_sc_gelu_bf16_big,
           trn_sc_gelu_bf16_form, 1.0f)
#else
void trn__ew_gelu_f32_run(int n, float *o, const float *a) {
    for (int i = 0; i < n; i++) o[i] = trn_sc_gelu_f32_form(a[i]);
}
void trn__ew_gelu_bf16_run(int n, float *o, const float *a) {
    for (int i = 0; i < n; i++) o[i] = trn_sc_gelu_bf16_form(a[i]);
}
#endif
