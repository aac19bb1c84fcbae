// h16_stage.c - see h16_stage.h (float16, and bfloat16 off its native path).
#include "h16_stage.h"

#include <stdbool.h>
#include <string.h>

#include "../kit/bf16_store.h"
#include "trn/convert.h"
#include "trn/parallel.h"

#if defined(__AVX512F__) || defined(__F16C__)
#include <immintrin.h>
#endif

// Elements per pool piece: below this a hand-off costs more than it saves.
#define F16_STAGE_GRAIN ((int64_t)1 << 15)

int64_t trn__f16_dense_like(int nd, const int64_t *sizes, const int64_t *strides, int64_t *out) {
    int order[5] = {0, 1, 2, 3, 4};
    if (nd < 1 || nd > 5) return 0;
    // Insertion sort, outermost first: larger stride, then the earlier dim.
    for (int i = 1; i < nd; i++)
        for (int j = i; j > 0; j--) {
            const int a = order[j - 1], b = order[j];
            if (strides[a] > strides[b] || (strides[a] == strides[b] && a < b)) break;
            order[j - 1] = b, order[j] = a;
        }
    int64_t acc = 1;
    for (int i = nd - 1; i >= 0; i--) {
        out[order[i]] = acc;
        acc *= sizes[order[i]];
    }
    return acc;
}

static void widen_run(const uint16_t *src, int64_t ss, float *dst, int64_t ds, int64_t n) {
    int64_t i = 0;
    if (ss == 1 && ds == 1) {
#if defined(__AVX512F__)
        for (; i + 16 <= n; i += 16)
            _mm512_storeu_ps(dst + i, _mm512_cvtph_ps(_mm256_loadu_si256((const void *)(src + i))));
#elif defined(__F16C__)
        for (; i + 8 <= n; i += 8)
            _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(_mm_loadu_si128((const void *)(src + i))));
#endif
    }
    for (; i < n; i++) dst[i * ds] = trn_half_to_float(src[i * ss]);
}

// vcvtps2ph rounds as trn_float_to_half does for every float that is not a
// NaN (checked for all 2^32 inputs); a NaN keeps its payload there, so a
// group holding one takes the scalar conversion (canonical NaN, as c10).
static void narrow_run(const float *src, int64_t ss, uint16_t *dst, int64_t ds, int64_t n) {
    int64_t i = 0;
    if (ss == 1 && ds == 1) {
#if defined(__AVX512F__)
        for (; i + 16 <= n; i += 16) {
            const __m512 x = _mm512_loadu_ps(src + i);
            if (_mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q)) {
                for (int64_t k = i; k < i + 16; k++) dst[k] = trn_float_to_half(src[k]);
                continue;
            }
            _mm256_storeu_si256((void *)(dst + i),
                                _mm512_cvtps_ph(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
        }
#elif defined(__F16C__)
        for (; i + 8 <= n; i += 8) {
            const __m256 x = _mm256_loadu_ps(src + i);
            if (_mm256_movemask_ps(_mm256_cmp_ps(x, x, _CMP_UNORD_Q))) {
                for (int64_t k = i; k < i + 8; k++) dst[k] = trn_float_to_half(src[k]);
                continue;
            }
            _mm_storeu_si128((void *)(dst + i),
                             _mm256_cvtps_ph(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
        }
#endif
    }
    for (; i < n; i++) dst[i * ds] = trn_float_to_half(src[i * ss]);
}

// bfloat16: widening is exact (the top half of a float); narrowing rounds
// to nearest even as trn_float_to_bf16 does (bf16_store.h's vector form for
// contiguous runs).
static void bf16_widen_run(const uint16_t *src, int64_t ss, float *dst, int64_t ds, int64_t n) {
    if (ss == 1 && ds == 1) {
        for (int64_t i = 0; i < n; i++) dst[i] = trn_bf16_to_float(src[i]);
        return;
    }
    for (int64_t i = 0; i < n; i++) dst[i * ds] = trn_bf16_to_float(src[i * ss]);
}

static void bf16_narrow_run(const float *src, int64_t ss, uint16_t *dst, int64_t ds, int64_t n) {
    if (ss == 1 && ds == 1) {
        trn__bf16_store_run((char *)dst, (const char *)src, n);
        return;
    }
    for (int64_t i = 0; i < n; i++) dst[i * ds] = trn_float_to_bf16(src[i * ss]);
}

typedef struct nd_copy {
    int outer;    // dims in `dims` before the inner one
    int dims[5];  // outer dims, outermost first, then the inner dim
    int64_t sizes[5], ss[5], ds[5];
    const char *src;
    char *dst;
    bool widen, bf16;
} nd_copy;

static void copy_rows(void *ctx, int64_t r0, int64_t r1) {
    const nd_copy *c = ctx;
    const int in = c->dims[c->outer];
    for (int64_t r = r0; r < r1; r++) {
        int64_t so = 0, dof = 0, q = r;
        for (int i = c->outer - 1; i >= 0; i--) {
            const int dim = c->dims[i];
            const int64_t idx = q % c->sizes[dim];
            q /= c->sizes[dim];
            so += idx * c->ss[dim];
            dof += idx * c->ds[dim];
        }
        if (c->widen)
            (c->bf16 ? bf16_widen_run : widen_run)((const uint16_t *)(const void *)c->src + so,
                                                   c->ss[in], (float *)(void *)c->dst + dof,
                                                   c->ds[in], c->sizes[in]);
        else
            (c->bf16 ? bf16_narrow_run : narrow_run)((const float *)(const void *)c->src + so,
                                                     c->ss[in], (uint16_t *)(void *)c->dst + dof,
                                                     c->ds[in], c->sizes[in]);
    }
}

// Runs along the dim of the smallest `dense` stride (the float32 copy's).
static void copy_nd(int nd, const int64_t *sizes, const void *src, const int64_t *ss, void *dst,
                    const int64_t *ds, bool widen, bool bf16) {
    if (nd < 1 || nd > 5) return;  // (callers pass 1..5; bounds for the compiler)
    nd_copy c;
    memset(&c, 0, sizeof c);
    const int64_t *dense = widen ? ds : ss;
    int64_t total = 1;
    for (int i = 0; i < nd; i++) total *= sizes[i];
    if (total == 0) return;
    memcpy(c.sizes, sizes, (size_t)nd * sizeof(int64_t));
    memcpy(c.ss, ss, (size_t)nd * sizeof(int64_t));
    memcpy(c.ds, ds, (size_t)nd * sizeof(int64_t));
    // Outer dims by decreasing dense stride, the innermost last.
    int order[5] = {0, 1, 2, 3, 4};
    for (int i = 1; i < nd; i++)
        for (int j = i; j > 0 && dense[order[j - 1]] < dense[order[j]]; j--) {
            const int t = order[j - 1];
            order[j - 1] = order[j], order[j] = t;
        }
    int inner = order[nd - 1];
    for (int i = nd - 1; i >= 0 && sizes[inner] == 1; i--) inner = order[i];
    for (int i = 0; i < nd; i++)
        if (order[i] != inner) c.dims[c.outer++] = order[i];
    c.dims[c.outer] = inner;
    c.src = src;
    c.dst = dst;
    c.widen = widen;
    c.bf16 = bf16;
    const int64_t rows = total / sizes[inner];
    int64_t grain = F16_STAGE_GRAIN / sizes[inner];
    if (grain < 1) grain = 1;
    trn_parallel_for(rows, grain, copy_rows, &c);
}

void trn__f16_widen_nd(int nd, const int64_t *sizes, const void *src, const int64_t *ss, float *dst,
                       const int64_t *ds) {
    copy_nd(nd, sizes, src, ss, dst, ds, true, false);
}

void trn__f16_narrow_nd(int nd, const int64_t *sizes, const float *src, const int64_t *ss,
                        void *dst, const int64_t *ds) {
    copy_nd(nd, sizes, src, ss, dst, ds, false, false);
}

void trn__h16_widen_nd(trn_dtype dt, int nd, const int64_t *sizes, const void *src,
                       const int64_t *ss, float *dst, const int64_t *ds) {
    copy_nd(nd, sizes, src, ss, dst, ds, true, dt == TRN_DTYPE_BF16);
}

void trn__h16_narrow_nd(trn_dtype dt, int nd, const int64_t *sizes, const float *src,
                        const int64_t *ss, void *dst, const int64_t *ds) {
    copy_nd(nd, sizes, src, ss, dst, ds, false, dt == TRN_DTYPE_BF16);
}

void trn__f16_widen_run(const uint16_t *src, float *dst, int64_t n) {
    widen_run(src, 1, dst, 1, n);
}

void trn__f16_narrow_run(const float *src, uint16_t *dst, int64_t n) {
    narrow_run(src, 1, dst, 1, n);
}
