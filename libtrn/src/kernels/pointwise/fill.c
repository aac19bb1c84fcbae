// fill.c - owns the creation kernels of trn/fill.h: fill (any strided view,
// value from the host or from device memory), arange/linspace and
// tril/triu. Fill and tril/triu only move bytes, so they are generated per
// element size, not per dtype; ranges are generated per dtype.
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "../kit/dims.h"
#include "../kit/launch.h"
#include "trn/convert.h"
#include "trn/fill.h"
#include "trn/parallel.h"

#define GRAIN (64 * 1024)  // elements per parallel piece

static trn_status bad(const char *fn, const char *what) {
    return trn__set_error(TRN_ERROR_INVALID_ARGUMENT, "%s: %s", fn, what);
}

// ---- fill -----------------------------------------------------------------------

typedef struct fill_args {
    char *out;
    const void *value_ptr;
    unsigned char value[16];
    int64_t esize;
    int64_t lo, span;
    int ndim;
    int64_t dims[2 * TRN_MAX_DIMS];  // sizes, strides (elements)
} fill_args;

_Static_assert(sizeof(fill_args) <= TRN_TASK_MAX_ARGS, "fill args too large");

typedef struct elem16 {
    uint64_t a, b;
} elem16;

// n elements at p with element stride s (elements), value v of size es.
static void fill_run(char *p, int64_t s, int64_t n, const unsigned char *v, int64_t es) {
    if (s == 1) {
        int uniform = 1;
        for (int64_t b = 1; b < es; b++) uniform &= v[b] == v[0];
        if (uniform) {
            memset(p, v[0], (size_t)(n * es));
            return;
        }
    }
#define FILL_T(T)                                                                                  \
    do {                                                                                           \
        T x;                                                                                       \
        memcpy(&x, v, sizeof x);                                                                   \
        T *q = (T *)(void *)p;                                                                     \
        if (s == 1)                                                                                \
            for (int64_t i = 0; i < n; i++) q[i] = x;                                              \
        else                                                                                       \
            for (int64_t i = 0; i < n; i++) q[i * s] = x;                                          \
    } while (0)
    switch (es) {
    case 1: FILL_T(uint8_t); break;
    case 2: FILL_T(uint16_t); break;
    case 4: FILL_T(uint32_t); break;
    case 8: FILL_T(uint64_t); break;
    default: FILL_T(elem16); break;
    }
#undef FILL_T
}

typedef struct fill_ctx {
    const fill_args *a;
    const unsigned char *v;
} fill_ctx;

static void fill_piece(void *ctx, int64_t begin, int64_t end) {
    const fill_ctx *c = ctx;
    fill_run(c->a->out + begin * c->a->esize, 1, end - begin, c->v, c->a->esize);
}

static void fill_exec(const fill_args *a, const unsigned char *v) {
    const int nd = a->ndim;
    const int64_t *size = a->dims, *str = a->dims + nd;
    if (nd == 1 && str[0] == 1) {
        fill_ctx c = {a, v};
        trn_parallel_for(size[0], GRAIN, fill_piece, &c);
        return;
    }
    const int inner = nd - 1;
    int64_t outer = 1;
    for (int d = 0; d < inner; d++) outer *= size[d];
    int64_t idx[TRN_MAX_DIMS] = {0}, off = 0;
    for (int64_t it = 0; it < outer; it++) {
        fill_run(a->out + off * a->esize, str[inner], size[inner], v, a->esize);
        trn_kit_odo_next(inner, size, idx, str, &off, NULL, NULL, NULL, NULL);
    }
}

static trn_status fill_task(void *args) {
    const fill_args *a = args;
    unsigned char v[16];
    memcpy(v, a->value, sizeof v);
    if (a->value_ptr != NULL) {
        trn_status st = trn__mem_access_begin(a->value_ptr, (size_t)a->esize);
        if (st != TRN_SUCCESS) return st;
        memcpy(v, a->value_ptr, (size_t)a->esize);
        trn__mem_access_end(a->value_ptr, (size_t)a->esize);
    }
    const void *lo = trn__offset_ptr(a->out, a->lo);
    trn_status st = trn__mem_access_begin(lo, (size_t)a->span);
    if (st != TRN_SUCCESS) return st;
    fill_exec(a, v);
    trn__mem_access_end(lo, (size_t)a->span);
    return TRN_SUCCESS;
}

trn_status trn_fill_launch(trn_stream *stream, const trn_fill_desc *d) {
    static const char fn[] = "trn_fill_launch";
    if (stream == NULL || d == NULL) return bad(fn, "stream or descriptor is NULL");
    if ((unsigned)d->dtype >= TRN_DTYPE_COUNT) return bad(fn, "invalid dtype");
    if (d->ndim < 0 || d->ndim > TRN_MAX_DIMS) return bad(fn, "ndim outside 0..64");
    if (d->ndim > 0 && (d->sizes == NULL || d->strides == NULL))
        return bad(fn, "sizes or strides are NULL");
    fill_args a;
    memset(&a, 0, offsetof(fill_args, dims));
    a.esize = (int64_t)trn_dtype_size(d->dtype);
    trn_kit_dims dims;
    trn_kit_dims_init(&dims, 1);
    int64_t numel = 1, hi = 0;
    for (int k = 0; k < d->ndim; k++) {
        const int64_t s = d->sizes[k];
        if (s < 0) return bad(fn, "negative size");
        if (__builtin_mul_overflow(numel, s, &numel)) return bad(fn, "size overflows");
        if (s == 1) continue;
        if (s > 0 && d->strides[k] == 0) return bad(fn, "stride 0 on a dim of size > 1");
        if (s > 0 && !trn__extent(s, d->strides[k], a.esize, &a.lo, &hi))
            return bad(fn, "strides overflow the address space");
        trn_kit_dims_push(&dims, s, &d->strides[k]);
    }
    trn_status st = trn__fork_check();
    if (st != TRN_SUCCESS || numel == 0) return st;
    if (d->out == NULL) return bad(fn, "out is NULL");
    trn_kit_dims_finish(&dims, (const int64_t[]){1});
    a.out = d->out;
    a.value_ptr = d->value_ptr;
    memcpy(a.value, d->value, sizeof a.value);
    a.span = hi - a.lo + a.esize;
    a.ndim = dims.n;
    const int64_t *end = trn_kit_dims_pack(&dims, a.dims);
    return trn_stream_launch(stream, fill_task, &a, (size_t)((const char *)end - (const char *)&a));
}

// ---- arange / linspace ---------------------------------------------------------

typedef struct range_args {
    trn_range_desc d;
    int64_t lo, span;
} range_args;

typedef struct range_ctx {
    const trn_range_desc *d;
} range_ctx;

#define ST_f16(v) trn_float_to_half((float)(v))
#define ST_bf16(v) trn_float_to_bf16((float)(v))
#define ST_cast(T) (T)

// Integer dtypes: arange in int64 wrapping arithmetic, linspace in double.
#define DEFINE_RANGE_INT(N, T)                                                                     \
    static void range_##N(const trn_range_desc *d, int64_t b, int64_t e) {                         \
        T *o = (T *)d->out;                                                                        \
        const int64_t s = d->stride;                                                               \
        if (d->kind == TRN_RANGE_ARANGE) {                                                         \
            const uint64_t st = (uint64_t)d->istart, sp = (uint64_t)d->istep;                      \
            for (int64_t i = b; i < e; i++) o[i * s] = (T)(int64_t)(st + sp * (uint64_t)i);        \
            return;                                                                                \
        }                                                                                          \
        const int64_t n = d->n, half = n / 2;                                                      \
        const double start = d->start, end = d->end;                                               \
        const double step = (end - start) / (double)(n - 1);                                       \
        for (int64_t i = b; i < e; i++) {                                                          \
            const double v =                                                                       \
                i < half ? start + step * (double)i : end - step * (double)(n - i - 1);            \
            o[i * s] = (T)(int64_t)v;                                                              \
        }                                                                                          \
    }

// Floating dtypes: C is the arange accumulate type, L linspace's.
#define DEFINE_RANGE_FLT(N, T, C, L, ST)                                                           \
    static void range_##N(const trn_range_desc *d, int64_t b, int64_t e) {                         \
        T *o = (T *)d->out;                                                                        \
        const int64_t s = d->stride;                                                               \
        if (d->kind == TRN_RANGE_ARANGE) {                                                         \
            const C st = (C)d->start, sp = (C)d->step;                                             \
            for (int64_t i = b; i < e; i++) o[i * s] = ST(st + sp * (C)i);                         \
            return;                                                                                \
        }                                                                                          \
        const int64_t n = d->n, half = n / 2;                                                      \
        const L start = (L)d->start, end = (L)d->end;                                              \
        const L step = (end - start) / (L)(n - 1);                                                 \
        for (int64_t i = b; i < e; i++)                                                            \
            o[i * s] = ST(i < half ? start + step * (L)i : end - step * (L)(n - i - 1));           \
    }

DEFINE_RANGE_INT(u8, uint8_t)
DEFINE_RANGE_INT(i8, int8_t)
DEFINE_RANGE_INT(i16, int16_t)
DEFINE_RANGE_INT(i32, int32_t)
DEFINE_RANGE_INT(i64, int64_t)
DEFINE_RANGE_INT(u16, uint16_t)
DEFINE_RANGE_INT(u32, uint32_t)
DEFINE_RANGE_INT(u64, uint64_t)
DEFINE_RANGE_FLT(f16, uint16_t, float, float, ST_f16)
DEFINE_RANGE_FLT(bf16, uint16_t, float, float, ST_bf16)
DEFINE_RANGE_FLT(f32, float, double, float, ST_cast(float))
DEFINE_RANGE_FLT(f64, double, double, double, ST_cast(double))

typedef void (*range_fn)(const trn_range_desc *, int64_t, int64_t);

static range_fn range_pick(trn_dtype t) {
    switch (t) {
    case TRN_DTYPE_U8: return range_u8;
    case TRN_DTYPE_I8: return range_i8;
    case TRN_DTYPE_I16: return range_i16;
    case TRN_DTYPE_I32: return range_i32;
    case TRN_DTYPE_I64: return range_i64;
    case TRN_DTYPE_U16: return range_u16;
    case TRN_DTYPE_U32: return range_u32;
    case TRN_DTYPE_U64: return range_u64;
    case TRN_DTYPE_F16: return range_f16;
    case TRN_DTYPE_BF16: return range_bf16;
    case TRN_DTYPE_F32: return range_f32;
    case TRN_DTYPE_F64: return range_f64;
    default: return NULL;
    }
}

static void range_piece(void *ctx, int64_t b, int64_t e) {
    const trn_range_desc *d = ctx;
    range_pick(d->dtype)(d, b, e);
}

static trn_status range_task(void *args) {
    range_args *a = args;
    const void *lo = trn__offset_ptr(a->d.out, a->lo);
    trn_status st = trn__mem_access_begin(lo, (size_t)a->span);
    if (st != TRN_SUCCESS) return st;
    trn_parallel_for(a->d.n, GRAIN, range_piece, &a->d);
    trn__mem_access_end(lo, (size_t)a->span);
    return TRN_SUCCESS;
}

trn_status trn_range_launch(trn_stream *stream, const trn_range_desc *d) {
    static const char fn[] = "trn_range_launch";
    if (stream == NULL || d == NULL) return bad(fn, "stream or descriptor is NULL");
    if ((unsigned)d->dtype >= TRN_DTYPE_COUNT || range_pick(d->dtype) == NULL)
        return trn__set_error(TRN_ERROR_UNSUPPORTED, "%s: dtype %s is not supported", fn,
                              trn_dtype_name(d->dtype));
    if (d->kind != TRN_RANGE_ARANGE && d->kind != TRN_RANGE_LINSPACE)
        return bad(fn, "invalid kind");
    if (d->n < 0) return bad(fn, "negative length");
    trn_status st = trn__fork_check();
    if (st != TRN_SUCCESS || d->n == 0) return st;
    if (d->out == NULL) return bad(fn, "out is NULL");
    if (d->n > 1 && d->stride == 0) return bad(fn, "stride 0");
    range_args a;
    a.d = *d;
    const int64_t es = (int64_t)trn_dtype_size(d->dtype);
    int64_t hi = 0;
    a.lo = 0;
    if (!trn__extent(d->n, d->stride, es, &a.lo, &hi)) return bad(fn, "stride overflows");
    a.span = hi - a.lo + es;
    if (d->kind == TRN_RANGE_LINSPACE && d->n == 1) {  // just start
        a.d.kind = TRN_RANGE_ARANGE;                   // step would be 0/0
        a.d.istart = (d->start >= -0x1p63 && d->start < 0x1p63) ? (int64_t)d->start : 0;
        a.d.istep = 0;
        a.d.step = 0;
    }
    return trn_stream_launch(stream, range_task, &a, sizeof a);
}

// ---- tril / triu ------------------------------------------------------------------

typedef struct tri_args {
    int upper, in_place;
    int64_t diagonal, esize;
    const char *in;
    char *out;
    int64_t lo[2], span[2];  // [0] out, [1] in
    int nb;                  // batch dims
    int64_t rows, cols, in_rs, in_cs, out_rs, out_cs;
    int64_t dims[3 * TRN_MAX_DIMS];  // batch sizes, in strides, out strides
} tri_args;

_Static_assert(sizeof(tri_args) <= TRN_TASK_MAX_ARGS, "tri args too large");

static void copy_elems(char *dst, int64_t ds, const char *src, int64_t ss, int64_t n, int64_t es) {
    if (n <= 0) return;
    if (ds == 1 && ss == 1) {
        memcpy(dst, src, (size_t)(n * es));
        return;
    }
#define COPY_T(T)                                                                                  \
    do {                                                                                           \
        T *q = (T *)(void *)dst;                                                                   \
        const T *p = (const T *)(const void *)src;                                                 \
        for (int64_t i = 0; i < n; i++) q[i * ds] = p[i * ss];                                     \
    } while (0)
    switch (es) {
    case 1: COPY_T(uint8_t); break;
    case 2: COPY_T(uint16_t); break;
    case 4: COPY_T(uint32_t); break;
    case 8: COPY_T(uint64_t); break;
    default: COPY_T(elem16); break;
    }
#undef COPY_T
}

static void tri_rows(void *ctx, int64_t begin, int64_t end) {
    const tri_args *a = ctx;
    const int nb = a->nb;
    const int64_t *bs = a->dims, *bi = a->dims + nb, *bo = a->dims + 2 * nb;
    const int64_t es = a->esize;
    static const unsigned char zero[16];
    for (int64_t r = begin; r < end; r++) {
        int64_t row = r % a->rows, rest = r / a->rows, ioff = 0, ooff = 0;
        for (int d = nb - 1; d >= 0; d--) {
            const int64_t k = rest % bs[d];
            rest /= bs[d];
            ioff += k * bi[d];
            ooff += k * bo[d];
        }
        ioff += row * a->in_rs;
        ooff += row * a->out_rs;
        // Kept columns [kb, ke); the rest are zeroed.
        int64_t kb, ke;
        if (a->upper) {
            int64_t t = row + a->diagonal;
            kb = t < 0 ? 0 : (t > a->cols ? a->cols : t);
            ke = a->cols;
        } else {
            int64_t t = row + a->diagonal + 1;
            kb = 0;
            ke = t < 0 ? 0 : (t > a->cols ? a->cols : t);
        }
        char *o = a->out + ooff * es;
        const char *in = a->in + ioff * es;
        if (!a->in_place)
            copy_elems(o + kb * a->out_cs * es, a->out_cs, in + kb * a->in_cs * es, a->in_cs,
                       ke - kb, es);
        fill_run(o, a->out_cs, kb, zero, es);
        fill_run(o + ke * a->out_cs * es, a->out_cs, a->cols - ke, zero, es);
    }
}

static trn_status tri_run(const void *args) {
    tri_args *a = (tri_args *)args;
    int64_t total = a->rows;
    for (int d = 0; d < a->nb; d++) total *= a->dims[d];
    int64_t grain = GRAIN / (a->cols > 0 ? a->cols : 1);
    trn_parallel_for(total, grain > 0 ? grain : 1, tri_rows, a);
    return TRN_SUCCESS;
}

static trn_status tri_task(void *args) {
    const tri_args *a = args;
    return trn__access_run(tri_run, a, 2, (const void *[]){a->out, a->in}, a->lo, a->span);
}

trn_status trn_tri_launch(trn_stream *stream, const trn_tri_desc *d) {
    static const char fn[] = "trn_tri_launch";
    if (stream == NULL || d == NULL) return bad(fn, "stream or descriptor is NULL");
    if ((unsigned)d->dtype >= TRN_DTYPE_COUNT) return bad(fn, "invalid dtype");
    if (d->ndim < 2 || d->ndim > TRN_MAX_DIMS) return bad(fn, "ndim outside 2..64");
    if (d->sizes == NULL || d->in_strides == NULL || d->out_strides == NULL)
        return bad(fn, "sizes or strides are NULL");
    tri_args a;
    memset(&a, 0, offsetof(tri_args, dims));
    a.esize = (int64_t)trn_dtype_size(d->dtype);
    int64_t numel = 1, ihi = 0, ohi = 0;
    int nb = 0;
    int64_t bsz[TRN_MAX_DIMS], bin[TRN_MAX_DIMS], bout[TRN_MAX_DIMS];
    for (int k = 0; k < d->ndim; k++) {
        const int64_t s = d->sizes[k];
        if (s < 0) return bad(fn, "negative size");
        if (__builtin_mul_overflow(numel, s, &numel)) return bad(fn, "size overflows");
    }
    trn_status st = trn__fork_check();
    if (st != TRN_SUCCESS || numel == 0) return st;
    for (int k = 0; k < d->ndim; k++) {
        const int64_t s = d->sizes[k];
        if (s > 1 && d->out_strides[k] == 0) return bad(fn, "output stride 0 on a dim of size > 1");
        if (!trn__extent(s, d->in_strides[k], a.esize, &a.lo[1], &ihi) ||
            !trn__extent(s, d->out_strides[k], a.esize, &a.lo[0], &ohi))
            return bad(fn, "strides overflow the address space");
        if (k < d->ndim - 2 && s != 1) {
            bsz[nb] = s;
            bin[nb] = d->in_strides[k];
            bout[nb] = d->out_strides[k];
            nb++;
        }
    }
    if (d->in == NULL || d->out == NULL) return bad(fn, "a data pointer is NULL");
    a.upper = d->upper != 0;
    a.in = d->in;
    a.out = d->out;
    a.span[1] = ihi - a.lo[1] + a.esize;
    a.span[0] = ohi - a.lo[0] + a.esize;
    const int r = d->ndim - 2, c = d->ndim - 1;
    a.rows = d->sizes[r];
    a.cols = d->sizes[c];
    // Any diagonal beyond [-rows - 1, cols] keeps or zeroes whole rows, as
    // the clamped one does; clamping keeps row + diagonal + 1 from
    // overflowing for diagonals near +-2^63.
    a.diagonal = d->diagonal > a.cols        ? a.cols
                 : d->diagonal < -a.rows - 1 ? -a.rows - 1
                                             : d->diagonal;
    a.in_rs = d->in_strides[r];
    a.in_cs = d->in_strides[c];
    a.out_rs = d->out_strides[r];
    a.out_cs = d->out_strides[c];
    a.in_place = d->in == d->out && a.in_rs == a.out_rs && a.in_cs == a.out_cs;
    for (int k = 0; k < nb && a.in_place; k++) a.in_place = bin[k] == bout[k];
    a.nb = nb;
    memcpy(a.dims, bsz, (size_t)nb * 8);
    memcpy(a.dims + nb, bin, (size_t)nb * 8);
    memcpy(a.dims + 2 * nb, bout, (size_t)nb * 8);
    return trn_stream_launch(stream, tri_task, &a, offsetof(tri_args, dims) + 3 * (size_t)nb * 8);
}
