// foreach.c - owns the list kernels of trn/foreach.h: the _foreach_* ops,
// _foreach_norm and the fused Adam/AdamW/SGD steps.
//
// One launch covers the whole list. The task cuts the tensors into chunks of
// at most CHUNK elements (a chunk never spans two tensors) and hands the
// chunks to the thread pool. Inside a chunk, blocks of BLK elements are
// converted into compute-type buffers (float, or double for float64), the
// op runs on the buffers and the result is rounded once on store, so one
// loop per op serves every dtype.
#include <math.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "../kit/launch.h"
#include "trn/convert.h"
#include "trn/foreach.h"
#include "trn/foreach_chain.h"
#include "trn/metrics.h"
#include "trn/parallel.h"

#include "foreach_adam_chain.h"

enum { CHUNK = 65536, BLK = 256 };

typedef struct fe_chunk {
    int64_t t, begin, end;
} fe_chunk;

// Cuts n[t] (read through get) into chunks; NULL on allocation failure.
static fe_chunk *make_chunks_of(int64_t count, int64_t (*get)(const void *, int64_t),
                                const void *arr, int64_t chunk, int64_t *nchunks) {
    int64_t total = 0;
    for (int64_t t = 0; t < count; t++) total += (get(arr, t) + chunk - 1) / chunk;
    fe_chunk *c = malloc((size_t)(total > 0 ? total : 1) * sizeof *c);
    if (c == NULL) return NULL;
    int64_t k = 0;
    for (int64_t t = 0; t < count; t++)
        for (int64_t b = 0, n = get(arr, t); b < n; b += chunk) {
            c[k].t = t;
            c[k].begin = b;
            c[k].end = b + chunk < n ? b + chunk : n;
            k++;
        }
    *nchunks = total;
    return c;
}
static fe_chunk *make_chunks(int64_t count, int64_t (*get)(const void *, int64_t), const void *arr,
                             int64_t *nchunks) {
    return make_chunks_of(count, get, arr, CHUNK, nchunks);
}

// ---- block conversion -------------------------------------------------------------
static void ld_f(trn_dtype d, const void *p, int64_t off, int64_t n, float *dst) {
    switch (d) {
    case TRN_DTYPE_F16:
        for (int64_t i = 0; i < n; i++) dst[i] = trn_half_to_float(((const uint16_t *)p)[off + i]);
        break;
    case TRN_DTYPE_BF16:
        for (int64_t i = 0; i < n; i++) dst[i] = trn_bf16_to_float(((const uint16_t *)p)[off + i]);
        break;
    default: memcpy(dst, (const float *)p + off, (size_t)n * sizeof(float));
    }
}
static void st_f(trn_dtype d, void *p, int64_t off, int64_t n, const float *src) {
    switch (d) {
    case TRN_DTYPE_F16:
        for (int64_t i = 0; i < n; i++) ((uint16_t *)p)[off + i] = trn_float_to_half(src[i]);
        break;
    case TRN_DTYPE_BF16:
        for (int64_t i = 0; i < n; i++) ((uint16_t *)p)[off + i] = trn_float_to_bf16(src[i]);
        break;
    default: memcpy((float *)p + off, src, (size_t)n * sizeof(float));
    }
}
static void ld_d(trn_dtype d, const void *p, int64_t off, int64_t n, double *dst) {
    (void)d;
    memcpy(dst, (const double *)p + off, (size_t)n * sizeof(double));
}
static void st_d(trn_dtype d, void *p, int64_t off, int64_t n, const double *src) {
    (void)d;
    memcpy((double *)p + off, src, (size_t)n * sizeof(double));
}

static double read_scalar(trn_dtype d, const void *p) {
    switch (d) {
    case TRN_DTYPE_F16: return trn_half_to_float(*(const uint16_t *)p);
    case TRN_DTYPE_BF16: return trn_bf16_to_float(*(const uint16_t *)p);
    case TRN_DTYPE_F32: return *(const float *)p;
    case TRN_DTYPE_F64: return *(const double *)p;
    case TRN_DTYPE_I64: return (double)*(const int64_t *)p;
    case TRN_DTYPE_I32: return (double)*(const int32_t *)p;
    case TRN_DTYPE_BOOL:
    case TRN_DTYPE_U8: return (double)*(const uint8_t *)p;
    default: return NAN;
    }
}

// ---- 16-bit add / sub, rounded as ATen's CPU kernel ---------------------------------
// ATen's range grain: smaller ranges run on one thread (at::internal::GRAIN_SIZE).
enum { ATEN_GRAIN = 32768 };

// Whether element j of an n-element tensor lies in the scalar tail of
// ATen's CPU loop: its range is split over threads in equal chunks (when n
// reaches the grain) and each chunk runs `block` elements per vector step,
// leaving len % block elements to the scalar loop.
static int cpu_tail(int64_t j, int64_t n, int64_t block, int threads) {
    if (block <= 0) return 0;
    int64_t start = 0, len = n;
    if (n >= ATEN_GRAIN && threads > 1) {
        int64_t nt = (n + ATEN_GRAIN - 1) / ATEN_GRAIN;
        if (nt > threads) nt = threads;
        const int64_t cs = (n + nt - 1) / nt;
        start = j / cs * cs;
        len = n - start < cs ? n - start : cs;
    }
    return j - start >= len - len % block;
}

static float round16(trn_dtype d, float v) {
    return d == TRN_DTYPE_F16 ? trn_half_to_float(trn_float_to_half(v))
                              : trn_bf16_to_float(trn_float_to_bf16(v));
}

// x[i] += alpha * y[i] for elements first .. first + n - 1 of tensor t. A
// scalar y (no b list) is rounded to the 16-bit type first, as ATen casts a
// scalar operand of add / sub to the tensors' type.
static void add16(const trn_foreach_desc *d, const trn_foreach_tensor *t, int64_t first, float *x,
                  const float *y, int64_t n) {
    const float alpha = round16(d->dtype, (float)(d->op == TRN_FOREACH_SUB ? -d->alpha : d->alpha));
    for (int64_t i = 0; i < n; i++) {
        const float v = t->b ? y[i] : round16(d->dtype, y[i]);
        x[i] = cpu_tail(first + i, t->n, d->cpu_block, d->cpu_threads)
                   ? x[i] + round16(d->dtype, alpha * v)
                   : fmaf(alpha, v, x[i]);
    }
}

// ---- elementwise ops ----------------------------------------------------------------
typedef struct fe_run {
    const trn_foreach_desc *d;
    const fe_chunk *chunks;
    double scalar_override;
    int has_override;
    double *partial;  // NORM: one per chunk
} fe_run;

// x: a (in place result), y: b or scalar broadcast, z: c; n <= BLK.
#define DEFINE_OPS(N, C, SQRT, EXP, POW, FABS, FMA)                                                \
    static void op_##N(trn_foreach_op op, C *x, const C *y, const C *z, C s, C alpha, int64_t n) { \
        switch (op) {                                                                              \
        case TRN_FOREACH_ADD:                                                                      \
            for (int64_t i = 0; i < n; i++) x[i] = FMA(alpha, y[i], x[i]);                         \
            break;                                                                                 \
        case TRN_FOREACH_SUB:                                                                      \
            for (int64_t i = 0; i < n; i++) x[i] = FMA(-alpha, y[i], x[i]);                        \
            break;                                                                                 \
        case TRN_FOREACH_MUL:                                                                      \
            for (int64_t i = 0; i < n; i++) x[i] = x[i] * y[i];                                    \
            break;                                                                                 \
        case TRN_FOREACH_DIV:                                                                      \
            for (int64_t i = 0; i < n; i++) x[i] = x[i] / y[i];                                    \
            break;                                                                                 \
        case TRN_FOREACH_MAXIMUM:                                                                  \
            for (int64_t i = 0; i < n; i++)                                                        \
                x[i] = x[i] != x[i] ? x[i] : (y[i] != y[i] ? y[i] : (x[i] > y[i] ? x[i] : y[i]));  \
            break;                                                                                 \
        case TRN_FOREACH_MINIMUM:                                                                  \
            for (int64_t i = 0; i < n; i++)                                                        \
                x[i] = x[i] != x[i] ? x[i] : (y[i] != y[i] ? y[i] : (x[i] < y[i] ? x[i] : y[i]));  \
            break;                                                                                 \
        case TRN_FOREACH_CLAMP_MIN:                                                                \
            for (int64_t i = 0; i < n; i++)                                                        \
                x[i] = x[i] != x[i] ? x[i] : (x[i] < y[i] ? y[i] : x[i]);                          \
            break;                                                                                 \
        case TRN_FOREACH_CLAMP_MAX:                                                                \
            for (int64_t i = 0; i < n; i++)                                                        \
                x[i] = x[i] != x[i] ? x[i] : (x[i] > y[i] ? y[i] : x[i]);                          \
            break;                                                                                 \
        case TRN_FOREACH_POW:                                                                      \
            for (int64_t i = 0; i < n; i++)                                                        \
                x[i] = y[i] == (C)2 ? x[i] * x[i] : (y[i] == (C)1 ? x[i] : POW(x[i], y[i]));       \
            break;                                                                                 \
        case TRN_FOREACH_RPOW:                                                                     \
            for (int64_t i = 0; i < n; i++) x[i] = POW(y[i], x[i]);                                \
            break;                                                                                 \
        case TRN_FOREACH_ADDCMUL:                                                                  \
            for (int64_t i = 0; i < n; i++) x[i] = x[i] + s * y[i] * z[i];                         \
            break;                                                                                 \
        case TRN_FOREACH_ADDCDIV:                                                                  \
            for (int64_t i = 0; i < n; i++) x[i] = x[i] + s * (y[i] / z[i]);                       \
            break;                                                                                 \
        case TRN_FOREACH_LERP:                                                                     \
            for (int64_t i = 0; i < n; i++) {                                                      \
                const C w = z ? z[i] : s;                                                          \
                x[i] = FABS(w) < (C)0.5 ? x[i] + w * (y[i] - x[i])                                 \
                                        : y[i] - (y[i] - x[i]) * ((C)1 - w);                       \
            }                                                                                      \
            break;                                                                                 \
        case TRN_FOREACH_SQRT:                                                                     \
            for (int64_t i = 0; i < n; i++) x[i] = SQRT(x[i]);                                     \
            break;                                                                                 \
        case TRN_FOREACH_NEG:                                                                      \
            for (int64_t i = 0; i < n; i++) x[i] = -x[i];                                          \
            break;                                                                                 \
        case TRN_FOREACH_ABS:                                                                      \
            for (int64_t i = 0; i < n; i++) x[i] = FABS(x[i]);                                     \
            break;                                                                                 \
        case TRN_FOREACH_EXP:                                                                      \
            for (int64_t i = 0; i < n; i++) x[i] = EXP(x[i]);                                      \
            break;                                                                                 \
        case TRN_FOREACH_RECIPROCAL:                                                               \
            for (int64_t i = 0; i < n; i++) x[i] = (C)1 / x[i];                                    \
            break;                                                                                 \
        case TRN_FOREACH_ZERO:                                                                     \
            for (int64_t i = 0; i < n; i++) x[i] = 0;                                              \
            break;                                                                                 \
        default: break;                                                                            \
        }                                                                                          \
    }                                                                                              \
    /* Out-of-place unary ops read a where it is: copying it into out first cost a pass */         \
    /* (_foreach_sqrt, AdamW's denominator, was 0.62x CPU). Same formulas as op_##N. */            \
    static int unary_##N(trn_foreach_op op, C *x, const C *a, int64_t n) {                         \
        switch (op) {                                                                              \
        case TRN_FOREACH_SQRT:                                                                     \
            for (int64_t i = 0; i < n; i++) x[i] = SQRT(a[i]);                                     \
            return 1;                                                                              \
        case TRN_FOREACH_NEG:                                                                      \
            for (int64_t i = 0; i < n; i++) x[i] = -a[i];                                          \
            return 1;                                                                              \
        case TRN_FOREACH_ABS:                                                                      \
            for (int64_t i = 0; i < n; i++) x[i] = FABS(a[i]);                                     \
            return 1;                                                                              \
        case TRN_FOREACH_EXP:                                                                      \
            for (int64_t i = 0; i < n; i++) x[i] = EXP(a[i]);                                      \
            return 1;                                                                              \
        case TRN_FOREACH_RECIPROCAL:                                                               \
            for (int64_t i = 0; i < n; i++) x[i] = (C)1 / a[i];                                    \
            return 1;                                                                              \
        default: return 0;                                                                         \
        }                                                                                          \
    }                                                                                              \
    static void chunk_##N(const fe_run *r, const fe_chunk *ch) {                                   \
        const trn_foreach_desc *d = r->d;                                                          \
        const trn_foreach_tensor *t = &d->tensors[ch->t];                                          \
        C x[BLK], y[BLK], z[BLK];                                                                  \
        const C s = (C)(r->has_override ? r->scalar_override : t->scalar);                         \
        const C alpha = (C)d->alpha;                                                               \
        const int unary = d->op >= TRN_FOREACH_SQRT;                                               \
        const int sixteen = d->dtype == TRN_DTYPE_F16 || d->dtype == TRN_DTYPE_BF16;               \
        /* Operands stored in the compute type are used in place (the output     \
           starts as a copy of a): staging them cost 3 block copies per block,   \
           half of a float32 _foreach_add_'s time. */                 \
        if (sizeof(C) == 8 || d->dtype == TRN_DTYPE_F32) {                                         \
            for (int64_t b = ch->begin; b < ch->end; b += BLK) {                                   \
                const int64_t n = ch->end - b < BLK ? ch->end - b : BLK;                           \
                C *xo = (C *)t->out + b;                                                           \
                if (unary && t->out != t->a && unary_##N(d->op, xo, (const C *)t->a + b, n))       \
                    continue;                                                                      \
                if (d->op == TRN_FOREACH_ZERO)                                                     \
                    for (int64_t i = 0; i < n; i++) xo[i] = 0;                                     \
                else if (t->out != t->a)                                                           \
                    memcpy(xo, (const C *)t->a + b, (size_t)n * sizeof(C));                        \
                const C *yp = y;                                                                   \
                if (unary) {                                                                       \
                } else if (t->b) {                                                                 \
                    yp = (const C *)t->b + b;                                                      \
                } else {                                                                           \
                    for (int64_t i = 0; i < n; i++) y[i] = s;                                      \
                }                                                                                  \
                op_##N(d->op, xo, yp, t->c ? (const C *)t->c + b : NULL, s, alpha, n);             \
            }                                                                                      \
            (void)x, (void)z;                                                                      \
            return;                                                                                \
        }                                                                                          \
        for (int64_t b = ch->begin; b < ch->end; b += BLK) {                                       \
            const int64_t n = ch->end - b < BLK ? ch->end - b : BLK;                               \
            if (d->op == TRN_FOREACH_ZERO) {                                                       \
                for (int64_t i = 0; i < n; i++) x[i] = 0;                                          \
            } else {                                                                               \
                ld_##N(d->dtype, t->a, b, n, x);                                                   \
            }                                                                                      \
            if (!unary) {                                                                          \
                if (t->b)                                                                          \
                    ld_##N(d->dtype, t->b, b, n, y);                                               \
                else                                                                               \
                    for (int64_t i = 0; i < n; i++) y[i] = s;                                      \
            }                                                                                      \
            if (t->c) ld_##N(d->dtype, t->c, b, n, z);                                             \
            /* sixteen is never set in the double instance: the casts are no-ops there */          \
            if (sixteen && (d->op == TRN_FOREACH_ADD || d->op == TRN_FOREACH_SUB))                 \
                add16(d, t, b, (float *)(void *)x, (const float *)(const void *)y, n);             \
            else                                                                                   \
                op_##N(d->op, x, y, t->c ? z : NULL, s, alpha, n);                                 \
            st_##N(d->dtype, t->out, b, n, x);                                                     \
        }                                                                                          \
    }                                                                                              \
    static double norm_##N(const fe_run *r, const fe_chunk *ch) {                                  \
        const trn_foreach_desc *d = r->d;                                                          \
        const trn_foreach_tensor *t = &d->tensors[ch->t];                                          \
        C x[BLK];                                                                                  \
        double acc = 0;                                                                            \
        for (int64_t b = ch->begin; b < ch->end; b += BLK) {                                       \
            const int64_t n = ch->end - b < BLK ? ch->end - b : BLK;                               \
            ld_##N(d->dtype, t->a, b, n, x);                                                       \
            C part = 0;                                                                            \
            if (d->ord == 2) {                                                                     \
                for (int64_t i = 0; i < n; i++) part += x[i] * x[i];                               \
                acc += (double)part;                                                               \
            } else if (d->ord == 1) {                                                              \
                for (int64_t i = 0; i < n; i++) part += FABS(x[i]);                                \
                acc += (double)part;                                                               \
            } else {                                                                               \
                for (int64_t i = 0; i < n; i++) {                                                  \
                    const C v = FABS(x[i]);                                                        \
                    part = v != v || v > part ? v : part;                                          \
                }                                                                                  \
                acc = part != part || (double)part > acc ? (double)part : acc;                     \
            }                                                                                      \
        }                                                                                          \
        return acc;                                                                                \
    }

DEFINE_OPS(f, float, sqrtf, expf, powf, fabsf, fmaf)
DEFINE_OPS(d, double, sqrt, exp, pow, fabs, fma)

static void fe_piece(void *ctx, int64_t c0, int64_t c1) {
    const fe_run *r = ctx;
    const int dbl = r->d->dtype == TRN_DTYPE_F64;
    for (int64_t c = c0; c < c1; c++) {
        if (r->d->op == TRN_FOREACH_NORM)
            r->partial[c] = dbl ? norm_d(r, &r->chunks[c]) : norm_f(r, &r->chunks[c]);
        else if (dbl)
            chunk_d(r, &r->chunks[c]);
        else
            chunk_f(r, &r->chunks[c]);
    }
}

// ---- memory access (protect mode) -----------------------------------------------------
typedef struct acc_list {
    const void **p;
    size_t *n;
    int64_t count, begun;
} acc_list;

static int acc_init(acc_list *a, int64_t cap) {
    a->p = malloc((size_t)(cap > 0 ? cap : 1) * sizeof *a->p);
    a->n = malloc((size_t)(cap > 0 ? cap : 1) * sizeof *a->n);
    a->count = a->begun = 0;
    return a->p != NULL && a->n != NULL;
}
static void acc_add(acc_list *a, const void *p, size_t n) {
    if (p == NULL || n == 0) return;
    a->p[a->count] = p;
    a->n[a->count++] = n;
}
static trn_status acc_begin(acc_list *a) {
    for (a->begun = 0; a->begun < a->count; a->begun++) {
        trn_status st = trn__mem_access_begin(a->p[a->begun], a->n[a->begun]);
        if (st != TRN_SUCCESS) return st;
    }
    return TRN_SUCCESS;
}
static void acc_free(acc_list *a) {
    for (int64_t k = a->begun - 1; k >= 0; k--) trn__mem_access_end(a->p[k], a->n[k]);
    free(a->p);
    free(a->n);
}

// ---- shared launch / task steps -----------------------------------------------------------
// Launches `task` on `args` (a descriptor copy) after copying the descriptor's
// tensor array (count elements of elem bytes) to the heap: the pointer at
// tensors_field is set to the copy, which the task frees. A failed launch
// frees it here, except under NEURON_LAUNCH_BLOCKING, where a failure is
// the task's own result (it ran, and freed the copy).
static trn_status launch_list(trn_stream *stream, trn_status (*task)(void *), void *args,
                              size_t args_size, void *tensors_field, int64_t count, size_t elem,
                              const char *fn) {
    void *copy = malloc((size_t)count * elem);
    if (copy == NULL) return trn__set_error(TRN_ERROR_OUT_OF_MEMORY, "%s: out of host memory", fn);
    const void *src;
    memcpy(&src, tensors_field, sizeof src);
    memcpy(copy, src, (size_t)count * elem);
    memcpy(tensors_field, &copy, sizeof copy);
    trn_status st = trn_stream_launch(stream, task, args, args_size);
    if (st != TRN_SUCCESS && !trn__config_get()->launch_blocking) free(copy);
    return st;
}

typedef struct opt_run opt_run;
typedef void (*opt_chunk_fn)(const opt_run *r, const fe_chunk *ch);

// What differs between the fused optimizers' tasks: the tensor entries, the
// memory each opens, and the step over one chunk (float / double compute).
typedef struct opt_kind {
    const char *what;  // "fused adam": the out-of-memory message
    int64_t ranges;    // most memory ranges one tensor entry opens
    int64_t (*numel)(const void *tensors, int64_t t);
    void (*open)(acc_list *acc, const void *d, int64_t t, size_t es);  // entry t's ranges
    opt_chunk_fn chunk_f, chunk_d;
} opt_kind;

struct opt_run {
    const void *d;
    const fe_chunk *chunks;
    float scale;  // grad_scale's value
    int has_scale;
    opt_chunk_fn chunk;  // the kind's step for the list's dtype
};

static void opt_piece(void *ctx, int64_t c0, int64_t c1) {
    const opt_run *r = ctx;
    for (int64_t c = c0; c < c1; c++) r->chunk(r, &r->chunks[c]);
}

// An optimizer's task (d: its descriptor, whose tensor array is the heap
// copy launch_list made; freed here): opens the memory of every entry and
// of grad_scale / found_inf, then runs nothing when found_inf is set (a
// skipped step, as PyTorch), else the kind's step over the chunks of the list.
static trn_status opt_task(const opt_kind *k, const void *d, trn_dtype dtype, int64_t count,
                           const void *tensors, const float *grad_scale, const float *found_inf) {
    const size_t es = trn_dtype_size(dtype);
    acc_list acc;
    trn_status st = TRN_SUCCESS;
    if (!acc_init(&acc, k->ranges * count + 2)) {
        st = trn__set_error(TRN_ERROR_OUT_OF_MEMORY, "%s: out of host memory", k->what);
        goto out;
    }
    for (int64_t t = 0; t < count; t++) k->open(&acc, d, t, es);
    acc_add(&acc, grad_scale, sizeof(float));
    acc_add(&acc, found_inf, sizeof(float));
    st = acc_begin(&acc);
    if (st != TRN_SUCCESS || (found_inf && *found_inf != 0.0f)) goto out;
    int64_t nchunks = 0;
    fe_chunk *chunks = make_chunks(count, k->numel, tensors, &nchunks);
    if (chunks == NULL) {
        st = trn__set_error(TRN_ERROR_OUT_OF_MEMORY, "%s: out of host memory", k->what);
        goto out;
    }
    opt_run run = {d, chunks, grad_scale ? *grad_scale : 1.0f, grad_scale != NULL,
                   dtype == TRN_DTYPE_F64 ? k->chunk_d : k->chunk_f};
    trn_parallel_for(nchunks, 1, opt_piece, &run);
    free(chunks);
out:
    acc_free(&acc);
    free((void *)tensors);
    return st;
}

// g /= the grad scale, stored back into the gradient (as PyTorch's fused
// optimizers unscale it in place), for a block of n at b.
#define OPT_UNSCALE(N, C, grad)                                                                    \
    do {                                                                                           \
        if (r->has_scale) {                                                                        \
            for (int64_t i = 0; i < n; i++) g[i] = g[i] / (C)r->scale;                             \
            st_##N(d->dtype, grad, b, n, g);                                                       \
        }                                                                                          \
    } while (0)

// ---- foreach launch --------------------------------------------------------------------
typedef struct fe_args {
    trn_foreach_desc d;  // d.tensors points to the heap copy, freed by the task
} fe_args;

static int64_t fe_numel(const void *arr, int64_t t) {
    return ((const trn_foreach_tensor *)arr)[t].n;
}

// Runs op d over its list (its memory already open).
static trn_status fe_run_op(const trn_foreach_desc *d) {
    trn_status st = TRN_SUCCESS;
    double *partial = NULL;
    int64_t nchunks = 0;
    fe_chunk *chunks = make_chunks(d->count, fe_numel, d->tensors, &nchunks);
    if (d->op == TRN_FOREACH_NORM)
        partial = malloc((size_t)(nchunks > 0 ? nchunks : 1) * sizeof *partial);
    if (chunks == NULL || (d->op == TRN_FOREACH_NORM && partial == NULL)) {
        st = trn__set_error(TRN_ERROR_OUT_OF_MEMORY, "foreach: out of host memory");
        goto out;
    }
    fe_run run = {d, chunks, 0.0, 0, partial};
    if (d->scalar_tensor) {
        run.scalar_override = read_scalar(d->scalar_dtype, d->scalar_tensor);
        run.has_override = 1;
    }
    trn_parallel_for(nchunks, 1, fe_piece, &run);
    if (d->op == TRN_FOREACH_NORM) {
        // Combine the chunk partials of each tensor (chunks are in tensor order).
        int64_t c = 0;
        for (int64_t t = 0; t < d->count; t++) {
            double acc_v = 0;
            for (; c < nchunks && chunks[c].t == t; c++) {
                if (d->ord == 1 || d->ord == 2)
                    acc_v += partial[c];
                else
                    acc_v = partial[c] != partial[c] || partial[c] > acc_v ? partial[c] : acc_v;
            }
            const double v = d->ord == 2 ? sqrt(acc_v) : acc_v;
            void *o = d->tensors[t].out;
            switch (d->dtype) {
            case TRN_DTYPE_F16: *(uint16_t *)o = trn_float_to_half((float)v); break;
            case TRN_DTYPE_BF16: *(uint16_t *)o = trn_float_to_bf16((float)v); break;
            case TRN_DTYPE_F32: *(float *)o = (float)v; break;
            default: *(double *)o = v; break;
            }
        }
    }
out:
    free(partial);
    free(chunks);
    return st;
}

// Adds the memory op d touches to acc (room: 4 * d->count + 1 ranges).
static void fe_open(acc_list *acc, const trn_foreach_desc *d) {
    const size_t es = trn_dtype_size(d->dtype);
    for (int64_t t = 0; t < d->count; t++) {
        const trn_foreach_tensor *x = &d->tensors[t];
        const size_t bytes = (size_t)x->n * es;
        acc_add(acc, x->out, d->op == TRN_FOREACH_NORM ? es : bytes);
        if (x->a != x->out || d->op == TRN_FOREACH_NORM) acc_add(acc, x->a, bytes);
        if (x->b != x->out) acc_add(acc, x->b, bytes);
        if (x->c != x->out) acc_add(acc, x->c, bytes);
    }
    if (d->scalar_tensor) acc_add(acc, d->scalar_tensor, trn_dtype_size(d->scalar_dtype));
}

static trn_status fe_task(void *args) {
    fe_args *fa = args;
    const trn_foreach_desc *d = &fa->d;
    acc_list acc;
    trn_status st = TRN_SUCCESS;
    if (!acc_init(&acc, 4 * d->count + 1)) {
        st = trn__set_error(TRN_ERROR_OUT_OF_MEMORY, "foreach: out of host memory");
        goto out;
    }
    fe_open(&acc, d);
    st = acc_begin(&acc);
    if (st == TRN_SUCCESS) st = fe_run_op(d);
out:
    acc_free(&acc);
    free((void *)d->tensors);
    return st;
}

int trn_foreach_supports(trn_foreach_op op, trn_dtype dtype) {
    const int fl = dtype == TRN_DTYPE_F32 || dtype == TRN_DTYPE_F16 || dtype == TRN_DTYPE_BF16 ||
                   dtype == TRN_DTYPE_F64;
    return fl && (int)op >= 0 && op < TRN_FOREACH_OP_COUNT;
}

static trn_status check_list(trn_stream *stream, const void *desc, const void *tensors,
                             int64_t count, trn_dtype dtype, const char *fn) {
    if (stream == NULL || desc == NULL) return trn__check_launch(stream, desc, fn);
    if (count < 0 || (count > 0 && tensors == NULL))
        return trn__set_error(TRN_ERROR_INVALID_ARGUMENT, "%s: invalid tensor list", fn);
    if (!trn_foreach_supports(TRN_FOREACH_ADD, dtype))
        return trn__set_error(TRN_ERROR_UNSUPPORTED, "%s: dtype %s is not supported", fn,
                              trn_dtype_name(dtype));
    return trn__fork_check();
}

// The checks of one foreach descriptor (stream and list checked by the caller).
static trn_status check_fe_ops(const trn_foreach_desc *d, const char *fn) {
    if ((int)d->op < 0 || d->op >= TRN_FOREACH_OP_COUNT)
        return trn__set_error(TRN_ERROR_INVALID_ARGUMENT, "%s: unknown op %d", fn, (int)d->op);
    if (d->op == TRN_FOREACH_NORM && !(d->ord == 1 || d->ord == 2 || d->ord == INFINITY))
        return trn__set_error(TRN_ERROR_UNSUPPORTED, "%s: norm order %g is not supported", fn,
                              d->ord);
    const int needs_b =
        d->op == TRN_FOREACH_ADDCMUL || d->op == TRN_FOREACH_ADDCDIV || d->op == TRN_FOREACH_LERP;
    for (int64_t t = 0; t < d->count; t++) {
        const trn_foreach_tensor *x = &d->tensors[t];
        if (x->n < 0 ||
            (x->n > 0 &&
             (x->out == NULL || (d->op != TRN_FOREACH_ZERO && x->a == NULL) ||
              (needs_b && x->b == NULL) ||
              ((d->op == TRN_FOREACH_ADDCMUL || d->op == TRN_FOREACH_ADDCDIV) && x->c == NULL))))
            return trn__set_error(TRN_ERROR_INVALID_ARGUMENT,
                                  "%s: tensor %lld has a NULL operand or bad size", fn,
                                  (long long)t);
        if (d->op == TRN_FOREACH_NORM && x->out == NULL)
            return trn__set_error(TRN_ERROR_INVALID_ARGUMENT, "%s: norm output %lld is NULL", fn,
                                  (long long)t);
    }
    return TRN_SUCCESS;
}

trn_status trn_foreach_launch(trn_stream *stream, const trn_foreach_desc *d) {
    trn_status st = check_list(stream, d, d ? d->tensors : NULL, d ? d->count : 0,
                               d ? d->dtype : TRN_DTYPE_F32, "trn_foreach_launch");
    if (st == TRN_SUCCESS) st = check_fe_ops(d, "trn_foreach_launch");
    if (st != TRN_SUCCESS) return st;
    if (d->count == 0) return TRN_SUCCESS;
    fe_args a;
    memset(&a, 0, sizeof a);
    a.d = *d;
    return launch_list(stream, fe_task, &a, sizeof a, &a.d.tensors, d->count, sizeof *d->tensors,
                       "trn_foreach_launch");
}

// ---- chains (trn/foreach_chain.h) ------------------------------------------------------
// Elements per chunk of a chain: AdamW's 8 ops touch 5 lists, 5 x 64 KiB of
// float32 per chunk, which stays in this core's L2 from op to op.
enum { CHAIN_CHUNK = 16384 };

static atomic_llong g_chain_fused, g_chain_unfused;

void trn_foreach_chain_counts(int64_t *fused, int64_t *unfused) {
    if (fused) *fused = (int64_t)atomic_load(&g_chain_fused);
    if (unfused) *unfused = (int64_t)atomic_load(&g_chain_unfused);
}

typedef struct chain_args {
    int64_t nops;
    trn_foreach_desc *ops;  // heap: the descriptors, their tensor arrays, then the scratch
                            // flags (nops bytes); one block, freed by the task
    unsigned char *scratch;
} chain_args;

typedef struct chain_range {
    uintptr_t p;
    size_t n;
    int64_t pos;  // list position; -1 for the ops' scalar tensors
} chain_range;

static int range_cmp(const void *x, const void *y) {
    const chain_range *a = x, *b = y;
    if (a->p != b->p) return a->p < b->p ? -1 : 1;
    if (a->pos != b->pos) return a->pos < b->pos ? -1 : 1;
    if (a->n != b->n) return a->n < b->n ? -1 : 1;
    return 0;
}

static void range_add(chain_range *r, int64_t *m, const void *p, size_t n, int64_t pos) {
    if (p == NULL || n == 0) return;
    r[*m].p = (uintptr_t)p;
    r[*m].n = n;
    r[*m].pos = pos;
    (*m)++;
}

// Whether running the chain chunk-major gives the bits of its ops one after
// another: each element of each position is then computed from the same
// element of the same position's operands, so a chunk's ops see what the
// earlier ops left there. That needs equal lists (count, element counts)
// and operands that are either the same (position, pointer) or disjoint;
// an operand reached from two positions or through two pointers could be
// read by one chunk before another chunk wrote it. 0 also when out of memory
// (the caller then runs the ops one by one, which is always right).
static int chain_fusable(const trn_foreach_desc *ops, int64_t nops) {
    const int64_t count = ops[0].count;
    int64_t cap = 0;
    for (int64_t k = 0; k < nops; k++) {
        if (ops[k].count != count || ops[k].op == TRN_FOREACH_NORM) return 0;
        for (int64_t t = 0; t < count; t++)
            if (ops[k].tensors[t].n != ops[0].tensors[t].n) return 0;
        cap += 4 * count + 1;
    }
    chain_range *r = malloc((size_t)cap * sizeof *r);
    if (r == NULL) return 0;
    int64_t m = 0;
    for (int64_t k = 0; k < nops; k++) {
        const size_t es = trn_dtype_size(ops[k].dtype);
        for (int64_t t = 0; t < count; t++) {
            const trn_foreach_tensor *x = &ops[k].tensors[t];
            const size_t bytes = (size_t)x->n * es;
            range_add(r, &m, x->out, bytes, t);
            range_add(r, &m, x->a, bytes, t);
            range_add(r, &m, x->b, bytes, t);
            range_add(r, &m, x->c, bytes, t);
        }
        range_add(r, &m, ops[k].scalar_tensor, trn_dtype_size(ops[k].scalar_dtype), -1);
    }
    qsort(r, (size_t)m, sizeof *r, range_cmp);
    int ok = 1;
    uintptr_t end = 0;  // the furthest end of the distinct operands so far
    for (int64_t i = 0; i < m && ok; i++) {
        if (i > 0 && range_cmp(&r[i], &r[i - 1]) == 0) continue;  // the same operand again
        if (i > 0 && r[i].p < end) ok = 0;
        if (r[i].p + r[i].n > end) end = r[i].p + r[i].n;
    }
    free(r);
    return ok;
}

typedef struct chain_run {
    const fe_run *runs;  // one per op
    int64_t nops;
    const fe_chunk *chunks;
    const unsigned char *scratch;  // per op: its outputs live in a chunk-sized scratch
    int64_t nscratch;              // ops with scratch outputs
    // Adam steps inside the chain (foreach_adam_chain.h): seg_len[k] > 0 when
    // ops k .. k + seg_len[k] - 1 are one, run as one loop (segs[k]); NULL: none.
    const unsigned char *seg_len;
    const adam_chain *segs;
    const trn_foreach_desc *ops;  // the chain's ops, their scalar tensors' values
    const double *overrides;
    const int *has_override;
} chain_run;

// Op k's operand p at position t, or, where p is the output of an earlier
// (or this) scratch op j, that op's scratch slot: a pointer rebased so that
// element `begin` of the chunk is the slot's first element.
static const void *chain_operand(const chain_run *cr, int64_t k, int64_t t, int64_t begin,
                                 const void *p, char *const *slots) {
    if (p == NULL) return p;
    for (int64_t j = 0; j <= k; j++)
        if (cr->scratch[j] && cr->runs[j].d->tensors[t].out == p) {
            const size_t es = trn_dtype_size(cr->runs[j].d->dtype);
            return (const void *)((uintptr_t)slots[j] - (uintptr_t)begin * es);
        }
    return p;
}

static void chain_piece(void *ctx, int64_t c0, int64_t c1) {
    const chain_run *cr = ctx;
    char *slots[TRN_FOREACH_CHAIN_MAX_OPS] = {0};
    char *buf = NULL;
    if (cr->nscratch > 0) {
        // 8 bytes an element: room for any dtype. Out of memory: the outputs go
        // to their tensors (the same values, more traffic; the memory stays
        // valid until the chain has run, as every output of a launch).
        buf = malloc((size_t)cr->nscratch * CHAIN_CHUNK * 8);
        int64_t used = 0;
        for (int64_t k = 0; k < cr->nops && buf; k++)
            if (cr->scratch[k]) slots[k] = buf + (size_t)(used++) * CHAIN_CHUNK * 8;
    }
    const int redirect = buf != NULL;
    for (int64_t c = c0; c < c1; c++) {
        const fe_chunk *ch = &cr->chunks[c];
        for (int64_t k = 0; k < cr->nops; k++) {
            if (cr->seg_len != NULL && cr->seg_len[k] > 0) {
                const adam_chain *m = &cr->segs[k];
                adam_chain_run(m, cr->ops + k, cr->overrides + k, cr->has_override + k,
                               !cr->scratch[k + m->sqrt], ch->t, ch->begin, ch->end);
                k += cr->seg_len[k] - 1;
                continue;
            }
            const fe_run *r = &cr->runs[k];
            fe_run rr;
            trn_foreach_desc dd;
            trn_foreach_tensor x;
            fe_chunk one;
            if (redirect) {
                // The op over this chunk with its scratch operands swapped in: a
                // one-tensor copy of its descriptor, the chunk's element indices kept
                // (16-bit add / sub round by index).
                x = r->d->tensors[ch->t];
                x.out = (void *)chain_operand(cr, k, ch->t, ch->begin, x.out, slots);
                x.a = chain_operand(cr, k, ch->t, ch->begin, x.a, slots);
                x.b = chain_operand(cr, k, ch->t, ch->begin, x.b, slots);
                x.c = chain_operand(cr, k, ch->t, ch->begin, x.c, slots);
                dd = *r->d;
                dd.tensors = &x;
                dd.count = 1;
                rr = *r;
                rr.d = &dd;
                one = *ch;
                one.t = 0;
                r = &rr;
                ch = &one;
            }
            if (r->d->dtype == TRN_DTYPE_F64)
                chunk_d(r, ch);
            else
                chunk_f(r, ch);
            ch = &cr->chunks[c];
        }
    }
    free(buf);
}

// Clears the scratch flag of ops whose outputs cannot live in scratch: one
// written in place (an output that is also its input), or already an
// operand of an earlier op at the same position (it would be read or
// written in memory first).
static int64_t chain_scratch_check(const trn_foreach_desc *ops, int64_t nops,
                                   unsigned char *scratch) {
    int64_t n = 0;
    for (int64_t k = 0; k < nops; k++) {
        if (!scratch[k]) continue;
        for (int64_t t = 0; t < ops[k].count && scratch[k]; t++) {
            const trn_foreach_tensor *x = &ops[k].tensors[t];
            if (x->n == 0) continue;
            if (x->out == x->a || x->out == x->b || x->out == x->c) scratch[k] = 0;
            for (int64_t j = 0; j < k && scratch[k]; j++) {
                const trn_foreach_tensor *y = &ops[j].tensors[t];
                if (y->out == x->out || y->a == x->out || y->b == x->out || y->c == x->out)
                    scratch[k] = 0;
            }
        }
        n += scratch[k] != 0;
    }
    return n;
}

static trn_status chain_task(void *args) {
    const chain_args *ca = args;
    const trn_foreach_desc *ops = ca->ops;
    const int64_t nops = ca->nops;
    acc_list acc;
    trn_status st = TRN_SUCCESS;
    fe_chunk *chunks = NULL;
    fe_run *runs = NULL;
    int64_t ranges = 0;
    for (int64_t k = 0; k < nops; k++) ranges += 4 * ops[k].count + 1;
    if (!acc_init(&acc, ranges)) {
        st = trn__set_error(TRN_ERROR_OUT_OF_MEMORY, "foreach chain: out of host memory");
        goto out;
    }
    for (int64_t k = 0; k < nops; k++) fe_open(&acc, &ops[k]);
    st = acc_begin(&acc);
    if (st != TRN_SUCCESS) goto out;
    if (!chain_fusable(ops, nops)) {
        atomic_fetch_add(&g_chain_unfused, 1);
        for (int64_t k = 0; k < nops && st == TRN_SUCCESS; k++) st = fe_run_op(&ops[k]);
        goto out;
    }
    int64_t nchunks = 0;
    chunks = make_chunks_of(ops[0].count, fe_numel, ops[0].tensors, CHAIN_CHUNK, &nchunks);
    runs = malloc((size_t)nops * sizeof *runs);
    if (chunks == NULL || runs == NULL) {
        st = trn__set_error(TRN_ERROR_OUT_OF_MEMORY, "foreach chain: out of host memory");
        goto out;
    }
    // Scalar tensors are read here, before any op runs: no op of a fusable
    // chain writes one (it would overlap an operand).
    for (int64_t k = 0; k < nops; k++) {
        fe_run r = {&ops[k], chunks, 0.0, 0, NULL};
        if (ops[k].scalar_tensor) {
            r.scalar_override = read_scalar(ops[k].scalar_dtype, ops[k].scalar_tensor);
            r.has_override = 1;
        }
        runs[k] = r;
    }
    atomic_fetch_add(&g_chain_fused, 1);
    const int64_t nscratch = chain_scratch_check(ops, nops, ca->scratch);
    chain_run cr = {runs, nops, chunks, ca->scratch, nscratch, NULL, NULL, ops, NULL, NULL};
    unsigned char seg_len[TRN_FOREACH_CHAIN_MAX_OPS];
    adam_chain segs[TRN_FOREACH_CHAIN_MAX_OPS];
    double overrides[TRN_FOREACH_CHAIN_MAX_OPS];
    int has_override[TRN_FOREACH_CHAIN_MAX_OPS];
    const int64_t nsegs = adam_chain_find(ops, nops, ca->scratch, seg_len, segs);
    if (nsegs > 0) {
        for (int64_t k = 0; k < nops; k++) {
            overrides[k] = runs[k].scalar_override;
            has_override[k] = runs[k].has_override;
        }
        cr.seg_len = seg_len;
        cr.segs = segs;
        cr.overrides = overrides;
        cr.has_override = has_override;
        trn_named_counter_add("ForeachChainAdamLoops", nsegs);
    }
    trn_parallel_for(nchunks, 1, chain_piece, &cr);
out:
    free(runs);
    free(chunks);
    acc_free(&acc);
    free(ca->ops);
    return st;
}

trn_status trn_foreach_chain_launch(trn_stream *stream, const trn_foreach_desc *ops, int64_t nops,
                                    const unsigned char *scratch) {
    const char *fn = "trn_foreach_chain_launch";
    if (stream == NULL || ops == NULL) return trn__check_launch(stream, ops, fn);
    if (nops <= 0 || nops > TRN_FOREACH_CHAIN_MAX_OPS)
        return trn__set_error(TRN_ERROR_INVALID_ARGUMENT, "%s: %lld ops (1 to %d)", fn,
                              (long long)nops, TRN_FOREACH_CHAIN_MAX_OPS);
    size_t bytes = (size_t)nops * sizeof *ops;
    for (int64_t k = 0; k < nops; k++) {
        const trn_foreach_desc *d = &ops[k];
        trn_status st = check_list(stream, d, d->tensors, d->count, d->dtype, fn);
        if (st == TRN_SUCCESS) st = check_fe_ops(d, fn);
        if (st != TRN_SUCCESS) return st;
        if (d->op == TRN_FOREACH_NORM)
            return trn__set_error(TRN_ERROR_UNSUPPORTED, "%s: a norm cannot join a chain", fn);
        bytes += (size_t)d->count * sizeof *d->tensors;
    }
    trn_foreach_desc *copy = malloc(bytes + (size_t)nops);
    if (copy == NULL) return trn__set_error(TRN_ERROR_OUT_OF_MEMORY, "%s: out of host memory", fn);
    memcpy(copy, ops, (size_t)nops * sizeof *ops);
    trn_foreach_tensor *arr = (trn_foreach_tensor *)(void *)(copy + nops);
    for (int64_t k = 0; k < nops; k++) {
        if (ops[k].count > 0) memcpy(arr, ops[k].tensors, (size_t)ops[k].count * sizeof *arr);
        copy[k].tensors = arr;
        arr += ops[k].count;
    }
    unsigned char *flags = (unsigned char *)copy + bytes;
    for (int64_t k = 0; k < nops; k++) flags[k] = scratch != NULL && scratch[k] != 0;
    chain_args a = {nops, copy, flags};
    trn_status st = trn_stream_launch(stream, chain_task, &a, sizeof a);
    // Under NEURON_LAUNCH_BLOCKING a failure is the task's own result: it ran
    // and freed the copy (as launch_list).
    if (st != TRN_SUCCESS && !trn__config_get()->launch_blocking) free(copy);
    return st;
}

// ---- fused Adam / AdamW ------------------------------------------------------------------
typedef struct adam_args {
    trn_fused_adam_desc d;  // d.tensors: heap copy, freed by the task
} adam_args;

static int64_t adam_numel(const void *arr, int64_t t) {
    return ((const trn_fused_adam_tensor *)arr)[t].n;
}
static int64_t sgd_numel(const void *arr, int64_t t) {
    return ((const trn_fused_sgd_tensor *)arr)[t].n;
}

#define DEFINE_ADAM(N, C, SQRT)                                                                    \
    static void adam_chunk_##N(const opt_run *r, const fe_chunk *ch) {                             \
        const trn_fused_adam_desc *d = r->d;                                                       \
        const trn_fused_adam_tensor *t = &d->tensors[ch->t];                                       \
        const double step = (double)*t->step;                                                      \
        const C lr = (C)d->lr, wd = (C)d->weight_decay, eps = (C)d->eps, beta2 = (C)d->beta2;      \
        const C c1 = (C)(1 - d->beta1), c2 = (C)(1 - d->beta2);                                    \
        const double bc1 = 1 - pow(d->beta1, step);                                                \
        const C step_size = (C)(d->lr / bc1);                                                      \
        const C bc2_sqrt = (C)sqrt(1 - pow(d->beta2, step));                                       \
        /* No amsgrad, no maximize, decay (if any) on the parameter: branch-free loops. */         \
        const int plain = !d->amsgrad && !d->maximize && (wd == 0 || d->adamw);                    \
        const C pdecay = (C)1 - lr * wd;                                                           \
        C p[BLK], g[BLK], m[BLK], v[BLK], mx[BLK];                                                 \
        for (int64_t b = ch->begin; b < ch->end; b += BLK) {                                       \
            const int64_t n = ch->end - b < BLK ? ch->end - b : BLK;                               \
            ld_##N(d->dtype, t->param, b, n, p);                                                   \
            ld_##N(d->dtype, t->grad, b, n, g);                                                    \
            ld_##N(d->dtype, t->exp_avg, b, n, m);                                                 \
            ld_##N(d->dtype, t->exp_avg_sq, b, n, v);                                              \
            if (d->amsgrad) ld_##N(d->dtype, t->max_exp_avg_sq, b, n, mx);                         \
            OPT_UNSCALE(N, C, t->grad);                                                            \
            if (plain) {                                                                           \
                /* Decay first, in a loop of its own: rounded by itself, as in the */              \
                /* branchy loop (no fused multiply-add with the update). */                        \
                if (wd != 0)                                                                       \
                    for (int64_t i = 0; i < n; i++) p[i] = p[i] * pdecay;                          \
                /* The branchy loop's operations in the same order, without its */                 \
                /* per-element tests, so it vectorizes (scalar sqrt and two divisions */           \
                /* per element made fused Adam slower than the foreach sequence). */               \
                if (c1 < (C)0.5) {                                                                 \
                    for (int64_t i = 0; i < n; i++) {                                              \
                        const C gv = g[i], pv = p[i], ma = m[i];                                   \
                        const C mn = ma + c1 * (gv - ma);                                          \
                        C va = v[i] * beta2;                                                       \
                        va = va + c2 * gv * gv;                                                    \
                        m[i] = mn;                                                                 \
                        v[i] = va;                                                                 \
                        p[i] = pv - step_size * mn / (SQRT(va) / bc2_sqrt + eps);                  \
                    }                                                                              \
                } else {                                                                           \
                    for (int64_t i = 0; i < n; i++) {                                              \
                        const C gv = g[i], pv = p[i], ma = m[i];                                   \
                        const C mn = gv - (gv - ma) * ((C)1 - c1);                                 \
                        C va = v[i] * beta2;                                                       \
                        va = va + c2 * gv * gv;                                                    \
                        m[i] = mn;                                                                 \
                        v[i] = va;                                                                 \
                        p[i] = pv - step_size * mn / (SQRT(va) / bc2_sqrt + eps);                  \
                    }                                                                              \
                }                                                                                  \
            } else                                                                                 \
                for (int64_t i = 0; i < n; i++) {                                                  \
                    C gv = d->maximize ? -g[i] : g[i];                                             \
                    C pv = p[i];                                                                   \
                    if (wd != 0) {                                                                 \
                        if (d->adamw)                                                              \
                            pv = pv * ((C)1 - lr * wd);                                            \
                        else                                                                       \
                            gv = gv + pv * wd;                                                     \
                    }                                                                              \
                    const C ma = m[i];                                                             \
                    m[i] = c1 < (C)0.5 ? ma + c1 * (gv - ma) : gv - (gv - ma) * ((C)1 - c1);       \
                    C va = v[i] * beta2;                                                           \
                    va = va + c2 * gv * gv;                                                        \
                    v[i] = va;                                                                     \
                    C den;                                                                         \
                    if (d->amsgrad) {                                                              \
                        mx[i] = mx[i] > va ? mx[i] : va;                                           \
                        den = SQRT(mx[i]) / bc2_sqrt + eps;                                        \
                    } else {                                                                       \
                        den = SQRT(va) / bc2_sqrt + eps;                                           \
                    }                                                                              \
                    p[i] = pv - step_size * m[i] / den;                                            \
                }                                                                                  \
            st_##N(d->dtype, t->param, b, n, p);                                                   \
            st_##N(d->dtype, t->exp_avg, b, n, m);                                                 \
            st_##N(d->dtype, t->exp_avg_sq, b, n, v);                                              \
            if (d->amsgrad) st_##N(d->dtype, t->max_exp_avg_sq, b, n, mx);                         \
        }                                                                                          \
    }

DEFINE_ADAM(f, float, sqrtf)
DEFINE_ADAM(d, double, sqrt)

static void adam_open(acc_list *acc, const void *vd, int64_t t, size_t es) {
    const trn_fused_adam_desc *d = vd;
    const trn_fused_adam_tensor *x = &d->tensors[t];
    const size_t bytes = (size_t)x->n * es;
    acc_add(acc, x->param, bytes);
    acc_add(acc, x->grad, bytes);
    acc_add(acc, x->exp_avg, bytes);
    acc_add(acc, x->exp_avg_sq, bytes);
    if (d->amsgrad) acc_add(acc, x->max_exp_avg_sq, bytes);
    acc_add(acc, x->step, sizeof(float));
}

static const opt_kind adam_kind = {"fused adam", 6,           adam_numel, adam_open,
                                   adam_chunk_f, adam_chunk_d};

static trn_status adam_task(void *args) {
    const trn_fused_adam_desc *d = &((adam_args *)args)->d;
    return opt_task(&adam_kind, d, d->dtype, d->count, d->tensors, d->grad_scale, d->found_inf);
}

trn_status trn_fused_adam_launch(trn_stream *stream, const trn_fused_adam_desc *d) {
    trn_status st = check_list(stream, d, d ? d->tensors : NULL, d ? d->count : 0,
                               d ? d->dtype : TRN_DTYPE_F32, "trn_fused_adam_launch");
    if (st != TRN_SUCCESS) return st;
    for (int64_t t = 0; t < d->count; t++) {
        const trn_fused_adam_tensor *x = &d->tensors[t];
        if (x->n < 0 || x->step == NULL ||
            (x->n > 0 && (!x->param || !x->grad || !x->exp_avg || !x->exp_avg_sq ||
                          (d->amsgrad && !x->max_exp_avg_sq))))
            return trn__set_error(
                TRN_ERROR_INVALID_ARGUMENT,
                "trn_fused_adam_launch: tensor %lld has a NULL operand or bad size", (long long)t);
    }
    if (d->count == 0) return TRN_SUCCESS;
    adam_args a;
    memset(&a, 0, sizeof a);
    a.d = *d;
    return launch_list(stream, adam_task, &a, sizeof a, &a.d.tensors, d->count, sizeof *d->tensors,
                       "trn_fused_adam_launch");
}

// ---- fused SGD -----------------------------------------------------------------------------
typedef struct sgd_args {
    trn_fused_sgd_desc d;
} sgd_args;

#define DEFINE_SGD(N, C)                                                                           \
    static void sgd_chunk_##N(const opt_run *r, const fe_chunk *ch) {                              \
        const trn_fused_sgd_desc *d = r->d;                                                        \
        const trn_fused_sgd_tensor *t = &d->tensors[ch->t];                                        \
        const C lr = (C)d->lr, wd = (C)d->weight_decay, mom = (C)d->momentum;                      \
        const C damp = (C)(1 - d->dampening);                                                      \
        C p[BLK], g[BLK], buf[BLK];                                                                \
        for (int64_t b = ch->begin; b < ch->end; b += BLK) {                                       \
            const int64_t n = ch->end - b < BLK ? ch->end - b : BLK;                               \
            ld_##N(d->dtype, t->param, b, n, p);                                                   \
            ld_##N(d->dtype, t->grad, b, n, g);                                                    \
            if (t->momentum_buffer && !d->is_first_step)                                           \
                ld_##N(d->dtype, t->momentum_buffer, b, n, buf);                                   \
            OPT_UNSCALE(N, C, t->grad);                                                            \
            for (int64_t i = 0; i < n; i++) {                                                      \
                C gv = d->maximize ? -g[i] : g[i];                                                 \
                if (wd != 0) gv = gv + p[i] * wd;                                                  \
                if (t->momentum_buffer) {                                                          \
                    const C bv = d->is_first_step ? gv : buf[i] * mom + gv * damp;                 \
                    buf[i] = bv;                                                                   \
                    gv = d->nesterov ? gv + bv * mom : bv;                                         \
                }                                                                                  \
                p[i] = p[i] - gv * lr;                                                             \
            }                                                                                      \
            st_##N(d->dtype, t->param, b, n, p);                                                   \
            if (t->momentum_buffer) st_##N(d->dtype, t->momentum_buffer, b, n, buf);               \
        }                                                                                          \
    }

DEFINE_SGD(f, float)
DEFINE_SGD(d, double)

static void sgd_open(acc_list *acc, const void *vd, int64_t t, size_t es) {
    const trn_fused_sgd_tensor *x = &((const trn_fused_sgd_desc *)vd)->tensors[t];
    const size_t bytes = (size_t)x->n * es;
    acc_add(acc, x->param, bytes);
    acc_add(acc, x->grad, bytes);
    acc_add(acc, x->momentum_buffer, bytes);
}

static const opt_kind sgd_kind = {"fused sgd", 3, sgd_numel, sgd_open, sgd_chunk_f, sgd_chunk_d};

static trn_status sgd_task(void *args) {
    const trn_fused_sgd_desc *d = &((sgd_args *)args)->d;
    return opt_task(&sgd_kind, d, d->dtype, d->count, d->tensors, d->grad_scale, d->found_inf);
}

trn_status trn_fused_sgd_launch(trn_stream *stream, const trn_fused_sgd_desc *d) {
    trn_status st = check_list(stream, d, d ? d->tensors : NULL, d ? d->count : 0,
                               d ? d->dtype : TRN_DTYPE_F32, "trn_fused_sgd_launch");
    if (st != TRN_SUCCESS) return st;
    for (int64_t t = 0; t < d->count; t++) {
        const trn_fused_sgd_tensor *x = &d->tensors[t];
        if (x->n < 0 || (x->n > 0 && (!x->param || !x->grad)))
            return trn__set_error(
                TRN_ERROR_INVALID_ARGUMENT,
                "trn_fused_sgd_launch: tensor %lld has a NULL operand or bad size", (long long)t);
    }
    if (d->count == 0) return TRN_SUCCESS;
    sgd_args a;
    memset(&a, 0, sizeof a);
    a.d = *d;
    return launch_list(stream, sgd_task, &a, sizeof a, &a.d.tensors, d->count, sizeof *d->tensors,
                       "trn_fused_sgd_launch");
}
