// render.c - one C translation unit per NKI program: a function that runs
// one kernel instance (program ids in pid[]), loops kept as C loops (a
// traced affine_range is one `for`, never unrolled; a loop whose iterations
// are independent, parallel.c, becomes a body function the run time spreads
// over the pool), each instruction one loop nest (render_instr.c).
// Exports nki_instance, nki_scratch_bytes and nki_abi.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../internal.h"
#include "nki_impl.h"

extern const char *const nki__prelude[];

#define ABI 2
#define P(...) nki__printf(b, __VA_ARGS__)
typedef nki_rctx rctx;

static uint32_t poison_pattern(nki_dtype d) {
    switch (d) {
    case NKI_F32:
    case NKI_TF32: return 0x7fc00000u;
    case NKI_BF16: return 0x7fc0u;
    case NKI_F16: return 0x7e00u;
    case NKI_F8E4M3:
    case NKI_F8E4M3FN:
    case NKI_F8E5M2: return 0x7fu;
    default: return 4u;
    }
}

static void put_decls(nki_buf *b, const nki_prog *p) {
    for (int i = 0; i < p->nt; i++) {
        const nki_tensor *t = &p->t[i];
        if (t->kind == NKI_ARG || t->kind == NKI_OUT)
            P("char*T%d=(char*)args[%d];(void)T%d;\n", i, t->arg, i);
        else if (t->kind != NKI_VIEW) {
            P("char*T%d=scratch+%lldLL;(void)T%d;\n", i, (long long)t->scratch, i);
            if (t->kind == NKI_PSUM)
                P("unsigned char*F%d=(unsigned char*)scratch+%lldLL;(void)F%d;\n", i,
                  (long long)t->flags, i);
        }
    }
}

#define MAX_OUTER 8  // nki_cx.v

// Whether the statement after allocation point `at` (other allocation
// points aside) writes every element of tensor `r` without reading it: then
// nothing can observe the poison, and filling it is a wasted pass.
static bool overwritten_next(const nki_prog *p, int at, int r) {
    int j = at + 1;
    while (j < p->ns && p->s[j].kind == NKI_POISON) j++;
    if (j >= p->ns || p->s[j].kind != NKI_INSTR) return false;
    const nki_instr *in = p->s[j].ins;
    const nki_operand *d = &in->opd[0];
    if (in->nmask > 0 || in->rt[0] || in->op == NKI_OP_PREDCOPY || in->op == NKI_OP_GATHER ||
        (in->op == NKI_OP_MATMUL && (int)in->p[0] == 1) || p->t[d->tid].root != r ||
        nki__dtype_size(p->t[d->tid].dtype) != nki__dtype_size(p->t[r].dtype))
        return false;
    for (int k = 1; k < in->nopd; k++)
        if (p->t[in->opd[k].tid].root == r) return false;
    if (d->flat.c != 0) return false;
    for (int t = 0; t < d->flat.n; t++)
        if (d->flat.coef[t] != 0) return false;
    // dense row-major over the whole tensor: a bijection onto its elements
    int64_t expect = 1, n = 1;
    for (int k = d->nd - 1; k >= 0; k--) {
        if (d->count[k] == 1) continue;
        if (d->stride[k] != expect) return false;
        expect *= d->count[k];
    }
    for (int k = 0; k < p->t[r].ndim; k++) n *= p->t[r].sizes[k];
    return expect == n;
}

// The poison fill of allocation point i (skipped where nothing can see it).
static void put_poison(rctx *c, int i) {
    const nki_prog *p = c->p;
    nki_buf *b = c->b;
    const nki_tensor *t = &p->t[p->s[i].tensor];
    int64_t n = 1;
    for (int d = 0; d < t->ndim; d++) n *= t->sizes[d];
    if (t->kind == NKI_VIEW || t->kind == NKI_ARG || t->kind == NKI_OUT) return;
    if (!overwritten_next(p, i, t->id))
        P("poison(T%d,%lldLL,%d,0x%xu);\n", t->id, (long long)n, nki__dtype_size(t->dtype),
          poison_pattern(t->dtype));
    if (t->kind == NKI_PSUM) P("memset(F%d,0,%lld);\n", t->id, (long long)n);
}

// A fused group (fuse.c), statements [from, end): its poison points first,
// then one loop over the partitions with each instruction's row in program
// order; where the group's safety rests on distinct HBM arguments, the
// unfused instructions run instead when the run time found an overlap.
static void put_group(rctx *c, int from, int end, int64_t parts, bool guard) {
    const nki_prog *p = c->p;
    nki_buf *b = c->b;
    int n = 0;
    for (int j = from; j < end; j++) {
        c->sid = j;
        if (p->s[j].kind == NKI_POISON)
            put_poison(c, j);
        else
            n++;
    }
    if (guard) P("if(!rt->serial){\n");
    P("/* fused: %d instructions over %lld partitions */\nfor(i64 i0=0;i0<%lldLL;i0++){\n", n,
      (long long)parts, (long long)parts);
    c->fused = true;
    // copies no one else can see are forwarded (forward.c); on out of
    // memory the group renders as is
    nki_instr **subst = calloc((size_t)(end - from), sizeof *subst);
    bool *drop = calloc((size_t)(end - from), sizeof *drop);
    const bool fwd = subst && drop && nki__forward_group(p, from, end, subst, drop) == 0;
    for (int j = from; j < end; j++) {
        c->sid = j;
        if (p->s[j].kind != NKI_INSTR) continue;
        if (fwd && drop[j - from]) {
            P("/* %s at %s: forwarded */\n", p->s[j].ins->name, p->s[j].ins->loc);
            continue;
        }
        nki__render_instr(c, fwd && subst[j - from] ? subst[j - from] : p->s[j].ins);
    }
    if (subst)
        for (int a = 0; a < end - from; a++) free(subst[a]);
    free(subst);
    free(drop);
    c->fused = false;
    P("}\n");
    if (guard) {
        P("}else{\n");
        for (int j = from; j < end; j++) {
            c->sid = j;
            if (p->s[j].kind == NKI_INSTR) nki__render_instr(c, p->s[j].ins);
        }
        P("}\n");
    }
}

// Statements [from, to) into c->b. Outside parallel bodies (fb != NULL), a
// loop whose iterations are independent (parallel.c) becomes a body
// function in fb, called through rt->pfor.
static void render_stmts(rctx *c, nki_buf *fb, int from, int to, int *vars, int nvars,
                         int64_t *live) {
    const nki_prog *p = c->p;
    nki_buf *b = c->b;
    int *open = malloc(sizeof(int) * (size_t)(to - from + 1));  // loop var or -1 (if)
    if (open == NULL) {
        b->oom = true;
        return;
    }
    int nopen = 0;
    for (int i = from; i < to; i++) {
        const nki_stmt *s = &p->s[i];
        c->sid = i;
        int nlive = 0;
        if (s->kind == NKI_LOOP && fb != NULL && nvars < MAX_OUTER &&
            nki__par_loop(p, i, live, &nlive)) {
            // the body as a function of the iteration number
            nki_buf *main_b = b;
            c->b = b = fb;
            P("static int nki_body%d(void*cx_,i64 it,char*scratch){nki_cx*cx=(nki_cx*)cx_;"
              "void*const*args=cx->args;const i64*pid=cx->pid;const nki_rt*rt=cx->rt;"
              "(void)args;(void)pid;(void)rt;\n",
              i);
            for (int k = 0; k < nvars; k++) P("const i64 v%d=cx->v[%d];\n", vars[k], k);
            put_decls(fb, p);
            P("const i64 v%d=%lldLL+it*%lldLL;\n", s->var, (long long)s->lo, (long long)s->step);
            render_stmts(c, NULL, i + 1, s->end, vars, nvars, live);
            P("return 0;\n}\n");
            c->b = b = main_b;
            c->sid = i;
            int64_t n = (s->hi - s->lo + s->step - 1) / s->step;
            P("{nki_cx cx={args,pid,rt,{");
            for (int k = 0; k < nvars; k++) P("%sv%d", k ? "," : "", vars[k]);
            P("%s}};\n", nvars ? "" : "0");
            if (nlive) {
                P("static const i64 live%d[]={", i);
                for (int k = 0; k < 2 * nlive; k++) P("%s%lldLL", k ? "," : "", (long long)live[k]);
                P("};\n");
            }
            P("int rc=rt->pfor(rt,%lldLL,nki_body%d,&cx,", (long long)n, i);
            if (nlive)
                P("live%d", i);
            else
                P("NULL");
            P(",%d,scratch);if(rc)return rc;}\n", nlive);
            i = s->end;  // its E
            continue;
        }
        if (s->kind == NKI_LOOP) {
            P("for(i64 v%d=%lldLL;v%d<%lldLL;v%d+=%lldLL){\n", s->var, (long long)s->lo, s->var,
              (long long)s->hi, s->var, (long long)s->step);
            open[nopen++] = s->var;
            if (vars) vars[nvars++] = s->var;
        } else if (s->kind == NKI_IF) {
            P("if(1");
            for (int k = 0; k < s->ncond; k++) {
                P("&&");
                nki__put_cond(b, &s->cond[k]);
            }
            P("){\n");
            open[nopen++] = -1;
        } else if (s->kind == NKI_END) {
            P("}\n");
            if (nopen > 0 && open[--nopen] >= 0) nvars--;
        } else if (s->kind == NKI_POISON) {
            put_poison(c, i);
        } else {
            int64_t parts = 0;
            bool guard = false;
            const int end = c->fuse ? nki__fuse_group(p, i, to, &parts, &guard) : i;
            if (end > i + 1) {
                put_group(c, i, end, parts, guard);
                i = end - 1;
                continue;
            }
            nki__render_instr(c, s->ins);
        }
    }
    free(open);
}

trn_status nki__render(const nki_prog *p, char **source) {
    nki_buf buf = {0}, fns = {0};
    nki_buf *b = &buf;
    int *vars = malloc(sizeof(int) * ((size_t)p->ns + MAX_OUTER + 1));
    int64_t *live = malloc(sizeof(int64_t) * (4 * (size_t)p->nt + 4));
    if (vars == NULL || live == NULL) b->oom = true;
    rctx c = {p, b, 0, false, nki__fuse_enabled(), NULL, 0};
    if (!b->oom) {
        P("/* kernel %s */\nint nki_instance(void*const*args,const "
          "i64*pid,char*scratch,const nki_rt*rt){\n(void)pid;(void)rt;\n",
          p->name);
        put_decls(b, p);
        render_stmts(&c, &fns, 0, p->ns, vars, 0, live);
        P("return 0;\n}\n");
    }
    free(vars);
    free(live);
    // prelude, body functions, then the instance
    nki_buf all = {0};
    for (int i = 0; nki__prelude[i]; i++) nki__printf(&all, "%s", nki__prelude[i]);
    nki__printf(&all, "const int nki_abi=%d;\nconst long long nki_scratch_bytes=%lldLL;\n", ABI,
                (long long)p->scratch_bytes);
    if (fns.s) nki__printf(&all, "%s", fns.s);
    if (buf.s) nki__printf(&all, "%s", buf.s);
    bool oom = all.oom || buf.oom || fns.oom;
    free(buf.s);
    free(fns.s);
    if (oom) {
        free(all.s);
        return trn__set_error(TRN_ERROR_OUT_OF_MEMORY, "nki: out of memory rendering kernel %s",
                              p->name);
    }
    *source = all.s;
    return TRN_SUCCESS;
}
