// sort.c - owns the sort, topk and unique kernels of trn/sort.h.
//
// Every element becomes an unsigned 64-bit key whose unsigned order is the
// requested order: integers with the sign bit flipped, floats by their bits
// (negative ones inverted) with -0.0 made +0.0 and every NaN the all-ones
// key (largest); descending inverts the key. Keys of dtypes up to 32 bits are
// packed with the element's index into one uint64 (key << 32 | index) and
// radix-sorted on the key bytes only, which moves 8 bytes per element per
// pass; wider keys travel with a separate index array. LSD radix sort is
// stable, and passes whose digit is the same for every key are skipped, so
// uint8 sorts in one pass and float32 in at most four. Rows of up to 32
// elements use insertion sort. topk keeps a max-heap of the k best
// (key, index) pairs when k is small against the row, else sorts the row.
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "../kit/launch.h"
#include "../kit/piece_status.h"
#include "trn/convert.h"
#include "trn/parallel.h"
#include "trn/sort.h"

#define SMALL 32
#define ROW_GRAIN (32 * 1024)  // elements per parallel piece

// ---- keys -------------------------------------------------------------------------

static inline uint64_t fkey32(float f) {
    if (f != f) return 0xFFFFFFFFu;
    if (f == 0) f = 0.0f;
    uint32_t b;
    memcpy(&b, &f, 4);
    return (b & 0x80000000u) ? (uint32_t)~b : (b | 0x80000000u);
}

static inline uint64_t fkey64(double f) {
    if (f != f) return UINT64_MAX;
    if (f == 0) f = 0.0;
    uint64_t b;
    memcpy(&b, &f, 8);
    return (b >> 63) ? ~b : (b | (UINT64_C(1) << 63));
}

#define K_b8(v) ((uint64_t)((v) != 0))
#define K_u(v) ((uint64_t)(v))
#define K_i8(v) ((uint64_t)(uint8_t)((v) ^ INT8_MIN))
#define K_i16(v) ((uint64_t)(uint16_t)((v) ^ INT16_MIN))
#define K_i32(v) ((uint64_t)((uint32_t)(v) ^ 0x80000000u))
#define K_i64(v) ((uint64_t)(v) ^ (UINT64_C(1) << 63))
#define K_f16(v) fkey32(trn_half_to_float(v))
#define K_bf16(v) fkey32(trn_bf16_to_float(v))
#define K_f32(v) fkey32(v)
#define K_f64(v) fkey64(v)

// X(enum, name, C type, key, key bits, NaN key or 0)
#define SORT_DTYPES(X)                                                                             \
    X(TRN_DTYPE_BOOL, b8, uint8_t, K_b8, 32, 0)                                                    \
    X(TRN_DTYPE_U8, u8, uint8_t, K_u, 32, 0)                                                       \
    X(TRN_DTYPE_I8, i8, int8_t, K_i8, 32, 0)                                                       \
    X(TRN_DTYPE_I16, i16, int16_t, K_i16, 32, 0)                                                   \
    X(TRN_DTYPE_I32, i32, int32_t, K_i32, 32, 0)                                                   \
    X(TRN_DTYPE_I64, i64, int64_t, K_i64, 64, 0)                                                   \
    X(TRN_DTYPE_U16, u16, uint16_t, K_u, 32, 0)                                                    \
    X(TRN_DTYPE_U32, u32, uint32_t, K_u, 32, 0)                                                    \
    X(TRN_DTYPE_U64, u64, uint64_t, K_u, 64, 0)                                                    \
    X(TRN_DTYPE_F16, f16, uint16_t, K_f16, 32, 1)                                                  \
    X(TRN_DTYPE_BF16, bf16, uint16_t, K_bf16, 32, 1)                                               \
    X(TRN_DTYPE_F32, f32, float, K_f32, 32, 1)                                                     \
    X(TRN_DTYPE_F64, f64, double, K_f64, 64, 1)

// keys_N: key of in[i * stride] for i < n into out; descending inverts
// within the key width.
#define DEFINE_KEYS(E, N, T, KEY, BITS, NANK)                                                      \
    static void keys_##N(const void *in, int64_t s, int64_t n, int desc, uint64_t *out) {          \
        const T *p = (const T *)in;                                                                \
        const uint64_t inv = desc ? (BITS == 32 ? 0xFFFFFFFFu : UINT64_MAX) : 0;                   \
        if (s == 1)                                                                                \
            for (int64_t i = 0; i < n; i++) out[i] = KEY(p[i]) ^ inv;                              \
        else                                                                                       \
            for (int64_t i = 0; i < n; i++) out[i] = KEY(p[i * s]) ^ inv;                          \
    }
SORT_DTYPES(DEFINE_KEYS)

typedef void (*keys_fn)(const void *, int64_t, int64_t, int, uint64_t *);

typedef struct dtype_info {
    keys_fn keys;
    int bits;      // 32: key fits in the low 32 bits
    int is_float;  // the all-ones key is NaN
} dtype_info;

static int dtype_lookup(trn_dtype t, dtype_info *info) {
    switch (t) {
#define CASE(E, N, T, KEY, BITS, NANK)                                                             \
    case E: *info = (dtype_info){keys_##N, BITS, NANK}; return 1;
        SORT_DTYPES(CASE)
#undef CASE
    default: return 0;
    }
}

int trn_sort_supports(trn_dtype dtype) {
    dtype_info i;
    return (unsigned)dtype < TRN_DTYPE_COUNT && dtype_lookup(dtype, &i);
}

// ---- radix sorts --------------------------------------------------------------------

// Sorts a[0..n) by bytes [b0, b1] of each uint64 (stable); tmp has n slots.
// Returns the array that holds the result (a or tmp).
static uint64_t *radix_packed(uint64_t *a, uint64_t *tmp, int64_t n, int b0, int b1) {
    if (n <= SMALL) {
        for (int64_t i = 1; i < n; i++) {  // packed values are distinct: plain order
            uint64_t v = a[i];
            int64_t j = i;
            for (; j > 0 && a[j - 1] > v; j--) a[j] = a[j - 1];
            a[j] = v;
        }
        return a;
    }
    int64_t(*h)[256] = calloc((size_t)(b1 - b0 + 1), sizeof *h);
    if (h == NULL) return NULL;
    for (int64_t i = 0; i < n; i++) {
        const uint64_t v = a[i];
        for (int b = b0; b <= b1; b++) h[b - b0][(v >> (8 * b)) & 0xFF]++;
    }
    for (int b = b0; b <= b1; b++) {
        int64_t *hb = h[b - b0];
        if (hb[(a[0] >> (8 * b)) & 0xFF] == n) continue;  // one digit: no-op pass
        int64_t sum = 0;
        for (int d = 0; d < 256; d++) {
            int64_t c = hb[d];
            hb[d] = sum;
            sum += c;
        }
        const int sh = 8 * b;
        for (int64_t i = 0; i < n; i++) {
            const uint64_t v = a[i];
            tmp[hb[(v >> sh) & 0xFF]++] = v;
        }
        uint64_t *t = a;
        a = tmp;
        tmp = t;
    }
    free(h);
    return a;
}

// Stable sort of (k, x) pairs by k; k2/x2 are scratch. Results end in *k, *x.
static int radix_pairs(uint64_t **k, int64_t **x, uint64_t *k2, int64_t *x2, int64_t n) {
    uint64_t *a = *k;
    int64_t *ia = *x;
    if (n <= SMALL) {
        for (int64_t i = 1; i < n; i++) {
            uint64_t v = a[i];
            int64_t iv = ia[i], j = i;
            for (; j > 0 && a[j - 1] > v; j--) {
                a[j] = a[j - 1];
                ia[j] = ia[j - 1];
            }
            a[j] = v;
            ia[j] = iv;
        }
        return 1;
    }
    int64_t(*h)[256] = calloc(8, sizeof *h);
    if (h == NULL) return 0;
    for (int64_t i = 0; i < n; i++) {
        const uint64_t v = a[i];
        for (int b = 0; b < 8; b++) h[b][(v >> (8 * b)) & 0xFF]++;
    }
    for (int b = 0; b < 8; b++) {
        int64_t *hb = h[b];
        if (hb[(a[0] >> (8 * b)) & 0xFF] == n) continue;
        int64_t sum = 0;
        for (int d = 0; d < 256; d++) {
            int64_t c = hb[d];
            hb[d] = sum;
            sum += c;
        }
        const int sh = 8 * b;
        for (int64_t i = 0; i < n; i++) {
            const int64_t p = hb[(a[i] >> sh) & 0xFF]++;
            k2[p] = a[i];
            x2[p] = ia[i];
        }
        uint64_t *t = a;
        a = k2;
        k2 = t;
        int64_t *ti = ia;
        ia = x2;
        x2 = ti;
    }
    free(h);
    *k = a;
    *x = ia;
    return 1;
}

// ---- row sort / topk -----------------------------------------------------------------

typedef struct sort_args {
    int topk, descending, sorted;
    trn_dtype dtype;
    int64_t esize, len, in_stride, val_stride, idx_stride, k;
    const char *in;
    char *values;
    int64_t *indices;
    int64_t in_lo, in_span, val_lo, val_span, idx_lo, idx_span;
    int nd;
    int64_t dims[4 * TRN_MAX_DIMS];  // sizes, in, values, indices strides
} sort_args;

_Static_assert(sizeof(sort_args) <= TRN_TASK_MAX_ARGS, "sort args too large");

typedef struct sort_ctx {
    const sort_args *a;
    dtype_info info;
    trn__piece_status status;  // a piece whose scratch allocation failed
} sort_ctx;

// values[j * vs] = in[idx[j] * is] for j < n, by element size.
static void gather_values(char *out, int64_t vs, const char *in, int64_t is, const int64_t *idx,
                          const uint64_t *packed, int64_t n, int64_t es) {
#define GATHER_T(T)                                                                                \
    do {                                                                                           \
        T *o = (T *)(void *)out;                                                                   \
        const T *p = (const T *)(const void *)in;                                                  \
        if (packed)                                                                                \
            for (int64_t j = 0; j < n; j++) o[j * vs] = p[(int64_t)(uint32_t)packed[j] * is];      \
        else                                                                                       \
            for (int64_t j = 0; j < n; j++) o[j * vs] = p[idx[j] * is];                            \
    } while (0)
    switch (es) {
    case 1: GATHER_T(uint8_t); break;
    case 2: GATHER_T(uint16_t); break;
    case 4: GATHER_T(uint32_t); break;
    default: GATHER_T(uint64_t); break;
    }
#undef GATHER_T
}

typedef struct pair {
    uint64_t key;
    int64_t idx;
} pair;

static inline int pair_less(pair a, pair b) {
    return a.key < b.key || (a.key == b.key && a.idx < b.idx);
}

static void sift_down(pair *h, int64_t n, int64_t i) {  // max-heap
    const pair v = h[i];
    for (;;) {
        int64_t c = 2 * i + 1;
        if (c >= n) break;
        if (c + 1 < n && pair_less(h[c], h[c + 1])) c++;
        if (!pair_less(v, h[c])) break;
        h[i] = h[c];
        i = c;
    }
    h[i] = v;
}

// The k smallest pairs of keys[0..n) (index = position), ascending.
static void heap_select(const uint64_t *keys, int64_t n, int64_t k, pair *h) {
    for (int64_t i = 0; i < k; i++) h[i] = (pair){keys[i], i};
    for (int64_t i = k / 2 - 1; i >= 0; i--) sift_down(h, k, i);
    for (int64_t i = k; i < n; i++) {
        if (keys[i] < h[0].key) {  // ties keep the earlier index
            h[0] = (pair){keys[i], i};
            sift_down(h, k, 0);
        }
    }
    for (int64_t m = k - 1; m > 0; m--) {  // heap sort: ascending
        pair t = h[0];
        h[0] = h[m];
        h[m] = t;
        sift_down(h, m, 0);
    }
}

static void sort_rows(void *ctx, int64_t begin, int64_t end) {
    sort_ctx *c = ctx;
    const sort_args *a = c->a;
    const int64_t n = a->len, es = a->esize;
    const int nd = a->nd;
    const int64_t *sz = a->dims, *si = sz + nd, *sv = sz + 2 * nd, *sx = sz + 3 * nd;
    const int64_t k = a->topk ? a->k : n;
    const int use_heap = a->topk && k > 0 && k * 8 <= n && n > SMALL;
    const int packed = c->info.bits == 32 && n <= (int64_t)UINT32_MAX && !use_heap;
    uint64_t *kb = malloc((size_t)n * 2 * sizeof(uint64_t));
    int64_t *xb = packed || use_heap ? NULL : malloc((size_t)n * 2 * sizeof(int64_t));
    pair *hp = use_heap ? malloc((size_t)k * sizeof(pair)) : NULL;
    int64_t *ib = packed ? NULL : malloc((size_t)k * sizeof(int64_t));
    if (kb == NULL || (!packed && !use_heap && xb == NULL) || (use_heap && hp == NULL) ||
        (!packed && ib == NULL)) {
        trn__piece_oom(&c->status, 0);
        free(kb);
        free(xb);
        free(hp);
        free(ib);
        return;
    }
    for (int64_t r = begin; r < end; r++) {
        int64_t rest = r, io = 0, vo = 0, xo = 0;
        for (int d = nd - 1; d >= 0; d--) {
            const int64_t q = rest % sz[d];
            rest /= sz[d];
            io += q * si[d];
            vo += q * sv[d];
            xo += q * sx[d];
        }
        const char *in = a->in + io * es;
        c->info.keys(in, a->in_stride, n, a->descending, kb);
        const uint64_t *pk = NULL;
        const int64_t *idx = NULL;
        if (use_heap) {
            heap_select(kb, n, k, hp);
            for (int64_t j = 0; j < k; j++) ib[j] = hp[j].idx;
            idx = ib;
        } else if (packed) {
            for (int64_t j = 0; j < n; j++) kb[j] = kb[j] << 32 | (uint64_t)j;
            pk = radix_packed(kb, kb + n, n, 4, 7);
            if (pk == NULL) {
                trn__piece_oom(&c->status, 0);
                break;
            }
        } else {
            uint64_t *kk = kb;
            int64_t *xx = xb;
            for (int64_t j = 0; j < n; j++) xx[j] = j;
            if (!radix_pairs(&kk, &xx, kb + n, xb + n, n)) {
                trn__piece_oom(&c->status, 0);
                break;
            }
            idx = xx;
        }
        int64_t *xout = a->indices + xo;
        if (pk)
            for (int64_t j = 0; j < k; j++) xout[j * a->idx_stride] = (int64_t)(uint32_t)pk[j];
        else
            for (int64_t j = 0; j < k; j++) xout[j * a->idx_stride] = idx[j];
        gather_values(a->values + vo * es, a->val_stride, in, a->in_stride, idx, pk, k, es);
    }
    free(kb);
    free(xb);
    free(hp);
    free(ib);
}

static trn_status sort_task(void *args) {
    const sort_args *a = args;
    const void *ilo = trn__offset_ptr(a->in, a->in_lo * a->esize);
    const void *vlo = trn__offset_ptr(a->values, a->val_lo * a->esize);
    const void *xlo = trn__offset_ptr(a->indices, a->idx_lo * 8);
    const size_t ispan = (size_t)(a->in_span * a->esize), vspan = (size_t)(a->val_span * a->esize),
                 xspan = (size_t)(a->idx_span * 8);
    trn__access_set rg = {.count = 0};
    trn__access_add(&rg, ilo, ispan);
    trn__access_add(&rg, vlo, vspan);
    trn__access_add(&rg, xlo, xspan);
    trn_status st = trn__access_begin(&rg);
    if (st != TRN_SUCCESS) return st;
    sort_ctx c;
    c.a = a;
    dtype_lookup(a->dtype, &c.info);
    trn__piece_status_init(&c.status);
    int64_t rows = 1;
    for (int d = 0; d < a->nd; d++) rows *= a->dims[d];
    const int64_t grain = ROW_GRAIN / (a->len > 0 ? a->len : 1);
    trn_parallel_for(rows, grain > 0 ? grain : 1, sort_rows, &c);
    st = trn__piece_status_raise(&c.status, a->topk ? "trn_topk_launch" : "trn_sort_launch");
    trn__access_end(&rg);
    return st;
}

static trn_status sort_common(trn_stream *stream, const trn_sort_desc *d, int topk) {
    const char *fn = topk ? "trn_topk_launch" : "trn_sort_launch";
    if (stream == NULL || d == NULL) return trn__check_launch(stream, d, fn);
    if (!trn_sort_supports(d->dtype))
        return trn__set_error(TRN_ERROR_UNSUPPORTED, "%s: dtype %s is not supported", fn,
                              (unsigned)d->dtype < TRN_DTYPE_COUNT ? trn_dtype_name(d->dtype)
                                                                   : "invalid");
#define BAD(what) trn__set_error(TRN_ERROR_INVALID_ARGUMENT, "%s: %s", fn, what)
    if (d->outer_ndim < 0 || d->outer_ndim > TRN_MAX_DIMS) return BAD("ndim outside 0..64");
    if (d->outer_ndim > 0 &&
        (!d->outer_sizes || !d->in_outer_strides || !d->val_outer_strides || !d->idx_outer_strides))
        return BAD("sizes or strides are NULL");
    if (d->len < 0) return BAD("negative length");
    const int64_t k = topk ? d->k : d->len;
    if (k < 0 || k > d->len) return BAD("k outside 0..len");
    sort_args a;
    memset(&a, 0, offsetof(sort_args, dims));
    a.topk = topk;
    a.descending = d->descending != 0;
    a.sorted = topk ? d->sorted != 0 : 1;
    a.dtype = d->dtype;
    a.esize = (int64_t)trn_dtype_size(d->dtype);
    a.len = d->len;
    a.k = k;
    int64_t rows = 1, ihi = 0, vhi = 0, xhi = 0;
    int n = 0;
    int64_t sz[TRN_MAX_DIMS], si[TRN_MAX_DIMS], sv[TRN_MAX_DIMS], sx[TRN_MAX_DIMS];
    for (int q = 0; q < d->outer_ndim; q++) {
        const int64_t s = d->outer_sizes[q];
        if (s < 0) return BAD("negative size");
        if (__builtin_mul_overflow(rows, s, &rows)) return BAD("size overflows");
        if (s == 1) continue;
        sz[n] = s;
        si[n] = d->in_outer_strides[q];
        sv[n] = d->val_outer_strides[q];
        sx[n] = d->idx_outer_strides[q];
        if (!trn__extent_or_empty(s, si[n], 1, &a.in_lo, &ihi) ||
            !trn__extent_or_empty(s, sv[n], 1, &a.val_lo, &vhi) ||
            !trn__extent_or_empty(s, sx[n], 1, &a.idx_lo, &xhi))
            return BAD("strides overflow");
        n++;
    }
    trn_status st = trn__fork_check();
    if (st != TRN_SUCCESS || rows == 0 || k == 0) return st;
    if (!trn__extent_or_empty(d->len, d->in_stride, 1, &a.in_lo, &ihi) ||
        !trn__extent_or_empty(k, d->val_stride, 1, &a.val_lo, &vhi) ||
        !trn__extent_or_empty(k, d->idx_stride, 1, &a.idx_lo, &xhi))
        return BAD("strides overflow");
    if (d->in == NULL || d->values == NULL || d->indices == NULL)
        return BAD("a data pointer is NULL");
#undef BAD
    a.in = d->in;
    a.values = d->values;
    a.indices = d->indices;
    a.in_stride = d->in_stride;
    a.val_stride = d->val_stride;
    a.idx_stride = d->idx_stride;
    a.in_span = ihi - a.in_lo + 1;
    a.val_span = vhi - a.val_lo + 1;
    a.idx_span = xhi - a.idx_lo + 1;
    a.nd = n;
    memcpy(a.dims, sz, (size_t)n * 8);
    memcpy(a.dims + n, si, (size_t)n * 8);
    memcpy(a.dims + 2 * n, sv, (size_t)n * 8);
    memcpy(a.dims + 3 * n, sx, (size_t)n * 8);
    return trn_stream_launch(stream, sort_task, &a, offsetof(sort_args, dims) + 4 * (size_t)n * 8);
}

trn_status trn_sort_launch(trn_stream *stream, const trn_sort_desc *desc) {
    return sort_common(stream, desc, 0);
}

trn_status trn_topk_launch(trn_stream *stream, const trn_sort_desc *desc) {
    return sort_common(stream, desc, 1);
}

// ---- unique ---------------------------------------------------------------------------

typedef struct unique_args {
    trn_unique_desc d;
} unique_args;

static trn_status unique_task(void *args) {
    const trn_unique_desc *d = &((unique_args *)args)->d;
    const int64_t n = d->n, es = (int64_t)trn_dtype_size(d->dtype);
    dtype_info info;
    dtype_lookup(d->dtype, &info);
    const uint64_t nan_key = info.bits == 32 ? 0xFFFFFFFFu : UINT64_MAX;
    trn__access_set rg = {.count = 0};
    trn__access_add(&rg, d->in, (size_t)(n * es));
    trn__access_add(&rg, d->values, (size_t)(n * es));
    trn__access_add(&rg, d->inverse, (size_t)n * 8);
    trn__access_add(&rg, d->counts, (size_t)n * 8);
    trn_status st = trn__access_begin(&rg);
    if (st != TRN_SUCCESS) return st;
    uint64_t *kb = malloc((size_t)n * 2 * sizeof(uint64_t));
    int64_t *xb = malloc((size_t)n * 2 * sizeof(int64_t));
    if (kb == NULL || xb == NULL) {
        free(kb);
        free(xb);
        st = trn__set_error(TRN_ERROR_OUT_OF_MEMORY, "trn_unique_launch: out of host memory");
        goto out;
    }
    info.keys(d->in, 1, n, 0, kb);
    uint64_t *keys = kb;
    int64_t *idx = xb;
    for (int64_t j = 0; j < n; j++) idx[j] = j;
    if (!d->consecutive && !radix_pairs(&keys, &idx, kb + n, xb + n, n)) {
        free(kb);
        free(xb);
        st = trn__set_error(TRN_ERROR_OUT_OF_MEMORY, "trn_unique_launch: out of host memory");
        goto out;
    }
    // Groups of equal keys (a NaN is never equal); idx[] holds each group's
    // elements, the first one gives the value.
    int64_t g = -1, start = 0;
    int64_t *first = xb == idx ? xb + n : xb;  // the free half: first index of each group
    for (int64_t j = 0; j < n; j++) {
        if (j == 0 || keys[j] != keys[j - 1] || (info.is_float && keys[j] == nan_key)) {
            if (g >= 0 && d->counts) d->counts[g] = j - start;
            g++;
            start = j;
            first[g] = idx[j];
        }
        if (d->inverse) d->inverse[idx[j]] = g;
    }
    if (n > 0 && d->counts) d->counts[g] = n - start;
    gather_values(d->values, 1, d->in, 1, first, NULL, g + 1, es);
    *d->num_unique = g + 1;
    free(kb);
    free(xb);
out:
    trn__access_end(&rg);
    return st;
}

trn_status trn_unique_launch(trn_stream *stream, const trn_unique_desc *d) {
    static const char fn[] = "trn_unique_launch";
    if (stream == NULL || d == NULL) return trn__check_launch(stream, d, fn);
    if (!trn_sort_supports(d->dtype))
        return trn__set_error(TRN_ERROR_UNSUPPORTED, "%s: dtype %s is not supported", fn,
                              (unsigned)d->dtype < TRN_DTYPE_COUNT ? trn_dtype_name(d->dtype)
                                                                   : "invalid");
    if (d->n < 0 || d->num_unique == NULL)
        return trn__set_error(TRN_ERROR_INVALID_ARGUMENT, "%s: negative n or NULL num_unique", fn);
    trn_status st = trn__fork_check();
    if (st != TRN_SUCCESS) return st;
    if (d->n == 0) {
        *d->num_unique = 0;
        return TRN_SUCCESS;
    }
    if (d->in == NULL || d->values == NULL)
        return trn__set_error(TRN_ERROR_INVALID_ARGUMENT, "%s: a data pointer is NULL", fn);
    unique_args a = {*d};
    return trn_stream_launch(stream, unique_task, &a, sizeof a);
}
