// index_impl.h - private to gather.c and scatter.c: the launch arguments of
// trn_index_launch and the n-d driver both kernels' loops are generated from.
#ifndef TRN_KERNELS_INDEX_IMPL_H
#define TRN_KERNELS_INDEX_IMPL_H

#include <stdint.h>
#include <string.h>

#include "../../internal.h"
#include "trn/index.h"

typedef struct index_args {
    int scatter, reduce, include_self, wrap, src_scalar;
    trn_dtype dtype;
    int ndim, nidx;
    char *out;
    const char *src;
    unsigned char value[16];
    double alpha;
    int64_t alpha_int, out_numel;
    const char *idx[TRN_INDEX_MAX_INDICES];
    int64_t isize[TRN_INDEX_MAX_INDICES], istride[TRN_INDEX_MAX_INDICES];
    int dims[TRN_INDEX_MAX_INDICES];
    // Byte ranges touched, relative to the pointers (protect mode).
    int64_t out_lo, out_span, src_lo, src_span;
    int64_t idx_lo[TRN_INDEX_MAX_INDICES], idx_span[TRN_INDEX_MAX_INDICES];
    int64_t sizes[TRN_INDEX_MAX_DIMS], ostr[TRN_INDEX_MAX_DIMS], sstr[TRN_INDEX_MAX_DIMS];
    int64_t xstr[TRN_INDEX_MAX_INDICES][TRN_INDEX_MAX_DIMS];
} index_args;

_Static_assert(sizeof(index_args) <= TRN_TASK_MAX_ARGS, "index args too large");

// Runs a scatter descriptor (scatter.c); src0 is the source base (the
// args' value for a scalar source).
trn_status trn__scatter_run(const index_args *a, const char *src0);
// Whether scatter.c has loops for the (dtype, reduction).
bool trn__scatter_supports(trn_dtype dtype, int reduce);

// Sum of index offsets of the element at inner position i; an index out of
// range sets the error and returns false.
static inline bool index_resolve(const index_args *a, const int64_t *xoff, int64_t i,
                                 int64_t *off) {
    int64_t o = 0;
    for (int k = 0; k < a->nidx; k++) {
        int64_t v;
        memcpy(&v, a->idx[k] + xoff[k] + i * a->xstr[k][0], sizeof v);
        const int64_t size = a->isize[k];
        int64_t w = (v < 0 && a->wrap) ? v + size : v;
        if (w < 0 || w >= size) {
            trn__set_error(TRN_ERROR_INVALID_ARGUMENT,
                           "index %lld is out of bounds for dimension %d "
                           "with size %lld",
                           (long long)v, a->dims[k], (long long)size);
            return false;
        }
        o += w * a->istride[k];
    }
    *off = o;
    return true;
}

// Defines `static trn_status NAME(const index_args *a, const char *src0,
// int64_t *counts)` moving elements of ES bytes with ELEM(dp, sp, alpha_f,
// alpha_i) (dst and
// src element pointers; ELEM may use `a`, `counts` and what PROLOGUE, run
// once at the start, declares). SCATTER selects
// which side the index offsets apply to. MEMCPY_ROWS: contiguous rows with a
// constant offset are copied with one memcpy (plain moves only).
// Plain element moves of 1..16 bytes, the ELEM of gather's and scatter's
// byte-moving drivers (the reduction slots af / ai are unused).
#define TRN__INDEX_MOVE1(dp, sp, af, ai) memcpy(dp, sp, 1)
#define TRN__INDEX_MOVE2(dp, sp, af, ai) memcpy(dp, sp, 2)
#define TRN__INDEX_MOVE4(dp, sp, af, ai) memcpy(dp, sp, 4)
#define TRN__INDEX_MOVE8(dp, sp, af, ai) memcpy(dp, sp, 8)
#define TRN__INDEX_MOVE16(dp, sp, af, ai) memcpy(dp, sp, 16)

#define TRN__INDEX_DRIVER(NAME, SCATTER, ES, ELEM, MEMCPY_ROWS, PROLOGUE)                          \
    static trn_status NAME(const index_args *a, const char *src0, int64_t *counts) {               \
        (void)counts;                                                                              \
        PROLOGUE                                                                                   \
        const int nd = a->ndim, nk = a->nidx;                                                      \
        const int64_t n0 = a->sizes[0], os0 = a->ostr[0], ss0 = a->sstr[0];                        \
        bool row_const = true;                                                                     \
        for (int k = 0; k < nk; k++)                                                               \
            if (a->xstr[k][0] != 0) row_const = false;                                             \
        bool idx_same_rows = nk == 1; /* the index's offsets repeat along every outer dim */       \
        for (int d = 1; d < nd; d++)                                                               \
            if (nk == 1 && a->xstr[0][d] != 0) idx_same_rows = false;                              \
        bool idx_neg = false; /* a (wrapped) negative index in the row checked last */             \
        int64_t outer = 1;                                                                         \
        for (int d = 1; d < nd; d++) outer *= a->sizes[d];                                         \
        int64_t pos[TRN_INDEX_MAX_DIMS] = {0};                                                     \
        int64_t xoff[TRN_INDEX_MAX_INDICES] = {0};                                                 \
        int64_t ooff = 0, soff = 0;                                                                \
        for (int64_t it = 0; it < outer; it++) {                                                   \
            char *o = a->out + ooff;                                                               \
            const char *s = src0 + soff;                                                           \
            if (row_const) {                                                                       \
                int64_t off;                                                                       \
                if (!index_resolve(a, xoff, 0, &off)) return TRN_ERROR_INVALID_ARGUMENT;           \
                if (SCATTER)                                                                       \
                    o += off;                                                                      \
                else                                                                               \
                    s += off;                                                                      \
                if (os0 == (ES) && ss0 == (ES)) {                                                  \
                    if (MEMCPY_ROWS)                                                               \
                        memcpy(o, s, (size_t)n0 *(ES));                                            \
                    else                                                                           \
                        for (int64_t i = 0; i < n0; i++) {                                         \
                            char *dp = o + i * (ES);                                               \
                            const char *sp = s + i * (ES);                                         \
                            ELEM(dp, sp, alpha_f, alpha_i);                                        \
                        }                                                                          \
                } else {                                                                           \
                    for (int64_t i = 0; i < n0; i++) {                                             \
                        char *dp = o + i * os0;                                                    \
                        const char *sp = s + i * ss0;                                              \
                        ELEM(dp, sp, alpha_f, alpha_i);                                            \
                    }                                                                              \
                }                                                                                  \
            } else if (nk == 1) {                                                                  \
                /* One index: the row's indices are checked in a pass of their own (once per    */ \
                /* call when every row has the same ones: index_select's), so the moving loop   */ \
                /* is a few instructions and many of its random loads are in flight at once     */ \
                /* (each extra instruction per element costs: 2.2x on a [64, 8192] gather).     */ \
                const char *ip = a->idx[0] + xoff[0];                                              \
                const int64_t xs = a->xstr[0][0], isz = a->isize[0], ist = a->istride[0];          \
                if (it == 0 || !idx_same_rows) {                                                   \
                    idx_neg = false;                                                               \
                    for (int64_t i = 0; i < n0; i++) {                                             \
                        int64_t v;                                                                 \
                        memcpy(&v, ip + i * xs, sizeof v);                                         \
                        const int64_t w = (v < 0 && a->wrap) ? v + isz : v;                        \
                        if ((uint64_t)w >= (uint64_t)isz) {                                        \
                            int64_t off; /* sets the error message */                              \
                            (void)index_resolve(a, xoff, i, &off);                                 \
                            return TRN_ERROR_INVALID_ARGUMENT;                                     \
                        }                                                                          \
                        idx_neg |= v < 0;                                                          \
                    }                                                                              \
                }                                                                                  \
                const int64_t dense = (SCATTER) ? ss0 : os0, other = (SCATTER) ? os0 : ss0;        \
                if (!idx_neg && xs == 8 && dense == (ES) && other == 0 && ist == (ES)) {           \
                    /* contiguous side, index and indexed dim: constant-scaled addresses */        \
                    for (int64_t i = 0; i < n0; i++) {                                             \
                        int64_t v;                                                                 \
                        memcpy(&v, ip + i * 8, sizeof v);                                          \
                        ELEM(o + ((SCATTER) ? v : i) * (ES), s + ((SCATTER) ? i : v) * (ES),       \
                             alpha_f, alpha_i);                                                    \
                    }                                                                              \
                } else {                                                                           \
                    const char *xp = ip;                                                           \
                    char *dp = o;                                                                  \
                    const char *sp = s;                                                            \
                    for (int64_t i = 0; i < n0; i++, xp += xs, dp += os0, sp += ss0) {             \
                        int64_t v;                                                                 \
                        memcpy(&v, xp, sizeof v);                                                  \
                        if (idx_neg) v += (v >> 63) & isz; /* after the check: wrapped ones */     \
                        ELEM(dp + ((SCATTER) ? v * ist : 0), sp + ((SCATTER) ? 0 : v * ist),       \
                             alpha_f, alpha_i);                                                    \
                    }                                                                              \
                }                                                                                  \
            } else {                                                                               \
                for (int64_t i = 0; i < n0; i++) {                                                 \
                    int64_t off;                                                                   \
                    if (!index_resolve(a, xoff, i, &off)) return TRN_ERROR_INVALID_ARGUMENT;       \
                    char *dp = o + i * os0 + ((SCATTER) ? off : 0);                                \
                    const char *sp = s + i * ss0 + ((SCATTER) ? 0 : off);                          \
                    ELEM(dp, sp, alpha_f, alpha_i);                                                \
                }                                                                                  \
            }                                                                                      \
            for (int d = 1; d < nd; d++) { /* odometer over outer dims */                          \
                if (++pos[d] < a->sizes[d]) {                                                      \
                    ooff += a->ostr[d];                                                            \
                    soff += a->sstr[d];                                                            \
                    for (int k = 0; k < nk; k++) xoff[k] += a->xstr[k][d];                         \
                    break;                                                                         \
                }                                                                                  \
                pos[d] = 0;                                                                        \
                ooff -= a->ostr[d] * (a->sizes[d] - 1);                                            \
                soff -= a->sstr[d] * (a->sizes[d] - 1);                                            \
                for (int k = 0; k < nk; k++) xoff[k] -= a->xstr[k][d] * (a->sizes[d] - 1);         \
            }                                                                                      \
        }                                                                                          \
        return TRN_SUCCESS;                                                                        \
    }

#endif
