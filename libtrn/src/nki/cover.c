// cover.c - whether a kernel output's poison could ever be seen.
//
// New memory is poisoned (NaN for floats) so that a kernel reading memory it
// never wrote fails its test. For an output that costs a whole extra pass
// over its memory before the run. It is unobservable, and skipped by the
// caller (nki/_runtime.py), when the kernel never reads the output and one
// instruction that always runs writes every one of its elements: nothing can
// read the poison and nothing of it survives into the result.
//
// "Always runs": no enclosing `if`, no legacy mask, no run-time checked
// operand, an instruction that writes its whole destination access (not a
// predicated copy, indirect scatter or top-8 family member). "Every
// element": the destination's element offsets over the enclosing loops, the
// program ids and the access dims form the mixed-radix numbering of
// [0, numel): sorted by |coefficient|, the first is 1 and each next one is
// the product of the counts before it; the constant offset is 0 after
// negative coefficients are folded in.
#include <stdlib.h>

#include "nki_impl.h"

typedef struct gen {
    int64_t coef, count;
} gen;

static int gen_cmp(const void *a, const void *b) {
    int64_t x = ((const gen *)a)->coef, y = ((const gen *)b)->coef;
    return (x > y) - (x < y);
}

// Instructions that write every element of their destination access.
static bool writes_whole_dst(const nki_instr *in) {
    switch (in->op) {
    case NKI_OP_COPY:
    case NKI_OP_TT:
    case NKI_OP_TS:
    case NKI_OP_ACT:
    case NKI_OP_REDUCE:
    case NKI_OP_TRANSPOSE:
    case NKI_OP_IOTA:
    case NKI_OP_MEMSET:
    case NKI_OP_SCAN:
    case NKI_OP_STT:
    case NKI_OP_PREDUCE:
    case NKI_OP_BNSTATS:
    case NKI_OP_BNAGGR:
    case NKI_OP_SELECT:
    case NKI_OP_WHERE:
    case NKI_OP_RAND:
    case NKI_OP_TAKE: return in->nmask == 0 && !in->rt[0];
    default: return false;
    }
}

// Whether operand o of an instruction enclosed by loops[0..nloops) (statement
// indices) writes exactly the elements [0, n) of its root's memory.
static bool covers(const nki_prog *p, const nki_operand *o, const int *loops, int nloops,
                   int64_t n) {
    gen g[NKI_MAXT + NKI_MAXD];
    int ng = 0;
    int64_t c = o->flat.c;
    for (int i = 0; i < o->flat.n; i++) {
        int64_t coef = o->flat.coef[i], count = 0, lo = 0;
        const int v = o->flat.var[i];
        if (coef == 0) continue;
        if (v >= NKI_PID_VAR) {
            const int a = v - NKI_PID_VAR;
            count = a < p->ngrid ? p->grid[a] : 1;
        } else {
            int k = nloops - 1;
            while (k >= 0 && p->s[loops[k]].var != v) k--;
            if (k < 0) return false;  // not an enclosing loop's index
            const nki_stmt *l = &p->s[loops[k]];
            if (l->step <= 0 || l->hi <= l->lo) return false;
            count = (l->hi - l->lo + l->step - 1) / l->step;
            lo = l->lo;
            c += coef * lo;
            coef *= l->step;
        }
        g[ng++] = (gen){coef, count};
    }
    for (int j = 0; j < o->nd; j++) g[ng++] = (gen){o->stride[j], o->count[j]};
    int m = 0;
    for (int i = 0; i < ng; i++) {
        if (g[i].count < 1) return false;
        if (g[i].count == 1 || g[i].coef == 0) continue;  // one value, or repeats the same elements
        if (g[i].coef < 0) {
            c += g[i].coef * (g[i].count - 1);
            g[i].coef = -g[i].coef;
        }
        g[m++] = g[i];
    }
    if (c != 0) return false;
    qsort(g, (size_t)m, sizeof *g, gen_cmp);
    int64_t run = 1;
    for (int i = 0; i < m; i++) {
        if (g[i].coef != run) return false;
        if (g[i].count > n / run) return false;  // beyond n (and no overflow)
        run *= g[i].count;
    }
    return run == n;
}

bool nki__output_covered(const nki_prog *p, int tensor) {
    if (tensor < 0 || tensor >= p->nt) return false;
    const nki_tensor *t = &p->t[tensor];
    if (t->kind != NKI_OUT || t->root != tensor) return false;
    // the run binds outputs as contiguous memory of numel elements
    int64_t n = 1;
    for (int d = t->ndim - 1; d >= 0; d--) {
        if (t->sizes[d] != 1 && t->strides[d] != n) return false;
        n *= t->sizes[d];
    }
    if (n == 0) return true;  // nothing to poison
    int *loops = malloc(((size_t)p->ns + 1) * sizeof *loops);
    if (loops == NULL) return false;  // unknown: keep the poison
    int nloops = 0, nif = 0;
    bool cover = false, read = false;
    int *open = malloc(((size_t)p->ns + 1) * sizeof *open);  // 1: loop, 0: if
    if (open == NULL) {
        free(loops);
        return false;
    }
    int nopen = 0;
    for (int i = 0; i < p->ns && !read; i++) {
        const nki_stmt *s = &p->s[i];
        if (s->kind == NKI_LOOP) {
            loops[nloops++] = i;
            open[nopen++] = 1;
        } else if (s->kind == NKI_IF) {
            nif++;
            open[nopen++] = 0;
        } else if (s->kind == NKI_END) {
            if (nopen > 0 && open[--nopen])
                nloops--;
            else if (nif > 0)
                nif--;
        } else if (s->kind == NKI_INSTR) {
            const nki_instr *in = s->ins;
            for (int k = 0; k < in->nopd; k++) {
                if (p->t[in->opd[k].tid].root != tensor) continue;
                if (!nki__instr_writes(in, k) || (in->op == NKI_OP_GATHER && in->np > 3)) {
                    read = true;  // (a scatter with dst_rmw_op reads its destination)
                    break;
                }
                if (k == 0 && nif == 0 && !cover && writes_whole_dst(in))
                    cover = covers(p, &in->opd[0], loops, nloops, n);
            }
        }
    }
    free(loops);
    free(open);
    return cover && !read;
}
