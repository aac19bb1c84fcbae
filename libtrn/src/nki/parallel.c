// parallel.c - which traced loops may run their iterations on the device's
// threads. render.c turns such a loop into a body function; program.c's run
// time (nki_rt.pfor) spreads its iterations over libtrn's pool
// (trn/parallel.h), each thread on its own copy of the instance scratch.
//
// A loop qualifies when no iteration can see another's effects, whatever
// its kind (affine, sequential, static: only the program decides):
//  - every on-chip or private-HBM tensor the body writes is allocated in the
//    body: its first reference there is its allocation point (P, which
//    poisons it), and every reference to it lies in the scope (loop or if)
//    that holds that P, so each iteration starts from fresh memory;
//  - the other scratch tensors the body uses are only read there; they are
//    the live-in ranges each thread copies from the instance's scratch;
//  - every HBM tensor the body writes is accessed, by every operand in the
//    body, at the same multiple c of the loop index, and all that one
//    iteration touches spans fewer than |c| elements, so iterations touch
//    disjoint elements. Two HBM arguments may be one tensor in memory:
//    program.c checks that at run time and then runs every loop serially.
#include <stdlib.h>
#include <string.h>

#include "nki_impl.h"

static int64_t coef_of(const nki_affine *a, int var) {
    for (int i = 0; i < a->n; i++)
        if (a->var[i] == var) return a->coef[i];
    return 0;
}

bool nki__instr_writes(const nki_instr *in, int k) {
    if (k == 0) return true;
    // activation's reduce result, its last operand; match_replace8's indices
    if (in->op == NKI_OP_TOP8) return k == 3;
    return in->op == NKI_OP_ACT && in->np > 4 && in->p[4] >= 0 && k == in->nopd - 1;
}

typedef struct par_scan {
    int *first;     // per root: first referencing statement in the body, -1
    bool *by_p;     // that reference is its allocation point
    int *scope;     // statement opening the innermost scope around it (the loop: i)
    bool *written;  // written in the body
    bool *escapes;  // referenced outside that scope
} par_scan;

static void note(const nki_prog *p, par_scan *sc, int r, int j, bool is_p, int top) {
    (void)p;
    if (sc->first[r] < 0) {
        sc->first[r] = j;
        sc->by_p[r] = is_p;
        sc->scope[r] = top;
    }
}

// Whether the roots' references in [from, to) stay inside their scope.
static void check_scope(const nki_prog *p, par_scan *sc, int r, int j, int loop) {
    int sc0 = sc->scope[r];
    if (sc0 == loop) return;  // the whole body
    if (j <= sc0 || j >= p->s[sc0].end) sc->escapes[r] = true;
}

static bool disjoint(const nki_prog *p, int loop, int r) {
    const nki_stmt *L = &p->s[loop];
    const int e = L->end, v = L->var;
    int64_t(*rng)[2] = calloc(NKI_PID_VAR + 4, sizeof *rng);
    bool *inner = calloc(NKI_PID_VAR + 4, sizeof *inner);
    bool ok = rng != NULL && inner != NULL;
    for (int j = loop + 1; ok && j < e; j++) {
        const nki_stmt *s = &p->s[j];
        if (s->kind != NKI_LOOP) continue;
        if (s->step <= 0 || s->hi <= s->lo) {
            ok = false;
            break;
        }
        inner[s->var] = true;
        rng[s->var][0] = s->lo;
        rng[s->var][1] = s->lo + (s->hi - s->lo - 1) / s->step * s->step;
    }
    // an indirect access to r (rows chosen at run time) has no static extent
    for (int j = loop + 1; ok && j < e; j++) {
        const nki_stmt *s = &p->s[j];
        if (s->kind == NKI_INSTR && s->ins->op == NKI_OP_GATHER &&
            p->t[s->ins->opd[(int)s->ins->p[0]].tid].root == r)
            ok = false;
    }
    const nki_operand *ref = NULL;
    int64_t cv = 0, lo = INT64_MAX, hi = INT64_MIN;
    const int rsize = nki__dtype_size(p->t[r].dtype);
    for (int j = loop + 1; ok && j < e; j++) {
        const nki_stmt *s = &p->s[j];
        if (s->kind != NKI_INSTR) continue;
        for (int k = 0; ok && k < s->ins->nopd; k++) {
            const nki_operand *o = &s->ins->opd[k];
            if (p->t[o->tid].root != r) continue;
            if (nki__dtype_size(p->t[o->tid].dtype) != rsize) {
                ok = false;
                break;
            }
            int64_t c = coef_of(&o->flat, v);
            if (ref == NULL) {
                ref = o;
                cv = c;
            } else if (c != cv) {
                ok = false;
                break;
            }
            // variables outside the body shift every access alike or not at all
            for (int pass = 0; pass < 2 && ok; pass++) {
                const nki_affine *a = pass ? &ref->flat : &o->flat;
                const nki_affine *other = pass ? &o->flat : &ref->flat;
                for (int t = 0; t < a->n; t++) {
                    int u = a->var[t];
                    if (u == v || (u < NKI_PID_VAR + 4 && inner[u])) continue;
                    if (a->coef[t] != coef_of(other, u)) ok = false;
                }
            }
            int64_t a0 = o->flat.c, a1 = o->flat.c;
            for (int t = 0; t < o->flat.n; t++) {
                int u = o->flat.var[t];
                if (u == v || !(u < NKI_PID_VAR + 4 && inner[u])) continue;
                int64_t x = o->flat.coef[t] * rng[u][0], y = o->flat.coef[t] * rng[u][1];
                a0 += x < y ? x : y;
                a1 += x < y ? y : x;
            }
            for (int d = 0; d < o->nd; d++) {
                int64_t x = o->stride[d] * (o->count[d] - 1);
                if (x < 0)
                    a0 += x;
                else
                    a1 += x;
            }
            if (a0 < lo) lo = a0;
            if (a1 > hi) hi = a1;
        }
    }
    free(rng);
    free(inner);
    if (!ok || cv == 0) return false;
    return hi - lo < (cv < 0 ? -cv : cv);
}

bool nki__par_loop(const nki_prog *p, int loop, int64_t *live, int *nlive) {
    const nki_stmt *L = &p->s[loop];
    *nlive = 0;
    if (L->kind != NKI_LOOP || L->step <= 0 || L->hi - L->lo <= L->step) return false;
    const int e = L->end;
    par_scan sc = {malloc(sizeof(int) * (size_t)p->nt), calloc((size_t)p->nt, sizeof(bool)),
                   malloc(sizeof(int) * (size_t)p->nt), calloc((size_t)p->nt, sizeof(bool)),
                   calloc((size_t)p->nt, sizeof(bool))};
    int *stack = malloc(sizeof(int) * (size_t)(e - loop + 1));
    bool ok = sc.first && sc.by_p && sc.scope && sc.written && sc.escapes && stack;
    if (ok) {
        for (int r = 0; r < p->nt; r++) sc.first[r] = -1;
        // first pass: first references, their scopes, writes
        int depth = 0;
        stack[depth++] = loop;
        for (int j = loop + 1; j < e; j++) {
            const nki_stmt *s = &p->s[j];
            if (s->kind == NKI_LOOP || s->kind == NKI_IF)
                stack[depth++] = j;
            else if (s->kind == NKI_END)
                depth--;
            else if (s->kind == NKI_POISON)
                note(p, &sc, p->t[s->tensor].root, j, true, stack[depth - 1]);
            else if (s->kind == NKI_INSTR)
                for (int k = 0; k < s->ins->nopd; k++) {
                    int r = p->t[s->ins->opd[k].tid].root;
                    note(p, &sc, r, j, false, stack[depth - 1]);
                    if (nki__instr_writes(s->ins, k)) sc.written[r] = true;
                }
        }
        // second pass: every reference, in the whole program, of a tensor
        // the body allocates stays in the scope of its allocation
        for (int j = 0; j < p->ns; j++) {
            const nki_stmt *s = &p->s[j];
            if (s->kind == NKI_POISON) {
                int r = p->t[s->tensor].root;
                if (sc.first[r] >= 0) check_scope(p, &sc, r, j, loop);
                if (sc.first[r] >= 0 && (j < loop || j > e)) sc.escapes[r] = true;
            } else if (s->kind == NKI_INSTR) {
                for (int k = 0; k < s->ins->nopd; k++) {
                    int r = p->t[s->ins->opd[k].tid].root;
                    if (sc.first[r] < 0) continue;
                    if (j < loop || j > e)
                        sc.escapes[r] = true;
                    else
                        check_scope(p, &sc, r, j, loop);
                }
            }
        }
        for (int r = 0; ok && r < p->nt; r++) {
            if (sc.first[r] < 0) continue;
            const nki_tensor *t = &p->t[r];
            if (t->kind == NKI_ARG || t->kind == NKI_OUT) {
                if (sc.written[r] && !disjoint(p, loop, r)) ok = false;
                continue;
            }
            if (sc.by_p[r] && !sc.escapes[r]) continue;  // private to each iteration
            if (sc.written[r]) {
                ok = false;
                break;
            }
            int64_t n = 1;
            for (int d = 0; d < t->ndim; d++) n *= t->sizes[d];
            live[2 * *nlive] = t->scratch;
            live[2 * *nlive + 1] = n * nki__dtype_size(t->dtype);
            (*nlive)++;
            if (t->kind == NKI_PSUM) {
                live[2 * *nlive] = t->flags;
                live[2 * *nlive + 1] = n;
                (*nlive)++;
            }
        }
    }
    free(sc.first);
    free(sc.by_p);
    free(sc.scope);
    free(sc.written);
    free(sc.escapes);
    free(stack);
    return ok;
}
