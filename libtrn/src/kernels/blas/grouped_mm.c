// grouped_mm.c - owns the grouped-mm kernel declared in trn/grouped_mm.h:
// validation at launch, and a task that reads the group boundaries and runs
// each group's product through the matmul kernel's body (matmul_run.h).
#include <string.h>

#include "../kit/launch.h"
#include "matmul_run.h"
#include "trn/grouped_mm.h"

// Largest piece of a group's varying dim handed to one matmul run.
enum { GMM_PIECE_MAX = 1024 };

typedef struct gmm_args {
    trn_grouped_mm_desc d;
    int64_t a_span, b_span, c_span;  // bytes from each base pointer
} gmm_args;

_Static_assert(sizeof(gmm_args) <= TRN_TASK_MAX_ARGS, "grouped_mm args too large");

bool trn_grouped_mm_supports(trn_dtype dtype) {
    return dtype == TRN_DTYPE_F32 || dtype == TRN_DTYPE_BF16 || dtype == TRN_DTYPE_F16;
}

// Bytes from the base pointer to one past the last element (strides >= 0).
static bool span3(const int64_t sizes[3], const int64_t strides[3], int64_t es, int64_t *out) {
    int64_t last = 0;
    for (int i = 0; i < 3; i++) {
        if (sizes[i] == 0) {
            *out = 0;
            return true;
        }
        int64_t reach;
        if (__builtin_mul_overflow(sizes[i] - 1, strides[i], &reach) ||
            __builtin_add_overflow(last, reach, &last))
            return false;
    }
    return !__builtin_add_overflow(last, 1, &last) && !__builtin_mul_overflow(last, es, out);
}

// The next piece of a group's varying dim: GMM_PIECE_MAX, else the
// multiple of 32 below len, else len (< 32). At most two runs per group
// below the cap, and at most 63 distinct piece sizes, so the matmul plans
// they need are few and repeat whatever the counts are.
static int64_t piece_of(int64_t len) {
    if (len >= GMM_PIECE_MAX) return GMM_PIECE_MAX;
    return len >= 32 ? (len & ~(int64_t)31) : len;
}

static const char *elem(const void *base, int64_t off, int64_t es) {
    return (const char *)base + off * es;
}

// One group: rows [r0, r1) for 2D_3D, columns [r0, r1) for 3D_2D, the
// whole matrices otherwise (K range [r0, r1) for 2D_2D).
static trn_status run_group(const trn_grouped_mm_desc *d, int64_t g, int64_t r0, int64_t r1) {
    const int64_t es = (int64_t)trn_dtype_size(d->dtype);
    trn_matmul_desc mm;
    memset(&mm, 0, sizeof mm);
    mm.dtype = d->dtype;
    mm.batch = 1;
    mm.alpha = 1.0;
    mm.m = d->m;
    mm.n = d->n;
    mm.k = d->k;
    for (int i = 0; i < 3; i++) {
        mm.a_strides[i] = d->a_strides[i];
        mm.b_strides[i] = d->b_strides[i];
        mm.c_strides[i] = d->c_strides[i];
    }
    const int64_t *as = d->a_strides, *bs = d->b_strides, *cs = d->c_strides;
    switch (d->layout) {
    case TRN_GMM_2D_3D:
        for (int64_t r = r0; r < r1;) {
            const int64_t len = piece_of(r1 - r);
            mm.m = len;
            mm.a = elem(d->a, r * as[1], es);
            mm.b = elem(d->b, g * bs[0], es);
            mm.c = (void *)elem(d->c, r * cs[1], es);
            trn_status st = trn__matmul_run_now(&mm);
            if (st != TRN_SUCCESS) return st;
            r += len;
        }
        return TRN_SUCCESS;
    case TRN_GMM_3D_2D:
        for (int64_t r = r0; r < r1;) {
            const int64_t len = piece_of(r1 - r);
            mm.n = len;
            mm.a = elem(d->a, g * as[0], es);
            mm.b = elem(d->b, r * bs[2], es);
            mm.c = (void *)elem(d->c, r * cs[2], es);
            trn_status st = trn__matmul_run_now(&mm);
            if (st != TRN_SUCCESS) return st;
            r += len;
        }
        return TRN_SUCCESS;
    case TRN_GMM_2D_2D:
        // The whole K range in one run: pieces would round the partial
        // sums to `dtype` between them.
        mm.k = r1 - r0;
        mm.a = elem(d->a, r0 * as[2], es);
        mm.b = elem(d->b, r0 * bs[1], es);
        mm.c = (void *)elem(d->c, g * cs[0], es);
        return trn__matmul_run_now(&mm);
    case TRN_GMM_3D_3D:
        mm.a = elem(d->a, g * as[0], es);
        mm.b = elem(d->b, g * bs[0], es);
        mm.c = (void *)elem(d->c, g * cs[0], es);
        return trn__matmul_run_now(&mm);
    }
    return TRN_SUCCESS;
}

static trn_status gmm_task(void *args) {
    const gmm_args *a = args;
    const trn_grouped_mm_desc *d = &a->d;
    trn__access_set acc;
    memset(&acc, 0, sizeof acc);
    trn__access_add(&acc, d->a, (size_t)a->a_span);
    trn__access_add(&acc, d->b, (size_t)a->b_span);
    trn__access_add(&acc, d->c, (size_t)a->c_span);
    if (d->offs) trn__access_add(&acc, d->offs, (size_t)d->groups * sizeof(int32_t));
    trn_status st = trn__access_begin(&acc);
    if (st != TRN_SUCCESS) return st;
    const int64_t limit = d->layout == TRN_GMM_2D_3D   ? d->m
                          : d->layout == TRN_GMM_3D_2D ? d->n
                                                       : d->k;
    int64_t prev = 0;
    for (int64_t g = 0; g < d->groups && st == TRN_SUCCESS; g++) {
        int64_t end = prev;
        if (d->offs) {
            end = d->offs[g];
            if (end < prev || end > limit) {
                st =
                    trn__set_error(TRN_ERROR_INVALID_ARGUMENT,
                                   "grouped_mm: offs must be non-decreasing and at most %lld, "
                                   "got offs[%lld] = %lld after %lld",
                                   (long long)limit, (long long)g, (long long)end, (long long)prev);
                break;
            }
        }
        st = run_group(d, g, prev, end);
        prev = end;
    }
    trn__access_end(&acc);
    return st;
}

trn_status trn_grouped_mm_launch(trn_stream *stream, const trn_grouped_mm_desc *desc) {
    static const char fn[] = "trn_grouped_mm_launch";
    trn_status st = trn__check_launch(stream, desc, fn);
    if (st != TRN_SUCCESS) return st;
    if ((unsigned)desc->dtype >= TRN_DTYPE_COUNT || !trn_grouped_mm_supports(desc->dtype))
        return trn__set_error(TRN_ERROR_UNSUPPORTED, "%s: dtype %s is not supported", fn,
                              trn_dtype_name(desc->dtype));
    if ((unsigned)desc->layout > TRN_GMM_2D_2D)
        return trn__set_error(TRN_ERROR_INVALID_ARGUMENT, "%s: invalid layout", fn);
    if (desc->groups < 1 || desc->m < 0 || desc->n < 0 || desc->k < 0)
        return trn__set_error(TRN_ERROR_INVALID_ARGUMENT,
                              "%s: need groups >= 1 and sizes >= 0 (groups %lld, m %lld, n %lld, "
                              "k %lld)",
                              fn, (long long)desc->groups, (long long)desc->m, (long long)desc->n,
                              (long long)desc->k);
    if ((desc->offs == NULL) != (desc->layout == TRN_GMM_3D_3D))
        return trn__set_error(TRN_ERROR_INVALID_ARGUMENT,
                              "%s: offs is required except for the 3D_3D layout, where it must "
                              "be NULL",
                              fn);
    for (int i = 0; i < 3; i++)
        if (desc->a_strides[i] < 0 || desc->b_strides[i] < 0 || desc->c_strides[i] < 0)
            return trn__set_error(TRN_ERROR_INVALID_ARGUMENT, "%s: negative strides", fn);
    st = trn__fork_check();
    if (st != TRN_SUCCESS) return st;
    gmm_args a;
    memset(&a, 0, sizeof a);
    a.d = *desc;
    trn_grouped_mm_desc *d = &a.d;
    const int64_t G = d->groups;
    const bool a3 = d->layout == TRN_GMM_3D_3D || d->layout == TRN_GMM_3D_2D;
    const bool b3 = d->layout == TRN_GMM_2D_3D || d->layout == TRN_GMM_3D_3D;
    const bool c3 = d->layout == TRN_GMM_3D_3D || d->layout == TRN_GMM_2D_2D;
    if (!a3) d->a_strides[0] = 0;
    if (!b3) d->b_strides[0] = 0;
    if (!c3) d->c_strides[0] = 0;
    const int64_t asz[3] = {a3 ? G : 1, d->m, d->k}, bsz[3] = {b3 ? G : 1, d->k, d->n},
                  csz[3] = {c3 ? G : 1, d->m, d->n};
    const int64_t es = (int64_t)trn_dtype_size(d->dtype);
    if (!span3(asz, d->a_strides, es, &a.a_span) || !span3(bsz, d->b_strides, es, &a.b_span) ||
        !span3(csz, d->c_strides, es, &a.c_span))
        return trn__set_error(TRN_ERROR_INVALID_ARGUMENT, "%s: strides overflow", fn);
    if (a.c_span == 0) return TRN_SUCCESS;
    if (d->c == NULL || (a.a_span > 0 && d->a == NULL) || (a.b_span > 0 && d->b == NULL))
        return trn__set_error(TRN_ERROR_INVALID_ARGUMENT, "%s: NULL operand", fn);
    return trn_stream_launch(stream, gmm_task, &a, sizeof a);
}
