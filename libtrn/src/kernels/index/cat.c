// cat.c - owns trn_cat_launch: copies same-dtype inputs into consecutive
// slices of the output along one dimension. Each input's copy is coalesced
// (size-1 dims dropped, contiguous neighbours merged) so contiguous inputs
// become one copy per outer row (inline below SHORT_ROW bytes); inputs are
// packed into as few tasks as the launch argument limit allows, and a task
// whose inputs are all [rows, contiguous row] is copied output row by row.
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "../../internal.h"
#include "../kit/dims.h"
#include "trn/index.h"
#include "trn/parallel.h"

// Per input: dst byte offset from out, src pointer, ndim, then sizes, dst and
// src byte strides (coalesced), all in a flat int64 array.
typedef struct cat_args {
    char *out;
    int64_t out_lo, out_span;
    int ninputs;
    int64_t words;  // used entries of data
    int64_t data[(TRN_TASK_MAX_ARGS - 64) / 8];
} cat_args;
_Static_assert(sizeof(cat_args) <= TRN_TASK_MAX_ARGS, "cat args too large");

// Entry layout: [dst_off, src(ptr as int64), src_lo, src_span, es, n, sizes[n], dstr[n], sstr[n]]
#define CAT_HEADER 6

// Rows of up to SHORT_ROW bytes are copied inline, 32 bytes a step: a
// libc memcpy call per 128-byte row (Llama's rotate_half cat of two
// [8, 4, 64, 32] halves) cost as much as the bytes it moved.
#define SHORT_ROW 512

static inline void copy_short(char *restrict d, const char *restrict s, size_t bytes) {
    size_t i = 0;
    for (; i + 32 <= bytes; i += 32) {
        uint64_t v[4];
        memcpy(v, s + i, 32);
        memcpy(d + i, v, 32);
    }
    for (; i + 8 <= bytes; i += 8) {
        uint64_t v;
        memcpy(&v, s + i, 8);
        memcpy(d + i, &v, 8);
    }
    for (; i < bytes; i++) d[i] = s[i];
}

static void copy_nd(char *dst, const char *src, int n, const int64_t *size, const int64_t *dstr,
                    const int64_t *sstr, size_t es) {
    const int inner = n - 1;
    const bool contig = dstr[inner] == (int64_t)es && sstr[inner] == (int64_t)es;
    const size_t row = (size_t)size[inner] * es;
    int64_t outer = 1, pos[TRN_INDEX_MAX_DIMS] = {0}, doff = 0, soff = 0;
    for (int d = 0; d < inner; d++) outer *= size[d];
    for (int64_t it = 0; it < outer; it++) {
        if (contig && row <= SHORT_ROW) {
            copy_short(dst + doff, src + soff, row);
        } else if (contig) {
            memcpy(dst + doff, src + soff, row);
        } else {
            for (int64_t i = 0; i < size[inner]; i++)
                memcpy(dst + doff + i * dstr[inner], src + soff + i * sstr[inner], es);
        }
        trn_kit_odo_next(inner, size, pos, dstr, &doff, sstr, &soff, NULL, NULL);
    }
}

// Big copies are split across threads along trn_kit_split_dim's dim, whole
// rows per piece: one piece per thread, of at least PAR_BYTES. Each input of
// a cat is copied on its own, so GPT-2's qkv-gradient cat (three 256 KiB
// bfloat16 [8, 64, 256] inputs) ran on one thread under the old 256 KiB
// piece floor: 21.2-21.6 -> 15.3-15.6 us at two threads (CPU 18.3), and
// two 128 KiB [8, 4, 64, 32] 17.9-18.1 -> 12.4-13.1 (session 31). Two pieces
// rather than eight of 64 KiB: 512 KiB float32 inputs lost 5 % in eight.
#define PAR_BYTES ((int64_t)64 * 1024)
#define SPLIT_MIN_SIZE 8

typedef struct copy_ctx {
    char *dst;
    const char *src;
    int n, k;
    const int64_t *size, *dstr, *sstr;
    size_t es;
} copy_ctx;

static void copy_piece(void *ctx, int64_t b, int64_t e) {
    const copy_ctx *c = ctx;
    int64_t size[TRN_INDEX_MAX_DIMS];
    memcpy(size, c->size, (size_t)c->n * sizeof size[0]);
    size[c->k] = e - b;
    copy_nd(c->dst + b * c->dstr[c->k], c->src + b * c->sstr[c->k], c->n, size, c->dstr, c->sstr,
            c->es);
}

static void copy_par(char *dst, const char *src, int n, const int64_t *size, const int64_t *dstr,
                     const int64_t *sstr, size_t es) {
    const int k = trn_kit_split_dim(n, size, SPLIT_MIN_SIZE);
    int64_t bytes = (int64_t)es;
    for (int d = 0; d < n; d++) bytes *= size[d];
    if (bytes < 2 * PAR_BYTES) {
        copy_nd(dst, src, n, size, dstr, sstr, es);
        return;
    }
    const int64_t unit = bytes / size[k];
    const int threads = trn_parallel_threads();
    int64_t grain = (size[k] + threads - 1) / threads;
    if (grain * unit < PAR_BYTES) grain = (PAR_BYTES + unit - 1) / unit;
    copy_ctx c = {dst, src, n, k, size, dstr, sstr, es};
    trn_parallel_for(size[k], grain, copy_piece, &c);
}

// Inputs that are all [rows, contiguous row] into output rows of the same
// stride (a last-dim cat of contiguous tensors: GPT-2's qkv gradient of
// three [8, 64, 256]) are copied output row by output row, every input's
// piece in turn, so the output is written once front to back instead of in
// one strided pass per input.
#define ROWWISE_MAX 16

typedef struct rowwise_ctx {
    char *out;
    int ninputs;
    int64_t ostride;
    const char *src[ROWWISE_MAX];
    int64_t off[ROWWISE_MAX], sstride[ROWWISE_MAX], bytes[ROWWISE_MAX];
} rowwise_ctx;

static void rowwise_piece(void *ctx, int64_t b, int64_t e) {
    const rowwise_ctx *c = ctx;
    for (int64_t r = b; r < e; r++) {
        char *orow = c->out + r * c->ostride;
        for (int i = 0; i < c->ninputs; i++) {
            char *d = orow + c->off[i];
            const char *s = c->src[i] + r * c->sstride[i];
            if (c->bytes[i] <= SHORT_ROW)
                copy_short(d, s, (size_t)c->bytes[i]);
            else
                memcpy(d, s, (size_t)c->bytes[i]);
        }
    }
}

// Fills *c and returns true when every input of the task fits the row-wise
// copy; the rows' count goes to *rows and the task's bytes to *total.
static bool rowwise_of(const cat_args *a, rowwise_ctx *c, int64_t *rows, int64_t *total) {
    if (a->ninputs < 2 || a->ninputs > ROWWISE_MAX) return false;
    const int64_t *p = a->data;
    c->out = a->out;
    c->ninputs = a->ninputs;
    *total = 0;
    for (int i = 0; i < a->ninputs; i++) {
        const int64_t es = p[4], *size = p + CAT_HEADER, *dstr = size + 2, *sstr = size + 4;
        if (p[5] != 2 || dstr[1] != es || sstr[1] != es) return false;
        if (i == 0) {
            *rows = size[0];
            c->ostride = dstr[0];
        } else if (size[0] != *rows || dstr[0] != c->ostride) {
            return false;
        }
        memcpy(&c->src[i], &p[1], sizeof c->src[i]);
        c->off[i] = p[0];
        c->sstride[i] = sstr[0];
        c->bytes[i] = size[1] * es;
        *total += size[0] * size[1] * es;
        p += CAT_HEADER + 3 * 2;
    }
    return true;
}

static trn_status cat_task(void *args) {
    const cat_args *a = args;
    trn_status st = trn__mem_access_begin(a->out + a->out_lo, (size_t)a->out_span);
    if (st != TRN_SUCCESS) return st;
    rowwise_ctx rw;
    int64_t rows = 0, total = 0;
    if (rowwise_of(a, &rw, &rows, &total)) {
        const int64_t *p = a->data;
        int began = 0;
        for (; began < a->ninputs; began++, p += CAT_HEADER + 3 * 2) {
            st = trn__mem_access_begin(rw.src[began] + p[2], (size_t)p[3]);
            if (st != TRN_SUCCESS) break;
        }
        if (st == TRN_SUCCESS) {
            if (total < 2 * PAR_BYTES) {
                rowwise_piece(&rw, 0, rows);
            } else {
                const int threads = trn_parallel_threads();
                int64_t grain = (rows + threads - 1) / threads;
                const int64_t unit = total / rows;
                if (grain * unit < PAR_BYTES) grain = (PAR_BYTES + unit - 1) / unit;
                trn_parallel_for(rows, grain, rowwise_piece, &rw);
            }
        }
        p = a->data;
        for (int i = 0; i < began; i++, p += CAT_HEADER + 3 * 2)
            trn__mem_access_end(rw.src[i] + p[2], (size_t)p[3]);
        trn__mem_access_end(a->out + a->out_lo, (size_t)a->out_span);
        return st;
    }
    const int64_t *p = a->data;
    for (int i = 0; i < a->ninputs && st == TRN_SUCCESS; i++) {
        const char *src;
        memcpy(&src, &p[1], sizeof src);
        const int n = (int)p[5];
        st = trn__mem_access_begin(src + p[2], (size_t)p[3]);
        if (st != TRN_SUCCESS) break;
        copy_par(a->out + p[0], src, n, p + CAT_HEADER, p + CAT_HEADER + n, p + CAT_HEADER + 2 * n,
                 (size_t)p[4]);
        trn__mem_access_end(src + p[2], (size_t)p[3]);
        p += CAT_HEADER + 3 * n;
    }
    trn__mem_access_end(a->out + a->out_lo, (size_t)a->out_span);
    return st;
}

static trn_status bad(const char *what) {
    return trn__set_error(TRN_ERROR_INVALID_ARGUMENT, "trn_cat_launch: %s", what);
}

trn_status trn_cat_launch(trn_stream *stream, const trn_cat_desc *d) {
    if (stream == NULL || d == NULL) return bad("stream or descriptor is NULL");
    if ((unsigned)d->dtype >= TRN_DTYPE_COUNT || d->ndim < 1 || d->ndim > TRN_INDEX_MAX_DIMS ||
        d->dim < 0 || d->dim >= d->ndim || d->ninputs < 0 ||
        (d->ninputs > 0 && d->inputs == NULL) || d->sizes == NULL || d->out_strides == NULL)
        return bad("invalid descriptor");
    const int nd = d->ndim;
    const int64_t es = (int64_t)trn_dtype_size(d->dtype);
    int64_t total = 0, numel = 1, olo = 0, ohi = 0;
    for (int k = 0; k < nd; k++) {
        if (d->sizes[k] < 0) return bad("negative size");
        if (k != d->dim && __builtin_mul_overflow(numel, d->sizes[k], &numel))
            return bad("size overflow");
        int64_t r;
        if (d->sizes[k] > 0) {
            if (__builtin_mul_overflow(d->out_strides[k], (d->sizes[k] - 1) * es, &r))
                return bad("stride overflow");
            if (r < 0)
                olo += r;
            else
                ohi += r;
        }
    }
    for (int i = 0; i < d->ninputs; i++) {
        if (d->inputs[i].dim_size < 0) return bad("negative input size");
        total += d->inputs[i].dim_size;
    }
    if (total != d->sizes[d->dim]) return bad("input sizes do not add up to the output's");
    trn_status st = trn__fork_check();
    if (st != TRN_SUCCESS || numel == 0 || total == 0) return st;
    if (d->out == NULL) return bad("out is NULL");

    cat_args a;
    a.out = d->out;
    a.out_lo = olo;
    a.out_span = ohi - olo + es;
    a.ninputs = 0;
    a.words = 0;
    const int64_t cap = (int64_t)(sizeof a.data / sizeof a.data[0]);
    int64_t offset = 0;  // along dim
    for (int i = 0; i < d->ninputs; i++) {
        const trn_cat_input *in = &d->inputs[i];
        const int64_t dim_size = in->dim_size;
        if (dim_size == 0) continue;
        if (in->data == NULL || in->strides == NULL) return bad("input data or strides NULL");
        trn_kit_dims dims;
        trn_kit_dims_init(&dims, 2);
        int64_t slo = 0, shi = 0;
        for (int k = 0; k < nd; k++) {
            int64_t sz = k == d->dim ? dim_size : d->sizes[k];
            int64_t s[2] = {d->out_strides[k] * es, 0}, r;
            if (__builtin_mul_overflow(in->strides[k], es, &s[1]) ||
                __builtin_mul_overflow(s[1], sz - 1, &r))
                return bad("input stride overflow");
            if (r < 0)
                slo += r;
            else
                shi += r;
            trn_kit_dims_push(&dims, sz, s);
        }
        trn_kit_dims_finish(&dims, (const int64_t[]){es, es});
        const int n = dims.n;
        const int64_t need = CAT_HEADER + 3 * n;
        if (a.words + need > cap) {  // flush the packed inputs
            st = trn_stream_launch(stream, cat_task, &a,
                                   offsetof(cat_args, data) + (size_t)a.words * 8);
            if (st != TRN_SUCCESS) return st;
            a.ninputs = 0;
            a.words = 0;
        }
        int64_t *p = a.data + a.words;
        p[0] = offset * d->out_strides[d->dim] * es;
        memcpy(&p[1], &in->data, sizeof in->data);
        p[2] = slo;
        p[3] = shi - slo + es;
        p[4] = es;
        p[5] = n;
        trn_kit_dims_pack(&dims, p + CAT_HEADER);
        a.words += need;
        a.ninputs++;
        offset += dim_size;
    }
    if (a.ninputs == 0) return TRN_SUCCESS;
    return trn_stream_launch(stream, cat_task, &a, offsetof(cat_args, data) + (size_t)a.words * 8);
}
