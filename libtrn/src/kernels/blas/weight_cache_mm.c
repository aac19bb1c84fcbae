// weight_cache_mm.c - few-row float32 and bfloat16 products by a cached
// packed weight (weight_cache.h), per CPU level.
//
// Layout (fmt 1): B (k x n) in panels of WC_PANEL columns, each panel k rows
// of WC_PANEL floats, one after the other, columns past n zero. A product
// reads the whole copy as one contiguous stream, and each element of C is
// summed exactly as matmul.c's few-row tiles sum it (blocks of WC_KB terms,
// each a fused multiply-add chain in order from zero, the block sums added
// in order to a total from zero; then alpha, then the bias): the same bits
// as without the cache, whichever way the columns are split over threads.
//
// Bfloat16 (fmt 1 too, keyed by dtype): the weight is packed as float32 (the
// conversion is exact) and the product sums as above in float32, then alpha,
// then the bias, then one rounding to bfloat16. oneDNN, which ran these, sums
// in its own order, so every few-row bfloat16 product this path takes runs it
// whether the cache has a copy or not (without one, each panel is packed as
// it is used): a cached and an uncached call give the same bits. Weights past
// WC_BF16_MAX_ELEMS stay on oneDNN, cached or not.
#include <stdlib.h>
#include <string.h>

#include "../../internal.h"
#include "trn/convert.h"
#include "trn/parallel.h"
#include "block_sum.h"
#include "t16_transpose.h"
#include "weight_cache.h"

#if defined(__AVX512F__)
#include <immintrin.h>

#define WC_FMT 1
#define WC_PANEL 64
// matmul.c's TILE_KB: the block length of every few-row float32 sum
// (tests/test_weight_cache.py checks the cached path's bits against it).
#define WC_KB 32
// Rows of A a product may have: float32 up to 8 (a batch of 8 sequences
// decoding; matmul.c's transposed-row tiles take as many, so the uncached
// path sums the same way), bfloat16 up to 4 (5-8 rows stay on oneDNN).
#define WC_ROWS TRN__WCACHE_MAX_ROWS
#define WC_BF16_ROWS 4
// Smaller weights are cheap to transpose on the fly (and stay in L1).
#define WC_MIN_ELEMS 4096
// A cached product from this many multiply-adds goes over the pool, in
// pieces of at least WC_PIECE_MACS (one 64-column panel of a 256-row
// weight, 64 KiB). A decode step's weights come from L3, where one core's
// reads are the bound: split over the two cores, a token's products took
// 0.56-0.78x the time (bench_decode_products.py, one row: Llama small's 29
// products of 128-544 x 256, 453-545 -> 307-353 us; GPT-2's 17, 522-650 ->
// 307-343), where MKL's gemv had been 1.43-1.66x ahead with its two threads.
// Until session 34 the bounds were few_bt_run's (2^19 and 2^17): every
// product of a hidden-256 model ran on one thread.
#define WC_PARALLEL_MACS ((int64_t)1 << 15)
#define WC_PIECE_MACS ((int64_t)1 << 14)
// The uncached bfloat16 path (each piece packs its own scratch panel) keeps
// few_bt_run's bound: not measured at decode sizes.
#define WC_UNCACHED_PARALLEL_MACS ((int64_t)1 << 19)
// matmul.c's TILE_MNK: row-major weights take the tiles below it.
#define WC_ROW_MAJOR_MACS ((int64_t)1 << 19)
// matmul.c's SMALL_MNK: bfloat16 products below it stay on small_bf16.
#define WC_SMALL_MACS ((int64_t)32768)
// Bfloat16 weights past this many elements stay on oneDNN: the float32 copy
// streams twice the bytes, and a product bound by streaming lost (1 x 2048
// by 2048 x 2048: 0.88-0.92 ms cached vs oneDNN's 0.55-0.59; 1 x 1024 by
// 1024 x 1024: 74-83 us vs 85-113).
#define WC_BF16_MAX_ELEMS ((int64_t)1 << 20)

static int64_t panels_of(int64_t n) { return (n + WC_PANEL - 1) / WC_PANEL; }

// Element (p, j) of the operand as float32 (exact for both dtypes).
static inline float wc_elem(const trn__wcache_key *key, int64_t p, int64_t j) {
    const int64_t i = p * key->rs + j * key->cs;
    return key->dtype == TRN_DTYPE_BF16 ? trn_bf16_to_float(((const uint16_t *)key->b)[i])
                                        : ((const float *)key->b)[i];
}

static inline __m512 wc_bf16x16(const uint16_t *src, __mmask16 m) {
    const __m512i w = _mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(m, src));
    return _mm512_castsi512_ps(_mm512_slli_epi32(w, 16));  // exact widening
}

// Bfloat16 panel q: 16 x 16 blocks widened and transposed in registers for
// nn.Linear's weight (k contiguous), rows of 64 widened for a row-major one.
static void wc_pack_panel_bf16(const trn__wcache_key *key, int64_t q, float *panel) {
    const uint16_t *B = key->b;
    const int64_t k = key->k, n = key->n, rs = key->rs, cs = key->cs;
    const int64_t j0 = q * WC_PANEL, w = n - j0 < WC_PANEL ? n - j0 : WC_PANEL;
    if (cs == 1) {
        for (int64_t p = 0; p < k; p++)
            for (int64_t v = 0; v < WC_PANEL; v += 16) {
                const int64_t left = w - v;
                const __mmask16 m =
                    left >= 16 ? 0xffff : (left > 0 ? (__mmask16)((1u << left) - 1) : 0);
                _mm512_store_ps(panel + p * WC_PANEL + v, wc_bf16x16(B + p * rs + j0 + v, m));
            }
        return;
    }
    for (int64_t p0 = 0; p0 < k; p0 += 16) {
        const int64_t kl = k - p0;
        const __mmask16 mp = kl >= 16 ? 0xffff : (__mmask16)((1u << kl) - 1);
        for (int64_t v = 0; v < WC_PANEL; v += 16) {
            __m512 r[16], o[16];
            for (int i = 0; i < 16; i++)
                r[i] = v + i < w ? wc_bf16x16(B + (j0 + v + i) * cs + p0, mp) : _mm512_setzero_ps();
            t16_transpose(r, o);
            for (int i = 0; i < 16 && p0 + i < k; i++)
                _mm512_store_ps(panel + (p0 + i) * WC_PANEL + v, o[i]);
        }
    }
}

// Panel q of the operand: k rows of WC_PANEL floats, columns past n zero.
static void wc_pack_panel(const trn__wcache_key *key, int64_t q, float *panel) {
    if (key->dtype == TRN_DTYPE_BF16 && (key->cs == 1 || key->rs == 1)) {
        wc_pack_panel_bf16(key, q, panel);
        return;
    }
    const int64_t k = key->k, n = key->n;
    const int64_t j0 = q * WC_PANEL, w = n - j0 < WC_PANEL ? n - j0 : WC_PANEL;
    if (w < WC_PANEL)
        for (int64_t p = 0; p < k; p++)
            memset(panel + p * WC_PANEL + w, 0, (size_t)(WC_PANEL - w) * sizeof(float));
    // 16 terms of k at a time: the transposed reads stay in a few lines.
    for (int64_t p0 = 0; p0 < k; p0 += 16) {
        const int64_t p1 = p0 + 16 < k ? p0 + 16 : k;
        for (int64_t jj = 0; jj < w; jj++)
            for (int64_t p = p0; p < p1; p++) panel[p * WC_PANEL + jj] = wc_elem(key, p, j0 + jj);
    }
}

static void wc_pack(const trn__wcache_key *key, void *out) {
    float *P = out;
    for (int64_t q = 0; q < panels_of(key->n); q++)
        wc_pack_panel(key, q, P + q * key->k * WC_PANEL);
}

// Sampled elements of the operand still equal their packed copies (memory
// written without the version moving, as through a tensor's .data, shows
// here unless the write missed every sample: not a proof, a net).
static bool wc_samples_match(const trn__wcache_key *key, const float *P) {
    const int64_t k = key->k, n = key->n;
    const int64_t ps[4] = {0, k - 1, k / 2, k / 3}, js[4] = {0, n - 1, n / 3, n / 2};
    for (int s = 0; s < 4; s++) {
        const int64_t p = ps[s], j = js[s];
        const float src = wc_elem(key, p, j);
        const float *dst = P + (j / WC_PANEL) * k * WC_PANEL + p * WC_PANEL + j % WC_PANEL;
        if (memcmp(&src, dst, sizeof(float)) != 0) return false;
    }
    return true;
}

// M rows by V vectors of 16 columns of one panel, from column offset c0.
static inline __attribute__((always_inline)) void wc_block(const int M, const int V, int64_t k,
                                                           const float *A, int64_t ars, int64_t acs,
                                                           const float *panel, int64_t c0,
                                                           float out[][WC_PANEL]) {
    __m512 c[4][4], e[4][4], s[4][4];
    for (int r = 0; r < M; r++)
        for (int v = 0; v < V; v++) c[r][v] = e[r][v] = _mm512_setzero_ps();
    for (int64_t p0 = 0; p0 < k; p0 += WC_KB) {
        const int64_t p1 = p0 + WC_KB < k ? p0 + WC_KB : k;
        for (int r = 0; r < M; r++)
            for (int v = 0; v < V; v++) s[r][v] = _mm512_setzero_ps();
        for (int64_t p = p0; p < p1; p++) {
            const float *row = panel + p * WC_PANEL + c0;
            __m512 b[4];
            for (int v = 0; v < V; v++) b[v] = _mm512_load_ps(row + 16 * v);
            for (int r = 0; r < M; r++) {
                const __m512 a = _mm512_set1_ps(A[r * ars + p * acs]);
                for (int v = 0; v < V; v++) s[r][v] = _mm512_fmadd_ps(a, b[v], s[r][v]);
            }
        }
        for (int r = 0; r < M; r++)
            for (int v = 0; v < V; v++) TRN__BLK_ADD512(c[r][v], e[r][v], s[r][v]);
    }
    for (int r = 0; r < M; r++)
        for (int v = 0; v < V; v++)
            _mm512_storeu_ps(out[r] + c0 + 16 * v, trn__blk_total512(c[r][v], e[r][v]));
}

// Rows 1-4 of a panel, one body per row count: accumulators in registers
// (m * V * 3 of them, at most 24: 3 and 4 rows take the panel in two halves).
static inline void wc_rows(int64_t m, int64_t k, const float *A, int64_t ars, int64_t acs,
                           const float *panel, float out[][WC_PANEL]) {
    switch (m) {
    case 1: wc_block(1, 4, k, A, ars, acs, panel, 0, out); break;
    case 2: wc_block(2, 4, k, A, ars, acs, panel, 0, out); break;
    case 3:
        wc_block(3, 2, k, A, ars, acs, panel, 0, out);
        wc_block(3, 2, k, A, ars, acs, panel, 32, out);
        break;
    default:
        wc_block(4, 2, k, A, ars, acs, panel, 0, out);
        wc_block(4, 2, k, A, ars, acs, panel, 32, out);
        break;
    }
}

typedef struct wc_run {
    const trn_matmul_desc *d;
    const float *P;  // the packed copy, or NULL: each panel packed into `panel`
    const trn__wcache_key *key;
    float *panel;
    const float *a;    // A as float32: d->a, or bfloat16 A converted
    int64_t ars, acs;  // its strides
    const void *bias;  // of d->dtype
    int64_t bias_stride;
} wc_run;

static void wc_panels(void *ctx, int64_t q0, int64_t q1) {
    const wc_run *w = ctx;
    const trn_matmul_desc *d = w->d;
    const int64_t k = d->k, n = d->n, m = d->m;
    const float *A = w->a;
    const int64_t ars = w->ars, acs = w->acs;
    const int64_t ldc = d->c_strides[1];
    const bool bf16 = d->dtype == TRN_DTYPE_BF16;
    const float alpha = (float)d->alpha;
    float out[WC_ROWS][WC_PANEL] __attribute__((aligned(64)));
    for (int64_t q = q0; q < q1; q++) {
        const float *panel = w->panel;
        if (w->P != NULL)
            panel = w->P + q * k * WC_PANEL;
        else
            wc_pack_panel(w->key, q, w->panel);
        // Rows 5-8: the first four, then the rest (two bodies: wc_block(8,
        // 1) took 8 broadcasts and a load per 8 multiply-adds, 4 x 2 takes 6
        // per 8, and each element's sum is the same either way).
        wc_rows(m < 4 ? m : 4, k, A, ars, acs, panel, out);
        if (m > 4) wc_rows(m - 4, k, A + 4 * ars, ars, acs, panel, out + 4);
        const int64_t j0 = q * WC_PANEL, wdt = n - j0 < WC_PANEL ? n - j0 : WC_PANEL;
        for (int64_t r = 0; r < m; r++) {
            if (bf16) {
                uint16_t *crow = (uint16_t *)d->c + r * ldc + j0;
                const uint16_t *bias = w->bias;
                for (int64_t j = 0; j < wdt; j++) {
                    float v = alpha * out[r][j];
                    if (bias != NULL) v += trn_bf16_to_float(bias[(j0 + j) * w->bias_stride]);
                    crow[j] = trn_float_to_bf16(v);
                }
                continue;
            }
            float *crow = (float *)d->c + r * ldc + j0;
            const float *bias = w->bias;
            if (alpha == 1.0f && bias == NULL) {
                memcpy(crow, out[r], (size_t)wdt * sizeof(float));
                continue;
            }
            // As tile_f32: alpha times the sum, then the bias (one rounding each).
            for (int64_t j = 0; j < wdt; j++) {
                float v = alpha * out[r][j];
                if (bias != NULL) v += bias[(j0 + j) * w->bias_stride];
                crow[j] = v;
            }
        }
    }
}

// Whether this path runs the product: float32 only with a version (the
// uncached float32 path sums the same way: tiles), bfloat16 always (see the
// top of the file).
static bool wc_fits(const trn_matmul_desc *d) {
    const int64_t *bs = d->b_strides;
    // Few rows by a weight: nn.Linear's (transposed: the tiles transpose it
    // block by block on every call) at any size, or a row-major one (GPT-2's
    // Conv1D: row_f32 keeps its sums in memory, not registers) below
    // WC_ROW_MAJOR_MACS, or of one row at any size: there the uncached call
    // runs the same sums (matmul.c's tiles, or few_bt_run's pieces for one
    // row past TILE_MNK since session 34); elsewhere it runs oneDNN, which
    // sums otherwise.
    const bool bt = bs[1] == 1 && bs[2] != 1, rowmajor = bs[2] == 1 && bs[1] >= d->n;
    const int64_t macs = d->m * d->n * d->k;
    if (d->beta != 0 || d->batch != 1 || d->m < 1 || d->m > WC_ROWS || d->k < 2 || d->n < 2 ||
        d->c_strides[2] != 1)
        return false;
    if (d->dtype == TRN_DTYPE_BF16 && d->m > WC_BF16_ROWS) return false;
    if (d->dtype == TRN_DTYPE_F32)
        return d->b_version != 0 && d->k * d->n >= WC_MIN_ELEMS &&
               (bt || (rowmajor && (macs < WC_ROW_MAJOR_MACS || d->m == 1)));
    return d->dtype == TRN_DTYPE_BF16 && macs >= WC_SMALL_MACS &&
           d->k * d->n <= WC_BF16_MAX_ELEMS && (bt || rowmajor);
}

static void wc_compute(wc_run *w) {
    const trn_matmul_desc *d = w->d;
    const int64_t panels = panels_of(d->n);
    if (d->m * d->n * d->k < WC_PARALLEL_MACS) {
        wc_panels(w, 0, panels);
    } else {
        int64_t grain = WC_PIECE_MACS / (WC_PANEL * d->k * d->m);
        if (grain < 1) grain = 1;
        trn_parallel_for(panels, grain, wc_panels, w);
    }
}

// Uncached bfloat16: the panels in `pieces` contiguous runs, piece i
// packing into its own scratch panel (scratch + i * k * WC_PANEL).
typedef struct wc_split {
    const wc_run *w;
    float *scratch;
    int64_t pieces;
} wc_split;

static void wc_split_piece(void *ctx, int64_t i0, int64_t i1) {
    const wc_split *sp = ctx;
    const int64_t panels = panels_of(sp->w->d->n), k = sp->w->d->k;
    for (int64_t i = i0; i < i1; i++) {
        wc_run w = *sp->w;
        w.panel = sp->scratch + i * k * WC_PANEL;
        wc_panels(&w, panels * i / sp->pieces, panels * (i + 1) / sp->pieces);
    }
}

// No copy: each panel packed as it is used so that the sums are the cached
// path's; a panel (k x 64 floats) stays in L2 between its packing and its
// product. Past WC_UNCACHED_PARALLEL_MACS one run of panels per thread, each with
// its own panel. False (nothing written) when out of memory.
static bool wc_uncached(const wc_run *w) {
    const trn_matmul_desc *d = w->d;
    int64_t pieces = 1;
    if (d->m * d->n * d->k >= WC_UNCACHED_PARALLEL_MACS) pieces = trn_parallel_threads();
    if (pieces > panels_of(d->n)) pieces = panels_of(d->n);
    float *scratch = aligned_alloc(64, (size_t)(pieces * d->k * WC_PANEL) * sizeof(float));
    if (scratch == NULL) return false;
    const wc_split sp = {w, scratch, pieces};
    if (pieces > 1)
        trn_parallel_for(pieces, 1, wc_split_piece, (void *)&sp);
    else
        wc_split_piece((void *)&sp, 0, 1);
    free(scratch);
    return true;
}

bool trn__wcache_matmul(const trn_matmul_desc *d, const void *bias, int64_t bias_stride) {
    if (!wc_fits(d)) return false;
    const bool bf16 = d->dtype == TRN_DTYPE_BF16;
    const int64_t *bs = d->b_strides;
    const trn__wcache_key key = {
        d->b, d->k, d->n, bs[1], bs[2], bf16 ? TRN_DTYPE_BF16 : TRN_DTYPE_F32, WC_FMT};
    const size_t bytes = (size_t)(panels_of(d->n) * d->k * WC_PANEL) * sizeof(float);
    wc_run w = {d, NULL, &key, NULL, d->a, d->a_strides[1], d->a_strides[2], bias, bias_stride};
    float *a32 = NULL;
    if (bf16) {  // A's few rows as float32 (exact), once rather than per panel
        if ((a32 = malloc((size_t)(d->m * d->k) * sizeof(float))) == NULL) return false;
        const uint16_t *A = d->a;
        for (int64_t r = 0; r < d->m; r++)
            for (int64_t p = 0; p < d->k; p++)
                a32[r * d->k + p] = trn_bf16_to_float(A[r * d->a_strides[1] + p * d->a_strides[2]]);
        w.a = a32;
        w.ars = d->k;
        w.acs = 1;
    }
    trn__wcache_entry *e = NULL;
    const float *P =
        d->b_version != 0 ? trn__wcache_acquire(&key, d->b_version, bytes, wc_pack, &e) : NULL;
    if (P != NULL && !wc_samples_match(&key, P)) {
        trn__wcache_invalidate(e);
        trn__wcache_release(e);
        P = NULL;
        e = NULL;
    }
    bool done = false;
    if (P != NULL) {
        w.P = P;
        wc_compute(&w);
        done = true;
    } else if (bf16) {
        done = wc_uncached(&w);  // out of memory: oneDNN (right, other bits)
    }
    if (e != NULL) trn__wcache_release(e);
    free(a32);
    return done;
}
#else
bool trn__wcache_matmul(const trn_matmul_desc *d, const void *bias, int64_t bias_stride) {
    (void)d;
    (void)bias;
    (void)bias_stride;
    return false;  // the packed path is AVX-512 only; the tiles run as before
}
#endif
