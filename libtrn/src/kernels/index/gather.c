// gather.c - owns trn_index_launch (descriptor validation, argument packing,
// the task) and the gather loops: index_select, gather, advanced indexing
// and embedding all become "out[it] = src[it + index offsets]". Scatter
// descriptors are handed to scatter.c. Elements are moved as bytes, one
// loop per element size (no per-element dtype switch); contiguous rows whose
// index offset is constant along the row are copied with memcpy.
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include "../kit/dims.h"
#include "../kit/launch.h"
#include "index_impl.h"
#include "trn/parallel.h"

TRN__INDEX_DRIVER(gather1, 0, 1, TRN__INDEX_MOVE1, 1, )
TRN__INDEX_DRIVER(gather2, 0, 2, TRN__INDEX_MOVE2, 1, )
TRN__INDEX_DRIVER(gather4, 0, 4, TRN__INDEX_MOVE4, 1, )
TRN__INDEX_DRIVER(gather8, 0, 8, TRN__INDEX_MOVE8, 1, )
TRN__INDEX_DRIVER(gather16, 0, 16, TRN__INDEX_MOVE16, 1, )

// A big gather is split across threads along trn_kit_split_dim's dim (whole
// rows per piece; pieces of at least PAR_ELEMS elements), each piece a
// gather of its own. An index error in a piece is reported by rerunning the
// whole gather on this thread (same result: the first bad index in order,
// its message in this thread's error).
#define PAR_ELEMS 65536
#define SPLIT_MIN_SIZE 8

typedef trn_status (*gather_fn)(const index_args *, const char *, int64_t *);

typedef struct gather_ctx {
    const index_args *a;
    const char *src0;
    gather_fn fn;
    int k;
    _Atomic int failed;
} gather_ctx;

static void gather_piece(void *ctx, int64_t b, int64_t e) {
    gather_ctx *c = ctx;
    const index_args *a = c->a;
    index_args sub = *a;
    const int k = c->k;
    sub.sizes[k] = e - b;
    sub.out = a->out + b * a->ostr[k];
    for (int j = 0; j < a->nidx; j++) sub.idx[j] = a->idx[j] + b * a->xstr[j][k];
    if (c->fn(&sub, c->src0 + b * a->sstr[k], NULL) != TRN_SUCCESS) c->failed = 1;
}

static trn_status gather_run(const index_args *a, const char *src0, gather_fn fn) {
    const int k = trn_kit_split_dim(a->ndim, a->sizes, SPLIT_MIN_SIZE);
    int64_t numel = 1;
    for (int d = 0; d < a->ndim; d++) numel *= a->sizes[d];
    if (numel < 2 * PAR_ELEMS) return fn(a, src0, NULL);
    const int64_t unit = numel / a->sizes[k];
    gather_ctx c = {a, src0, fn, k, 0};
    trn_parallel_for(a->sizes[k], unit >= PAR_ELEMS ? 1 : PAR_ELEMS / unit, gather_piece, &c);
    return c.failed ? fn(a, src0, NULL) : TRN_SUCCESS;
}

static trn_status index_task(void *args) {
    const index_args *a = args;
    const char *src0 = a->src_scalar ? (const char *)a->value : a->src;
    trn_status st = TRN_SUCCESS;
    int opened = 0;  // ranges opened: 0 out, 1 src, 2.. indices
    const int nranges = 2 + a->nidx;
    for (; opened < nranges; opened++) {
        if (opened == 0)
            st = trn__mem_access_begin(trn__offset_ptr(a->out, a->out_lo), (size_t)a->out_span);
        else if (opened == 1)
            st = a->src_scalar ? TRN_SUCCESS
                               : trn__mem_access_begin(trn__offset_ptr(a->src, a->src_lo),
                                                       (size_t)a->src_span);
        else
            st = trn__mem_access_begin(trn__offset_ptr(a->idx[opened - 2], a->idx_lo[opened - 2]),
                                       (size_t)a->idx_span[opened - 2]);
        if (st != TRN_SUCCESS) break;
    }
    if (st == TRN_SUCCESS) {
        if (a->scatter) {
            st = trn__scatter_run(a, src0);
        } else {
            switch (trn_dtype_size(a->dtype)) {
            case 1: st = gather_run(a, src0, gather1); break;
            case 2: st = gather_run(a, src0, gather2); break;
            case 4: st = gather_run(a, src0, gather4); break;
            case 8: st = gather_run(a, src0, gather8); break;
            default: st = gather_run(a, src0, gather16); break;
            }
        }
    }
    while (opened-- > 0) {
        if (opened == 0)
            trn__mem_access_end(trn__offset_ptr(a->out, a->out_lo), (size_t)a->out_span);
        else if (opened == 1) {
            if (!a->src_scalar)
                trn__mem_access_end(trn__offset_ptr(a->src, a->src_lo), (size_t)a->src_span);
        } else
            trn__mem_access_end(trn__offset_ptr(a->idx[opened - 2], a->idx_lo[opened - 2]),
                                (size_t)a->idx_span[opened - 2]);
    }
    return st;
}

// ---- launch -------------------------------------------------------------------

static trn_status bad(const char *what) {
    return trn__set_error(TRN_ERROR_INVALID_ARGUMENT, "trn_index_launch: %s", what);
}

trn_status trn_index_launch(trn_stream *stream, const trn_index_desc *desc) {
    if (stream == NULL || desc == NULL) return bad("stream or descriptor is NULL");
    const int nd = desc->ndim, nk = desc->nidx;
    if ((unsigned)desc->dtype >= TRN_DTYPE_COUNT) return bad("invalid dtype");
    if (nd < 0 || nk < 0) return bad("negative ndim or index count");
    if (nd > TRN_INDEX_MAX_DIMS || nk > TRN_INDEX_MAX_INDICES)
        return trn__set_error(TRN_ERROR_UNSUPPORTED,
                              "trn_index_launch: %d dims / %d indices exceed the "
                              "limits (%d / %d)",
                              nd, nk, TRN_INDEX_MAX_DIMS, TRN_INDEX_MAX_INDICES);
    if ((unsigned)desc->reduce >= TRN_INDEX_REDUCE_COUNT_ ||
        (!desc->scatter && desc->reduce != TRN_INDEX_REDUCE_NONE))
        return bad("invalid reduction");
    if (nd > 0 && (desc->sizes == NULL || desc->out_strides == NULL ||
                   (desc->src != NULL && desc->src_strides == NULL)))
        return bad("sizes or strides are NULL");
    int64_t numel = 1;
    for (int d = 0; d < nd; d++) {
        if (desc->sizes[d] < 0) return bad("negative size");
        if (__builtin_mul_overflow(numel, desc->sizes[d], &numel))
            return bad("element count overflows");
    }
    const int64_t es = (int64_t)trn_dtype_size(desc->dtype);
    if (desc->scatter && !trn__scatter_supports(desc->dtype, desc->reduce))
        return trn__set_error(TRN_ERROR_UNSUPPORTED,
                              "trn_index_launch: no scatter reduction for %s",
                              trn_dtype_name(desc->dtype));
    if (desc->reduce == TRN_INDEX_REDUCE_MEAN && desc->out_numel < 0)
        return bad("MEAN needs out_numel");
    trn_status st = trn__fork_check();
    if (st != TRN_SUCCESS || numel == 0) return st;
    if (desc->out == NULL) return bad("out is NULL");

    index_args a;
    memset(&a, 0, sizeof a);
    a.scatter = desc->scatter != 0;
    a.reduce = desc->reduce;
    a.include_self = desc->include_self != 0;
    a.wrap = desc->wrap != 0;
    a.dtype = desc->dtype;
    a.ndim = nd > 0 ? nd : 1;
    a.nidx = nk;
    a.out = desc->out;
    a.src = desc->src;
    a.src_scalar = desc->src == NULL;
    memcpy(a.value, desc->value, sizeof a.value);
    a.alpha = desc->alpha;
    a.alpha_int = desc->alpha_int;
    a.out_numel = desc->out_numel;
    if (nd == 0) a.sizes[0] = 1;
    int64_t ohi = 0, shi = 0;
    for (int d = 0; d < nd; d++) {
        a.sizes[d] = desc->sizes[d];
        a.ostr[d] = desc->out_strides[d];
        a.sstr[d] = a.src_scalar ? 0 : desc->src_strides[d];
        if (!trn__extent_or_empty(a.sizes[d], a.ostr[d], 1, &a.out_lo, &ohi) ||
            !trn__extent_or_empty(a.sizes[d], a.sstr[d], 1, &a.src_lo, &shi))
            return bad("strides overflow");
    }
    for (int k = 0; k < nk; k++) {
        if (desc->idx[k] == NULL || (nd > 0 && desc->idx_strides[k] == NULL))
            return bad("index pointer or strides are NULL");
        if (desc->indexed_sizes[k] < 0) return bad("negative indexed size");
        a.idx[k] = (const char *)desc->idx[k];
        a.isize[k] = desc->indexed_sizes[k];
        a.istride[k] = desc->indexed_strides[k];
        a.dims[k] = desc->dims[k];
        int64_t hi = 0;
        for (int d = 0; d < nd; d++) {
            a.xstr[k][d] = desc->idx_strides[k][d];
            if (!trn__extent_or_empty(a.sizes[d], a.xstr[k][d], 1, &a.idx_lo[k], &hi))
                return bad("index strides overflow");
        }
        a.idx_span[k] = hi - a.idx_lo[k] + 8;
        // The indexed side reaches index * stride for index in [0, size).
        bool ok = a.scatter ? trn__extent_or_empty(a.isize[k], a.istride[k], 1, &a.out_lo, &ohi)
                            : trn__extent_or_empty(a.isize[k], a.istride[k], 1, &a.src_lo, &shi);
        if (!ok) return bad("indexed strides overflow");
    }
    a.out_span = ohi - a.out_lo + es;
    a.src_span = shi - a.src_lo + es;
    if (!a.src_scalar && a.src == NULL) return bad("src is NULL");
    return trn_stream_launch(stream, index_task, &a, sizeof a);
}
