// embedding_bag.c - owns the embedding_bag kernels (trn/embedding_bag.h).
//
// Forward: bags are independent and split across the thread pool; each
// piece sums (or maxes) its bags' weight rows in index order. Offsets are
// validated once per launch on the task thread, indices inside the pieces
// (a bad one is recorded and reported by the task, which owns the error
// state). Backward: the weight gradient is split by column blocks, so every
// piece walks all indices in order and owns its columns (no two pieces add
// into the same element; sums are deterministic); the per-sample-weight
// gradient is one dot product per index.
#include <math.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "../kit/launch.h"
#include "../kit/piece_status.h"
#include "../kit/dtype_io.h"
#include "trn/convert.h"
#include "trn/embedding_bag.h"
#include "trn/parallel.h"

// Elements per parallel piece, and columns per backward piece.
#define GRAIN 16384
#define COLBLOCK 64

typedef struct eb_args {
    trn_embedding_bag_desc d;
    int backward;
} eb_args;

_Static_assert(sizeof(eb_args) <= TRN_TASK_MAX_ARGS, "embedding_bag args too large");

typedef struct eb_run {
    const eb_args *a;
    const int64_t *count;             // backward with scale_grad_by_freq: [num_weights]
    atomic_llong bad_index, bad_pos;  // an out-of-range index and its position
    atomic_int bad;
    trn__piece_status status;  // a piece could not allocate its accumulator
} eb_run;

static inline int64_t ld_index(trn_dtype t, const void *p, int64_t i) {
    return t == TRN_DTYPE_I32 ? (int64_t)((const int32_t *)p)[i] : ((const int64_t *)p)[i];
}

static int64_t bag_end(const trn_embedding_bag_desc *d, int64_t b) {
    return b + 1 < d->num_offsets ? ld_index(d->index_dtype, d->offsets, b + 1) : d->num_indices;
}

static void note_bad(eb_run *run, int64_t pos, int64_t v) {
    atomic_store(&run->bad_index, (long long)v);
    atomic_store(&run->bad_pos, (long long)pos);
    atomic_store(&run->bad, 1);
}

#define DEFINE_EB(E, N, T, C, V, LD, ST)                                                           \
    static void fwd_##N(void *ctx, int64_t b0, int64_t b1) {                                       \
        eb_run *run = ctx;                                                                         \
        const trn_embedding_bag_desc *d = &run->a->d;                                              \
        const int64_t D = d->dim;                                                                  \
        const T *w = d->weight;                                                                    \
        const T *psw = d->per_sample_weights;                                                      \
        C *acc = malloc(sizeof(C) * (size_t)(D > 0 ? D : 1));                                      \
        if (acc == NULL) {                                                                         \
            trn__piece_oom(&run->status, 0);                                                       \
            return;                                                                                \
        }                                                                                          \
        for (int64_t b = b0; b < b1; b++) {                                                        \
            const int64_t s = ld_index(d->index_dtype, d->offsets, b);                             \
            const int64_t e = bag_end(d, b);                                                       \
            int64_t *mx = d->max_indices ? d->max_indices + b * D : NULL;                          \
            int64_t n = 0;                                                                         \
            for (int64_t j = 0; j < D; j++) acc[j] = 0;                                            \
            if (mx)                                                                                \
                for (int64_t j = 0; j < D; j++) mx[j] = -1;                                        \
            for (int64_t i = s; i < e; i++) {                                                      \
                const int64_t k = ld_index(d->index_dtype, d->indices, i);                         \
                if (d->offset2bag) d->offset2bag[i] = b;                                           \
                if (k < 0 || k >= d->num_weights) {                                                \
                    note_bad(run, i, k);                                                           \
                    continue;                                                                      \
                }                                                                                  \
                if (k == d->padding_idx) continue;                                                 \
                const T *row = w + k * D;                                                          \
                if (d->mode == TRN_EMBEDDING_BAG_MAX) {                                            \
                    for (int64_t j = 0; j < D; j++) {                                              \
                        const C v = (C)LD(row[j]);                                                 \
                        if (n == 0 || v > acc[j]) {                                                \
                            acc[j] = v;                                                            \
                            mx[j] = k;                                                             \
                        }                                                                          \
                    }                                                                              \
                } else if (psw) {                                                                  \
                    const C p = (C)LD(psw[i]);                                                     \
                    for (int64_t j = 0; j < D; j++) acc[j] += (C)LD(row[j]) * p;                   \
                } else {                                                                           \
                    for (int64_t j = 0; j < D; j++) acc[j] += (C)LD(row[j]);                       \
                }                                                                                  \
                n++;                                                                               \
            }                                                                                      \
            if (d->mode == TRN_EMBEDDING_BAG_MEAN && n > 0)                                        \
                for (int64_t j = 0; j < D; j++) acc[j] /= (C)n;                                    \
            T *out = (T *)d->output + b * D;                                                       \
            for (int64_t j = 0; j < D; j++) out[j] = ST(acc[j]);                                   \
            if (d->bag_size) d->bag_size[b] = n;                                                   \
        }                                                                                          \
        free(acc);                                                                                 \
    }                                                                                              \
    /* Columns [blk * COLBLOCK, ...) of the weight gradient. */                                    \
    static void bwd_w_##N(void *ctx, int64_t k0, int64_t k1) {                                     \
        eb_run *run = ctx;                                                                         \
        const trn_embedding_bag_desc *d = &run->a->d;                                              \
        const int64_t D = d->dim, NW = d->num_weights;                                             \
        const T *g = d->grad;                                                                      \
        const T *psw = d->per_sample_weights;                                                      \
        T *gw = d->grad_weight;                                                                    \
        const int direct = sizeof(T) == sizeof(C);                                                 \
        C *acc = direct ? NULL : malloc(sizeof(C) * (size_t)(NW * COLBLOCK + 1));                  \
        if (!direct && acc == NULL) {                                                              \
            trn__piece_oom(&run->status, 0);                                                       \
            return;                                                                                \
        }                                                                                          \
        for (int64_t blk = k0; blk < k1; blk++) {                                                  \
            const int64_t c0 = blk * COLBLOCK;                                                     \
            const int64_t wd = D - c0 < COLBLOCK ? D - c0 : COLBLOCK;                              \
            /* element (r, j) of this block: direct: gw[r * D + c0 + j];          \
               else acc[r * COLBLOCK + j] */                \
            const int64_t ld = direct ? D : COLBLOCK;                                              \
            C *base = direct ? (C *)(void *)gw + c0 : acc;                                         \
            for (int64_t r = 0; r < NW; r++)                                                       \
                for (int64_t j = 0; j < wd; j++) base[r * ld + j] = 0;                             \
            if (d->mode == TRN_EMBEDDING_BAG_MAX) {                                                \
                for (int64_t b = 0; b < d->num_bags; b++)                                          \
                    for (int64_t j = 0; j < wd; j++) {                                             \
                        const int64_t m = d->max_indices[b * D + c0 + j];                          \
                        if (m >= 0 && m < NW) base[m * ld + j] += (C)LD(g[b * D + c0 + j]);        \
                    }                                                                              \
            } else {                                                                               \
                for (int64_t i = 0; i < d->num_indices; i++) {                                     \
                    const int64_t k = ld_index(d->index_dtype, d->indices, i);                     \
                    if (k < 0 || k >= NW || k == d->padding_idx) continue;                         \
                    const int64_t b = d->offset2bag[i];                                            \
                    if (b < 0 || b >= d->num_bags) continue;                                       \
                    C s = psw ? (C)LD(psw[i]) : (C)1;                                              \
                    if (d->mode == TRN_EMBEDDING_BAG_MEAN)                                         \
                        s = d->bag_size[b] > 0 ? s / (C)d->bag_size[b] : (C)0;                     \
                    if (run->count) s /= (C)run->count[k];                                         \
                    const T *gr = g + b * D + c0;                                                  \
                    C *o = base + k * ld;                                                          \
                    for (int64_t j = 0; j < wd; j++) o[j] += (C)LD(gr[j]) * s;                     \
                }                                                                                  \
            }                                                                                      \
            if (!direct)                                                                           \
                for (int64_t r = 0; r < NW; r++)                                                   \
                    for (int64_t j = 0; j < wd; j++)                                               \
                        gw[r * D + c0 + j] = ST(acc[r * COLBLOCK + j]);                            \
        }                                                                                          \
        free(acc);                                                                                 \
    }                                                                                              \
    static void bwd_psw_##N(void *ctx, int64_t i0, int64_t i1) {                                   \
        eb_run *run = ctx;                                                                         \
        const trn_embedding_bag_desc *d = &run->a->d;                                              \
        const int64_t D = d->dim;                                                                  \
        const T *g = d->grad, *w = d->weight;                                                      \
        T *out = d->grad_per_sample_weights;                                                       \
        for (int64_t i = i0; i < i1; i++) {                                                        \
            const int64_t k = ld_index(d->index_dtype, d->indices, i);                             \
            const int64_t b = d->offset2bag[i];                                                    \
            C s = 0;                                                                               \
            if (k >= 0 && k < d->num_weights && k != d->padding_idx && b >= 0 && b < d->num_bags)  \
                for (int64_t j = 0; j < D; j++) s += (C)LD(g[b * D + j]) * (C)LD(w[k * D + j]);    \
            out[i] = ST(s);                                                                        \
        }                                                                                          \
    }

TRN_KIT_FLOAT_TYPES(DEFINE_EB)

typedef void (*piece_fn)(void *, int64_t, int64_t);

static void pick(trn_dtype t, piece_fn *fwd, piece_fn *bw, piece_fn *bp) {
    switch (t) {
#define CASE(E, N, ...)                                                                            \
    case E:                                                                                        \
        *fwd = fwd_##N;                                                                            \
        *bw = bwd_w_##N;                                                                           \
        *bp = bwd_psw_##N;                                                                         \
        return;
        TRN_KIT_FLOAT_TYPES(CASE)
#undef CASE
    default: *fwd = *bw = *bp = NULL;
    }
}

int trn_embedding_bag_supports(trn_dtype dtype, trn_dtype index_dtype) {
    const int f = dtype == TRN_DTYPE_F16 || dtype == TRN_DTYPE_BF16 || dtype == TRN_DTYPE_F32 ||
                  dtype == TRN_DTYPE_F64;
    return f && (index_dtype == TRN_DTYPE_I32 || index_dtype == TRN_DTYPE_I64);
}

// Offsets must start at 0, never decrease and stay within the indices.
static trn_status check_offsets(const trn_embedding_bag_desc *d) {
    int64_t prev = 0;
    for (int64_t b = 0; b < d->num_offsets; b++) {
        const int64_t o = ld_index(d->index_dtype, d->offsets, b);
        if (b == 0 && o != 0)
            return trn__set_error(TRN_ERROR_INVALID_ARGUMENT,
                                  "offsets[0] has to be 0, i.e., the first sequence in the "
                                  "mini-batch has to start from position 0. However, got %lld",
                                  (long long)o);
        if (o < prev || o > d->num_indices)
            return trn__set_error(TRN_ERROR_INVALID_ARGUMENT,
                                  "embedding_bag: offsets[%lld] = %lld is invalid (offsets must "
                                  "not decrease nor exceed the %lld indices)",
                                  (long long)b, (long long)o, (long long)d->num_indices);
        prev = o;
    }
    return TRN_SUCCESS;
}

static trn_status eb_task(void *args) {
    const eb_args *a = args;
    const trn_embedding_bag_desc *d = &a->d;
    const size_t es = trn_dtype_size(d->dtype), is = trn_dtype_size(d->index_dtype);
    const size_t rows = (size_t)(d->num_weights * d->dim) * es;
    const size_t bags = (size_t)(d->num_bags * d->dim) * es;
    const size_t ni = (size_t)d->num_indices;
    trn__access_set rg = {.count = 0};
    trn__access_add(&rg, d->weight, rows);
    trn__access_add(&rg, d->indices, ni * is);
    trn__access_add(&rg, d->offsets, (size_t)d->num_offsets * is);
    trn__access_add(&rg, d->per_sample_weights, ni * es);
    trn__access_add(&rg, d->output, bags);
    trn__access_add(&rg, d->offset2bag, ni * 8);
    trn__access_add(&rg, d->bag_size, (size_t)d->num_bags * 8);
    trn__access_add(&rg, d->max_indices, (size_t)(d->num_bags * d->dim) * 8);
    trn__access_add(&rg, d->grad, bags);
    trn__access_add(&rg, d->grad_weight, rows);
    trn__access_add(&rg, d->grad_per_sample_weights, ni * es);
    trn_status st = trn__access_begin(&rg);
    eb_run run;
    run.a = a;
    run.count = NULL;
    atomic_init(&run.bad_index, 0);
    atomic_init(&run.bad_pos, 0);
    atomic_init(&run.bad, 0);
    trn__piece_status_init(&run.status);
    int64_t *count = NULL;
    piece_fn fwd, bw, bp;
    pick(d->dtype, &fwd, &bw, &bp);
    if (st == TRN_SUCCESS && !a->backward) {
        st = check_offsets(d);
        // Indices after the last bag (include_last_offset) belong to none.
        const int64_t tail = d->num_bags > 0 ? bag_end(d, d->num_bags - 1) : 0;
        for (int64_t i = tail; st == TRN_SUCCESS && d->offset2bag && i < d->num_indices; i++)
            d->offset2bag[i] = -1;
        if (st == TRN_SUCCESS) {
            const int64_t per = (d->num_indices / (d->num_bags > 0 ? d->num_bags : 1) + 1) * d->dim;
            trn_parallel_for(d->num_bags, per > 0 && GRAIN / per > 1 ? GRAIN / per : 1, fwd, &run);
        }
    } else if (st == TRN_SUCCESS) {
        if (d->grad_weight && d->scale_grad_by_freq && d->mode != TRN_EMBEDDING_BAG_MAX) {
            count = calloc((size_t)d->num_weights + 1, sizeof *count);
            if (count == NULL)
                st = trn__set_error(TRN_ERROR_OUT_OF_MEMORY, "embedding_bag: out of host memory");
            for (int64_t i = 0; count && i < d->num_indices; i++) {
                const int64_t k = ld_index(d->index_dtype, d->indices, i);
                if (k >= 0 && k < d->num_weights) count[k]++;
            }
            run.count = count;
        }
        if (st == TRN_SUCCESS && d->grad_weight && d->dim > 0) {
            const int64_t blocks = (d->dim + COLBLOCK - 1) / COLBLOCK;
            trn_parallel_for(blocks, 1, bw, &run);
        }
        if (st == TRN_SUCCESS && d->grad_per_sample_weights) {
            const int64_t g = GRAIN / (d->dim > 0 ? d->dim : 1);
            trn_parallel_for(d->num_indices, g > 1 ? g : 1, bp, &run);
        }
    }
    free(count);
    if (st == TRN_SUCCESS) st = trn__piece_status_raise(&run.status, "embedding_bag");
    if (st == TRN_SUCCESS && atomic_load(&run.bad))
        st = trn__set_error(TRN_ERROR_INVALID_ARGUMENT,
                            "Index %lld of input takes value %lld which is not in the valid "
                            "range [0, %lld)",
                            (long long)atomic_load(&run.bad_pos),
                            (long long)atomic_load(&run.bad_index), (long long)d->num_weights);
    trn__access_end(&rg);
    return st;
}

static trn_status launch(trn_stream *stream, const trn_embedding_bag_desc *d, int backward,
                         const char *fn) {
    const trn_status null_st = trn__check_launch(stream, d, fn);
    if (null_st != TRN_SUCCESS) return null_st;
    if (!trn_embedding_bag_supports(d->dtype, d->index_dtype))
        return trn__set_error(TRN_ERROR_UNSUPPORTED, "%s: dtypes %s / %s are not supported", fn,
                              trn_dtype_name(d->dtype), trn_dtype_name(d->index_dtype));
    int64_t t;
    if ((unsigned)d->mode > TRN_EMBEDDING_BAG_MAX || d->num_weights < 0 || d->dim < 0 ||
        d->num_indices < 0 || d->num_bags < 0 || d->num_offsets < d->num_bags ||
        d->num_offsets > d->num_bags + 1 || d->padding_idx < -1 ||
        __builtin_mul_overflow(d->num_weights, d->dim, &t) ||
        __builtin_mul_overflow(d->num_bags, d->dim, &t) || __builtin_mul_overflow(t, 8, &t))
        return trn__set_error(TRN_ERROR_INVALID_ARGUMENT,
                              "%s: invalid mode %d or sizes (weights %lld x %lld, %lld indices, "
                              "%lld offsets, %lld bags, padding_idx %lld)",
                              fn, (int)d->mode, (long long)d->num_weights, (long long)d->dim,
                              (long long)d->num_indices, (long long)d->num_offsets,
                              (long long)d->num_bags, (long long)d->padding_idx);
    const int psw = d->per_sample_weights != NULL;
    if (psw && d->mode != TRN_EMBEDDING_BAG_SUM)
        return trn__set_error(TRN_ERROR_INVALID_ARGUMENT, "%s: per_sample_weights need mode SUM",
                              fn);
    const int has_i = d->num_indices > 0, has_w = d->num_weights * d->dim > 0;
    const int has_b = d->num_bags * d->dim > 0;
    int bad;
    if (!backward)
        bad = (has_i && d->indices == NULL) || (has_w && has_i && d->weight == NULL) ||
              (d->num_offsets > 0 && d->offsets == NULL) || (has_b && d->output == NULL) ||
              (d->mode == TRN_EMBEDDING_BAG_MAX && has_b && d->max_indices == NULL);
    else
        bad = (d->grad_weight == NULL && d->grad_per_sample_weights == NULL) ||
              (has_b && d->grad == NULL) ||
              (d->grad_weight && has_w && d->mode == TRN_EMBEDDING_BAG_MAX && has_b &&
               d->max_indices == NULL) ||
              (d->grad_weight && d->mode != TRN_EMBEDDING_BAG_MAX && has_i &&
               (d->indices == NULL || d->offset2bag == NULL ||
                (d->mode == TRN_EMBEDDING_BAG_MEAN && d->num_bags > 0 && d->bag_size == NULL))) ||
              (d->grad_per_sample_weights && has_i &&
               (d->indices == NULL || d->offset2bag == NULL || (has_w && d->weight == NULL)));
    if (bad) return trn__set_error(TRN_ERROR_INVALID_ARGUMENT, "%s: a needed pointer is NULL", fn);
    trn_status st = trn__fork_check();
    if (st != TRN_SUCCESS) return st;
    const eb_args a = {.d = *d, .backward = backward};
    return trn_stream_launch(stream, eb_task, &a, sizeof a);
}

trn_status trn_embedding_bag_launch(trn_stream *stream, const trn_embedding_bag_desc *desc) {
    return launch(stream, desc, 0, "trn_embedding_bag_launch");
}

trn_status trn_embedding_bag_backward_launch(trn_stream *stream,
                                             const trn_embedding_bag_desc *desc) {
    return launch(stream, desc, 1, "trn_embedding_bag_backward_launch");
}
