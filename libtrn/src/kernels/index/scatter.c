// scatter.c - owns the scatter loops of trn_index_launch: scatter / index_put
// (plain stores, moved as bytes per element size) and the reductions used by
// scatter_add, scatter_reduce, index_put(accumulate=True) and index_add,
// generated per (dtype, reduction) so the inner loops carry no dtype switch.
// Float16/bfloat16 reduce in float32 and round once per store; integers wrap
// (two's complement) like PyTorch's CPU kernels; bool adds as "or" and
// multiplies as "and". Everything runs single-threaded in iteration order,
// so results are deterministic.
#include <stdlib.h>
#include <string.h>

#include "index_impl.h"
#include "trn/convert.h"

// ---- plain stores ----------------------------------------------------------------
TRN__INDEX_DRIVER(put1, 1, 1, TRN__INDEX_MOVE1, 1, )
TRN__INDEX_DRIVER(put2, 1, 2, TRN__INDEX_MOVE2, 1, )
TRN__INDEX_DRIVER(put4, 1, 4, TRN__INDEX_MOVE4, 1, )
TRN__INDEX_DRIVER(put8, 1, 8, TRN__INDEX_MOVE8, 1, )
TRN__INDEX_DRIVER(put16, 1, 16, TRN__INDEX_MOVE16, 1, )

// ---- counts (MEAN): one per destination element, at byte offset / size ----------
#define COUNT_ELEM(dp, sp, af, ai)                                                                 \
    (void)(sp);                                                                                    \
    counts[((dp)-a->out) / es]++
#define COUNT_PROLOGUE const int64_t es = (int64_t)trn_dtype_size(a->dtype);
TRN__INDEX_DRIVER(count_run, 1, 1, COUNT_ELEM, 0, COUNT_PROLOGUE)

// ---- per-dtype element access ---------------------------------------------------
#define DEF_LDST(tag, T)                                                                           \
    static inline T ld_##tag(const void *p) {                                                      \
        T v;                                                                                       \
        memcpy(&v, p, sizeof v);                                                                   \
        return v;                                                                                  \
    }                                                                                              \
    static inline void st_##tag(void *p, T x) { memcpy(p, &x, sizeof x); }
DEF_LDST(f32, float)
DEF_LDST(f64, double)
DEF_LDST(u8, uint8_t)
DEF_LDST(i8, int8_t)
DEF_LDST(i16, int16_t)
DEF_LDST(i32, int32_t)
DEF_LDST(i64, int64_t)
DEF_LDST(u16, uint16_t)
DEF_LDST(u32, uint32_t)
DEF_LDST(u64, uint64_t)
// 16-bit floats: their bits move as u16 and convert on the way.
static inline float ld_f16(const void *p) { return trn_half_to_float(ld_u16(p)); }
static inline void st_f16(void *p, float x) { st_u16(p, trn_float_to_half(x)); }
static inline float ld_bf16(const void *p) { return trn_bf16_to_float(ld_u16(p)); }
static inline void st_bf16(void *p, float x) { st_u16(p, trn_float_to_bf16(x)); }
static inline uint8_t ld_b(const void *p) {
    uint8_t v;
    memcpy(&v, p, 1);
    return v != 0;
}
static inline void st_b(void *p, uint8_t x) {
    uint8_t v = x != 0;
    memcpy(p, &v, 1);
}

// Reductions of the current value x with the source y.
#define F_ADD(C, x, y) ((x) + (y)*alpha_f)
#define F_MUL(C, x, y) ((x) * (y))
#define F_MAX(C, x, y) (((y) != (y)) ? (y) : ((x) < (y) ? (y) : (x)))
#define F_MIN(C, x, y) (((y) != (y)) ? (y) : ((y) < (x) ? (y) : (x)))
#define I_ADD(C, x, y) ((C)((uint64_t)(x) + (uint64_t)(y) * (uint64_t)alpha_i))
#define I_MUL(C, x, y) ((C)((uint64_t)(x) * (uint64_t)(y)))
#define I_MAX(C, x, y) ((x) < (y) ? (y) : (x))
#define I_MIN(C, x, y) ((y) < (x) ? (y) : (x))
#define U_ADD I_ADD
#define U_MUL I_MUL
#define U_MAX I_MAX
#define U_MIN I_MIN
#define B_ADD(C, x, y) ((C)((x) | ((y) & (alpha_i != 0))))
#define B_MUL(C, x, y) ((C)((x) & (y)))
#define B_MAX(C, x, y) ((C)((x) | (y)))
#define B_MIN(C, x, y) ((C)((x) & (y)))

#define RED_PROLOGUE(C)                                                                            \
    const C alpha_f = (C)a->alpha;                                                                 \
    const int64_t alpha_i = a->alpha_int;                                                          \
    (void)alpha_f;                                                                                 \
    (void)alpha_i;

// X(tag, compute type, element size, kind F/I/B)
#define RED_DTYPES(X)                                                                              \
    X(b, uint8_t, 1, B)                                                                            \
    X(u8, uint8_t, 1, U)                                                                           \
    X(i8, int8_t, 1, I)                                                                            \
    X(i16, int16_t, 2, I)                                                                          \
    X(i32, int32_t, 4, I)                                                                          \
    X(i64, int64_t, 8, I)                                                                          \
    X(u16, uint16_t, 2, U)                                                                         \
    X(u32, uint32_t, 4, U)                                                                         \
    X(u64, uint64_t, 8, U)                                                                         \
    X(f16, float, 2, F)                                                                            \
    X(bf16, float, 2, F)                                                                           \
    X(f32, float, 4, F)                                                                            \
    X(f64, double, 8, F)

#define DEF_RED(tag, C, ES, KIND, RED)                                                             \
    static inline void elem_##tag##_##RED(char *dp, const char *sp, C alpha_f, int64_t alpha_i) {  \
        (void)alpha_f;                                                                             \
        (void)alpha_i;                                                                             \
        C x = ld_##tag(dp), y = ld_##tag(sp);                                                      \
        st_##tag(dp, KIND##_##RED(C, x, y));                                                       \
    }                                                                                              \
    TRN__INDEX_DRIVER(red_##tag##_##RED, 1, ES, elem_##tag##_##RED, 0, RED_PROLOGUE(C))
#define DEF_RED_ALL(tag, C, ES, KIND)                                                              \
    DEF_RED(tag, C, ES, KIND, ADD)                                                                 \
    DEF_RED(tag, C, ES, KIND, MUL)                                                                 \
    DEF_RED(tag, C, ES, KIND, MAX)                                                                 \
    DEF_RED(tag, C, ES, KIND, MIN)
RED_DTYPES(DEF_RED_ALL)

typedef trn_status (*red_fn)(const index_args *, const char *, int64_t *);
typedef struct red_set {
    red_fn add, mul, max, min;
} red_set;

static bool red_for(trn_dtype dt, red_set *r) {
#define RED_CASE(tag, dtype)                                                                       \
    case dtype:                                                                                    \
        *r = (red_set){red_##tag##_ADD, red_##tag##_MUL, red_##tag##_MAX, red_##tag##_MIN};        \
        return true;
    switch (dt) {
        RED_CASE(b, TRN_DTYPE_BOOL)
        RED_CASE(u8, TRN_DTYPE_U8)
        RED_CASE(i8, TRN_DTYPE_I8)
        RED_CASE(i16, TRN_DTYPE_I16)
        RED_CASE(i32, TRN_DTYPE_I32)
        RED_CASE(i64, TRN_DTYPE_I64)
        RED_CASE(u16, TRN_DTYPE_U16)
        RED_CASE(u32, TRN_DTYPE_U32)
        RED_CASE(u64, TRN_DTYPE_U64)
        RED_CASE(f16, TRN_DTYPE_F16)
        RED_CASE(bf16, TRN_DTYPE_BF16)
        RED_CASE(f32, TRN_DTYPE_F32)
        RED_CASE(f64, TRN_DTYPE_F64)
    default: return false;
    }
#undef RED_CASE
}

bool trn__scatter_supports(trn_dtype dt, int reduce) {
    red_set r;
    return reduce == TRN_INDEX_REDUCE_NONE || red_for(dt, &r);
}

// ---- MEAN: divide each counted position (floor division for integers) ----------
#define DEF_MEAN(tag, C, ES, KIND)                                                                 \
    static void mean_##tag(char *out, const int64_t *counts, int64_t n, int64_t self) {            \
        for (int64_t p = 0; p < n; p++) {                                                          \
            const int64_t c = counts[p] + self;                                                    \
            if (counts[p] == 0 || c == 0) continue;                                                \
            C x = ld_##tag(out + p * ES);                                                          \
            st_##tag(out + p * ES, KIND##_DIV(C, x, c));                                           \
        }                                                                                          \
    }
#define F_DIV(C, x, c) ((x) / (C)(c))
// Floor division by a positive count; unsigned types divide plainly.
#define I_DIV(C, x, c) ((C)((int64_t)(x) / (c) - ((int64_t)(x) % (c) != 0 && (int64_t)(x) < 0)))
#define U_DIV(C, x, c) ((C)((uint64_t)(x) / (uint64_t)(c)))
#define B_DIV(C, x, c) ((C)((x) / (c)))
RED_DTYPES(DEF_MEAN)

static void mean_finish(const index_args *a, const int64_t *counts) {
    const int64_t n = a->out_numel, s = a->include_self;
    switch (a->dtype) {
#define MEAN_CASE(tag, dtype)                                                                      \
    case dtype: mean_##tag(a->out, counts, n, s); break;
        MEAN_CASE(b, TRN_DTYPE_BOOL)
        MEAN_CASE(u8, TRN_DTYPE_U8)
        MEAN_CASE(i8, TRN_DTYPE_I8)
        MEAN_CASE(i16, TRN_DTYPE_I16)
        MEAN_CASE(i32, TRN_DTYPE_I32)
        MEAN_CASE(i64, TRN_DTYPE_I64)
        MEAN_CASE(u16, TRN_DTYPE_U16)
        MEAN_CASE(u32, TRN_DTYPE_U32)
        MEAN_CASE(u64, TRN_DTYPE_U64)
        MEAN_CASE(f16, TRN_DTYPE_F16)
        MEAN_CASE(bf16, TRN_DTYPE_BF16)
        MEAN_CASE(f32, TRN_DTYPE_F32)
        MEAN_CASE(f64, TRN_DTYPE_F64)
#undef MEAN_CASE
    default: break;
    }
}

trn_status trn__scatter_run(const index_args *a, const char *src0) {
    if (a->reduce == TRN_INDEX_REDUCE_NONE) {
        switch (trn_dtype_size(a->dtype)) {
        case 1: return put1(a, src0, NULL);
        case 2: return put2(a, src0, NULL);
        case 4: return put4(a, src0, NULL);
        case 8: return put8(a, src0, NULL);
        default: return put16(a, src0, NULL);
        }
    }
    red_set r;
    if (!red_for(a->dtype, &r))  // checked at launch
        return trn__set_error(TRN_ERROR_UNSUPPORTED, "scatter reduction on %s",
                              trn_dtype_name(a->dtype));
    switch (a->reduce) {
    case TRN_INDEX_REDUCE_ADD: return r.add(a, src0, NULL);
    case TRN_INDEX_REDUCE_MUL: return r.mul(a, src0, NULL);
    case TRN_INDEX_REDUCE_MAX: return r.max(a, src0, NULL);
    case TRN_INDEX_REDUCE_MIN: return r.min(a, src0, NULL);
    default: break;
    }
    // MEAN: count first (this pass also checks every index), then add.
    int64_t *counts = calloc(a->out_numel > 0 ? (size_t)a->out_numel : 1, sizeof *counts);
    if (counts == NULL)
        return trn__set_error(TRN_ERROR_OUT_OF_MEMORY,
                              "scatter_reduce(mean): no host memory for %lld "
                              "counts",
                              (long long)a->out_numel);
    trn_status st = count_run(a, src0, counts);
    if (st == TRN_SUCCESS) st = r.add(a, src0, NULL);
    if (st == TRN_SUCCESS) mean_finish(a, counts);
    free(counts);
    return st;
}
