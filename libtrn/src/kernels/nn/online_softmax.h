// nn/online_softmax.h - owns the flash-attention online-softmax step shared
// by the SDPA kernel (attention.c) and the flex attention kernel
// (flex_attention.c): one key block's scores folded into the running row
// maxima, exp-sums and output rows; and the tile sums' addition both use
// for their long sums. Private to src/kernels.
#ifndef TRN_KERNELS_NN_ONLINE_SOFTMAX_H
#define TRN_KERNELS_NN_ONLINE_SOFTMAX_H

#include <math.h>
#include <stdint.h>

#include "trn/scalar.h"

#if defined(__AVX512F__)
#include <immintrin.h>
#endif

// Row maxima msub[i] = max(msub[i], st[j * ld + i] over j) and row sums
// sum[i] += st[j * ld + i] in order over j. As plain loops (j outer, i
// inner) each vector's running value went through memory on every j: a
// store-to-load chain that perf put at a sixth of the forward's own time
// (BERT, 64 keys). With AVX-512 the values stay in registers; each lane
// sees the same operations in the same order, so the same bits
// (_mm512_max_ps(s, m) is `s > m ? s : m`, NaN s included).
// Lanes [i, i + 16) of ni as a load mask.
#if defined(__AVX512F__)
static inline __mmask16 trn__os_lanes(int64_t ni, int64_t i) {
    return ni - i >= 16 ? (__mmask16)0xFFFF : ni <= i ? 0 : (__mmask16)((1u << (ni - i)) - 1);
}
#endif

static inline void trn__os_col_max(const float *st, int64_t ld, int64_t ni, int64_t nj,
                                   float *msub) {
    int64_t i = 0;
#if defined(__AVX512F__)
    // 64 lanes at a time: four independent chains hide vmaxps' latency.
    for (; i < ni; i += 64) {
        const __mmask16 k0 = trn__os_lanes(ni, i), k1 = trn__os_lanes(ni, i + 16);
        const __mmask16 k2 = trn__os_lanes(ni, i + 32), k3 = trn__os_lanes(ni, i + 48);
        __m512 m0 = _mm512_maskz_loadu_ps(k0, msub + i),
               m1 = _mm512_maskz_loadu_ps(k1, msub + i + 16);
        __m512 m2 = _mm512_maskz_loadu_ps(k2, msub + i + 32),
               m3 = _mm512_maskz_loadu_ps(k3, msub + i + 48);
        for (int64_t j = 0; j < nj; j++) {
            const float *r = st + j * ld + i;
            m0 = _mm512_max_ps(_mm512_maskz_loadu_ps(k0, r), m0);
            m1 = _mm512_max_ps(_mm512_maskz_loadu_ps(k1, r + 16), m1);
            m2 = _mm512_max_ps(_mm512_maskz_loadu_ps(k2, r + 32), m2);
            m3 = _mm512_max_ps(_mm512_maskz_loadu_ps(k3, r + 48), m3);
        }
        _mm512_mask_storeu_ps(msub + i, k0, m0);
        _mm512_mask_storeu_ps(msub + i + 16, k1, m1);
        _mm512_mask_storeu_ps(msub + i + 32, k2, m2);
        _mm512_mask_storeu_ps(msub + i + 48, k3, m3);
    }
#endif
    for (int64_t j = 0; j < nj; j++)
        for (int64_t ii = i; ii < ni; ii++) {
            const float s = st[j * ld + ii];
            msub[ii] = s > msub[ii] ? s : msub[ii];
        }
}

static inline void trn__os_col_sum(const float *st, int64_t ld, int64_t ni, int64_t nj,
                                   float *sum) {
    int64_t i = 0;
#if defined(__AVX512F__)
    for (; i < ni; i += 64) {
        const __mmask16 k0 = trn__os_lanes(ni, i), k1 = trn__os_lanes(ni, i + 16);
        const __mmask16 k2 = trn__os_lanes(ni, i + 32), k3 = trn__os_lanes(ni, i + 48);
        __m512 a0 = _mm512_maskz_loadu_ps(k0, sum + i),
               a1 = _mm512_maskz_loadu_ps(k1, sum + i + 16);
        __m512 a2 = _mm512_maskz_loadu_ps(k2, sum + i + 32),
               a3 = _mm512_maskz_loadu_ps(k3, sum + i + 48);
        for (int64_t j = 0; j < nj; j++) {
            const float *r = st + j * ld + i;
            a0 = _mm512_add_ps(a0, _mm512_maskz_loadu_ps(k0, r));
            a1 = _mm512_add_ps(a1, _mm512_maskz_loadu_ps(k1, r + 16));
            a2 = _mm512_add_ps(a2, _mm512_maskz_loadu_ps(k2, r + 32));
            a3 = _mm512_add_ps(a3, _mm512_maskz_loadu_ps(k3, r + 48));
        }
        _mm512_mask_storeu_ps(sum + i, k0, a0);
        _mm512_mask_storeu_ps(sum + i + 16, k1, a1);
        _mm512_mask_storeu_ps(sum + i + 32, k2, a2);
        _mm512_mask_storeu_ps(sum + i + 48, k3, a3);
    }
#endif
    for (int64_t j = 0; j < nj; j++)
        for (int64_t ii = i; ii < ni; ii++) sum[ii] += st[j * ld + ii];
}

// Running state of ni query rows: maxima m, sums l, output rows o (ev floats
// each), and per-block scratch msub, alpha, sum.
typedef struct trn__online_softmax {
    float *m, *l, *o, *msub, *alpha, *sum;
} trn__online_softmax;

// st holds the block's scores transposed (key j, query i at st[j * ld + i]);
// on return it holds exp(score - new max), ready to multiply with V, and the
// output rows are rescaled to the new maxima.
// o_zero: the caller's o rows are still all zeros (its first key block),
// so their rescale, a pass over o multiplying zeros, is skipped.
static inline void trn__online_softmax_step_z(trn__online_softmax w, float *st, int64_t ld,
                                              int64_t ni, int64_t nj, int64_t ev, int o_zero) {
    for (int64_t i = 0; i < ni; i++) w.msub[i] = w.m[i];
    trn__os_col_max(st, ld, ni, nj, w.msub);
    for (int64_t i = 0; i < ni; i++) {
        const float mnew = w.msub[i];
        // Every key so far masked: subtract 0 (exp(-inf) = 0 keeps the row
        // empty) instead of -inf (NaN).
        w.msub[i] = mnew == -INFINITY ? 0.0f : mnew;
        w.alpha[i] = trn_sc_exp_nonpos_nan_f(w.m[i] - w.msub[i]);
        w.m[i] = mnew;
        w.sum[i] = 0.0f;
    }
    for (int64_t j = 0; j < nj; j++) {
        float *restrict sr = st + j * ld;
        const float *restrict ms = w.msub;
        for (int64_t i = 0; i < ni; i++) sr[i] = trn_sc_exp_nonpos_nan_f(sr[i] - ms[i]);
    }
    trn__os_col_sum(st, ld, ni, nj, w.sum);
    for (int64_t i = 0; i < ni; i++) {
        w.l[i] = w.l[i] * w.alpha[i] + w.sum[i];
        if (w.alpha[i] != 1.0f && !o_zero) {
            float *o = w.o + i * ev;
            for (int64_t e = 0; e < ev; e++) o[e] *= w.alpha[i];
        }
    }
}

static inline void trn__online_softmax_step(trn__online_softmax w, float *st, int64_t ld,
                                            int64_t ni, int64_t nj, int64_t ev) {
    trn__online_softmax_step_z(w, st, ld, ni, nj, ev, 0);
}

// Adds the n x width rows of one key (or query) tile's product t (ld width)
// into c (ld ldc). O and dQ sum over every key, dK and dV over every query:
// one fused multiply-add chain through all of them left SDPA's O and dQ up
// to 3.0x / 2.2x CPU's rms error vs float64 at 4096 keys (1.7x / 1.5x at
// 1024; CPU's chains end at its 512-key blocks). Each tile's terms go in a
// chain from zero instead, and the tiles' sums are added here.
static inline void trn__attn_add_tile(float *c, int64_t ldc, const float *t, int64_t n,
                                      int64_t width) {
    for (int64_t i = 0; i < n; i++)
        for (int64_t e = 0; e < width; e++) c[i * ldc + e] += t[i * width + e];
}

#endif
