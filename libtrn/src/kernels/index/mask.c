// mask.c - owns the mask kernels: masked_fill (store a value where a bool
// mask is set), count_nonzero, nonzero (coordinates of the nonzero elements,
// row-major) and masked_select (compaction). Element tests are generated per
// dtype ("nonzero" = any bit set apart from the sign bits of float parts, so
// -0.0 is zero and NaN is not); moves are per element size.
#include <stdio.h>
#include <string.h>

#include "../kit/launch.h"
#include "trn/index.h"

// ---- masked_fill ------------------------------------------------------------------
typedef struct fill_args {
    char *out;
    const char *mask;
    int ndim;
    size_t es;
    unsigned char value[16];
    int64_t out_lo, out_span, mask_lo, mask_span;
    int64_t sizes[TRN_INDEX_MAX_DIMS], ostr[TRN_INDEX_MAX_DIMS], mstr[TRN_INDEX_MAX_DIMS];
} fill_args;

#define DEF_FILL(N)                                                                                \
    static void fill_row##N(char *o, int64_t os, const char *m, int64_t ms, int64_t n,             \
                            const unsigned char *v) {                                              \
        for (int64_t i = 0; i < n; i++)                                                            \
            if (m[i * ms]) memcpy(o + i * os, v, N);                                               \
    }
DEF_FILL(1)
DEF_FILL(2)
DEF_FILL(4)
DEF_FILL(8)
DEF_FILL(16)

static trn_status fill_task(void *args) {
    const fill_args *a = args;
    trn_status st = trn__mem_access_begin(trn__offset_ptr(a->out, a->out_lo), (size_t)a->out_span);
    if (st != TRN_SUCCESS) return st;
    st = trn__mem_access_begin(trn__offset_ptr(a->mask, a->mask_lo), (size_t)a->mask_span);
    if (st == TRN_SUCCESS) {
        void (*row)(char *, int64_t, const char *, int64_t, int64_t, const unsigned char *) =
            a->es == 1   ? fill_row1
            : a->es == 2 ? fill_row2
            : a->es == 4 ? fill_row4
            : a->es == 8 ? fill_row8
                         : fill_row16;
        int64_t outer = 1, pos[TRN_INDEX_MAX_DIMS] = {0}, oo = 0, mo = 0;
        for (int d = 1; d < a->ndim; d++) outer *= a->sizes[d];
        for (int64_t it = 0; it < outer; it++) {
            row(a->out + oo, a->ostr[0], a->mask + mo, a->mstr[0], a->sizes[0], a->value);
            for (int d = 1; d < a->ndim; d++) {
                if (++pos[d] < a->sizes[d]) {
                    oo += a->ostr[d];
                    mo += a->mstr[d];
                    break;
                }
                pos[d] = 0;
                oo -= a->ostr[d] * (a->sizes[d] - 1);
                mo -= a->mstr[d] * (a->sizes[d] - 1);
            }
        }
        trn__mem_access_end(trn__offset_ptr(a->mask, a->mask_lo), (size_t)a->mask_span);
    }
    trn__mem_access_end(trn__offset_ptr(a->out, a->out_lo), (size_t)a->out_span);
    return st;
}

trn_status trn_mask_fill_launch(trn_stream *stream, const trn_mask_fill_desc *d) {
    if (stream == NULL || d == NULL || (unsigned)d->dtype >= TRN_DTYPE_COUNT || d->ndim < 0 ||
        d->ndim > TRN_INDEX_MAX_DIMS ||
        (d->ndim > 0 && (d->sizes == NULL || d->out_strides == NULL || d->mask_strides == NULL)))
        return trn__set_error(TRN_ERROR_INVALID_ARGUMENT,
                              "trn_mask_fill_launch: invalid descriptor");
    fill_args a;
    memset(&a, 0, sizeof a);
    int64_t numel = 1, ohi = 0, mhi = 0;
    a.ndim = d->ndim > 0 ? d->ndim : 1;
    a.sizes[0] = 1;
    for (int k = 0; k < d->ndim; k++) {
        if (d->sizes[k] < 0 || __builtin_mul_overflow(numel, d->sizes[k], &numel))
            return trn__set_error(TRN_ERROR_INVALID_ARGUMENT,
                                  "trn_mask_fill_launch: bad size in dim %d", k);
        a.sizes[k] = d->sizes[k];
        a.ostr[k] = d->out_strides[k];
        a.mstr[k] = d->mask_strides[k];
        if (!trn__extent_or_empty(a.sizes[k], a.ostr[k], 1, &a.out_lo, &ohi) ||
            !trn__extent_or_empty(a.sizes[k], a.mstr[k], 1, &a.mask_lo, &mhi))
            return trn__set_error(TRN_ERROR_INVALID_ARGUMENT,
                                  "trn_mask_fill_launch: strides overflow");
    }
    trn_status st = trn__fork_check();
    if (st != TRN_SUCCESS || numel == 0) return st;
    if (d->out == NULL || d->mask == NULL)
        return trn__set_error(TRN_ERROR_INVALID_ARGUMENT, "trn_mask_fill_launch: NULL pointer");
    a.out = d->out;
    a.mask = d->mask;
    a.es = trn_dtype_size(d->dtype);
    memcpy(a.value, d->value, sizeof a.value);
    a.out_span = ohi - a.out_lo + (int64_t)a.es;
    a.mask_span = mhi - a.mask_lo + 1;
    return trn_stream_launch(stream, fill_task, &a, sizeof a);
}

// ---- nonzero tests ------------------------------------------------------------------
// X(dtype, unsigned word type, words per element, mask of the sign bit)
#define NZ_DTYPES(X)                                                                               \
    X(TRN_DTYPE_BOOL, uint8_t, 1, 0)                                                               \
    X(TRN_DTYPE_U8, uint8_t, 1, 0)                                                                 \
    X(TRN_DTYPE_I8, uint8_t, 1, 0)                                                                 \
    X(TRN_DTYPE_I16, uint16_t, 1, 0)                                                               \
    X(TRN_DTYPE_I32, uint32_t, 1, 0)                                                               \
    X(TRN_DTYPE_I64, uint64_t, 1, 0)                                                               \
    X(TRN_DTYPE_U16, uint16_t, 1, 0)                                                               \
    X(TRN_DTYPE_U32, uint32_t, 1, 0)                                                               \
    X(TRN_DTYPE_U64, uint64_t, 1, 0)                                                               \
    X(TRN_DTYPE_F16, uint16_t, 1, 0x8000u)                                                         \
    X(TRN_DTYPE_BF16, uint16_t, 1, 0x8000u)                                                        \
    X(TRN_DTYPE_F32, uint32_t, 1, 0x80000000u)                                                     \
    X(TRN_DTYPE_F64, uint64_t, 1, 0x8000000000000000u)                                             \
    X(TRN_DTYPE_C64, uint32_t, 2, 0x80000000u)                                                     \
    X(TRN_DTYPE_C128, uint64_t, 2, 0x8000000000000000u)

// Scan arguments: a row-major strided tensor (strides converted to bytes)
// and, for masked_select, the source and the output.
typedef struct scan_args {
    int mode;  // 0 count, 1 nonzero, 2 masked_select
    trn_dtype dtype;
    int ndim;
    const char *data;
    int64_t data_lo, data_span;
    int64_t sizes[TRN_INDEX_MAX_DIMS], strides[TRN_INDEX_MAX_DIMS];
    // count: *count; nonzero: out coordinates; masked_select: src and out
    int64_t *count;
    int64_t expect;
    int64_t *coords;
    int64_t row_stride, col_stride;  // elements
    const char *src;
    int64_t src_lo, src_span, src_strides[TRN_INDEX_MAX_DIMS];
    char *out;
    int64_t out_stride;  // bytes
    size_t src_es;
    int64_t out_lo, out_span;
} scan_args;

#define DEF_NZ(dtype, W, NW, SIGN)                                                                 \
    static inline bool nz_##dtype(const char *p) {                                                 \
        W w[NW];                                                                                   \
        memcpy(w, p, sizeof w);                                                                    \
        bool any = false;                                                                          \
        for (int k = 0; k < NW; k++) any |= (w[k] & (W) ~(W)(SIGN)) != 0;                          \
        return any;                                                                                \
    }                                                                                              \
    static int64_t scan_##dtype(const scan_args *a) {                                              \
        const int nd = a->ndim;                                                                    \
        const int64_t n0 = a->sizes[nd - 1], s0 = a->strides[nd - 1];                              \
        const int64_t ss0 = a->src_strides[nd - 1];                                                \
        int64_t outer = 1, pos[TRN_INDEX_MAX_DIMS] = {0}, off = 0, soff = 0;                       \
        int64_t found = 0;                                                                         \
        for (int d = 0; d < nd - 1; d++) outer *= a->sizes[d];                                     \
        for (int64_t it = 0; it < outer; it++) {                                                   \
            const char *row = a->data + off;                                                       \
            if (a->mode == 0) {                                                                    \
                for (int64_t i = 0; i < n0; i++) found += nz_##dtype(row + i * s0);                \
            } else {                                                                               \
                for (int64_t i = 0; i < n0; i++) {                                                 \
                    if (!nz_##dtype(row + i * s0)) continue;                                       \
                    if (found == a->expect) return -1;                                             \
                    if (a->mode == 1) {                                                            \
                        int64_t *c = a->coords + found * a->row_stride;                            \
                        for (int d = 0; d < nd - 1; d++) c[d * a->col_stride] = pos[d];            \
                        c[(nd - 1) * a->col_stride] = i;                                           \
                    } else {                                                                       \
                        memcpy(a->out + found * a->out_stride, a->src + soff + i * ss0,            \
                               a->src_es);                                                         \
                    }                                                                              \
                    found++;                                                                       \
                }                                                                                  \
            }                                                                                      \
            for (int d = nd - 2; d >= 0; d--) {                                                    \
                if (++pos[d] < a->sizes[d]) {                                                      \
                    off += a->strides[d];                                                          \
                    soff += a->src_strides[d];                                                     \
                    break;                                                                         \
                }                                                                                  \
                pos[d] = 0;                                                                        \
                off -= a->strides[d] * (a->sizes[d] - 1);                                          \
                soff -= a->src_strides[d] * (a->sizes[d] - 1);                                     \
            }                                                                                      \
        }                                                                                          \
        return found;                                                                              \
    }
NZ_DTYPES(DEF_NZ)

static int64_t scan(const scan_args *a) {
    switch (a->dtype) {
#define NZ_CASE(dtype, W, NW, SIGN)                                                                \
    case dtype: return scan_##dtype(a);
        NZ_DTYPES(NZ_CASE)
#undef NZ_CASE
    default: return 0;
    }
}

static trn_status scan_task(void *args) {
    const scan_args *a = args;
    const void *out_base = a->mode == 1 ? (const void *)a->coords : (const void *)a->out;
    trn__access_set rg = {.count = 0};
    trn__access_add(&rg, trn__offset_ptr(a->data, a->data_lo), (size_t)a->data_span);
    if (a->mode == 2) trn__access_add(&rg, trn__offset_ptr(a->src, a->src_lo), (size_t)a->src_span);
    if (a->mode != 0 && a->expect > 0)
        trn__access_add(&rg, trn__offset_ptr(out_base, a->out_lo), (size_t)a->out_span);
    trn_status st = trn__access_begin(&rg);
    if (st == TRN_SUCCESS) {
        int64_t found = scan(a);
        if (a->mode == 0)
            *a->count = found;
        else if (found != a->expect)
            st = trn__set_error(TRN_ERROR_INVALID_ARGUMENT,
                                "%s: the number of nonzero elements changed "
                                "between counting (%lld) and writing",
                                a->mode == 1 ? "nonzero" : "masked_select", (long long)a->expect);
    }
    trn__access_end(&rg);
    return st;
}

// Clears the args and fills the scanned tensor's part; an error if invalid.
static trn_status scan_setup(scan_args *a, const trn_nz_tensor *t, const char *who,
                             int64_t *numel) {
    if (t == NULL || (unsigned)t->dtype >= TRN_DTYPE_COUNT || t->ndim < 0 ||
        t->ndim > TRN_INDEX_MAX_DIMS || (t->ndim > 0 && (t->sizes == NULL || t->strides == NULL)))
        return trn__set_error(TRN_ERROR_INVALID_ARGUMENT, "%s: invalid tensor", who);
    const int64_t es = (int64_t)trn_dtype_size(t->dtype);
    int64_t n = 1, hi = 0;
    memset(a, 0, sizeof *a);
    a->dtype = t->dtype;
    a->ndim = t->ndim > 0 ? t->ndim : 1;
    a->sizes[0] = 1;
    a->strides[0] = es;
    for (int d = 0; d < t->ndim; d++) {
        if (t->sizes[d] < 0 || __builtin_mul_overflow(n, t->sizes[d], &n) ||
            __builtin_mul_overflow(t->strides[d], es, &a->strides[d]) ||
            !trn__extent_or_empty(t->sizes[d], a->strides[d], 1, &a->data_lo, &hi))
            return trn__set_error(TRN_ERROR_INVALID_ARGUMENT, "%s: bad size or stride in dim %d",
                                  who, d);
        a->sizes[d] = t->sizes[d];
    }
    a->data = t->data;
    a->data_span = hi - a->data_lo + es;
    *numel = n;
    if (n > 0 && t->data == NULL)
        return trn__set_error(TRN_ERROR_INVALID_ARGUMENT, "%s: data is NULL", who);
    return trn__fork_check();
}

trn_status trn_count_nonzero_launch(trn_stream *stream, const trn_nz_tensor *t, int64_t *count) {
    static const char who[] = "trn_count_nonzero_launch";
    if (stream == NULL || count == NULL)
        return trn__set_error(TRN_ERROR_INVALID_ARGUMENT, "%s: NULL argument", who);
    scan_args a;
    int64_t n = 0;
    trn_status st = scan_setup(&a, t, who, &n);
    if (st != TRN_SUCCESS) return st;
    a.mode = 0;
    a.count = count;
    if (n == 0) a.sizes[0] = 0, a.ndim = 1;
    return trn_stream_launch(stream, scan_task, &a, sizeof a);
}

trn_status trn_nonzero_launch(trn_stream *stream, const trn_nz_tensor *t, int64_t count,
                              int64_t *out, int64_t out_row_stride, int64_t out_col_stride) {
    if (stream == NULL || count < 0 || (count > 0 && out == NULL))
        return trn__set_error(TRN_ERROR_INVALID_ARGUMENT, "trn_nonzero_launch: invalid output");
    scan_args a;
    int64_t n = 0;
    trn_status st = scan_setup(&a, t, "trn_nonzero_launch", &n);
    if (st != TRN_SUCCESS || n == 0 || count == 0) return st;
    a.mode = 1;
    a.expect = count;
    a.coords = out;
    a.row_stride = out_row_stride;
    a.col_stride = out_col_stride;
    int64_t hi = 0;
    if (!trn__extent_or_empty(count, out_row_stride * 8, 1, &a.out_lo, &hi) ||
        !trn__extent_or_empty(a.ndim, out_col_stride * 8, 1, &a.out_lo, &hi))
        return trn__set_error(TRN_ERROR_INVALID_ARGUMENT,
                              "trn_nonzero_launch: output strides overflow");
    a.out_span = hi - a.out_lo + 8;
    return trn_stream_launch(stream, scan_task, &a, sizeof a);
}

trn_status trn_masked_select_launch(trn_stream *stream, const trn_nz_tensor *src,
                                    const trn_nz_tensor *mask, int64_t count, void *out,
                                    int64_t out_stride) {
    if (stream == NULL || src == NULL || mask == NULL || count < 0 || (count > 0 && out == NULL) ||
        mask->ndim != src->ndim)
        return trn__set_error(TRN_ERROR_INVALID_ARGUMENT,
                              "trn_masked_select_launch: invalid arguments");
    scan_args a, s;
    int64_t n = 0, ns = 0;
    trn_status st = scan_setup(&a, mask, "trn_masked_select_launch", &n);
    if (st == TRN_SUCCESS) st = scan_setup(&s, src, "trn_masked_select_launch", &ns);
    if (st != TRN_SUCCESS || n == 0 || count == 0) return st;
    for (int d = 0; d < mask->ndim; d++)
        if (mask->sizes[d] != src->sizes[d])
            return trn__set_error(TRN_ERROR_INVALID_ARGUMENT,
                                  "trn_masked_select_launch: mask and src sizes differ");
    a.mode = 2;
    a.expect = count;
    a.src = s.data;
    a.src_lo = s.data_lo;
    a.src_span = s.data_span;
    memcpy(a.src_strides, s.strides, sizeof a.src_strides);
    a.src_es = trn_dtype_size(src->dtype);
    a.out = out;
    a.out_stride = out_stride * (int64_t)a.src_es;
    int64_t hi = 0;
    if (!trn__extent_or_empty(count, a.out_stride, 1, &a.out_lo, &hi))
        return trn__set_error(TRN_ERROR_INVALID_ARGUMENT,
                              "trn_masked_select_launch: output strides overflow");
    a.out_span = hi - a.out_lo + (int64_t)a.src_es;
    return trn_stream_launch(stream, scan_task, &a, sizeof a);
}
