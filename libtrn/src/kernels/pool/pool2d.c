// pool2d.c - owns the 2-d max / average pooling kernels (trn/pool.h): their
// window loops and geometry checks; the rest is pool_common.h's skeleton.
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

typedef struct pool_args {
    trn__pool_io io;
    trn_pool2d_geometry g;
} pool_args;

_Static_assert(sizeof(pool_args) <= TRN_TASK_MAX_ARGS, "pool args too large");

// Average window [h0, h1) x [w0, w1) clipped to the image and its divisor,
// as PyTorch CPU computes them. Returns 0 for a window entirely in padding.
static int avg_window(const trn_pool2d_geometry *g, int64_t oh, int64_t ow, int64_t *h0,
                      int64_t *h1, int64_t *w0, int64_t *w1, double *div) {
    int64_t hs = oh * g->sh - g->ph, ws = ow * g->sw - g->pw;
    int64_t he = hs + g->kh < g->in_h + g->ph ? hs + g->kh : g->in_h + g->ph;
    int64_t we = ws + g->kw < g->in_w + g->pw ? ws + g->kw : g->in_w + g->pw;
    const int64_t padded = (he - hs) * (we - ws);
    if (hs < 0) hs = 0;
    if (ws < 0) ws = 0;
    if (he > g->in_h) he = g->in_h;
    if (we > g->in_w) we = g->in_w;
    *h0 = hs, *h1 = he, *w0 = ws, *w1 = we;
    if (hs >= he || ws >= we) return 0;
    *div = g->divisor != 0 ? (double)g->divisor
                           : (double)(g->count_include_pad ? padded : (he - hs) * (we - ws));
    return 1;
}

// Max windows that never leave the image (no padding, dilation 1: every
// nn.MaxPool2d(k) and stride-k pool in floor mode) skip the clipping, and
// run window element by window element over a stretch of outputs: the
// general loop's per-output chain (compare, then select, for each element)
// serialized on the compare and mispredicted "v > m", ~10 ns per output.
// Same update rule as the general loop (a later NaN wins), so the same
// values and indices.
static int max_fast_ok(const trn_pool2d_geometry *g) {
    return g->ph == 0 && g->pw == 0 && g->dh == 1 && g->dw == 1 && g->out_h > 0 && g->out_w > 0 &&
           (g->out_h - 1) * g->sh + g->kh <= g->in_h && (g->out_w - 1) * g->sw + g->kw <= g->in_w;
}

#define MAX_FAST_RUN 128

#define DEFINE_MAX_FAST(E, N, T, C, V, LD, ST)                                                     \
    static void max_fast_##N(const trn_pool2d_geometry *g, const T *restrict x, T *restrict y,     \
                             int64_t *restrict ix) {                                               \
        const int64_t out_h = g->out_h, out_w = g->out_w, in_w = g->in_w;                          \
        const int64_t sh = g->sh, sw = g->sw, kh = g->kh, kw = g->kw;                              \
        C m[MAX_FAST_RUN];                                                                         \
        T mv[MAX_FAST_RUN];                                                                        \
        int64_t best[MAX_FAST_RUN];                                                                \
        for (int64_t oh = 0; oh < out_h; oh++)                                                     \
            for (int64_t o0 = 0; o0 < out_w; o0 += MAX_FAST_RUN) {                                 \
                const int64_t n = out_w - o0 < MAX_FAST_RUN ? out_w - o0 : MAX_FAST_RUN;           \
                const int64_t row = oh * sh * in_w + o0 * sw;                                      \
                for (int64_t j = 0; j < n; j++) {                                                  \
                    m[j] = (C)-INFINITY;                                                           \
                    mv[j] = x[row + j * sw];                                                       \
                    best[j] = row + j * sw;                                                        \
                }                                                                                  \
                for (int64_t h = 0; h < kh; h++)                                                   \
                    for (int64_t w = 0; w < kw; w++) {                                             \
                        const int64_t k0 = row + h * in_w + w;                                     \
                        for (int64_t j = 0; j < n; j++) {                                          \
                            const int64_t k = k0 + j * sw;                                         \
                            const C v = (C)LD(x[k]);                                               \
                            const int take = (v > m[j]) | (v != v);                                \
                            m[j] = take ? v : m[j];                                                \
                            mv[j] = take ? x[k] : mv[j];                                           \
                            best[j] = take ? k : best[j];                                          \
                        }                                                                          \
                    }                                                                              \
                memcpy(y + oh * out_w + o0, mv, (size_t)n * sizeof(T));                            \
                if (ix) memcpy(ix + oh * out_w + o0, best, (size_t)n * sizeof(int64_t));           \
            }                                                                                      \
    }

TRN_KIT_FLOAT_TYPES(DEFINE_MAX_FAST)

// Zeroes n bytes with 64-byte vector stores. GCC turned the plain loop into
// a memset call (rep stosb), after which perf put most of the scatter's
// samples on the add that reads sum[k]; these stores measured a little
// faster (docs/performance.md, resnet3).
static void zero_plane(void *p, size_t n) {
    // may_alias: the plane is float / double / 16-bit data, read back as such.
    typedef uint32_t v16u __attribute__((vector_size(64), aligned(4), may_alias));
    const v16u z = {0};
    char *c = p;
    size_t i = 0;
    for (; i + 64 <= n; i += 64) {
        __asm__("" : "+r"(i));  // keeps the loop from becoming a memset call
        *(v16u *)(c + i) = z;
    }
    memset(c + i, 0, n - i);
}

// The max backward's scatter of one plane: sum[ix[o]] += dy[o] in output
// order (overlapping windows add in CPU's order, so the same bits). Its own
// function with restrict operands: inside the general loop the compiler had
// to assume each store could change the task's args, and reloaded
// a->idx_in and a->mode after every one of them (perf: 45 % of the loop on
// that store, float32 ~1.4x CPU's per-call time). Returns 1 if an index is
// outside the plane (that one is skipped).
#define DEFINE_MAX_SCATTER(E, N, T, C, V, LD, ST)                                                  \
    static int max_scatter_##N(const T *restrict dy, const int64_t *restrict ix, C *restrict sum,  \
                               int64_t out_n, int64_t in_n) {                                      \
        int bad = 0;                                                                               \
        for (int64_t o = 0; o < out_n; o++) {                                                      \
            const int64_t k = ix[o];                                                               \
            if ((uint64_t)k >= (uint64_t)in_n) {                                                   \
                bad = 1;                                                                           \
                continue;                                                                          \
            }                                                                                      \
            sum[k] += (C)LD(dy[o]);                                                                \
        }                                                                                          \
        return bad;                                                                                \
    }

TRN_KIT_FLOAT_TYPES(DEFINE_MAX_SCATTER)

#define DEFINE_POOL(E, N, T, C, V, LD, ST)                                                         \
    static void fwd_##N(void *ctx, int64_t p0, int64_t p1) {                                       \
        const trn__pool_io *a = &((const pool_args *)ctx)->io;                                     \
        const trn_pool2d_geometry *g = &((const pool_args *)ctx)->g;                               \
        const int64_t in_n = g->in_h * g->in_w, out_n = g->out_h * g->out_w;                       \
        const int fast = a->mode == TRN_POOL_MAX && max_fast_ok(g);                                \
        for (int64_t p = p0; p < p1; p++) {                                                        \
            const T *x = (const T *)a->x + p * in_n;                                               \
            T *y = (T *)a->y + p * out_n;                                                          \
            int64_t *ix = a->idx_out ? a->idx_out + p * out_n : NULL;                              \
            if (fast) {                                                                            \
                max_fast_##N(g, x, y, ix);                                                         \
                continue;                                                                          \
            }                                                                                      \
            for (int64_t oh = 0; oh < g->out_h; oh++)                                              \
                for (int64_t ow = 0; ow < g->out_w; ow++) {                                        \
                    const int64_t o = oh * g->out_w + ow;                                          \
                    if (a->mode == TRN_POOL_AVG) {                                                 \
                        int64_t h0, h1, w0, w1;                                                    \
                        double div;                                                                \
                        if (!avg_window(g, oh, ow, &h0, &h1, &w0, &w1, &div)) {                    \
                            y[o] = ST((C)0);                                                       \
                            continue;                                                              \
                        }                                                                          \
                        C s = 0;                                                                   \
                        for (int64_t h = h0; h < h1; h++)                                          \
                            for (int64_t w = w0; w < w1; w++) s += (C)LD(x[h * g->in_w + w]);      \
                        y[o] = ST((C)(s / (C)div));                                                \
                        continue;                                                                  \
                    }                                                                              \
                    int64_t h0 = oh * g->sh - g->ph, w0 = ow * g->sw - g->pw;                      \
                    const int64_t h1 = h0 + (g->kh - 1) * g->dh + 1 < g->in_h                      \
                                           ? h0 + (g->kh - 1) * g->dh + 1                          \
                                           : g->in_h;                                              \
                    const int64_t w1 = w0 + (g->kw - 1) * g->dw + 1 < g->in_w                      \
                                           ? w0 + (g->kw - 1) * g->dw + 1                          \
                                           : g->in_w;                                              \
                    while (h0 < 0) h0 += g->dh;                                                    \
                    while (w0 < 0) w0 += g->dw;                                                    \
                    int64_t best = h0 * g->in_w + w0;                                              \
                    C m = (C)-INFINITY;                                                            \
                    T mv = ST((C)-INFINITY);                                                       \
                    for (int64_t h = h0; h < h1; h += g->dh)                                       \
                        for (int64_t w = w0; w < w1; w += g->dw) {                                 \
                            const int64_t k = h * g->in_w + w;                                     \
                            const C v = (C)LD(x[k]);                                               \
                            if (v > m || isnan(v)) m = v, mv = x[k], best = k;                     \
                        }                                                                          \
                    y[o] = mv;                                                                     \
                    if (ix) ix[o] = best;                                                          \
                }                                                                                  \
        }                                                                                          \
    }                                                                                              \
    static void bwd_##N(void *ctx, int64_t p0, int64_t p1) {                                       \
        const trn__pool_io *a = &((const pool_args *)ctx)->io;                                     \
        const trn_pool2d_geometry *g = &((const pool_args *)ctx)->g;                               \
        const int64_t in_n = g->in_h * g->in_w, out_n = g->out_h * g->out_w;                       \
        C *acc = NULL;                                                                             \
        for (int64_t p = p0; p < p1; p++) {                                                        \
            const T *dy = (const T *)a->dy + p * out_n;                                            \
            T *dx = (T *)a->dx + p * in_n;                                                         \
            /* Accumulate in C (16-bit types would lose small additions): */                       \
            /* the float types accumulate straight into dx. */                                     \
            C local[256];                                                                          \
            C *sum = TRN__POOL_SUM_OPEN(T, C, dx, in_n, local, acc);                               \
            if (sum == NULL) {                                                                     \
                atomic_store(a->bad, 2);                                                           \
                return;                                                                            \
            }                                                                                      \
            zero_plane(sum, (size_t)in_n * sizeof(C));                                             \
            if (a->mode == TRN_POOL_MAX) {                                                         \
                if (max_scatter_##N(dy, a->idx_in + p * out_n, sum, out_n, in_n))                  \
                    atomic_store(a->bad, 1);                                                       \
            } else {                                                                               \
                for (int64_t oh = 0; oh < g->out_h; oh++)                                          \
                    for (int64_t ow = 0; ow < g->out_w; ow++) {                                    \
                        const int64_t o = oh * g->out_w + ow;                                      \
                        const C gv = (C)LD(dy[o]);                                                 \
                        int64_t h0, h1, w0, w1;                                                    \
                        double div;                                                                \
                        if (!avg_window(g, oh, ow, &h0, &h1, &w0, &w1, &div)) continue;            \
                        const C share = (C)(gv / (C)div);                                          \
                        for (int64_t h = h0; h < h1; h++)                                          \
                            for (int64_t w = w0; w < w1; w++) sum[h * g->in_w + w] += share;       \
                    }                                                                              \
            }                                                                                      \
            if ((void *)sum != (void *)dx)                                                         \
                for (int64_t i = 0; i < in_n; i++) dx[i] = ST(sum[i]);                             \
        }                                                                                          \
        free(acc);                                                                                 \
    }

TRN_KIT_FLOAT_TYPES(DEFINE_POOL)

#define FWD(E, N, ...) fwd_##N,
#define BWD(E, N, ...) bwd_##N,
static const trn__pool_loops loops = {{TRN_KIT_FLOAT_TYPES(FWD)}, {TRN_KIT_FLOAT_TYPES(BWD)}};
#undef FWD
#undef BWD

static trn_status pool_task(void *args) {
    pool_args *a = args;
    const trn_pool2d_geometry *g = &a->g;
    const trn__pool_shape shape = {g->planes, g->in_h * g->in_w, g->out_h * g->out_w, g->kh * g->kw,
                                   "max_pool backward: an index is outside its input plane"};
    return trn__pool_run(&a->io, &shape, &loops, a);
}

static trn_status check(trn_stream *stream, const void *d, trn_dtype dtype, trn_pool_mode mode,
                        const trn_pool2d_geometry *g, const char *fn) {
    trn_status st = trn__pool_check(stream, d, dtype, mode, fn);
    if (st != TRN_SUCCESS) return st;
    int64_t t;
    if (g->planes < 0 || g->in_h < 0 || g->in_w < 0 || g->out_h < 0 || g->out_w < 0 || g->kh <= 0 ||
        g->kw <= 0 || g->sh <= 0 || g->sw <= 0 || g->ph < 0 || g->pw < 0 || g->dh <= 0 ||
        g->dw <= 0 || __builtin_mul_overflow(g->planes, g->in_h, &t) ||
        __builtin_mul_overflow(t, g->in_w, &t) || __builtin_mul_overflow(t, 8, &t) ||
        __builtin_mul_overflow(g->planes, g->out_h, &t) ||
        __builtin_mul_overflow(t, g->out_w, &t) || __builtin_mul_overflow(t, 8, &t))
        return trn__set_error(TRN_ERROR_INVALID_ARGUMENT, "%s: invalid pooling geometry", fn);
    return trn__fork_check();
}

// Forward and backward: io says which (d is non-NULL).
static trn_status launch(trn_stream *stream, const void *d, trn__pool_io io,
                         const trn_pool2d_geometry *g, const char *fn) {
    trn_status st = check(stream, d, io.dtype, io.mode, g, fn);
    if (st != TRN_SUCCESS) return st;
    pool_args a = {io, *g};
    return trn__pool_submit(stream, &a.io, g->planes, g->in_h * g->in_w, g->out_h * g->out_w,
                            pool_task, sizeof a, fn);
}

trn_status trn_pool2d_launch(trn_stream *stream, const trn_pool2d_desc *d) {
    static const char fn[] = "trn_pool2d_launch";
    if (d == NULL) return trn__check_launch(stream, d, fn);
    return launch(stream, d, TRN__POOL_FORWARD_IO(d), &d->g, fn);
}

trn_status trn_pool2d_backward_launch(trn_stream *stream, const trn_pool2d_backward_desc *d) {
    static const char fn[] = "trn_pool2d_backward_launch";
    if (d == NULL) return trn__check_launch(stream, d, fn);
    return launch(stream, d, TRN__POOL_BACKWARD_IO(d), &d->g, fn);
}
