// render_pointwise.c - owns the body of a pointwise kernel: rows of the
// merged loop nest split across the device's cores, one store per element.
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "render_impl.h"

// Both write the body function's text from its parameter list on (the
// caller names it), and its launch size into *items / *grain.
void render_pointwise(sb *b, kernel *k, int64_t *items_out, int64_t *grain_out) {
    const trn__cc_node *r = &k->g->nodes[k->root];
    int n_acc = k->n_leaves + 1;
    const int64_t **acc = malloc((size_t)n_acc * sizeof *acc);
    int dims[TRN_GRAPH_MAX_DIMS];
    for (int i = 0; i < r->ndim; i++) dims[i] = i;
    if (acc == NULL) {
        b->oom = true;
        return;
    }
    for (int i = 0; i < k->n_leaves; i++) acc[i] = k->acc[i].strides;
    acc[n_acc - 1] = r->layout;
    loops l;
    build_loops(&l, r->sizes, dims, r->ndim, acc, n_acc);
    free(acc);
    int64_t numel = trn__cc_numel(r);
    int64_t inner = l.nd ? l.size[l.nd - 1] : 1;
    int64_t rows = numel == 0 ? 0 : numel / (inner ? inner : 1);
    int64_t nb = 1;
    if (rows < 16 && inner >= 4096) {
        nb = (16 + rows - 1) / (rows ? rows : 1);
        if (nb > inner / 2048) nb = inner / 2048;
        if (nb < 1) nb = 1;
    }
    int64_t bs = (inner + nb - 1) / nb;
    int64_t items = rows * nb;
    int64_t grain = 16384 / (bs ? bs : 1);
    if (grain < 1) grain = 1;
    int od = l.nd ? l.nd - 1 : 0;

    put(b, "(void *ctx, int64_t p0, int64_t p1) {\n");
    for (int i = 0; i < k->n_fused; i++) put_ctx(b, k, k->fused[i]);
    put_ctx(b, k, k->root);
    put_ptrs(b, k, "    ");
    put(b, "    for (int64_t p = p0; p < p1; p++) {\n");
    if (nb > 1) {
        put(b, "        const int64_t row = p / %lld, j0 = (p %% %lld) * %lld;\n", (long long)nb,
            (long long)nb, (long long)bs);
        put(b, "        const int64_t j1 = j0 + %lld < %lld ? j0 + %lld : %lld;\n", (long long)bs,
            (long long)inner, (long long)bs, (long long)inner);
    } else {
        put(b, "        const int64_t row = p, j0 = 0, j1 = %lld;\n", (long long)inner);
    }
    put_unravel(b, &l, od, "row", "        ");
    if (od == 0) put(b, "        (void)row;\n");
    char **idx = calloc((size_t)k->n_leaves + 1, sizeof *idx);
    for (int a = 0; a < k->n_leaves; a++) {
        put(b, "        const int64_t o%d = ", a);
        put_offset(b, &l, od, k->acc[a].strides, k->acc[a].offset);
        put(b, ";\n");
        int64_t s = l.nd ? eff_stride(&l, l.nd - 1, k->acc[a].strides) : 0;
        char tmp[64];
        if (s == 0)
            snprintf(tmp, sizeof tmp, "o%d", a);
        else if (s == 1)
            snprintf(tmp, sizeof tmp, "o%d + j", a);
        else
            snprintf(tmp, sizeof tmp, "o%d + j * %lld", a, (long long)s);
        idx[a] = malloc(strlen(tmp) + 1);
        if (idx[a])
            strcpy(idx[a], tmp);
        else
            b->oom = true;
    }
    put(b, "        const int64_t oo = ");
    put_offset(b, &l, od, r->layout, 0);
    put(b, ";\n");
    int64_t so = l.nd ? eff_stride(&l, l.nd - 1, r->layout) : 0;
    // ivdep: the output never overlaps an operand except a store's own
    // input at the element it writes (the schedule allocates a step's output
    // before releasing its operands), so no iteration depends on another.
    // Without it GCC -O2's "very cheap" vectorizer skips every loop that
    // would need an aliasing check: the MLP's gelu loop ran scalar (12 % of
    // an inference step's perf samples; the graph took 67 us, now 23-33 us).
    put(b, "        #pragma GCC ivdep\n");
    put(b, "        for (int64_t j = j0; j < j1; j++) {\n");
    if (!b->oom) put_body_values(b, k, "            ", (const char *const *)idx);
    if (r->kind == CC_CONST) {
        put(b, "            out[oo + j * %lld] = ", (long long)so);
        sb v = {0};
        put_const(&v, r);
        if (!v.oom) put_store_value(b, r->dtype, v.s);
        free(v.s);
        put(b, ";\n");
    } else {
        put_compute(b, k, k->root, "            ");
        char v[32];
        snprintf(v, sizeof v, "v%d", vid(k, k->root));
        put(b, "            out[oo + j * %lld] = ", (long long)so);
        put_store_value(b, r->dtype, v);
        put(b, ";\n");
    }
    put(b, "        }\n    }\n}\n");
    *items_out = items;
    *grain_out = grain;
    for (int a = 0; a < k->n_leaves; a++) free(idx[a]);
    free(idx);
}
