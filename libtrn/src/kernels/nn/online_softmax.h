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

// Running state of ni query rows: maxima m, sums l, output rows o (ev floats
// each), and per-block scratch msub, alpha, sum.
typedef struct trn__online_softmax {
    float *m, *l, *o, *msub, *alpha, *sum;
} trn__online_softmax;

// st holds the block's scores transposed (key j, query i at st[j * ld + i]);
// on return it holds exp(score - new max), ready to multiply with V, and the
// output rows are rescaled to the new maxima.
static inline void trn__online_softmax_step(trn__online_softmax w, float *st, int64_t ld,
                                            int64_t ni, int64_t nj, int64_t ev) {
    for (int64_t i = 0; i < ni; i++) w.msub[i] = w.m[i];
    for (int64_t j = 0; j < nj; j++)
        for (int64_t i = 0; i < ni; i++) {
            const float s = st[j * ld + i];
            w.msub[i] = s > w.msub[i] ? s : w.msub[i];
        }
    for (int64_t i = 0; i < ni; i++) {
        const float mnew = w.msub[i];
        // Every key so far masked: subtract 0 (exp(-inf) = 0 keeps the row
        // empty) instead of -inf (NaN).
        w.msub[i] = mnew == -INFINITY ? 0.0f : mnew;
        w.alpha[i] = trn_sc_expf(w.m[i] - w.msub[i]);
        w.m[i] = mnew;
        w.sum[i] = 0.0f;
    }
    for (int64_t j = 0; j < nj; j++)
        for (int64_t i = 0; i < ni; i++) {
            const float p = trn_sc_expf(st[j * ld + i] - w.msub[i]);
            st[j * ld + i] = p;
            w.sum[i] += p;
        }
    for (int64_t i = 0; i < ni; i++) {
        w.l[i] = w.l[i] * w.alpha[i] + w.sum[i];
        if (w.alpha[i] != 1.0f) {
            float *o = w.o + i * ev;
            for (int64_t e = 0; e < ev; e++) o[e] *= w.alpha[i];
        }
    }
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
