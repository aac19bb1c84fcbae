// pool3d.c - owns the 3-d (and adaptive 1-3-d) max / average pooling
// kernels (trn/pool3d.h): their window loops and geometry checks; the rest
// is pool_common.h's skeleton.
//
// Planes are independent: forward and backward split planes across the
// thread pool, so the backward's scatter-adds never race (each plane's dx is
// written by one piece only). Values are loaded as float (double for F64);
// the max keeps the input's exact value, so only the average rounds.
#include <math.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "pool_common.h"
#include "trn/pool3d.h"

typedef struct pool3_args {
    trn__pool_io io;
    trn_pool3d_geometry g;
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

#define DEFINE_POOL3(E, N, T, C, V, LD, ST)                                                        \
    static void fwd_##N(void *ctx, int64_t p0, int64_t p1) {                                       \
        const trn__pool_io *a = &((const pool3_args *)ctx)->io;                                    \
        const trn_pool3d_geometry *g = &((const pool3_args *)ctx)->g;                              \
        const int64_t hw = g->in[1] * g->in[2];                                                    \
        const int64_t in_n = g->in[0] * hw, out_n = g->out[0] * g->out[1] * g->out[2];             \
        for (int64_t p = p0; p < p1; p++) {                                                        \
            const T *x = (const T *)a->x + p * in_n;                                               \
            T *y = (T *)a->y + p * out_n;                                                          \
            int64_t *ix = a->idx_out ? a->idx_out + p * out_n : NULL;                              \
            for (int64_t o = 0; o < out_n; o++) {                                                  \
                int64_t pos[3];                                                                    \
                window w;                                                                          \
                unflatten(g, o, pos);                                                              \
                const int ok = window_of(g, a->mode, pos, &w);                                     \
                if (a->mode == TRN_POOL_AVG) {                                                     \
                    C s = 0;                                                                       \
                    if (ok)                                                                        \
                        for (int64_t d = w.b[0]; d < w.e[0]; d++)                                  \
                            for (int64_t h = w.b[1]; h < w.e[1]; h++)                              \
                                for (int64_t v = w.b[2]; v < w.e[2]; v++)                          \
                                    s += (C)LD(x[d * hw + h * g->in[2] + v]);                      \
                    y[o] = ST(ok ? (C)(s / (C)w.div) : (C)0);                                      \
                    continue;                                                                      \
                }                                                                                  \
                int64_t best = w.b[0] * hw + w.b[1] * g->in[2] + w.b[2];                           \
                C m = (C)-INFINITY;                                                                \
                T mv = ST((C)-INFINITY);                                                           \
                if (ok)                                                                            \
                    for (int64_t d = w.b[0]; d < w.e[0]; d += w.st[0])                             \
                        for (int64_t h = w.b[1]; h < w.e[1]; h += w.st[1])                         \
                            for (int64_t v = w.b[2]; v < w.e[2]; v += w.st[2]) {                   \
                                const int64_t k = d * hw + h * g->in[2] + v;                       \
                                const C val = (C)LD(x[k]);                                         \
                                if (val > m || isnan(val)) m = val, mv = x[k], best = k;           \
                            }                                                                      \
                y[o] = mv;                                                                         \
                if (ix) ix[o] = best;                                                              \
            }                                                                                      \
        }                                                                                          \
    }                                                                                              \
    static void bwd_##N(void *ctx, int64_t p0, int64_t p1) {                                       \
        const trn__pool_io *a = &((const pool3_args *)ctx)->io;                                    \
        const trn_pool3d_geometry *g = &((const pool3_args *)ctx)->g;                              \
        const int64_t hw = g->in[1] * g->in[2];                                                    \
        const int64_t in_n = g->in[0] * hw, out_n = g->out[0] * g->out[1] * g->out[2];             \
        C *acc = NULL;                                                                             \
        for (int64_t p = p0; p < p1; p++) {                                                        \
            const T *dy = (const T *)a->dy + p * out_n;                                            \
            T *dx = (T *)a->dx + p * in_n;                                                         \
            C local[256];                                                                          \
            C *sum = TRN__POOL_SUM_OPEN(T, C, dx, in_n, local, acc);                               \
            if (sum == NULL) {                                                                     \
                atomic_store(a->bad, 2);                                                           \
                return;                                                                            \
            }                                                                                      \
            for (int64_t i = 0; i < in_n; i++) sum[i] = 0;                                         \
            for (int64_t o = 0; o < out_n; o++) {                                                  \
                const C gv = (C)LD(dy[o]);                                                         \
                if (a->mode == TRN_POOL_MAX) {                                                     \
                    const int64_t k = a->idx_in[p * out_n + o];                                    \
                    if (k < 0 || k >= in_n) {                                                      \
                        atomic_store(a->bad, 1);                                                   \
                        continue;                                                                  \
                    }                                                                              \
                    sum[k] += gv;                                                                  \
                    continue;                                                                      \
                }                                                                                  \
                int64_t pos[3];                                                                    \
                window w;                                                                          \
                unflatten(g, o, pos);                                                              \
                if (!window_of(g, a->mode, pos, &w)) continue;                                     \
                const C share = (C)(gv / (C)w.div);                                                \
                for (int64_t d = w.b[0]; d < w.e[0]; d++)                                          \
                    for (int64_t h = w.b[1]; h < w.e[1]; h++)                                      \
                        for (int64_t v = w.b[2]; v < w.e[2]; v++)                                  \
                            sum[d * hw + h * g->in[2] + v] += share;                               \
            }                                                                                      \
            if ((void *)sum != (void *)dx)                                                         \
                for (int64_t i = 0; i < in_n; i++) dx[i] = ST(sum[i]);                             \
        }                                                                                          \
        free(acc);                                                                                 \
    }

TRN_KIT_FLOAT_TYPES(DEFINE_POOL3)

static int64_t vol(const int64_t v[3]) { return v[0] * v[1] * v[2]; }

#define FWD(E, N, ...) fwd_##N,
#define BWD(E, N, ...) bwd_##N,
static const trn__pool_loops loops3 = {{TRN_KIT_FLOAT_TYPES(FWD)}, {TRN_KIT_FLOAT_TYPES(BWD)}};
#undef FWD
#undef BWD

static trn_status pool3_task(void *args) {
    pool3_args *a = args;
    const trn_pool3d_geometry *g = &a->g;
    // A forward output reads about one input volume at most: 8 is its estimate.
    const trn__pool_shape shape = {g->planes, vol(g->in), vol(g->out), 8,
                                   "max pool backward: an index is outside its input volume"};
    return trn__pool_run(&a->io, &shape, &loops3, a);
}

static trn_status check(trn_stream *stream, const void *d, trn_dtype dtype, trn_pool_mode mode,
                        const trn_pool3d_geometry *g, const char *fn) {
    trn_status st = trn__pool_check(stream, d, dtype, mode, fn);
    if (st != TRN_SUCCESS) return st;
    int bad = g->planes < 0;
    int64_t ti = g->planes, to = g->planes;
    for (int i = 0; i < 3; i++) {
        bad |= g->in[i] < 0 || g->out[i] < 0;
        if (!g->adaptive) bad |= g->k[i] <= 0 || g->s[i] <= 0 || g->p[i] < 0 || g->dil[i] <= 0;
        bad |=
            __builtin_mul_overflow(ti, g->in[i], &ti) || __builtin_mul_overflow(to, g->out[i], &to);
        // Adaptive window bounds compute (o + 1) * in.
        int64_t o1;
        bad |= g->adaptive && (__builtin_add_overflow(g->out[i], 1, &o1) ||
                               __builtin_mul_overflow(o1, g->in[i], &o1));
    }
    bad |= __builtin_mul_overflow(ti, 8, &ti) || __builtin_mul_overflow(to, 8, &to);
    if (bad) return trn__set_error(TRN_ERROR_INVALID_ARGUMENT, "%s: invalid pooling geometry", fn);
    return trn__fork_check();
}

// Forward and backward: io says which (d is non-NULL).
static trn_status launch3(trn_stream *stream, const void *d, trn__pool_io io,
                          const trn_pool3d_geometry *g, const char *fn) {
    trn_status st = check(stream, d, io.dtype, io.mode, g, fn);
    if (st != TRN_SUCCESS) return st;
    pool3_args a = {io, *g};
    return trn__pool_submit(stream, &a.io, g->planes, vol(g->in), vol(g->out), pool3_task, sizeof a,
                            fn);
}

trn_status trn_pool3d_launch(trn_stream *stream, const trn_pool3d_desc *d) {
    static const char fn[] = "trn_pool3d_launch";
    return d ? launch3(stream, d, TRN__POOL_FORWARD_IO(d), &d->g, fn)
             : trn__check_launch(stream, d, fn);
}

trn_status trn_pool3d_backward_launch(trn_stream *stream, const trn_pool3d_backward_desc *d) {
    static const char fn[] = "trn_pool3d_backward_launch";
    return d ? launch3(stream, d, TRN__POOL_BACKWARD_IO(d), &d->g, fn)
             : trn__check_launch(stream, d, fn);
}
