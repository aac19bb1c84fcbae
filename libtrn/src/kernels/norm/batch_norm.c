// batch_norm.c - owns the batch norm forward/backward kernels (trn/batch_norm.h).
//
// Channels are independent: both passes split channels across the thread
// pool; each piece walks the batch * spatial elements of its channels (one
// contiguous run of `spatial` elements per batch item). The per-channel sums
// run in double lanes (8 elements a vector, widened straight from memory):
// they are within a few double roundings of the exact sums, the statistics
// and the float32 per-channel outputs their correct roundings. y / dx are
// computed per element from exact statistics, in double for float32 /
// float64 data (rounded once to the output) and in float for 16-bit data
// (within 2^-16 of the output's rounding; dx in double where it cancels).
// Issue 22: neuron's error at most 1.5x PyTorch CPU's on every output; CPU
// forms y / dx in float with float statistics, so a correctly rounded result
// is never further from float64. Each channel's sums run in an order fixed
// by the shape alone: the bits do not depend on the thread split or on the
// channel grouping.
#include <math.h>
#include <string.h>

#include "../kit/bf16_load.h"
#include "norm_common.h"
#include "trn/batch_norm.h"
#include "trn/convert.h"
#include "trn/parallel.h"

// Elements per parallel piece.
#define GRAIN 32768

// Eight elements of each dtype as double lanes, and back (rounded once to
// float, then for 16-bit dtypes once more: a double result within 2^-29 of
// a 16-bit tie may round the other way, at an error of half a unit either
// way). float32 widens straight from memory (vcvtps2pd zmm, m256); bfloat16
// is a shift of its 16 bits; float16 converts element by element.
typedef float bn_f8 __attribute__((vector_size(32)));
typedef uint16_t bn_u16x8 __attribute__((vector_size(16)));
typedef uint32_t bn_u32x8 __attribute__((vector_size(32)));

// GCC 12 splits __builtin_convertvector(float x8 -> double x8) into two
// 4-lane conversions and an insert, and (ISO C: no FP contraction) a * b + c
// into a multiply and an add; with AVX-512 the intrinsics say what is meant.
#if defined(__AVX512F__)
#include <immintrin.h>

static inline trn__vec_d bn_fma(trn__vec_d a, trn__vec_d b, trn__vec_d c) {
    return (trn__vec_d)_mm512_fmadd_pd((__m512d)a, (__m512d)b, (__m512d)c);
}

static inline trn__vec_d bn_widen(bn_u32x8 u) {
    return (trn__vec_d)_mm512_cvtps_pd(_mm256_castsi256_ps((__m256i)u));
}

static inline trn__vec_d ld8_f32(const float *p) {
    return (trn__vec_d)_mm512_cvtps_pd(_mm256_loadu_ps(p));
}

static inline bn_f8 bn_narrow(trn__vec_d v) { return (bn_f8)_mm512_cvtpd_ps((__m512d)v); }
#else
static inline trn__vec_d bn_fma(trn__vec_d a, trn__vec_d b, trn__vec_d c) { return a * b + c; }

static inline trn__vec_d bn_widen(bn_u32x8 u) {
    bn_f8 f;
    memcpy(&f, &u, sizeof f);
    return __builtin_convertvector(f, trn__vec_d);
}

static inline trn__vec_d ld8_f32(const float *p) {
    bn_f8 h;
    memcpy(&h, p, sizeof h);
    return __builtin_convertvector(h, trn__vec_d);
}

static inline bn_f8 bn_narrow(trn__vec_d v) { return __builtin_convertvector(v, bn_f8); }
#endif

static inline trn__vec_d bn_splat(double s) { return (trn__vec_d){s, s, s, s, s, s, s, s}; }

// a + b on the FMA units (as fma(a, 1, b): the same bits as the add). On
// Zen 4 the adders also run the float <-> double conversions; moving sums
// over balances the two pipes (no measurable change per call on the loaded
// machine of session 24; kept as it costs nothing).
static inline trn__vec_d bn_add_f(trn__vec_d a, trn__vec_d b) {
    return bn_fma(a, bn_splat(1.0), b);
}

static inline void st8_f32(float *p, trn__vec_d v) {
    const bn_f8 h = bn_narrow(v);
    memcpy(p, &h, sizeof h);
}

static inline trn__vec_d ld8_f64(const double *p) {
    trn__vec_d v;
    memcpy(&v, p, sizeof v);
    return v;
}

static inline void st8_f64(double *p, trn__vec_d v) { memcpy(p, &v, sizeof v); }

// (kit/bf16_load.h: one vpmovzxwd from memory, then vcvtps2pd.)
static inline trn__vec_d ld8_bf16(const uint16_t *p) {
    return bn_widen((bn_u32x8)trn__bf16_load8(p));
}

// float bits `u` (a U32 vector) to bfloat16 bits (a U16 vector of the same
// width): round to nearest even, NaN kept quiet, the bits of trn_float_to_bf16.
#define BN_BF16_BITS(u, U32, U16)                                                                  \
    __builtin_convertvector(((U32)(((u)&0x7FFFFFFFu) > 0x7F800000u) & (((u) >> 16) | 0x0040u)) |   \
                                (~(U32)(((u)&0x7FFFFFFFu) > 0x7F800000u) &                         \
                                 (((u) + 0x7FFFu + (((u) >> 16) & 1u)) >> 16)),                    \
                            U16)

static inline void st8_bf16(uint16_t *p, trn__vec_d v) {
    const bn_f8 f = bn_narrow(v);
    bn_u32x8 u;
    memcpy(&u, &f, sizeof u);
    const bn_u16x8 h = BN_BF16_BITS(u, bn_u32x8, bn_u16x8);
    memcpy(p, &h, sizeof h);
}

static inline trn__vec_d ld8_f16(const uint16_t *p) {
    trn__vec_d v;
    for (int j = 0; j < 8; j++) v[j] = trn_half_to_float(p[j]);
    return v;
}

static inline void st8_f16(uint16_t *p, trn__vec_d v) {
    for (int j = 0; j < 8; j++) p[j] = trn_float_to_half((float)v[j]);
}

// 16-bit data's y and dx (most of the time) compute in float lanes, 16 a
// vector: a float result is within 2^-16 of the output's own rounding
// (2^-9), so it rounds as the exact value would except within 2^-16 of a
// tie, where either way is half a unit off. The lane conversions are the
// bits of LD_* / ST_* (whole-vector forms: GCC 12 built a bf16 vector from
// 16 scalar word inserts when converting per element).
typedef uint16_t bn_u16x16 __attribute__((vector_size(32)));
typedef uint32_t bn_u32x16 __attribute__((vector_size(64)));

static inline trn__vec_f vld16_bf16(const uint16_t *p) { return trn__bf16_load16(p); }

// With AVX512-BF16 one vcvtneps2bf16 rounds the 16 lanes (the select form
// above is about a dozen integer ops per vector, the larger part of the y /
// dx loops): it rounds to nearest even and quiets NaNs as trn_float_to_bf16
// does but flushes denormal inputs to zero, so a vector holding a nonzero
// denormal takes the select form (kit/bf16_store.h's rule: the same bits
// for every input).
static inline void vst16_bf16(uint16_t *p, trn__vec_f f) {
    bn_u32x16 u;
    memcpy(&u, &f, sizeof u);
#if defined(__AVX512BF16__) && defined(__AVX512F__)
    // (|u| - 1) < 0x7FFFFF unsigned: a nonzero denormal.
    if (!_mm512_cmplt_epu32_mask(
            _mm512_sub_epi32(_mm512_and_si512((__m512i)u, _mm512_set1_epi32(0x7FFFFFFF)),
                             _mm512_set1_epi32(1)),
            _mm512_set1_epi32(0x007FFFFF))) {
        const __m256bh h = _mm512_cvtneps_pbh((__m512)f);
        memcpy(p, &h, sizeof h);
        return;
    }
#endif
    const bn_u16x16 h = BN_BF16_BITS(u, bn_u32x16, bn_u16x16);
    memcpy(p, &h, sizeof h);
}

static inline trn__vec_f vld16_f16(const uint16_t *p) {
    trn__vec_f f;
    for (int j = 0; j < 16; j++) f[j] = trn_half_to_float(p[j]);
    return f;
}

static inline void vst16_f16(uint16_t *p, trn__vec_f f) {
    for (int j = 0; j < 16; j++) p[j] = trn_float_to_half(f[j]);
}

// Per-channel constants of the elementwise passes: y = x al + be, dx = dy
// sc + (x c1 + c0) in double; y = ((x - hi) - lo) fa + fb and dx = ((dy -
// fgm) - ((x - hi) - lo) fk) fsc in float (16-bit data; hi + lo the mean).
typedef struct bn_coef {
    double al, be, sc, c1, c0;
    float hi, lo, fa, fb, fsc, fk, fgm;
    bool dbl;  // 16-bit dx: double lanes (the channel's dx cancels)
} bn_coef;

static inline void bn_coef_mean(bn_coef *c, double mean) {
    c->hi = (float)mean;
    c->lo = (float)(mean - (double)c->hi);
}

// Rows of the elementwise passes in double lanes: y (float32 / float64
// data) and dx (all; 16-bit data where dx cancels).
#define DEFINE_BN_Y_D(N, T, LDD, STD, LD8, ST8)                                                    \
    static void y_row_d_##N(const T *x, T *y, int64_t S, const bn_coef *c) {                       \
        const trn__vec_d al = bn_splat(c->al), be = bn_splat(c->be);                               \
        int64_t i = 0;                                                                             \
        for (; i + 8 <= S; i += 8) ST8(y + i, bn_fma(LD8(x + i), al, be));                         \
        for (; i < S; i++) y[i] = STD(fma(LDD(x[i]), c->al, c->be));                               \
    }

#define DEFINE_BN_DX_D(N, T, LDD, STD, LD8, ST8)                                                   \
    static void dx_row_d_##N(const T *x, const T *dy, T *dx, int64_t S, const bn_coef *c,          \
                             bool training) {                                                      \
        const trn__vec_d sc = bn_splat(c->sc), c1 = bn_splat(c->c1), c0 = bn_splat(c->c0);         \
        int64_t i = 0;                                                                             \
        if (training) {                                                                            \
            for (; i + 8 <= S; i += 8)                                                             \
                ST8(dx + i, bn_fma(LD8(dy + i), sc, bn_fma(LD8(x + i), c1, c0)));                  \
            for (; i < S; i++) dx[i] = STD(fma(LDD(dy[i]), c->sc, fma(LDD(x[i]), c->c1, c->c0)));  \
        } else {                                                                                   \
            for (; i + 8 <= S; i += 8) ST8(dx + i, LD8(dy + i) * sc);                              \
            for (; i < S; i++) dx[i] = STD(LDD(dy[i]) * c->sc);                                    \
        }                                                                                          \
    }

// Rows of the elementwise passes in float lanes (16-bit data).
#define DEFINE_BN_ROWS_F(N, LD, ST, VLD, VST)                                                      \
    static void y_row_f_##N(const uint16_t *x, uint16_t *y, int64_t S, const bn_coef *c) {         \
        int64_t i = 0;                                                                             \
        for (; i + 16 <= S; i += 16) VST(y + i, ((VLD(x + i) - c->hi) - c->lo) * c->fa + c->fb);   \
        for (; i < S; i++) y[i] = ST(((LD(x[i]) - c->hi) - c->lo) * c->fa + c->fb);                \
    }                                                                                              \
    static void dx_row_f_##N(const uint16_t *x, const uint16_t *dy, uint16_t *dx, int64_t S,       \
                             const bn_coef *c, bool training) {                                    \
        int64_t i = 0;                                                                             \
        if (training) {                                                                            \
            for (; i + 16 <= S; i += 16)                                                           \
                VST(dx + i,                                                                        \
                    ((VLD(dy + i) - c->fgm) - ((VLD(x + i) - c->hi) - c->lo) * c->fk) * c->fsc);   \
            for (; i < S; i++)                                                                     \
                dx[i] =                                                                            \
                    ST(((LD(dy[i]) - c->fgm) - ((LD(x[i]) - c->hi) - c->lo) * c->fk) * c->fsc);    \
        } else {                                                                                   \
            for (; i + 16 <= S; i += 16) VST(dx + i, VLD(dy + i) * c->fsc);                        \
            for (; i < S; i++) dx[i] = ST(LD(dy[i]) * c->fsc);                                     \
        }                                                                                          \
    }

// One element as double, and back (rounded as the vector forms).
#define LDD_f16(v) ((double)trn_half_to_float(v))
#define LDD_bf16(v) ((double)trn_bf16_to_float(v))
#define LDD_id(v) ((double)(v))
#define STD_f16(v) trn_float_to_half((float)(v))
#define STD_bf16(v) trn_float_to_bf16((float)(v))
#define STD_f32(v) ((float)(v))
#define STD_f64(v) (v)

static inline double bn_vsum(trn__vec_d v) {
    double s = 0;
    TRN_VREDUCE(trn__vec_d, double, v, s);
    return s;
}
typedef struct bn_args {
    trn_dtype dtype, pdt;
    int64_t batch, channels, spatial;
    const void *x, *dy, *weight, *bias, *mean_in, *var_in;
    void *rmean, *rvar, *y, *smean, *sinvstd, *dx, *dweight, *dbias;
    int training, backward;
    double momentum, eps;
} bn_args;

_Static_assert(sizeof(bn_args) <= TRN_TASK_MAX_ARGS, "batch norm args too large");

_Static_assert(sizeof(bn_args) <= TRN_TASK_MAX_ARGS, "batch norm args too large");

static double param_or(const bn_args *a, const void *p, int64_t c, double dflt) {
    return p ? trn__load_real(a->pdt, p, c) : dflt;
}

static bool bn_half(const bn_args *a) {
    return a->pdt == TRN_DTYPE_F16 || a->pdt == TRN_DTYPE_BF16;
}

// Per-channel statistics of the forward pass: mean and 1 / sqrt(var + eps),
// from the batch (training: the exact mean and the sum of squared
// deviations m2; also updates the running stats) or from the running stats
// (eval).
static void channel_stats(const bn_args *a, int64_t c, double m2, double *mean, double *invstd) {
    const int64_t n = a->batch * a->spatial;
    if (!a->training) {
        *mean = trn__load_real(a->pdt, a->rmean, c);
        *invstd = 1.0 / sqrt(trn__load_real(a->pdt, a->rvar, c) + a->eps);
        return;
    }
    *invstd = 1.0 / sqrt(m2 / (double)n + a->eps);
    // The running update uses the exact statistics; the normalization uses
    // them as saved when the param dtype is 16-bit, as PyTorch CPU does, and
    // exact (double) otherwise: a float32 mean of 100 is off by up to 4e-6,
    // which would be an error of 4e-6 / std in every output.
    const double exact_mean = *mean;
    if (a->smean) {
        trn__store_real(a->pdt, a->smean, c, *mean);
        if (bn_half(a)) *mean = trn__load_real(a->pdt, a->smean, c);
    }
    if (a->sinvstd) {
        trn__store_real(a->pdt, a->sinvstd, c, *invstd);
        if (bn_half(a)) *invstd = trn__load_real(a->pdt, a->sinvstd, c);
    }
    if (a->rmean) {
        const double rm = trn__load_real(a->pdt, a->rmean, c);
        trn__store_real(a->pdt, a->rmean, c, a->momentum * exact_mean + (1 - a->momentum) * rm);
    }
    if (a->rvar) {
        const double rv = trn__load_real(a->pdt, a->rvar, c);
        const double unbiased = m2 / (double)(n - 1);
        trn__store_real(a->pdt, a->rvar, c, a->momentum * unbiased + (1 - a->momentum) * rv);
    }
}

// Channels are walked in groups, in memory order: batch item outer, channel
// inner, one contiguous stretch of the group's rows per item (walking one
// channel at a time hops CH * S elements from row to row, which the
// prefetchers follow badly). A group holds up to BN_GROUP channels and
// about BN_GROUP_BYTES of data, so that the pass after the sums (y, or dx)
// reads the group again from L2 rather than from L3 / memory. Each channel's
// sums are the same operations in the same order whatever the group.
#define BN_GROUP 32
#define BN_GROUP_BYTES (512 * 1024)

static int64_t bn_group(const bn_args *a, int64_t c0, int64_t c1, int arrays) {
    const int64_t per = a->batch * a->spatial * (int64_t)trn_dtype_size(a->dtype) * arrays;
    int64_t g = per > 0 ? BN_GROUP_BYTES / per : BN_GROUP;
    g = g < 1 ? 1 : g > BN_GROUP ? BN_GROUP : g;
    return c1 - c0 < g ? c1 - c0 : g;
}

// For each batch item b, each channel k of the group: BODY_V on the 8
// elements at row + e with lane set j (0 or 1: two sets of lane sums break
// the add latency chain of a long row; rows under 32 elements use set 0
// only, half the sums to reload per row: 4x4 planes 5-10 % faster), BODY_S
// on the element row + e of a row's tail. Which element goes to which set
// depends on the shape only.
#define BN_ROWS(BODY_V, BODY_S)                                                                    \
    for (int64_t b = 0; b < a->batch; b++)                                                         \
        for (int64_t k = 0; k < G; k++) {                                                          \
            const int64_t row = (b * CH + g0 + k) * S;                                             \
            int64_t i = 0;                                                                         \
            for (; S >= 32 && i + 16 <= S; i += 16) {                                              \
                {                                                                                  \
                    const int j = 0;                                                               \
                    const int64_t e = i;                                                           \
                    (void)j;                                                                       \
                    BODY_V;                                                                        \
                }                                                                                  \
                {                                                                                  \
                    const int j = 1;                                                               \
                    const int64_t e = i + 8;                                                       \
                    (void)j;                                                                       \
                    BODY_V;                                                                        \
                }                                                                                  \
            }                                                                                      \
            for (; i + 8 <= S; i += 8) {                                                           \
                const int j = 0;                                                                   \
                const int64_t e = i;                                                               \
                (void)j;                                                                           \
                BODY_V;                                                                            \
            }                                                                                      \
            for (; i < S; i++) {                                                                   \
                const int64_t e = i;                                                               \
                BODY_S;                                                                            \
            }                                                                                      \
        }

static inline double bn_total(const trn__vec_d v[2], double tail) {
    return bn_vsum(v[0] + v[1]) + tail;
}

// The forward's statistics in one pass: s1 = sum(x), s2 = sum(x^2) (x^2
// exact in double for float and 16-bit data), m2 = s2 - s1^2 / n. Each
// lane sum rounds at most len = n / 16 + 4 times, so m2 is off by at most
// ~2 len 2^-53 s2: below 2^-30 m2 (far below a float rounding) while s2 len
// <= 2^22 m2, i.e. while the mean is within a few tens of standard
// deviations of 0 (ResNet's activations). Otherwise (a mean offset like 100
// +- 1) a second pass sums d = x - mean and d^2 about that mean.
#define BN_CANCEL_MAX 4194304.0

// max(v, 0) that keeps a NaN (fmax would return 0: a NaN variance would
// become 0 and invstd 1 / sqrt(eps)).
static inline double bn_nonneg(double v) { return v < 0 ? 0 : v; }

#define DEFINE_BN(N, T, LDD, STD, LD8, ST8, HALF, YROW, DXF, DXD)                                  \
    static void fwd_##N(void *ctx, int64_t c0, int64_t c1) {                                       \
        const bn_args *a = ctx;                                                                    \
        const int64_t S = a->spatial, CH = a->channels;                                            \
        const double n = (double)(a->batch * S);                                                   \
        const double len = n / 16 + 4;                                                             \
        const T *X = (const T *)a->x;                                                              \
        for (int64_t g0 = c0, G; g0 < c1; g0 += G) {                                               \
            G = bn_group(a, g0, c1, 2);                                                            \
            double mean[BN_GROUP], m2[BN_GROUP];                                                   \
            if (a->training) {                                                                     \
                trn__vec_d acc1[BN_GROUP][2], acc2[BN_GROUP][2];                                   \
                double t1[BN_GROUP], t2[BN_GROUP];                                                 \
                memset(acc1, 0, sizeof acc1);                                                      \
                memset(acc2, 0, sizeof acc2);                                                      \
                for (int64_t k = 0; k < G; k++) t1[k] = t2[k] = 0;                                 \
                BN_ROWS(                                                                           \
                    {                                                                              \
                        const trn__vec_d v = LD8(X + row + e);                                     \
                        acc1[k][j] = bn_add_f(v, acc1[k][j]);                                      \
                        acc2[k][j] = bn_fma(v, v, acc2[k][j]);                                     \
                    },                                                                             \
                    {                                                                              \
                        const double v = LDD(X[row + e]);                                          \
                        t1[k] += v;                                                                \
                        t2[k] = fma(v, v, t2[k]);                                                  \
                    })                                                                             \
                bool again = false, finite[BN_GROUP];                                              \
                for (int64_t k = 0; k < G; k++) {                                                  \
                    const double s1 = bn_total(acc1[k], t1[k]), s2 = bn_total(acc2[k], t2[k]);     \
                    mean[k] = s1 / n;                                                              \
                    m2[k] = bn_nonneg(s2 - s1 * mean[k]);                                          \
                    /* An inf or NaN in the channel: mean and variance stay */                     \
                    /* as these sums give them (inf / NaN), as on CPU. */                          \
                    finite[k] = isfinite(s1);                                                      \
                    again |= finite[k] && !(s2 * len <= BN_CANCEL_MAX * m2[k]);                    \
                }                                                                                  \
                if (again) {                                                                       \
                    memset(acc1, 0, sizeof acc1);                                                  \
                    memset(acc2, 0, sizeof acc2);                                                  \
                    for (int64_t k = 0; k < G; k++) t1[k] = t2[k] = 0;                             \
                    BN_ROWS(                                                                       \
                        {                                                                          \
                            const trn__vec_d d = bn_add_f(LD8(X + row + e), bn_splat(-mean[k]));   \
                            acc1[k][j] = bn_add_f(d, acc1[k][j]);                                  \
                            acc2[k][j] = bn_fma(d, d, acc2[k][j]);                                 \
                        },                                                                         \
                        {                                                                          \
                            const double d = LDD(X[row + e]) - mean[k];                            \
                            t1[k] += d;                                                            \
                            t2[k] = fma(d, d, t2[k]);                                              \
                        })                                                                         \
                    for (int64_t k = 0; k < G; k++) {                                              \
                        if (!finite[k]) continue;                                                  \
                        const double s1 = bn_total(acc1[k], t1[k]);                                \
                        const double s2 = bn_total(acc2[k], t2[k]);                                \
                        mean[k] += s1 / n;                                                         \
                        m2[k] = bn_nonneg(s2 - s1 * s1 / n);                                       \
                    }                                                                              \
                }                                                                                  \
            }                                                                                      \
            /* y = x * al + be in double: the error of be's rounding, */                           \
            /* 2^-53 of mean * al, stays far below y's own rounding. */                            \
            bn_coef co[BN_GROUP];                                                                  \
            for (int64_t k = 0; k < G; k++) {                                                      \
                double invstd;                                                                     \
                channel_stats(a, g0 + k, a->training ? m2[k] : 0, &mean[k], &invstd);              \
                const double bias = param_or(a, a->bias, g0 + k, 0.0);                             \
                co[k].al = invstd * param_or(a, a->weight, g0 + k, 1.0);                           \
                co[k].be = bias - mean[k] * co[k].al;                                              \
                co[k].fa = (float)co[k].al, co[k].fb = (float)bias;                                \
                bn_coef_mean(&co[k], mean[k]);                                                     \
            }                                                                                      \
            T *Y = (T *)a->y;                                                                      \
            for (int64_t b = 0; b < a->batch; b++)                                                 \
                for (int64_t k = 0; k < G; k++) {                                                  \
                    const int64_t row = (b * CH + g0 + k) * S;                                     \
                    YROW(X + row, Y + row, S, &co[k]);                                             \
                }                                                                                  \
        }                                                                                          \
    }                                                                                              \
    static void bwd_##N(void *ctx, int64_t c0, int64_t c1) {                                       \
        const bn_args *a = ctx;                                                                    \
        const int64_t S = a->spatial, CH = a->channels;                                            \
        const double n = (double)(a->batch * S), len = n / 16 + 4;                                 \
        const T *X = (const T *)a->x, *DY = (const T *)a->dy;                                      \
        /* Training with float32 params: the saved stats are the float */                          \
        /* roundings of the forward's exact ones; the backward recovers */                         \
        /* those from sums of d = x - saved mean and d^2 (two more lane */                         \
        /* sums) and uses them where they round to the saved values. */                            \
        const bool exact = a->training && a->pdt == TRN_DTYPE_F32;                                 \
        for (int64_t g0 = c0, G; g0 < c1; g0 += G) {                                               \
            G = bn_group(a, g0, c1, 3);                                                            \
            double ms[BN_GROUP], inv[BN_GROUP];                                                    \
            bn_coef co[BN_GROUP];                                                                  \
            trn__vec_d as[BN_GROUP][2], ap[BN_GROUP][2], ad[BN_GROUP][2], aq[BN_GROUP][2];         \
            trn__vec_d ag[BN_GROUP][2];                                                            \
            double ts[BN_GROUP], tp[BN_GROUP], td[BN_GROUP], tq[BN_GROUP], tg[BN_GROUP];           \
            memset(as, 0, sizeof as);                                                              \
            memset(ap, 0, sizeof ap);                                                              \
            memset(ad, 0, sizeof ad);                                                              \
            memset(aq, 0, sizeof aq);                                                              \
            memset(ag, 0, sizeof ag);                                                              \
            for (int64_t k = 0; k < G; k++) {                                                      \
                ms[k] = trn__load_real(a->pdt, a->mean_in, g0 + k);                                \
                const double sv = trn__load_real(a->pdt, a->var_in, g0 + k);                       \
                inv[k] = a->training ? sv : 1.0 / sqrt(sv + a->eps);                               \
                ts[k] = tp[k] = td[k] = tq[k] = tg[k] = 0;                                         \
            }                                                                                      \
            /* 16-bit data also sums dy^2: whether dx cancels (below). */                          \
            /* exact: raw sums of x, x^2, dy x first (4 lane ops, as the */                        \
            /* forward's; a second pass about the saved mean where they */                         \
            /* cancel, the forward's test), else sums about the mean. */                           \
            bool raw = false;                                                                      \
            if (exact) {                                                                           \
                BN_ROWS(                                                                           \
                    {                                                                              \
                        const trn__vec_d g = LD8(DY + row + e);                                    \
                        const trn__vec_d v = LD8(X + row + e);                                     \
                        as[k][j] += g;                                                             \
                        ap[k][j] = bn_fma(g, v, ap[k][j]);                                         \
                        ad[k][j] = bn_add_f(v, ad[k][j]);                                          \
                        aq[k][j] = bn_fma(v, v, aq[k][j]);                                         \
                        if (HALF) ag[k][j] = bn_fma(g, g, ag[k][j]);                               \
                    },                                                                             \
                    {                                                                              \
                        const double g = LDD(DY[row + e]);                                         \
                        const double v = LDD(X[row + e]);                                          \
                        ts[k] += g;                                                                \
                        tp[k] = fma(g, v, tp[k]);                                                  \
                        td[k] += v;                                                                \
                        tq[k] = fma(v, v, tq[k]);                                                  \
                        tg[k] = fma(g, g, tg[k]);                                                  \
                    })                                                                             \
                raw = true;                                                                        \
                for (int64_t k = 0; k < G; k++) {                                                  \
                    const double s1 = bn_total(ad[k], td[k]), s2 = bn_total(aq[k], tq[k]);         \
                    raw &= s2 * len <= BN_CANCEL_MAX * bn_nonneg(s2 - s1 * s1 / n);                \
                }                                                                                  \
            }                                                                                      \
            if (exact && !raw) {                                                                   \
                memset(as, 0, sizeof as);                                                          \
                memset(ap, 0, sizeof ap);                                                          \
                memset(ad, 0, sizeof ad);                                                          \
                memset(aq, 0, sizeof aq);                                                          \
                memset(ag, 0, sizeof ag);                                                          \
                for (int64_t k = 0; k < G; k++) ts[k] = tp[k] = td[k] = tq[k] = tg[k] = 0;         \
                BN_ROWS(                                                                           \
                    {                                                                              \
                        const trn__vec_d g = LD8(DY + row + e);                                    \
                        const trn__vec_d d = bn_add_f(LD8(X + row + e), bn_splat(-ms[k]));         \
                        as[k][j] += g;                                                             \
                        ap[k][j] = bn_fma(g, d, ap[k][j]);                                         \
                        ad[k][j] = bn_add_f(d, ad[k][j]);                                          \
                        aq[k][j] = bn_fma(d, d, aq[k][j]);                                         \
                        if (HALF) ag[k][j] = bn_fma(g, g, ag[k][j]);                               \
                    },                                                                             \
                    {                                                                              \
                        const double g = LDD(DY[row + e]);                                         \
                        const double d = LDD(X[row + e]) - ms[k];                                  \
                        ts[k] += g;                                                                \
                        tp[k] = fma(g, d, tp[k]);                                                  \
                        td[k] += d;                                                                \
                        tq[k] = fma(d, d, tq[k]);                                                  \
                        tg[k] = fma(g, g, tg[k]);                                                  \
                    })                                                                             \
            } else if (!exact)                                                                     \
                BN_ROWS(                                                                           \
                    {                                                                              \
                        const trn__vec_d g = LD8(DY + row + e);                                    \
                        const trn__vec_d d = bn_add_f(LD8(X + row + e), bn_splat(-ms[k]));         \
                        as[k][j] += g;                                                             \
                        ap[k][j] = bn_fma(g, d, ap[k][j]);                                         \
                        if (HALF) ag[k][j] = bn_fma(g, g, ag[k][j]);                               \
                    },                                                                             \
                    {                                                                              \
                        const double g = LDD(DY[row + e]);                                         \
                        ts[k] += g;                                                                \
                        tp[k] = fma(g, LDD(X[row + e]) - ms[k], tp[k]);                            \
                        tg[k] = fma(g, g, tg[k]);                                                  \
                    })                                                                             \
            for (int64_t k = 0; k < G; k++) {                                                      \
                const double sum = bn_total(as[k], ts[k]);                                         \
                double dot = bn_total(ap[k], tp[k]), mean = ms[k];                                 \
                if (exact) {                                                                       \
                    const double sd = bn_total(ad[k], td[k]), sq = bn_total(aq[k], tq[k]);         \
                    /* raw: sd = sum x, sq = sum x^2, dot = sum dy x; else */                      \
                    /* the sums of d = x - saved mean, d^2 and dy d. */                            \
                    const double m = raw ? sd / n : ms[k] + sd / n;                                \
                    const double m2 = bn_nonneg(raw ? sq - sd * m : sq - sd * sd / n);             \
                    const double iv = 1.0 / sqrt(m2 / n + a->eps);                                 \
                    if (raw) dot -= ms[k] * sum;                                                   \
                    if ((float)m == ms[k] && (float)iv == inv[k]) {                                \
                        dot -= (m - ms[k]) * sum;                                                  \
                        mean = m, inv[k] = iv;                                                     \
                    }                                                                              \
                }                                                                                  \
                if (a->dweight) trn__store_real(a->pdt, a->dweight, g0 + k, dot * inv[k]);         \
                if (a->dbias) trn__store_real(a->pdt, a->dbias, g0 + k, sum);                      \
                /* dx = sc (dy - sum / n - (x - mean) kq), kq = dot inv^2 / n, */                  \
                /* as dy * sc + (x * c1 + c0): in double the cancelling */                         \
                /* terms lose 2^-53 of mean / std, far below dx's rounding. */                     \
                bn_coef *c = &co[k];                                                               \
                c->sc = inv[k] * param_or(a, a->weight, g0 + k, 1.0);                              \
                const double kq = a->training ? dot * inv[k] * inv[k] / n : 0;                     \
                const double gm = a->training ? sum / n : 0;                                       \
                c->c1 = -kq * c->sc;                                                               \
                c->c0 = (mean * kq - gm) * c->sc;                                                  \
                c->fsc = (float)c->sc, c->fk = (float)kq, c->fgm = (float)gm;                      \
                bn_coef_mean(c, mean);                                                             \
                /* 16-bit dx in float unless what is left of dy after */                           \
                /* taking out mean(dy) and xhat mean(dy xhat) has under */                         \
                /* 2^-8 of dy's rms (energy r; sum xhat^2 = n (1 - eps inv^2)): */                 \
                /* float's error then stays under 2^-16 of dx's scale. Else */                     \
                /* double (n = 2 leaves eps / var of dy). */                                       \
                const double g2 = bn_total(ag[k], tg[k]);                                          \
                const double s2 = 1 - a->eps * inv[k] * inv[k];                                    \
                const double r = g2 - n * gm * gm - dot * kq * (2 - s2);                           \
                c->dbl = HALF && a->training && !(r >= 0x1p-16 * g2);                              \
            }                                                                                      \
            if (!a->dx) continue;                                                                  \
            T *DX = (T *)a->dx;                                                                    \
            for (int64_t b = 0; b < a->batch; b++)                                                 \
                for (int64_t k = 0; k < G; k++) {                                                  \
                    const int64_t row = (b * CH + g0 + k) * S;                                     \
                    if (co[k].dbl)                                                                 \
                        DXD(X + row, DY + row, DX + row, S, &co[k], a->training);                  \
                    else                                                                           \
                        DXF(X + row, DY + row, DX + row, S, &co[k], a->training);                  \
                }                                                                                  \
        }                                                                                          \
    }

DEFINE_BN_Y_D(f32, float, LDD_id, STD_f32, ld8_f32, st8_f32)
DEFINE_BN_Y_D(f64, double, LDD_id, STD_f64, ld8_f64, st8_f64)
DEFINE_BN_DX_D(f16, uint16_t, LDD_f16, STD_f16, ld8_f16, st8_f16)
DEFINE_BN_DX_D(bf16, uint16_t, LDD_bf16, STD_bf16, ld8_bf16, st8_bf16)
DEFINE_BN_DX_D(f32, float, LDD_id, STD_f32, ld8_f32, st8_f32)
DEFINE_BN_DX_D(f64, double, LDD_id, STD_f64, ld8_f64, st8_f64)
DEFINE_BN_ROWS_F(f16, LD_f16, ST_f16, vld16_f16, vst16_f16)
DEFINE_BN_ROWS_F(bf16, LD_bf16, ST_bf16, vld16_bf16, vst16_bf16)

DEFINE_BN(f16, uint16_t, LDD_f16, STD_f16, ld8_f16, st8_f16, 1, y_row_f_f16, dx_row_f_f16,
          dx_row_d_f16)
DEFINE_BN(bf16, uint16_t, LDD_bf16, STD_bf16, ld8_bf16, st8_bf16, 1, y_row_f_bf16, dx_row_f_bf16,
          dx_row_d_bf16)
DEFINE_BN(f32, float, LDD_id, STD_f32, ld8_f32, st8_f32, 0, y_row_d_f32, dx_row_d_f32, dx_row_d_f32)
DEFINE_BN(f64, double, LDD_id, STD_f64, ld8_f64, st8_f64, 0, y_row_d_f64, dx_row_d_f64,
          dx_row_d_f64)

typedef void (*piece_fn)(void *, int64_t, int64_t);

static void pick(trn_dtype d, piece_fn *fwd, piece_fn *bwd) {
    switch (d) {
#define CASE(E, N, ...)                                                                            \
    case E:                                                                                        \
        *fwd = fwd_##N;                                                                            \
        *bwd = bwd_##N;                                                                            \
        return;
        TRN_KIT_FLOAT_TYPES(CASE)
#undef CASE
    default: *fwd = *bwd = NULL;
    }
}

int trn_batch_norm_supports(trn_dtype dtype, trn_dtype param_dtype) {
    return trn__norm_dtype_pair_ok(dtype, param_dtype);
}

static trn_status bn_task(void *args) {
    const bn_args *a = args;
    const size_t data = (size_t)(a->batch * a->channels * a->spatial) * trn_dtype_size(a->dtype);
    const size_t par = (size_t)a->channels * trn_dtype_size(a->pdt);
    trn__access_set rg = {.count = 0};
    trn__access_add(&rg, a->x, data);
    trn__access_add(&rg, a->dy, data);
    trn__access_add(&rg, a->y, data);
    trn__access_add(&rg, a->dx, data);
    const void *pars[] = {a->weight, a->bias, a->mean_in, a->var_in,
                          a->rmean,  a->rvar, a->smean,   a->sinvstd};
    for (size_t i = 0; i < sizeof pars / sizeof *pars; i++) trn__access_add(&rg, pars[i], par);
    trn__access_add(&rg, a->dweight, par);
    trn__access_add(&rg, a->dbias, par);
    trn_status st = trn__access_begin(&rg);
    if (st == TRN_SUCCESS) {
        piece_fn fwd, bwd;
        pick(a->dtype, &fwd, &bwd);
        trn_parallel_for(a->channels, trn__grain(GRAIN, a->batch * a->spatial),
                         a->backward ? bwd : fwd, (void *)a);
    }
    trn__access_end(&rg);
    return st;
}

static trn_status check_common(trn_stream *stream, const void *d, trn_dtype dtype, trn_dtype pd,
                               int64_t batch, int64_t channels, int64_t spatial, const char *fn) {
    trn_status st = trn__norm_check_dtypes(stream, d, trn_batch_norm_supports(dtype, pd), fn, dtype,
                                           "params", pd, NULL, pd);
    if (st != TRN_SUCCESS) return st;
    int64_t n;
    if (batch < 0 || channels < 0 || spatial < 0 || __builtin_mul_overflow(batch, channels, &n) ||
        __builtin_mul_overflow(n, spatial, &n) || __builtin_mul_overflow(n, 8, &n))
        return trn__set_error(TRN_ERROR_INVALID_ARGUMENT, "%s: invalid sizes [%lld, %lld, %lld]",
                              fn, (long long)batch, (long long)channels, (long long)spatial);
    return trn__fork_check();
}

trn_status trn_batch_norm_launch(trn_stream *stream, const trn_batch_norm_desc *d) {
    trn_status st = check_common(stream, d, d ? d->dtype : TRN_DTYPE_F32,
                                 d ? d->param_dtype : TRN_DTYPE_F32, d ? d->batch : 0,
                                 d ? d->channels : 0, d ? d->spatial : 0, "trn_batch_norm_launch");
    if (st != TRN_SUCCESS || d->channels == 0) return st;
    const int64_t numel = d->batch * d->channels * d->spatial;
    if ((numel > 0 && (d->x == NULL || d->y == NULL)) ||
        (!d->training && (d->running_mean == NULL || d->running_var == NULL)))
        return trn__set_error(TRN_ERROR_INVALID_ARGUMENT,
                              "trn_batch_norm_launch: x / y (or, in eval, the running stats) "
                              "is NULL");
    const bn_args a = {.dtype = d->dtype,
                       .pdt = d->param_dtype,
                       .batch = d->batch,
                       .channels = d->channels,
                       .spatial = d->spatial,
                       .x = numel > 0 ? d->x : NULL,
                       .y = numel > 0 ? d->y : NULL,
                       .weight = d->weight,
                       .bias = d->bias,
                       .rmean = d->running_mean,
                       .rvar = d->running_var,
                       .smean = d->training ? d->save_mean : NULL,
                       .sinvstd = d->training ? d->save_invstd : NULL,
                       .training = d->training != 0,
                       .momentum = d->momentum,
                       .eps = d->eps};
    return trn_stream_launch(stream, bn_task, &a, sizeof a);
}

trn_status trn_batch_norm_backward_launch(trn_stream *stream,
                                          const trn_batch_norm_backward_desc *d) {
    trn_status st =
        check_common(stream, d, d ? d->dtype : TRN_DTYPE_F32, d ? d->param_dtype : TRN_DTYPE_F32,
                     d ? d->batch : 0, d ? d->channels : 0, d ? d->spatial : 0,
                     "trn_batch_norm_backward_launch");
    if (st != TRN_SUCCESS || d->channels == 0) return st;
    const int64_t numel = d->batch * d->channels * d->spatial;
    if ((numel > 0 && (d->x == NULL || d->dy == NULL)) || d->mean == NULL ||
        d->invstd_or_var == NULL)
        return trn__set_error(TRN_ERROR_INVALID_ARGUMENT,
                              "trn_batch_norm_backward_launch: an input pointer is NULL");
    const bn_args a = {.backward = 1,
                       .dtype = d->dtype,
                       .pdt = d->param_dtype,
                       .batch = d->batch,
                       .channels = d->channels,
                       .spatial = d->spatial,
                       .x = numel > 0 ? d->x : NULL,
                       .dy = numel > 0 ? d->dy : NULL,
                       .weight = d->weight,
                       .mean_in = d->mean,
                       .var_in = d->invstd_or_var,
                       .training = d->training != 0,
                       .eps = d->eps,
                       .dx = numel > 0 ? d->dx : NULL,
                       .dweight = d->dweight,
                       .dbias = d->dbias};
    return trn_stream_launch(stream, bn_task, &a, sizeof a);
}
