// attention.c - owns the fused scaled dot-product attention kernels
// (trn/attention.h).
//
// Forward: the work units are (batch, head, block of BQ query rows); each
// loads its query rows once (float32, pre-scaled, transposed), then walks
// the keys in tiles of BK: the tile's scores S^T = K . Q^T, the running row
// maximum and sum (online softmax: earlier partial sums are rescaled by
// exp(m_old - m_new)), then O += P . V into a float32 accumulator. Every
// product is a register-blocked tile product (attn_mm.h); the transposed
// score layout lets key and value tiles be used as stored.
//
// Backward: the units are (batch, kv head), so dk/dv of a kv head are
// accumulated by one thread (no atomics) over every query head of its group
// and every query block; dq of a block is accumulated over the key tiles.
// The probabilities are recomputed from the saved logsumexp, and
// D_i = dout_i . out_i replaces the row sum of P * dP (that identity also
// holds with dropout).
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#if defined(__AVX2__)
#include <immintrin.h>
#endif

#include "../kit/dtype_io.h"
#include "../kit/launch.h"
#include "online_softmax.h"
#include "../kit/counter_rng.h"
#include "../kit/piece_status.h"
#include "trn/scalar.h"
#include "attn_mm.h"
#include "trn/attention.h"
#include "trn/convert.h"
#include "trn/parallel.h"

enum { BQ = 64, BK = 64 };
// Query rows per summation chain of the dK / dV products (kv_product).
enum { CHAIN = 16, CHAINS = BQ / CHAIN };
// Query blocks summed into a key tile's level-1 dK / dV before that sum is
// added to the gradient (fold_tile): one chain of (heads in the group x
// query blocks) additions per element, 32 at 2048 queries, left dV's largest
// error 1.3-1.6x CPU's there; chains of KV_GROUP and of n / KV_GROUP
// instead. With at most KV_GROUP blocks the bits are those of one chain.
enum { KV_GROUP = 8 };

typedef struct attn_args {
    trn_attention_backward_desc d;  // d.fwd for the forward
    int backward;
} attn_args;

_Static_assert(sizeof(attn_args) <= TRN_TASK_MAX_ARGS, "attention args too large");

// What the pieces of one call share: the arguments, and where a piece whose
// scratch allocation failed says so (the task then fails the op).
typedef struct attn_run {
    const attn_args *a;
    trn__piece_status status;
} attn_run;

static inline int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }

// ---- pieces' scratch ------------------------------------------------------------
// A piece used to calloc its scratch and free it at the end: at BERT's shape
// ([8, 4, 64, 64], two threads, 8 pieces a call) that zero-filled 0.9 MiB a
// forward and 2.2 MiB a backward, ~4-5 % of the kernels' samples (perf).
// Every scratch element a unit reads, the unit has written first (the output
// bits do not depend on what the buffer held: tested over shapes run back to
// back, tests/test_attention_sdpa.py), so a thread keeps its buffer for its
// next pieces without refilling it. It is zeroed once when allocated, so no
// read ever sees uninitialized memory. Larger scratch (long sequences, whose
// work dwarfs a fill) is not kept, so that a thread does not hold megabytes
// after one long call.
#define ATTN_KEEP_BYTES ((size_t)1 << 20)

typedef struct attn_kept {
    float *buf;
    size_t floats;
    unsigned generation;  // kept_generation when buf was allocated
} attn_kept;

// Bumped by trn__attention_scratch_forget: a thread's kept buffer from an
// older generation is replaced at its next piece. File-local, as every
// kernel file's data (one copy per CPU level; the level that runs is the one
// whose function the trampoline reaches).
static _Atomic unsigned kept_generation;

static pthread_key_t kept_key;
static pthread_once_t kept_once = PTHREAD_ONCE_INIT;
static int kept_key_ok;

static void kept_release(void *p) {
    attn_kept *k = p;
    free(k->buf);
    free(k);
}

static void kept_key_init(void) { kept_key_ok = pthread_key_create(&kept_key, kept_release) == 0; }

// Every thread's kept scratch counts as gone: the next pieces allocate
// again. For test_alloc_fault.c, whose reference call leaves each thread a
// buffer, so the calls it fails allocation by allocation would otherwise
// allocate nothing.
void trn__attention_scratch_forget(void) { atomic_fetch_add(&kept_generation, 1); }

// `floats` floats of scratch for a piece: the thread's kept buffer (replaced by
// a larger zeroed one when short), else a fresh zeroed one the piece frees
// (*owned = 1). NULL when out of memory (recorded in s).
static float *piece_scratch(trn__piece_status *s, size_t floats, int *owned) {
    *owned = 0;
    pthread_once(&kept_once, kept_key_init);
    if (kept_key_ok && floats <= ATTN_KEEP_BYTES / sizeof(float)) {
        const unsigned g = atomic_load_explicit(&kept_generation, memory_order_relaxed);
        attn_kept *k = pthread_getspecific(kept_key);
        if (k != NULL && k->floats >= floats && k->generation == g) return k->buf;
        if (k == NULL) {
            k = calloc(1, sizeof *k);
            if (k != NULL && pthread_setspecific(kept_key, k) != 0) {
                free(k);
                k = NULL;
            }
        }
        if (k != NULL) {
            float *buf = trn__piece_calloc(s, floats, sizeof(float));
            if (buf == NULL) return NULL;
            free(k->buf);
            k->buf = buf;
            k->floats = floats;
            k->generation = g;
            return buf;
        }
    }
    *owned = 1;
    return trn__piece_calloc(s, floats, sizeof(float));
}

// ---- element access -----------------------------------------------------------
static inline float load_f(trn_dtype t, const void *p, int64_t i) {
    switch (t) {
    case TRN_DTYPE_F16: return trn_half_to_float(((const uint16_t *)p)[i]);
    case TRN_DTYPE_BF16: return trn_bf16_to_float(((const uint16_t *)p)[i]);
    default: return ((const float *)p)[i];
    }
}

// Same hash as dropout.c: the keep decision for flat element index i.
static inline int keep_elem(uint64_t seed, int64_t i, float keep) {
    return trn__rng_keep(trn__rng_hash(seed, (uint64_t)i), keep);
}

// Masks a transposed score tile st[j * BQ + i] (key j0 + j, query row i0 + i)
// with the mask and causal rule: a bool mask's false and a causal key past
// its row become -inf, an additive mask is added.
static void mask_tile_t(const trn_attention_desc *d, float *st, int64_t ni, int64_t nj, int64_t b,
                        int64_t h, int64_t i0, int64_t j0) {
    if (d->mask && d->mask_strides[2] == 0) {
        // One value per key for every query (padding masks, [B, 1, 1, S]):
        // read once, applied along the row.
        const int64_t *ms = d->mask_strides;
        for (int64_t j = 0; j < nj; j++) {
            const int64_t at = b * ms[0] + h * ms[1] + (j0 + j) * ms[3];
            float *sr = st + j * BQ;
            if (d->mask_dtype == TRN_DTYPE_BOOL) {
                if (!((const uint8_t *)d->mask)[at])
                    for (int64_t i = 0; i < ni; i++) sr[i] = -INFINITY;
            } else {
                const float v = load_f(d->mask_dtype, d->mask, at);
                for (int64_t i = 0; i < ni; i++) sr[i] += v;
            }
        }
    } else if (d->mask) {
        const int64_t *ms = d->mask_strides;
        for (int64_t j = 0; j < nj; j++) {
            const int64_t base = b * ms[0] + h * ms[1] + i0 * ms[2] + (j0 + j) * ms[3];
            float *sr = st + j * BQ;
            if (d->mask_dtype == TRN_DTYPE_BOOL) {
                const uint8_t *m = (const uint8_t *)d->mask + base;
                for (int64_t i = 0; i < ni; i++)
                    if (!m[i * ms[2]]) sr[i] = -INFINITY;
            } else {
                for (int64_t i = 0; i < ni; i++)
                    sr[i] += load_f(d->mask_dtype, d->mask, base + i * ms[2]);
            }
        }
    }
    if (d->causal)
        for (int64_t j = 0; j < nj; j++) {
            // Rows i0 + i < j0 + j must not see key j0 + j.
            const int64_t stop = min64(ni, j0 + j - i0);
            for (int64_t i = 0; i < stop; i++) st[j * BQ + i] = -INFINITY;
        }
}

// Causal tiles skip work on masked entries (trn_tile_band). With
// dlt = i0 - j0, query i0 + i sees key j0 + j iff j <= i + dlt. Products:
// 0: S^T or dP^T (rows: keys, columns: queries) - columns i >= j - dlt;
// 1: dK / dV (rows: keys, terms: queries) - terms i >= j - dlt;
// 2: O / dQ (rows: queries, terms: keys) - terms j <= i + dlt.
static trn_tile_band causal_band(const trn_attention_desc *d, int64_t dlt, int product) {
    trn_tile_band bd = {-TRN_TILE_UNBOUNDED, TRN_TILE_UNBOUNDED, -TRN_TILE_UNBOUNDED};
    if (!d->causal) return bd;
    if (product == 0)
        bd.clo = -dlt;
    else if (product == 1)
        bd.plo = -dlt;
    else
        bd.phi = dlt;
    return bd;
}

// Loads rows [r0, r0 + n) of (b, head) of a [B, H, rows, dim] operand into
// dst[r * dim + e] (float).
static void load_rows(trn_dtype t, const void *p, const int64_t *st, int64_t b, int64_t head,
                      int64_t r0, int64_t n, int64_t dim, float *dst) {
    for (int64_t r = 0; r < n; r++)
        trn__load_row_f32(t, p, b * st[0] + head * st[1] + (r0 + r) * st[2], dim, 1.0f,
                          dst + r * dim);
}

// Rows [r0, r0 + n) of (b, head) as float32 rows, *ld apart: a float32
// operand is read in place (its rows are contiguous), others are converted
// into scratch (rows dim apart). The tile products take any row stride, so
// float32 inputs are never copied.
static const float *rows_f32(trn_dtype t, const void *p, const int64_t *st, int64_t b, int64_t head,
                             int64_t r0, int64_t n, int64_t dim, float *scratch, int64_t *ld) {
    if (t == TRN_DTYPE_F32) {
        *ld = st[2];
        return (const float *)p + b * st[0] + head * st[1] + r0 * st[2];
    }
    load_rows(t, p, st, b, head, r0, n, dim, scratch);
    *ld = dim;
    return scratch;
}

// dst[e * BQ + r] = src[r * ld + e] * mul (r < n, e < dim): a query or
// output-gradient block turned into the columns the tile products read.
// 8 x 8 blocks go through registers (one element at a time this was a
// strided store per element); each element is multiplied once, as before.
static void transpose_mul(const float *src, int64_t ld, int64_t n, int64_t dim, float mul,
                          float *dst) {
    int64_t r = 0;
#if defined(__AVX2__)
    const __m256 m = _mm256_set1_ps(mul);
    for (; r + 8 <= n; r += 8) {
        const float *s = src + r * ld;
        int64_t e = 0;
        for (; e + 8 <= dim; e += 8) {
            __m256 x[8], t[8], u[8];
            for (int k = 0; k < 8; k++) x[k] = _mm256_loadu_ps(s + k * ld + e);
            for (int k = 0; k < 8; k += 2) {
                t[k] = _mm256_unpacklo_ps(x[k], x[k + 1]);
                t[k + 1] = _mm256_unpackhi_ps(x[k], x[k + 1]);
            }
            for (int k = 0; k < 8; k += 4) {
                u[k] = _mm256_shuffle_ps(t[k], t[k + 2], 0x44);
                u[k + 1] = _mm256_shuffle_ps(t[k], t[k + 2], 0xEE);
                u[k + 2] = _mm256_shuffle_ps(t[k + 1], t[k + 3], 0x44);
                u[k + 3] = _mm256_shuffle_ps(t[k + 1], t[k + 3], 0xEE);
            }
            // u[c] (c < 4) holds column c of rows 0-3 and column c + 4 of
            // rows 0-3 in its halves; u[c + 4] the same for rows 4-7.
            for (int c = 0; c < 4; c++) {
                const __m256 lo = _mm256_permute2f128_ps(u[c], u[c + 4], 0x20);
                const __m256 hi = _mm256_permute2f128_ps(u[c], u[c + 4], 0x31);
                _mm256_storeu_ps(dst + (e + c) * BQ + r, _mm256_mul_ps(lo, m));
                _mm256_storeu_ps(dst + (e + c + 4) * BQ + r, _mm256_mul_ps(hi, m));
            }
        }
        for (; e < dim; e++)
            for (int64_t k = 0; k < 8; k++) dst[e * BQ + r + k] = s[k * ld + e] * mul;
    }
#endif
    for (; r < n; r++)
        for (int64_t e = 0; e < dim; e++) dst[e * BQ + r] = src[r * ld + e] * mul;
}

// ---- forward --------------------------------------------------------------------
// Scores are computed transposed, S^T = K . (scale Q)^T, so that the key
// tile is used as stored (rows) and only the query block, loaded once per
// unit, is transposed; the softmax statistics then run along rows of S^T
// (vectorized over the block's queries) and O += P . V reads P^T with
// swapped strides.
typedef struct fwd_scratch {
    float *qt, *q, *k, *v, *st, *o, *pv, *m, *l, *msub, *alpha, *sum;
} fwd_scratch;

static void fwd_unit(const trn_attention_desc *d, const fwd_scratch *w, int64_t unit) {
    const int64_t E = d->head_dim, Ev = d->v_dim, L = d->q_len, S = d->kv_len;
    const int64_t nqb = (L + BQ - 1) / BQ;
    const int64_t bh = unit / nqb, i0 = (unit % nqb) * BQ;
    const int64_t b = bh / d->heads, h = bh % d->heads;
    const int64_t hk = h / (d->heads / d->kv_heads);
    const int64_t ni = min64(BQ, L - i0);
    const float keep = (float)(1.0 - d->dropout_p);
    const float rkeep = keep > 0.0f ? 1.0f / keep : 0.0f;
    int64_t ldq, ldk, ldv;
    const float *qp = rows_f32(d->dtype, d->q, d->q_strides, b, h, i0, ni, E, w->q, &ldq);
    transpose_mul(qp, ldq, ni, E, (float)d->scale, w->qt);
    for (int64_t i = 0; i < ni; i++) {
        w->m[i] = -INFINITY;
        w->l[i] = 0.0f;
    }
    for (int64_t e = 0; e < ni * Ev; e++) w->o[e] = 0.0f;
    const int64_t jend = d->causal ? min64(S, i0 + ni) : S;
    for (int64_t j0 = 0; j0 < jend; j0 += BK) {
        const int64_t nj = min64(BK, jend - j0);
        const float *kp = rows_f32(d->dtype, d->k, d->k_strides, b, hk, j0, nj, E, w->k, &ldk);
        const float *vp = rows_f32(d->dtype, d->v, d->v_strides, b, hk, j0, nj, Ev, w->v, &ldv);
        float *st = w->st;
        const trn_tile_band sband = causal_band(d, i0 - j0, 0), oband = causal_band(d, i0 - j0, 2);
        trn__attn_mm_band(nj, ni, E, kp, ldk, 1, w->qt, BQ, st, BQ, 0, sband);
        mask_tile_t(d, st, ni, nj, b, h, i0, j0);
        // o is zero before the first key tile (filled above).
        trn__online_softmax_step_z(
            (trn__online_softmax){w->m, w->l, w->o, w->msub, w->alpha, w->sum}, st, BQ, ni, nj, Ev,
            j0 == 0);
        if (d->dropout_p > 0.0)
            for (int64_t j = 0; j < nj; j++)
                for (int64_t i = 0; i < ni; i++) {
                    const int64_t flat = ((b * d->heads + h) * L + i0 + i) * S + j0 + j;
                    float *p = st + j * BQ + i;
                    *p = keep_elem(d->seed, flat, keep) ? *p * rkeep : 0.0f;
                }
        // The first tile's chain starts on O's zeros: the same sums as from zero.
        trn__attn_mm_band(ni, Ev, nj, st, 1, BQ, vp, ldv, j0 == 0 ? w->o : w->pv, Ev, 0, oband);
        if (j0 > 0) trn__attn_add_tile(w->o, Ev, w->pv, ni, Ev);
        if (d->probs) {
            // One key tile (probs_kept): st is exp(s - m) over the final
            // maxima and l its final sums, so P^T = st / l, kept for the
            // backward in its tile layout.
            float *pk = d->probs + unit * (int64_t)(BK * BQ);
            for (int64_t i = 0; i < ni; i++) w->alpha[i] = w->l[i] > 0.0f ? 1.0f / w->l[i] : 0.0f;
            for (int64_t j = 0; j < nj; j++)
                for (int64_t i = 0; i < ni; i++) pk[j * BQ + i] = st[j * BQ + i] * w->alpha[i];
        }
    }
    for (int64_t i = 0; i < ni; i++) {
        const float l = w->l[i];
        const float inv = l > 0.0f ? 1.0f / l : 0.0f;
        trn__store_row_f32(d->dtype, d->out,
                           b * d->out_strides[0] + h * d->out_strides[1] +
                               (i0 + i) * d->out_strides[2],
                           Ev, w->o + i * Ev, inv);
        if (d->lse)
            d->lse[(b * d->heads + h) * L + i0 + i] = l > 0.0f ? w->m[i] + logf(l) : -INFINITY;
    }
}

static void fwd_piece(void *ctx, int64_t u0, int64_t u1) {
    attn_run *run = ctx;
    const trn_attention_desc *d = &run->a->d.fwd;
    const int64_t E = d->head_dim, Ev = d->v_dim;
    const size_t floats = (size_t)(2 * E * BQ + BK * E + BK * Ev + BK * BQ + 2 * BQ * Ev + 5 * BQ);
    // Causal tiles leave masked score columns unwritten by the product
    // (mask_tile_t overwrites them before they are read).
    int owned;
    float *buf = piece_scratch(&run->status, floats, &owned);
    if (buf == NULL) return;  // the task reports it
    fwd_scratch w;
    w.qt = buf;
    w.q = w.qt + E * BQ;
    w.k = w.q + BQ * E;
    w.v = w.k + BK * E;
    w.st = w.v + BK * Ev;
    w.o = w.st + BK * BQ;
    w.pv = w.o + BQ * Ev;
    w.m = w.pv + BQ * Ev;
    w.l = w.m + BQ;
    w.msub = w.l + BQ;
    w.alpha = w.msub + BQ;
    w.sum = w.alpha + BQ;
    for (int64_t u = u0; u < u1; u++) fwd_unit(d, &w, u);
    if (owned) free(buf);
}

// ---- backward -------------------------------------------------------------------
// Per key tile of a query block, all products run on tiles (trn_tile_mm),
// in the transposed layout of the forward:
//   S^T = K . (scale Q)^T,  P^T = exp(S^T - lse),  dP^T = V . dO^T,
//   dS^T = P^T * (dP^T - D),  dV += P^T . dO,  dK += scale dS^T . Q,
//   dQ += scale dS . K   (dS read from dS^T with swapped strides).
// Q and dO are transposed once per query block; key and value tiles are
// used as stored.
// rows [0, n) of (b, h) from float32 src (n x width) into dst (NULL: not
// wanted); one call when the rows are back to back.
static void store_rows(trn_dtype dt, void *dst, const int64_t st[3], int64_t b, int64_t h,
                       int64_t n, int64_t width, const float *src) {
    if (dst == NULL) return;
    const int64_t base = b * st[0] + h * st[1];
    if (st[2] == width) {
        trn__store_row_f32(dt, dst, base, n * width, src, 1.0f);
        return;
    }
    for (int64_t j = 0; j < n; j++)
        trn__store_row_f32(dt, dst, base + j * st[2], width, src + j * width, 1.0f);
}

typedef struct bwd_scratch {
    float *qt, *q, *dout, *dot, *o, *ot, *dd, *lsub, *dq, *k, *v, *pt, *dst, *dk, *dv, *row;
    float *dk1, *dv1;  // level-1 sums per key tile (KV_GROUP query blocks)
    float *t[CHAINS];  // kv_product's chains
    uint32_t *blocks;  // per key tile: query blocks added so far
} bwd_scratch;

// Where a gradient accumulates: a float32 gradient in its own storage (the
// products write it directly; no zero fill and no copy at the end), other
// dtypes (or a gradient not wanted) in float32 scratch rows `width` apart.
static float *grad_rows(const trn_attention_desc *d, void *grad, const int64_t st[3], int64_t b,
                        int64_t h, int64_t r0, int64_t width, float *scratch, int64_t *ld) {
    if (grad != NULL && d->dtype == TRN_DTYPE_F32) {
        *ld = st[2];
        return (float *)grad + b * st[0] + h * st[1] + r0 * st[2];
    }
    *ld = width;
    return scratch;
}

static void zero_rows(float *p, int64_t ld, int64_t n, int64_t width) {
    for (int64_t r = 0; r < n; r++) memset(p + r * ld, 0, (size_t)width * sizeof(float));
}

// grad rows [0, n) (+)= the level-1 sums `l1` (row stride `width`): the
// first fold into a key tile overwrites, later ones add.
static void fold_tile(float *grad, int64_t ld, const float *l1, int64_t n, int64_t width, int add) {
    for (int64_t r = 0; r < n; r++) {
        float *g = grad + r * ld;
        const float *x = l1 + r * width;
        if (add)
            for (int64_t e = 0; e < width; e++) g[e] += x[e];
        else
            memcpy(g, x, (size_t)width * sizeof(float));
    }
}

// dK / dV tile (+)= A . B summed over the block's query rows (terms; A is
// dS^T or P^T, terms contiguous in its rows). One fused multiply-add chain
// over 64 rows, on top of earlier blocks and heads, left the key gradients
// up to 1.3x (rms) / 2.2x (max) CPU's error vs float64: the terms go in
// chains of CHAIN rows, each from zero, added pairwise into the tile.
static void kv_product(const trn_attention_desc *d, int64_t dlt, int64_t m, int64_t n, int64_t k,
                       const float *a, const float *b, int64_t ldb, float *c, int64_t ldc,
                       int accumulate, float *const t[CHAINS]) {
    if (k <= CHAIN) {
        trn__attn_mm_band(m, n, k, a, BQ, 1, b, ldb, c, ldc, accumulate, causal_band(d, dlt, 1));
        return;
    }
    const int64_t nc = (k + CHAIN - 1) / CHAIN;
    if (trn__attn_mm_ep_ok(n)) {
        // The pairwise sum below, bit for bit, in the products' stores: the
        // chain tiles stay in L1 and no pass reads them back (the pass was
        // a quarter of kv_product's time once the products ran on AVX-512;
        // the wiring: trn__attn_chain_dst).
        for (int64_t q = 0; q < nc; q++) {
            const int64_t p0 = q * CHAIN, kk = min64(CHAIN, k - p0);
            trn__attn_mm_ep ep;
            int64_t ldd;
            float *dst = trn__attn_chain_dst(q, nc, t, n, c, ldc, accumulate, &ep, &ldd);
            trn__attn_mm_ep_band(m, n, kk, a + p0, BQ, 1, b + p0 * ldb, ldb, dst, ldd,
                                 causal_band(d, dlt + p0, 1), &ep);
        }
        return;
    }
    for (int64_t q = 0; q < nc; q++) {
        const int64_t p0 = q * CHAIN, kk = min64(CHAIN, k - p0);
        trn__attn_mm_band(m, n, kk, a + p0, BQ, 1, b + p0 * ldb, ldb, t[q], n, 0,
                          causal_band(d, dlt + p0, 1));
    }
    for (int64_t r = 0; r < m; r++) {
        float *cr = c + r * ldc;
        const float *x0 = t[0] + r * n, *x1 = t[1] + r * n, *x2 = t[2] + r * n, *x3 = t[3] + r * n;
        float *s = t[0] + r * n;  // the pairwise sum, in place of chain 0
        if (nc == 2)
            for (int64_t e = 0; e < n; e++) s[e] = x0[e] + x1[e];
        else if (nc == 3)
            for (int64_t e = 0; e < n; e++) s[e] = (x0[e] + x1[e]) + x2[e];
        else
            for (int64_t e = 0; e < n; e++) s[e] = (x0[e] + x1[e]) + (x2[e] + x3[e]);
        if (accumulate)
            for (int64_t e = 0; e < n; e++) cr[e] += s[e];
        else
            for (int64_t e = 0; e < n; e++) cr[e] = s[e];
    }
}

// D_i += sum_j P_ij dP_ij over one tile (transposed: key j, query i at
// [j * BQ + i]); masked entries (P = 0) are skipped. The row sums run side
// by side in vectors, each in order over j. `restrict`: with the scratch
// pointers read through the scratch struct GCC left this loop and ds_row
// scalar (a quarter of the backward's own time).
static void d_from_tile(const float *restrict pt, const float *restrict dpt, float *restrict dd,
                        int64_t ni, int64_t nj) {
    for (int64_t j = 0; j < nj; j++)
        for (int64_t i = 0; i < ni; i++) {
            const float p = pt[j * BQ + i];
            dd[i] += p == 0.0f ? 0.0f : p * dpt[j * BQ + i];
        }
}

// One key's row of dS^T = P^T * (dP^T - D), times post; masked entries
// (P = 0) give 0 whatever dP is.
static void ds_row(const float *restrict pr, float *restrict dr, const float *restrict dd,
                   int64_t ni, float post) {
    for (int64_t i = 0; i < ni; i++) {
        const float p = pr[i];
        dr[i] = (p == 0.0f ? 0.0f : p * (dr[i] - dd[i])) * post;
    }
}

static void bwd_unit(const trn_attention_backward_desc *bd, const bwd_scratch *w, int64_t unit) {
    const trn_attention_desc *d = &bd->fwd;
    const int64_t E = d->head_dim, Ev = d->v_dim, L = d->q_len, S = d->kv_len;
    const int64_t group = d->heads / d->kv_heads;
    const int64_t b = unit / d->kv_heads, hk = unit % d->kv_heads;
    const float scale = (float)d->scale;
    const float keep = (float)(1.0 - d->dropout_p);
    const float rkeep = keep > 0.0f ? 1.0f / keep : 0.0f;
    const int dropout = d->dropout_p > 0.0;
    int64_t lddk, lddv, lddq, ldq, lddo, ldo, ldk, ldv;
    // The first product into a key tile's level-1 dk / dv overwrites
    // (accumulate 0), later ones add: the same sums, in the same order, as
    // adding to zeros; every KV_GROUP blocks the level-1 tile goes into
    // dkp / dvp (fold_tile), and at the end what is left of a group.
    float *const dkp = grad_rows(d, bd->dk, bd->dk_strides, b, hk, 0, E, w->dk, &lddk);
    float *const dvp = grad_rows(d, bd->dv, bd->dv_strides, b, hk, 0, Ev, w->dv, &lddv);
    memset(w->blocks, 0, (size_t)((S + BK - 1) / BK) * sizeof(uint32_t));
    for (int64_t h = hk * group; h < (hk + 1) * group; h++) {
        for (int64_t i0 = 0; i0 < L; i0 += BQ) {
            const int64_t ni = min64(BQ, L - i0);
            const float *qp = rows_f32(d->dtype, d->q, d->q_strides, b, h, i0, ni, E, w->q, &ldq);
            // Kept probabilities: the block's P^T tile as the forward wrote
            // it; the scores (and so the transposed query block) not needed.
            const float *kept =
                d->probs ? d->probs + ((b * d->heads + h) * ((L + BQ - 1) / BQ) + i0 / BQ) *
                                          (int64_t)(BK * BQ)
                         : NULL;
            if (!kept) transpose_mul(qp, ldq, ni, E, scale, w->qt);
            const float *dop =
                rows_f32(d->dtype, bd->dout, bd->dout_strides, b, h, i0, ni, Ev, w->dout, &lddo);
            transpose_mul(dop, lddo, ni, Ev, 1.0f, w->dot);
            // D_i = dout_i . out_i, each row's sum in order over e as a
            // row-at-a-time dot product would add it, but over the
            // transposed blocks: rows side by side in vectors instead of
            // one serial chain of adds per row.
            // With kept probabilities D_i = sum_j P_ij dP_ij instead (below,
            // from the tile): the output is then not read at all.
            for (int64_t i = 0; i < ni; i++) w->dd[i] = 0.0f;
            if (!kept) {
                const float *op =
                    rows_f32(d->dtype, d->out, d->out_strides, b, h, i0, ni, Ev, w->o, &ldo);
                transpose_mul(op, ldo, ni, Ev, 1.0f, w->ot);
                for (int64_t e = 0; e < Ev; e++) {
                    const float *dc = w->dot + e * BQ, *oc = w->ot + e * BQ;
                    for (int64_t i = 0; i < ni; i++) w->dd[i] += dc[i] * oc[i];
                }
            }
            for (int64_t i = 0; i < ni; i++) {
                // A row with no visible key (lse -inf) has P = 0:
                // exp(s - inf) = 0 for every score, where s - (-inf) would not be.
                const float lse = d->lse[(b * d->heads + h) * L + i0 + i];
                w->lsub[i] = lse == -INFINITY ? INFINITY : lse;
            }
            float *const dqp = grad_rows(d, bd->dq, bd->dq_strides, b, h, i0, E, w->dq, &lddq);
            const int64_t jend = d->causal ? min64(S, i0 + ni) : S;
            if (jend <= 0) zero_rows(dqp, lddq, ni, E);
            for (int64_t j0 = 0; j0 < jend; j0 += BK) {
                const int64_t nj = min64(BK, jend - j0);
                const float *kp =
                    rows_f32(d->dtype, d->k, d->k_strides, b, hk, j0, nj, E, w->k, &ldk);
                const float *vp =
                    rows_f32(d->dtype, d->v, d->v_strides, b, hk, j0, nj, Ev, w->v, &ldv);
                float *pt = w->pt, *dst = w->dst;
                const trn_tile_band sband = causal_band(d, i0 - j0, 0);
                const trn_tile_band qband = causal_band(d, i0 - j0, 2);
                if (kept) {
                    pt = (float *)kept;  // read only below (no dropout here)
                } else {
                    trn__attn_mm_band(nj, ni, E, kp, ldk, 1, w->qt, BQ, pt, BQ, 0, sband);
                    mask_tile_t(d, pt, ni, nj, b, h, i0, j0);
                    for (int64_t j = 0; j < nj; j++)
                        for (int64_t i = 0; i < ni; i++)
                            pt[j * BQ + i] = trn_sc_exp_nonpos_nan_f(pt[j * BQ + i] - w->lsub[i]);
                }
                trn__attn_mm_band(nj, ni, Ev, vp, ldv, 1, w->dot, BQ, dst, BQ, 0, sband);
                if (kept)  // the block's only key tile
                    d_from_tile(pt, dst, w->dd, ni, nj);
                // dS^T; scaled by `scale` for dK and dQ in the same pass
                // unless the mask gradient (unscaled dS) is wanted first.
                const float post = bd->dmask ? 1.0f : scale;
                for (int64_t j = 0; j < nj; j++) {
                    float *pr = pt + j * BQ, *dr = dst + j * BQ;
                    if (dropout) {
                        for (int64_t i = 0; i < ni; i++) {
                            const int64_t flat = ((b * d->heads + h) * L + i0 + i) * S + j0 + j;
                            const float z = keep_elem(d->seed, flat, keep) ? rkeep : 0.0f;
                            const float p = pr[i];
                            dr[i] = (p == 0.0f ? 0.0f : p * (dr[i] * z - w->dd[i])) * post;
                            pr[i] = p * z;
                        }
                    } else {
                        ds_row(pr, dr, w->dd, ni, post);
                    }
                }
                if (bd->dmask) {
                    for (int64_t i = 0; i < ni; i++) {
                        for (int64_t j = 0; j < nj; j++) w->row[j] = dst[j * BQ + i];
                        trn__store_row_f32(d->dtype, bd->dmask,
                                           ((b * d->heads + h) * L + i0 + i) * S + j0, nj, w->row,
                                           1.0f);
                    }
                    for (int64_t j = 0; j < nj; j++)
                        for (int64_t i = 0; i < ni; i++) dst[j * BQ + i] *= scale;
                }
                const uint32_t nb = w->blocks[j0 / BK]++;
                const int more = nb % KV_GROUP != 0;
                float *const dv1 = w->dv1 + j0 * Ev, *const dk1 = w->dk1 + j0 * E;
                kv_product(d, i0 - j0, nj, Ev, ni, pt, dop, lddo, dv1, Ev, more, w->t);
                kv_product(d, i0 - j0, nj, E, ni, dst, qp, ldq, dk1, E, more, w->t);
                // dQ per key tile as O in the forward (trn__attn_add_tile); kv_product
                // is done with its chains, so t[0] holds the tile's sum.
                trn__attn_mm_band(ni, E, nj, dst, 1, BQ, kp, ldk, j0 == 0 ? dqp : w->t[0],
                                  j0 == 0 ? lddq : E, 0, qband);
                if (j0 > 0) trn__attn_add_tile(dqp, lddq, w->t[0], ni, E);
                // A causal block's first tile may stop short of the tile's
                // keys; later blocks (larger jend) add to those rows too.
                const int64_t tile_rows = min64(BK, S - j0);
                if (!more && nj < tile_rows) {
                    zero_rows(dv1 + nj * Ev, Ev, tile_rows - nj, Ev);
                    zero_rows(dk1 + nj * E, E, tile_rows - nj, E);
                }
                if (nb % KV_GROUP == KV_GROUP - 1) {
                    fold_tile(dvp + j0 * lddv, lddv, dv1, tile_rows, Ev, nb >= KV_GROUP);
                    fold_tile(dkp + j0 * lddk, lddk, dk1, tile_rows, E, nb >= KV_GROUP);
                }
            }
            // Keys a causal row never reaches: their bias gradient is 0.
            if (bd->dmask && jend < S) {
                const size_t es = trn_dtype_size(d->dtype);
                for (int64_t i = 0; i < ni; i++)
                    memset((char *)bd->dmask +
                               ((((b * d->heads + h) * L + i0 + i) * S + jend) * (int64_t)es),
                           0, (size_t)(S - jend) * es);
            }
            if (bd->dq && dqp == w->dq)
                for (int64_t i = 0; i < ni; i++)
                    trn__store_row_f32(d->dtype, bd->dq,
                                       b * bd->dq_strides[0] + h * bd->dq_strides[1] +
                                           (i0 + i) * bd->dq_strides[2],
                                       E, w->dq + i * E, 1.0f);
        }
    }
    // A group's last partial level-1 sums; key tiles no query reached
    // (causal rows shorter than the keys, or no query rows at all): zero
    // gradients.
    for (int64_t j0 = 0; j0 < S; j0 += BK) {
        const int64_t nj = min64(BK, S - j0);
        const uint32_t nb = w->blocks[j0 / BK];
        if (nb == 0) {
            zero_rows(dkp + j0 * lddk, lddk, nj, E);
            zero_rows(dvp + j0 * lddv, lddv, nj, Ev);
        } else if (nb % KV_GROUP != 0) {
            fold_tile(dvp + j0 * lddv, lddv, w->dv1 + j0 * Ev, nj, Ev, nb > KV_GROUP);
            fold_tile(dkp + j0 * lddk, lddk, w->dk1 + j0 * E, nj, E, nb > KV_GROUP);
        }
    }
    if (dkp == w->dk) store_rows(d->dtype, bd->dk, bd->dk_strides, b, hk, S, E, w->dk);
    if (dvp == w->dv) store_rows(d->dtype, bd->dv, bd->dv_strides, b, hk, S, Ev, w->dv);
}

static void bwd_piece(void *ctx, int64_t u0, int64_t u1) {
    attn_run *run = ctx;
    const trn_attention_backward_desc *bd = &run->a->d;
    const trn_attention_desc *d = &bd->fwd;
    const int64_t E = d->head_dim, Ev = d->v_dim, S = d->kv_len;
    const int64_t wide = E > Ev ? E : Ev;
    const int64_t row = wide > BK ? wide : BK;
    const size_t floats =
        (size_t)(2 * E * BQ + 4 * BQ * Ev + 2 * BQ + BQ * E + BK * E + BK * Ev + 2 * BK * BQ +
                 2 * (S * E + S * Ev) + row + CHAINS * BK * wide + (S + BK - 1) / BK);
    int owned;
    float *buf = piece_scratch(&run->status, floats, &owned);
    if (buf == NULL) return;  // the task reports it
    bwd_scratch w;
    w.qt = buf;
    w.q = w.qt + E * BQ;
    w.dout = w.q + BQ * E;
    w.dot = w.dout + BQ * Ev;
    w.o = w.dot + Ev * BQ;
    w.ot = w.o + BQ * Ev;
    w.dd = w.ot + Ev * BQ;
    w.lsub = w.dd + BQ;
    w.dq = w.lsub + BQ;
    w.k = w.dq + BQ * E;
    w.v = w.k + BK * E;
    w.pt = w.v + BK * Ev;
    w.dst = w.pt + BK * BQ;
    w.dk = w.dst + BK * BQ;
    w.dv = w.dk + S * E;
    w.dk1 = w.dv + S * Ev;
    w.dv1 = w.dk1 + S * E;
    w.row = w.dv1 + S * Ev;
    for (int c = 0; c < CHAINS; c++) w.t[c] = w.row + row + c * BK * wide;
    w.blocks = (uint32_t *)(w.row + row + CHAINS * BK * wide);
    for (int64_t u = u0; u < u1; u++) bwd_unit(bd, &w, u);
    if (owned) free(buf);
}

// ---- launch ---------------------------------------------------------------------
int trn_attention_supports(trn_dtype dtype, int has_mask, trn_dtype mask_dtype) {
    const int ok = dtype == TRN_DTYPE_F32 || dtype == TRN_DTYPE_F16 || dtype == TRN_DTYPE_BF16;
    if (!ok || !has_mask) return ok;
    return mask_dtype == TRN_DTYPE_BOOL || mask_dtype == TRN_DTYPE_F32 ||
           mask_dtype == TRN_DTYPE_F16 || mask_dtype == TRN_DTYPE_BF16;
}

static void add_operands(trn__access_set *rg, const trn_attention_desc *d) {
    const size_t es = trn_dtype_size(d->dtype);
    const int64_t qn[4] = {d->batch, d->heads, d->q_len, d->head_dim};
    const int64_t kn[4] = {d->batch, d->kv_heads, d->kv_len, d->head_dim};
    const int64_t vn[4] = {d->batch, d->kv_heads, d->kv_len, d->v_dim};
    const int64_t on[4] = {d->batch, d->heads, d->q_len, d->v_dim};
    const int64_t mn[4] = {d->batch, d->heads, d->q_len, d->kv_len};
    const int64_t qs[4] = {d->q_strides[0], d->q_strides[1], d->q_strides[2], 1};
    const int64_t ks[4] = {d->k_strides[0], d->k_strides[1], d->k_strides[2], 1};
    const int64_t vs[4] = {d->v_strides[0], d->v_strides[1], d->v_strides[2], 1};
    const int64_t os[4] = {d->out_strides[0], d->out_strides[1], d->out_strides[2], 1};
    trn__access_add(rg, d->q, trn__span4_bytes(qn, qs, es));
    trn__access_add(rg, d->k, trn__span4_bytes(kn, ks, es));
    trn__access_add(rg, d->v, trn__span4_bytes(vn, vs, es));
    trn__access_add(rg, d->out, trn__span4_bytes(on, os, es));
    if (d->mask)
        trn__access_add(rg, d->mask,
                        trn__span4_bytes(mn, d->mask_strides, trn_dtype_size(d->mask_dtype)));
    trn__access_add(rg, d->lse, (size_t)(d->batch * d->heads * d->q_len) * sizeof(float));
    if (d->probs)
        trn__access_add(rg, d->probs, (size_t)trn_attention_probs_floats(d) * sizeof(float));
}

int64_t trn_attention_probs_floats(const trn_attention_desc *d) {
    if (d == NULL || d->kv_len > BK || d->dropout_p > 0.0) return 0;
    return d->batch * d->heads * ((d->q_len + BQ - 1) / BQ) * (int64_t)(BK * BQ);
}

// Units per pool piece. A decode step's attention (one query row per head,
// a short cache) is a few thousand multiply-adds per unit: split over the
// pool, the hand-off cost more than the work (1 x 4 heads x 20 keys x 64:
// 7.3 us inline, 20 us over two threads at load 6). A piece gets at least
// ATTN_PIECE_MACS; the split never changes what a unit computes.
#define ATTN_PIECE_MACS ((int64_t)1 << 17)

static int64_t fwd_grain(const trn_attention_desc *d) {
    const int64_t rows = d->q_len < BQ ? d->q_len : BQ;
    const int64_t macs = rows * d->kv_len * (d->head_dim + d->v_dim);
    return macs >= ATTN_PIECE_MACS ? 1 : (ATTN_PIECE_MACS + macs - 1) / (macs > 0 ? macs : 1);
}

static trn_status attn_task(void *args) {
    attn_args *a = args;
    const trn_attention_desc *d = &a->d.fwd;
    trn__access_set rg = {.count = 0};
    add_operands(&rg, d);
    if (a->backward) {
        const trn_attention_backward_desc *bd = &a->d;
        const size_t es = trn_dtype_size(d->dtype);
        const int64_t on[4] = {d->batch, d->heads, d->q_len, d->v_dim};
        const int64_t gs[4] = {bd->dout_strides[0], bd->dout_strides[1], bd->dout_strides[2], 1};
        trn__access_add(&rg, bd->dout, trn__span4_bytes(on, gs, es));
        const int64_t kn[4] = {d->batch, d->kv_heads, d->kv_len, d->head_dim};
        const int64_t vn[4] = {d->batch, d->kv_heads, d->kv_len, d->v_dim};
        const int64_t qn[4] = {d->batch, d->heads, d->q_len, d->head_dim};
        const int64_t qs[4] = {bd->dq_strides[0], bd->dq_strides[1], bd->dq_strides[2], 1};
        const int64_t ks[4] = {bd->dk_strides[0], bd->dk_strides[1], bd->dk_strides[2], 1};
        const int64_t vs[4] = {bd->dv_strides[0], bd->dv_strides[1], bd->dv_strides[2], 1};
        trn__access_add(&rg, bd->dq, trn__span4_bytes(qn, qs, es));
        trn__access_add(&rg, bd->dk, trn__span4_bytes(kn, ks, es));
        trn__access_add(&rg, bd->dv, trn__span4_bytes(vn, vs, es));
        trn__access_add(&rg, bd->dmask, (size_t)(d->batch * d->heads * d->q_len * d->kv_len) * es);
    }
    trn_status st = trn__access_begin(&rg);
    if (st == TRN_SUCCESS) {
        // Each piece allocates its own scratch and reports a failure in
        // run.status (no probe up front: it could pass and a piece still
        // fail, and it cost a malloc + free of the largest scratch a call).
        attn_run run;
        run.a = a;
        trn__piece_status_init(&run.status);
        if (!a->backward) {
            const int64_t units = d->batch * d->heads * ((d->q_len + BQ - 1) / BQ);
            trn_parallel_for(units, fwd_grain(d), fwd_piece, &run);
        } else {
            trn_parallel_for(d->batch * d->kv_heads, 1, bwd_piece, &run);
        }
        st = trn__piece_status_raise(&run.status, a->backward ? "attention backward" : "attention");
    }
    trn__access_end(&rg);
    return st;
}

static trn_status check_fwd(const trn_attention_desc *d, const char *fn) {
    if (!trn_attention_supports(d->dtype, d->mask != NULL, d->mask_dtype))
        return trn__set_error(TRN_ERROR_UNSUPPORTED, "%s: dtype %s (mask %s) is not supported", fn,
                              trn_dtype_name(d->dtype),
                              d->mask ? trn_dtype_name(d->mask_dtype) : "none");
    if (d->batch < 0 || d->heads < 0 || d->kv_heads < 0 || d->q_len < 0 || d->kv_len < 0 ||
        d->head_dim < 0 || d->v_dim < 0)
        return trn__set_error(TRN_ERROR_INVALID_ARGUMENT, "%s: negative size", fn);
    if (d->kv_heads == 0 ? d->heads != 0 : d->heads % d->kv_heads != 0)
        return trn__set_error(TRN_ERROR_INVALID_ARGUMENT,
                              "%s: %lld query heads are not a multiple of %lld key/value heads", fn,
                              (long long)d->heads, (long long)d->kv_heads);
    if (!(d->dropout_p >= 0.0 && d->dropout_p <= 1.0))
        return trn__set_error(TRN_ERROR_INVALID_ARGUMENT, "%s: dropout_p %g not in [0, 1]", fn,
                              d->dropout_p);
    const int64_t work = d->batch * d->heads * d->q_len;
    if (work > 0 &&
        (d->q == NULL || d->out == NULL || (d->kv_len > 0 && (d->k == NULL || d->v == NULL))))
        return trn__set_error(TRN_ERROR_INVALID_ARGUMENT, "%s: an operand pointer is NULL", fn);
    return trn__fork_check();
}

trn_status trn_attention_launch(trn_stream *stream, const trn_attention_desc *desc) {
    if (stream == NULL || desc == NULL)
        return trn__check_launch(stream, desc, "trn_attention_launch");
    trn_status st = check_fwd(desc, "trn_attention_launch");
    if (st != TRN_SUCCESS) return st;
    if (desc->batch * desc->heads * desc->q_len == 0) return TRN_SUCCESS;
    attn_args a;
    memset(&a, 0, sizeof a);
    a.d.fwd = *desc;
    if (trn_attention_probs_floats(desc) == 0) a.d.fwd.probs = NULL;
    return trn_stream_launch(stream, attn_task, &a, sizeof a);
}

// Gradient strides left all zero: [batch, heads, rows, width] contiguous.
static void contiguous_if_unset(int64_t st[3], int64_t heads, int64_t rows, int64_t width) {
    if (st[0] != 0 || st[1] != 0 || st[2] != 0) return;
    st[2] = width;
    st[1] = rows * width;
    st[0] = heads * rows * width;
}

trn_status trn_attention_backward_launch(trn_stream *stream,
                                         const trn_attention_backward_desc *desc) {
    if (stream == NULL || desc == NULL)
        return trn__check_launch(stream, desc, "trn_attention_backward_launch");
    trn_status st = check_fwd(&desc->fwd, "trn_attention_backward_launch");
    if (st != TRN_SUCCESS) return st;
    const trn_attention_desc *d = &desc->fwd;
    if (d->batch * d->heads * d->q_len > 0 && (desc->dout == NULL || d->lse == NULL))
        return trn__set_error(TRN_ERROR_INVALID_ARGUMENT,
                              "trn_attention_backward_launch: dout or lse is NULL");
    if (d->batch * d->kv_heads == 0) return TRN_SUCCESS;
    attn_args a = {.d = *desc, .backward = 1};
    if (trn_attention_probs_floats(d) == 0) a.d.fwd.probs = NULL;
    contiguous_if_unset(a.d.dq_strides, d->heads, d->q_len, d->head_dim);
    contiguous_if_unset(a.d.dk_strides, d->kv_heads, d->kv_len, d->head_dim);
    contiguous_if_unset(a.d.dv_strides, d->kv_heads, d->kv_len, d->v_dim);
    return trn_stream_launch(stream, attn_task, &a, sizeof a);
}
