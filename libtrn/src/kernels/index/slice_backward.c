// slice_backward.c - owns trn_slice_backward_launch: the gradient of a slice,
// a contiguous output that is zero except for the sliced rows, which take the
// gradient. Each output element is written once (the composite it replaces
// zero-filled the whole output, then copied the gradient over part of it).
//
// The output is walked as rows: out = [outer, D, inner] (contiguous), a row
// is the `inner` elements at one (outer, d). Consecutive rows of one kind
// become one run: a memset of zero rows, a copy of gradient rows (with step 1
// the slice's rows are one run, so a contiguous gradient is one memcpy per
// outer index). The gradient may have any strides (an expanded scalar has 0).
#include <stddef.h>
#include <string.h>

#include "../../internal.h"
#include "../kit/dims.h"
#include "trn/slice_backward.h"
#include "trn/parallel.h"

typedef struct sb_args {
    char *out;
    const char *grad;
    int64_t es, rows_per_outer, row_bytes;  // D, inner * es
    int64_t start, step, count, gdim;       // gdim: grad's byte stride along dim
    int64_t outer, out_bytes, grad_lo, grad_span;
    int no, ni;  // coalesced outer dims (grad strides), inner dims (out, grad strides)
    int64_t osize[TRN_INDEX_MAX_DIMS], ostr[TRN_INDEX_MAX_DIMS];
    int64_t isize[TRN_INDEX_MAX_DIMS], istr_out[TRN_INDEX_MAX_DIMS], istr_grad[TRN_INDEX_MAX_DIMS];
} sb_args;
_Static_assert(sizeof(sb_args) <= TRN_TASK_MAX_ARGS, "slice_backward args too large");

// Output bytes below which one thread does the whole launch (a piece of a
// parallel launch is at least half this).
#define PAR_BYTES ((int64_t)256 * 1024)

// One element of es bytes: a fixed-size memcpy the compiler turns into a move.
static inline void copy_elem(char *dst, const char *src, int64_t es) {
    switch (es) {
    case 1: memcpy(dst, src, 1); break;
    case 2: memcpy(dst, src, 2); break;
    case 4: memcpy(dst, src, 4); break;
    case 8: memcpy(dst, src, 8); break;
    case 16: memcpy(dst, src, 16); break;
    default: memcpy(dst, src, (size_t)es); break;
    }
}

// One gradient row (inner dims) into a contiguous output row.
static void copy_row(const sb_args *a, char *dst, const char *src) {
    const int n = a->ni, last = n - 1;
    const int64_t es = a->es, len = a->isize[last], ss = a->istr_grad[last];
    int64_t idx[TRN_INDEX_MAX_DIMS] = {0}, doff = 0, soff = 0;
    do {
        char *d = dst + doff;
        const char *s = src + soff;
        if (ss == es) {
            memcpy(d, s, (size_t)(len * es));
        } else {
            for (int64_t i = 0; i < len; i++) copy_elem(d + i * es, s + i * ss, es);
        }
    } while (
        trn_kit_odo_next(last, a->isize, idx, a->istr_out, &doff, a->istr_grad, &soff, NULL, NULL));
}

// The grad byte offset of outer index o (its coalesced outer dims).
static int64_t outer_offset(const sb_args *a, int64_t o, int64_t *idx) {
    int64_t off = 0;
    for (int k = a->no - 1; k >= 0; k--) {
        idx[k] = o % a->osize[k];
        o /= a->osize[k];
        off += idx[k] * a->ostr[k];
    }
    return off;
}

// Rows [b, e) of the flattened (outer, d) space.
static void sb_piece(void *ctx, int64_t b, int64_t e) {
    const sb_args *a = ctx;
    const int64_t D = a->rows_per_outer, rb = a->row_bytes, step = a->step;
    const int64_t first = a->start, stop = a->count > 0 ? a->start + (a->count - 1) * step + 1 : 0;
    // Inner rows gradient-contiguous: a run of rows k..k+cnt is one memcpy
    // when the gradient's rows follow each other too.
    const bool row_flat = a->ni == 1 && a->istr_grad[0] == a->es;
    const bool run_flat = row_flat && a->gdim == rb && step == 1;
    int64_t idx[TRN_INDEX_MAX_DIMS];
    int64_t o = b / D, d = b % D;
    int64_t goff = outer_offset(a, o, idx);
    int64_t r = b;
    while (r < e) {
        const int64_t dend = d + (e - r < D - d ? e - r : D - d);  // rows of this outer left
        char *dst = a->out + r * rb;
        int64_t cnt;
        if (d < first || d >= stop || (step > 1 && (d - first) % step != 0)) {
            // zero rows up to the next slice row (or the end of this outer)
            int64_t next = D;
            if (d < first)
                next = first;
            else if (d < stop)
                next = first + ((d - first) / step + 1) * step;
            if (next > dend) next = dend;
            cnt = next - d;
            memset(dst, 0, (size_t)(cnt * rb));
        } else {
            const int64_t k = (d - first) / step;
            const char *src = a->grad + goff + k * a->gdim;
            cnt = step == 1 ? (stop < dend ? stop : dend) - d : 1;
            if (run_flat) {
                memcpy(dst, src, (size_t)(cnt * rb));
            } else if (row_flat) {
                for (int64_t i = 0; i < cnt; i++)
                    memcpy(dst + i * rb, src + i * a->gdim, (size_t)rb);
            } else {
                for (int64_t i = 0; i < cnt; i++) copy_row(a, dst + i * rb, src + i * a->gdim);
            }
        }
        r += cnt;
        d += cnt;
        if (d == D && r < e) {
            d = 0;
            o++;
            // next outer index: the odometer over the outer dims
            for (int k = a->no - 1; k >= 0; k--) {
                if (++idx[k] < a->osize[k]) {
                    goff += a->ostr[k];
                    break;
                }
                goff -= a->ostr[k] * (a->osize[k] - 1);
                idx[k] = 0;
            }
        }
    }
}

static trn_status sb_task(void *args) {
    const sb_args *a = args;
    trn_status st = trn__mem_access_begin(a->out, (size_t)a->out_bytes);
    if (st != TRN_SUCCESS) return st;
    if (a->count > 0) st = trn__mem_access_begin(a->grad + a->grad_lo, (size_t)a->grad_span);
    if (st == TRN_SUCCESS) {
        const int64_t rows = a->outer * a->rows_per_outer;
        if (a->out_bytes < 2 * PAR_BYTES) {
            sb_piece((void *)a, 0, rows);
        } else {
            const int64_t grain = a->row_bytes >= PAR_BYTES ? 1 : PAR_BYTES / a->row_bytes;
            trn_parallel_for(rows, grain, sb_piece, (void *)a);
        }
        if (a->count > 0) trn__mem_access_end(a->grad + a->grad_lo, (size_t)a->grad_span);
    }
    trn__mem_access_end(a->out, (size_t)a->out_bytes);
    return st;
}

static trn_status bad(const char *what) {
    return trn__set_error(TRN_ERROR_INVALID_ARGUMENT, "trn_slice_backward_launch: %s", what);
}

trn_status trn_slice_backward_launch(trn_stream *stream, const trn_slice_backward_desc *d) {
    if (stream == NULL || d == NULL) return bad("stream or descriptor is NULL");
    if ((unsigned)d->dtype >= TRN_DTYPE_COUNT || d->ndim < 1 || d->ndim > TRN_INDEX_MAX_DIMS ||
        d->dim < 0 || d->dim >= d->ndim || d->sizes == NULL || d->step < 1 || d->start < 0 ||
        d->count < 0 || (d->count > 0 && d->grad_strides == NULL))
        return bad("invalid descriptor");
    const int nd = d->ndim, dim = d->dim;
    const int64_t es = (int64_t)trn_dtype_size(d->dtype);
    const int64_t D = d->sizes[dim];
    if (D < 0) return bad("negative size");
    if (d->count > 0 && (d->start >= D || (D - 1 - d->start) / d->step < d->count - 1))
        return bad("slice outside the output");
    sb_args a;
    memset(&a, 0, sizeof a);
    int64_t outer = 1, inner = 1, numel;
    for (int k = 0; k < nd; k++) {
        if (d->sizes[k] < 0) return bad("negative size");
        int64_t *p = k < dim ? &outer : &inner;
        if (k != dim && __builtin_mul_overflow(*p, d->sizes[k], p)) return bad("size overflow");
    }
    if (__builtin_mul_overflow(outer, D, &numel) || __builtin_mul_overflow(numel, inner, &numel) ||
        __builtin_mul_overflow(numel, es, &a.out_bytes))
        return bad("size overflow");
    trn_status st = trn__fork_check();
    if (st != TRN_SUCCESS || numel == 0) return st;
    if (d->out == NULL || (d->count > 0 && d->grad == NULL)) return bad("out or grad is NULL");

    // The gradient's byte range, its outer dims (coalesced by its strides
    // alone: the output's outer offset is o * D * inner) and its inner dims
    // (coalesced with the output's contiguous strides).
    int64_t glo = 0, ghi = 0;
    trn_kit_dims od, id;
    trn_kit_dims_init(&od, 1);
    trn_kit_dims_init(&id, 2);
    int64_t ostrides[TRN_INDEX_MAX_DIMS];  // out's byte strides of the inner dims
    for (int k = nd - 1; k > dim; k--)
        ostrides[k] = k == nd - 1 ? es : ostrides[k + 1] * d->sizes[k + 1];
    for (int k = 0; k < nd; k++) {
        const int64_t sz = k == dim ? d->count : d->sizes[k];
        int64_t gs = 0, r = 0;
        if (d->count > 0) {
            if (__builtin_mul_overflow(d->grad_strides[k], es, &gs) ||
                (sz > 0 && __builtin_mul_overflow(gs, sz - 1, &r)))
                return bad("grad stride overflow");
            if (r < 0)
                glo += r;
            else
                ghi += r;
        }
        if (k < dim) {
            trn_kit_dims_push(&od, sz, &gs);
        } else if (k == dim) {
            a.gdim = gs;
        } else {
            const int64_t s[2] = {ostrides[k], gs};
            trn_kit_dims_push(&id, sz, s);
        }
    }
    trn_kit_dims_finish(&od, (const int64_t[]){0});
    trn_kit_dims_finish(&id, (const int64_t[]){es, es});
    a.out = d->out;
    a.grad = d->grad;
    a.es = es;
    a.rows_per_outer = D;
    a.row_bytes = inner * es;
    a.start = d->start;
    a.step = d->step;
    a.count = d->count;
    a.outer = outer;
    a.grad_lo = glo;
    a.grad_span = ghi - glo + es;
    a.no = od.n;
    a.ni = id.n;
    memcpy(a.osize, od.size, sizeof(int64_t) * (size_t)od.n);
    memcpy(a.ostr, od.stride[0], sizeof(int64_t) * (size_t)od.n);
    memcpy(a.isize, id.size, sizeof(int64_t) * (size_t)id.n);
    memcpy(a.istr_out, id.stride[0], sizeof(int64_t) * (size_t)id.n);
    memcpy(a.istr_grad, id.stride[1], sizeof(int64_t) * (size_t)id.n);
    return trn_stream_launch(stream, sb_task, &a, sizeof a);
}
