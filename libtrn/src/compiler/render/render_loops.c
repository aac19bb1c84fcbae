// render_loops.c - owns the loop nest's shape: size-1 dims dropped, dims
// every access walks as one merged, and the index arithmetic over them.
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "render_impl.h"

// ---- loop dims: drop size-1 dims, merge dims every access walks as one ---

// Stride of access `a` (strides over the original dims) along loop dim i.
static int64_t loop_stride(const loops *l, int i, const int64_t *strides) {
    return strides[l->dim[i][l->nmerged[i] - 1]];
}

void build_loops(loops *l, const int64_t *sizes, const int *dims, int n, const int64_t *const *acc,
                 int n_acc) {
    l->nd = 0;
    for (int t = 0; t < n; t++) {
        int d = dims[t];
        if (sizes[d] == 1) continue;
        if (l->nd > 0) {
            int p = l->nd - 1;
            bool ok = true;
            for (int a = 0; a < n_acc && ok; a++)
                ok = loop_stride(l, p, acc[a]) == acc[a][d] * sizes[d];
            if (ok) {
                l->size[p] *= sizes[d];
                l->dim[p][l->nmerged[p]++] = d;
                continue;
            }
        }
        l->size[l->nd] = sizes[d];
        l->dim[l->nd][0] = d;
        l->nmerged[l->nd] = 1;
        l->nd++;
    }
}

int64_t eff_stride(const loops *l, int i, const int64_t *strides) {
    return loop_stride(l, i, strides);
}

void put_unravel(sb *b, const loops *l, int nd, const char *var, const char *in) {
    if (nd == 0) return;
    put(b, "%sint64_t t = %s;\n", in, var);
    for (int i = nd - 1; i > 0; i--)
        put(b, "%sconst int64_t i%d = t %% %lld; t /= %lld;\n", in, i, (long long)l->size[i],
            (long long)l->size[i]);
    put(b, "%sconst int64_t i0 = t;\n", in);
}

void put_offset(sb *b, const loops *l, int nd, const int64_t *strides, int64_t base) {
    put(b, "%lld", (long long)base);
    for (int i = 0; i < nd; i++) {
        int64_t s = eff_stride(l, i, strides);
        if (s != 0) put(b, " + i%d * %lld", i, (long long)s);
    }
}

// A scatter's second pass, after the first wrote self's value: one element
