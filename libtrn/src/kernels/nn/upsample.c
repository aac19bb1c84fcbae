// upsample.c - owns the nearest / bilinear / bicubic upsampling kernels (trn/upsample.h).
//
// Each launch first turns the sizes and scales into per-dim tables (source
// index for nearest; two source indices and two weights for bilinear), once,
// inside the task; the per-element loops then only gather (forward) or
// scatter-add (backward). Planes are independent and split across the thread
// pool; the backward walks each plane's output in order and accumulates into
// a compute-type copy of the plane's input gradient (16-bit dtypes) or into
// the gradient itself, so the sums do not depend on the split.
#include <math.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "../kit/launch.h"
#include "../kit/piece_status.h"
#include "../kit/dtype_io.h"
#include "trn/convert.h"
#include "trn/dtype.h"
#include "trn/parallel.h"
#include "trn/upsample.h"

// Elements per parallel piece.
#define GRAIN 32768

typedef struct up_args {
    trn_upsample_desc d;
    int backward;
} up_args;

_Static_assert(sizeof(up_args) <= TRN_TASK_MAX_ARGS, "upsample args too large");

// Tables built once per launch.
typedef struct up_tables {
    int64_t *idx[3];  // nearest: [out]; linear: [2 * out] (i0, i1); cubic: [4 * out]
    double *lam[3];   // linear: [2 * out] (weight of i0, of i1); cubic: [4 * out]
} up_tables;

typedef struct up_run {
    const up_args *a;
    up_tables t;
    trn__piece_status status;  // a piece could not allocate its accumulator
} up_run;

static float scale_f(double scale, int64_t in, int64_t out) {
    return scale > 0 ? (float)(1.0 / scale) : (float)in / (float)out;
}

static int64_t nearest_src(trn_upsample_mode m, int64_t o, int64_t in, int64_t out, double scale) {
    if (m == TRN_UPSAMPLE_NEAREST) {
        if (out == in) return o;
        if (out == 2 * in) return o >> 1;
        const int64_t s = (int64_t)floorf((float)o * scale_f(scale, in, out));
        return s < in - 1 ? s : in - 1;
    }
    const int64_t s = (int64_t)floorf((float)(((double)o + 0.5) * (double)scale_f(scale, in, out)));
    return s < in - 1 ? s : in - 1;
}

// Bilinear taps of one dim, computed in `dbl` ? double : float (PyTorch's
// accumulate type for the dtype).
static void linear_taps(int64_t o, int64_t in, int64_t out, double scale, int align, int dbl,
                        int64_t *i0, int64_t *i1, double *l0, double *l1) {
    if (in == out) {
        *i0 = *i1 = o;
        *l0 = 1;
        *l1 = 0;
        return;
    }
    double src;
    if (dbl) {
        const double r = align ? (out > 1 ? (double)(in - 1) / (double)(out - 1) : 0.0)
                               : (scale > 0 ? 1.0 / scale : (double)in / (double)out);
        src = align ? r * (double)o : r * ((double)o + 0.5) - 0.5;
        if (src < 0) src = 0;
    } else {
        const float r =
            align ? (out > 1 ? (float)(in - 1) / (float)(out - 1) : 0.0f) : scale_f(scale, in, out);
        float s = align ? r * (float)o : r * ((float)o + 0.5f) - 0.5f;
        if (s < 0) s = 0;
        src = s;
    }
    int64_t k = (int64_t)floor(src);
    if (k > in - 1) k = in - 1;
    double lam = src - (double)k;
    if (!dbl) lam = (float)lam;
    lam = lam < 0 ? 0 : (lam > 1 ? 1 : lam);
    *i0 = k;
    *i1 = k + (k < in - 1 ? 1 : 0);
    *l1 = lam;
    *l0 = dbl ? 1.0 - lam : (double)(1.0f - (float)lam);
}

// Keys' cubic convolution (A = -0.75) for |x| <= 1 and 1 < |x| < 2.
static double cubic1(double x, int dbl) {
    if (dbl) return ((1.25 * x - 2.25) * x) * x + 1.0;
    const float f = (float)x;
    return ((1.25f * f - 2.25f) * f) * f + 1.0f;
}
static double cubic2(double x, int dbl) {
    if (dbl) return ((-0.75 * x + 3.75) * x - 6.0) * x + 3.0;
    const float f = (float)x;
    return ((-0.75f * f + 3.75f) * f - 6.0f) * f + 3.0f;
}

// Bicubic taps of one dim, as ATen: src = r * o (align_corners) or
// r * (o + 0.5) - 0.5 (not clamped at 0), in float or double (`dbl`); the
// four taps floor(src) - 1 .. + 2 clamped to the input; weights from the
// fractional part t. `round` > 0 rounds the weights to the 16-bit dtype (1
// float16, 2 bfloat16), as ATen's forward stores them in the input's type.
static void cubic_taps(int64_t o, int64_t in, int64_t out, double scale, int align, int dbl,
                       int round, int64_t *idx, double *w) {
    double src;
    if (dbl) {
        const double r = align ? (out > 1 ? (double)(in - 1) / (double)(out - 1) : 0.0)
                               : (scale > 0 ? 1.0 / scale : (double)in / (double)out);
        src = align ? r * (double)o : r * ((double)o + 0.5) - 0.5;
    } else {
        const float r =
            align ? (out > 1 ? (float)(in - 1) / (float)(out - 1) : 0.0f) : scale_f(scale, in, out);
        src = align ? r * (float)o : r * ((float)o + 0.5f) - 0.5f;
    }
    int64_t k = (int64_t)floor(src);
    if (k > in - 1) k = in - 1;
    double t = src - (double)k;
    if (!dbl) t = (float)t;
    t = t < 0 ? 0 : (t > 1 ? 1 : t);
    const double u = dbl ? 1.0 - t : (double)(1.0f - (float)t);
    w[0] = cubic2(dbl ? t + 1.0 : (double)((float)t + 1.0f), dbl);
    w[1] = cubic1(t, dbl);
    w[2] = cubic1(u, dbl);
    w[3] = cubic2(dbl ? u + 1.0 : (double)((float)u + 1.0f), dbl);
    for (int j = 0; j < 4; j++) {
        const int64_t i = k - 1 + j;
        idx[j] = i < 0 ? 0 : (i > in - 1 ? in - 1 : i);
        if (round == 1) w[j] = trn_half_to_float(trn_float_to_half((float)w[j]));
        if (round == 2) w[j] = trn_bf16_to_float(trn_float_to_bf16((float)w[j]));
    }
}

static trn_status build_tables(const trn_upsample_desc *d, int backward, up_tables *t) {
    const int dbl = d->dtype == TRN_DTYPE_F64;
    const int round = backward ? 0
                               : (d->dtype == TRN_DTYPE_F16    ? 1
                                  : d->dtype == TRN_DTYPE_BF16 ? 2
                                                               : 0);
    for (int k = 0; k < 3; k++) {
        const int64_t in = d->in_size[k], out = d->out_size[k];
        const int lin = d->mode == TRN_UPSAMPLE_BILINEAR, cub = d->mode == TRN_UPSAMPLE_BICUBIC;
        const int64_t per = cub ? 4 : (lin ? 2 : 1);
        t->idx[k] = malloc(sizeof(int64_t) * (size_t)(per * out));
        t->lam[k] = per > 1 ? malloc(sizeof(double) * (size_t)(per * out)) : NULL;
        if (t->idx[k] == NULL || (per > 1 && t->lam[k] == NULL))
            return trn__set_error(TRN_ERROR_OUT_OF_MEMORY, "upsample: out of host memory");
        for (int64_t o = 0; o < out; o++) {
            if (cub)
                cubic_taps(o, in, out, d->scales[k], d->align_corners, dbl, round,
                           &t->idx[k][4 * o], &t->lam[k][4 * o]);
            else if (lin)
                linear_taps(o, in, out, d->scales[k], d->align_corners, dbl, &t->idx[k][2 * o],
                            &t->idx[k][2 * o + 1], &t->lam[k][2 * o], &t->lam[k][2 * o + 1]);
            else
                t->idx[k][o] = nearest_src(d->mode, o, in, out, d->scales[k]);
        }
    }
    return TRN_SUCCESS;
}

#define DEFINE_UP(E, N, T, C, V, LD, ST)                                                           \
    /* Bilinear of one (h, w) plane at output row oh, column ow. */                                \
    static inline C bil_##N(const T *x, int64_t IW, const int64_t *ih, const int64_t *iw,          \
                            const double *lh, const double *lw, int64_t oh, int64_t ow,            \
                            int no_h) {                                                            \
        const T *r0 = x + ih[2 * oh] * IW, *r1 = x + ih[2 * oh + 1] * IW;                          \
        const C h0 = (C)lh[2 * oh], h1 = (C)lh[2 * oh + 1];                                        \
        const int64_t w0 = iw[2 * ow], w1 = iw[2 * ow + 1];                                        \
        const C a = (C)lw[2 * ow], b = (C)lw[2 * ow + 1];                                          \
        if (no_h) return h0 * (a * (C)LD(r0[w0]) + b * (C)LD(r0[w1]));                             \
        return h0 * (a * (C)LD(r0[w0]) + b * (C)LD(r0[w1])) +                                      \
               h1 * (a * (C)LD(r1[w0]) + b * (C)LD(r1[w1]));                                       \
    }                                                                                              \
    /* Linear forward over d, h, w (nearest forward is copy_<size> below). The   \
       d / h taps of a dim the op lacks (spatial_dims) are skipped: ATen's     \
       1-d / 2-d kernels have no 0 * x term there (0 * inf is NaN). */                 \
    static void fwd_##N(void *ctx, int64_t p0, int64_t p1) {                                       \
        const up_run *run = ctx;                                                                   \
        const trn_upsample_desc *d = &run->a->d;                                                   \
        const int64_t ID = d->in_size[0], IH = d->in_size[1], IW = d->in_size[2];                  \
        const int64_t OD = d->out_size[0], OH = d->out_size[1], OW = d->out_size[2];               \
        const int64_t *id = run->t.idx[0], *ih = run->t.idx[1], *iw = run->t.idx[2];               \
        const double *ld = run->t.lam[0], *lh = run->t.lam[1], *lw = run->t.lam[2];                \
        const int rank = d->spatial_dims > 0 ? d->spatial_dims : 3;                                \
        const int no_h = rank < 2;                                                                 \
        for (int64_t p = p0; p < p1; p++) {                                                        \
            const T *x = (const T *)d->src + p * ID * IH * IW;                                     \
            T *y = (T *)d->dst + p * OD * OH * OW;                                                 \
            for (int64_t od = 0; od < OD; od++) {                                                  \
                const T *x0 = x + id[2 * od] * IH * IW, *x1 = x + id[2 * od + 1] * IH * IW;        \
                const C t0 = (C)ld[2 * od], t1 = (C)ld[2 * od + 1];                                \
                const int one = rank < 3;                                                          \
                T *yp = y + od * OH * OW;                                                          \
                for (int64_t oh = 0; oh < OH; oh++)                                                \
                    for (int64_t ow = 0; ow < OW; ow++) {                                          \
                        const C v0 = bil_##N(x0, IW, ih, iw, lh, lw, oh, ow, no_h);                \
                        yp[oh * OW + ow] = ST(                                                     \
                            one ? v0 * t0                                                          \
                                : t0 * v0 + t1 * bil_##N(x1, IW, ih, iw, lh, lw, oh, ow, no_h));   \
                    }                                                                              \
            }                                                                                      \
        }                                                                                          \
    }                                                                                              \
    static void bwd_##N(void *ctx, int64_t p0, int64_t p1) {                                       \
        const up_run *run = ctx;                                                                   \
        const trn_upsample_desc *d = &run->a->d;                                                   \
        const int64_t ID = d->in_size[0], IH = d->in_size[1], IW = d->in_size[2];                  \
        const int64_t OD = d->out_size[0], OH = d->out_size[1], OW = d->out_size[2];               \
        const int64_t *id = run->t.idx[0], *ih = run->t.idx[1], *iw = run->t.idx[2];               \
        const int64_t in_plane = ID * IH * IW;                                                     \
        const int direct = sizeof(T) == sizeof(C);                                                 \
        C *acc = direct ? NULL : malloc(sizeof(C) * (size_t)in_plane);                             \
        for (int64_t p = p0; p < p1; p++) {                                                        \
            const T *g = (const T *)d->src + p * OD * OH * OW;                                     \
            T *gi = (T *)d->dst + p * in_plane;                                                    \
            C *s = direct ? (C *)(void *)gi : acc;                                                 \
            if (s == NULL) { /* reported by the task */                                            \
                trn__piece_oom(&((up_run *)ctx)->status, 0);                                       \
                return;                                                                            \
            }                                                                                      \
            for (int64_t i = 0; i < in_plane; i++) s[i] = 0;                                       \
            if (d->mode != TRN_UPSAMPLE_BILINEAR) {                                                \
                for (int64_t od = 0; od < OD; od++)                                                \
                    for (int64_t oh = 0; oh < OH; oh++) {                                          \
                        C *sr = s + (id[od] * IH + ih[oh]) * IW;                                   \
                        const T *gr = g + (od * OH + oh) * OW;                                     \
                        for (int64_t ow = 0; ow < OW; ow++) sr[iw[ow]] += (C)LD(gr[ow]);           \
                    }                                                                              \
            } else {                                                                               \
                const double *ld = run->t.lam[0], *lh = run->t.lam[1], *lw = run->t.lam[2];        \
                for (int64_t od = 0; od < OD; od++) {                                              \
                    const int64_t dd[2] = {id[2 * od], id[2 * od + 1]};                            \
                    const C tt[2] = {(C)ld[2 * od], (C)ld[2 * od + 1]};                            \
                    const int taps = tt[1] == 0 && dd[0] == dd[1] ? 1 : 2;                         \
                    for (int k = 0; k < taps; k++) {                                               \
                        C *sp = s + dd[k] * IH * IW;                                               \
                        const C t = tt[k];                                                         \
                        for (int64_t oh = 0; oh < OH; oh++) {                                      \
                            C *r0 = sp + ih[2 * oh] * IW, *r1 = sp + ih[2 * oh + 1] * IW;          \
                            const C h0 = t * (C)lh[2 * oh], h1 = t * (C)lh[2 * oh + 1];            \
                            const T *gr = g + (od * OH + oh) * OW;                                 \
                            for (int64_t ow = 0; ow < OW; ow++) {                                  \
                                const int64_t w0 = iw[2 * ow], w1 = iw[2 * ow + 1];                \
                                const C a = (C)lw[2 * ow], b = (C)lw[2 * ow + 1];                  \
                                const C v = (C)LD(gr[ow]);                                         \
                                r0[w0] += h0 * a * v;                                              \
                                r0[w1] += h0 * b * v;                                              \
                                r1[w0] += h1 * a * v;                                              \
                                r1[w1] += h1 * b * v;                                              \
                            }                                                                      \
                        }                                                                          \
                    }                                                                              \
                }                                                                                  \
            }                                                                                      \
            if (!direct)                                                                           \
                for (int64_t i = 0; i < in_plane; i++) gi[i] = ST(s[i]);                           \
        }                                                                                          \
        free(acc);                                                                                 \
    }

// Bicubic (2-d: d is 1) forward and backward, in ATen's order: each output
// is the h-weighted sum of four w-weighted row sums; the backward adds
// g * wh * ww into the 4 x 4 taps of each output, w tap outermost.
// The (h, w) sizes and tap tables a bicubic piece reads.
#define CUBIC_VIEW(RUN)                                                                            \
    const int64_t IH = (RUN)->a->d.in_size[1], IW = (RUN)->a->d.in_size[2];                        \
    const int64_t OH = (RUN)->a->d.out_size[1], OW = (RUN)->a->d.out_size[2];                      \
    const int64_t *ih = (RUN)->t.idx[1], *iw = (RUN)->t.idx[2];                                    \
    const double *lh = (RUN)->t.lam[1], *lw = (RUN)->t.lam[2]
#define DEFINE_CUBIC(E, N, T, C, V, LD, ST)                                                        \
    static void cfwd_##N(void *ctx, int64_t p0, int64_t p1) {                                      \
        const up_run *run = ctx;                                                                   \
        const trn_upsample_desc *d = &run->a->d;                                                   \
        CUBIC_VIEW(run);                                                                           \
        for (int64_t p = p0; p < p1; p++) {                                                        \
            const T *x = (const T *)d->src + p * IH * IW;                                          \
            T *y = (T *)d->dst + p * OH * OW;                                                      \
            for (int64_t oh = 0; oh < OH; oh++)                                                    \
                for (int64_t ow = 0; ow < OW; ow++) {                                              \
                    C acc = 0;                                                                     \
                    for (int i = 0; i < 4; i++) {                                                  \
                        const T *r = x + ih[4 * oh + i] * IW;                                      \
                        C row = (C)LD(r[iw[4 * ow]]) * (C)lw[4 * ow];                              \
                        for (int j = 1; j < 4; j++)                                                \
                            row += (C)LD(r[iw[4 * ow + j]]) * (C)lw[4 * ow + j];                   \
                        acc = i == 0 ? row * (C)lh[4 * oh] : acc + row * (C)lh[4 * oh + i];        \
                    }                                                                              \
                    y[oh * OW + ow] = ST(acc);                                                     \
                }                                                                                  \
        }                                                                                          \
    }                                                                                              \
    static void cbwd_##N(void *ctx, int64_t p0, int64_t p1) {                                      \
        const up_run *run = ctx;                                                                   \
        const trn_upsample_desc *d = &run->a->d;                                                   \
        CUBIC_VIEW(run);                                                                           \
        const int direct = sizeof(T) == sizeof(C);                                                 \
        C *acc = direct ? NULL : malloc(sizeof(C) * (size_t)(IH * IW));                            \
        for (int64_t p = p0; p < p1; p++) {                                                        \
            const T *g = (const T *)d->src + p * OH * OW;                                          \
            T *gi = (T *)d->dst + p * IH * IW;                                                     \
            C *s = direct ? (C *)(void *)gi : acc;                                                 \
            if (s == NULL) { /* reported by the task */                                            \
                trn__piece_oom(&((up_run *)ctx)->status, 0);                                       \
                return;                                                                            \
            }                                                                                      \
            for (int64_t i = 0; i < IH * IW; i++) s[i] = 0;                                        \
            for (int64_t oh = 0; oh < OH; oh++)                                                    \
                for (int64_t ow = 0; ow < OW; ow++) {                                              \
                    const C v = (C)LD(g[oh * OW + ow]);                                            \
                    for (int i = 0; i < 4; i++)                                                    \
                        for (int j = 0; j < 4; j++)                                                \
                            s[ih[4 * oh + j] * IW + iw[4 * ow + i]] +=                             \
                                v * (C)lh[4 * oh + j] * (C)lw[4 * ow + i];                         \
                }                                                                                  \
            if (!direct)                                                                           \
                for (int64_t i = 0; i < IH * IW; i++) gi[i] = ST(s[i]);                            \
        }                                                                                          \
        free(acc);                                                                                 \
    }

TRN_KIT_FLOAT_TYPES(DEFINE_CUBIC)

TRN_KIT_FLOAT_TYPES(DEFINE_UP)

// Nearest forward moves elements without arithmetic: one loop per element
// size serves every dtype (integers and bool included).
#define DEFINE_NEAREST_COPY(N, T)                                                                  \
    static void copy_##N(void *ctx, int64_t p0, int64_t p1) {                                      \
        const up_run *run = ctx;                                                                   \
        const trn_upsample_desc *d = &run->a->d;                                                   \
        const int64_t ID = d->in_size[0], IH = d->in_size[1], IW = d->in_size[2];                  \
        const int64_t OD = d->out_size[0], OH = d->out_size[1], OW = d->out_size[2];               \
        const int64_t *id = run->t.idx[0], *ih = run->t.idx[1], *iw = run->t.idx[2];               \
        for (int64_t p = p0; p < p1; p++) {                                                        \
            const T *x = (const T *)d->src + p * ID * IH * IW;                                     \
            T *y = (T *)d->dst + p * OD * OH * OW;                                                 \
            for (int64_t od = 0; od < OD; od++)                                                    \
                for (int64_t oh = 0; oh < OH; oh++) {                                              \
                    const T *xr = x + (id[od] * IH + ih[oh]) * IW;                                 \
                    T *yr = y + (od * OH + oh) * OW;                                               \
                    for (int64_t ow = 0; ow < OW; ow++) yr[ow] = xr[iw[ow]];                       \
                }                                                                                  \
        }                                                                                          \
    }

DEFINE_NEAREST_COPY(1, uint8_t)
DEFINE_NEAREST_COPY(2, uint16_t)
DEFINE_NEAREST_COPY(4, uint32_t)
DEFINE_NEAREST_COPY(8, uint64_t)

typedef void (*piece_fn)(void *, int64_t, int64_t);

static int is_float(trn_dtype dt) {
    return dt == TRN_DTYPE_F16 || dt == TRN_DTYPE_BF16 || dt == TRN_DTYPE_F32 ||
           dt == TRN_DTYPE_F64;
}

static piece_fn pick(trn_dtype dt, trn_upsample_mode mode, int backward) {
    if (mode == TRN_UPSAMPLE_BICUBIC) {
        switch (dt) {
        case TRN_DTYPE_F16: return backward ? cbwd_f16 : cfwd_f16;
        case TRN_DTYPE_BF16: return backward ? cbwd_bf16 : cfwd_bf16;
        case TRN_DTYPE_F32: return backward ? cbwd_f32 : cfwd_f32;
        case TRN_DTYPE_F64: return backward ? cbwd_f64 : cfwd_f64;
        default: return NULL;
        }
    }
    if (mode != TRN_UPSAMPLE_BILINEAR && !backward) {
        switch (trn_dtype_size(dt)) {
        case 1: return copy_1;
        case 2: return copy_2;
        case 4: return copy_4;
        case 8: return copy_8;
        default: return NULL;
        }
    }
    switch (dt) {
#define CASE(E, N, ...)                                                                            \
    case E: return backward ? bwd_##N : fwd_##N;
        TRN_KIT_FLOAT_TYPES(CASE)
#undef CASE
    default: return NULL;
    }
}

int trn_upsample_supports(trn_dtype dtype, trn_upsample_mode mode, int backward) {
    if ((unsigned)dtype >= TRN_DTYPE_COUNT || (unsigned)mode > TRN_UPSAMPLE_BICUBIC) return 0;
    return is_float(dtype) || pick(dtype, mode, backward) != NULL;
}

static trn_status up_task(void *args) {
    const up_args *a = args;
    const trn_upsample_desc *d = &a->d;
    const size_t es = trn_dtype_size(d->dtype);
    const int64_t in_plane = d->in_size[0] * d->in_size[1] * d->in_size[2];
    const int64_t out_plane = d->out_size[0] * d->out_size[1] * d->out_size[2];
    const size_t in_bytes = (size_t)(d->planes * in_plane) * es;
    const size_t out_bytes = (size_t)(d->planes * out_plane) * es;
    const size_t src_bytes = a->backward ? out_bytes : in_bytes;
    const size_t dst_bytes = a->backward ? in_bytes : out_bytes;
    trn__access_set rg = {.count = 0};
    trn__access_add(&rg, d->src, src_bytes);
    trn__access_add(&rg, d->dst, dst_bytes);
    trn_status st = trn__access_begin(&rg);
    if (st != TRN_SUCCESS) return st;
    up_run run = {.a = a, .t = {{NULL, NULL, NULL}, {NULL, NULL, NULL}}};
    trn__piece_status_init(&run.status);
    st = build_tables(d, a->backward, &run.t);
    if (st == TRN_SUCCESS) {
        const piece_fn fn = pick(d->dtype, d->mode, a->backward);
        const int64_t per = a->backward ? in_plane + out_plane : out_plane;
        const int64_t grain = per > 0 && GRAIN / per > 1 ? GRAIN / per : 1;
        trn_parallel_for(d->planes, grain, fn, &run);
        st = trn__piece_status_raise(&run.status, "upsample");
    }
    for (int k = 0; k < 3; k++) {
        free(run.t.idx[k]);
        free(run.t.lam[k]);
    }
    trn__access_end(&rg);
    return st;
}

static trn_status launch(trn_stream *stream, const trn_upsample_desc *d, int backward,
                         const char *fn) {
    const trn_status null_st = trn__check_launch(stream, d, fn);
    if (null_st != TRN_SUCCESS) return null_st;
    if ((unsigned)d->mode > TRN_UPSAMPLE_BICUBIC)
        return trn__set_error(TRN_ERROR_INVALID_ARGUMENT, "%s: unknown mode %d", fn, (int)d->mode);
    if (d->mode == TRN_UPSAMPLE_BICUBIC && (d->in_size[0] != 1 || d->out_size[0] != 1))
        return trn__set_error(TRN_ERROR_INVALID_ARGUMENT, "%s: bicubic is 2-d (d sizes must be 1)",
                              fn);
    if (!trn_upsample_supports(d->dtype, d->mode, backward))
        return trn__set_error(TRN_ERROR_UNSUPPORTED, "%s: dtype %s is not supported", fn,
                              trn_dtype_name(d->dtype));
    int64_t n = d->planes, m = d->planes;
    int ok = d->planes >= 0;
    for (int k = 0; k < 3 && ok; k++)
        ok = d->in_size[k] >= 1 && d->out_size[k] >= 1 &&
             !__builtin_mul_overflow(n, d->in_size[k], &n) &&
             !__builtin_mul_overflow(m, d->out_size[k], &m);
    if (ok) ok = !__builtin_mul_overflow(n, 8, &n) && !__builtin_mul_overflow(m, 8, &m);
    if (!ok)
        return trn__set_error(TRN_ERROR_INVALID_ARGUMENT,
                              "%s: invalid sizes (planes %lld, in [%lld, %lld, %lld], out "
                              "[%lld, %lld, %lld])",
                              fn, (long long)d->planes, (long long)d->in_size[0],
                              (long long)d->in_size[1], (long long)d->in_size[2],
                              (long long)d->out_size[0], (long long)d->out_size[1],
                              (long long)d->out_size[2]);
    trn_status st = trn__fork_check();
    if (st != TRN_SUCCESS || d->planes == 0) return st;
    if (d->src == NULL || d->dst == NULL)
        return trn__set_error(TRN_ERROR_INVALID_ARGUMENT, "%s: src or dst is NULL", fn);
    const up_args a = {.d = *d, .backward = backward};
    return trn_stream_launch(stream, up_task, &a, sizeof a);
}

trn_status trn_upsample_launch(trn_stream *stream, const trn_upsample_desc *desc) {
    return launch(stream, desc, 0, "trn_upsample_launch");
}

trn_status trn_upsample_backward_launch(trn_stream *stream, const trn_upsample_desc *desc) {
    return launch(stream, desc, 1, "trn_upsample_backward_launch");
}
