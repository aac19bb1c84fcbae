// render_index.c - owns the indexing code: a gather's checked indices and
// load, an iota's value, and a scatter's serial second pass.
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "render_impl.h"

// element 0 of nothing: the load is skipped), then one load.
void put_gather(sb *b, const kernel *k, int n, const char *in) {
    const trn__cc_node *x = &k->g->nodes[n];
    trn__cc_access a;
    int64_t ist[2], isz[2];
    trn__cc_gather_access(k->g, n, &a, ist, isz);
    int pos = leaf_pos(k, n);
    const int id = vid(k, n);
    put(b, "%sint ok%d = 1;\n", in, id);
    for (int q = 0; q < x->n_in - 1; q++) {
        put(b, "%sconst int64_t q%d_%d = ", in, id, q);
        put_arg(b, k, x->in[1 + q], TRN_DTYPE_I64);
        put(b, ";\n%sint64_t w%d_%d = q%d_%d", in, id, q, id, q);
        if (x->wrap) put(b, " < 0 ? q%d_%d + %lld : q%d_%d", id, q, (long long)isz[q], id, q);
        put(b,
            ";\n%sif ((uint64_t)w%d_%d >= UINT64_C(%lld)) { trn_g_fail(c, q%d_%d, %d, %lld, %d); "
            "w%d_%d = 0; ok%d = 0; }\n",
            in, id, q, (long long)isz[q], id, q, x->gdim[q], (long long)isz[q], (int)x->ierr, id, q,
            id);
    }
    sb idx = {0};
    put(&idx, "%s", pos >= 0 && k->istr[pos] ? k->istr[pos] : "0");
    for (int q = 0; q < x->n_in - 1; q++) put(&idx, " + w%d_%d * %lld", id, q, (long long)ist[q]);
    char ptr[32];
    snprintf(ptr, sizeof ptr, "b%d", k->slot[a.buffer]);
    put(b, "%sconst %s v%d = ok%d ? ", in, reg_type(x->dtype), id, id);
    if (idx.oom)
        b->oom = true;
    else
        put_load(b, x->dtype, ptr, idx.s);
    put(b, " : 0;\n");
    free(idx.s);
}

// An iota's element: start + step * its position (the leaf's offset).
void put_iota(sb *b, const kernel *k, int n, const char *in) {
    const trn__cc_node *x = &k->g->nodes[n];
    int pos = leaf_pos(k, n);
    const char *at = pos >= 0 && k->istr[pos] ? k->istr[pos] : "0";
    sb e = {0};
    if (is_f(x->dtype))
        put(&e, "(float)(%.17g + %.17g * (double)(%s))", x->params[0], x->params[1], at);
    else {
        put(&e, "(");
        put_i64(&e, (int64_t)x->params[0]);
        put(&e, " + ");
        put_i64(&e, (int64_t)x->params[1]);
        put(&e, " * (%s))", at);
    }
    put(b, "%sconst %s v%d = ", in, reg_type(x->dtype), vid(k, n));
    if (e.oom)
        b->oom = true;
    else
        put_convert(b, e.s, is_f(x->dtype) ? TRN_DTYPE_F32 : TRN_DTYPE_I64, x->dtype);
    put(b, ";\n");
    free(e.s);
}

// of the index at a time, in row-major order (deterministic accumulation).
void put_scatter(sb *b, const kernel *k) {
    const trn_graph *g = k->g;
    const trn__cc_node *r = &g->nodes[k->root], *it = &g->nodes[r->in[1]];
    trn__cc_access ai, as;
    trn__cc_access_of(g, r->in[1], &ai);
    trn__cc_access_of(g, r->in[2], &as);
    const trn_dtype d = r->dtype;
    const int64_t size = r->sizes[r->gdim[0]], ost = r->layout[r->gdim[0]];
    static const char *const how[] = {"", " (accumulated)", " (multiplied)", " (max)", " (min)"};
    put(b, "    // each source element goes to its indexed place%s\n", how[r->accumulate]);
    put(b, "    {\n        const int64_t *const bi = (const int64_t *)bufs[%d];\n", ai.buffer);
    put(b, "        const %s *const bs = (const %s *)bufs[%d];\n", mem_type(d), mem_type(d),
        as.buffer);
    put(b, "        %s *const out = (%s *)bufs[%d];\n", mem_type(d), mem_type(d), k->root);
    char in[64] = "        ";
    int nloops = 0;
    sb oi = {0}, os = {0}, oo = {0};
    put(&oi, "%lld", (long long)ai.offset);
    put(&os, "%lld", (long long)as.offset);
    put(&oo, "0");
    for (int j = 0; j < it->ndim; j++) {
        if (it->sizes[j] == 1) continue;
        put(b, "%sfor (int64_t i%d = 0; i%d < %lld; i%d++) {\n", in, j, j, (long long)it->sizes[j],
            j);
        size_t len = strlen(in);
        if (len + 4 < sizeof in) memcpy(in + len, "    ", 5);
        nloops++;
        if (ai.strides[j]) put(&oi, " + i%d * %lld", j, (long long)ai.strides[j]);
        if (as.strides[j]) put(&os, " + i%d * %lld", j, (long long)as.strides[j]);
        if (r->gmap[j] >= 0 && r->layout[r->gmap[j]])
            put(&oo, " + i%d * %lld", j, (long long)r->layout[r->gmap[j]]);
    }
    if (nloops == 0) {  // one element: still a loop, for `continue`
        put(b, "%sfor (int once = 0; once < 1; once++) {\n", in);
        size_t len = strlen(in);
        if (len + 4 < sizeof in) memcpy(in + len, "    ", 5);
        nloops = 1;
    }
    if (oi.oom || os.oom || oo.oom)
        b->oom = true;
    else {
        put(b, "%sconst int64_t q = bi[%s];\n", in, oi.s);
        if (r->wrap)
            put(b, "%sconst int64_t w = q < 0 ? q + %lld : q;\n", in, (long long)size);
        else
            put(b, "%sconst int64_t w = q;\n", in);
        put(b,
            "%sif ((uint64_t)w >= UINT64_C(%lld)) { trn_g_fail(c, q, %d, %lld, %d); continue; }\n",
            in, (long long)size, r->gdim[0], (long long)size, (int)r->ierr);
        put(b, "%sconst int64_t o = %s + w * %lld;\n", in, oo.s, (long long)ost);
        put(b, "%sconst %s v = ", in, reg_type(d));
        put_load(b, d, "bs", os.s);
        put(b, ";\n");
        if (r->accumulate) {
            // 1 + trn_graph_reduce_op; max/min as eager's (a NaN source wins, a NaN kept)
            static const char *const fold[] = {"(a + v)", "(a * v)",
                                               "(v != v ? v : (a < v ? v : a))",
                                               "(v != v ? v : (v < a ? v : a))"};
            put(b, "%sconst %s a = ", in, reg_type(d));
            put_load(b, d, "out", "o");
            put(b, ";\n%sout[o] = ", in);
            put_store_value(b, d, fold[r->accumulate - 1]);
        } else {
            put(b, "%sout[o] = ", in);
            put_store_value(b, d, "v");
        }
        put(b, ";\n");
    }
    free(oi.s);
    free(os.s);
    free(oo.s);
    for (int j = 0; j < nloops; j++) {
        in[strlen(in) - 4] = 0;
        put(b, "%s}\n", in);
    }
    put(b, "    }\n");
}
