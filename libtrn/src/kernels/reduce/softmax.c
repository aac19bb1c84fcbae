// softmax.c - owns the softmax / log_softmax forward and backward kernels
// (trn/reduce.h). Contiguous [outer, dim, inner] operands; halves compute in
// float32, float64 in double. Rows (inner == 1) are reduced with lane
// accumulators; for inner > 1 a block of up to COLS columns is processed at
// once, so every pass streams whole contiguous rows. exp is trn/scalar.h's
// trn_sc_expf for float32 compute, as in compiled graphs (libm exp for float64).
// Selects on float compares (NaN-propagating max, the inline expf) only
// if-convert into vector blends when compares may be assumed not to trap;
// results are unchanged (the FP environment's flags are never read).
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("no-trapping-math")
#endif
#include <math.h>
#include <stddef.h>
#include <string.h>

#include "../kit/launch.h"
#include "../kit/dtype_io.h"
#include "trn/scalar.h"
#include "trn/convert.h"
#include "trn/parallel.h"
#include "trn/reduce.h"

#define COLS 256
// Rows of a log_softmax group (logrows_*).
#define LG 16
#define L 16
// Longest 16-bit row whose exps are kept in a float stack buffer (16 KiB).
#define EBUF 4096

typedef struct softmax_args {
    trn_softmax_op op;
    trn_dtype dtype;
    const char *in, *grad;
    char *out;
    int64_t outer, dim, inner;
} softmax_args;

#define EXP_f(x) trn_sc_expf(x)
#define EXP_d(x) exp(x)
// exp of an argument known to be <= 0 or -inf (never NaN): trn_sc_expf's
// bits (trn/scalar.h) without its upper clamp, NaN patch and two-factor
// scaling (the row loop: 33 instructions instead of 42).
#define EXPN_f16(x) trn_sc_exp_nonpos_f(x)
#define EXPN_bf16(x) trn_sc_exp_nonpos_f(x)
#define EXPN_f32(x) trn_sc_exp_nonpos_f(x)
#define EXPN_f64(x) exp(x)
// The log of a row's sum of exps: float compute takes trn/scalar.h's
// inline double log (within ~5 double ulps; rounded to float it equalled
// libm's on 20 M sampled sums), which vectorizes over a group of rows;
// double keeps libm's.
#define LOG_f16(v) trn_sc_log_d(v)
#define LOG_bf16(v) trn_sc_log_d(v)
#define LOG_f32(v) trn_sc_log_d(v)
#define LOG_f64(v) log(v)
#define MAXN(a, b) (((a) != (a) || (a) > (b)) ? (a) : (b))

#define RT_id(v) (v)
#define RT_bf16(v) trn_bf16_to_float(trn_float_to_bf16(v))

// Work is split in units: a row (inner == 1), or a block of up to COLS
// columns of one outer index.
static inline int64_t units_per_outer(int64_t inner) {
    return inner == 1 ? 1 : (inner + COLS - 1) / COLS;
}

#define DEFINE_SOFTMAX(N, T, C, LD, ST, EXP, RT)                                                   \
    static C rowmax_nan_##N(const T *restrict x, int64_t n) {                                      \
        C m[L];                                                                                    \
        for (int j = 0; j < L; j++) m[j] = -(C)INFINITY;                                           \
        int64_t i = 0;                                                                             \
        for (; i + L <= n; i += L)                                                                 \
            for (int j = 0; j < L; j++) m[j] = MAXN(m[j], (C)LD(x[i + j]));                        \
        for (int j = 0; i < n; i++, j++) m[j] = MAXN(m[j], (C)LD(x[i]));                           \
        for (int w = L / 2; w > 0; w /= 2)                                                         \
            for (int j = 0; j < w; j++) m[j] = MAXN(m[j], m[j + w]);                               \
        return m[0];                                                                               \
    }                                                                                              \
    /* The row max in GNU vectors of L lanes (an array of lanes compiled */                        \
    /* to scalar vmaxss chains, a quarter of the float32 forward): */                              \
    /* m > v ? m : v is MAXN without its NaN test (the same value, signed */                       \
    /* zeros included); v * 0 is NaN only for a NaN or an infinity, and */                         \
    /* such rows are redone with the NaN-propagating loop. */                                      \
    typedef C vec_##N __attribute__((vector_size(L * sizeof(C))));                                 \
    static inline vec_##N vld_##N(const T *restrict x) {                                           \
        vec_##N v;                                                                                 \
        if (sizeof(T) == sizeof(C)) {                                                              \
            memcpy(&v, x, sizeof v);                                                               \
        } else {                                                                                   \
            C t[L];                                                                                \
            for (int j = 0; j < L; j++) t[j] = (C)LD(x[j]);                                        \
            memcpy(&v, t, sizeof v);                                                               \
        }                                                                                          \
        return v;                                                                                  \
    }                                                                                              \
    /* The lanes' pairwise tree (lane j with j + w, w = L/2 .. 1) in */                            \
    /* halving vectors: the scalar tree's arithmetic, without its trip */                          \
    /* through the stack (a fixed ~100 cycles a row: most of a row of 64). */                      \
    typedef C vec8_##N __attribute__((vector_size(8 * sizeof(C))));                                \
    typedef C vec4_##N __attribute__((vector_size(4 * sizeof(C))));                                \
    static inline C vsum_##N(vec_##N v) {                                                          \
        vec8_##N a = __builtin_shufflevector(v, v, 0, 1, 2, 3, 4, 5, 6, 7) +                       \
                     __builtin_shufflevector(v, v, 8, 9, 10, 11, 12, 13, 14, 15);                  \
        vec4_##N b =                                                                               \
            __builtin_shufflevector(a, a, 0, 1, 2, 3) + __builtin_shufflevector(a, a, 4, 5, 6, 7); \
        const C c0 = b[0] + b[2], c1 = b[1] + b[3];                                                \
        return c0 + c1;                                                                            \
    }                                                                                              \
    /* The same tree of m > v ? m : v (MAXN of NaN-free lanes). */                                 \
    static inline C vmax_##N(vec_##N v) {                                                          \
        vec8_##N p = __builtin_shufflevector(v, v, 0, 1, 2, 3, 4, 5, 6, 7);                        \
        vec8_##N q = __builtin_shufflevector(v, v, 8, 9, 10, 11, 12, 13, 14, 15);                  \
        const __typeof__(p > q) k = p > q;                                                         \
        vec8_##N a = (vec8_##N)(((__typeof__(k))p & k) | ((__typeof__(k))q & ~k));                 \
        vec4_##N b0 = __builtin_shufflevector(a, a, 0, 1, 2, 3);                                   \
        vec4_##N b1 = __builtin_shufflevector(a, a, 4, 5, 6, 7);                                   \
        const __typeof__(b0 > b1) kb = b0 > b1;                                                    \
        vec4_##N b = (vec4_##N)(((__typeof__(kb))b0 & kb) | ((__typeof__(kb))b1 & ~kb));           \
        const C c0 = b[0] > b[2] ? b[0] : b[2], c1 = b[1] > b[3] ? b[1] : b[3];                    \
        return c0 > c1 ? c0 : c1;                                                                  \
    }                                                                                              \
    /* m > v ? m : v, lane by lane. */                                                             \
    static inline vec_##N vmax2_##N(vec_##N m, vec_##N v) {                                        \
        const __typeof__(m > v) k = m > v;                                                         \
        return (vec_##N)(((__typeof__(k))m & k) | ((__typeof__(k))v & ~k));                        \
    }                                                                                              \
    /* Four running maxima over blocks of 4 L: one select chain (compare, */                       \
    /* two logic ops) per L elements was latency-bound, a third of a */                            \
    /* [1024, 512] softmax's exp loop. The max is the same value in any */                         \
    /* order (a zero's sign aside, which no result depends on: x - mx and */                       \
    /* mx + log s are the same for either). */                                                     \
    static C rowmax_##N(const T *restrict x, int64_t n) {                                          \
        vec_##N m, f = {0};                                                                        \
        for (int j = 0; j < L; j++) m[j] = -(C)INFINITY;                                           \
        int64_t i = 0;                                                                             \
        if (n >= 4 * L) {                                                                          \
            vec_##N m1 = m, m2 = m, m3 = m, f1 = f, f2 = f, f3 = f;                                \
            for (; i + 4 * L <= n; i += 4 * L) {                                                   \
                const vec_##N v0 = vld_##N(x + i), v1 = vld_##N(x + i + L);                        \
                const vec_##N v2 = vld_##N(x + i + 2 * L), v3 = vld_##N(x + i + 3 * L);            \
                m = vmax2_##N(m, v0);                                                              \
                m1 = vmax2_##N(m1, v1);                                                            \
                m2 = vmax2_##N(m2, v2);                                                            \
                m3 = vmax2_##N(m3, v3);                                                            \
                f += v0 * (C)0;                                                                    \
                f1 += v1 * (C)0;                                                                   \
                f2 += v2 * (C)0;                                                                   \
                f3 += v3 * (C)0;                                                                   \
            }                                                                                      \
            m = vmax2_##N(vmax2_##N(m, m1), vmax2_##N(m2, m3));                                    \
            f += (f1 + f2) + f3;                                                                   \
        }                                                                                          \
        for (; i + L <= n; i += L) {                                                               \
            const vec_##N v = vld_##N(x + i);                                                      \
            m = vmax2_##N(m, v);                                                                   \
            f += v * (C)0;                                                                         \
        }                                                                                          \
        if (vsum_##N(f) != 0) return rowmax_nan_##N(x, n);                                         \
        if (i == n) return vmax_##N(m);                                                            \
        C r[L];                                                                                    \
        for (int j = 0; j < L; j++) r[j] = m[j];                                                   \
        for (int j = 0; i < n; i++, j++) r[j] = MAXN(r[j], (C)LD(x[i]));                           \
        for (int w = L / 2; w > 0; w /= 2)                                                         \
            for (int j = 0; j < w; j++) r[j] = MAXN(r[j], r[j + w]);                               \
        return r[0];                                                                               \
    }                                                                                              \
    static C rowexpsum_##N(const T *restrict x, int64_t n, C mx) {                                 \
        C s[L];                                                                                    \
        for (int j = 0; j < L; j++) s[j] = 0;                                                      \
        int64_t i = 0;                                                                             \
        for (; i + L <= n; i += L)                                                                 \
            for (int j = 0; j < L; j++) s[j] += EXP((C)LD(x[i + j]) - mx);                         \
        for (int j = 0; i < n; i++, j++) s[j] += EXP((C)LD(x[i]) - mx);                            \
        for (int w = L / 2; w > 0; w /= 2)                                                         \
            for (int j = 0; j < w; j++) s[j] += s[j + w];                                          \
        return s[0];                                                                               \
    }                                                                                              \
    /* e = exp(x - mx) over a row (e may be x). With a finite max the */                           \
    /* row holds no NaN or +inf (rowmax), so every x - mx is <= 0 or -inf: */                      \
    /* EXPN, the same bits without the upper clamp and the NaN patch. */                           \
    static void rowexp_##N(const T *x, C *e, int64_t n, C mx) {                                    \
        if (isfinite(mx))                                                                          \
            for (int64_t i = 0; i < n; i++) e[i] = EXPN_##N((C)LD(x[i]) - mx);                     \
        else                                                                                       \
            for (int64_t i = 0; i < n; i++) e[i] = EXP((C)LD(x[i]) - mx);                          \
    }                                                                                              \
    /* The sum of a row in rowexpsum's order: lane j takes elements */                             \
    /* i = j mod L, then the lanes pairwise. */                                                    \
    static C rowsum_##N(const C *restrict e, int64_t n) {                                          \
        vec_##N acc = {0};                                                                         \
        int64_t i = 0;                                                                             \
        for (; i + L <= n; i += L) {                                                               \
            vec_##N v;                                                                             \
            memcpy(&v, e + i, sizeof v);                                                           \
            acc += v;                                                                              \
        }                                                                                          \
        if (i == n) return vsum_##N(acc);                                                          \
        C s[L];                                                                                    \
        for (int j = 0; j < L; j++) s[j] = acc[j];                                                 \
        for (int j = 0; i < n; i++, j++) s[j] += e[i];                                             \
        for (int w = L / 2; w > 0; w /= 2)                                                         \
            for (int j = 0; j < w; j++) s[j] += s[j + w];                                          \
        return s[0];                                                                               \
    }                                                                                              \
    /* sum(g * y) (softmax) or sum(g) (log_softmax) over a row. */                                 \
    static C rowdot_##N(const T *restrict g, const T *restrict y, int64_t n, int islog) {          \
        vec_##N acc = {0};                                                                         \
        int64_t i = 0;                                                                             \
        if (islog)                                                                                 \
            for (; i + L <= n; i += L) acc += vld_##N(g + i);                                      \
        else                                                                                       \
            for (; i + L <= n; i += L) acc += vld_##N(g + i) * vld_##N(y + i);                     \
        if (i == n) return vsum_##N(acc);                                                          \
        C s[L];                                                                                    \
        for (int j = 0; j < L; j++) s[j] = acc[j];                                                 \
        if (islog)                                                                                 \
            for (int j = 0; i < n; i++, j++) s[j] += (C)LD(g[i]);                                  \
        else                                                                                       \
            for (int j = 0; i < n; i++, j++) s[j] += (C)LD(g[i]) * (C)LD(y[i]);                    \
        for (int w = L / 2; w > 0; w /= 2)                                                         \
            for (int j = 0; j < w; j++) s[j] += s[j + w];                                          \
        return s[0];                                                                               \
    }                                                                                              \
    /* log_softmax rows (inner == 1, dim <= EBUF), LG at a time: each row's */                     \
    /* max and sum of exps, then the LG logarithms in one vector loop (a */                        \
    /* libm log call per row was ~15 % of a [512, 128] forward), then */                           \
    /* x - (max + log sum) per row. */                                                             \
    static void logrows_##N(const softmax_args *a, int64_t u0, int64_t u1) {                       \
        const int64_t D = a->dim;                                                                  \
        C eb[EBUF];                                                                                \
        for (int64_t u = u0; u < u1; u += LG) {                                                    \
            const int g = u1 - u < LG ? (int)(u1 - u) : LG;                                        \
            C mx[LG];                                                                              \
            double sl[LG];                                                                         \
            for (int r = 0; r < g; r++) {                                                          \
                const T *x = (const T *)(const void *)a->in + (u + r) * D;                         \
                mx[r] = rowmax_##N(x, D);                                                          \
                rowexp_##N(x, eb, D, mx[r]);                                                       \
                sl[r] = (double)rowsum_##N(eb, D);                                                 \
            }                                                                                      \
            for (int r = 0; r < g; r++) sl[r] = LOG_##N(sl[r]);                                    \
            for (int r = 0; r < g; r++) {                                                          \
                const T *x = (const T *)(const void *)a->in + (u + r) * D;                         \
                T *y = (T *)(void *)a->out + (u + r) * D;                                          \
                const C t = mx[r] + (C)sl[r];                                                      \
                for (int64_t i = 0; i < D; i++) y[i] = ST((C)LD(x[i]) - t);                        \
            }                                                                                      \
        }                                                                                          \
    }                                                                                              \
    static void fwd_##N(const softmax_args *a, int64_t u0, int64_t u1) {                           \
        const int islog = a->op == TRN_LOG_SOFTMAX;                                                \
        const int64_t D = a->dim, I = a->inner, nb = units_per_outer(I);                           \
        if (islog && I == 1 && D <= EBUF) {                                                        \
            logrows_##N(a, u0, u1);                                                                \
            return;                                                                                \
        }                                                                                          \
        for (int64_t u = u0; u < u1; u++) {                                                        \
            const int64_t o = u / nb;                                                              \
            const T *x = (const T *)(const void *)a->in + o * D * I;                               \
            T *y = (T *)(void *)a->out + o * D * I;                                                \
            if (I == 1) {                                                                          \
                const C mx = rowmax_##N(x, D);                                                     \
                if (D <= EBUF || (!islog && sizeof(T) == sizeof(C))) {                             \
                    /* Each exp once, into y itself (float32 / float64 */                          \
                    /* softmax; x may alias y) or a float stack row, then */                       \
                    /* summed from there: the values and sum of computing */                       \
                    /* it twice, without the exp loop's lane sums on the */                        \
                    /* stack (a store-to-load chain per vector). */                                \
                    C eb[EBUF];                                                                    \
                    C *e = !islog && sizeof(T) == sizeof(C) ? (C *)(void *)y : eb;                 \
                    rowexp_##N(x, e, D, mx);                                                       \
                    const C s = rowsum_##N(e, D);                                                  \
                    if (islog) {                                                                   \
                        const C t = mx + (C)log((double)s);                                        \
                        for (int64_t i = 0; i < D; i++) y[i] = ST((C)LD(x[i]) - t);                \
                    } else {                                                                       \
                        const C r = (C)1 / s;                                                      \
                        for (int64_t i = 0; i < D; i++) y[i] = ST(e[i] * r);                       \
                    }                                                                              \
                    continue;                                                                      \
                }                                                                                  \
                const C s = rowexpsum_##N(x, D, mx);                                               \
                if (islog) {                                                                       \
                    const C t = mx + (C)log((double)s);                                            \
                    for (int64_t i = 0; i < D; i++) y[i] = ST((C)LD(x[i]) - t);                    \
                } else {                                                                           \
                    const C r = (C)1 / s;                                                          \
                    for (int64_t i = 0; i < D; i++) y[i] = ST(EXP((C)LD(x[i]) - mx) * r);          \
                }                                                                                  \
                continue;                                                                          \
            }                                                                                      \
            C m[COLS], s[COLS];                                                                    \
            {                                                                                      \
                const int64_t j0 = (u % nb) * COLS;                                                \
                const int64_t w = I - j0 < COLS ? I - j0 : COLS;                                   \
                for (int64_t j = 0; j < w; j++) {                                                  \
                    m[j] = -(C)INFINITY;                                                           \
                    s[j] = 0;                                                                      \
                }                                                                                  \
                for (int64_t d = 0; d < D; d++) {                                                  \
                    const T *r = x + d * I + j0;                                                   \
                    for (int64_t j = 0; j < w; j++) m[j] = MAXN(m[j], (C)LD(r[j]));                \
                }                                                                                  \
                for (int64_t d = 0; d < D; d++) {                                                  \
                    const T *r = x + d * I + j0;                                                   \
                    for (int64_t j = 0; j < w; j++) s[j] += EXP((C)LD(r[j]) - m[j]);               \
                }                                                                                  \
                if (islog)                                                                         \
                    for (int64_t j = 0; j < w; j++) s[j] = m[j] + (C)log((double)s[j]);            \
                else                                                                               \
                    for (int64_t j = 0; j < w; j++) s[j] = (C)1 / s[j];                            \
                for (int64_t d = 0; d < D; d++) {                                                  \
                    const T *r = x + d * I + j0;                                                   \
                    T *q = y + d * I + j0;                                                         \
                    if (islog)                                                                     \
                        for (int64_t j = 0; j < w; j++) q[j] = ST((C)LD(r[j]) - s[j]);             \
                    else                                                                           \
                        for (int64_t j = 0; j < w; j++) q[j] = ST(EXP((C)LD(r[j]) - m[j]) * s[j]); \
                }                                                                                  \
            }                                                                                      \
        }                                                                                          \
    }                                                                                              \
    static void bwd_##N(const softmax_args *a, int64_t u0, int64_t u1) {                           \
        const int islog = a->op == TRN_LOG_SOFTMAX_BACKWARD;                                       \
        const int64_t D = a->dim, I = a->inner, nb = units_per_outer(I);                           \
        for (int64_t u = u0; u < u1; u++) {                                                        \
            const int64_t o = u / nb;                                                              \
            const T *y = (const T *)(const void *)a->in + o * D * I;                               \
            const T *g = (const T *)(const void *)a->grad + o * D * I;                             \
            T *z = (T *)(void *)a->out + o * D * I;                                                \
            if (I == 1) {                                                                          \
                const C s = rowdot_##N(g, y, D, islog);                                            \
                if (islog)                                                                         \
                    for (int64_t i = 0; i < D; i++) z[i] = ST((C)LD(g[i]) - EXP((C)LD(y[i])) * s); \
                else                                                                               \
                    for (int64_t i = 0; i < D; i++) z[i] = ST((C)LD(y[i]) * ((C)LD(g[i]) - s));    \
                continue;                                                                          \
            }                                                                                      \
            C s[COLS];                                                                             \
            {                                                                                      \
                const int64_t j0 = (u % nb) * COLS;                                                \
                const int64_t w = I - j0 < COLS ? I - j0 : COLS;                                   \
                for (int64_t j = 0; j < w; j++) s[j] = 0;                                          \
                for (int64_t d = 0; d < D; d++) {                                                  \
                    const T *gr = g + d * I + j0, *yr = y + d * I + j0;                            \
                    if (islog)                                                                     \
                        for (int64_t j = 0; j < w; j++) s[j] += (C)LD(gr[j]);                      \
                    else                                                                           \
                        for (int64_t j = 0; j < w; j++) s[j] += (C)LD(gr[j]) * (C)LD(yr[j]);       \
                }                                                                                  \
                for (int64_t d = 0; d < D; d++) {                                                  \
                    const T *gr = g + d * I + j0, *yr = y + d * I + j0;                            \
                    T *zr = z + d * I + j0;                                                        \
                    if (islog)                                                                     \
                        for (int64_t j = 0; j < w; j++)                                            \
                            zr[j] = ST((C)LD(gr[j]) - EXP((C)LD(yr[j])) * s[j]);                   \
                    else                                                                           \
                        for (int64_t j = 0; j < w; j++)                                            \
                            zr[j] = ST((C)LD(yr[j]) * ((C)LD(gr[j]) - s[j]));                      \
                }                                                                                  \
            }                                                                                      \
        }                                                                                          \
    }

#define SOFTMAX_DTYPES(X)                                                                          \
    X(TRN_DTYPE_F16, f16, uint16_t, float, LD_f16, ST_f16, EXP_f, RT_id)                           \
    X(TRN_DTYPE_BF16, bf16, uint16_t, float, LD_bf16, ST_bf16, EXP_f, RT_bf16)                     \
    X(TRN_DTYPE_F32, f32, float, float, LD_id, ST_id, EXP_f, RT_id)                                \
    X(TRN_DTYPE_F64, f64, double, double, LD_id, ST_id, EXP_d, RT_id)

#define DEFINE_ONE(E, N, T, C, LD, ST, EXP, RT) DEFINE_SOFTMAX(N, T, C, LD, ST, EXP, RT)
SOFTMAX_DTYPES(DEFINE_ONE)

typedef void (*softmax_fn)(const softmax_args *, int64_t, int64_t);

static softmax_fn pick(trn_softmax_op op, trn_dtype d) {
    const int bwd = op == TRN_SOFTMAX_BACKWARD || op == TRN_LOG_SOFTMAX_BACKWARD;
    switch (d) {
#define CASE(E, N, T, C, LD, ST, EXP, RT)                                                          \
    case E: return bwd ? bwd_##N : fwd_##N;
        SOFTMAX_DTYPES(CASE)
#undef CASE
    default: return NULL;
    }
}

int trn_softmax_supports(trn_softmax_op op, trn_dtype dtype) {
    return (unsigned)op <= TRN_LOG_SOFTMAX_BACKWARD && (unsigned)dtype < TRN_DTYPE_COUNT &&
           pick(op, dtype) != NULL;
}

typedef struct par_ctx {
    const softmax_args *a;
    softmax_fn fn;
} par_ctx;

static void par_piece(void *ctx, int64_t b, int64_t e) {
    const par_ctx *c = ctx;
    c->fn(c->a, b, e);
}

// Units in parallel, none less than SOFTMAX_GRAIN elements of work per
// piece. 32K (elementwise's grain): at 64K the [512, 128] log_softmax of a
// language model's loss (and its backward) ran in one piece at any thread
// count, where CPU's splits it. A row's result does not depend on which
// piece (or log_softmax row group) holds it.
#define SOFTMAX_GRAIN 32768
static void softmax_run(const softmax_args *a) {
    const int64_t nb = units_per_outer(a->inner);
    const int64_t units = a->outer * nb;
    const int64_t per_unit = a->dim * (a->inner < COLS ? a->inner : COLS);
    const int64_t grain =
        per_unit >= SOFTMAX_GRAIN ? 1 : SOFTMAX_GRAIN / (per_unit > 0 ? per_unit : 1);
    par_ctx c = {a, pick(a->op, a->dtype)};
    trn_parallel_for(units, grain, par_piece, &c);
}

static trn_status softmax_task(void *args) {
    const softmax_args *a = args;
    const size_t bytes = (size_t)(a->outer * a->dim * a->inner) * trn_dtype_size(a->dtype);
    trn_status st = trn__mem_access_begin(a->out, bytes);
    if (st != TRN_SUCCESS) return st;
    st = trn__mem_access_begin(a->in, bytes);
    if (st == TRN_SUCCESS) {
        if (a->grad) st = trn__mem_access_begin(a->grad, bytes);
        if (st == TRN_SUCCESS) {
            softmax_run(a);
            if (a->grad) trn__mem_access_end(a->grad, bytes);
        }
        trn__mem_access_end(a->in, bytes);
    }
    trn__mem_access_end(a->out, bytes);
    return st;
}

trn_status trn_softmax_launch(trn_stream *stream, const trn_softmax_desc *d) {
    if (stream == NULL || d == NULL) return trn__check_launch(stream, d, "trn_softmax_launch");
    if (!trn_softmax_supports(d->op, d->dtype))
        return trn__set_error(TRN_ERROR_UNSUPPORTED,
                              "trn_softmax_launch: op %d on %s is not supported", (int)d->op,
                              trn_dtype_name(d->dtype));
    const int bwd = d->op == TRN_SOFTMAX_BACKWARD || d->op == TRN_LOG_SOFTMAX_BACKWARD;
    int64_t n;
    if (d->outer < 0 || d->dim < 0 || d->inner < 0 ||
        __builtin_mul_overflow(d->outer, d->dim, &n) || __builtin_mul_overflow(n, d->inner, &n) ||
        __builtin_mul_overflow(n, (int64_t)trn_dtype_size(d->dtype), &n))
        return trn__set_error(TRN_ERROR_INVALID_ARGUMENT,
                              "trn_softmax_launch: invalid sizes [%lld, %lld, %lld]",
                              (long long)d->outer, (long long)d->dim, (long long)d->inner);
    trn_status st = trn__fork_check();
    if (st != TRN_SUCCESS || n == 0) return st;
    if (d->in == NULL || d->out == NULL || (bwd && d->grad == NULL))
        return trn__set_error(TRN_ERROR_INVALID_ARGUMENT,
                              "trn_softmax_launch: a data pointer is NULL");
    softmax_args a = {d->op,  d->dtype, d->in,  bwd ? d->grad : NULL,
                      d->out, d->outer, d->dim, d->inner};
    return trn_stream_launch(stream, softmax_task, &a, sizeof a);
}
