// scan.c - owns the cumulative sum/product kernel (trn/reduce.h). Loops are
// generated per dtype; floating dtypes accumulate in double and integers in
// 64-bit wrapping arithmetic, as PyTorch CPU does. Two loop shapes: a column
// loop when the scanned dim is an outer one and the innermost other dim is
// contiguous on both sides (a vector of running values folds whole rows),
// else one sequential strided scan per line.
// Selects on float compares (NaN-propagating max, the inline expf) only
// if-convert into vector blends when compares may be assumed not to trap;
// results are unchanged (the FP environment's flags are never read).
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("no-trapping-math")
#endif
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "../kit/dims.h"
#include "../kit/launch.h"
#include "trn/convert.h"
#include "trn/parallel.h"
#include "trn/reduce.h"

#define COLS 1024

typedef struct scan_args {
    trn_scan_op op;
    trn_dtype dtype;
    const char *in;
    char *out;
    int64_t len, in_stride, out_stride;
    int64_t lo[2], span[2];  // [0] out, [1] in
    int n_outer;
    int64_t dims[3 * TRN_MAX_DIMS];  // sizes, in strides, out strides
} scan_args;

_Static_assert(sizeof(scan_args) <= TRN_TASK_MAX_ARGS, "scan args too large");

#define LD_id(v) (v)
#define LD_f16(v) trn_half_to_float(v)
#define LD_bf16(v) trn_bf16_to_float(v)
#define ST_f16(v) trn_float_to_half((float)(v))
#define ST_bf16(v) trn_float_to_bf16((float)(v))
#define ST_f(T) (T)
#define ST_b8(v) ((uint8_t)((v) != 0))

#define ADD(a, b) ((a) + (b))
#define MUL(a, b) ((a) * (b))

#define DEFINE_SCAN(N, T, A, LD, ST)                                                               \
    static void scan_##N(const scan_args *a) {                                                     \
        const int add = a->op == TRN_SCAN_CUMSUM;                                                  \
        const T *in = (const T *)(const void *)a->in;                                              \
        T *out = (T *)(void *)a->out;                                                              \
        const int no = a->n_outer;                                                                 \
        const int64_t *os = a->dims, *osi = a->dims + no, *oso = a->dims + 2 * no;                 \
        const int64_t len = a->len, is = a->in_stride, ost = a->out_stride;                        \
        int64_t idx[TRN_MAX_DIMS] = {0}, ioff = 0, ooff = 0;                                       \
        if (no >= 1 && osi[no - 1] == 1 && oso[no - 1] == 1 && os[no - 1] >= 8 && is != 1) {       \
            A acc[COLS];                                                                           \
            const int64_t wtot = os[no - 1];                                                       \
            do {                                                                                   \
                for (int64_t j0 = 0; j0 < wtot; j0 += COLS) {                                      \
                    const int64_t w = wtot - j0 < COLS ? wtot - j0 : COLS;                         \
                    for (int64_t j = 0; j < w; j++) acc[j] = add ? 0 : 1;                          \
                    for (int64_t i = 0; i < len; i++) {                                            \
                        const T *x = in + ioff + j0 + i * is;                                      \
                        T *y = out + ooff + j0 + i * ost;                                          \
                        if (add)                                                                   \
                            for (int64_t j = 0; j < w; j++) {                                      \
                                acc[j] = ADD(acc[j], (A)LD(x[j]));                                 \
                                y[j] = ST(acc[j]);                                                 \
                            }                                                                      \
                        else                                                                       \
                            for (int64_t j = 0; j < w; j++) {                                      \
                                acc[j] = MUL(acc[j], (A)LD(x[j]));                                 \
                                y[j] = ST(acc[j]);                                                 \
                            }                                                                      \
                    }                                                                              \
                }                                                                                  \
            } while (trn_kit_odo_next(no - 1, os, idx, osi, &ioff, oso, &ooff, NULL, NULL));       \
            return;                                                                                \
        }                                                                                          \
        do {                                                                                       \
            const T *x = in + ioff;                                                                \
            T *y = out + ooff;                                                                     \
            A acc = add ? 0 : 1;                                                                   \
            if (add)                                                                               \
                for (int64_t i = 0; i < len; i++) {                                                \
                    acc = ADD(acc, (A)LD(x[i * is]));                                              \
                    y[i * ost] = ST(acc);                                                          \
                }                                                                                  \
            else                                                                                   \
                for (int64_t i = 0; i < len; i++) {                                                \
                    acc = MUL(acc, (A)LD(x[i * is]));                                              \
                    y[i * ost] = ST(acc);                                                          \
                }                                                                                  \
        } while (trn_kit_odo_next(no, os, idx, osi, &ioff, oso, &ooff, NULL, NULL));               \
    }

#define ST_u8(v) ((uint8_t)(v))
#define ST_i8(v) ((int8_t)(v))
#define ST_i16(v) ((int16_t)(v))
#define ST_i32(v) ((int32_t)(v))
#define ST_i64(v) ((int64_t)(v))
#define ST_u16(v) ((uint16_t)(v))
#define ST_u32(v) ((uint32_t)(v))
#define ST_u64(v) ((uint64_t)(v))
#define ST_f32(v) ((float)(v))
#define ST_f64(v) ((double)(v))

#define SCAN_DTYPES(X)                                                                             \
    X(TRN_DTYPE_BOOL, b8, uint8_t, uint64_t, LD_id, ST_b8)                                         \
    X(TRN_DTYPE_U8, u8, uint8_t, uint64_t, LD_id, ST_u8)                                           \
    X(TRN_DTYPE_I8, i8, int8_t, uint64_t, LD_id, ST_i8)                                            \
    X(TRN_DTYPE_I16, i16, int16_t, uint64_t, LD_id, ST_i16)                                        \
    X(TRN_DTYPE_I32, i32, int32_t, uint64_t, LD_id, ST_i32)                                        \
    X(TRN_DTYPE_I64, i64, int64_t, uint64_t, LD_id, ST_i64)                                        \
    X(TRN_DTYPE_U16, u16, uint16_t, uint64_t, LD_id, ST_u16)                                       \
    X(TRN_DTYPE_U32, u32, uint32_t, uint64_t, LD_id, ST_u32)                                       \
    X(TRN_DTYPE_U64, u64, uint64_t, uint64_t, LD_id, ST_u64)                                       \
    X(TRN_DTYPE_F16, f16, uint16_t, double, LD_f16, ST_f16)                                        \
    X(TRN_DTYPE_BF16, bf16, uint16_t, double, LD_bf16, ST_bf16)                                    \
    X(TRN_DTYPE_F32, f32, float, double, LD_id, ST_f32)                                            \
    X(TRN_DTYPE_F64, f64, double, double, LD_id, ST_f64)

#define DEFINE_ONE(E, N, T, A, LD, ST) DEFINE_SCAN(N, T, A, LD, ST)
SCAN_DTYPES(DEFINE_ONE)

typedef void (*scan_fn)(const scan_args *);

static scan_fn pick(trn_dtype d) {
    switch (d) {
#define CASE(E, N, T, A, LD, ST)                                                                   \
    case E: return scan_##N;
        SCAN_DTYPES(CASE)
#undef CASE
    default: return NULL;
    }
}

int trn_scan_supports(trn_scan_op op, trn_dtype dtype) {
    return (op == TRN_SCAN_CUMSUM || op == TRN_SCAN_CUMPROD) && (unsigned)dtype < TRN_DTYPE_COUNT &&
           pick(dtype) != NULL;
}

// Lines are independent: a big scan is split across threads along its
// largest outer dim (pieces of at least PAR_ELEMS elements), each piece a
// scan of its own; every line is computed exactly as unsplit.
#define PAR_ELEMS 65536

typedef struct split_ctx {
    const scan_args *a;
    scan_fn fn;
    int k;
} split_ctx;

static void split_piece(void *ctx, int64_t b, int64_t e) {
    const split_ctx *c = ctx;
    const scan_args *a = c->a;
    const int no = a->n_outer;
    scan_args sub;
    memcpy(&sub, a, offsetof(scan_args, dims) + (size_t)(3 * no) * sizeof(int64_t));
    const int64_t es = (int64_t)trn_dtype_size(a->dtype);
    sub.dims[c->k] = e - b;
    sub.in = a->in + b * a->dims[no + c->k] * es;
    sub.out = a->out + b * a->dims[2 * no + c->k] * es;
    c->fn(&sub);
}

static trn_status scan_run(const void *args) {
    const scan_args *a = args;
    const scan_fn fn = pick(a->dtype);
    int k = 0;
    int64_t lines = 1;
    for (int d = 0; d < a->n_outer; d++) {
        lines *= a->dims[d];
        if (a->dims[d] > a->dims[k]) k = d;
    }
    if (a->n_outer < 1 || lines < 2 || lines * a->len < 2 * PAR_ELEMS) {
        fn(a);
        return TRN_SUCCESS;
    }
    const int64_t unit = lines / a->dims[k] * a->len;
    split_ctx c = {a, fn, k};
    trn_parallel_for(a->dims[k], unit >= PAR_ELEMS ? 1 : PAR_ELEMS / unit, split_piece, &c);
    return TRN_SUCCESS;
}

static trn_status scan_task(void *args) {
    const scan_args *a = args;
    return trn__access_run(scan_run, a, 2, (const void *[]){a->out, a->in}, a->lo, a->span);
}

static trn_status bad(const char *what) {
    return trn__set_error(TRN_ERROR_INVALID_ARGUMENT, "trn_scan_launch: %s", what);
}

trn_status trn_scan_launch(trn_stream *stream, const trn_scan_desc *d) {
    if (stream == NULL || d == NULL) return bad("stream or descriptor is NULL");
    if (!trn_scan_supports(d->op, d->dtype))
        return trn__set_error(TRN_ERROR_UNSUPPORTED,
                              "trn_scan_launch: op %d on %s is not supported", (int)d->op,
                              trn_dtype_name(d->dtype));
    if (d->outer_ndim < 0 || d->outer_ndim > TRN_MAX_DIMS) return bad("ndim outside 0..64");
    if (d->outer_ndim > 0 && (!d->outer_sizes || !d->in_outer_strides || !d->out_outer_strides))
        return bad("sizes or strides are NULL");
    if (d->len < 0) return bad("negative length");
    trn_status st = trn__fork_check();
    if (st != TRN_SUCCESS) return st;
    scan_args a;
    memset(&a, 0, offsetof(scan_args, dims));
    a.op = d->op;
    a.dtype = d->dtype;
    const int64_t es = (int64_t)trn_dtype_size(d->dtype);
    trn_kit_dims dims;
    trn_kit_dims_init(&dims, 2);
    int64_t total = d->len, in_hi = 0, out_hi = 0;
    for (int k = 0; k < d->outer_ndim; k++) {
        const int64_t s = d->outer_sizes[k];
        if (s < 0) return bad("negative size");
        if (__builtin_mul_overflow(total, s, &total)) return bad("size overflows");
        if (s == 1) continue;
        if (d->out_outer_strides[k] == 0) return bad("output stride 0 on a dim of size > 1");
        if (s > 0 && (!trn__extent(s, d->in_outer_strides[k], es, &a.lo[1], &in_hi) ||
                      !trn__extent(s, d->out_outer_strides[k], es, &a.lo[0], &out_hi)))
            return bad("strides overflow the address space");
        trn_kit_dims_push(&dims, s,
                          (const int64_t[]){d->in_outer_strides[k], d->out_outer_strides[k]});
    }
    if (total == 0) return TRN_SUCCESS;
    if (d->len > 1 && d->out_stride == 0) return bad("output stride 0 on the scanned dim");
    if (!trn__extent(d->len, d->in_stride, es, &a.lo[1], &in_hi) ||
        !trn__extent(d->len, d->out_stride, es, &a.lo[0], &out_hi))
        return bad("strides overflow the address space");
    if (d->in == NULL || d->out == NULL) return bad("a data pointer is NULL");
    trn_kit_dims_finish(&dims, (const int64_t[]){1, 1});
    a.in = d->in;
    a.out = d->out;
    a.len = d->len;
    a.in_stride = d->in_stride;
    a.out_stride = d->out_stride;
    a.span[1] = in_hi - a.lo[1] + es;
    a.span[0] = out_hi - a.lo[0] + es;
    a.n_outer = dims.n;
    const size_t size = (size_t)((char *)trn_kit_dims_pack(&dims, a.dims) - (char *)&a);
    return trn_stream_launch(stream, scan_task, &a, size);
}
