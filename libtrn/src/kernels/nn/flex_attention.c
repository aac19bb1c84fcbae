// flex_attention.c - owns the block-sparse FlexAttention kernels
// (trn/flex_attention.h).
//
// The walk is the fused attention's (attention.c): scores are computed
// transposed, S^T = K . (scale Q)^T, with register-blocked tile products
// (flex_tile.h; float32 keys and values are read in place), the softmax
// runs online over key tiles, and the backward recomputes the probabilities
// from the saved logsumexp. What differs: the
// keys of a query block are the blocks its BlockMask row lists (the others
// are never loaded or multiplied), and each score tile goes through the
// compiled score_mod / mask_mod function (mask_mod only on partial blocks),
// and in the backward through score_mod's compiled derivative.
//
// Forward units: (batch, head, query tile), split between the threads by
// their key tile count (fwd_run). Backward units: (batch, kv head),
// so one thread accumulates dk/dv of its kv head over every query head of
// the group (no atomics); dq of a query tile is accumulated over its blocks.
// With fewer units than threads a unit is split in parts with partial dk/dv
// sums (bwd_run).
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../kit/dtype_io.h"
#include "../kit/launch.h"
#include "../kit/piece_status.h"
#include "online_softmax.h"
#include "trn/scalar.h"
#include "flex_tile.h"
#include "trn/flex_attention.h"
#include "trn/convert.h"
#include "trn/parallel.h"

// Tiles never exceed this many rows (queries) or keys: a BlockMask block
// (128 by default) is split into tiles that divide it.
enum { TILE_MAX = 64 };

typedef struct flex_args {
    trn_flex_attention_backward_desc d;  // d.fwd for the forward
    int backward;
} flex_args;

_Static_assert(sizeof(flex_args) <= TRN_TASK_MAX_ARGS, "flex attention args too large");

static inline int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }

// The largest tile <= TILE_MAX dividing a block of `block` rows (halving a
// power of two); an odd block above TILE_MAX is its own tile.
static int64_t tile_of(int64_t block) {
    int64_t t = block;
    while (t > TILE_MAX && t % 2 == 0) t /= 2;
    return t;
}

// ---- element access -------------------------------------------------------------

static void load_rows(trn_dtype t, const void *p, const int64_t *st, int64_t b, int64_t head,
                      int64_t r0, int64_t n, int64_t dim, float *dst) {
    for (int64_t r = 0; r < n; r++)
        trn__load_row_f32(t, p, b * st[0] + head * st[1] + (r0 + r) * st[2], dim, 1.0f,
                          dst + r * dim);
}

// Whether mask_mod removed every score of a tile of a partial block (the
// tiles of a causal mask's diagonal blocks above the diagonal): its softmax
// step and P . V would change nothing (p = 0, alpha = 1 or the row still
// empty), so they are skipped. A NaN score is not masked.
static int tile_all_masked(const float *st, int64_t ld, int64_t ni, int64_t nj) {
    int any = 0;
    for (int64_t j = 0; j < nj; j++)
        for (int64_t i = 0; i < ni; i++) any |= !(st[j * ld + i] == -INFINITY);
    return !any;
}

// Rows [r0, r0 + n) of (b, head) as float32 rows *rows, *ld apart: float32
// operands are read in place (their rows are contiguous), the 16-bit ones
// converted into dst.
static void key_rows(trn_dtype t, const void *p, const int64_t *st, int64_t b, int64_t head,
                     int64_t r0, int64_t n, int64_t dim, float *dst, const float **rows,
                     int64_t *ld) {
    if (t == TRN_DTYPE_F32) {
        *rows = (const float *)p + b * st[0] + head * st[1] + r0 * st[2];
        *ld = st[2];
        return;
    }
    load_rows(t, p, st, b, head, r0, n, dim, dst);
    *rows = dst;
    *ld = dim;
}

// ---- the block lists ----------------------------------------------------------------
// The partial (list 0) or full (list 1) key blocks of query block m of
// (b, h): *count entries from *idx.
static void block_list(const trn_flex_attention_desc *d, int list, int64_t b, int64_t h, int64_t m,
                       int64_t *count, const int32_t **idx) {
    const int32_t *num = list ? d->full_kv_num_blocks : d->kv_num_blocks;
    const int32_t *ind = list ? d->full_kv_indices : d->kv_indices;
    *count = 0;
    *idx = NULL;
    if (num == NULL || ind == NULL || m >= d->mask_q_blocks) return;
    const int64_t mb = d->mask_batch == 1 ? 0 : b, mh = d->mask_heads == 1 ? 0 : h;
    const int64_t row = (mb * d->mask_heads + mh) * d->mask_q_blocks + m;
    int64_t c = num[row];
    if (c < 0) c = 0;
    if (c > d->mask_kv_blocks) c = d->mask_kv_blocks;
    *count = c;
    *idx = ind + row * d->mask_kv_blocks;
}

// ---- forward --------------------------------------------------------------------
typedef struct fwd_scratch {
    float *qt, *k, *v, *st, *o, *pv, *m, *l, *msub, *alpha, *sum, *row;
    int64_t tq, tk;
} fwd_scratch;

// One key tile [j0, j0 + nj) of a query tile: scores, modifications, online
// softmax update, O += P . V.
// Inlined twice: with the tile stride a constant (the usual 64: the
// products and loops then index with a known stride) and as given.
static inline __attribute__((always_inline)) void fwd_tile_with(const trn_flex_attention_desc *d,
                                                                const fwd_scratch *w, int64_t b,
                                                                int64_t h, int64_t hk, int64_t i0,
                                                                int64_t ni, int64_t j0, int64_t nj,
                                                                int masked, const int64_t TQ) {
    const int64_t E = d->head_dim, Ev = d->v_dim;
    float *st = w->st;
    const float *k, *v;
    int64_t kld, vld;
    key_rows(d->dtype, d->k, d->k_strides, b, hk, j0, nj, E, w->k, &k, &kld);
    key_rows(d->dtype, d->v, d->v_strides, b, hk, j0, nj, Ev, w->v, &v, &vld);
    trn__flex_mm(nj, ni, E, k, kld, 1, w->qt, TQ, st, TQ, 0);
    d->score_fn(&d->buffers, b, h, i0, ni, j0, nj, st, TQ, masked);
    if (masked && tile_all_masked(st, TQ, ni, nj)) return;
    trn__online_softmax_step((trn__online_softmax){w->m, w->l, w->o, w->msub, w->alpha, w->sum}, st,
                             TQ, ni, nj, Ev);
    trn__flex_mm(ni, Ev, nj, st, 1, TQ, v, vld, w->pv, Ev, 0);
    trn__attn_add_tile(w->o, Ev, w->pv, ni, Ev);
}

static void fwd_tile(const trn_flex_attention_desc *d, const fwd_scratch *w, int64_t b, int64_t h,
                     int64_t hk, int64_t i0, int64_t ni, int64_t j0, int64_t nj, int masked) {
    if (w->tq == TILE_MAX)
        fwd_tile_with(d, w, b, h, hk, i0, ni, j0, nj, masked, TILE_MAX);
    else
        fwd_tile_with(d, w, b, h, hk, i0, ni, j0, nj, masked, w->tq);
}

static void fwd_unit(const trn_flex_attention_desc *d, const fwd_scratch *w, int64_t unit) {
    const int64_t E = d->head_dim, Ev = d->v_dim, L = d->q_len, S = d->kv_len;
    const int64_t TQ = w->tq, TK = w->tk;
    const int64_t nqt = (L + TQ - 1) / TQ;
    const int64_t bh = unit / nqt, i0 = (unit % nqt) * TQ;
    const int64_t b = bh / d->heads, h = bh % d->heads;
    const int64_t hk = h / (d->heads / d->kv_heads);
    const int64_t ni = min64(TQ, L - i0);
    const float scale = (float)d->scale;
    for (int64_t i = 0; i < ni; i++) {
        trn__load_row_f32(d->dtype, d->q,
                          b * d->q_strides[0] + h * d->q_strides[1] + (i0 + i) * d->q_strides[2], E,
                          scale, w->row);
        for (int64_t e = 0; e < E; e++) w->qt[e * TQ + i] = w->row[e];
        w->m[i] = -INFINITY;
        w->l[i] = 0.0f;
    }
    for (int64_t e = 0; e < ni * Ev; e++) w->o[e] = 0.0f;
    const int64_t m = i0 / d->q_block;
    for (int list = 0; list < 2; list++) {
        int64_t count;
        const int32_t *idx;
        block_list(d, list, b, h, m, &count, &idx);
        for (int64_t c = 0; c < count; c++) {
            const int64_t n = idx[c];
            if (n < 0) continue;
            const int64_t k0 = n * d->kv_block, kend = min64(S, k0 + d->kv_block);
            for (int64_t j0 = k0; j0 < kend; j0 += TK)
                fwd_tile(d, w, b, h, hk, i0, ni, j0, min64(TK, kend - j0), list == 0);
        }
    }
    for (int64_t i = 0; i < ni; i++) {
        const float l = w->l[i];
        const float inv = l > 0.0f ? 1.0f / l : 0.0f;
        trn__store_row_f32(d->dtype, d->out,
                           b * d->out_strides[0] + h * d->out_strides[1] +
                               (i0 + i) * d->out_strides[2],
                           Ev, w->o + i * Ev, inv);
        const int64_t at = (b * d->heads + h) * L + i0 + i;
        if (d->lse) d->lse[at] = l > 0.0f ? w->m[i] + logf(l) : -INFINITY;
        if (d->max) d->max[at] = w->m[i];
    }
}

// The forward's work split: units (batch, head, query tile) cost their key
// tiles (plus one for the tile's own loads and stores), and the pieces the
// threads claim are ranges of units of equal cost, not of equal count: with
// a block-sparse mask the units of a head differ by up to the whole key
// length (a causal or sliding-window mask's first and last query tiles), and
// a mask may empty whole heads or batches (documents), which left one thread
// with most of the work under a split by count.
typedef struct fwd_plan {
    const trn_flex_attention_desc *d;
    const int64_t *cost;  // cost[u]: the cost of the units before u (units + 1 entries)
    int64_t units, pieces;
    trn__piece_status status;  // a piece whose scratch allocation failed
} fwd_plan;

static int64_t unit_cost(const trn_flex_attention_desc *d, int64_t unit, int64_t tq, int64_t tk) {
    const int64_t nqt = (d->q_len + tq - 1) / tq;
    const int64_t bh = unit / nqt, m = (unit % nqt) * tq / d->q_block;
    const int64_t per_block = (d->kv_block + tk - 1) / tk;
    int64_t c = 1;
    for (int list = 0; list < 2; list++) {
        int64_t count;
        const int32_t *idx;
        block_list(d, list, bh / d->heads, bh % d->heads, m, &count, &idx);
        c += count * per_block;
    }
    return c;
}

// The first unit of piece p: the first whose preceding cost reaches p / pieces
// of the total.
static int64_t piece_start(const fwd_plan *pl, int64_t p) {
    if (p >= pl->pieces) return pl->units;
    const int64_t total = pl->cost[pl->units];
    // total * p / pieces without the product overflowing.
    const int64_t target = total / pl->pieces * p + total % pl->pieces * p / pl->pieces;
    int64_t lo = 0, hi = pl->units;
    while (lo < hi) {
        const int64_t mid = lo + (hi - lo) / 2;
        if (pl->cost[mid] < target)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

static void fwd_piece(void *ctx, int64_t p0, int64_t p1) {
    fwd_plan *pl = ctx;
    const trn_flex_attention_desc *d = pl->d;
    const int64_t u0 = piece_start(pl, p0), u1 = piece_start(pl, p1);
    if (u0 >= u1) return;
    const int64_t E = d->head_dim, Ev = d->v_dim;
    const int64_t TQ = tile_of(d->q_block), TK = tile_of(d->kv_block);
    const int64_t wide = E > Ev ? E : Ev;
    const size_t floats =
        (size_t)(E * TQ + TK * E + TK * Ev + TK * TQ + 2 * TQ * Ev + 5 * TQ + wide);
    float *buf = trn__piece_calloc(&pl->status, floats, sizeof(float));
    if (buf == NULL) return;  // the task reports it
    fwd_scratch w;
    w.tq = TQ;
    w.tk = TK;
    w.qt = buf;
    w.k = w.qt + E * TQ;
    w.v = w.k + TK * E;
    w.st = w.v + TK * Ev;
    w.o = w.st + TK * TQ;
    w.pv = w.o + TQ * Ev;
    w.m = w.pv + TQ * Ev;
    w.l = w.m + TQ;
    w.msub = w.l + TQ;
    w.alpha = w.msub + TQ;
    w.sum = w.alpha + TQ;
    w.row = w.sum + TQ;
    for (int64_t u = u0; u < u1; u++) fwd_unit(d, &w, u);
    free(buf);
}

// ---- backward -------------------------------------------------------------------
//   S^T = K . (scale Q)^T,  S'^T = mods(S^T),  P^T = exp(S'^T - lse),
//   dP^T = V . dO^T,  dS'^T = P^T * (dP^T - D + dlse),  dS^T = grad(S^T, dS'^T),
//   dV += P^T . dO,  dK += scale dS^T . Q,  dQ += scale dS . K.
typedef struct bwd_scratch {
    float *qt, *q, *dout, *dot, *dd, *lsub, *glse, *dq, *k, *v, *sraw, *pt, *dst, *dk, *dv, *row;
    float *tile;  // one tile's product, added into dk, dv or dq (trn__attn_add_tile)
    int64_t tq, tk;
} bwd_scratch;

static void bwd_tile(const trn_flex_attention_backward_desc *bd, const bwd_scratch *w, int64_t b,
                     int64_t h, int64_t hk, int64_t i0, int64_t ni, int64_t j0, int64_t nj,
                     int masked) {
    const trn_flex_attention_desc *d = &bd->fwd;
    const int64_t E = d->head_dim, Ev = d->v_dim, TQ = w->tq;
    const float scale = (float)d->scale;
    const float *k, *v;
    int64_t kld, vld;
    key_rows(d->dtype, d->k, d->k_strides, b, hk, j0, nj, E, w->k, &k, &kld);
    key_rows(d->dtype, d->v, d->v_strides, b, hk, j0, nj, Ev, w->v, &v, &vld);
    float *pt = w->pt, *dst = w->dst;
    trn__flex_mm(nj, ni, E, k, kld, 1, w->qt, TQ, pt, TQ, 0);
    if (d->grad_fn)
        for (int64_t j = 0; j < nj; j++) memcpy(w->sraw + j * TQ, pt + j * TQ, (size_t)ni * 4);
    d->score_fn(&d->buffers, b, h, i0, ni, j0, nj, pt, TQ, masked);
    for (int64_t j = 0; j < nj; j++)
        for (int64_t i = 0; i < ni; i++)
            pt[j * TQ + i] = trn_sc_exp_nonpos_nan_f(pt[j * TQ + i] - w->lsub[i]);
    trn__flex_mm(nj, ni, Ev, v, vld, 1, w->dot, TQ, dst, TQ, 0);
    for (int64_t j = 0; j < nj; j++) {
        const float *pr = pt + j * TQ;
        float *dr = dst + j * TQ;
        for (int64_t i = 0; i < ni; i++) dr[i] = pr[i] * (dr[i] - w->dd[i] + w->glse[i]);
    }
    if (d->grad_fn) d->grad_fn(&d->buffers, b, h, i0, ni, j0, nj, w->sraw, dst, TQ);
    // dV += P^T . dO (rows: keys, terms: queries).
    trn__flex_mm(nj, Ev, ni, pt, TQ, 1, w->dout, Ev, w->tile, Ev, 0);
    trn__attn_add_tile(w->dv + j0 * Ev, Ev, w->tile, nj, Ev);
    for (int64_t j = 0; j < nj; j++)
        for (int64_t i = 0; i < ni; i++) dst[j * TQ + i] *= scale;
    // dK += dS^T . Q;  dQ += dS . K.
    trn__flex_mm(nj, E, ni, dst, TQ, 1, w->q, E, w->tile, E, 0);
    trn__attn_add_tile(w->dk + j0 * E, E, w->tile, nj, E);
    trn__flex_mm(ni, E, nj, dst, 1, TQ, k, kld, w->tile, E, 0);
    trn__attn_add_tile(w->dq, E, w->tile, ni, E);
}

// dk, dv of kv head hk of batch b (S rows of E and Ev floats) into the outputs.
static void store_dkv(const trn_flex_attention_backward_desc *bd, int64_t b, int64_t hk,
                      const float *dk, const float *dv) {
    const trn_flex_attention_desc *d = &bd->fwd;
    const int64_t E = d->head_dim, Ev = d->v_dim;
    for (int64_t j = 0; j < d->kv_len; j++) {
        trn__store_row_f32(d->dtype, bd->dk,
                           b * bd->dk_strides[0] + hk * bd->dk_strides[1] + j * bd->dk_strides[2],
                           E, dk + j * E, 1.0f);
        trn__store_row_f32(d->dtype, bd->dv,
                           b * bd->dv_strides[0] + hk * bd->dv_strides[1] + j * bd->dv_strides[2],
                           Ev, dv + j * Ev, 1.0f);
    }
}

// The backward's work split. A job is one (batch, kv head) unit, or, when
// there are fewer units than threads (one sequence of multi-query or
// few-head attention), one of `parts` pieces of a unit: a range of its
// (query head, query tile) pairs of equal key-tile cost, accumulating dk/dv
// into its own partial sums (added after the jobs) and writing the dq of
// its pairs. A unit per job left the second thread idle there.
typedef struct bwd_plan {
    const trn_flex_attention_backward_desc *bd;
    int64_t parts;
    float *partial;            // parts > 1: [unit][part] blocks of S * (E + Ev) floats, dk then dv
    trn__piece_status status;  // a piece whose scratch allocation failed
} bwd_plan;

// The key tiles the query tile at row i0 of (b, h) visits, plus one.
static int64_t pair_cost(const trn_flex_attention_desc *d, int64_t b, int64_t h, int64_t i0,
                         int64_t tk) {
    const int64_t per_block = (d->kv_block + tk - 1) / tk;
    int64_t c = 1;
    for (int list = 0; list < 2; list++) {
        int64_t count;
        const int32_t *idx;
        block_list(d, list, b, h, i0 / d->q_block, &count, &idx);
        c += count * per_block;
    }
    return c;
}

// The first pair of part `part` of the `pairs` pairs of unit (b, hk): the
// first whose preceding cost reaches part / parts of the unit's.
static int64_t pair_start(const trn_flex_attention_desc *d, int64_t b, int64_t hk, int64_t nqt,
                          int64_t tq, int64_t tk, int64_t pairs, int64_t part, int64_t parts) {
    if (part <= 0) return 0;
    if (part >= parts) return pairs;
    const int64_t group = d->heads / d->kv_heads;
    int64_t total = 0;
    for (int64_t p = 0; p < pairs; p++)
        total += pair_cost(d, b, hk * group + p / nqt, (p % nqt) * tq, tk);
    const int64_t target = total / parts * part + total % parts * part / parts;
    int64_t acc = 0, p = 0;
    for (; p < pairs && acc < target; p++)
        acc += pair_cost(d, b, hk * group + p / nqt, (p % nqt) * tq, tk);
    return p;
}

static void bwd_unit(const trn_flex_attention_backward_desc *bd, const bwd_scratch *w, int64_t unit,
                     int64_t part, int64_t parts, float *partial) {
    const trn_flex_attention_desc *d = &bd->fwd;
    const int64_t E = d->head_dim, Ev = d->v_dim, L = d->q_len, S = d->kv_len;
    const int64_t TQ = w->tq, TK = w->tk;
    const int64_t group = d->heads / d->kv_heads;
    const int64_t b = unit / d->kv_heads, hk = unit % d->kv_heads;
    const float scale = (float)d->scale;
    const int64_t nqt = (L + TQ - 1) / TQ, pairs = group * nqt;
    const int64_t p0 = pair_start(d, b, hk, nqt, TQ, TK, pairs, part, parts);
    const int64_t p1 = pair_start(d, b, hk, nqt, TQ, TK, pairs, part + 1, parts);
    memset(w->dk, 0, (size_t)(S * E) * sizeof(float));
    memset(w->dv, 0, (size_t)(S * Ev) * sizeof(float));
    for (int64_t p = p0; p < p1; p++) {
        const int64_t h = hk * group + p / nqt, i0 = (p % nqt) * TQ;
        {
            const int64_t ni = min64(TQ, L - i0);
            load_rows(d->dtype, d->q, d->q_strides, b, h, i0, ni, E, w->q);
            for (int64_t i = 0; i < ni; i++)
                for (int64_t e = 0; e < E; e++) w->qt[e * TQ + i] = w->q[i * E + e] * scale;
            load_rows(d->dtype, bd->dout, bd->dout_strides, b, h, i0, ni, Ev, w->dout);
            for (int64_t i = 0; i < ni; i++) {
                const float *dor = w->dout + i * Ev;
                for (int64_t e = 0; e < Ev; e++) w->dot[e * TQ + i] = dor[e];
                trn__load_row_f32(d->dtype, d->out,
                                  b * d->out_strides[0] + h * d->out_strides[1] +
                                      (i0 + i) * d->out_strides[2],
                                  Ev, 1.0f, w->row);
                float dd = 0.0f;
                for (int64_t e = 0; e < Ev; e++) dd += dor[e] * w->row[e];
                w->dd[i] = dd;
                const int64_t at = (b * d->heads + h) * L + i0 + i;
                // A row with no visible key (lse -inf) has P = 0.
                const float lse = d->lse[at];
                w->lsub[i] = lse == -INFINITY ? INFINITY : lse;
                w->glse[i] = bd->dlse ? bd->dlse[at] : 0.0f;
            }
            for (int64_t e = 0; e < ni * E; e++) w->dq[e] = 0.0f;
            const int64_t m = i0 / d->q_block;
            for (int list = 0; list < 2; list++) {
                int64_t count;
                const int32_t *idx;
                block_list(d, list, b, h, m, &count, &idx);
                for (int64_t c = 0; c < count; c++) {
                    const int64_t n = idx[c];
                    if (n < 0) continue;
                    const int64_t k0 = n * d->kv_block, kend = min64(S, k0 + d->kv_block);
                    for (int64_t j0 = k0; j0 < kend; j0 += TK)
                        bwd_tile(bd, w, b, h, hk, i0, ni, j0, min64(TK, kend - j0), list == 0);
                }
            }
            for (int64_t i = 0; i < ni; i++)
                trn__store_row_f32(d->dtype, bd->dq,
                                   b * bd->dq_strides[0] + h * bd->dq_strides[1] +
                                       (i0 + i) * bd->dq_strides[2],
                                   E, w->dq + i * E, 1.0f);
        }
    }
    if (parts > 1) {
        float *to = partial + (unit * parts + part) * S * (E + Ev);
        memcpy(to, w->dk, (size_t)(S * E) * sizeof(float));
        memcpy(to + S * E, w->dv, (size_t)(S * Ev) * sizeof(float));
        return;
    }
    store_dkv(bd, b, hk, w->dk, w->dv);
}

static void bwd_piece(void *ctx, int64_t u0, int64_t u1) {
    bwd_plan *pl = ctx;
    const trn_flex_attention_backward_desc *bd = pl->bd;
    const trn_flex_attention_desc *d = &bd->fwd;
    const int64_t E = d->head_dim, Ev = d->v_dim, S = d->kv_len;
    const int64_t TQ = tile_of(d->q_block), TK = tile_of(d->kv_block);
    const int64_t wide = E > Ev ? E : Ev;
    const int64_t tile = (TK > TQ ? TK : TQ) * wide;
    const size_t floats = (size_t)(E * TQ + TQ * E + TQ * Ev + Ev * TQ + 3 * TQ + TQ * E + TK * E +
                                   TK * Ev + 3 * TK * TQ + S * E + S * Ev + wide + tile);
    float *buf = trn__piece_calloc(&pl->status, floats, sizeof(float));
    if (buf == NULL) return;  // the task reports it
    bwd_scratch w;
    w.tq = TQ;
    w.tk = TK;
    w.qt = buf;
    w.q = w.qt + E * TQ;
    w.dout = w.q + TQ * E;
    w.dot = w.dout + TQ * Ev;
    w.dd = w.dot + Ev * TQ;
    w.lsub = w.dd + TQ;
    w.glse = w.lsub + TQ;
    w.dq = w.glse + TQ;
    w.k = w.dq + TQ * E;
    w.v = w.k + TK * E;
    w.sraw = w.v + TK * Ev;
    w.pt = w.sraw + TK * TQ;
    w.dst = w.pt + TK * TQ;
    w.dk = w.dst + TK * TQ;
    w.dv = w.dk + S * E;
    w.row = w.dv + S * Ev;
    w.tile = w.row + wide;
    for (int64_t u = u0; u < u1; u++)
        bwd_unit(bd, &w, u / pl->parts, u % pl->parts, pl->parts, pl->partial);
    free(buf);
}

// ---- launch -----------------------------------------------------------------------
static void add_operands(trn__access_set *rg, const trn_flex_attention_desc *d) {
    const size_t es = trn_dtype_size(d->dtype);
    const int64_t qn[4] = {d->batch, d->heads, d->q_len, d->head_dim};
    const int64_t kn[4] = {d->batch, d->kv_heads, d->kv_len, d->head_dim};
    const int64_t vn[4] = {d->batch, d->kv_heads, d->kv_len, d->v_dim};
    const int64_t on[4] = {d->batch, d->heads, d->q_len, d->v_dim};
    const int64_t qs[4] = {d->q_strides[0], d->q_strides[1], d->q_strides[2], 1};
    const int64_t ks[4] = {d->k_strides[0], d->k_strides[1], d->k_strides[2], 1};
    const int64_t vs[4] = {d->v_strides[0], d->v_strides[1], d->v_strides[2], 1};
    const int64_t os[4] = {d->out_strides[0], d->out_strides[1], d->out_strides[2], 1};
    trn__access_add(rg, d->q, trn__span4_bytes(qn, qs, es));
    trn__access_add(rg, d->k, trn__span4_bytes(kn, ks, es));
    trn__access_add(rg, d->v, trn__span4_bytes(vn, vs, es));
    trn__access_add(rg, d->out, trn__span4_bytes(on, os, es));
    const size_t rows = (size_t)(d->batch * d->heads * d->q_len) * sizeof(float);
    trn__access_add(rg, d->lse, rows);
    trn__access_add(rg, d->max, rows);
    const size_t nb = (size_t)(d->mask_batch * d->mask_heads * d->mask_q_blocks) * 4;
    trn__access_add(rg, d->kv_num_blocks, nb);
    trn__access_add(rg, d->kv_indices, nb * (size_t)d->mask_kv_blocks);
    trn__access_add(rg, d->full_kv_num_blocks, nb);
    trn__access_add(rg, d->full_kv_indices, nb * (size_t)d->mask_kv_blocks);
    for (int c = 0; c < d->buffers.count; c++)
        trn__access_add(rg, d->buffers.data[c], (size_t)d->buffers.nbytes[c]);
}

static trn_status fwd_run(const trn_flex_attention_desc *d) {
    const int64_t tq = tile_of(d->q_block), tk = tile_of(d->kv_block);
    const int64_t units = d->batch * d->heads * ((d->q_len + tq - 1) / tq);
    int64_t *cost = malloc((size_t)(units + 1) * sizeof(int64_t));
    if (cost == NULL)
        return trn__set_error(TRN_ERROR_OUT_OF_MEMORY, "flex_attention: out of host memory");
    cost[0] = 0;
    for (int64_t u = 0; u < units; u++) cost[u + 1] = cost[u] + unit_cost(d, u, tq, tk);
    // Several pieces a thread, claimed as threads come free (trn_parallel_for),
    // so a thread the machine delays does not hold back the rest.
    int64_t pieces = 8 * (int64_t)trn_parallel_threads();
    if (pieces > units) pieces = units;
    fwd_plan pl = {.d = d, .cost = cost, .units = units, .pieces = pieces};
    trn__piece_status_init(&pl.status);
    trn_parallel_for(pieces, 1, fwd_piece, &pl);
    free(cost);
    return trn__piece_status_raise(&pl.status, "flex_attention");
}

static trn_status bwd_run(const trn_flex_attention_backward_desc *bd) {
    const trn_flex_attention_desc *d = &bd->fwd;
    const int64_t units = d->batch * d->kv_heads, threads = trn_parallel_threads();
    const int64_t tq = tile_of(d->q_block);
    const int64_t pairs = d->heads / d->kv_heads * ((d->q_len + tq - 1) / tq);
    int64_t parts = units >= threads ? 1 : (threads + units - 1) / units;
    if (parts > pairs) parts = pairs;
    bwd_plan pl = {.bd = bd, .parts = parts > 1 ? parts : 1, .partial = NULL};
    trn__piece_status_init(&pl.status);
    const int64_t row = d->kv_len * (d->head_dim + d->v_dim);
    if (pl.parts > 1) {
        pl.partial = malloc((size_t)(units * pl.parts * row + 1) * sizeof(float));  // + 1: S = 0
        if (pl.partial == NULL)
            return trn__set_error(TRN_ERROR_OUT_OF_MEMORY, "flex_attention: out of host memory");
    }
    trn_parallel_for(units * pl.parts, 1, bwd_piece, &pl);
    const trn_status st = trn__piece_status_raise(&pl.status, "flex_attention backward");
    if (st == TRN_SUCCESS && pl.parts > 1) {
        // Part 0's block collects the others', then goes to the outputs.
        for (int64_t u = 0; u < units; u++) {
            float *sum = pl.partial + u * pl.parts * row;
            for (int64_t p = 1; p < pl.parts; p++) {
                const float *add = sum + p * row;
                for (int64_t e = 0; e < row; e++) sum[e] += add[e];
            }
            store_dkv(bd, u / d->kv_heads, u % d->kv_heads, sum, sum + d->kv_len * d->head_dim);
        }
    }
    free(pl.partial);
    return st;
}

static trn_status flex_task(void *args) {
    flex_args *a = args;
    const trn_flex_attention_desc *d = &a->d.fwd;
    trn__access_set rg = {.count = 0};
    add_operands(&rg, d);
    if (a->backward) {
        const trn_flex_attention_backward_desc *bd = &a->d;
        const size_t es = trn_dtype_size(d->dtype);
        const int64_t on[4] = {d->batch, d->heads, d->q_len, d->v_dim};
        const int64_t qn[4] = {d->batch, d->heads, d->q_len, d->head_dim};
        const int64_t kn[4] = {d->batch, d->kv_heads, d->kv_len, d->head_dim};
        const int64_t vn[4] = {d->batch, d->kv_heads, d->kv_len, d->v_dim};
        const int64_t gs[4] = {bd->dout_strides[0], bd->dout_strides[1], bd->dout_strides[2], 1};
        const int64_t qs[4] = {bd->dq_strides[0], bd->dq_strides[1], bd->dq_strides[2], 1};
        const int64_t ks[4] = {bd->dk_strides[0], bd->dk_strides[1], bd->dk_strides[2], 1};
        const int64_t vs[4] = {bd->dv_strides[0], bd->dv_strides[1], bd->dv_strides[2], 1};
        trn__access_add(&rg, bd->dout, trn__span4_bytes(on, gs, es));
        trn__access_add(&rg, bd->dq, trn__span4_bytes(qn, qs, es));
        trn__access_add(&rg, bd->dk, trn__span4_bytes(kn, ks, es));
        trn__access_add(&rg, bd->dv, trn__span4_bytes(vn, vs, es));
        trn__access_add(&rg, bd->dlse, (size_t)(d->batch * d->heads * d->q_len) * sizeof(float));
    }
    trn_status st = trn__access_begin(&rg);
    if (st == TRN_SUCCESS) {
        // Each piece allocates its own scratch and reports a failure in the
        // plan's status (no probe up front: it could pass and a piece still
        // fail, and it cost a malloc + free of the largest scratch a call).
        st = a->backward ? bwd_run(&a->d) : fwd_run(d);
    }
    trn__access_end(&rg);
    return st;
}

int trn_flex_attention_supports(trn_dtype dtype) {
    return dtype == TRN_DTYPE_F32 || dtype == TRN_DTYPE_F16 || dtype == TRN_DTYPE_BF16;
}

static trn_status check_fwd(const trn_flex_attention_desc *d, const char *fn) {
    if (!trn_flex_attention_supports(d->dtype))
        return trn__set_error(TRN_ERROR_UNSUPPORTED, "%s: dtype %s is not supported", fn,
                              trn_dtype_name(d->dtype));
    if (d->batch < 0 || d->heads < 0 || d->kv_heads < 0 || d->q_len < 0 || d->kv_len < 0 ||
        d->head_dim < 0 || d->v_dim < 0)
        return trn__set_error(TRN_ERROR_INVALID_ARGUMENT, "%s: negative size", fn);
    if (d->kv_heads == 0 ? d->heads != 0 : d->heads % d->kv_heads != 0)
        return trn__set_error(TRN_ERROR_INVALID_ARGUMENT,
                              "%s: %lld query heads are not a multiple of %lld key/value heads", fn,
                              (long long)d->heads, (long long)d->kv_heads);
    if (d->q_block <= 0 || d->kv_block <= 0)
        return trn__set_error(TRN_ERROR_INVALID_ARGUMENT, "%s: block sizes %lld x %lld", fn,
                              (long long)d->q_block, (long long)d->kv_block);
    if ((d->mask_batch != 1 && d->mask_batch != d->batch) ||
        (d->mask_heads != 1 && d->mask_heads != d->heads) || d->mask_q_blocks < 0 ||
        d->mask_kv_blocks < 0)
        return trn__set_error(TRN_ERROR_INVALID_ARGUMENT,
                              "%s: block mask of %lld x %lld x %lld x %lld blocks does not "
                              "broadcast to batch %lld, heads %lld",
                              fn, (long long)d->mask_batch, (long long)d->mask_heads,
                              (long long)d->mask_q_blocks, (long long)d->mask_kv_blocks,
                              (long long)d->batch, (long long)d->heads);
    if (d->buffers.count < 0 || d->buffers.count > TRN_FLEX_MAX_BUFFERS)
        return trn__set_error(TRN_ERROR_INVALID_ARGUMENT, "%s: %d captured buffers (at most %d)",
                              fn, d->buffers.count, TRN_FLEX_MAX_BUFFERS);
    const int64_t work = d->batch * d->heads * d->q_len;
    if (work > 0 &&
        (d->q == NULL || d->out == NULL || d->score_fn == NULL || d->kv_num_blocks == NULL ||
         d->kv_indices == NULL || (d->kv_len > 0 && (d->k == NULL || d->v == NULL))))
        return trn__set_error(TRN_ERROR_INVALID_ARGUMENT, "%s: an operand pointer is NULL", fn);
    return trn__fork_check();
}

trn_status trn_flex_attention_launch(trn_stream *stream, const trn_flex_attention_desc *desc) {
    if (stream == NULL || desc == NULL)
        return trn__check_launch(stream, desc, "trn_flex_attention_launch");
    trn_status st = check_fwd(desc, "trn_flex_attention_launch");
    if (st != TRN_SUCCESS) return st;
    if (desc->batch * desc->heads * desc->q_len == 0) return TRN_SUCCESS;
    flex_args a;
    memset(&a, 0, sizeof a);
    a.d.fwd = *desc;
    return trn_stream_launch(stream, flex_task, &a, sizeof a);
}

trn_status trn_flex_attention_backward_launch(trn_stream *stream,
                                              const trn_flex_attention_backward_desc *desc) {
    if (stream == NULL || desc == NULL)
        return trn__check_launch(stream, desc, "trn_flex_attention_backward_launch");
    trn_status st = check_fwd(&desc->fwd, "trn_flex_attention_backward_launch");
    if (st != TRN_SUCCESS) return st;
    const trn_flex_attention_desc *d = &desc->fwd;
    if (d->batch * d->heads * d->q_len > 0 &&
        (desc->dout == NULL || d->lse == NULL || desc->dq == NULL))
        return trn__set_error(TRN_ERROR_INVALID_ARGUMENT,
                              "trn_flex_attention_backward_launch: dout, lse or dq is NULL");
    if (d->batch * d->kv_heads * d->kv_len > 0 && (desc->dk == NULL || desc->dv == NULL))
        return trn__set_error(TRN_ERROR_INVALID_ARGUMENT,
                              "trn_flex_attention_backward_launch: dk or dv is NULL");
    if (d->batch * d->kv_heads == 0) return TRN_SUCCESS;
    flex_args a;
    memset(&a, 0, sizeof a);
    a.d = *desc;
    a.backward = 1;
    return trn_stream_launch(stream, flex_task, &a, sizeof a);
}
