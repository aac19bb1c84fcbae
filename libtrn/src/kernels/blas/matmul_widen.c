// matmul_widen.c - owns bfloat16 products run on the float32 kernels: where
// the core's float32 FMA outruns its vdpbf16ps (dnnl_common.c's default), a
// bfloat16 product widens its operands to float32 once, in parallel, runs
// matmul.c's float32 path (its thread split, k blocks and fused bias row),
// and rounds C once. The older staging inside a oneDNN plan (matmul.c,
// float16) converts B again in every piece, and single-threaded: on the
// Intel host a 512 x 768 x 3072 product staged there ran at 77 G
// multiply-adds/s where its float32 twin reached 155.
//
// Each widened matrix keeps its operand's storage order (a transposed B
// stays column-major), so the conversion reads memory in order and the
// float32 kernels see the layout the caller gave.
#include "matmul_widen.h"

#include <stdlib.h>
#include <string.h>

#include "dnnl_common.h"
#include "../kit/bf16_store.h"
#include "trn/convert.h"
#include "trn/parallel.h"

// Buffers up to this size stay with the thread for its next product; larger
// ones are freed after the call (a model's own products fit easily).
#define WIDEN_KEEP_BYTES ((size_t)64 << 20)
#define WIDEN_GRAIN_ELEMS 16384  // per pool chunk

// One matrix operand: `lines` runs of `len` elements, line l of batch b at
// src + b * s0 + l * s_line, element e at + e * s_elem; dst dense in the
// same order.
typedef struct widen_mat {
    const uint16_t *src;
    uint16_t *out;  // rounding back (C): the bfloat16 destination
    float *dst;
    int64_t lines, len, s0, s_line, s_elem;
} widen_mat;

static void widen_lines(void *ctx, int64_t l0, int64_t l1) {
    const widen_mat *w = ctx;
    for (int64_t l = l0; l < l1; l++) {
        const int64_t b = l / w->lines, i = l % w->lines;
        const uint16_t *p = w->src + b * w->s0 + i * w->s_line;
        float *row = w->dst + l * w->len;
        if (w->s_elem == 1)
            for (int64_t e = 0; e < w->len; e++) row[e] = trn_bf16_to_float(p[e]);
        else
            for (int64_t e = 0; e < w->len; e++) row[e] = trn_bf16_to_float(p[e * w->s_elem]);
    }
}

static void round_lines(void *ctx, int64_t l0, int64_t l1) {
    const widen_mat *w = ctx;
    for (int64_t l = l0; l < l1; l++) {
        const int64_t b = l / w->lines, i = l % w->lines;
        uint16_t *p = w->out + b * w->s0 + i * w->s_line;
        const float *row = w->dst + l * w->len;
        if (w->s_elem == 1)
            trn__bf16_store_run((char *)p, (const char *)row, w->len);
        else
            for (int64_t e = 0; e < w->len; e++) p[e * w->s_elem] = trn_float_to_bf16(row[e]);
    }
}

// Lays out a batch x rows x cols operand with strides s as dense float32
// in its own storage order; fills the float32 strides fs.
static widen_mat widen_plan(int64_t rows, int64_t cols, const int64_t *s, float *dst, int64_t *fs) {
    // Column-major where the columns are the contiguous runs.
    const bool by_cols = s[1] == 1 && s[2] != 1 && rows > 1;
    widen_mat w = {.dst = dst, .s0 = s[0]};
    if (by_cols) {
        w.lines = cols, w.len = rows, w.s_line = s[2], w.s_elem = 1;
        fs[1] = 1, fs[2] = rows;
    } else {
        w.lines = rows, w.len = cols, w.s_line = s[1], w.s_elem = s[2];
        fs[1] = cols, fs[2] = 1;
    }
    fs[0] = rows * cols;
    return w;
}

static int64_t grain_for(int64_t len) {
    const int64_t g = WIDEN_GRAIN_ELEMS / (len > 0 ? len : 1);
    return g > 0 ? g : 1;
}

static void widen_run(widen_mat *w, int64_t batch, const void *src) {
    w->src = src;
    trn_parallel_for(batch * w->lines, grain_for(w->len), widen_lines, w);
}

trn_status trn__matmul_bf16_widened(const trn_matmul_desc *d, const void *bias,
                                    trn__mm_f32_fn run) {
    if (d->batch == 0 || d->m == 0 || d->n == 0) return TRN_SUCCESS;
    // A broadcast operand (batch stride 0) is widened once and stays
    // broadcast.
    const int64_t ab = d->batch > 1 && d->a_strides[0] == 0 ? 1 : d->batch;
    const int64_t bb = d->batch > 1 && d->b_strides[0] == 0 ? 1 : d->batch;
    const size_t na = (size_t)(ab * d->m * d->k), nb = (size_t)(bb * d->k * d->n),
                 nc = (size_t)(d->batch * d->m * d->n), nbias = bias ? (size_t)d->n : 0;
    // 64-byte aligned pieces of one buffer.
    const size_t oa = 0, ob = oa + (na * 4 + 63) / 64 * 64, oc = ob + (nb * 4 + 63) / 64 * 64,
                 obias = oc + (nc * 4 + 63) / 64 * 64, bytes = obias + nbias * 4 + 64;
    char *buf = NULL;
    bool owned = false;
    trn_status st;
    if (bytes <= WIDEN_KEEP_BYTES) {
        if ((st = trn__dnnl_widen_buffer(bytes, (void **)&buf)) != TRN_SUCCESS) return st;
    } else {
        if (posix_memalign((void **)&buf, 64, bytes) != 0)
            return trn__set_error(TRN_ERROR_OUT_OF_MEMORY,
                                  "out of host memory for a bfloat16 product's %zu-byte float32 "
                                  "operands",
                                  bytes);
        owned = true;
    }

    trn_matmul_desc f = *d;
    f.dtype = TRN_DTYPE_F32;
    f.b_version = 0;  // temporaries: nothing for the weight cache to keep
    f.a = buf + oa;
    f.b = buf + ob;
    f.c = buf + oc;
    widen_mat wa = widen_plan(d->m, d->k, d->a_strides, (float *)(void *)(buf + oa), f.a_strides);
    widen_mat wb = widen_plan(d->k, d->n, d->b_strides, (float *)(void *)(buf + ob), f.b_strides);
    widen_mat wc = widen_plan(d->m, d->n, d->c_strides, (float *)(void *)(buf + oc), f.c_strides);
    if (ab == 1 && d->batch > 1) f.a_strides[0] = 0;
    if (bb == 1 && d->batch > 1) f.b_strides[0] = 0;
    widen_run(&wa, ab, d->a);
    widen_run(&wb, bb, d->b);
    if (d->beta != 0.0) widen_run(&wc, d->batch, d->c);  // beta 0: C is never read (NaN too)
    float *bias32 = NULL;
    if (bias != NULL) {
        bias32 = (float *)(void *)(buf + obias);
        const uint16_t *row = bias;
        for (int64_t j = 0; j < d->n; j++) bias32[j] = trn_bf16_to_float(row[j]);
    }
    st = run(&f, bias32);
    if (st == TRN_SUCCESS) {
        wc.out = d->c;
        trn_parallel_for(d->batch * wc.lines, grain_for(wc.len), round_lines, &wc);
    }
    if (owned) free(buf);
    return st;
}
