// rnn_cell.c - owns the fused LSTM / GRU cell kernels (trn/rnn_cell.h).
//
// Every (batch item, hidden unit) pair is independent: the pointwise pass
// splits the batch * hidden elements across the thread pool (whole rows when
// the batch is large, pieces of a row when it is small). Bias gradients are
// sums over the batch of the stored gate gradients; a second pass splits
// their columns across the pool and walks the rows in column tiles (row-major
// reads), accumulating in double so the result does not depend on the split.
#include <math.h>
#include <string.h>

#include "../kit/launch.h"
#include "../kit/dtype_io.h"
#include "trn/scalar.h"
#include "trn/convert.h"
#include "trn/parallel.h"
#include "trn/rnn_cell.h"

// Elements per parallel piece (each element costs a few exp / tanh).
#define GRAIN 4096
// Columns summed together in the bias-gradient pass, and the elements
// (rows x columns, one add each) below which that pass stays on one thread:
// handing a few microseconds of adds to the pool costs more than it saves.
#define TILE 64
#define SUM_GRAIN 65536

enum kind { LSTM_FWD, LSTM_BWD, GRU_FWD, GRU_BWD };

typedef struct rnn_args {
    enum kind kind;
    trn_dtype dtype;
    int64_t batch, hidden;
    // Inputs (meaning by kind; see the launch functions).
    const void *ig, *hg, *bi, *bh, *prev, *gh, *gc, *cy_in, *ws_in;
    // Outputs.
    void *hy, *cy, *ws, *g1, *g2, *gprev, *gb1, *gb2;
} rnn_args;

_Static_assert(sizeof(rnn_args) <= TRN_TASK_MAX_ARGS, "rnn cell args too large");

// Walks the elements [e0, e1) of a [batch, H] grid as row segments, so that
// the inner loop over j has no division and contiguous accesses.
#define FOR_ELEMENTS(H, e0, e1)                                                                    \
    for (int64_t b = (e0) / (H), j_ = (e0) % (H); b * (H) < (e1); b++, j_ = 0)                     \
        for (int64_t j = j_, jend_ = (e1)-b * (H) < (H) ? (e1)-b * (H) : (H); j < jend_; j++)

#define DEFINE_RNN(N, T, C, LD, ST, EXP, TANH)                                                     \
    static inline C sig_##N(C x) { return (C)1 / ((C)1 + EXP(-x)); }                               \
    /* An optional bias element (0 without a bias). */                                             \
    static inline C bias_at_##N(const void *p, int64_t k) {                                        \
        return p ? (C)LD(((const T *)p)[k]) : (C)0;                                                \
    }                                                                                              \
    static void lstm_fwd_##N(void *ctx, int64_t e0, int64_t e1) {                                  \
        const rnn_args *a = ctx;                                                                   \
        const int64_t H = a->hidden;                                                               \
        FOR_ELEMENTS(H, e0, e1) {                                                                  \
            const int64_t e = b * H + j, row = b * 4 * H;                                          \
            C pre[4];                                                                              \
            for (int k = 0; k < 4; k++) {                                                          \
                const int64_t col = k * H + j;                                                     \
                pre[k] = (C)LD(((const T *)a->ig)[row + col]) +                                    \
                         (C)LD(((const T *)a->hg)[row + col]) + bias_at_##N(a->bi, col) +          \
                         bias_at_##N(a->bh, col);                                                  \
            }                                                                                      \
            const C i = sig_##N(pre[0]), f = sig_##N(pre[1]);                                      \
            const C g = TANH(pre[2]), o = sig_##N(pre[3]);                                         \
            const C c = f * (C)LD(((const T *)a->prev)[e]) + i * g;                                \
            ((T *)a->cy)[e] = ST(c);                                                               \
            ((T *)a->hy)[e] = ST(o * TANH(c));                                                     \
            T *ws = (T *)a->ws + row + j;                                                          \
            ws[0] = ST(i);                                                                         \
            ws[H] = ST(f);                                                                         \
            ws[2 * H] = ST(g);                                                                     \
            ws[3 * H] = ST(o);                                                                     \
        }                                                                                          \
    }                                                                                              \
    static void lstm_bwd_##N(void *ctx, int64_t e0, int64_t e1) {                                  \
        const rnn_args *a = ctx;                                                                   \
        const int64_t H = a->hidden;                                                               \
        FOR_ELEMENTS(H, e0, e1) {                                                                  \
            const int64_t e = b * H + j, row = b * 4 * H;                                          \
            const T *ws = (const T *)a->ws_in + row + j;                                           \
            const C i = (C)LD(ws[0]), f = (C)LD(ws[H]);                                            \
            const C g = (C)LD(ws[2 * H]), o = (C)LD(ws[3 * H]);                                    \
            const C gh = a->gh ? (C)LD(((const T *)a->gh)[e]) : (C)0;                              \
            const C gc = a->gc ? (C)LD(((const T *)a->gc)[e]) : (C)0;                              \
            const C tc = TANH((C)LD(((const T *)a->cy_in)[e]));                                    \
            /* d loss / d c: through hy = o tanh(c), plus what reaches cy. */                      \
            const C dc = gh * o * ((C)1 - tc * tc) + gc;                                           \
            T *gg = (T *)a->g1 + row + j;                                                          \
            gg[0] = ST(dc * g * ((C)1 - i) * i);                                                   \
            gg[H] = ST(dc * (C)LD(((const T *)a->prev)[e]) * ((C)1 - f) * f);                      \
            gg[2 * H] = ST(dc * i * ((C)1 - g * g));                                               \
            gg[3 * H] = ST(gh * tc * ((C)1 - o) * o);                                              \
            ((T *)a->gprev)[e] = ST(dc * f);                                                       \
        }                                                                                          \
    }                                                                                              \
    static void gru_fwd_##N(void *ctx, int64_t e0, int64_t e1) {                                   \
        const rnn_args *a = ctx;                                                                   \
        const int64_t H = a->hidden;                                                               \
        FOR_ELEMENTS(H, e0, e1) {                                                                  \
            const int64_t e = b * H + j, row = b * 3 * H;                                          \
            const T *ig = (const T *)a->ig + row + j, *hg = (const T *)a->hg + row + j;            \
            const C r = sig_##N((C)LD(ig[0]) + (C)LD(hg[0]) + bias_at_##N(a->bi, j) +              \
                                bias_at_##N(a->bh, j));                                            \
            const C z = sig_##N((C)LD(ig[H]) + (C)LD(hg[H]) + bias_at_##N(a->bi, H + j) +          \
                                bias_at_##N(a->bh, H + j));                                        \
            const C hn = (C)LD(hg[2 * H]) + bias_at_##N(a->bh, 2 * H + j);                         \
            const C n = TANH((C)LD(ig[2 * H]) + bias_at_##N(a->bi, 2 * H + j) + r * hn);           \
            const T hx = ((const T *)a->prev)[e];                                                  \
            ((T *)a->hy)[e] = ST(n + z * ((C)LD(hx) - n));                                         \
            T *ws = (T *)a->ws + b * 5 * H + j;                                                    \
            ws[0] = ST(r);                                                                         \
            ws[H] = ST(z);                                                                         \
            ws[2 * H] = ST(n);                                                                     \
            ws[3 * H] = hx;                                                                        \
            ws[4 * H] = ST(hn);                                                                    \
        }                                                                                          \
    }                                                                                              \
    static void gru_bwd_##N(void *ctx, int64_t e0, int64_t e1) {                                   \
        const rnn_args *a = ctx;                                                                   \
        const int64_t H = a->hidden;                                                               \
        FOR_ELEMENTS(H, e0, e1) {                                                                  \
            const int64_t e = b * H + j, row = b * 3 * H + j;                                      \
            const T *ws = (const T *)a->ws_in + b * 5 * H + j;                                     \
            const C r = (C)LD(ws[0]), z = (C)LD(ws[H]), n = (C)LD(ws[2 * H]);                      \
            const C hx = (C)LD(ws[3 * H]), hn = (C)LD(ws[4 * H]);                                  \
            const C go = (C)LD(((const T *)a->gh)[e]);                                             \
            const C gz = go * (hx - n) * ((C)1 - z) * z;                                           \
            const C gn = go * ((C)1 - z) * ((C)1 - n * n);                                         \
            const C gr = gn * hn * ((C)1 - r) * r;                                                 \
            T *gi = (T *)a->g1 + row, *gh = (T *)a->g2 + row;                                      \
            gi[0] = gh[0] = ST(gr);                                                                \
            gi[H] = gh[H] = ST(gz);                                                                \
            gi[2 * H] = ST(gn);                                                                    \
            gh[2 * H] = ST(gn * r); /* h_n enters scaled by r */                                   \
            ((T *)a->gprev)[e] = ST(go * z);                                                       \
        }                                                                                          \
    }                                                                                              \
    /* Column sums of a [rows, cols] matrix into dst[cols]. */                                     \
    static void colsum_##N(const void *src, void *dst, int64_t rows, int64_t cols, int64_t c0,     \
                           int64_t c1) {                                                           \
        for (int64_t t = c0; t < c1; t += TILE) {                                                  \
            const int64_t w = c1 - t < TILE ? c1 - t : TILE;                                       \
            double acc[TILE] = {0};                                                                \
            for (int64_t b = 0; b < rows; b++) {                                                   \
                const T *s = (const T *)src + b * cols + t;                                        \
                for (int64_t k = 0; k < w; k++) acc[k] += (double)LD(s[k]);                        \
            }                                                                                      \
            for (int64_t k = 0; k < w; k++) ((T *)dst)[t + k] = ST((C)acc[k]);                     \
        }                                                                                          \
    }                                                                                              \
    static void bias_##N(void *ctx, int64_t c0, int64_t c1) {                                      \
        const rnn_args *a = ctx;                                                                   \
        const int64_t cols = (a->kind == LSTM_BWD ? 4 : 3) * a->hidden;                            \
        if (a->gb1) colsum_##N(a->g1, a->gb1, a->batch, cols, c0, c1);                             \
        if (a->gb2) colsum_##N(a->g2, a->gb2, a->batch, cols, c0, c1);                             \
    }

DEFINE_RNN(f16, uint16_t, float, LD_f16, ST_f16, trn_sc_expf, trn_sc_tanhf)
DEFINE_RNN(bf16, uint16_t, float, LD_bf16, ST_bf16, trn_sc_expf, trn_sc_tanhf)
DEFINE_RNN(f32, float, float, LD_id, ST_id, trn_sc_expf, trn_sc_tanhf)
DEFINE_RNN(f64, double, double, LD_id, ST_id, exp, tanh)

typedef void (*piece_fn)(void *, int64_t, int64_t);

// The pointwise piece function for a kind and dtype, and the bias-sum one.
static piece_fn pick(trn_dtype d, enum kind k, piece_fn *bias) {
    switch (d) {
#define CASE(E, N, ...)                                                                            \
    case E: {                                                                                      \
        static const piece_fn f[] = {lstm_fwd_##N, lstm_bwd_##N, gru_fwd_##N, gru_bwd_##N};        \
        *bias = bias_##N;                                                                          \
        return f[k];                                                                               \
    }
        TRN_KIT_FLOAT_TYPES(CASE)
#undef CASE
    default: *bias = NULL; return NULL;
    }
}

int trn_rnn_cell_supports(trn_dtype dtype) {
    return dtype == TRN_DTYPE_F16 || dtype == TRN_DTYPE_BF16 || dtype == TRN_DTYPE_F32 ||
           dtype == TRN_DTYPE_F64;
}

// Memory ranges the task touches (protect mode), in units of hidden-wide
// rows per batch item (1, 3, 4 or 5) or of hidden-wide bias vectors.
static void collect_ranges(const rnn_args *a, trn__access_set *r) {
    const size_t es = trn_dtype_size(a->dtype);
    const size_t h = (size_t)a->hidden * es, row = (size_t)a->batch * h;
    const size_t gates = a->kind == LSTM_FWD || a->kind == LSTM_BWD ? 4 : 3;
    r->count = 0;
    trn__access_add(r, a->ig, gates * row);
    trn__access_add(r, a->hg, gates * row);
    trn__access_add(r, a->bi, gates * h);
    trn__access_add(r, a->bh, gates * h);
    trn__access_add(r, a->prev, row);
    trn__access_add(r, a->gh, row);
    trn__access_add(r, a->gc, row);
    trn__access_add(r, a->cy_in, row);
    const size_t ws = a->kind == GRU_FWD || a->kind == GRU_BWD ? 5 : 4;
    trn__access_add(r, a->ws_in, ws * row);
    trn__access_add(r, a->ws, ws * row);
    trn__access_add(r, a->hy, row);
    trn__access_add(r, a->cy, row);
    trn__access_add(r, a->g1, gates * row);
    trn__access_add(r, a->g2, gates * row);
    trn__access_add(r, a->gprev, row);
    trn__access_add(r, a->gb1, gates * h);
    trn__access_add(r, a->gb2, gates * h);
}

static trn_status rnn_task(void *args) {
    rnn_args *a = args;
    // At most 12 of the 17 pointers are set for any kind.
    trn__access_set rg;
    collect_ranges(a, &rg);
    trn_status st = trn__access_begin(&rg);
    if (st == TRN_SUCCESS) {
        piece_fn bias;
        const piece_fn fn = pick(a->dtype, a->kind, &bias);
        trn_parallel_for(a->batch * a->hidden, GRAIN, fn, a);
        if (a->gb1 || a->gb2) {
            const int64_t cols = (a->kind == LSTM_BWD ? 4 : 3) * a->hidden;
            const int64_t per = a->batch > 0 ? a->batch : 1;
            trn_parallel_for(cols, SUM_GRAIN / per > TILE ? SUM_GRAIN / per : TILE, bias, a);
        }
    }
    trn__access_end(&rg);
    return st;
}

static trn_status check(trn_stream *stream, const void *d, trn_dtype dtype, int64_t batch,
                        int64_t hidden, const char *fn) {
    const trn_status null_st = trn__check_launch(stream, d, fn);
    if (null_st != TRN_SUCCESS) return null_st;
    if (!trn_rnn_cell_supports(dtype))
        return trn__set_error(TRN_ERROR_UNSUPPORTED, "%s: dtype %s is not supported", fn,
                              trn_dtype_name(dtype));
    int64_t n;
    // The widest operand is the GRU workspace: batch * 5 hidden elements of
    // up to 8 bytes.
    if (batch < 0 || hidden < 0 || __builtin_mul_overflow(batch, hidden, &n) ||
        __builtin_mul_overflow(n, 40, &n))
        return trn__set_error(TRN_ERROR_INVALID_ARGUMENT, "%s: invalid sizes [%lld, %lld]", fn,
                              (long long)batch, (long long)hidden);
    return trn__fork_check();
}

// Nothing to do without hidden units, or without rows unless a bias
// gradient (then an empty sum: zeros, written by the task) is wanted.
// `need` lists the operands the kind cannot run without (each launch names
// its own); the desc pointer d is only checked against NULL.
static trn_status submit(trn_stream *stream, const void *d, const rnn_args *a,
                         const void *const *need, int n_need, const char *fn) {
    trn_status st = check(stream, d, a->dtype, a->batch, a->hidden, fn);
    if (st != TRN_SUCCESS) return st;
    for (int k = 0; k < n_need && a->batch * a->hidden > 0; k++)
        if (need[k] == NULL)
            return trn__set_error(TRN_ERROR_INVALID_ARGUMENT, "%s: a required pointer is NULL", fn);
    if (a->hidden == 0 || (a->batch == 0 && !a->gb1 && !a->gb2)) return TRN_SUCCESS;
    return trn_stream_launch(stream, rnn_task, a, sizeof *a);
}

trn_status trn_lstm_cell_launch(trn_stream *stream, const trn_lstm_cell_desc *d) {
    static const char fn[] = "trn_lstm_cell_launch";
    if (d == NULL) return trn__check_launch(stream, d, fn);
    const rnn_args a = {.kind = LSTM_FWD,
                        .dtype = d->dtype,
                        .batch = d->batch,
                        .hidden = d->hidden,
                        .ig = d->input_gates,
                        .hg = d->hidden_gates,
                        .bi = d->input_bias,
                        .bh = d->hidden_bias,
                        .prev = d->cx,
                        .hy = d->hy,
                        .cy = d->cy,
                        .ws = d->workspace};
    return submit(stream, d, &a, (const void *[]){a.ig, a.hg, a.prev, a.hy, a.cy, a.ws}, 6, fn);
}

trn_status trn_lstm_cell_backward_launch(trn_stream *stream, const trn_lstm_cell_backward_desc *d) {
    static const char fn[] = "trn_lstm_cell_backward_launch";
    if (d == NULL) return trn__check_launch(stream, d, fn);
    const rnn_args a = {.kind = LSTM_BWD,
                        .dtype = d->dtype,
                        .batch = d->batch,
                        .hidden = d->hidden,
                        .gh = d->grad_hy,
                        .gc = d->grad_cy,
                        .prev = d->cx,
                        .cy_in = d->cy,
                        .ws_in = d->workspace,
                        .g1 = d->grad_gates,
                        .gprev = d->grad_cx,
                        .gb1 = d->grad_bias};
    return submit(stream, d, &a, (const void *[]){a.prev, a.cy_in, a.ws_in, a.g1, a.gprev}, 5, fn);
}

trn_status trn_gru_cell_launch(trn_stream *stream, const trn_gru_cell_desc *d) {
    static const char fn[] = "trn_gru_cell_launch";
    if (d == NULL) return trn__check_launch(stream, d, fn);
    const rnn_args a = {.kind = GRU_FWD,
                        .dtype = d->dtype,
                        .batch = d->batch,
                        .hidden = d->hidden,
                        .ig = d->input_gates,
                        .hg = d->hidden_gates,
                        .bi = d->input_bias,
                        .bh = d->hidden_bias,
                        .prev = d->hx,
                        .hy = d->hy,
                        .ws = d->workspace};
    return submit(stream, d, &a, (const void *[]){a.ig, a.hg, a.prev, a.hy, a.ws}, 5, fn);
}

trn_status trn_gru_cell_backward_launch(trn_stream *stream, const trn_gru_cell_backward_desc *d) {
    static const char fn[] = "trn_gru_cell_backward_launch";
    if (d == NULL) return trn__check_launch(stream, d, fn);
    const rnn_args a = {.kind = GRU_BWD,
                        .dtype = d->dtype,
                        .batch = d->batch,
                        .hidden = d->hidden,
                        .gh = d->grad_hy,
                        .ws_in = d->workspace,
                        .g1 = d->grad_input_gates,
                        .g2 = d->grad_hidden_gates,
                        .gprev = d->grad_hx,
                        .gb1 = d->grad_input_bias,
                        .gb2 = d->grad_hidden_bias};
    return submit(stream, d, &a, (const void *[]){a.gh, a.ws_in, a.g1, a.g2, a.gprev}, 5, fn);
}
