// forward.c - copy forwarding inside a fused group (fuse.c, render.c).
//
// A kernel stages rows through SBUF tiles: `dma_copy(t, x[rows])`, some
// instructions read t, one writes its result into t, `dma_copy(out[rows],
// t)`. Fused, every row of t is still written and re-read once per copy,
// two extra passes over each row (layer norm: 1.5x the native kernel's
// time, 1.05x without them). Where nothing else can see t, the fused loop
// skips them:
//  - load forwarding: the copy into t is dropped and the instructions that
//    read t before its next write read the copy's source instead;
//  - store forwarding: the last write of t goes straight to the copy-out's
//    destination, and the copy-out is dropped.
// Exact: a dropped copy is bit-exact (equal dtypes, or a narrower float or
// widened to float32, which every reader sees as the same fp32 value); a write redirected past a copy-out stores the value the copy
// would have stored (t's dtype is the destination's, or float32, which
// holds the computed fp32 value exactly). So fused programs stay
// bit-identical to unfused ones (tests/nki/test_nki_fusion.py).
// "Nothing else can see t": every reference to t's root outside allocation
// points lies in the group, all of them with one access pattern (the same
// elements in the same order), and the first one fully writes it without
// reading it, so no value of t outlives one pass through the group.
#include <stdlib.h>
#include <string.h>

#include "nki_impl.h"

static bool same_access(const nki_prog *p, const nki_operand *a, const nki_operand *b) {
    if (p->t[a->tid].root != p->t[b->tid].root || p->t[a->tid].dtype != p->t[b->tid].dtype ||
        a->nd != b->nd || a->flat.c != b->flat.c || a->flat.n != b->flat.n)
        return false;
    for (int i = 0; i < a->flat.n; i++)
        if (a->flat.var[i] != b->flat.var[i] || a->flat.coef[i] != b->flat.coef[i]) return false;
    for (int j = 0; j < a->nd; j++)
        if (a->count[j] != b->count[j] || a->stride[j] != b->stride[j]) return false;
    return true;
}

static bool same_shape(const nki_operand *a, const nki_operand *b) {
    if (a->nd != b->nd) return false;
    for (int j = 0; j < a->nd; j++)
        if (a->count[j] != b->count[j]) return false;
    return true;
}

static int root_of(const nki_prog *p, const nki_operand *o) { return p->t[o->tid].root; }

// Whether reading `src` (dtype s) gives every reader of a copy into dtype
// d the value that copy stored: the same bits, or an exact widening to fp32.
static bool exact_copy(nki_dtype d, nki_dtype s) {
    if (d == s) return true;
    if (d != NKI_F32) return false;
    switch (s) {
    case NKI_BF16:
    case NKI_F16:
    case NKI_F8E4M3:
    case NKI_F8E4M3FN:
    case NKI_F8E5M2: return true;
    default: return false;
    }
}

// Instructions whose operand 0 is written in full and whose other operands
// are only read (the rendering stores each dst element once).
static bool plain_writer(const nki_instr *in) {
    switch (in->op) {
    case NKI_OP_COPY:
    case NKI_OP_TT:
    case NKI_OP_TS:
    case NKI_OP_STT:
    case NKI_OP_WHERE: return in->nmask == 0;
    case NKI_OP_ACT:  // its reduce result is a second write: no
        return in->nmask == 0 && !(in->np > 4 && in->p[4] >= 0);
    default: return false;
    }
}

static bool refs_root(const nki_prog *p, const nki_instr *in, int r) {
    for (int k = 0; k < in->nopd; k++)
        if (root_of(p, &in->opd[k]) == r) return true;
    return false;
}

static bool writes_root(const nki_prog *p, const nki_instr *in, int r) {
    for (int k = 0; k < in->nopd; k++)
        if (nki__instr_writes(in, k) && root_of(p, &in->opd[k]) == r) return true;
    return false;
}

// The group's instruction at position a as forwarding has left it so far
// (NULL: dropped); later tiles are analysed on this view.
static const nki_instr *cur(const nki_prog *p, int from, int a, nki_instr *const *subst,
                            const bool *drop) {
    if (drop[a]) return NULL;
    return subst[a] ? subst[a] : p->s[from + a].ins;
}

// The instruction at group position a, copied on first change.
static nki_instr *edit(const nki_prog *p, int from, int a, nki_instr **subst, bool *oom) {
    if (subst[a] == NULL) {
        subst[a] = malloc(sizeof **subst);
        if (subst[a] == NULL) {
            *oom = true;
            return NULL;
        }
        *subst[a] = *p->s[from + a].ins;
    }
    return subst[a];
}

// One tile root r of the group [from, end): forwards its copies where the
// rules above hold. refs: scratch of (end - from) entries.
static void forward_tile(const nki_prog *p, int from, int end, int r, nki_instr **subst, bool *drop,
                         int *refs, bool *oom) {
    const nki_tensor *t = &p->t[r];
    if (t->kind != NKI_SBUF) return;
    // every reference outside allocation points lies in the group
    for (int j = 0; j < p->ns; j++) {
        if (j >= from && j < end) continue;
        if (p->s[j].kind == NKI_INSTR && refs_root(p, p->s[j].ins, r)) return;
    }
    int n = 0;
    const nki_operand *acc = NULL;
    for (int j = from; j < end; j++) {
        if (p->s[j].kind != NKI_INSTR) continue;
        const nki_instr *in = cur(p, from, j - from, subst, drop);
        if (in == NULL || !refs_root(p, in, r)) continue;
        if (in->nmask > 0) return;
        for (int k = 0; k < in->nopd; k++) {
            if (root_of(p, &in->opd[k]) != r) continue;
            if (in->rt[k]) return;
            if (acc == NULL) acc = &in->opd[k];
            if (!same_access(p, acc, &in->opd[k])) return;
            // a write of r only as a plain writer's destination
            if (nki__instr_writes(in, k) && (k != 0 || !plain_writer(in))) return;
        }
        refs[n++] = j - from;
    }
    if (n < 2) return;
        // the first reference writes r in full and reads nothing of it
#define REF(i) cur(p, from, refs[i], subst, drop)
    const nki_instr *first = REF(0);
    if (root_of(p, &first->opd[0]) != r) return;
    for (int k = 1; k < first->nopd; k++)
        if (root_of(p, &first->opd[k]) == r) return;
    // later writers of r (group positions), in order
    int w_last = 0;  // the first reference writes r
    for (int i = 1; i < n; i++)
        if (writes_root(p, REF(i), r)) w_last = i;
    // store forwarding: the last reference copies r out, the one before it
    // is r's last writer
    const nki_instr *last = REF(n - 1);
    bool store = false;
    if (n >= 2 && w_last == n - 2 && last->op == NKI_OP_COPY && last->nopd == 2 &&
        root_of(p, &last->opd[1]) == r && root_of(p, &last->opd[0]) != r &&
        same_shape(&last->opd[0], &last->opd[1]) &&
        (p->t[last->opd[0].tid].dtype == t->dtype || t->dtype == NKI_F32)) {
        const int o = root_of(p, &last->opd[0]);
        store = !refs_root(p, REF(n - 2), o);
        for (int a = refs[n - 2] + 1; store && a < refs[n - 1]; a++) {
            const nki_instr *in =
                p->s[from + a].kind == NKI_INSTR ? cur(p, from, a, subst, drop) : NULL;
            if (in != NULL && refs_root(p, in, o)) store = false;
        }
    }
    // load forwarding: the first reference copies a source into r that the
    // group never writes
    bool load = false;
    nki_operand src;
    if (first->op == NKI_OP_COPY && first->nopd == 2 &&
        same_shape(&first->opd[0], &first->opd[1]) &&
        exact_copy(t->dtype, p->t[first->opd[1].tid].dtype) && !first->rt[1]) {
        src = first->opd[1];
        const int s = root_of(p, &src);
        load = s != r;
        for (int j = from; load && j < end; j++) {
            const nki_instr *in =
                p->s[j].kind == NKI_INSTR ? cur(p, from, j - from, subst, drop) : NULL;
            if (in != NULL && writes_root(p, in, s)) load = false;
        }
    }
    if (load) {
        // reads up to and including the next writer's read of r
        drop[refs[0]] = true;
        for (int i = 1; i < n; i++) {
            const int a = refs[i];
            nki_instr *in = edit(p, from, a, subst, oom);
            if (in == NULL) return;
            const bool writer = writes_root(p, in, r);
            for (int k = 0; k < in->nopd; k++)
                if (!(writer && k == 0) && root_of(p, &in->opd[k]) == r) in->opd[k] = src;
            if (writer) break;
        }
    }
    if (store && !(load && w_last == 0)) {  // (else the copy-out now reads the source)
        // copy the copy-out's destination before edit() may move `last`
        const nki_operand dst = last->opd[0];
        nki_instr *w = edit(p, from, refs[n - 2], subst, oom);
        if (w == NULL) return;
        w->opd[0] = dst;
        drop[refs[n - 1]] = true;
    }
#undef REF
}

int nki__forward_group(const nki_prog *p, int from, int end, nki_instr **subst, bool *drop) {
    const int n = end - from;
    for (int a = 0; a < n; a++) {
        subst[a] = NULL;
        drop[a] = false;
    }
    int *refs = malloc((size_t)(n > 0 ? n : 1) * sizeof *refs);
    bool *seen = calloc((size_t)p->nt + 1, sizeof *seen);
    if (refs == NULL || seen == NULL) {
        free(refs);
        free(seen);
        return -1;
    }
    bool oom = false;
    for (int j = from; j < end && !oom; j++) {
        if (p->s[j].kind != NKI_INSTR) continue;
        const nki_instr *in = p->s[j].ins;
        for (int k = 0; k < in->nopd && !oom; k++) {
            const int r = root_of(p, &in->opd[k]);
            if (seen[r]) continue;
            seen[r] = true;
            forward_tile(p, from, end, r, subst, drop, refs, &oom);
        }
    }
    free(refs);
    free(seen);
    if (oom) {
        for (int a = 0; a < n; a++) {
            free(subst[a]);
            subst[a] = NULL;
            drop[a] = false;
        }
        return -1;
    }
    return 0;
}
