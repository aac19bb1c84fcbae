// render.c - one C translation unit per graph, one function per kernel.
//
// Owns: the text of generated code. A kernel is a loop nest over its root
// node's shape (for a reduction: its input's shape, reduced dims innermost);
// the body computes every fused node once per element, in node order, with
// the per-element functions of trn/scalar.h, so fused and eager results are
// computed by the same math. Shapes and strides are literals (graphs are
// static), dims that every access walks contiguously are merged, and the
// outer loop is split across the device's cores through the ABI table.
// The output is meant to be read: a comment before each kernel names the FX
// nodes it covers, and values are named v<node>.
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../internal.h"
#include "../compiler_impl.h"
#include "trn/scalar.h"

// ---- string builder -------------------------------------------------------------
typedef struct sb {
    char *s;
    size_t len, cap;
    bool oom;
} sb;

TRN__PRINTF(2, 3) static void put(sb *b, const char *fmt, ...) {
    if (b->oom) return;
    va_list ap;
    for (;;) {
        va_start(ap, fmt);
        int n = vsnprintf(b->s ? b->s + b->len : NULL, b->s ? b->cap - b->len : 0, fmt, ap);
        va_end(ap);
        if (n < 0) {
            b->oom = true;
            return;
        }
        if (b->s && b->len + (size_t)n < b->cap) {
            b->len += (size_t)n;
            return;
        }
        size_t cap = (b->cap + (size_t)n + 1) * 2;
        char *s = realloc(b->s, cap);
        if (s == NULL) {
            b->oom = true;
            return;
        }
        b->s = s;
        b->cap = cap;
    }
}

// ---- types ----------------------------------------------------------------------
static bool is_f(trn_dtype d) { return trn__cc_is_float(d); }
static const char *reg_type(trn_dtype d) { return is_f(d) ? "float" : "int64_t"; }

static const char *mem_type(trn_dtype d) {
    switch (d) {
    case TRN_DTYPE_F32: return "float";
    case TRN_DTYPE_F64: return "double";
    case TRN_DTYPE_F16:
    case TRN_DTYPE_BF16:
    case TRN_DTYPE_U16: return "uint16_t";
    case TRN_DTYPE_BOOL:
    case TRN_DTYPE_U8: return "uint8_t";
    case TRN_DTYPE_I8: return "int8_t";
    case TRN_DTYPE_I16: return "int16_t";
    case TRN_DTYPE_I32: return "int32_t";
    case TRN_DTYPE_I64: return "int64_t";
    case TRN_DTYPE_U32: return "uint32_t";
    case TRN_DTYPE_U64: return "uint64_t";
    default: return "uint8_t";
    }
}

// Converts the value of expression `e` held in the register type of `from`
// to the value it has as dtype `to` (in `to`'s register type).
static void put_convert(sb *b, const char *e, trn_dtype from, trn_dtype to) {
    if (is_f(to)) {
        const char *src = is_f(from) ? "" : "(float)";
        if (to == TRN_DTYPE_F16) put(b, "trn_g_round_half(%s(%s))", src, e);
        else if (to == TRN_DTYPE_BF16) put(b, "trn_g_round_bf16(%s(%s))", src, e);
        else put(b, "%s(%s)", src, e);
        return;
    }
    if (to == TRN_DTYPE_BOOL) {
        put(b, "(int64_t)((%s) != 0)", e);
        return;
    }
    if (is_f(from)) put(b, "(int64_t)(%s)(int64_t)(%s)", mem_type(to), e);
    else put(b, "(int64_t)(%s)(%s)", mem_type(to), e);
}

static void put_load(sb *b, trn_dtype d, const char *ptr, const char *idx) {
    switch (d) {
    case TRN_DTYPE_F16: put(b, "trn_half_to_float(%s[%s])", ptr, idx); break;
    case TRN_DTYPE_BF16: put(b, "trn_bf16_to_float(%s[%s])", ptr, idx); break;
    case TRN_DTYPE_F64: put(b, "(float)%s[%s]", ptr, idx); break;
    case TRN_DTYPE_F32: put(b, "%s[%s]", ptr, idx); break;
    default: put(b, "(int64_t)%s[%s]", ptr, idx); break;
    }
}

static void put_store_value(sb *b, trn_dtype d, const char *v) {
    switch (d) {
    case TRN_DTYPE_F16: put(b, "trn_float_to_half(%s)", v); break;
    case TRN_DTYPE_BF16: put(b, "trn_float_to_bf16(%s)", v); break;
    case TRN_DTYPE_F64: put(b, "(double)%s", v); break;
    case TRN_DTYPE_F32: put(b, "%s", v); break;
    case TRN_DTYPE_BOOL: put(b, "(uint8_t)(%s != 0)", v); break;
    default: put(b, "(%s)%s", mem_type(d), v); break;
    }
}

static void put_float_literal(sb *b, double v) {
    if (v != v) put(b, "NAN");
    else if (v == INFINITY) put(b, "INFINITY");
    else if (v == -INFINITY) put(b, "(-INFINITY)");
    else {
        char t[64];
        snprintf(t, sizeof t, "%.9g", (double)(float)v);
        put(b, "%s%sf", t, strpbrk(t, ".en") ? "" : ".0");
    }
}

static void put_const(sb *b, const trn__cc_node *c) {
    if (is_f(c->dtype)) put_float_literal(b, c->cf);
    else if (c->dtype == TRN_DTYPE_BOOL) put(b, "INT64_C(%d)", c->ci != 0);
    else put(b, "INT64_C(%lld)", (long long)c->ci);
}

static void lower_name(const char *up, char *out, size_t n) {
    size_t i = 0;
    for (; up[i] && i + 1 < n; i++) out[i] = (char)(up[i] >= 'A' && up[i] <= 'Z' ? up[i] - 'A' + 'a' : up[i]);
    out[i] = 0;
}

// ---- kernel structure -------------------------------------------------------------
typedef struct kernel {
    const trn_graph *g;
    const trn__cc_schedule *s;
    int root;
    bool reduce;
    int loop_ndim;
    int64_t loop_sizes[TRN_GRAPH_MAX_DIMS];
    int *fused;  // fused nodes in node order (pointwise/cast), root excluded
    int n_fused;
    int *leaves;  // nodes read from memory (buffer, view, gather), in node order
    int n_leaves;
    trn__cc_access *acc;  // per leaf (a gather's: its source, over its dims)
    char *mark;
    char **istr;  // per leaf: its element's offset expression in the loop body
    // Names in the body are local to the kernel (values v0.. in order of
    // first use, pointers b0.. per buffer read), so kernels that compute the
    // same thing on different buffers render the same body text and share
    // one function (transformer layers, the optimizer's per-parameter steps).
    int *local;   // node -> its value's number, or -1
    int *named;   // value number -> node
    int n_named;
    int *slot;    // buffer node -> its pointer's number, or -1
    int *slots;   // pointer number -> buffer node; the output is the last
    int n_slots;
} kernel;

// Number of node n's value in the body (v<id>, c<id>, ok<id>...).
static int vid(const kernel *k, int n) {
    kernel *m = (kernel *)k;  // naming is memoized while rendering
    if (m->local[n] < 0) {
        m->local[n] = m->n_named;
        m->named[m->n_named++] = n;
    }
    return m->local[n];
}

// A leaf computed here (a gather or an iota, fused or the root), not one
// read back from memory: its access positions the computation.
static bool is_gather(const kernel *k, int n) {
    trn__cc_kind kind = k->g->nodes[n].kind;
    return (kind == CC_GATHER || kind == CC_IOTA) && (k->s->home[n] == HOME_FUSED || n == k->root);
}

// Collects the fused nodes and leaves below node n.
static void collect(kernel *k, int n) {
    if (k->mark[n]) return;
    k->mark[n] = 1;
    const trn__cc_node *x = &k->g->nodes[n];
    if (x->kind == CC_CONST) return;
    if (x->kind == CC_VIEW) {
        if (k->g->nodes[x->in[0]].kind == CC_CONST && k->s->home[x->in[0]] == HOME_NONE) {
            k->mark[n] = 2;  // a view of a literal is the literal
            return;
        }
        k->leaves[k->n_leaves++] = n;
        return;
    }
    if (k->s->home[n] != HOME_FUSED) {
        k->leaves[k->n_leaves++] = n;
        return;
    }
    // A gather computes its indices in the loop and loads its source
    // itself: the source is an access (a leaf) but not a loaded value.
    for (int i = x->kind == CC_GATHER ? 1 : 0; i < x->n_in; i++) collect(k, x->in[i]);
    if (x->kind == CC_GATHER || x->kind == CC_IOTA) k->leaves[k->n_leaves++] = n;
    k->fused[k->n_fused++] = n;
}

static int cmp_int(const void *a, const void *b) {
    int x = *(const int *)a, y = *(const int *)b;
    return (x > y) - (x < y);
}

// Name of the value of node n inside the loop body.
static void put_value(sb *b, const kernel *k, int n) {
    const trn__cc_node *x = &k->g->nodes[n];
    if (x->kind == CC_CONST) put_const(b, x);
    else if (x->kind == CC_VIEW && k->mark[n] == 2) put_const(b, &k->g->nodes[x->in[0]]);
    else put(b, "v%d", vid(k, n));
}

static trn_dtype value_dtype(const kernel *k, int n) {
    const trn__cc_node *x = &k->g->nodes[n];
    if (x->kind == CC_VIEW && k->mark[n] == 2) return k->g->nodes[x->in[0]].dtype;
    return x->dtype;
}

// An input value converted to the register type of dtype `to`.
static void put_arg(sb *b, const kernel *k, int n, trn_dtype to) {
    trn_dtype from = value_dtype(k, n);
    sb tmp = {0};
    put_value(&tmp, k, n);
    if (tmp.oom) {
        b->oom = true;
        return;
    }
    if (is_f(from) == is_f(to)) put(b, "%s", tmp.s);
    else put(b, is_f(to) ? "(float)%s" : "(int64_t)%s", tmp.s);
    free(tmp.s);
}

// Statement computing fused node n (a pointwise op or a cast).
static int leaf_pos(const kernel *k, int n) {
    for (int i = 0; i < k->n_leaves; i++)
        if (k->leaves[i] == n) return i;
    return -1;
}

// A gather's element: each index checked (a bad one is reported and reads
// element 0 of nothing: the load is skipped), then one load.
static void put_gather(sb *b, const kernel *k, int n, const char *in) {
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
        put(b, ";\n%sif ((uint64_t)w%d_%d >= UINT64_C(%lld)) { trn_g_fail(c, q%d_%d, %d, %lld, %d); w%d_%d = 0; ok%d = 0; }\n",
            in, id, q, (long long)isz[q], id, q, x->gdim[q], (long long)isz[q], (int)x->ierr, id, q, id);
    }
    sb idx = {0};
    put(&idx, "%s", pos >= 0 && k->istr[pos] ? k->istr[pos] : "0");
    for (int q = 0; q < x->n_in - 1; q++) put(&idx, " + w%d_%d * %lld", id, q, (long long)ist[q]);
    char ptr[32];
    snprintf(ptr, sizeof ptr, "b%d", k->slot[a.buffer]);
    put(b, "%sconst %s v%d = ok%d ? ", in, reg_type(x->dtype), id, id);
    if (idx.oom) b->oom = true;
    else put_load(b, x->dtype, ptr, idx.s);
    put(b, " : 0;\n");
    free(idx.s);
}

// An iota's element: start + step * its position (the leaf's offset).
static void put_iota(sb *b, const kernel *k, int n, const char *in) {
    const trn__cc_node *x = &k->g->nodes[n];
    int pos = leaf_pos(k, n);
    const char *at = pos >= 0 && k->istr[pos] ? k->istr[pos] : "0";
    sb e = {0};
    if (is_f(x->dtype)) put(&e, "(float)(%.17g + %.17g * (double)(%s))", x->params[0], x->params[1], at);
    else put(&e, "(INT64_C(%lld) + INT64_C(%lld) * (%s))", (long long)x->params[0], (long long)x->params[1], at);
    put(b, "%sconst %s v%d = ", in, reg_type(x->dtype), vid(k, n));
    if (e.oom) b->oom = true;
    else put_convert(b, e.s, is_f(x->dtype) ? TRN_DTYPE_F32 : TRN_DTYPE_I64, x->dtype);
    put(b, ";\n");
    free(e.s);
}

// A literal value in the body (a constant, or a view of one).
static bool is_literal(const kernel *k, int n) {
    const trn__cc_node *x = &k->g->nodes[n];
    return x->kind == CC_CONST || (x->kind == CC_VIEW && k->mark[n] == 2);
}

// pow by a literal exponent as eager's pow_fast_path (kernels/elementwise.c)
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
    if (!is_f(e_node->dtype) && e_node->dtype != TRN_DTYPE_I64 && e_node->dtype != TRN_DTYPE_I32) return NULL;
    const double e = is_f(e_node->dtype) ? (double)(float)e_node->cf : (double)(float)e_node->ci;
    const trn_sc_pow_special s = trn_sc_pow_special_of(e, x->compute == TRN_DTYPE_F16);
    return s == TRN_SC_POW_GENERAL ? NULL : trn_sc_pow_special_name(s);
}

static void put_compute(sb *b, const kernel *k, int n, const char *indent) {
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
    if (pred) put(b, "(int64_t)%s;\n", call.s);
    else if (x->dtype == TRN_DTYPE_F16 || x->dtype == TRN_DTYPE_BF16 || x->compute != x->dtype) {
        put_convert(b, call.s, x->compute, x->dtype);
        put(b, ";\n");
    } else put(b, "%s;\n", call.s);
    free(call.s);
}

// The op's parameters, a static in the body (part of the text that decides
// whether two kernels share a body).
static void put_ctx(sb *b, const kernel *k, int n) {
    const trn__cc_node *x = &k->g->nodes[n];
    if (x->kind != CC_POINTWISE || trn_ew_op_is_predicate(x->op)) return;
    trn_dtype d = x->compute;
    put(b, "    static const trn_sc_ctx c%d = {{", vid(k, n));
    for (int i = 0; i < 4; i++) {
        if (i) put(b, ", ");
        double p = x->params[i];
        if (p != p) put(b, "NAN");
        else if (p == INFINITY || p == -INFINITY) put(b, "%sINFINITY", p < 0 ? "-" : "");
        else put(b, "%.17g", p);
    }
    put(b, "}, {");
    for (int i = 0; i < 4; i++) {
        double p = x->params[i];
        long long ip = (p != p || p > 9.2e18 || p < -9.2e18) ? 0 : (long long)p;
        put(b, "%sINT64_C(%lld)", i ? ", " : "", ip);
    }
    put(b, "}, %d, %d, %d};\n", (int)trn_dtype_size(d) * 8,
        d != TRN_DTYPE_U8 && d != TRN_DTYPE_BOOL && d != TRN_DTYPE_U16 && d != TRN_DTYPE_U32 && d != TRN_DTYPE_U64,
        d == TRN_DTYPE_F16 ? 1 : (d == TRN_DTYPE_BF16 ? 2 : 0));
}

// ---- loop dims: drop size-1 dims, merge dims every access walks as one ---
typedef struct loops {
    int nd;
    int64_t size[TRN_GRAPH_MAX_DIMS];
    int dim[TRN_GRAPH_MAX_DIMS][TRN_GRAPH_MAX_DIMS];  // merged original dims
    int nmerged[TRN_GRAPH_MAX_DIMS];
} loops;

// Stride of access `a` (strides over the original dims) along loop dim i.
static int64_t loop_stride(const loops *l, int i, const int64_t *strides) {
    return strides[l->dim[i][l->nmerged[i] - 1]];
}

static void build_loops(loops *l, const int64_t *sizes, const int *dims, int n,
                        const int64_t *const *acc, int n_acc) {
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

static int64_t eff_stride(const loops *l, int i, const int64_t *strides) { return loop_stride(l, i, strides); }

static void put_ptrs(sb *b, const kernel *k, const char *in) {
    put(b, "%strn_kernel_ctx *const c = (trn_kernel_ctx *)ctx;\n", in);
    put(b, "%svoid *const *bufs = c->bufs;\n", in);
    // One pointer per distinct buffer read, then the output (the last slot).
    for (int i = 0; i + 1 < k->n_slots; i++) {
        trn_dtype d = k->g->nodes[k->slots[i]].dtype;
        put(b, "%sconst %s *const b%d = (const %s *)bufs[%d];\n", in, mem_type(d), i, mem_type(d), i);
    }
    trn_dtype od = k->g->nodes[k->root].dtype;
    // A store writes the input it may also read (element by element): no restrict.
    const char *restrict_kw = k->g->nodes[k->root].store_to >= 0 ? "" : "restrict ";
    put(b, "%s%s *const %sout = (%s *)bufs[%d];\n", in, mem_type(od), restrict_kw, mem_type(od), k->n_slots - 1);
}

static void put_body_values(sb *b, kernel *k, const char *in, const char *const *idx) {
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
static void put_unravel(sb *b, const loops *l, int nd, const char *var, const char *in) {
    if (nd == 0) return;
    put(b, "%sint64_t t = %s;\n", in, var);
    for (int i = nd - 1; i > 0; i--) put(b, "%sconst int64_t i%d = t %% %lld; t /= %lld;\n", in, i, (long long)l->size[i], (long long)l->size[i]);
    put(b, "%sconst int64_t i0 = t;\n", in);
}

static void put_offset(sb *b, const loops *l, int nd, const int64_t *strides, int64_t base) {
    put(b, "%lld", (long long)base);
    for (int i = 0; i < nd; i++) {
        int64_t s = eff_stride(l, i, strides);
        if (s != 0) put(b, " + i%d * %lld", i, (long long)s);
    }
}

// A scatter's second pass, after the first wrote self's value: one element
// of the index at a time, in row-major order (deterministic accumulation).
static void put_scatter(sb *b, const kernel *k) {
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
    put(b, "        const %s *const bs = (const %s *)bufs[%d];\n", mem_type(d), mem_type(d), as.buffer);
    put(b, "        %s *const out = (%s *)bufs[%d];\n", mem_type(d), mem_type(d), k->root);
    char in[64] = "        ";
    int nloops = 0;
    sb oi = {0}, os = {0}, oo = {0};
    put(&oi, "%lld", (long long)ai.offset);
    put(&os, "%lld", (long long)as.offset);
    put(&oo, "0");
    for (int j = 0; j < it->ndim; j++) {
        if (it->sizes[j] == 1) continue;
        put(b, "%sfor (int64_t i%d = 0; i%d < %lld; i%d++) {\n", in, j, j, (long long)it->sizes[j], j);
        size_t len = strlen(in);
        if (len + 4 < sizeof in) memcpy(in + len, "    ", 5);
        nloops++;
        if (ai.strides[j]) put(&oi, " + i%d * %lld", j, (long long)ai.strides[j]);
        if (as.strides[j]) put(&os, " + i%d * %lld", j, (long long)as.strides[j]);
        if (r->gmap[j] >= 0 && r->layout[r->gmap[j]]) put(&oo, " + i%d * %lld", j, (long long)r->layout[r->gmap[j]]);
    }
    if (nloops == 0) {  // one element: still a loop, for `continue`
        put(b, "%sfor (int once = 0; once < 1; once++) {\n", in);
        size_t len = strlen(in);
        if (len + 4 < sizeof in) memcpy(in + len, "    ", 5);
        nloops = 1;
    }
    if (oi.oom || os.oom || oo.oom) b->oom = true;
    else {
        put(b, "%sconst int64_t q = bi[%s];\n", in, oi.s);
        if (r->wrap) put(b, "%sconst int64_t w = q < 0 ? q + %lld : q;\n", in, (long long)size);
        else put(b, "%sconst int64_t w = q;\n", in);
        put(b, "%sif ((uint64_t)w >= UINT64_C(%lld)) { trn_g_fail(c, q, %d, %lld, %d); continue; }\n", in,
            (long long)size, r->gdim[0], (long long)size, (int)r->ierr);
        put(b, "%sconst int64_t o = %s + w * %lld;\n", in, oo.s, (long long)ost);
        put(b, "%sconst %s v = ", in, reg_type(d));
        put_load(b, d, "bs", os.s);
        put(b, ";\n");
        if (r->accumulate) {
            // 1 + trn_graph_reduce_op; max/min as eager's (a NaN source wins, a NaN kept)
            static const char *const fold[] = {"(a + v)", "(a * v)", "(v != v ? v : (a < v ? v : a))",
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

static const char *label_of(const trn_graph *g, int n, char *buf, size_t size) {
    if (g->nodes[n].label) return g->nodes[n].label;
    snprintf(buf, size, "node%d", n);
    return buf;
}

// The kernel's launch: its buffers in the body's pointer order and, for a
// scatter, the serial pass that runs after the body wrote self.
static void put_launch(sb *b, sb *table, const kernel *k, int kid, int body, int64_t items, int64_t grain) {
    char lb[32];
    put(b, "static const int k%d_bufs[%d] = {", kid, k->n_slots);
    for (int i = 0; i < k->n_slots; i++) put(b, "%s%d", i ? ", " : "", k->slots[i]);
    put(b, "};\n");
    const bool scatter = k->g->nodes[k->root].kind == CC_SCATTER;
    if (scatter) {
        put(b, "static void k%d_after(void *const *bufs, trn_kernel_ctx *c) {\n", kid);
        put_scatter(b, k);
        put(b, "}\n");
    }
    put(b, "\n");
    put(table, "    {k%d_body, %lld, %lld, %d, k%d_bufs, ", body, (long long)items, (long long)grain, k->n_slots, kid);
    if (scatter) put(table, "k%d_after", kid);
    else put(table, "0");
    put(table, "},  // kernel %d: %s\n", kid, label_of(k->g, k->root, lb, sizeof lb));
}

// Both write the body function's text from its parameter list on (the
// caller names it), and its launch size into *items / *grain.
static void render_pointwise(sb *b, kernel *k, int64_t *items_out, int64_t *grain_out) {
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
        put(b, "        const int64_t row = p / %lld, j0 = (p %% %lld) * %lld;\n", (long long)nb, (long long)nb, (long long)bs);
        put(b, "        const int64_t j1 = j0 + %lld < %lld ? j0 + %lld : %lld;\n", (long long)bs, (long long)inner, (long long)bs, (long long)inner);
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
        if (s == 0) snprintf(tmp, sizeof tmp, "o%d", a);
        else if (s == 1) snprintf(tmp, sizeof tmp, "o%d + j", a);
        else snprintf(tmp, sizeof tmp, "o%d + j * %lld", a, (long long)s);
        idx[a] = malloc(strlen(tmp) + 1);
        if (idx[a]) strcpy(idx[a], tmp);
        else b->oom = true;
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

// Folds element `e` into accumulator acc<l> (max/min: NaN wins, as eager).
static void put_fold(sb *b, const char *in, trn_graph_reduce_op rop, bool fam_f, int l, const char *e) {
    switch (rop) {
    case TRN_GRAPH_SUM: put(b, "%sacc%d += %s;\n", in, l, e); break;
    case TRN_GRAPH_PROD: put(b, "%sacc%d *= %s;\n", in, l, e); break;
    case TRN_GRAPH_MAX:
        if (fam_f) put(b, "%sacc%d = (%s != %s || %s > acc%d) ? %s : acc%d;\n", in, l, e, e, e, l, e, l);
        else put(b, "%sacc%d = %s > acc%d ? %s : acc%d;\n", in, l, e, l, e, l);
        break;
    default:
        if (fam_f) put(b, "%sacc%d = (%s != %s || %s < acc%d) ? %s : acc%d;\n", in, l, e, e, e, l, e, l);
        else put(b, "%sacc%d = %s < acc%d ? %s : acc%d;\n", in, l, e, l, e, l);
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
    if (x->dtype != TRN_DTYPE_F32 && x->dtype != TRN_DTYPE_F16 && x->dtype != TRN_DTYPE_BF16) return 0;
    if (n_in % 16 == 0) return 16;
    if (n_in % 8 == 0) return 8;
    return 0;
}

// Opens a reduction's lane loop (`l` over `lanes` consecutive positions
// from rl) and emits the fused body's values for position rl + l.
static void put_lane_loop(sb *b, kernel *k, const char *in, int inner, int lanes, const char *const *idx) {
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
    put(b, "%s    for (int l = 0; l < %d; l++) m[l] = %sINFINITY;\n", in, lanes, rop == TRN_GRAPH_MAX ? "-" : "");
    put(b, "%s    for (int64_t rl = 0; rl < %lld; rl += %d) {\n", in, (long long)n_in, lanes);
    put_lane_loop(b, k, in, inner, lanes, idx);
    put(b, "%s            const float e = %s;\n", in, value);
    put(b, "%s            m[l] = (e != e || e %s m[l]) ? e : m[l];\n", in, cmp);
    put(b, "%s        }\n", in);
    put(b, "%s    }\n", in);
    put(b, "%s    for (int l = 0; l < %d; l++) acc0 = (m[l] != m[l] || m[l] %s acc0) ? m[l] : acc0;\n", in, lanes, cmp);
    put(b, "%s}\n", in);
}

static void put_float_sum(sb *b, kernel *k, const char *in, int inner, int64_t n_in, int lanes,
                          const char *const *idx, const char *value) {
    int64_t block = (int64_t)lanes * 16;
    while (n_in % block) block /= 2;  // n_in is a multiple of lanes
    put(b, "%sfor (int64_t rb = 0; rb < %lld; rb += %lld) {\n", in, (long long)n_in, (long long)block);
    put(b, "%s    float s[%d] = {0};\n", in, lanes);
    put(b, "%s    for (int64_t rl = rb; rl < rb + %lld; rl += %d) {\n", in, (long long)block, lanes);
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

static bool reduce_by_columns(const kernel *k, const trn__cc_node *r, const trn__cc_node *x, const loops *lk,
                              const loops *lr, const int64_t *ostr) {
    if (r->rop != TRN_GRAPH_SUM || lk->nd == 0 || lr->nd == 0) return false;
    if (x->dtype != TRN_DTYPE_F32 && x->dtype != TRN_DTYPE_F16 && x->dtype != TRN_DTYPE_BF16) return false;
    if (eff_stride(lk, lk->nd - 1, ostr) != 1) return false;
    bool unit_kept = false;
    for (int a = 0; a < k->n_leaves; a++) {
        if (eff_stride(lr, lr->nd - 1, k->acc[a].strides) == 1) return false;  // rows are contiguous: lanes
        if (eff_stride(lk, lk->nd - 1, k->acc[a].strides) == 1) unit_kept = true;
    }
    return unit_kept;
}

static void render_reduce_cols(sb *b, kernel *k, const loops *lk, const loops *lr, const int64_t *ostr,
                               int64_t *items_out, int64_t *grain_out) {
    const trn__cc_node *r = &k->g->nodes[k->root];
    const int ko = lk->nd - 1, inner = lr->nd - 1;
    const int64_t width = lk->size[ko], jb = width < COL_BLOCK ? width : COL_BLOCK, nb = (width + jb - 1) / jb;
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
    put(b, "        const int64_t row = p / %lld, j0 = (p %% %lld) * %lld;\n", (long long)nb, (long long)nb, (long long)jb);
    put(b, "        const int64_t jn = j0 + %lld < %lld ? %lld : %lld - j0;\n", (long long)jb, (long long)width,
        (long long)jb, (long long)width);
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
            if (s == 1) put(&t, " + r%d", i);
            else if (s != 0) put(&t, " + r%d * %lld", i, (long long)s);
        }
        if (sj == 1) put(&t, " + j");
        else if (sj != 0) put(&t, " + j * %lld", (long long)sj);
        if (t.oom) b->oom = true;
        idx[a] = t.s;
    }
    put(b, "        const int64_t oo = ");
    put_offset(b, lk, ko, ostr, 0);
    put(b, " + j0;\n");
    put(b, "        double acc[%lld] = {0};\n", (long long)jb);
    char in[64] = "        ";
    for (int i = 0; i < inner; i++) {
        put(b, "%sfor (int64_t r%d = 0; r%d < %lld; r%d++) {\n", in, i, i, (long long)lr->size[i], i);
        size_t len = strlen(in);
        if (len + 4 < sizeof in) memcpy(in + len, "    ", 5);
    }
    sb v = {0};
    put_value(&v, k, r->in[0]);
    if (v.oom) b->oom = true;
    if (!b->oom) {
        put(b, "%sfor (int64_t rb = 0; rb < %lld; rb += %d) {\n", in, (long long)n_in, COL_RUN);
        put(b, "%s    const int64_t re = rb + %d < %lld ? rb + %d : %lld;\n", in, COL_RUN, (long long)n_in, COL_RUN,
            (long long)n_in);
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
static void render_reduce(sb *b, kernel *k, int64_t *items_out, int64_t *grain_out) {
    const trn__cc_node *r = &k->g->nodes[k->root];
    const trn__cc_node *x = &k->g->nodes[r->in[0]];
    int kept[TRN_GRAPH_MAX_DIMS], red[TRN_GRAPH_MAX_DIMS], nk = 0, nr = 0;
    for (int i = 0; i < x->ndim; i++) {
        if ((r->mask >> i) & 1) red[nr++] = i;
        else kept[nk++] = i;
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
    const char *acc_t = fam_f ? ((r->rop == TRN_GRAPH_SUM || r->rop == TRN_GRAPH_PROD) ? "double" : "float") : "int64_t";
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
        put(b, "%sfor (int64_t r%d = 0; r%d < %lld; r%d++) {\n", in, i, i, (long long)lr.size[i], i);
        size_t len = strlen(in);
        if (len + 4 < sizeof in) memcpy(in + len, "    ", 5);
    }
    char **idx = calloc((size_t)k->n_leaves + 1, sizeof *idx);
    for (int a = 0; a < k->n_leaves && idx; a++) {
        sb t = {0};
        put(&t, "o%d", a);
        for (int i = 0; i < lr.nd; i++) {
            int64_t s = eff_stride(&lr, i, k->acc[a].strides);
            if (s == 1) put(&t, " + r%d", i);
            else if (s != 0) put(&t, " + r%d * %lld", i, (long long)s);
        }
        if (t.oom) b->oom = true;
        idx[a] = t.s;
    }
    if (idx == NULL) b->oom = true;
    sb v = {0};
    put_value(&v, k, r->in[0]);
    if (v.oom) b->oom = true;
    const char *cast = fam_f ? (strcmp(acc_t, "double") == 0 ? "(double)" : "(float)") : "(int64_t)";
    if (!b->oom && flanes && r->rop != TRN_GRAPH_SUM) {
        put_float_extreme(b, k, in, inner, n_in, flanes, r->rop, (const char *const *)idx, v.s);
    } else if (!b->oom && flanes) {
        put_float_sum(b, k, in, inner, n_in, flanes, (const char *const *)idx, v.s);
    } else if (!b->oom && lanes == 1) {
        if (lr.nd == 0) put(b, "%s{\n", in);
        else put(b, "%sfor (int64_t r%d = 0; r%d < %lld; r%d++) {\n", in, inner, inner, (long long)n_in, inner);
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
        if (n_in % 4) put(b, "%s        if (r%d >= %lld) { e[l] = %s; continue; }\n", in, inner, (long long)n_in, init);
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
            if (fam_f) put(b, "        acc0 = (acc%d != acc%d || acc%d > acc0) ? acc%d : acc0;\n", l, l, l, l);
            else put(b, "        acc0 = acc%d > acc0 ? acc%d : acc0;\n", l, l);
            break;
        default:
            if (fam_f) put(b, "        acc0 = (acc%d != acc%d || acc%d < acc0) ? acc%d : acc0;\n", l, l, l, l);
            else put(b, "        acc0 = acc%d < acc0 ? acc%d : acc0;\n", l, l);
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

static void put_comment(sb *b, const kernel *k, int kid, int body) {
    char lb[32];
    const trn__cc_node *r = &k->g->nodes[k->root];
    put(b, "// kernel %d: %s %s", kid,
        r->kind == CC_REDUCE ? "reduction" : r->kind == CC_GATHER ? "gather" : r->kind == CC_SCATTER ? "scatter" : "pointwise",
        label_of(k->g, k->root, lb, sizeof lb));
    put(b, " -> buffer %d (%s", k->root, trn_dtype_name(r->dtype));
    for (int i = 0; i < r->ndim; i++) put(b, "%s%lld", i ? "x" : " ", (long long)r->sizes[i]);
    put(b, ")");
    if (r->store_to >= 0) put(b, " = input %s, in place", label_of(k->g, r->store_to, lb, sizeof lb));
    put(b, "\n");
    if (k->n_fused) {
        put(b, "//   fuses:");
        for (int i = 0; i < k->n_fused; i++) put(b, " %s", label_of(k->g, k->fused[i], lb, sizeof lb));
        put(b, "\n");
    }
    if (k->n_leaves) {
        put(b, "//   reads:");
        for (int i = 0; i < k->n_leaves; i++) put(b, " %s", label_of(k->g, k->leaves[i], lb, sizeof lb));
        put(b, "\n");
    }
    if (k->n_named) {
        put(b, "//   values:");
        for (int i = 0; i < k->n_named; i++) put(b, "%s v%d %s", i ? "," : "", i, label_of(k->g, k->named[i], lb, sizeof lb));
        put(b, "\n");
    }
    if (body != kid) put(b, "//   loop: k%d_body, the same as kernel %d's\n", body, body);
}

// Distinct body texts rendered so far, and the kernel that first had each.
typedef struct bodies {
    char **text;
    uint64_t *hash;
    int *kid;
    int n;
} bodies;

static uint64_t text_hash(const char *s) {
    uint64_t h = 1469598103934665603ULL;  // FNV-1a
    for (; *s; s++) h = (h ^ (unsigned char)*s) * 1099511628211ULL;
    return h;
}

// The kernel whose body is `text`; a new text is kept (owned) as kernel kid's.
static int bodies_find(bodies *t, char *text, int kid, bool *kept) {
    uint64_t h = text_hash(text);
    *kept = false;
    for (int i = 0; i < t->n; i++)
        if (t->hash[i] == h && strcmp(t->text[i], text) == 0) return t->kid[i];
    t->text[t->n] = text;
    t->hash[t->n] = h;
    t->kid[t->n++] = kid;
    *kept = true;
    return kid;
}

static const char *prologue =
    "#include \"trn/kernel_abi.h\"\n"
    "#include \"trn/scalar.h\"\n\n"
    "// Casts to 16-bit floats keep the value rounded as stored.\n"
    "static inline float trn_g_round_half(float x) { return trn_half_to_float(trn_float_to_half(x)); }\n"
    "static inline float trn_g_round_bf16(float x) { return trn_bf16_to_float(trn_float_to_bf16(x)); }\n\n"
    "// The pairwise sum of a reduction's float lanes.\n"
    "static inline float trn_g_lanes8(const float *s) {\n"
    "    return ((s[0] + s[4]) + (s[2] + s[6])) + ((s[1] + s[5]) + (s[3] + s[7]));\n"
    "}\n"
    "static inline float trn_g_lanes16(const float *s) {\n"
    "    float t[8];\n"
    "    for (int l = 0; l < 8; l++) t[l] = s[l] + s[l + 8];\n"
    "    return trn_g_lanes8(t);\n"
    "}\n\n"
    "// Records the first out-of-range index a kernel's loops meet (the runtime\n"
    "// reports it once the kernel is done).\n"
    "static inline void trn_g_fail(trn_kernel_ctx *c, int64_t value, int dim, int64_t size, int style) {\n"
    "    int expected = 0;\n"
    "    if (__atomic_compare_exchange_n(&c->failed, &expected, 1, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE)) {\n"
    "        c->value = value, c->dim = dim, c->size = size, c->style = style;\n"
    "    }\n"
    "}\n\n";

trn_status trn__cc_render(const trn_graph *g, const trn__cc_schedule *s, char **source) {
    sb b = {0};
    put(&b, "// Generated by the OpenNeuron graph compiler (%s).\n", TRN_COMPILER_VERSION);
    put(&b, "// %d nodes, %d steps, %d kernels, workspace %zu bytes.\n", g->count, s->n_steps,
        s->n_kernels, s->ws_size);
    put(&b, "// Extern calls (matmul, convolution) and host steps run between kernels.\n");
    put(&b, "%s", prologue);
    size_t n = (size_t)g->count + 1;
    sb table = {0};  // the launch table's rows, one per kernel
    kernel k;
    memset(&k, 0, sizeof k);
    k.g = g;
    k.s = s;
    k.fused = malloc(n * sizeof *k.fused);
    k.leaves = malloc(n * sizeof *k.leaves);
    k.acc = malloc(n * sizeof *k.acc);
    k.mark = malloc(n);
    k.local = malloc(n * sizeof *k.local);
    k.named = malloc(n * sizeof *k.named);
    k.slot = malloc(n * sizeof *k.slot);
    k.slots = malloc((n + 1) * sizeof *k.slots);
    size_t nk = s->n_kernels > 0 ? (size_t)s->n_kernels : 1;
    bodies seen = {calloc(nk, sizeof(char *)), calloc(nk, sizeof(uint64_t)), calloc(nk, sizeof(int)), 0};
    if (!k.fused || !k.leaves || !k.acc || !k.mark || !k.local || !k.named || !k.slot || !k.slots || !seen.text ||
        !seen.hash || !seen.kid)
        b.oom = true;
    else {
        for (size_t i = 0; i < n; i++) k.local[i] = k.slot[i] = -1;
    }
    for (int st = 0; st < s->n_steps && !b.oom; st++) {
        const trn__cc_step *sp = &s->steps[st];
        char lb[32];
        if (sp->kind == STEP_MATMUL || sp->kind == STEP_CONV) {
            put(&b, "// step %d: extern %s %s -> buffer %d\n\n", st, sp->kind == STEP_MATMUL ? "matmul" : "convolution",
                label_of(g, sp->node, lb, sizeof lb), sp->node);
            continue;
        }
        if (sp->kind == STEP_HOST) {
            put(&b, "// step %d: host call %d (an eager op)\n\n", st, sp->host);
            continue;
        }
        memset(k.mark, 0, n);
        k.root = sp->node;
        k.n_fused = k.n_leaves = 0;
        const trn__cc_node *r = &g->nodes[sp->node];
        k.reduce = r->kind == CC_REDUCE;
        k.mark[sp->node] = 1;
        if (r->kind == CC_REDUCE) {
            // The reduced value may itself be fused: collect its whole tree.
            int in0 = r->in[0];
            collect(&k, in0);
        } else if (r->kind == CC_SCATTER) {
            collect(&k, r->in[0]);  // the first pass computes self
        } else if (r->kind == CC_GATHER || r->kind == CC_IOTA) {
            for (int i = 1; i < r->n_in; i++) collect(&k, r->in[i]);
            k.leaves[k.n_leaves++] = sp->node;
        } else if (r->kind != CC_CONST) {
            for (int i = 0; i < r->n_in; i++) collect(&k, r->in[i]);
        }
        qsort(k.fused, (size_t)k.n_fused, sizeof *k.fused, cmp_int);
        qsort(k.leaves, (size_t)k.n_leaves, sizeof *k.leaves, cmp_int);
        for (int i = 0; i < k.n_leaves; i++) {
            int64_t ist[2], isz[2];
            const trn__cc_node *lf = &g->nodes[k.leaves[i]];
            if (is_gather(&k, k.leaves[i]) && lf->kind == CC_IOTA) {
                k.acc[i].buffer = -1;
                memcpy(k.acc[i].strides, lf->vstrides, sizeof k.acc[i].strides);
                k.acc[i].offset = lf->voffset;
            } else if (is_gather(&k, k.leaves[i])) {
                trn__cc_gather_access(g, k.leaves[i], &k.acc[i], ist, isz);
            } else {
                trn__cc_access_of(g, k.leaves[i], &k.acc[i]);
            }
        }
        k.n_named = k.n_slots = 0;
        for (int i = 0; i < k.n_leaves; i++) {
            int buf = k.acc[i].buffer;
            if (buf >= 0 && k.slot[buf] < 0) {
                k.slot[buf] = k.n_slots;
                k.slots[k.n_slots++] = buf;
            }
        }
        k.slots[k.n_slots++] = sp->node;  // the output
        sb body = {0};
        int64_t items = 0, grain = 1;
        if (k.reduce) render_reduce(&body, &k, &items, &grain);
        else render_pointwise(&body, &k, &items, &grain);
        if (body.oom || body.s == NULL) {
            b.oom = true;
            free(body.s);
            break;
        }
        bool kept;
        int first = bodies_find(&seen, body.s, sp->kernel, &kept);
        put(&b, "// step %d\n", st);
        put_comment(&b, &k, sp->kernel, first);
        if (kept) put(&b, "static void k%d_body%s", first, body.s);
        else free(body.s);
        put_launch(&b, &table, &k, sp->kernel, first, items, grain);
        for (int i = 0; i < k.n_named; i++) k.local[k.named[i]] = -1;
        for (int i = 0; i + 1 < k.n_slots; i++) k.slot[k.slots[i]] = -1;
    }
    put(&b, "const int trn_graph_abi_version = TRN_KERNEL_ABI_VERSION;\n");
    put(&b, "const int trn_graph_kernel_count = %d;\n", s->n_kernels);
    put(&b, "const trn_kernel_launch trn_graph_launches[%d] = {\n", s->n_kernels ? s->n_kernels : 1);
    if (table.oom) b.oom = true;
    else if (s->n_kernels == 0) put(&b, "    {0, 0, 0, 0, 0, 0},\n");
    else put(&b, "%s", table.s);
    put(&b, "};\n");
    free(table.s);
    free(k.fused);
    free(k.leaves);
    free(k.acc);
    free(k.mark);
    free(k.local);
    free(k.named);
    free(k.slot);
    free(k.slots);
    for (int i = 0; i < seen.n; i++) free(seen.text[i]);
    free(seen.text);
    free(seen.hash);
    free(seen.kid);
    if (b.oom) {
        free(b.s);
        return trn__set_error(TRN_ERROR_OUT_OF_MEMORY, "trn_program_compile: out of memory rendering");
    }
    *source = b.s;
    return TRN_SUCCESS;
}
