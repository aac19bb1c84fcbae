// render_body.c - owns what one element of a kernel's loop body computes:
// value names, each fused node's statement (the trn/scalar.h call, pow by a
// literal), the op parameters, the buffer pointers and the leaves' loads.
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "render_impl.h"

// Number of node n's value in the body (v<id>, c<id>, ok<id>...).
int vid(const kernel *k, int n) {
    kernel *m = (kernel *)k;  // naming is memoized while rendering
    if (m->local[n] < 0) {
        m->local[n] = m->n_named;
        m->named[m->n_named++] = n;
    }
    return m->local[n];
}

// A leaf computed here (a gather or an iota, fused or the root), not one
// read back from memory: its access positions the computation.
bool is_gather(const kernel *k, int n) {
    trn__cc_kind kind = k->g->nodes[n].kind;
    return (kind == CC_GATHER || kind == CC_IOTA) && (k->s->home[n] == HOME_FUSED || n == k->root);
}

// Name of the value of node n inside the loop body.
void put_value(sb *b, const kernel *k, int n) {
    const trn__cc_node *x = &k->g->nodes[n];
    if (x->kind == CC_CONST)
        put_const(b, x);
    else if (x->kind == CC_VIEW && k->mark[n] == 2)
        put_const(b, &k->g->nodes[x->in[0]]);
    else
        put(b, "v%d", vid(k, n));
}

static trn_dtype value_dtype(const kernel *k, int n) {
    const trn__cc_node *x = &k->g->nodes[n];
    if (x->kind == CC_VIEW && k->mark[n] == 2) return k->g->nodes[x->in[0]].dtype;
    return x->dtype;
}

// An input value converted to the register type of dtype `to`.
void put_arg(sb *b, const kernel *k, int n, trn_dtype to) {
    trn_dtype from = value_dtype(k, n);
    sb tmp = {0};
    put_value(&tmp, k, n);
    if (tmp.oom) {
        b->oom = true;
        return;
    }
    if (is_f(from) == is_f(to))
        put(b, "%s", tmp.s);
    else
        put(b, is_f(to) ? "(float)%s" : "(int64_t)%s", tmp.s);
    free(tmp.s);
}

// Statement computing fused node n (a pointwise op or a cast).
int leaf_pos(const kernel *k, int n) {
    for (int i = 0; i < k->n_leaves; i++)
        if (k->leaves[i] == n) return i;
    return -1;
}

// A gather's element: each index checked (a bad one is reported and reads
// A literal value in the body (a constant, or a view of one).
static bool is_literal(const kernel *k, int n) {
    const trn__cc_node *x = &k->g->nodes[n];
    return x->kind == CC_CONST || (x->kind == CC_VIEW && k->mark[n] == 2);
}

// pow by a literal exponent as eager's pow_fast_path (kernels/pointwise/elementwise.c)
// computes it, with ATen's CPU special cases (trn/scalar.h): the
// same numerics, and a loop without the exp(b log|a|) path (GPT-2's GELU
// backward spent 29 % of its graph there). NULL: the general pow.
static const char *pow_by_literal(const kernel *k, const trn__cc_node *x) {
    if (x->kind != CC_POINTWISE || x->op != TRN_EW_POW || !is_f(x->compute) || x->n_in != 2 ||
        is_literal(k, x->in[0]) || !is_literal(k, x->in[1]))
        return NULL;
    int c = x->in[1];
    if (k->g->nodes[c].kind == CC_VIEW) c = k->g->nodes[c].in[0];
    const trn__cc_node *e_node = &k->g->nodes[c];
    if (!is_f(e_node->dtype) && e_node->dtype != TRN_DTYPE_I64 && e_node->dtype != TRN_DTYPE_I32)
        return NULL;
    const double e = is_f(e_node->dtype) ? (double)(float)e_node->cf : (double)(float)e_node->ci;
    const trn_sc_pow_special s = trn_sc_pow_special_of(e, x->compute == TRN_DTYPE_F16);
    return s == TRN_SC_POW_GENERAL ? NULL : trn_sc_pow_special_name(s);
}

void put_compute(sb *b, const kernel *k, int n, const char *indent) {
    const trn__cc_node *x = &k->g->nodes[n];
    if (x->kind == CC_GATHER) {
        put_gather(b, k, n, indent);
        return;
    }
    if (x->kind == CC_IOTA) {
        put_iota(b, k, n, indent);
        return;
    }
    put(b, "%sconst %s v%d = ", indent, reg_type(x->dtype), vid(k, n));
    if (x->kind == CC_SCATTER) {  // the first pass: self's value
        put_arg(b, k, x->in[0], x->dtype);
        put(b, ";\n");
        return;
    }
    if (x->kind == CC_CAST) {
        sb tmp = {0};
        put_value(&tmp, k, x->in[0]);
        if (!tmp.oom) put_convert(b, tmp.s, value_dtype(k, x->in[0]), x->dtype);
        free(tmp.s);
        put(b, ";\n");
        return;
    }
    char name[48];
    lower_name(trn_ew_op_name(x->op), name, sizeof name);
    bool fam_f = is_f(x->compute);
    bool pred = trn_ew_op_is_predicate(x->op);
    const char *pow_fn = pow_by_literal(k, x);
    sb call = {0};
    if (pow_fn != NULL) {  // the exponent is in the function: one argument
        put(&call, "trn_sc_%s_f(", pow_fn);
        put_arg(&call, k, x->in[0], x->compute);
        put(&call, ", &c%d)", vid(k, n));
    } else {
        put(&call, "trn_sc_%s_%s(", name, pred ? (fam_f ? "fp" : "ip") : (fam_f ? "f" : "i"));
        for (int i = 0; i < x->n_in; i++) {
            if (i) put(&call, ", ");
            put_arg(&call, k, x->in[i], x->compute);
        }
        if (!pred) put(&call, ", &c%d", vid(k, n));
        put(&call, ")");
    }
    if (call.oom) {
        b->oom = true;
        free(call.s);
        return;
    }
    if (pred)
        put(b, "(int64_t)%s;\n", call.s);
    else if (x->dtype == TRN_DTYPE_F16 || x->dtype == TRN_DTYPE_BF16 || x->compute != x->dtype) {
        put_convert(b, call.s, x->compute, x->dtype);
        put(b, ";\n");
    } else
        put(b, "%s;\n", call.s);
    free(call.s);
}

// The op's parameters, a static in the body (part of the text that decides
// whether two kernels share a body).
void put_ctx(sb *b, const kernel *k, int n) {
    const trn__cc_node *x = &k->g->nodes[n];
    if (x->kind != CC_POINTWISE || trn_ew_op_is_predicate(x->op)) return;
    trn_dtype d = x->compute;
    put(b, "    static const trn_sc_ctx c%d = {{", vid(k, n));
    for (int i = 0; i < 4; i++) {
        if (i) put(b, ", ");
        double p = x->params[i];
        if (p != p)
            put(b, "NAN");
        else if (p == INFINITY || p == -INFINITY)
            put(b, "%sINFINITY", p < 0 ? "-" : "");
        else
            put(b, "%.17g", p);
    }
    put(b, "}, {");
    for (int i = 0; i < 4; i++) {
        double p = x->params[i];
        long long ip = (p != p || p > 9.2e18 || p < -9.2e18) ? 0 : (long long)p;
        put(b, "%s", i ? ", " : "");
        put_i64(b, ip);
    }
    put(b, "}, %d, %d, %d};\n", (int)trn_dtype_size(d) * 8,
        d != TRN_DTYPE_U8 && d != TRN_DTYPE_BOOL && d != TRN_DTYPE_U16 && d != TRN_DTYPE_U32 &&
            d != TRN_DTYPE_U64,
        d == TRN_DTYPE_F16 ? 1 : (d == TRN_DTYPE_BF16 ? 2 : 0));
}

void put_ptrs(sb *b, const kernel *k, const char *in) {
    put(b, "%strn_kernel_ctx *const c = (trn_kernel_ctx *)ctx;\n", in);
    put(b, "%svoid *const *bufs = c->bufs;\n", in);
    // One pointer per distinct buffer read, then the output (the last slot).
    for (int i = 0; i + 1 < k->n_slots; i++) {
        trn_dtype d = k->g->nodes[k->slots[i]].dtype;
        put(b, "%sconst %s *const b%d = (const %s *)bufs[%d];\n", in, mem_type(d), i, mem_type(d),
            i);
    }
    trn_dtype od = k->g->nodes[k->root].dtype;
    // A store writes the input it may also read (element by element): no restrict.
    const char *restrict_kw = k->g->nodes[k->root].store_to >= 0 ? "" : "restrict ";
    put(b, "%s%s *const %sout = (%s *)bufs[%d];\n", in, mem_type(od), restrict_kw, mem_type(od),
        k->n_slots - 1);
}

void put_body_values(sb *b, kernel *k, const char *in, const char *const *idx) {
    k->istr = (char **)idx;
    for (int i = 0; i < k->n_leaves; i++) {
        int n = k->leaves[i];
        if (is_gather(k, n)) continue;  // loads in its own statement
        put(b, "%sconst %s v%d = ", in, reg_type(k->g->nodes[n].dtype), vid(k, n));
        char buf[32];
        snprintf(buf, sizeof buf, "b%d", k->slot[k->acc[i].buffer]);
        put_load(b, k->g->nodes[k->acc[i].buffer].dtype, buf, idx[i]);
        put(b, ";\n");
    }
    for (int i = 0; i < k->n_fused; i++) put_compute(b, k, k->fused[i], in);
}

// Unravels `var` over loop dims [0, nd) into i0.., and writes per-access
// offsets o<a> (base offsets of every access for those dims).
