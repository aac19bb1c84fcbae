// render_reduce.c - owns the body of a reduction kernel: the accumulator
// folds, float lanes, and the row and column loop shapes.
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "render_impl.h"

// Folds element `e` into accumulator acc<l> (max/min: NaN wins, as eager).
static void put_fold(sb *b, const char *in, trn_graph_reduce_op rop, bool fam_f, int l,
                     const char *e) {
    switch (rop) {
    case TRN_GRAPH_SUM: put(b, "%sacc%d += %s;\n", in, l, e); break;
    case TRN_GRAPH_PROD: put(b, "%sacc%d *= %s;\n", in, l, e); break;
    case TRN_GRAPH_MAX:
        if (fam_f)
            put(b, "%sacc%d = (%s != %s || %s > acc%d) ? %s : acc%d;\n", in, l, e, e, e, l, e, l);
        else
            put(b, "%sacc%d = %s > acc%d ? %s : acc%d;\n", in, l, e, l, e, l);
        break;
    default:
        if (fam_f)
            put(b, "%sacc%d = (%s != %s || %s < acc%d) ? %s : acc%d;\n", in, l, e, e, e, l, e, l);
        else
            put(b, "%sacc%d = %s < acc%d ? %s : acc%d;\n", in, l, e, l, e, l);
        break;
    }
}

// Float sums in float lanes: the innermost reduced loop in blocks of up to
// 16 x `lanes` elements, each lane summing every lanes-th element of its
// block in float, the lanes added pairwise and each block's sum added to
// the double accumulator. gcc turns the lane loop into vector adds (the fused
// body too), where the double accumulators kept the loop scalar (and
// converting). Error: a lane adds at most 16 values and the pairwise tree 4
// levels, so |computed - exact| <= ~20 u sum|x| (u = 2^-24), against ~n u for
// a plain float loop; ATen's CPU sum (cascade, float) is in that range too.
// float_lanes: how many lanes a float sum, max or min takes (max/min: below);
// 0: none (another op, dtype, or a loop not a multiple of 8).
static int float_lanes(const trn__cc_node *r, const trn__cc_node *x, int64_t n_in) {
    if (r->rop != TRN_GRAPH_SUM && r->rop != TRN_GRAPH_MAX && r->rop != TRN_GRAPH_MIN) return 0;
    if (x->dtype != TRN_DTYPE_F32 && x->dtype != TRN_DTYPE_F16 && x->dtype != TRN_DTYPE_BF16)
        return 0;
    if (n_in % 16 == 0) return 16;
    if (n_in % 8 == 0) return 8;
    return 0;
}

// Opens a reduction's lane loop (`l` over `lanes` consecutive positions
// from rl) and emits the fused body's values for position rl + l.
static void put_lane_loop(sb *b, kernel *k, const char *in, int inner, int lanes,
                          const char *const *idx) {
    put(b, "%s        #pragma GCC ivdep\n", in);
    put(b, "%s        for (int l = 0; l < %d; l++) {\n", in, lanes);
    put(b, "%s            const int64_t r%d = rl + l;\n", in, inner);
    char body[80];
    snprintf(body, sizeof body, "%s            ", in);
    put_body_values(b, k, body, idx);
}

// Float max/min in lanes too: lane l keeps the extreme of every lanes-th
// element (NaN wins, as put_fold), folded into acc0 at the end. The lanes
// compare branch-free, so gcc vectorizes them where the four-accumulator
// loop compared and branched per element (softmax's row max was 16 % of
// GPT-2's loss graph). Exact, like any order of max/min; between +0 and -0
// (equal) the lane structure decides which is kept, as it did with four
// accumulators.
static void put_float_extreme(sb *b, kernel *k, const char *in, int inner, int64_t n_in, int lanes,
                              trn_graph_reduce_op rop, const char *const *idx, const char *value) {
    const char *cmp = rop == TRN_GRAPH_MAX ? ">" : "<";
    put(b, "%s{\n", in);
    put(b, "%s    float m[%d];\n", in, lanes);
    put(b, "%s    for (int l = 0; l < %d; l++) m[l] = %sINFINITY;\n", in, lanes,
        rop == TRN_GRAPH_MAX ? "-" : "");
    put(b, "%s    for (int64_t rl = 0; rl < %lld; rl += %d) {\n", in, (long long)n_in, lanes);
    put_lane_loop(b, k, in, inner, lanes, idx);
    put(b, "%s            const float e = %s;\n", in, value);
    put(b, "%s            m[l] = (e != e || e %s m[l]) ? e : m[l];\n", in, cmp);
    put(b, "%s        }\n", in);
    put(b, "%s    }\n", in);
    put(b,
        "%s    for (int l = 0; l < %d; l++) acc0 = (m[l] != m[l] || m[l] %s acc0) ? m[l] : acc0;\n",
        in, lanes, cmp);
    put(b, "%s}\n", in);
}

static void put_float_sum(sb *b, kernel *k, const char *in, int inner, int64_t n_in, int lanes,
                          const char *const *idx, const char *value) {
    int64_t block = (int64_t)lanes * 16;
    while (n_in % block) block /= 2;  // n_in is a multiple of lanes
    put(b, "%sfor (int64_t rb = 0; rb < %lld; rb += %lld) {\n", in, (long long)n_in,
        (long long)block);
    put(b, "%s    float s[%d] = {0};\n", in, lanes);
    put(b, "%s    for (int64_t rl = rb; rl < rb + %lld; rl += %d) {\n", in, (long long)block,
        lanes);
    put_lane_loop(b, k, in, inner, lanes, idx);
    put(b, "%s            s[l] += %s;\n", in, value);
    put(b, "%s        }\n", in);
    put(b, "%s    }\n", in);
    put(b, "%s    acc0 += (double)trn_g_lanes%d(s);\n", in, lanes);
    put(b, "%s}\n", in);
}

// Float sums whose reduced dims are strided and whose innermost kept dim
// is contiguous (bias, batch-norm and layer-norm gradients: a sum over the
// batch's rows per column) run across the kept dim instead: each item is
// up to 64 consecutive outputs, and every reduced position adds one value
// into each of their float sums, a contiguous vector loop. Going down each
// column in turn (below) loads one element per cache line. An output's
// values are summed in float over blocks of 16 consecutive positions of the
// innermost reduced loop, each block's sum then added into a double, so
// |computed - exact| <= ~16 u sum|x| plus the final rounding (u = 2^-24),
// within the float lanes' bound; each output is computed by one item, so
// the bits do not depend on the thread count.
#define COL_BLOCK 64
#define COL_RUN 16

static bool reduce_by_columns(const kernel *k, const trn__cc_node *r, const trn__cc_node *x,
                              const loops *lk, const loops *lr, const int64_t *ostr) {
    if (r->rop != TRN_GRAPH_SUM || lk->nd == 0 || lr->nd == 0) return false;
    if (x->dtype != TRN_DTYPE_F32 && x->dtype != TRN_DTYPE_F16 && x->dtype != TRN_DTYPE_BF16)
        return false;
    if (eff_stride(lk, lk->nd - 1, ostr) != 1) return false;
    bool unit_kept = false;
    for (int a = 0; a < k->n_leaves; a++) {
        if (eff_stride(lr, lr->nd - 1, k->acc[a].strides) == 1)
            return false;  // rows are contiguous: lanes
        if (eff_stride(lk, lk->nd - 1, k->acc[a].strides) == 1) unit_kept = true;
    }
    return unit_kept;
}

static void render_reduce_cols(sb *b, kernel *k, const loops *lk, const loops *lr,
                               const int64_t *ostr, int64_t *items_out, int64_t *grain_out) {
    const trn__cc_node *r = &k->g->nodes[k->root];
    const int ko = lk->nd - 1, inner = lr->nd - 1;
    const int64_t width = lk->size[ko], jb = width < COL_BLOCK ? width : COL_BLOCK,
                  nb = (width + jb - 1) / jb;
    const int64_t n_in = lr->size[inner];
    int64_t outer = 1, per = 1;
    for (int i = 0; i < ko; i++) outer *= lk->size[i];
    for (int i = 0; i < lr->nd; i++) per *= lr->size[i];
    if (trn__cc_numel(r) == 0) outer = 0;
    put(b, "(void *ctx, int64_t p0, int64_t p1) {\n");
    for (int i = 0; i < k->n_fused; i++) put_ctx(b, k, k->fused[i]);
    put_ctx(b, k, k->root);
    put_ptrs(b, k, "    ");
    put(b, "    for (int64_t p = p0; p < p1; p++) {\n");
    put(b, "        const int64_t row = p / %lld, j0 = (p %% %lld) * %lld;\n", (long long)nb,
        (long long)nb, (long long)jb);
    put(b, "        const int64_t jn = j0 + %lld < %lld ? %lld : %lld - j0;\n", (long long)jb,
        (long long)width, (long long)jb, (long long)width);
    put_unravel(b, lk, ko, "row", "        ");
    if (ko == 0) put(b, "        (void)row;\n");
    char **idx = calloc((size_t)k->n_leaves + 1, sizeof *idx);
    if (idx == NULL) b->oom = true;
    for (int a = 0; a < k->n_leaves && idx; a++) {
        const int64_t sj = eff_stride(lk, ko, k->acc[a].strides);
        put(b, "        const int64_t o%d = ", a);
        put_offset(b, lk, ko, k->acc[a].strides, k->acc[a].offset);
        if (sj != 0) put(b, " + j0 * %lld", (long long)sj);
        put(b, ";\n");
        sb t = {0};
        put(&t, "o%d", a);
        for (int i = 0; i < lr->nd; i++) {
            const int64_t s = eff_stride(lr, i, k->acc[a].strides);
            if (s == 1)
                put(&t, " + r%d", i);
            else if (s != 0)
                put(&t, " + r%d * %lld", i, (long long)s);
        }
        if (sj == 1)
            put(&t, " + j");
        else if (sj != 0)
            put(&t, " + j * %lld", (long long)sj);
        if (t.oom) b->oom = true;
        idx[a] = t.s;
    }
    put(b, "        const int64_t oo = ");
    put_offset(b, lk, ko, ostr, 0);
    put(b, " + j0;\n");
    put(b, "        double acc[%lld] = {0};\n", (long long)jb);
    char in[64] = "        ";
    for (int i = 0; i < inner; i++) {
        put(b, "%sfor (int64_t r%d = 0; r%d < %lld; r%d++) {\n", in, i, i, (long long)lr->size[i],
            i);
        size_t len = strlen(in);
        if (len + 4 < sizeof in) memcpy(in + len, "    ", 5);
    }
    sb v = {0};
    put_value(&v, k, r->in[0]);
    if (v.oom) b->oom = true;
    if (!b->oom) {
        put(b, "%sfor (int64_t rb = 0; rb < %lld; rb += %d) {\n", in, (long long)n_in, COL_RUN);
        put(b, "%s    const int64_t re = rb + %d < %lld ? rb + %d : %lld;\n", in, COL_RUN,
            (long long)n_in, COL_RUN, (long long)n_in);
        put(b, "%s    float s[%lld] = {0};\n", in, (long long)jb);
        put(b, "%s    for (int64_t r%d = rb; r%d < re; r%d++) {\n", in, inner, inner, inner);
        put(b, "%s        #pragma GCC ivdep\n", in);
        put(b, "%s        for (int64_t j = 0; j < jn; j++) {\n", in);
        char body[80];
        snprintf(body, sizeof body, "%s            ", in);
        put_body_values(b, k, body, (const char *const *)idx);
        put(b, "%s            s[j] += %s;\n", in, v.s);
        put(b, "%s        }\n", in);
        put(b, "%s    }\n", in);
        put(b, "%s    for (int64_t j = 0; j < jn; j++) acc[j] += (double)s[j];\n", in);
        put(b, "%s}\n", in);
    }
    free(v.s);
    for (int i = inner - 1; i >= 0; i--) {
        in[strlen(in) - 4] = 0;
        put(b, "%s}\n", in);
    }
    put(b, "        for (int64_t j = 0; j < jn; j++) {\n");
    put(b, "            const %s vr = ", reg_type(r->dtype));
    put_convert(b, "(float)acc[j]", TRN_DTYPE_F32, r->dtype);
    put(b, ";\n            out[oo + j] = ");
    put_store_value(b, r->dtype, "vr");
    put(b, ";\n        }\n    }\n}\n");
    int64_t grain = 16384 / (jb * (per ? per : 1));
    *items_out = outer * nb;
    *grain_out = grain < 1 ? 1 : grain;
    for (int a = 0; a < k->n_leaves && idx; a++) free(idx[a]);
    free(idx);
}

// Reduction kernel: kept dims outer (split across cores), reduced inner.
void render_reduce(sb *b, kernel *k, int64_t *items_out, int64_t *grain_out) {
    const trn__cc_node *r = &k->g->nodes[k->root];
    const trn__cc_node *x = &k->g->nodes[r->in[0]];
    int kept[TRN_GRAPH_MAX_DIMS], red[TRN_GRAPH_MAX_DIMS], nk = 0, nr = 0;
    for (int i = 0; i < x->ndim; i++) {
        if ((r->mask >> i) & 1)
            red[nr++] = i;
        else
            kept[nk++] = i;
    }
    const int64_t **acc = malloc(((size_t)k->n_leaves + 1) * sizeof *acc);
    if (acc == NULL) {
        b->oom = true;
        return;
    }
    int n_acc = 0;
    for (int i = 0; i < k->n_leaves; i++) acc[n_acc++] = k->acc[i].strides;
    // Output strides over the input's dims (reduced dims never move it).
    int64_t ostr[TRN_GRAPH_MAX_DIMS];
    for (int i = 0; i < x->ndim; i++) ostr[i] = (r->mask >> i) & 1 ? 0 : r->layout[i];
    acc[n_acc++] = ostr;
    loops lk, lr;
    build_loops(&lk, x->sizes, kept, nk, acc, n_acc);
    build_loops(&lr, x->sizes, red, nr, acc, n_acc - 1);
    free(acc);
    if (reduce_by_columns(k, r, x, &lk, &lr, ostr)) {
        render_reduce_cols(b, k, &lk, &lr, ostr, items_out, grain_out);
        return;
    }
    int64_t rows = 1, per = 1;
    for (int i = 0; i < lk.nd; i++) rows *= lk.size[i];
    for (int i = 0; i < lr.nd; i++) per *= lr.size[i];
    if (trn__cc_numel(r) == 0) rows = 0;
    int64_t grain = 16384 / (per ? per : 1);
    if (grain < 1) grain = 1;
    bool fam_f = is_f(x->dtype) || is_f(r->dtype);
    const char *acc_t =
        fam_f ? ((r->rop == TRN_GRAPH_SUM || r->rop == TRN_GRAPH_PROD) ? "double" : "float")
              : "int64_t";
    const char *init;
    switch (r->rop) {
    case TRN_GRAPH_SUM: init = "0"; break;
    case TRN_GRAPH_PROD: init = "1"; break;
    case TRN_GRAPH_MAX: init = fam_f ? "-INFINITY" : "INT64_MIN"; break;
    default: init = fam_f ? "INFINITY" : "INT64_MAX"; break;
    }
    put(b, "(void *ctx, int64_t p0, int64_t p1) {\n");
    for (int i = 0; i < k->n_fused; i++) put_ctx(b, k, k->fused[i]);
    put_ctx(b, k, k->root);
    put_ptrs(b, k, "    ");
    put(b, "    for (int64_t p = p0; p < p1; p++) {\n");
    put_unravel(b, &lk, lk.nd, "p", "        ");
    for (int a = 0; a < k->n_leaves; a++) {
        put(b, "        const int64_t o%d = ", a);
        put_offset(b, &lk, lk.nd, k->acc[a].strides, k->acc[a].offset);
        put(b, ";\n");
    }
    put(b, "        const int64_t oo = ");
    put_offset(b, &lk, lk.nd, ostr, 0);
    put(b, ";\n");
    // The innermost reduced loop runs four independent accumulators (when it
    // has at least 8 elements), so consecutive adds do not wait on each other;
    // they combine at the end (sums in double). The fused body is written once
    // (not once per lane plus a tail): each block of four elements computes
    // them into e[], lane l folds e[l]; past the end e[l] is the identity.
    // `unroll 4` lets gcc keep e[] in registers: without it the block loop
    // stays a loop through memory, 1.3-1.8x slower on the CNN's reductions.
    const int inner = lr.nd - 1;
    const int64_t n_in = lr.nd ? lr.size[inner] : 1;
    // A float sum, max or min whose innermost reduced loop is a multiple of
    // 8 runs in float lanes instead (put_float_sum, put_float_extreme); else,
    // as here, sums and products in double.
    const int flanes = float_lanes(r, x, n_in);
    const int lanes = flanes ? 1 : (n_in >= 8 ? 4 : 1);
    for (int l = 0; l < lanes; l++) put(b, "        %s acc%d = %s;\n", acc_t, l, init);
    char in[64] = "        ";
    for (int i = 0; i < inner; i++) {
        put(b, "%sfor (int64_t r%d = 0; r%d < %lld; r%d++) {\n", in, i, i, (long long)lr.size[i],
            i);
        size_t len = strlen(in);
        if (len + 4 < sizeof in) memcpy(in + len, "    ", 5);
    }
    char **idx = calloc((size_t)k->n_leaves + 1, sizeof *idx);
    for (int a = 0; a < k->n_leaves && idx; a++) {
        sb t = {0};
        put(&t, "o%d", a);
        for (int i = 0; i < lr.nd; i++) {
            int64_t s = eff_stride(&lr, i, k->acc[a].strides);
            if (s == 1)
                put(&t, " + r%d", i);
            else if (s != 0)
                put(&t, " + r%d * %lld", i, (long long)s);
        }
        if (t.oom) b->oom = true;
        idx[a] = t.s;
    }
    if (idx == NULL) b->oom = true;
    sb v = {0};
    put_value(&v, k, r->in[0]);
    if (v.oom) b->oom = true;
    const char *cast =
        fam_f ? (strcmp(acc_t, "double") == 0 ? "(double)" : "(float)") : "(int64_t)";
    if (!b->oom && flanes && r->rop != TRN_GRAPH_SUM) {
        put_float_extreme(b, k, in, inner, n_in, flanes, r->rop, (const char *const *)idx, v.s);
    } else if (!b->oom && flanes) {
        put_float_sum(b, k, in, inner, n_in, flanes, (const char *const *)idx, v.s);
    } else if (!b->oom && lanes == 1) {
        if (lr.nd == 0)
            put(b, "%s{\n", in);
        else
            put(b, "%sfor (int64_t r%d = 0; r%d < %lld; r%d++) {\n", in, inner, inner,
                (long long)n_in, inner);
        char body[80];
        snprintf(body, sizeof body, "%s    ", in);
        put_body_values(b, k, body, (const char *const *)idx);
        char e[80];
        snprintf(e, sizeof e, "%s%s", cast, v.s);
        put_fold(b, body, r->rop, fam_f, 0, e);
        put(b, "%s}\n", in);
    } else if (!b->oom) {
        put(b, "%sfor (int64_t rb = 0; rb < %lld; rb += 4) {\n", in, (long long)n_in);
        put(b, "%s    %s e[4];\n", in, acc_t);
        put(b, "%s    #pragma GCC unroll 4\n", in);
        put(b, "%s    for (int l = 0; l < 4; l++) {\n", in);
        put(b, "%s        const int64_t r%d = rb + l;\n", in, inner);
        if (n_in % 4)
            put(b, "%s        if (r%d >= %lld) { e[l] = %s; continue; }\n", in, inner,
                (long long)n_in, init);
        char body[80];
        snprintf(body, sizeof body, "%s        ", in);
        put_body_values(b, k, body, (const char *const *)idx);
        put(b, "%s        e[l] = %s%s;\n", in, cast, v.s);
        put(b, "%s    }\n", in);
        snprintf(body, sizeof body, "%s    ", in);
        for (int l = 0; l < lanes; l++) {
            char e[16];
            snprintf(e, sizeof e, "e[%d]", l);
            put_fold(b, body, r->rop, fam_f, l, e);
        }
        put(b, "%s}\n", in);
    }
    free(v.s);
    for (int i = inner - 1; i >= 0; i--) {
        in[strlen(in) - 4] = 0;
        put(b, "%s}\n", in);
    }
    // Lanes combine pairwise (NaN still wins for max/min).
    for (int l = 1; l < lanes; l++) {
        switch (r->rop) {
        case TRN_GRAPH_SUM: put(b, "        acc0 += acc%d;\n", l); break;
        case TRN_GRAPH_PROD: put(b, "        acc0 *= acc%d;\n", l); break;
        case TRN_GRAPH_MAX:
            if (fam_f)
                put(b, "        acc0 = (acc%d != acc%d || acc%d > acc0) ? acc%d : acc0;\n", l, l, l,
                    l);
            else
                put(b, "        acc0 = acc%d > acc0 ? acc%d : acc0;\n", l, l);
            break;
        default:
            if (fam_f)
                put(b, "        acc0 = (acc%d != acc%d || acc%d < acc0) ? acc%d : acc0;\n", l, l, l,
                    l);
            else
                put(b, "        acc0 = acc%d < acc0 ? acc%d : acc0;\n", l, l);
            break;
        }
    }
    put(b, "        const %s acc = acc0;\n", acc_t);
    put(b, "        { const %s vr = ", reg_type(r->dtype));
    sb e = {0};
    put(&e, "(%s)acc", fam_f ? "float" : "int64_t");
    if (!e.oom) put_convert(b, e.s, fam_f ? TRN_DTYPE_F32 : TRN_DTYPE_I64, r->dtype);
    free(e.s);
    put(b, "; out[oo] = ");
    put_store_value(b, r->dtype, "vr");
    put(b, "; }\n    }\n}\n");
    *items_out = rows;
    *grain_out = grain;
    for (int a = 0; a < k->n_leaves && idx; a++) free(idx[a]);
    free(idx);
}
