// pool3d.c - owns the 3-d (and adaptive 1-3-d) max / average pooling
// kernels (trn/pool3d.h).
//
// Planes are independent: forward and backward split planes across the
// thread pool, so the backward's scatter-adds never race (each plane's dx is
// written by one piece only). Values are loaded as float (double for F64);
// the max keeps the input's exact value, so only the average rounds.
#include <math.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "../../internal.h"
#include "trn/convert.h"
#include "trn/parallel.h"
#include "trn/pool3d.h"

#define LD_id(v) (v)
#define LD_f16(v) trn_half_to_float(v)
#define LD_bf16(v) trn_bf16_to_float(v)
#define ST_id(v) (v)
#define ST_f16(v) trn_float_to_half(v)
#define ST_bf16(v) trn_float_to_bf16(v)

// Output elements per parallel piece (each costs a window's worth of loads).
#define GRAIN 4096

typedef struct pool3_args {
    trn_dtype dtype;
    trn_pool_mode mode;
    trn_pool3d_geometry g;
    const void *x, *dy;
    void *y, *dx;
    int64_t *idx_out;
    const int64_t *idx_in;
    int backward;
    atomic_int *bad;  // 1: an index outside its volume; 2: out of memory
} pool3_args;

_Static_assert(sizeof(pool3_args) <= TRN_TASK_MAX_ARGS, "pool3d args too large");

// One output element's window: taps b[i], b[i] + st[i], ... below e[i].
typedef struct window {
    int64_t b[3], e[3], st[3];
    double div;  // average divisor
} window;

// The window of output (o0, o1, o2) as PyTorch CPU computes it. Returns 0
// for an average window entirely in padding (its output is 0).
static int window_of(const trn_pool3d_geometry *g, trn_pool_mode mode, const int64_t o[3],
                     window *w) {
    double padded = 1, inside = 1;
    for (int i = 0; i < 3; i++) {
        const int64_t in = g->in[i], out = g->out[i];
        w->st[i] = 1;
        if (g->adaptive) {
            w->b[i] = (o[i] * in) / out;
            w->e[i] = ((o[i] + 1) * in + out - 1) / out;
        } else if (mode == TRN_POOL_MAX) {
            int64_t b = o[i] * g->s[i] - g->p[i];
            const int64_t e = b + (g->k[i] - 1) * g->dil[i] + 1;
            while (b < 0) b += g->dil[i];
            w->b[i] = b;
            w->e[i] = e < in ? e : in;
            w->st[i] = g->dil[i];
        } else {
            int64_t b = o[i] * g->s[i] - g->p[i];
            int64_t e = b + g->k[i] < in + g->p[i] ? b + g->k[i] : in + g->p[i];
            padded *= (double)(e - b);
            w->b[i] = b < 0 ? 0 : b;
            w->e[i] = e > in ? in : e;
        }
        if (w->b[i] >= w->e[i]) return 0;
        inside *= (double)(w->e[i] - w->b[i]);
    }
    if (g->adaptive)
        w->div = inside;
    else
        w->div = g->divisor != 0 ? (double)g->divisor : (g->count_include_pad ? padded : inside);
    return 1;
}

// Output position of flat index o within a plane.
static void unflatten(const trn_pool3d_geometry *g, int64_t o, int64_t pos[3]) {
    pos[2] = o % g->out[2];
    o /= g->out[2];
    pos[1] = o % g->out[1];
    pos[0] = o / g->out[1];
}

#define DEFINE_POOL3(N, T, C, LD, ST)                                                    \
    static void fwd_##N(void *ctx, int64_t p0, int64_t p1) {                            \
        const pool3_args *a = ctx;                                                      \
        const trn_pool3d_geometry *g = &a->g;                                           \
        const int64_t hw = g->in[1] * g->in[2];                                         \
        const int64_t in_n = g->in[0] * hw, out_n = g->out[0] * g->out[1] * g->out[2];  \
        for (int64_t p = p0; p < p1; p++) {                                             \
            const T *x = (const T *)a->x + p * in_n;                                    \
            T *y = (T *)a->y + p * out_n;                                               \
            int64_t *ix = a->idx_out ? a->idx_out + p * out_n : NULL;                   \
            for (int64_t o = 0; o < out_n; o++) {                                       \
                int64_t pos[3];                                                         \
                window w;                                                               \
                unflatten(g, o, pos);                                                   \
                const int ok = window_of(g, a->mode, pos, &w);                          \
                if (a->mode == TRN_POOL_AVG) {                                          \
                    C s = 0;                                                            \
                    if (ok)                                                             \
                        for (int64_t d = w.b[0]; d < w.e[0]; d++)                       \
                            for (int64_t h = w.b[1]; h < w.e[1]; h++)                   \
                                for (int64_t v = w.b[2]; v < w.e[2]; v++)               \
                                    s += (C)LD(x[d * hw + h * g->in[2] + v]);           \
                    y[o] = ST(ok ? (C)(s / (C)w.div) : (C)0);                           \
                    continue;                                                           \
                }                                                                       \
                int64_t best = w.b[0] * hw + w.b[1] * g->in[2] + w.b[2];                \
                C m = (C)-INFINITY;                                                     \
                T mv = ST((C)-INFINITY);                                                \
                if (ok)                                                                 \
                    for (int64_t d = w.b[0]; d < w.e[0]; d += w.st[0])                  \
                        for (int64_t h = w.b[1]; h < w.e[1]; h += w.st[1])              \
                            for (int64_t v = w.b[2]; v < w.e[2]; v += w.st[2]) {        \
                                const int64_t k = d * hw + h * g->in[2] + v;            \
                                const C val = (C)LD(x[k]);                              \
                                if (val > m || isnan(val)) m = val, mv = x[k], best = k; \
                            }                                                           \
                y[o] = mv;                                                              \
                if (ix) ix[o] = best;                                                   \
            }                                                                           \
        }                                                                               \
    }                                                                                   \
    static void bwd_##N(void *ctx, int64_t p0, int64_t p1) {                            \
        const pool3_args *a = ctx;                                                      \
        const trn_pool3d_geometry *g = &a->g;                                           \
        const int64_t hw = g->in[1] * g->in[2];                                         \
        const int64_t in_n = g->in[0] * hw, out_n = g->out[0] * g->out[1] * g->out[2];  \
        C *acc = NULL;                                                                  \
        for (int64_t p = p0; p < p1; p++) {                                             \
            const T *dy = (const T *)a->dy + p * out_n;                                 \
            T *dx = (T *)a->dx + p * in_n;                                              \
            /* 16-bit types accumulate in float (small additions would be lost); */     \
            /* the float types accumulate straight into dx. */                          \
            C *sum = (C *)(void *)dx;                                                   \
            if (sizeof(T) != sizeof(C)) {                                               \
                if (acc == NULL) acc = malloc((size_t)in_n * sizeof(C));                \
                if (acc == NULL) {                                                      \
                    atomic_store(a->bad, 2);                                            \
                    return;                                                             \
                }                                                                       \
                sum = acc;                                                              \
            }                                                                           \
            for (int64_t i = 0; i < in_n; i++) sum[i] = 0;                              \
            for (int64_t o = 0; o < out_n; o++) {                                       \
                const C gv = (C)LD(dy[o]);                                              \
                if (a->mode == TRN_POOL_MAX) {                                          \
                    const int64_t k = a->idx_in[p * out_n + o];                         \
                    if (k < 0 || k >= in_n) {                                           \
                        atomic_store(a->bad, 1);                                        \
                        continue;                                                       \
                    }                                                                   \
                    sum[k] += gv;                                                       \
                    continue;                                                           \
                }                                                                       \
                int64_t pos[3];                                                         \
                window w;                                                               \
                unflatten(g, o, pos);                                                   \
                if (!window_of(g, a->mode, pos, &w)) continue;                          \
                const C share = (C)(gv / (C)w.div);                                     \
                for (int64_t d = w.b[0]; d < w.e[0]; d++)                               \
                    for (int64_t h = w.b[1]; h < w.e[1]; h++)                           \
                        for (int64_t v = w.b[2]; v < w.e[2]; v++)                       \
                            sum[d * hw + h * g->in[2] + v] += share;                    \
            }                                                                           \
            if ((void *)sum != (void *)dx)                                              \
                for (int64_t i = 0; i < in_n; i++) dx[i] = ST(sum[i]);                  \
        }                                                                               \
        free(acc);                                                                      \
    }

DEFINE_POOL3(f16, uint16_t, float, LD_f16, ST_f16)
DEFINE_POOL3(bf16, uint16_t, float, LD_bf16, ST_bf16)
DEFINE_POOL3(f32, float, float, LD_id, ST_id)
DEFINE_POOL3(f64, double, double, LD_id, ST_id)

typedef void (*piece_fn)(void *, int64_t, int64_t);

static piece_fn pick(trn_dtype d, int backward) {
    switch (d) {
    case TRN_DTYPE_F16: return backward ? bwd_f16 : fwd_f16;
    case TRN_DTYPE_BF16: return backward ? bwd_bf16 : fwd_bf16;
    case TRN_DTYPE_F32: return backward ? bwd_f32 : fwd_f32;
    case TRN_DTYPE_F64: return backward ? bwd_f64 : fwd_f64;
    default: return NULL;
    }
}

static int64_t vol(const int64_t v[3]) { return v[0] * v[1] * v[2]; }

static trn_status pool3_task(void *args) {
    pool3_args *a = args;
    const trn_pool3d_geometry *g = &a->g;
    const size_t es = trn_dtype_size(a->dtype);
    const size_t in_b = (size_t)(g->planes * vol(g->in)), out_b = (size_t)(g->planes * vol(g->out));
    const void *ix = a->backward ? (const void *)a->idx_in : (const void *)a->idx_out;
    trn__access_set rg = {.count = 0};
    trn__access_add(&rg, a->backward ? a->dx : a->x, in_b * es);
    trn__access_add(&rg, a->backward ? a->dy : a->y, out_b * es);
    if (a->mode == TRN_POOL_MAX) trn__access_add(&rg, ix, out_b * sizeof(int64_t));
    trn_status st = trn__access_begin(&rg);
    atomic_int bad = 0;
    if (st == TRN_SUCCESS && g->planes > 0) {
        a->bad = &bad;
        // Work per plane: the backward touches every input and output once;
        // the forward reads about one input volume per output element at most.
        const int64_t work = (int64_t)((a->backward ? in_b + out_b : out_b * 8) / (size_t)g->planes);
        const int64_t grain = work > 0 && GRAIN / work > 1 ? GRAIN / work : 1;
        trn_parallel_for(g->planes, grain, pick(a->dtype, a->backward), a);
    }
    trn__access_end(&rg);
    if (st == TRN_SUCCESS && atomic_load(&bad) == 1)
        return trn__set_error(TRN_ERROR_INVALID_ARGUMENT,
                              "max pool backward: an index is outside its input volume");
    if (st == TRN_SUCCESS && atomic_load(&bad) == 2)
        return trn__set_error(TRN_ERROR_OUT_OF_MEMORY, "pool backward: out of host memory");
    return st;
}

static trn_status check(trn_stream *stream, const void *d, trn_dtype dtype, trn_pool_mode mode,
                        const trn_pool3d_geometry *g, const char *fn) {
    if (stream == NULL || d == NULL)
        return trn__set_error(TRN_ERROR_INVALID_ARGUMENT, "%s: stream or descriptor is NULL", fn);
    if (!trn_pool_supports(dtype))
        return trn__set_error(TRN_ERROR_UNSUPPORTED, "%s: dtype %s is not supported", fn,
                              trn_dtype_name(dtype));
    if (mode != TRN_POOL_MAX && mode != TRN_POOL_AVG)
        return trn__set_error(TRN_ERROR_INVALID_ARGUMENT, "%s: unknown pooling mode %d", fn,
                              (int)mode);
    int bad = g->planes < 0;
    int64_t ti = g->planes, to = g->planes;
    for (int i = 0; i < 3; i++) {
        bad |= g->in[i] < 0 || g->out[i] < 0;
        if (!g->adaptive)
            bad |= g->k[i] <= 0 || g->s[i] <= 0 || g->p[i] < 0 || g->dil[i] <= 0;
        bad |= __builtin_mul_overflow(ti, g->in[i], &ti) || __builtin_mul_overflow(to, g->out[i], &to);
        // Adaptive window bounds compute (o + 1) * in.
        int64_t o1;
        bad |= g->adaptive && (__builtin_add_overflow(g->out[i], 1, &o1) ||
                               __builtin_mul_overflow(o1, g->in[i], &o1));
    }
    bad |= __builtin_mul_overflow(ti, 8, &ti) || __builtin_mul_overflow(to, 8, &to);
    if (bad) return trn__set_error(TRN_ERROR_INVALID_ARGUMENT, "%s: invalid pooling geometry", fn);
    return trn__fork_check();
}

static const trn_pool3d_geometry zero_geometry;

trn_status trn_pool3d_launch(trn_stream *stream, const trn_pool3d_desc *d) {
    trn_status st = check(stream, d, d ? d->dtype : TRN_DTYPE_F32, d ? d->mode : TRN_POOL_MAX,
                          d ? &d->g : &zero_geometry, "trn_pool3d_launch");
    if (st != TRN_SUCCESS) return st;
    if (d->g.planes * vol(d->g.out) == 0) return TRN_SUCCESS;
    if (d->x == NULL || d->y == NULL || (d->mode == TRN_POOL_MAX && d->indices == NULL) ||
        vol(d->g.in) == 0)
        return trn__set_error(TRN_ERROR_INVALID_ARGUMENT,
                              "trn_pool3d_launch: x, y or indices is NULL, or the input is empty");
    pool3_args a;
    memset(&a, 0, sizeof a);
    a.dtype = d->dtype;
    a.mode = d->mode;
    a.g = d->g;
    a.x = d->x;
    a.y = d->y;
    a.idx_out = d->mode == TRN_POOL_MAX ? d->indices : NULL;
    return trn_stream_launch(stream, pool3_task, &a, sizeof a);
}

trn_status trn_pool3d_backward_launch(trn_stream *stream, const trn_pool3d_backward_desc *d) {
    trn_status st = check(stream, d, d ? d->dtype : TRN_DTYPE_F32, d ? d->mode : TRN_POOL_MAX,
                          d ? &d->g : &zero_geometry, "trn_pool3d_backward_launch");
    if (st != TRN_SUCCESS) return st;
    if (d->g.planes * vol(d->g.in) == 0) return TRN_SUCCESS;
    if (d->dx == NULL ||
        (vol(d->g.out) > 0 && (d->dy == NULL || (d->mode == TRN_POOL_MAX && d->indices == NULL))))
        return trn__set_error(TRN_ERROR_INVALID_ARGUMENT,
                              "trn_pool3d_backward_launch: dx, dy or indices is NULL");
    pool3_args a;
    memset(&a, 0, sizeof a);
    a.backward = 1;
    a.dtype = d->dtype;
    a.mode = d->mode;
    a.g = d->g;
    a.dy = d->dy;
    a.dx = d->dx;
    a.idx_in = d->mode == TRN_POOL_MAX ? d->indices : NULL;
    return trn_stream_launch(stream, pool3_task, &a, sizeof a);
}
