// fuse.c - partition-loop fusion for render.c: consecutive instructions
// that iterate the same partitions run as one loop over the partition index
// i0, each doing its work for partition i0 in program order. A tile row
// then stays in L1 from one instruction to the next, instead of the whole
// tile streaming through the cache once per instruction (layer norm:
// dma, bn_stats, bn_aggr, tensor_scalar, activation, tensor_scalar, dma).
//
// Exact by construction: every element gets the same operations in the same
// order with the same casts (only the order between different partitions
// changes), so fused and unfused programs give bit-identical results. That
// holds when no instruction of the group can see another's effect on a
// different partition row:
//  - every tensor (root) the group writes is accessed by every operand of
//    the group at one row step S > 0 per partition index, at one affine
//    base up to a constant, and all those accesses of one row lie within
//    S consecutive elements: rows of different i0 touch disjoint elements;
//  - tensors the group only reads are unconstrained;
//  - distinct scratch tensors are distinct memory (check.c's layout); two
//    HBM arguments may be one tensor, so a group that writes an HBM tensor
//    and touches another one runs fused only when the run time found no
//    overlap (rt->serial == 0), unfused otherwise.
// Instructions that keep run-time bounds checks (masked legacy accesses)
// stay unfused, so a failing run reports the same instruction.
#include <stdlib.h>
#include <string.h>

#include "nki_impl.h"

// at most this many instructions per group (the hazard check is quadratic)
#define MAX_GROUP 64

// The partition count an instruction iterates as its outermost loop i0, or
// -1 when it has no such loop render_instr.c can hand to a fused group.
static int64_t part_count(const nki_instr *in) {
    const nki_operand *d = &in->opd[0];
    for (int k = 0; k < in->nopd; k++)
        if (in->rt[k]) return -1;
    switch (in->op) {
    case NKI_OP_COPY:
    case NKI_OP_TT:
    case NKI_OP_WHERE:
    case NKI_OP_PREDCOPY:
    case NKI_OP_TS:
    case NKI_OP_STT:
    case NKI_OP_ACT:
    case NKI_OP_IOTA:
    case NKI_OP_MEMSET:
    case NKI_OP_SELECT: return d->nd >= 2 ? d->count[0] : -1;
    case NKI_OP_SCAN:
    case NKI_OP_BNSTATS:
    case NKI_OP_BNAGGR:
        // these address every operand by partition i0 (put_off_flat)
        for (int k = 1; k < in->nopd; k++)
            if (in->opd[k].count[0] != d->count[0]) return -1;
        return d->nd >= 2 ? d->count[0] : -1;
    case NKI_OP_REDUCE: {
        const nki_operand *s = &in->opd[1];
        const int keep = s->nd - (int)in->p[1];
        if (keep < 1 || s->nd < 2 || d->nd < 1 || d->count[0] != s->count[0]) return -1;
        return s->count[0];
    }
    default: return -1;  // matmul, transposes, partition reductions, gathers
    }
}

static bool same_terms(const nki_affine *x, const nki_affine *y) {
    nki_affine a = *x, b = *y;
    a.c = b.c = 0;
    for (int pass = 0; pass < 2; pass++) {
        const nki_affine *u = pass ? &b : &a, *o = pass ? &a : &b;
        for (int i = 0; i < u->n; i++) {
            if (u->coef[i] == 0) continue;
            int k = 0;
            while (k < o->n && o->var[k] != u->var[i]) k++;
            if (k == o->n || o->coef[k] != u->coef[i]) return false;
        }
    }
    return true;
}

static bool is_hbm_arg(const nki_tensor *t) { return t->kind == NKI_ARG || t->kind == NKI_OUT; }

// Whether instructions ins[0..n) may run fused over P partitions; *guard:
// only where no two HBM arguments overlap.
static bool group_ok(const nki_prog *p, nki_instr *const *ins, int n, int64_t P, bool *guard) {
    bool hbm_written = false;
    int hbm_roots = 0, first_hbm = -1;
    for (int a = 0; a < n; a++)
        for (int k = 0; k < ins[a]->nopd; k++) {
            const nki_tensor *r = &p->t[p->t[ins[a]->opd[k].tid].root];
            if (!is_hbm_arg(r)) continue;
            if (nki__instr_writes(ins[a], k)) hbm_written = true;
            if (first_hbm < 0)
                first_hbm = r->id, hbm_roots = 1;
            else if (r->id != first_hbm)
                hbm_roots = 2;
        }
    *guard = hbm_written && hbm_roots > 1;
    for (int a = 0; a < n; a++)
        for (int k = 0; k < ins[a]->nopd; k++) {
            if (!nki__instr_writes(ins[a], k)) continue;
            const nki_operand *w = &ins[a]->opd[k];
            const int root = p->t[w->tid].root;
            const int sz = nki__dtype_size(p->t[w->tid].dtype);
            const int64_t S = w->stride[0];
            if (w->count[0] != P || S <= 0) return false;
            int64_t lo = INT64_MAX, hi = INT64_MIN;
            // every access of the group to this root
            for (int b2 = 0; b2 < n; b2++)
                for (int m = 0; m < ins[b2]->nopd; m++) {
                    const nki_operand *o = &ins[b2]->opd[m];
                    if (p->t[o->tid].root != root) continue;
                    if (nki__dtype_size(p->t[o->tid].dtype) != sz || o->count[0] != P ||
                        o->stride[0] != S || !same_terms(&o->flat, &w->flat))
                        return false;
                    int64_t l = o->flat.c - w->flat.c, h = l;
                    for (int j = 1; j < o->nd; j++) {
                        const int64_t e = (o->count[j] - 1) * o->stride[j];
                        if (e < 0)
                            l += e;
                        else
                            h += e;
                    }
                    if (l < lo) lo = l;
                    if (h > hi) hi = h;
                }
            if (hi - lo >= S) return false;
        }
    return true;
}

bool nki__fuse_enabled(void) {
    const char *v = getenv("NKI_FUSE");
    return v == NULL || strcmp(v, "0") != 0;
}

int nki__fuse_group(const nki_prog *p, int from, int to, int64_t *parts, bool *guard) {
    *guard = false;
    if (from >= to || p->s[from].kind != NKI_INSTR) return from;
    const int64_t P = part_count(p->s[from].ins);
    if (P < 1) return from;
    nki_instr *ins[MAX_GROUP];
    int n = 0, end = from;
    ins[n++] = p->s[from].ins;
    for (int j = from + 1; j < to && n < MAX_GROUP; j++) {
        const nki_stmt *s = &p->s[j];
        if (s->kind == NKI_POISON) {
            // hoisted before the group: the group's instructions so far must
            // not touch the new tensor
            bool touched = false;
            for (int a = 0; a < n && !touched; a++)
                for (int k = 0; k < ins[a]->nopd; k++)
                    if (p->t[ins[a]->opd[k].tid].root == p->t[s->tensor].root) touched = true;
            if (touched) break;
            continue;
        }
        if (s->kind != NKI_INSTR || part_count(s->ins) != P) break;
        ins[n] = s->ins;
        bool g;
        if (!group_ok(p, ins, n + 1, P, &g)) break;
        n++;
        end = j;
        *guard = g;
    }
    if (n < 2) return from;
    *parts = P;
    return end + 1;
}
