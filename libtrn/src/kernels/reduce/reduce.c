// reduce.c - owns the reduction kernel (trn/reduce.h): descriptor
// validation, dimension coalescing, and the loops.
//
// Loops are generated per (kind, dtype) by macros, so no inner loop switches
// on the dtype. "Map-combine" kinds (sum, prod, max, min, norms, any, all,
// count) share three loop shapes:
//  - contig: the innermost reduced dim has stride 1: LANES independent
//    accumulators over blocks of at most BLOCK elements, blocks combined
//    pairwise (like PyTorch's cascade sum), so float32 sums of millions of
//    elements keep ~log2(n) ulp error and the loop vectorizes;
//  - column: the innermost kept dim has stride 1 in the input and output
//    (a reduction over an outer dim): whole input rows are folded into a
//    vector of up to COLS partial results, a cascade of four levels: level
//    0 takes every row, level k flushes into level k+1 every `step` of its
//    own flushes, the result is ((l0 + l1) + l2) + l3. PyTorch CPU's
//    cascade sum has this shape and step (column_step), so float32 column
//    sums are its bits; with three levels the top one took every 256th
//    row's flush, and past 4096 rows the error grew linearly (1.8x CPU's
//    at 10000 rows, 3.6x at 65536);
//  - strided: anything else, one output at a time.
// Index kinds (max/min with indices, argmax/argmin), var/std and logsumexp
// have their own per-output loops.
// Selects on float compares (NaN-propagating max, the inline expf) only
// if-convert into vector blends when compares may be assumed not to trap;
// results are unchanged (the FP environment's flags are never read).
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("no-trapping-math")
#endif
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#if defined(__AVX2__)
#include <immintrin.h>
#endif

#include "../kit/bf16_load.h"
#include "../kit/dims.h"
#include "../kit/launch.h"
#include "trn/scalar.h"
#include "trn/convert.h"
#include "trn/parallel.h"
#include "trn/reduce.h"

// The 8-bit floats (15..19) are not reduced here: aten/float8.cpp widens them.
_Static_assert(TRN_DTYPE_COUNT == 20, "add the new dtype to this file");

#define MAYBE_UNUSED __attribute__((unused))
#define LANES 32
#define BLOCK 2048
#define COLS 4096

// Rows per flush of each cascade level: 16, or more once four levels of 16
// would not cover the rows pairwise-ish (2^(ceil(log2 rows) / 4) past 2^19
// rows), as PyTorch CPU picks it.
static int64_t column_step(int64_t rows) {
    int lg = 0;
    while (lg < 62 && ((int64_t)1 << lg) < rows) lg++;
    return (int64_t)1 << (lg / 4 > 4 ? lg / 4 : 4);
}

typedef struct reduce_args {
    trn_reduce_op op;
    trn_dtype dtype, out_dtype;
    const char *in;
    char *out, *out2;
    double param;
    int64_t count;  // elements reduced into each output
    int n_outer, n_inner;
    // The map-combine loops use the column shape (decided once at launch, so
    // that a piece of a split launch loops exactly as the whole would).
    int column;
    // Byte ranges touched, relative to the pointers (protect mode).
    int64_t in_lo, in_span, out_lo, out_span, out2_lo, out2_span;
    // outer sizes, in strides, out strides, out2 strides; inner sizes,
    // inner strides (elements).
    int64_t dims[6 * TRN_MAX_DIMS];
} reduce_args;

_Static_assert(sizeof(reduce_args) <= TRN_TASK_MAX_ARGS, "reduce args too large");

typedef void (*run_fn)(const reduce_args *a);

#define OSIZE(a) ((a)->dims)
#define OSTR_IN(a) ((a)->dims + (a)->n_outer)
#define OSTR_OUT(a) ((a)->dims + 2 * (a)->n_outer)
#define OSTR_OUT2(a) ((a)->dims + 3 * (a)->n_outer)
#define ISIZE(a) ((a)->dims + 4 * (a)->n_outer)
#define ISTR(a) ((a)->dims + 4 * (a)->n_outer + (a)->n_inner)

// ---- per-dtype load/store -------------------------------------------------------
// LD_x(v): storage value -> compute value; ST_x(v): compute value -> storage.
#define LD_id(v) (v)
#define ST_id(T, v) ((T)(v))
#define LD_f16(v) trn_half_to_float(v)
#define LD_bf16(v) trn_bf16_to_float(v)

static inline void store_u16h(uint16_t *p, float v) { *p = trn_float_to_half(v); }
static inline void store_u16b(uint16_t *p, float v) { *p = trn_float_to_bf16(v); }

// Store of a value in compute type into out dtype `od` (once per output,
// so a switch is fine here).
static void store_f(trn_dtype od, char *p, double v) {
    switch (od) {
    case TRN_DTYPE_F16: {
        uint16_t h = trn_float_to_half((float)v);
        memcpy(p, &h, 2);
        break;
    }
    case TRN_DTYPE_BF16: {
        uint16_t h = trn_float_to_bf16((float)v);
        memcpy(p, &h, 2);
        break;
    }
    case TRN_DTYPE_F32: {
        float f = (float)v;
        memcpy(p, &f, 4);
        break;
    }
    case TRN_DTYPE_F64: memcpy(p, &v, 8); break;
    default: break;
    }
}

// Integer-valued store (wrapping to the target width, bool = != 0).
static void store_u(trn_dtype od, char *p, uint64_t v) {
    switch (od) {
    case TRN_DTYPE_BOOL: {
        uint8_t x = v != 0;
        memcpy(p, &x, 1);
        break;
    }
    case TRN_DTYPE_U8:
    case TRN_DTYPE_I8: {
        uint8_t x = (uint8_t)v;
        memcpy(p, &x, 1);
        break;
    }
    case TRN_DTYPE_I16:
    case TRN_DTYPE_U16: {
        uint16_t x = (uint16_t)v;
        memcpy(p, &x, 2);
        break;
    }
    case TRN_DTYPE_I32:
    case TRN_DTYPE_U32: {
        uint32_t x = (uint32_t)v;
        memcpy(p, &x, 4);
        break;
    }
    case TRN_DTYPE_I64:
    case TRN_DTYPE_U64: memcpy(p, &v, 8); break;
    default: store_f(od, p, (double)(int64_t)v); break;
    }
}

static inline int64_t esize(trn_dtype d) { return (int64_t)trn_dtype_size(d); }

// ---- combine operators ------------------------------------------------------------
#define C_ADD(a, b) ((a) + (b))
#define C_MUL(a, b) ((a) * (b))
#define C_OR(a, b) ((a) | (b))
#define C_AND(a, b) ((a) & (b))
// NaN-propagating max/min (the first NaN seen is kept).
#define C_MAX(a, b) (((a) != (a) || (a) > (b)) ? (a) : (b))
#define C_MIN(a, b) (((a) != (a) || (a) < (b)) ? (a) : (b))
// The same without the NaN test (vmaxps / vminps): equal to C_MAX / C_MIN
// while `a` is not NaN.
#define SEL_MAX(a, b) ((a) > (b) ? (a) : (b))
#define SEL_MIN(a, b) ((a) < (b) ? (a) : (b))

// ---- splitting work across threads ----------------------------------------------
// No piece gets less than PAR_GRAIN elements of work.
#define PAR_GRAIN 65536
#define PAR_DEPTH 6

static inline int64_t par_grain(int64_t work_per_item) {
    return work_per_item >= PAR_GRAIN ? 1 : PAR_GRAIN / (work_per_item > 0 ? work_per_item : 1);
}

// A node of the pairwise summation tree of the contig loops.
typedef struct par_seg {
    int64_t off, n;
} par_seg;

static inline int64_t par_half(int64_t n) { return (n / 2 + LANES - 1) / LANES * LANES; }

// The nodes at `depth` below (off, n) (or the leaves above it), in order.
static int par_segments(int64_t off, int64_t n, int depth, par_seg *out, int k) {
    if (depth == 0 || n <= BLOCK) {
        out[k].off = off;
        out[k].n = n;
        return k + 1;
    }
    const int64_t h = par_half(n);
    k = par_segments(off, h, depth - 1, out, k);
    return par_segments(off + h, n - h, depth - 1, out, k);
}

// ---- map-combine loops ----------------------------------------------------------
// DEFINE_MC(fn, T, CT, A, LD, MAP, COMB, IDENT): A fn_contig(const T *x, n,
// p), fn_strided(x, n, stride, p), fn_row(acc, x, w, p). MAP uses `x` (the
// element loaded as compute type CT) and `p` (the op parameter); its value
// is converted to the accumulator type A.
#define DEFINE_MC(fn, T, CT, A, LD, MAP, COMB, IDENT)                                              \
    static A fn##_contig(const T *restrict xs, int64_t n, double p) {                              \
        (void)p;                                                                                   \
        if (n > BLOCK) {                                                                           \
            int64_t h = (n / 2 + LANES - 1) / LANES * LANES;                                       \
            A l = fn##_contig(xs, h, p);                                                           \
            A r = fn##_contig(xs + h, n - h, p);                                                   \
            return COMB(l, r);                                                                     \
        }                                                                                          \
        MC_LEAF(T, CT, A, LD, MAP, COMB, IDENT)                                                    \
    }                                                                                              \
    DEFINE_MC_REST(fn, T, CT, A, LD, MAP, COMB, IDENT)

// The leaf of a contig loop (n <= BLOCK): LANES accumulators, combined pairwise.
#define MC_LEAF(T, CT, A, LD, MAP, COMB, IDENT)                                                    \
    A acc[LANES];                                                                                  \
    for (int j = 0; j < LANES; j++) acc[j] = (IDENT);                                              \
    int64_t i = 0;                                                                                 \
    for (; i + LANES <= n; i += LANES)                                                             \
        for (int j = 0; j < LANES; j++) {                                                          \
            const CT x = (CT)LD(xs[i + j]);                                                        \
            acc[j] = COMB(acc[j], (A)(MAP));                                                       \
        }                                                                                          \
    for (int j = 0; i < n; i++, j++) {                                                             \
        const CT x = (CT)LD(xs[i]);                                                                \
        acc[j] = COMB(acc[j], (A)(MAP));                                                           \
    }                                                                                              \
    LANE_TREE_##COMB(A, COMB, acc)

// The LANES accumulators combined pairwise: acc[j] = COMB(acc[j], acc[j + w])
// for w = LANES/2 .. 1, then acc[0]. GCC ran that loop through the stack
// with partial reloads of full-width stores (store-forwarding stalls, ~100
// cycles a leaf: sum over the last dim of [4096, 256] float32 at 0.54x
// CPU); float and double sums halve vectors in registers instead, the same
// pairs in the same order (the same bits).
#define LANE_TREE_LOOP(COMB, acc)                                                                  \
    for (int w = LANES / 2; w > 0; w /= 2)                                                         \
        for (int j = 0; j < w; j++) acc[j] = COMB(acc[j], acc[j + w]);                             \
    return acc[0];
#define LANE_TREE_C_ADD(A, COMB, acc) return lane_add_##A(acc);
#define LANE_TREE_C_MUL(A, COMB, acc) LANE_TREE_LOOP(COMB, acc)
#define LANE_TREE_C_MAX(A, COMB, acc) LANE_TREE_LOOP(COMB, acc)
#define LANE_TREE_C_MIN(A, COMB, acc) LANE_TREE_LOOP(COMB, acc)
#define LANE_TREE_C_IMAX(A, COMB, acc) LANE_TREE_LOOP(COMB, acc)
#define LANE_TREE_C_IMIN(A, COMB, acc) LANE_TREE_LOOP(COMB, acc)
#define LANE_TREE_C_OR(A, COMB, acc) LANE_TREE_LOOP(COMB, acc)
#define LANE_TREE_C_AND(A, COMB, acc) LANE_TREE_LOOP(COMB, acc)

_Static_assert(LANES == 32, "lane_add_float/double halve 32 lanes");
typedef float v16f_t __attribute__((vector_size(64)));
typedef float v8f_t __attribute__((vector_size(32)));
typedef float v4f_t __attribute__((vector_size(16)));
typedef double v8d_t __attribute__((vector_size(64)));
typedef double v4d_t __attribute__((vector_size(32)));
typedef double v2d_t __attribute__((vector_size(16)));

static inline float lane_add_float(const float *acc) {
    v16f_t lo, hi;
    memcpy(&lo, acc, sizeof lo);
    memcpy(&hi, acc + 16, sizeof hi);
    const v16f_t s16 = lo + hi;  // acc[j] + acc[j + 16]
    const v8f_t s8 = __builtin_shufflevector(s16, s16, 0, 1, 2, 3, 4, 5, 6, 7) +
                     __builtin_shufflevector(s16, s16, 8, 9, 10, 11, 12, 13, 14, 15);
    const v4f_t s4 =
        __builtin_shufflevector(s8, s8, 0, 1, 2, 3) + __builtin_shufflevector(s8, s8, 4, 5, 6, 7);
    const float s2[2] = {s4[0] + s4[2], s4[1] + s4[3]};
    return s2[0] + s2[1];
}

static inline double lane_add_double(const double *acc) {
    v8d_t a, b, c, d;
    memcpy(&a, acc, sizeof a);
    memcpy(&b, acc + 8, sizeof b);
    memcpy(&c, acc + 16, sizeof c);
    memcpy(&d, acc + 24, sizeof d);
    const v8d_t lo = a + c, hi = b + d;  // acc[j] + acc[j + 16], j < 8 and 8 <= j < 16
    const v8d_t s8 = lo + hi;            // + 8
    const v4d_t s4 =
        __builtin_shufflevector(s8, s8, 0, 1, 2, 3) + __builtin_shufflevector(s8, s8, 4, 5, 6, 7);
    const v2d_t s2 = __builtin_shufflevector(s4, s4, 0, 1) + __builtin_shufflevector(s4, s4, 2, 3);
    return s2[0] + s2[1];
}

// Integer sums are exact in any order: the loop.
static inline uint64_t lane_add_uint64_t(uint64_t *acc) { LANE_TREE_LOOP(C_ADD, acc) }

// DEFINE_MC with a select fast path for the NaN-propagating max/min (COMB):
// SEL(acc, x) is the plain compare-select `acc > x ? acc : x` (one vmaxps,
// a 2-cycle chain; COMB's NaN test made each lane's chain compare -> mask
// or -> blend, which at 512 bits left too few chains in flight to hide it:
// issue 21's amax 0.6x at the avx512 level). Both agree wherever acc is not
// NaN, so the fast loop also ORs an "x is NaN" flag; a block that holds a
// NaN is redone with COMB, which keeps the old result bit for bit.
#define DEFINE_MC_SEL(fn, T, CT, A, LD, MAP, COMB, SEL, IDENT)                                     \
    static A fn##_exact(const T *restrict xs, int64_t n, double p) {                               \
        (void)p;                                                                                   \
        MC_LEAF(T, CT, A, LD, MAP, COMB, IDENT)                                                    \
    }                                                                                              \
    static A fn##_contig(const T *restrict xs, int64_t n, double p) {                              \
        (void)p;                                                                                   \
        if (n > BLOCK) {                                                                           \
            int64_t h = (n / 2 + LANES - 1) / LANES * LANES;                                       \
            A l = fn##_contig(xs, h, p);                                                           \
            A r = fn##_contig(xs + h, n - h, p);                                                   \
            return COMB(l, r);                                                                     \
        }                                                                                          \
        /* short rows: the flag's set-up and test cost more than the chain */                      \
        if (n < 8 * LANES) return fn##_exact(xs, n, p);                                            \
        A acc[LANES];                                                                              \
        int32_t nans[LANES];                                                                       \
        for (int j = 0; j < LANES; j++) {                                                          \
            acc[j] = (IDENT);                                                                      \
            nans[j] = 0;                                                                           \
        }                                                                                          \
        int64_t i = 0;                                                                             \
        for (; i + LANES <= n; i += LANES)                                                         \
            for (int j = 0; j < LANES; j++) {                                                      \
                const CT x = (CT)LD(xs[i + j]);                                                    \
                const A m = (A)(MAP);                                                              \
                acc[j] = SEL(acc[j], m);                                                           \
                nans[j] |= m != m;                                                                 \
            }                                                                                      \
        for (int j = 0; i < n; i++, j++) {                                                         \
            const CT x = (CT)LD(xs[i]);                                                            \
            const A m = (A)(MAP);                                                                  \
            acc[j] = SEL(acc[j], m);                                                               \
            nans[j] |= m != m;                                                                     \
        }                                                                                          \
        int32_t any = 0;                                                                           \
        for (int j = 0; j < LANES; j++) any |= nans[j];                                            \
        if (any) return fn##_exact(xs, n, p);                                                      \
        for (int w = LANES / 2; w > 0; w /= 2)                                                     \
            for (int j = 0; j < w; j++) acc[j] = COMB(acc[j], acc[j + w]);                         \
        return acc[0];                                                                             \
    }                                                                                              \
    DEFINE_MC_REST(fn, T, CT, A, LD, MAP, COMB, IDENT)

// The strided, parallel and row loops of DEFINE_MC (fn##_contig defined before).
#define DEFINE_MC_REST(fn, T, CT, A, LD, MAP, COMB, IDENT)                                         \
    static A fn##_strided(const T *xs, int64_t n, int64_t s, double p) {                           \
        (void)p;                                                                                   \
        A acc[8];                                                                                  \
        for (int j = 0; j < 8; j++) acc[j] = (IDENT);                                              \
        int64_t i = 0;                                                                             \
        for (; i + 8 <= n; i += 8)                                                                 \
            for (int j = 0; j < 8; j++) {                                                          \
                const CT x = (CT)LD(xs[(i + j) * s]);                                              \
                acc[j] = COMB(acc[j], (A)(MAP));                                                   \
            }                                                                                      \
        for (int j = 0; i < n; i++, j++) {                                                         \
            const CT x = (CT)LD(xs[i * s]);                                                        \
            acc[j] = COMB(acc[j], (A)(MAP));                                                       \
        }                                                                                          \
        for (int w = 4; w > 0; w /= 2)                                                             \
            for (int j = 0; j < w; j++) acc[j] = COMB(acc[j], acc[j + w]);                         \
        return acc[0];                                                                             \
    }                                                                                              \
    /* The pairwise tree of fn##_contig cut at depth PAR_DEPTH: the leaves   \
       run in parallel, the top is combined here in the same order, so the   \
       result is bit-identical to fn##_contig's for any thread count. */                     \
    typedef struct fn##_pctx {                                                                     \
        const T *xs;                                                                               \
        double p;                                                                                  \
        const par_seg *segs;                                                                       \
        A *vals;                                                                                   \
    } fn##_pctx;                                                                                   \
    static MAYBE_UNUSED void fn##_leaf(void *ctx, int64_t b, int64_t e) {                          \
        const fn##_pctx *c = ctx;                                                                  \
        for (int64_t i = b; i < e; i++)                                                            \
            c->vals[i] = fn##_contig(c->xs + c->segs[i].off, c->segs[i].n, c->p);                  \
    }                                                                                              \
    static MAYBE_UNUSED A fn##_top(const A *vals, int *k, int64_t n, int depth) {                  \
        if (depth == 0 || n <= BLOCK) return vals[(*k)++];                                         \
        const int64_t h = par_half(n);                                                             \
        const A l = fn##_top(vals, k, h, depth - 1);                                               \
        const A r = fn##_top(vals, k, n - h, depth - 1);                                           \
        return COMB(l, r);                                                                         \
    }                                                                                              \
    static MAYBE_UNUSED A fn##_par(const T *xs, int64_t n, double p) {                             \
        par_seg segs[1 << PAR_DEPTH];                                                              \
        A vals[1 << PAR_DEPTH];                                                                    \
        const int nseg = par_segments(0, n, PAR_DEPTH, segs, 0);                                   \
        fn##_pctx c = {xs, p, segs, vals};                                                         \
        trn_parallel_for(nseg, par_grain(n / nseg), fn##_leaf, &c);                                \
        int k = 0;                                                                                 \
        return fn##_top(vals, &k, n, PAR_DEPTH);                                                   \
    }                                                                                              \
    /* Fold one input row of w columns into acc. */                                                \
    static MAYBE_UNUSED void fn##_row(A *restrict acc, const T *restrict xs, int64_t w,            \
                                      double p) {                                                  \
        (void)p;                                                                                   \
        for (int64_t j = 0; j < w; j++) {                                                          \
            const CT x = (CT)LD(xs[j]);                                                            \
            acc[j] = COMB(acc[j], (A)(MAP));                                                       \
        }                                                                                          \
    }

// The task for one (kind, dtype): iterates the outputs, picks a loop shape,
// finalizes with FIN(acc) (uses `acc`, `cnt`, `p`) and stores with STORE(ptr,
// value).
#define DEFINE_MC_RUN(fn, T, A, COMB, IDENT, FIN, STORE)                                           \
    static void fn##_run(const reduce_args *a) {                                                   \
        const T *in = (const T *)(const void *)a->in;                                              \
        const int no = a->n_outer, ni = a->n_inner;                                                \
        const int64_t *os = OSIZE(a), *osi = OSTR_IN(a), *oso = OSTR_OUT(a);                       \
        const int64_t *is = ISIZE(a), *ist = ISTR(a);                                              \
        const int64_t oes = esize(a->out_dtype);                                                   \
        const double p = a->param;                                                                 \
        const double cnt = (double)a->count;                                                       \
        (void)cnt;                                                                                 \
        int64_t oidx[TRN_MAX_DIMS] = {0}, iidx[TRN_MAX_DIMS];                                      \
        int64_t ioff = 0, ooff = 0, dummy = 0;                                                     \
        if (no == 1 && os[0] == 1 && ni == 1 && ist[0] == 1 && a->count >= 2 * PAR_GRAIN) {        \
            /* one output of a long contiguous run: split the pairwise tree */                     \
            const A v = fn##_par(in, a->count, p);                                                 \
            STORE(a->out, FIN(A, v, cnt, p));                                                      \
            return;                                                                                \
        }                                                                                          \
        if (a->column) {                                                                           \
            /* column loop over the last outer dim */                                              \
            const int64_t wtot = os[no - 1];                                                       \
            const int64_t step = column_step(a->count);                                            \
            A lev[4][COLS]; /* the cascade's levels (column_step) */                               \
            do {                                                                                   \
                for (int64_t j0 = 0; j0 < wtot; j0 += COLS) {                                      \
                    const int64_t w = wtot - j0 < COLS ? wtot - j0 : COLS;                         \
                    for (int l = 0; l < 4; l++)                                                    \
                        for (int64_t j = 0; j < w; j++) lev[l][j] = (IDENT);                       \
                    memset(iidx, 0, sizeof(int64_t) * (size_t)ni);                                 \
                    int64_t roff = 0, rows = 0, flushes[2] = {0, 0};                               \
                    do {                                                                           \
                        fn##_row(lev[0], in + ioff + j0 + roff, w, p);                             \
                        if (++rows < step) continue;                                               \
                        rows = 0;                                                                  \
                        for (int l = 0;; l++) {                                                    \
                            for (int64_t j = 0; j < w; j++) {                                      \
                                lev[l + 1][j] = COMB(lev[l + 1][j], lev[l][j]);                    \
                                lev[l][j] = (IDENT);                                               \
                            }                                                                      \
                            if (l == 2 || ++flushes[l] < step) break;                              \
                            flushes[l] = 0;                                                        \
                        }                                                                          \
                    } while (trn_kit_odo_next(ni, is, iidx, ist, &roff, NULL, NULL, NULL, NULL));  \
                    for (int64_t j = 0; j < w; j++) {                                              \
                        const A v = COMB(lev[3][j], COMB(lev[2][j], COMB(lev[1][j], lev[0][j])));  \
                        STORE(a->out + (ooff + j0 + j) * oes, FIN(A, v, cnt, p));                  \
                    }                                                                              \
                }                                                                                  \
            } while (trn_kit_odo_next(no - 1, os, oidx, osi, &ioff, oso, &ooff, NULL, NULL));      \
            return;                                                                                \
        }                                                                                          \
        const int64_t nlast = is[ni - 1], slast = ist[ni - 1];                                     \
        do {                                                                                       \
            A acc = (IDENT);                                                                       \
            if (a->count > 0) {                                                                    \
                memset(iidx, 0, sizeof(int64_t) * (size_t)ni);                                     \
                int64_t roff = 0;                                                                  \
                do {                                                                               \
                    A r = slast == 1 ? fn##_contig(in + ioff + roff, nlast, p)                     \
                                     : fn##_strided(in + ioff + roff, nlast, slast, p);            \
                    acc = COMB(acc, r);                                                            \
                } while (trn_kit_odo_next(ni - 1, is, iidx, ist, &roff, NULL, NULL, NULL, NULL));  \
            }                                                                                      \
            STORE(a->out + ooff * oes, FIN(A, acc, cnt, p));                                       \
        } while (trn_kit_odo_next(no, os, oidx, osi, &ioff, oso, &ooff, NULL, &dummy));            \
    }

#define MC(fn, T, CT, A, LD, MAP, COMB, IDENT, FIN, STORE)                                         \
    DEFINE_MC(fn, T, CT, A, LD, MAP, COMB, IDENT)                                                  \
    DEFINE_MC_RUN(fn, T, A, COMB, IDENT, FIN, STORE)
#define MC_SEL(fn, T, CT, A, LD, MAP, COMB, SEL, IDENT, FIN, STORE)                                \
    DEFINE_MC_SEL(fn, T, CT, A, LD, MAP, COMB, SEL, IDENT)                                         \
    DEFINE_MC_RUN(fn, T, A, COMB, IDENT, FIN, STORE)

#define STORE_F(ptr, v) store_f(a->out_dtype, (ptr), (double)(v))
#define STORE_U(ptr, v) store_u(a->out_dtype, (ptr), (uint64_t)(v))
#define STORE_I(ptr, v) store_u(a->out_dtype, (ptr), (uint64_t)(int64_t)(v))
#define FIN_ACC(A, v, n, p) (v)

// Integer and bool dtypes: name, storage type, compare type, lowest, highest.
#define INT_DTYPES(X)                                                                              \
    X(TRN_DTYPE_BOOL, b8, uint8_t, 0, 1)                                                           \
    X(TRN_DTYPE_U8, u8, uint8_t, 0, UINT8_MAX)                                                     \
    X(TRN_DTYPE_I8, i8, int8_t, INT8_MIN, INT8_MAX)                                                \
    X(TRN_DTYPE_I16, i16, int16_t, INT16_MIN, INT16_MAX)                                           \
    X(TRN_DTYPE_I32, i32, int32_t, INT32_MIN, INT32_MAX)                                           \
    X(TRN_DTYPE_I64, i64, int64_t, INT64_MIN, INT64_MAX)                                           \
    X(TRN_DTYPE_U16, u16, uint16_t, 0, UINT16_MAX)                                                 \
    X(TRN_DTYPE_U32, u32, uint32_t, 0, UINT32_MAX)                                                 \
    X(TRN_DTYPE_U64, u64, uint64_t, 0, UINT64_MAX)

// Float dtypes: name, storage, compute, loader, sum accumulator.
#define FLOAT_DTYPES(X)                                                                            \
    X(TRN_DTYPE_F16, f16, uint16_t, float, LD_f16)                                                 \
    X(TRN_DTYPE_BF16, bf16, uint16_t, float, LD_bf16)                                              \
    X(TRN_DTYPE_F32, f32, float, float, LD_id)                                                     \
    X(TRN_DTYPE_F64, f64, double, double, LD_id)

#define NZ(x) ((x) != 0)

#define C_IMAX(a, b) ((a) > (b) ? (a) : (b))
#define C_IMIN(a, b) ((a) < (b) ? (a) : (b))
#define DEFINE_INT_KINDS(E, N, T, LO, HI)                                                          \
    MC(sum_##N, T, T, uint64_t, LD_id, x, C_ADD, 0, FIN_ACC, STORE_U)                              \
    MC(prod_##N, T, T, uint64_t, LD_id, x, C_MUL, 1, FIN_ACC, STORE_U)                             \
    MC(amax_##N, T, T, T, LD_id, x, C_IMAX, (T)(LO), FIN_ACC, STORE_I)                             \
    MC(amin_##N, T, T, T, LD_id, x, C_IMIN, (T)(HI), FIN_ACC, STORE_I)                             \
    MC(nnz_##N, T, T, uint64_t, LD_id, NZ(x), C_ADD, 0, FIN_ACC, STORE_U)                          \
    MC(any_##N, T, T, uint8_t, LD_id, NZ(x), C_OR, 0, FIN_ACC, STORE_U)                            \
    MC(all_##N, T, T, uint8_t, LD_id, NZ(x), C_AND, 1, FIN_ACC, STORE_U)
INT_DTYPES(DEFINE_INT_KINDS)

// For the float kinds the accumulator is the compute type C (float or
// double). MEAN divides the sum by the count in C, as PyTorch CPU does.
#define FIN_MEAN(A, v, n, p) ((A)((v) / (A)(n)))
#define FIN_SQRT(A, v, n, p) sqrt((double)(v))
#define FIN_POW(A, v, n, p) pow((double)(v), 1.0 / (p))
#define DEFINE_FLOAT_KINDS(E, N, T, C, LD)                                                         \
    MC(sum_##N, T, C, C, LD, x, C_ADD, 0, FIN_ACC, STORE_F)                                        \
    MC(mean_##N, T, C, C, LD, x, C_ADD, 0, FIN_MEAN, STORE_F)                                      \
    MC(prod_##N, T, C, C, LD, x, C_MUL, 1, FIN_ACC, STORE_F)                                       \
    MC_SEL(amax_##N, T, C, C, LD, x, C_MAX, SEL_MAX, -(C)INFINITY, FIN_ACC, STORE_F)               \
    MC_SEL(amin_##N, T, C, C, LD, x, C_MIN, SEL_MIN, (C)INFINITY, FIN_ACC, STORE_F)                \
    MC(nnz_##N, T, C, uint64_t, LD, NZ(x), C_ADD, 0, FIN_ACC, STORE_U)                             \
    MC(anyf_##N, T, C, C, LD, (C)NZ(x), C_MAX, 0, FIN_ACC, STORE_U)                                \
    MC(allf_##N, T, C, C, LD, (C)NZ(x), C_MIN, 1, FIN_ACC, STORE_U)                                \
    MC(norm0_##N, T, C, C, LD, (C)NZ(x), C_ADD, 0, FIN_ACC, STORE_F)                               \
    MC(norm1_##N, T, C, C, LD, (x < 0 ? -x : x), C_ADD, 0, FIN_ACC, STORE_F)                       \
    MC(norm2_##N, T, C, C, LD, x *x, C_ADD, 0, FIN_SQRT, STORE_F)                                  \
    MC_SEL(normi_##N, T, C, C, LD, (x < 0 ? -x : x), C_MAX, SEL_MAX, 0, FIN_ACC, STORE_F)          \
    MC(normni_##N, T, C, C, LD, (x < 0 ? -x : x), C_MIN, (C)INFINITY, FIN_ACC, STORE_F)            \
    MC(normp_##N, T, C, C, LD, (C)pow((double)(x < 0 ? -x : x), p), C_ADD, 0, FIN_POW, STORE_F)
FLOAT_DTYPES(DEFINE_FLOAT_KINDS)

// ---- float32 / bfloat16 column sums in registers -----------------------------------
// sum and mean over an outer dim (bias gradients: sum(0) of [512, 768]): the
// column loop above keeps its accumulators in a stack array, so each row
// costs a load, an add and a store per vector. Here the cascade's level 0
// (the `step` rows between two flushes) stays in registers, COL_STRIP
// columns at a time, and levels 1..3 live in an array per chunk of
// COL_CHUNK columns, touched once per `step` rows.
// The rows are taken a block of `step` at a time across the whole chunk
// (block-major). Session 37's strips ran down all the rows of 64 columns
// before the next 64: at 4096 columns each row was a new 4 KiB page read
// for 256 bytes, so every row missed the TLB and no prefetcher followed
// (sum(0) of 4096x4096 at 0.52-0.87x CPU); block-major reads `step` rows
// side by side, each sequentially.
// Per column the additions are the column loop's, in its cascade order
// (column_step), so the results are the same bits (bfloat16 widens exactly).
typedef float v8f __attribute__((vector_size(32)));
#define COL_STRIP 64
#define COL_CHUNK 2048

static inline v8f ld8_f32(const float *p) {
    v8f v;
    memcpy(&v, p, sizeof v);
    return v;
}

static inline void st8_f32(float *p, v8f v) { memcpy(p, &v, sizeof v); }

// (kit/bf16_load.h: one vpmovzxwd from memory and a shift.)
static inline v8f ld8_bf16(const uint16_t *p) { return trn__bf16_load8(p); }

// dst += src; src = 0 over w floats (one flush of a cascade level).
static void col_flush(float *restrict dst, float *restrict src, int64_t w) {
    for (int64_t j = 0; j < w; j++) {
        dst[j] += src[j];
        src[j] = 0;
    }
}

// N##_strip(x, n, rs, acc): the sums of n rows (rs elements apart) of the
// COL_STRIP columns at x, in eight registers (level 0 of the cascade).
// N##_chunk(x, rows, rs, w, lev, s): s[0..w) = the cascade sums of w columns
// (a multiple of COL_STRIP) over `rows` rows; lev holds 3 * w floats.
#define DEFINE_COL_SUM(N, T, LD8)                                                                  \
    static inline void N##_strip(const T *restrict x, int64_t n, int64_t rs, v8f acc[8]) {         \
        v8f a0 = {0}, a1 = {0}, a2 = {0}, a3 = {0}, a4 = {0}, a5 = {0}, a6 = {0}, a7 = {0};        \
        for (int64_t i = 0; i < n; i++, x += rs) {                                                 \
            a0 += LD8(x);                                                                          \
            a1 += LD8(x + 8);                                                                      \
            a2 += LD8(x + 16);                                                                     \
            a3 += LD8(x + 24);                                                                     \
            a4 += LD8(x + 32);                                                                     \
            a5 += LD8(x + 40);                                                                     \
            a6 += LD8(x + 48);                                                                     \
            a7 += LD8(x + 56);                                                                     \
        }                                                                                          \
        acc[0] = a0;                                                                               \
        acc[1] = a1;                                                                               \
        acc[2] = a2;                                                                               \
        acc[3] = a3;                                                                               \
        acc[4] = a4;                                                                               \
        acc[5] = a5;                                                                               \
        acc[6] = a6;                                                                               \
        acc[7] = a7;                                                                               \
    }                                                                                              \
    static void N##_chunk(const T *restrict x, int64_t rows, int64_t rs, int64_t w,                \
                          float *restrict lev, float *restrict s) {                                \
        float *mid = lev, *tot = lev + w, *top = lev + 2 * w;                                      \
        memset(lev, 0, sizeof(float) * (size_t)(3 * w));                                           \
        const int64_t step = column_step(rows);                                                    \
        int64_t r = 0, flushes = 0, flushes2 = 0;                                                  \
        v8f acc[8];                                                                                \
        for (; rows - r >= step; r += step, x += step * rs) {                                      \
            for (int64_t j = 0; j < w; j += COL_STRIP) {                                           \
                N##_strip(x + j, step, rs, acc);                                                   \
                for (int k = 0; k < 8; k++)                                                        \
                    st8_f32(mid + j + 8 * k, ld8_f32(mid + j + 8 * k) + acc[k]);                   \
            }                                                                                      \
            if (++flushes < step) continue;                                                        \
            flushes = 0;                                                                           \
            col_flush(tot, mid, w);                                                                \
            if (++flushes2 < step) continue;                                                       \
            flushes2 = 0;                                                                          \
            col_flush(top, tot, w);                                                                \
        }                                                                                          \
        for (int64_t j = 0; j < w; j += COL_STRIP) {                                               \
            N##_strip(x + j, rows - r, rs, acc);                                                   \
            for (int k = 0; k < 8; k++) {                                                          \
                const int64_t c = j + 8 * k;                                                       \
                st8_f32(s + c,                                                                     \
                        ld8_f32(top + c) + (ld8_f32(tot + c) + (ld8_f32(mid + c) + acc[k])));      \
            }                                                                                      \
        }                                                                                          \
    }                                                                                              \
    /* sum_N_run / mean_N_run, with the column shape of one reduced dim in */                      \
    /* register strips. */                                                                         \
    static void N##_col_run(const reduce_args *a) {                                                \
        const int mean = a->op == TRN_REDUCE_MEAN;                                                 \
        const run_fn loop = mean ? mean_##N##_run : sum_##N##_run;                                 \
        const int no = a->n_outer;                                                                 \
        const int64_t *os = OSIZE(a), *osi = OSTR_IN(a), *oso = OSTR_OUT(a);                       \
        const int64_t wtot = os[no - 1];                                                           \
        if (!a->column || a->n_inner != 1 || wtot < COL_STRIP) {                                   \
            loop(a);                                                                               \
            return;                                                                                \
        }                                                                                          \
        const T *in = (const T *)(const void *)a->in;                                              \
        const int64_t rows = ISIZE(a)[0], rs = ISTR(a)[0], oes = esize(a->out_dtype);              \
        const int64_t wfast = wtot / COL_STRIP * COL_STRIP;                                        \
        int64_t oidx[TRN_MAX_DIMS] = {0}, ioff = 0, ooff = 0;                                      \
        float lev[3 * COL_CHUNK], s[COL_CHUNK];                                                    \
        do {                                                                                       \
            for (int64_t j0 = 0; j0 < wfast; j0 += COL_CHUNK) {                                    \
                const int64_t w = wfast - j0 < COL_CHUNK ? wfast - j0 : COL_CHUNK;                 \
                N##_chunk(in + ioff + j0, rows, rs, w, lev, s);                                    \
                for (int64_t j = 0; j < w; j++) {                                                  \
                    /* FIN_MEAN's division, in float */                                            \
                    const float v = mean ? s[j] / (float)a->count : s[j];                          \
                    store_f(a->out_dtype, a->out + (ooff + j0 + j) * oes, (double)v);              \
                }                                                                                  \
            }                                                                                      \
        } while (trn_kit_odo_next(no - 1, os, oidx, osi, &ioff, oso, &ooff, NULL, NULL));          \
        if (wfast == wtot) return;                                                                 \
        /* The last columns: the column loop on a launch narrowed to them. */                      \
        reduce_args tail;                                                                          \
        memcpy(&tail, a, offsetof(reduce_args, dims) + (size_t)(4 * no + 2) * sizeof(int64_t));    \
        OSIZE(&tail)[no - 1] = wtot - wfast;                                                       \
        tail.in = a->in + wfast * (int64_t)sizeof(T);                                              \
        tail.out = a->out + wfast * oes;                                                           \
        loop(&tail);                                                                               \
    }
DEFINE_COL_SUM(f32, float, ld8_f32)
DEFINE_COL_SUM(bf16, uint16_t, ld8_bf16)

// ---- index reductions -------------------------------------------------------------
// MAX/MIN/ARGMAX/ARGMIN: one output at a time; the index is row-major over
// the (coalesced, never reordered) inner dims. BETTER(x, best) is true when
// x replaces best: strictly better, or the first NaN.
#define BETTER_MAX(x, b) ((x) > (b) || ((x) != (x) && (b) == (b)))
#define BETTER_MIN(x, b) ((x) < (b) || ((x) != (x) && (b) == (b)))

#define DEFINE_ARG(fn, T, C, LD, BETTER)                                                           \
    static void fn##_run(const reduce_args *a) {                                                   \
        const T *in = (const T *)(const void *)a->in;                                              \
        const int no = a->n_outer, ni = a->n_inner;                                                \
        const int64_t *os = OSIZE(a), *osi = OSTR_IN(a), *oso = OSTR_OUT(a);                       \
        const int64_t *oso2 = OSTR_OUT2(a);                                                        \
        const int64_t *is = ISIZE(a), *ist = ISTR(a);                                              \
        const int values = a->op == TRN_REDUCE_MAX || a->op == TRN_REDUCE_MIN;                     \
        const int64_t oes = esize(a->out_dtype);                                                   \
        const int64_t nlast = is[ni - 1], slast = ist[ni - 1];                                     \
        int64_t oidx[TRN_MAX_DIMS] = {0}, iidx[TRN_MAX_DIMS];                                      \
        int64_t ioff = 0, ooff = 0, o2off = 0;                                                     \
        do {                                                                                       \
            memset(iidx, 0, sizeof(int64_t) * (size_t)ni);                                         \
            int64_t roff = 0, base = 0, bi = 0;                                                    \
            C best = (C)LD(in[ioff]);                                                              \
            do {                                                                                   \
                const T *xs = in + ioff + roff;                                                    \
                for (int64_t i = 0; i < nlast; i++) {                                              \
                    const C x = (C)LD(xs[i * slast]);                                              \
                    if (BETTER(x, best)) {                                                         \
                        best = x;                                                                  \
                        bi = base + i;                                                             \
                    }                                                                              \
                }                                                                                  \
                base += nlast;                                                                     \
            } while (trn_kit_odo_next(ni - 1, is, iidx, ist, &roff, NULL, NULL, NULL, NULL));      \
            if (values) {                                                                          \
                store_f(a->out_dtype, a->out + ooff * oes, (double)best);                          \
                memcpy(a->out2 + o2off * 8, &bi, 8);                                               \
            } else {                                                                               \
                memcpy(a->out + ooff * 8, &bi, 8);                                                 \
            }                                                                                      \
        } while (                                                                                  \
            trn_kit_odo_next(no, os, oidx, osi, &ioff, oso, &ooff, values ? oso2 : NULL, &o2off)); \
    }

// Integer values are stored exactly through their own type (a double would
// round int64/uint64).
#define DEFINE_ARG_INT(E, N, T, LO, HI)                                                            \
    DEFINE_ARG_EXACT(argmax_##N, T, C_GT)                                                          \
    DEFINE_ARG_EXACT(argmin_##N, T, C_LT)
#define C_GT(x, b) ((x) > (b))
#define C_LT(x, b) ((x) < (b))
#define DEFINE_ARG_EXACT(fn, T, BETTER)                                                            \
    static void fn##_run(const reduce_args *a) {                                                   \
        const T *in = (const T *)(const void *)a->in;                                              \
        const int no = a->n_outer, ni = a->n_inner;                                                \
        const int64_t *os = OSIZE(a), *osi = OSTR_IN(a), *oso = OSTR_OUT(a);                       \
        const int64_t *oso2 = OSTR_OUT2(a);                                                        \
        const int64_t *is = ISIZE(a), *ist = ISTR(a);                                              \
        const int values = a->op == TRN_REDUCE_MAX || a->op == TRN_REDUCE_MIN;                     \
        const int64_t nlast = is[ni - 1], slast = ist[ni - 1];                                     \
        int64_t oidx[TRN_MAX_DIMS] = {0}, iidx[TRN_MAX_DIMS];                                      \
        int64_t ioff = 0, ooff = 0, o2off = 0;                                                     \
        do {                                                                                       \
            memset(iidx, 0, sizeof(int64_t) * (size_t)ni);                                         \
            int64_t roff = 0, base = 0, bi = 0;                                                    \
            T best = in[ioff];                                                                     \
            do {                                                                                   \
                const T *xs = in + ioff + roff;                                                    \
                for (int64_t i = 0; i < nlast; i++) {                                              \
                    const T x = xs[i * slast];                                                     \
                    if (BETTER(x, best)) {                                                         \
                        best = x;                                                                  \
                        bi = base + i;                                                             \
                    }                                                                              \
                }                                                                                  \
                base += nlast;                                                                     \
            } while (trn_kit_odo_next(ni - 1, is, iidx, ist, &roff, NULL, NULL, NULL, NULL));      \
            if (values) {                                                                          \
                memcpy(a->out + ooff * (int64_t)sizeof(T), &best, sizeof(T));                      \
                memcpy(a->out2 + o2off * 8, &bi, 8);                                               \
            } else {                                                                               \
                memcpy(a->out + ooff * 8, &bi, 8);                                                 \
            }                                                                                      \
        } while (                                                                                  \
            trn_kit_odo_next(no, os, oidx, osi, &ioff, oso, &ooff, values ? oso2 : NULL, &o2off)); \
    }
INT_DTYPES(DEFINE_ARG_INT)

#define DEFINE_ARG_FLOAT(E, N, T, C, LD)                                                           \
    DEFINE_ARG(argmax_##N, T, C, LD, BETTER_MAX)                                                   \
    DEFINE_ARG(argmin_##N, T, C, LD, BETTER_MIN)
FLOAT_DTYPES(DEFINE_ARG_FLOAT)

// ---- var/std and logsumexp ----------------------------------------------------------
// Two passes per output in double: the mean, then the sum of squared
// deviations (PyTorch CPU accumulates var/std in double as well).
#define DEFINE_STATS(E, N, T, C, LD)                                                               \
    DEFINE_MC(sumd_##N, T, double, double, LD, x, C_ADD, 0)                                        \
    static double devsq_##N(const T *xs, int64_t n, int64_t s, double m) {                         \
        double acc[8] = {0};                                                                       \
        int64_t i = 0;                                                                             \
        for (; i + 8 <= n; i += 8)                                                                 \
            for (int j = 0; j < 8; j++) {                                                          \
                const double d = (double)LD(xs[(i + j) * s]) - m;                                  \
                acc[j] += d * d;                                                                   \
            }                                                                                      \
        for (int j = 0; i < n; i++, j++) {                                                         \
            const double d = (double)LD(xs[i * s]) - m;                                            \
            acc[j] += d * d;                                                                       \
        }                                                                                          \
        return ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7]));  \
    }                                                                                              \
    static C lse_exp_##N(const T *xs, int64_t n, int64_t s, C m) {                                 \
        C acc[16];                                                                                 \
        for (int j = 0; j < 16; j++) acc[j] = 0;                                                   \
        int64_t i = 0;                                                                             \
        for (; i + 16 <= n; i += 16)                                                               \
            for (int j = 0; j < 16; j++) acc[j] += EXP_##N((C)LD(xs[(i + j) * s]) - m);            \
        for (int j = 0; i < n; i++, j++) acc[j] += EXP_##N((C)LD(xs[i * s]) - m);                  \
        for (int w = 8; w > 0; w /= 2)                                                             \
            for (int j = 0; j < w; j++) acc[j] += acc[j + w];                                      \
        return acc[0];                                                                             \
    }                                                                                              \
    static void stats_##N##_run(const reduce_args *a) {                                            \
        const T *in = (const T *)(const void *)a->in;                                              \
        const int no = a->n_outer, ni = a->n_inner;                                                \
        const int64_t *os = OSIZE(a), *osi = OSTR_IN(a), *oso = OSTR_OUT(a);                       \
        const int64_t *oso2 = OSTR_OUT2(a);                                                        \
        const int64_t *is = ISIZE(a), *ist = ISTR(a);                                              \
        const int64_t oes = esize(a->out_dtype);                                                   \
        const int64_t nlast = is[ni - 1], slast = ist[ni - 1];                                     \
        const trn_reduce_op op = a->op;                                                            \
        const int lse = op == TRN_REDUCE_LOGSUMEXP;                                                \
        const int with_mean = op == TRN_REDUCE_VAR_MEAN || op == TRN_REDUCE_STD_MEAN;              \
        const int take_sqrt = op == TRN_REDUCE_STD || op == TRN_REDUCE_STD_MEAN;                   \
        const double n = (double)a->count;                                                         \
        int64_t oidx[TRN_MAX_DIMS] = {0}, iidx[TRN_MAX_DIMS];                                      \
        int64_t ioff = 0, ooff = 0, o2off = 0;                                                     \
        do {                                                                                       \
            double s1 = 0;                                                                         \
            C mx = -(C)INFINITY;                                                                   \
            int64_t roff = 0;                                                                      \
            if (a->count > 0) {                                                                    \
                memset(iidx, 0, sizeof(int64_t) * (size_t)ni);                                     \
                do {                                                                               \
                    const T *xs = in + ioff + roff;                                                \
                    if (lse) {                                                                     \
                        C r = slast == 1 ? amax_##N##_contig(xs, nlast, 0)                         \
                                         : amax_##N##_strided(xs, nlast, slast, 0);                \
                        mx = C_MAX(mx, r);                                                         \
                    } else {                                                                       \
                        s1 += slast == 1 ? sumd_##N##_contig(xs, nlast, 0)                         \
                                         : sumd_##N##_strided(xs, nlast, slast, 0);                \
                    }                                                                              \
                } while (trn_kit_odo_next(ni - 1, is, iidx, ist, &roff, NULL, NULL, NULL, NULL));  \
            }                                                                                      \
            double mean = s1 / n, result;                                                          \
            if (lse) {                                                                             \
                const C m = (mx == (C)INFINITY || mx == -(C)INFINITY) ? 0 : mx;                    \
                C se = 0;                                                                          \
                if (a->count > 0) {                                                                \
                    memset(iidx, 0, sizeof(int64_t) * (size_t)ni);                                 \
                    roff = 0;                                                                      \
                    do {                                                                           \
                        se += lse_exp_##N(in + ioff + roff, nlast, slast, m);                      \
                    } while (                                                                      \
                        trn_kit_odo_next(ni - 1, is, iidx, ist, &roff, NULL, NULL, NULL, NULL));   \
                }                                                                                  \
                result = (double)((C)log((double)se) + m);                                         \
            } else {                                                                               \
                double m2 = 0;                                                                     \
                if (a->count > 0) {                                                                \
                    memset(iidx, 0, sizeof(int64_t) * (size_t)ni);                                 \
                    roff = 0;                                                                      \
                    do {                                                                           \
                        m2 += devsq_##N(in + ioff + roff, nlast, slast, mean);                     \
                    } while (                                                                      \
                        trn_kit_odo_next(ni - 1, is, iidx, ist, &roff, NULL, NULL, NULL, NULL));   \
                }                                                                                  \
                const double div = n - a->param > 0 ? n - a->param : 0;                            \
                result = m2 / div;                                                                 \
                if (take_sqrt) result = sqrt(result);                                              \
            }                                                                                      \
            store_f(a->out_dtype, a->out + ooff * oes, result);                                    \
            if (with_mean) store_f(a->out_dtype, a->out2 + o2off * oes, mean);                     \
        } while (trn_kit_odo_next(no, os, oidx, osi, &ioff, oso, &ooff, with_mean ? oso2 : NULL,   \
                                  &o2off));                                                        \
    }

#define EXP_f16(x) trn_sc_expf(x)
#define EXP_bf16(x) trn_sc_expf(x)
#define EXP_f32(x) trn_sc_expf(x)
#define EXP_f64(x) exp(x)
FLOAT_DTYPES(DEFINE_STATS)

// ---- dispatch -----------------------------------------------------------------------

static int is_real(trn_dtype d) {
    return (unsigned)d < TRN_DTYPE_COUNT && d != TRN_DTYPE_C64 && d != TRN_DTYPE_C128;
}

// The loop of (op, dtype); NULL when unsupported. NORM picks by p.
static run_fn pick(trn_reduce_op op, trn_dtype d, double p) {
    if (op == TRN_REDUCE_SUM || op == TRN_REDUCE_MEAN) {
        if (d == TRN_DTYPE_F32) return f32_col_run;
        if (d == TRN_DTYPE_BF16) return bf16_col_run;
    }
    switch (d) {
#define INT_CASE(E, N, T, LO, HI)                                                                  \
    case E:                                                                                        \
        switch (op) {                                                                              \
        case TRN_REDUCE_SUM: return sum_##N##_run;                                                 \
        case TRN_REDUCE_PROD: return prod_##N##_run;                                               \
        case TRN_REDUCE_AMAX: return amax_##N##_run;                                               \
        case TRN_REDUCE_AMIN: return amin_##N##_run;                                               \
        case TRN_REDUCE_MAX:                                                                       \
        case TRN_REDUCE_ARGMAX: return argmax_##N##_run;                                           \
        case TRN_REDUCE_MIN:                                                                       \
        case TRN_REDUCE_ARGMIN: return argmin_##N##_run;                                           \
        case TRN_REDUCE_ANY: return any_##N##_run;                                                 \
        case TRN_REDUCE_ALL: return all_##N##_run;                                                 \
        case TRN_REDUCE_COUNT_NONZERO: return nnz_##N##_run;                                       \
        default: return NULL;                                                                      \
        }
        INT_DTYPES(INT_CASE)
#undef INT_CASE
#define FLOAT_CASE(E, N, T, C, LD)                                                                 \
    case E:                                                                                        \
        switch (op) {                                                                              \
        case TRN_REDUCE_SUM: return sum_##N##_run;                                                 \
        case TRN_REDUCE_MEAN: return mean_##N##_run;                                               \
        case TRN_REDUCE_PROD: return prod_##N##_run;                                               \
        case TRN_REDUCE_AMAX: return amax_##N##_run;                                               \
        case TRN_REDUCE_AMIN: return amin_##N##_run;                                               \
        case TRN_REDUCE_MAX:                                                                       \
        case TRN_REDUCE_ARGMAX: return argmax_##N##_run;                                           \
        case TRN_REDUCE_MIN:                                                                       \
        case TRN_REDUCE_ARGMIN: return argmin_##N##_run;                                           \
        case TRN_REDUCE_ANY: return anyf_##N##_run;                                                \
        case TRN_REDUCE_ALL: return allf_##N##_run;                                                \
        case TRN_REDUCE_COUNT_NONZERO: return nnz_##N##_run;                                       \
        case TRN_REDUCE_VAR:                                                                       \
        case TRN_REDUCE_STD:                                                                       \
        case TRN_REDUCE_VAR_MEAN:                                                                  \
        case TRN_REDUCE_STD_MEAN:                                                                  \
        case TRN_REDUCE_LOGSUMEXP: return stats_##N##_run;                                         \
        case TRN_REDUCE_NORM:                                                                      \
            if (p == 0) return norm0_##N##_run;                                                    \
            if (p == 1) return norm1_##N##_run;                                                    \
            if (p == 2) return norm2_##N##_run;                                                    \
            if (p == INFINITY) return normi_##N##_run;                                             \
            if (p == -INFINITY) return normni_##N##_run;                                           \
            return normp_##N##_run;                                                                \
        default: return NULL;                                                                      \
        }
        FLOAT_DTYPES(FLOAT_CASE)
#undef FLOAT_CASE
    default: return NULL;
    }
}

int trn_reduce_supports(trn_reduce_op op, trn_dtype dtype, trn_dtype out_dtype) {
    if ((unsigned)op >= TRN_REDUCE_OP_COUNT || !is_real(dtype) ||
        (unsigned)out_dtype >= TRN_DTYPE_COUNT)
        return 0;
    if (pick(op, dtype, 2.0) == NULL) return 0;
    switch (op) {
    case TRN_REDUCE_ARGMAX:
    case TRN_REDUCE_ARGMIN:
    case TRN_REDUCE_COUNT_NONZERO: return out_dtype == TRN_DTYPE_I64;
    case TRN_REDUCE_ANY:
    case TRN_REDUCE_ALL: return out_dtype == TRN_DTYPE_BOOL || out_dtype == TRN_DTYPE_U8;
    default: return out_dtype == dtype;
    }
}

static const char *const op_names[] = {
#define OP_NAME(name) #name,
    TRN_REDUCE_OP_LIST(OP_NAME)
#undef OP_NAME
};

const char *trn_reduce_op_name(trn_reduce_op op) {
    return (unsigned)op < TRN_REDUCE_OP_COUNT ? op_names[op] : "invalid";
}

// Splitting a launch across threads: pieces of the largest outer dim, each
// run as a launch of its own (every output is computed exactly as unsplit).
typedef struct split_ctx {
    const reduce_args *a;
    run_fn fn;
    int k;          // the outer dim split
    size_t header;  // bytes of reduce_args to copy
    int64_t unit;   // items of dim k per parallel_for item
} split_ctx;

static void split_piece(void *ctx, int64_t b, int64_t e) {
    const split_ctx *c = ctx;
    const reduce_args *a = c->a;
    const int64_t n = OSIZE(a)[c->k];
    b *= c->unit;
    e = e * c->unit < n ? e * c->unit : n;
    reduce_args sub;
    memcpy(&sub, a, c->header);
    OSIZE(&sub)[c->k] = e - b;
    const int64_t ies = esize(a->dtype), oes = esize(a->out_dtype);
    const int64_t o2es = (a->op == TRN_REDUCE_MAX || a->op == TRN_REDUCE_MIN) ? 8 : oes;
    if (a->in != NULL && a->count > 0) sub.in = a->in + b * OSTR_IN(a)[c->k] * ies;
    sub.out = a->out + b * OSTR_OUT(a)[c->k] * oes;
    if (a->out2 != NULL) sub.out2 = a->out2 + b * OSTR_OUT2(a)[c->k] * o2es;
    c->fn(&sub);
}

static trn_status reduce_run(const void *args) {
    const reduce_args *a = args;
    const run_fn fn = pick(a->op, a->dtype, a->param);
    const int64_t *os = OSIZE(a);
    int k = 0;
    int64_t nout = 1;
    for (int d = 0; d < a->n_outer; d++) {
        nout *= os[d];
        if (os[d] > os[k]) k = d;
    }
    if (nout < 2 || nout * (a->count > 0 ? a->count : 1) < 2 * PAR_GRAIN) {
        fn(a);
        return TRN_SUCCESS;
    }
    const int64_t work = (nout / os[k]) * (a->count > 0 ? a->count : 1);
    // Column loops get whole register strips: a piece of 32 columns (a
    // 4096x256 sum(0) cut into 8) ran the stack-array loop, not the strips.
    const int64_t unit = a->column && k == a->n_outer - 1 ? COL_STRIP : 1;
    split_ctx c = {a, fn, k,
                   offsetof(reduce_args, dims) +
                       (size_t)(4 * a->n_outer + 2 * a->n_inner) * sizeof(int64_t),
                   unit};
    trn_parallel_for((os[k] + unit - 1) / unit, (par_grain(work) + unit - 1) / unit, split_piece,
                     &c);
    return TRN_SUCCESS;
}

static trn_status reduce_task(void *args) {
    const reduce_args *a = args;
    // No input is read when there is nothing to reduce.
    return trn__access_run(reduce_run, a, 3,
                           (const void *[]){a->out, a->count > 0 ? a->in : NULL, a->out2},
                           (const int64_t[]){a->out_lo, a->in_lo, a->out2_lo},
                           (const int64_t[]){a->out_span, a->in_span, a->out2_span});
}

// ---- launch -------------------------------------------------------------------------

static trn_status bad(const char *what) {
    return trn__set_error(TRN_ERROR_INVALID_ARGUMENT, "trn_reduce_launch: %s", what);
}

static int no_identity(trn_reduce_op op, double p) {
    switch (op) {
    case TRN_REDUCE_AMAX:
    case TRN_REDUCE_AMIN:
    case TRN_REDUCE_MAX:
    case TRN_REDUCE_MIN:
    case TRN_REDUCE_ARGMAX:
    case TRN_REDUCE_ARGMIN: return 1;
    case TRN_REDUCE_NORM: return p == -INFINITY;
    default: return 0;
    }
}

static int index_op(trn_reduce_op op) {
    return op == TRN_REDUCE_MAX || op == TRN_REDUCE_MIN || op == TRN_REDUCE_ARGMAX ||
           op == TRN_REDUCE_ARGMIN;
}

trn_status trn_reduce_launch(trn_stream *stream, const trn_reduce_desc *d) {
    if (stream == NULL || d == NULL) return bad("stream or descriptor is NULL");
    if ((unsigned)d->op >= TRN_REDUCE_OP_COUNT) return bad("invalid op");
    if (d->outer_ndim < 0 || d->outer_ndim > TRN_MAX_DIMS || d->inner_ndim < 0 ||
        d->inner_ndim > TRN_MAX_DIMS)
        return bad("ndim outside 0..64");
    if (!trn_reduce_supports(d->op, d->dtype, d->out_dtype))
        return trn__set_error(
            TRN_ERROR_UNSUPPORTED, "trn_reduce_launch: %s of %s into %s is not supported",
            trn_reduce_op_name(d->op), trn_dtype_name(d->dtype), trn_dtype_name(d->out_dtype));
    const int two = d->op == TRN_REDUCE_MAX || d->op == TRN_REDUCE_MIN ||
                    d->op == TRN_REDUCE_VAR_MEAN || d->op == TRN_REDUCE_STD_MEAN;
    if ((d->outer_ndim > 0 && (!d->outer_sizes || !d->in_outer_strides || !d->out_strides ||
                               (two && !d->out2_strides))) ||
        (d->inner_ndim > 0 && (!d->inner_sizes || !d->in_inner_strides)))
        return bad("sizes or strides are NULL");
    trn_status st = trn__fork_check();
    if (st != TRN_SUCCESS) return st;

    reduce_args a;
    memset(&a, 0, offsetof(reduce_args, dims));
    a.op = d->op;
    a.dtype = d->dtype;
    a.out_dtype = d->out_dtype;
    a.param = d->param;
    const int64_t ies = esize(d->dtype), oes = esize(d->out_dtype);
    const int64_t o2es = (d->op == TRN_REDUCE_MAX || d->op == TRN_REDUCE_MIN) ? 8 : oes;

    // Outer dims: drop size 1, merge neighbours contiguous on every side.
    trn_kit_dims outer, inner;
    trn_kit_dims_init(&outer, 3);
    int64_t nout = 1, in_hi = 0, out_hi = 0, out2_hi = 0;
    for (int k = 0; k < d->outer_ndim; k++) {
        const int64_t sz = d->outer_sizes[k];
        if (sz < 0) return bad("negative outer size");
        if (__builtin_mul_overflow(nout, sz, &nout)) return bad("outer size overflows");
        if (sz == 1) continue;
        const int64_t si = d->in_outer_strides[k], so = d->out_strides[k];
        const int64_t so2 = two ? d->out2_strides[k] : 0;
        if (so == 0 || (two && so2 == 0)) return bad("output stride 0 on a dim of size > 1");
        if (sz > 0 && (!trn__extent(sz, si, ies, &a.in_lo, &in_hi) ||
                       !trn__extent(sz, so, oes, &a.out_lo, &out_hi) ||
                       (two && !trn__extent(sz, so2, o2es, &a.out2_lo, &out2_hi))))
            return bad("strides overflow the address space");
        trn_kit_dims_push(&outer, sz, (const int64_t[]){si, so, so2});
    }
    if (nout == 0) return TRN_SUCCESS;
    // Inner dims: drop size 1; order by decreasing |stride| unless the op
    // returns indices (row-major order is part of its result); merge.
    int64_t isz[TRN_MAX_DIMS], ist[TRN_MAX_DIMS];
    int ni = 0;
    int64_t count = 1;
    for (int k = 0; k < d->inner_ndim; k++) {
        const int64_t sz = d->inner_sizes[k];
        if (sz < 0) return bad("negative inner size");
        if (__builtin_mul_overflow(count, sz, &count)) return bad("inner size overflows");
        if (sz == 1) continue;
        isz[ni] = sz;
        ist[ni] = d->in_inner_strides[k];
        ni++;
    }
    if (count == 0 && no_identity(d->op, d->param))
        return trn__set_error(TRN_ERROR_INVALID_ARGUMENT,
                              "trn_reduce_launch: %s over zero elements has no identity",
                              trn_reduce_op_name(d->op));
    if (!index_op(d->op)) {
        for (int k = 1; k < ni; k++)  // insertion sort, stable
            for (int j = k; j > 0 && llabs(ist[j - 1]) < llabs(ist[j]); j--) {
                int64_t t = ist[j];
                ist[j] = ist[j - 1];
                ist[j - 1] = t;
                t = isz[j];
                isz[j] = isz[j - 1];
                isz[j - 1] = t;
            }
    }
    trn_kit_dims_init(&inner, 1);
    for (int k = 0; k < ni; k++) {
        if (count > 0 && !trn__extent(isz[k], ist[k], ies, &a.in_lo, &in_hi))
            return bad("strides overflow the address space");
        trn_kit_dims_push(&inner, isz[k], &ist[k]);
    }
    trn_kit_dims_finish(&inner, (const int64_t[]){1});
    if (count == 0) {  // the loops see one (never read) element per output
        inner.size[0] = 0;
        inner.n = 1;
    }
    trn_kit_dims_finish(&outer, (const int64_t[]){1, 1, 1});
    const int no = outer.n;
    a.column = count > 0 && outer.stride[0][no - 1] == 1 && outer.stride[1][no - 1] == 1 &&
               inner.stride[0][inner.n - 1] != 1 && outer.size[no - 1] >= 8;
    if ((count > 0 && d->in == NULL) || d->out == NULL || (two && d->out2 == NULL))
        return bad("a data pointer is NULL");
    a.in = d->in;
    a.out = d->out;
    a.out2 = two ? d->out2 : NULL;
    a.count = count;
    a.n_outer = no;
    a.n_inner = inner.n;
    a.in_span = in_hi - a.in_lo + ies;
    a.out_span = out_hi - a.out_lo + oes;
    a.out2_span = out2_hi - a.out2_lo + o2es;
    const int64_t *end = trn_kit_dims_pack(&inner, trn_kit_dims_pack(&outer, a.dims));
    const size_t size = (size_t)((const char *)end - (const char *)&a);
    return trn_stream_launch(stream, reduce_task, &a, size);
}
