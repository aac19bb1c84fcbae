// batch_norm.c - owns the batch norm forward/backward kernels (trn/batch_norm.h).
//
// Channels are independent: both passes split channels across the thread
// pool; each piece walks the batch * spatial elements of its channels (one
// contiguous run of `spatial` elements per batch item). Per-channel sums are
// accumulated in double, so the statistics do not depend on how the work is
// split and are at least as accurate as PyTorch CPU's.
#include <math.h>
#include <string.h>

#include "norm_common.h"
#include "trn/batch_norm.h"
#include "trn/convert.h"
#include "trn/parallel.h"

// Elements per parallel piece.
#define GRAIN 32768

// Whole-vector loads and stores of one lane group. Written out because GCC
// 12 assembled a bf16 vector from 16 scalar word inserts when the
// conversion was per element inside TRN_VACC (bf16 batch norm ran at half
// of CPU's speed); the conversions are the same bits as LD_* / ST_*.
typedef uint16_t bn_vec_u16 __attribute__((vector_size(32)));
typedef uint32_t bn_vec_u32 __attribute__((vector_size(64)));

static inline trn__vec_f vld_bf16(const uint16_t *p) {
    bn_vec_u16 h;
    memcpy(&h, p, sizeof h);
    const bn_vec_u32 u = __builtin_convertvector(h, bn_vec_u32) << 16;
    trn__vec_f f;
    memcpy(&f, &u, sizeof f);
    return f;
}

static inline void vst_bf16(uint16_t *p, trn__vec_f f) {
    bn_vec_u32 u;
    memcpy(&u, &f, sizeof u);
    const bn_vec_u32 rounded = (u + 0x7FFFu + ((u >> 16) & 1u)) >> 16;
    const bn_vec_u32 nan = (u >> 16) | 0x0040u;
    const bn_vec_u32 is_nan = (bn_vec_u32)((u & 0x7FFFFFFFu) > 0x7F800000u);
    const bn_vec_u16 h = __builtin_convertvector((is_nan & nan) | (~is_nan & rounded), bn_vec_u16);
    memcpy(p, &h, sizeof h);
}

static inline trn__vec_f vld_f16(const uint16_t *p) {
    float t[TRN_VLANES(trn__vec_f, float)];
    for (int j = 0; j < TRN_VLANES(trn__vec_f, float); j++) t[j] = trn_half_to_float(p[j]);
    trn__vec_f f;
    memcpy(&f, t, sizeof f);
    return f;
}

static inline void vst_f16(uint16_t *p, trn__vec_f f) {
    for (int j = 0; j < TRN_VLANES(trn__vec_f, float); j++) p[j] = trn_float_to_half(f[j]);
}

static inline trn__vec_f vld_f32(const float *p) {
    trn__vec_f f;
    memcpy(&f, p, sizeof f);
    return f;
}

static inline void vst_f32(float *p, trn__vec_f f) { memcpy(p, &f, sizeof f); }

static inline trn__vec_d vld_f64(const double *p) {
    trn__vec_d f;
    memcpy(&f, p, sizeof f);
    return f;
}

static inline void vst_f64(double *p, trn__vec_d f) { memcpy(p, &f, sizeof f); }

// The per-channel sums accumulate in double lanes (issue 22: neuron's error
// at most 1.5x CPU's on every output, also for channels of a few elements,
// where a float lane sum rounded 16 terms and CPU's own order landed closer):
// a float lane group is widened to two double halves (vcvtps2pd) and x - mean
// and the products are formed in double, so sum(x), sum(dy) and
// sum(dy * (x - mean)) - sums that cancel - are within a double rounding or
// so of the exact sums, and the float32 results (dbias, dweight, running
// mean) their correct roundings, barring ties. sum((x - mean)^2) (positive
// terms) stays in float lanes flushed to double (see the forward).
typedef float bn_vec_f8 __attribute__((vector_size(32)));

static inline trn__vec_d bn_lo(trn__vec_f v) {
    bn_vec_f8 h;
    memcpy(&h, &v, sizeof h);
    return __builtin_convertvector(h, trn__vec_d);
}

static inline trn__vec_d bn_hi(trn__vec_f v) {
    bn_vec_f8 h;
    memcpy(&h, (const char *)&v + sizeof h, sizeof h);
    return __builtin_convertvector(h, trn__vec_d);
}

// acc += v; acc += g * (v - m), lane by lane in double.
static inline void bn_acc_f(trn__vec_d *acc, trn__vec_f v) { *acc += bn_lo(v) + bn_hi(v); }

static inline void bn_acc_dot_f(trn__vec_d *acc, trn__vec_f g, trn__vec_f v, double m) {
    *acc += bn_lo(g) * (bn_lo(v) - m) + bn_hi(g) * (bn_hi(v) - m);
}

static inline void bn_acc_d(trn__vec_d *acc, trn__vec_d v) { *acc += v; }

static inline void bn_acc_dot_d(trn__vec_d *acc, trn__vec_d g, trn__vec_d v, double m) {
    *acc += g * (v - m);
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

static double param_or(const bn_args *a, const void *p, int64_t c, double dflt) {
    return p ? trn__load_real(a->pdt, p, c) : dflt;
}

// Per-channel statistics of the forward pass: mean and 1 / sqrt(var + eps),
// from the batch (training, also updating the running stats) or from the
// running stats (eval).
static void channel_stats(const bn_args *a, int64_t c, double sum, double sq, double *mean,
                          double *invstd) {
    const int64_t n = a->batch * a->spatial;
    if (!a->training) {
        *mean = trn__load_real(a->pdt, a->rmean, c);
        *invstd = 1.0 / sqrt(trn__load_real(a->pdt, a->rvar, c) + a->eps);
        return;
    }
    (void)sum;
    const double var = sq / (double)n;
    *invstd = 1.0 / sqrt(var + a->eps);
    // The running update uses the exact statistics; the normalization uses
    // them as saved when the param dtype is 16-bit, as PyTorch CPU does, and
    // exact (double) otherwise: a float32 mean of 100 is off by up to 4e-6,
    // which would be an error of 4e-6 / std in every output.
    const double exact_mean = *mean;
    const bool half = a->pdt == TRN_DTYPE_F16 || a->pdt == TRN_DTYPE_BF16;
    if (a->smean) {
        trn__store_real(a->pdt, a->smean, c, *mean);
        if (half) *mean = trn__load_real(a->pdt, a->smean, c);
    }
    if (a->sinvstd) {
        trn__store_real(a->pdt, a->sinvstd, c, *invstd);
        if (half) *invstd = trn__load_real(a->pdt, a->sinvstd, c);
    }
    if (a->rmean) {
        const double rm = trn__load_real(a->pdt, a->rmean, c);
        trn__store_real(a->pdt, a->rmean, c, a->momentum * exact_mean + (1 - a->momentum) * rm);
    }
    if (a->rvar) {
        const double rv = trn__load_real(a->pdt, a->rvar, c);
        const double unbiased = sq / (double)(n - 1);
        trn__store_real(a->pdt, a->rvar, c, a->momentum * unbiased + (1 - a->momentum) * rv);
    }
}

// The mean the backward normalizes with. In training with float32 / float64
// params the forward normalizes with the unrounded (double) batch mean but
// saves it rounded to the param dtype: with a mean offset of 100 the rounding
// (up to 4e-6) shifts every x - mean, and the weight gradient by that times
// sum(dy) - an error several times CPU's. Where the mean exceeds the spread
// (bn_backward_offset) an extra pass sums d = x - saved (exact near the
// mean, so the sum is accurate where one of x is not) and
// recovers the batch mean as saved + sum(d) / n; when the saved mean is its
// rounding the backward normalizes with it instead (the caller then corrects
// sum(dy * d) by (saved - mean) * sum(dy)). Any other saved mean (a caller's
// own) is used as given, as are 16-bit params' (the forward used them rounded)
// and means within the spread (invstd: the saved 1 / std), which the forward
// did not refine either (bn_refine).
static bool bn_backward_offset(const bn_args *a, double saved, double invstd) {
    return a->training && a->pdt != TRN_DTYPE_F16 && a->pdt != TRN_DTYPE_BF16 &&
           fabs(saved) * invstd > 1.0;
}

static double bn_backward_mean(const bn_args *a, double saved, double invstd, double sum_d) {
    if (!bn_backward_offset(a, saved, invstd)) return saved;
    const double m = saved + sum_d / (double)(a->batch * a->spatial);
    const double rounded = a->pdt == TRN_DTYPE_F32 ? (double)(float)m : m;
    return rounded == saved ? m : saved;
}

// Where the mean exceeds the spread (bn_offset: an offset like 100 +- 2), an
// extra pass after the variance pass sums d = x - m around the first pass's
// mean m rounded to the compute type: near the mean d is exact or nearly, so
// m + sum(d) / n is the batch mean to double accuracy, where the float lane
// sums of x itself lose ~1e-7 of it (a float ulp of the mean, which every
// output and the weight gradient would inherit); sum(d^2) is corrected to
// the refined mean the same way. Elsewhere (ResNet's activations) the sums of
// d are no more accurate than those of x, and no pass is added. Only double
// data takes it: float data's sum(x) accumulates in double lanes, already
// exact or nearly.
static bool bn_offset(const bn_args *a, double m, double sq) {
    const double n = (double)(a->batch * a->spatial);
    return n > 0 && fabs(m) > sqrt(sq / n + a->eps);
}

static void bn_refine(const bn_args *a, double m, double dsum, double *mean, double *sq) {
    const double n = (double)(a->batch * a->spatial);
    *mean = m + dsum / n;
    *sq -= dsum * dsum / n;
    if (*sq < 0) *sq = 0;
}

// Channel sums: lane partial sums (double lanes for sum(x), sum(dy),
// sum(dy * (x - mean)); float lanes for sum((x - mean)^2)) and a scalar sum
// of the tails of rows that are not whole lane groups move to the double
// total, lane by lane, every TRN_VFLUSH_ELEMS elements of a channel, rows cut
// into chunks of at most that many: a float lane never holds more than 16
// terms, so the variance stays within a few float roundings of the exact
// value (CPU's float32 error or better; tests/test_numerics_vs_f64.py).
// Deterministic: the grouping depends only on the shape, not on the split.
#define BN_FLUSH(acc, tail, total)                                                                 \
    do {                                                                                           \
        TRN_VREDUCE(trn__vec_d, double, acc, total);                                               \
        (total) += (double)(tail);                                                                 \
        (tail) = 0;                                                                                \
        memset(&(acc), 0, sizeof(acc));                                                            \
    } while (0)

// Channels are walked in groups of up to BN_GROUP, in memory order: batch
// item outer, channel inner, one contiguous stretch of the group's rows per
// item. Walking one channel at a time hops CH * S elements from row to row,
// which the prefetchers follow badly: on ResNet's small planes batch norm ran
// at ~1.5x its in-cache time, and on 32x32 planes (batch 32) the group walk
// takes 0.6-0.7x the per-channel walk's time (float32 and bfloat16, forward
// and backward). Per-channel lane sums are flushed at the same points as a
// per-channel walk would: each row is cut into chunks of at most
// TRN_VFLUSH_ELEMS elements and a channel flushes after every
// TRN_VFLUSH_ELEMS of its elements and at the end (the running count is the
// same for every channel). Each channel's sums are therefore the same
// operations in the same order as the per-channel walk's: the same bits.
#define BN_GROUP 32

// For each batch item b, each channel c = g0 + k of the group: BODY_V /
// BODY_S on row `row` at lane group / element i; FLUSH(k) for every channel
// after every TRN_VFLUSH_ELEMS elements of a channel and at the end.
#define BN_GROUP_ROWS(BODY_V, BODY_S, FLUSH)                                                       \
    do {                                                                                           \
        int64_t run = 0;                                                                           \
        if (S <= TRN_VFLUSH_ELEMS) {                                                               \
            for (int64_t b = 0; b < a->batch; b++) {                                               \
                for (int64_t k = 0; k < G; k++) {                                                  \
                    const int64_t row = (b * CH + g0 + k) * S;                                     \
                    int64_t i = 0;                                                                 \
                    for (; i + L <= S; i += L) BODY_V;                                             \
                    for (; i < S; i++) BODY_S;                                                     \
                }                                                                                  \
                if ((run += S) >= TRN_VFLUSH_ELEMS) {                                              \
                    for (int64_t k = 0; k < G; k++) FLUSH;                                         \
                    run = 0;                                                                       \
                }                                                                                  \
            }                                                                                      \
        } else {                                                                                   \
            /* Rows longer than a flush: cut into chunks, counted per channel. */                  \
            for (int64_t b = 0; b < a->batch; b++) {                                               \
                int64_t run_end = run;                                                             \
                for (int64_t k = 0; k < G; k++) {                                                  \
                    const int64_t row = (b * CH + g0 + k) * S;                                     \
                    int64_t r = run;                                                               \
                    for (int64_t i0 = 0; i0 < S; i0 += TRN_VFLUSH_ELEMS) {                         \
                        const int64_t i1 = S - i0 < TRN_VFLUSH_ELEMS ? S : i0 + TRN_VFLUSH_ELEMS;  \
                        int64_t i = i0;                                                            \
                        for (; i + L <= i1; i += L) BODY_V;                                        \
                        for (; i < i1; i++) BODY_S;                                                \
                        if ((r += i1 - i0) >= TRN_VFLUSH_ELEMS) {                                  \
                            FLUSH;                                                                 \
                            r = 0;                                                                 \
                        }                                                                          \
                    }                                                                              \
                    run_end = r;                                                                   \
                }                                                                                  \
                run = run_end;                                                                     \
            }                                                                                      \
        }                                                                                          \
        for (int64_t k = 0; k < G; k++) FLUSH;                                                     \
    } while (0)

#define DEFINE_BN(N, T, C, V, LD, ST, VLD, VST, W)                                                 \
    static void fwd_##N(void *ctx, int64_t c0, int64_t c1) {                                       \
        const bn_args *a = ctx;                                                                    \
        const int64_t S = a->spatial, CH = a->channels;                                            \
        const int64_t L = TRN_VLANES(V, C);                                                        \
        const T *X = (const T *)a->x;                                                              \
        for (int64_t g0 = c0; g0 < c1; g0 += BN_GROUP) {                                           \
            const int64_t G = c1 - g0 < BN_GROUP ? c1 - g0 : BN_GROUP;                             \
            double mean[BN_GROUP], sq[BN_GROUP], sum[BN_GROUP];                                    \
            C alpha[BN_GROUP], beta[BN_GROUP], mhi[BN_GROUP], mlo[BN_GROUP];                       \
            for (int64_t k = 0; k < G; k++) mean[k] = sq[k] = sum[k] = 0;                          \
            if (a->training) {                                                                     \
                trn__vec_d acc[BN_GROUP], acc_d[BN_GROUP];                                         \
                double s[BN_GROUP], sd[BN_GROUP];                                                  \
                double dsum[BN_GROUP];                                                             \
                memset(acc, 0, sizeof acc);                                                        \
                memset(acc_d, 0, sizeof acc_d);                                                    \
                memset(s, 0, sizeof s);                                                            \
                memset(sd, 0, sizeof sd);                                                          \
                BN_GROUP_ROWS(bn_acc_##W(&acc[k], VLD(X + row + i)),                               \
                              s[k] += (double)LD(X[row + i]), BN_FLUSH(acc[k], s[k], sum[k]));     \
                for (int64_t k = 0; k < G; k++) {                                                  \
                    mean[k] = sum[k] / (double)(a->batch * S);                                     \
                    dsum[k] = 0;                                                                   \
                }                                                                                  \
                /* The squares are positive (no cancellation): float */                            \
                /* lanes, flushed to double, keep var within a float */                            \
                /* rounding or two, as CPU's; x - mean with the mean as */                         \
                /* a float pair (hi + lo). Double lanes here cost 1.3x. */                         \
                V accq[BN_GROUP];                                                                  \
                C sqt[BN_GROUP], qh[BN_GROUP], ql[BN_GROUP];                                       \
                memset(accq, 0, sizeof accq);                                                      \
                for (int64_t k = 0; k < G; k++) {                                                  \
                    sqt[k] = 0;                                                                    \
                    qh[k] = (C)mean[k], ql[k] = (C)(mean[k] - (double)qh[k]);                      \
                }                                                                                  \
                BN_GROUP_ROWS(                                                                     \
                    {                                                                              \
                        const V d = (VLD(X + row + i) - qh[k]) - ql[k];                            \
                        accq[k] += d * d;                                                          \
                    },                                                                             \
                    {                                                                              \
                        const C d = ((C)LD(X[row + i]) - qh[k]) - ql[k];                           \
                        sqt[k] += d * d;                                                           \
                    },                                                                             \
                    {                                                                              \
                        TRN_VREDUCE(V, C, accq[k], sq[k]);                                         \
                        sq[k] += (double)sqt[k];                                                   \
                        sqt[k] = 0;                                                                \
                        memset(&accq[k], 0, sizeof accq[k]);                                       \
                    });                                                                            \
                /* Float data: sum(x) in double is exact or nearly, so no */                       \
                /* refinement is needed; double data sums as CPU does. */                          \
                bool refine = false;                                                               \
                for (int64_t k = 0; k < G; k++) refine |= bn_offset(a, mean[k], sq[k]);            \
                if (refine && sizeof(C) == sizeof(double)) {                                       \
                    BN_GROUP_ROWS(bn_acc_##W(&acc_d[k], VLD(X + row + i) - (C)mean[k]),            \
                                  sd[k] += (double)LD(X[row + i]) - mean[k],                       \
                                  BN_FLUSH(acc_d[k], sd[k], dsum[k]));                             \
                    for (int64_t k = 0; k < G; k++)                                                \
                        if (bn_offset(a, mean[k], sq[k]))                                          \
                            bn_refine(a, mean[k], dsum[k], &mean[k], &sq[k]);                      \
                }                                                                                  \
            }                                                                                      \
            for (int64_t k = 0; k < G; k++) {                                                      \
                double invstd;                                                                     \
                channel_stats(a, g0 + k, sum[k], sq[k], &mean[k], &invstd);                        \
                const double w = param_or(a, a->weight, g0 + k, 1.0);                              \
                alpha[k] = (C)(invstd * w), beta[k] = (C)param_or(a, a->bias, g0 + k, 0.0);        \
                mhi[k] = (C)mean[k], mlo[k] = (C)(mean[k] - (double)mhi[k]);                       \
            }                                                                                      \
            for (int64_t b = 0; b < a->batch; b++) {                                               \
                for (int64_t k = 0; k < G; k++) {                                                  \
                    const T *x = X + (b * CH + g0 + k) * S;                                        \
                    T *y = (T *)a->y + (b * CH + g0 + k) * S;                                      \
                    const C ah = alpha[k], bh = beta[k], hi = mhi[k], lo = mlo[k];                 \
                    int64_t i = 0;                                                                 \
                    for (; i + L <= S; i += L) VST(y + i, ((VLD(x + i) - hi) - lo) * ah + bh);     \
                    for (; i < S; i++) y[i] = ST((((C)LD(x[i]) - hi) - lo) * ah + bh);             \
                }                                                                                  \
            }                                                                                      \
        }                                                                                          \
    }                                                                                              \
    static void bwd_##N(void *ctx, int64_t c0, int64_t c1) {                                       \
        const bn_args *a = ctx;                                                                    \
        const int64_t S = a->spatial, CH = a->channels;                                            \
        const int64_t L = TRN_VLANES(V, C);                                                        \
        const double n = (double)(a->batch * S);                                                   \
        const T *X = (const T *)a->x, *DY = (const T *)a->dy;                                      \
        for (int64_t g0 = c0; g0 < c1; g0 += BN_GROUP) {                                           \
            const int64_t G = c1 - g0 < BN_GROUP ? c1 - g0 : BN_GROUP;                             \
            double invstd[BN_GROUP], sum[BN_GROUP], dot[BN_GROUP], sumd[BN_GROUP], ms[BN_GROUP];   \
            C mhi[BN_GROUP], mlo[BN_GROUP], scale[BN_GROUP], kk[BN_GROUP], gmean[BN_GROUP];        \
            trn__vec_d acc_s[BN_GROUP], acc_d[BN_GROUP], acc_x[BN_GROUP];                          \
            double s[BN_GROUP], d[BN_GROUP], sx[BN_GROUP];                                         \
            memset(acc_s, 0, sizeof acc_s);                                                        \
            memset(acc_d, 0, sizeof acc_d);                                                        \
            memset(acc_x, 0, sizeof acc_x);                                                        \
            for (int64_t k = 0; k < G; k++) {                                                      \
                const double mean = trn__load_real(a->pdt, a->mean_in, g0 + k);                    \
                const double sv = trn__load_real(a->pdt, a->var_in, g0 + k);                       \
                invstd[k] = a->training ? sv : 1.0 / sqrt(sv + a->eps);                            \
                ms[k] = mean, mhi[k] = (C)mean, mlo[k] = (C)(mean - (double)mhi[k]);               \
                sum[k] = dot[k] = sumd[k] = 0;                                                     \
                s[k] = d[k] = sx[k] = 0;                                                           \
            }                                                                                      \
            BN_GROUP_ROWS(                                                                         \
                {                                                                                  \
                    const V g = VLD(DY + row + i);                                                 \
                    bn_acc_##W(&acc_s[k], g);                                                      \
                    bn_acc_dot_##W(&acc_d[k], g, VLD(X + row + i), ms[k]);                         \
                },                                                                                 \
                {                                                                                  \
                    const double g = (double)LD(DY[row + i]);                                      \
                    s[k] += g;                                                                     \
                    d[k] += g * ((double)LD(X[row + i]) - ms[k]);                                  \
                },                                                                                 \
                {                                                                                  \
                    BN_FLUSH(acc_s[k], s[k], sum[k]);                                              \
                    BN_FLUSH(acc_d[k], d[k], dot[k]);                                              \
                });                                                                                \
            bool recover = false;                                                                  \
            for (int64_t k = 0; k < G; k++) recover |= bn_backward_offset(a, ms[k], invstd[k]);    \
            if (recover)                                                                           \
                BN_GROUP_ROWS(bn_acc_##W(&acc_x[k], (VLD(X + row + i) - mhi[k]) - mlo[k]),         \
                              sx[k] += (double)(((C)LD(X[row + i]) - mhi[k]) - mlo[k]),            \
                              BN_FLUSH(acc_x[k], sx[k], sumd[k]));                                 \
            for (int64_t k = 0; k < G; k++) {                                                      \
                const double mean = bn_backward_mean(a, ms[k], invstd[k], sumd[k]);                \
                dot[k] += (ms[k] - mean) * sum[k];                                                 \
                mhi[k] = (C)mean, mlo[k] = (C)(mean - (double)mhi[k]);                             \
                if (a->dweight) trn__store_real(a->pdt, a->dweight, g0 + k, dot[k] * invstd[k]);   \
                if (a->dbias) trn__store_real(a->pdt, a->dbias, g0 + k, sum[k]);                   \
                const double w = param_or(a, a->weight, g0 + k, 1.0);                              \
                scale[k] = (C)(invstd[k] * w);                                                     \
                kk[k] = a->training ? (C)(dot[k] * invstd[k] * invstd[k] / n) : (C)0;              \
                gmean[k] = a->training ? (C)(sum[k] / n) : (C)0;                                   \
            }                                                                                      \
            if (!a->dx) continue;                                                                  \
            for (int64_t b = 0; b < a->batch; b++) {                                               \
                for (int64_t k = 0; k < G; k++) {                                                  \
                    const int64_t off = (b * CH + g0 + k) * S;                                     \
                    const T *x = X + off, *dy = DY + off;                                          \
                    T *dx = (T *)a->dx + off;                                                      \
                    const C sc = scale[k], kq = kk[k], gm = gmean[k], hi = mhi[k], lo = mlo[k];    \
                    int64_t i = 0;                                                                 \
                    if (a->training) {                                                             \
                        for (; i + L <= S; i += L)                                                 \
                            VST(dx + i, (VLD(dy + i) - gm - ((VLD(x + i) - hi) - lo) * kq) * sc);  \
                        for (; i < S; i++)                                                         \
                            dx[i] = ST(((C)LD(dy[i]) - gm - (((C)LD(x[i]) - hi) - lo) * kq) * sc); \
                    } else {                                                                       \
                        for (; i + L <= S; i += L) VST(dx + i, VLD(dy + i) * sc);                  \
                        for (; i < S; i++) dx[i] = ST((C)LD(dy[i]) * sc);                          \
                    }                                                                              \
                }                                                                                  \
            }                                                                                      \
        }                                                                                          \
    }

// x - mean with the double mean as a float pair (hi + lo): x - hi is exact
// for x near the mean, so a mean offset far larger than the spread (100 +-
// 1) loses no more than one rounding, where x * alpha + (bias - mean *
// alpha) would cancel two large terms.
DEFINE_BN(f16, uint16_t, float, trn__vec_f, LD_f16, ST_f16, vld_f16, vst_f16, f)
DEFINE_BN(bf16, uint16_t, float, trn__vec_f, LD_bf16, ST_bf16, vld_bf16, vst_bf16, f)
DEFINE_BN(f32, float, float, trn__vec_f, LD_id, ST_id, vld_f32, vst_f32, f)
DEFINE_BN(f64, double, double, trn__vec_d, LD_id, ST_id, vld_f64, vst_f64, d)

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
