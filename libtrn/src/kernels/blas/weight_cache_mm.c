// weight_cache_mm.c - few-row float32 products by a cached packed weight
// (weight_cache.h), per CPU level.
//
// Layout (fmt 1): B (k x n) in panels of WC_PANEL columns, each panel k rows
// of WC_PANEL floats, one after the other, columns past n zero. A product
// reads the whole copy as one contiguous stream, and each element of C is
// summed exactly as matmul.c's few-row tiles sum it (blocks of WC_KB terms,
// each a fused multiply-add chain in order from zero, the block sums added
// in order to a total from zero; then alpha, then the bias): the same bits
// as without the cache, whichever way the columns are split over threads.
#include <stdlib.h>
#include <string.h>

#include "../../internal.h"
#include "trn/parallel.h"
#include "weight_cache.h"

#if defined(__AVX512F__)
#include <immintrin.h>

#define WC_FMT 1
#define WC_PANEL 64
// matmul.c's TILE_KB: the block length of every few-row float32 sum
// (tests/test_weight_cache.py checks the cached path's bits against it).
#define WC_KB 32
#define WC_ROWS 4
// Smaller weights are cheap to transpose on the fly (and stay in L1).
#define WC_MIN_ELEMS 4096
// As few_bt_run in matmul.c: products past TILE_MNK go over the pool, in
// pieces of at least this many multiply-adds.
#define WC_PARALLEL_MACS ((int64_t)1 << 19)
#define WC_PIECE_MACS ((int64_t)1 << 17)
// matmul.c's TILE_MNK: row-major weights take row_f32 below it.
#define WC_ROW_MAJOR_MACS ((int64_t)1 << 19)

static int64_t panels_of(int64_t n) { return (n + WC_PANEL - 1) / WC_PANEL; }

static void wc_pack(const trn__wcache_key *key, void *out) {
    const float *B = key->b;
    float *P = out;
    const int64_t k = key->k, n = key->n, rs = key->rs, cs = key->cs;
    for (int64_t q = 0; q < panels_of(n); q++) {
        float *panel = P + q * k * WC_PANEL;
        const int64_t j0 = q * WC_PANEL, w = n - j0 < WC_PANEL ? n - j0 : WC_PANEL;
        if (w < WC_PANEL)
            for (int64_t p = 0; p < k; p++)
                memset(panel + p * WC_PANEL + w, 0, (size_t)(WC_PANEL - w) * sizeof(float));
        // 16 terms of k at a time: the transposed reads stay in a few lines.
        for (int64_t p0 = 0; p0 < k; p0 += 16) {
            const int64_t p1 = p0 + 16 < k ? p0 + 16 : k;
            for (int64_t jj = 0; jj < w; jj++)
                for (int64_t p = p0; p < p1; p++)
                    panel[p * WC_PANEL + jj] = B[p * rs + (j0 + jj) * cs];
        }
    }
}

// Sampled elements of the operand still equal their packed copies (memory
// written without the version moving, as through a tensor's .data, shows
// here unless the write missed every sample: not a proof, a net).
static bool wc_samples_match(const trn__wcache_key *key, const float *P) {
    const int64_t k = key->k, n = key->n;
    const int64_t ps[4] = {0, k - 1, k / 2, k / 3}, js[4] = {0, n - 1, n / 3, n / 2};
    for (int s = 0; s < 4; s++) {
        const int64_t p = ps[s], j = js[s];
        const float *src = (const float *)key->b + p * key->rs + j * key->cs;
        const float *dst = P + (j / WC_PANEL) * k * WC_PANEL + p * WC_PANEL + j % WC_PANEL;
        if (memcmp(src, dst, sizeof(float)) != 0) return false;
    }
    return true;
}

// M rows by V vectors of 16 columns of one panel, from column offset c0.
static inline __attribute__((always_inline)) void wc_block(const int M, const int V, int64_t k,
                                                           const float *A, int64_t ars, int64_t acs,
                                                           const float *panel, int64_t c0,
                                                           float out[WC_ROWS][WC_PANEL]) {
    __m512 c[WC_ROWS][4], s[WC_ROWS][4];
    for (int r = 0; r < M; r++)
        for (int v = 0; v < V; v++) c[r][v] = _mm512_setzero_ps();
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
            for (int v = 0; v < V; v++) c[r][v] = _mm512_add_ps(c[r][v], s[r][v]);
    }
    for (int r = 0; r < M; r++)
        for (int v = 0; v < V; v++) _mm512_storeu_ps(out[r] + c0 + 16 * v, c[r][v]);
}

typedef struct wc_run {
    const trn_matmul_desc *d;
    const float *P, *bias;
    int64_t bias_stride;
} wc_run;

static void wc_panels(void *ctx, int64_t q0, int64_t q1) {
    const wc_run *w = ctx;
    const trn_matmul_desc *d = w->d;
    const int64_t k = d->k, n = d->n, m = d->m;
    const float *A = d->a;
    const int64_t ars = d->a_strides[1], acs = d->a_strides[2];
    float *C = d->c;
    const int64_t ldc = d->c_strides[1];
    const float alpha = (float)d->alpha;
    float out[WC_ROWS][WC_PANEL] __attribute__((aligned(64)));
    for (int64_t q = q0; q < q1; q++) {
        const float *panel = w->P + q * k * WC_PANEL;
        // One body per row count: accumulators in registers (m * V * 2 of
        // them, at most 16: 3 and 4 rows take the panel in two halves).
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
        const int64_t j0 = q * WC_PANEL, wdt = n - j0 < WC_PANEL ? n - j0 : WC_PANEL;
        for (int64_t r = 0; r < m; r++) {
            float *crow = C + r * ldc + j0;
            if (alpha == 1.0f && w->bias == NULL) {
                memcpy(crow, out[r], (size_t)wdt * sizeof(float));
                continue;
            }
            // As tile_f32: alpha times the sum, then the bias (one rounding each).
            for (int64_t j = 0; j < wdt; j++) {
                float v = alpha * out[r][j];
                if (w->bias != NULL) v += w->bias[(j0 + j) * w->bias_stride];
                crow[j] = v;
            }
        }
    }
}

bool trn__wcache_matmul(const trn_matmul_desc *d, const float *bias, int64_t bias_stride) {
    const int64_t *bs = d->b_strides;
    // Few rows by a weight: nn.Linear's (transposed: the tiles transpose it
    // block by block on every call) at any size, or a row-major one (GPT-2's
    // Conv1D: row_f32 keeps its sums in memory, not registers) below
    // WC_ROW_MAJOR_MACS, where row_f32 is the uncached path: past it oneDNN
    // runs and sums otherwise.
    const bool bt = bs[1] == 1 && bs[2] != 1, rowmajor = bs[2] == 1 && bs[1] >= d->n;
    if (d->b_version == 0 || d->dtype != TRN_DTYPE_F32 || d->beta != 0 || d->batch != 1 ||
        d->m < 1 || d->m > WC_ROWS || d->k < 2 || d->n < 2 || d->k * d->n < WC_MIN_ELEMS ||
        d->c_strides[2] != 1 || !(bt || (rowmajor && d->m * d->n * d->k < WC_ROW_MAJOR_MACS)))
        return false;
    const trn__wcache_key key = {d->b, d->k, d->n, bs[1], bs[2], TRN_DTYPE_F32, WC_FMT};
    const size_t bytes = (size_t)(panels_of(d->n) * d->k * WC_PANEL) * sizeof(float);
    trn__wcache_entry *e = NULL;
    const float *P = trn__wcache_acquire(&key, d->b_version, bytes, wc_pack, &e);
    if (P == NULL) return false;
    if (!wc_samples_match(&key, P)) {
        trn__wcache_invalidate(e);
        trn__wcache_release(e);
        return false;
    }
    wc_run w = {d, P, bias, bias_stride};
    const int64_t panels = panels_of(d->n);
    if (d->m * d->n * d->k < WC_PARALLEL_MACS) {
        wc_panels(&w, 0, panels);
    } else {
        int64_t grain = WC_PIECE_MACS / (WC_PANEL * d->k * d->m);
        if (grain < 1) grain = 1;
        trn_parallel_for(panels, grain, wc_panels, &w);
    }
    trn__wcache_release(e);
    return true;
}
#else
bool trn__wcache_matmul(const trn_matmul_desc *d, const float *bias, int64_t bias_stride) {
    (void)d;
    (void)bias;
    (void)bias_stride;
    return false;  // the packed path is AVX-512 only; the tiles run as before
}
#endif
