// graph.c - the compiler's IR builder (trn/compiler.h, "nodes").
//
// Owns: trn_graph and its nodes. Every check on shapes, dtypes and operands
// happens here, so the later stages (schedule, render, run) cannot fail on
// user input and generated kernels need no error path.
#include <stdlib.h>
#include <string.h>

#include "../../internal.h"
#include "../compiler_impl.h"
#include "trn/convert.h"

#define BAD(...) trn__set_error(TRN_ERROR_INVALID_ARGUMENT, __VA_ARGS__)

bool trn__cc_is_float(trn_dtype d) {
    return d == TRN_DTYPE_F32 || d == TRN_DTYPE_F16 || d == TRN_DTYPE_BF16 || d == TRN_DTYPE_F64;
}

static bool dtype_ok(trn_dtype d) {
    return (unsigned)d < TRN_DTYPE_COUNT && d != TRN_DTYPE_C64 && d != TRN_DTYPE_C128;
}

// 8-bit floats in generated code: values are carried as their codes (an
// int64 register holding the byte), so a copy of one is a byte copy, and
// converted only by casts, through trn/convert.h - the eager conversions'
// one definition, bit for bit: float32/float16/bfloat16/float64 -> 8 bits
// (float64 rounded to float32 first, as c10 does), 8 bits -> float32 (exact,
// PyTorch's NaN patterns). The other casts (to float16/bfloat16, whose NaN
// patterns differ; to integers, where some NaNs become 0), arithmetic,
// reductions and index ops on 8-bit floats are refused: they run as eager
// host steps, as PyTorch CPU has no arithmetic on them either.
static bool fp8_cast_ok(trn_dtype from, trn_dtype to) {
    if (from == to) return true;
    if (trn_dtype_is_fp8(to))
        return from == TRN_DTYPE_F32 || from == TRN_DTYPE_F16 || from == TRN_DTYPE_BF16 ||
               from == TRN_DTYPE_F64;
    return !trn_dtype_is_fp8(from) || to == TRN_DTYPE_F32;
}

// The code of `f` as an 8-bit float constant (float64 rounded to float32
// first, as c10 does).
static int64_t fp8_code(trn_dtype d, double f) {
    const float v = (float)f;
    switch (d) {
    case TRN_DTYPE_F8E4M3FN: return trn_float_to_fp8_e4m3fn(v);
    case TRN_DTYPE_F8E5M2: return trn_float_to_fp8_e5m2(v);
    case TRN_DTYPE_F8E4M3FNUZ: return trn_float_to_fp8_e4m3fnuz(v);
    case TRN_DTYPE_F8E5M2FNUZ: return trn_float_to_fp8_e5m2fnuz(v);
    default: return trn_float_to_fp8_e8m0fnu(v);
    }
}

static trn_status fp8_refused(const char *fn, trn_dtype d) {
    return trn__set_error(TRN_ERROR_UNSUPPORTED,
                          "%s: %s values are only copied and cast in generated code", fn,
                          trn_dtype_name(d));
}

int64_t trn__cc_numel(const trn__cc_node *n) {
    int64_t e = 1;
    for (int i = 0; i < n->ndim; i++) e *= n->sizes[i];
    return e;
}

trn_status trn_graph_create(trn_graph **graph) {
    if (graph == NULL) return BAD("trn_graph_create: graph is NULL");
    *graph = calloc(1, sizeof **graph);
    if (*graph == NULL)
        return trn__set_error(TRN_ERROR_OUT_OF_MEMORY, "trn_graph_create: out of memory");
    return TRN_SUCCESS;
}

void trn_graph_free(trn_graph *g) {
    if (g == NULL) return;
    for (int i = 0; i < g->count; i++) free(g->nodes[i].label);
    for (int i = 0; i < g->n_hosts; i++) free(g->hosts[i].args);
    free(g->nodes);
    free(g->hosts);
    trn__cc_externs_free(g->externs, g->n_externs);
    free(g);
}

int trn_graph_node_count(const trn_graph *g) { return g ? g->count : 0; }

static void contiguous(int ndim, const int64_t *sizes, int64_t *strides) {
    int64_t s = 1;
    for (int i = ndim - 1; i >= 0; i--) {
        strides[i] = s;
        s *= sizes[i] > 1 ? sizes[i] : 1;
    }
}

// Appends a node of the given shape (contiguous layout) and returns it.
static trn_status add_node(trn_graph *g, trn__cc_kind kind, trn_dtype dtype, int ndim,
                           const int64_t *sizes, trn__cc_node **out, int *id) {
    if (g == NULL || id == NULL) return BAD("trn_graph: graph or node pointer is NULL");
    if (!dtype_ok(dtype))
        return trn__set_error(TRN_ERROR_UNSUPPORTED,
                              "trn_graph: dtype %s is not supported by the compiler",
                              trn_dtype_name(dtype));
    if (ndim < 0 || ndim > TRN_GRAPH_MAX_DIMS || (ndim > 0 && sizes == NULL))
        return BAD("trn_graph: %d dims (at most %d)", ndim, TRN_GRAPH_MAX_DIMS);
    for (int i = 0; i < ndim; i++)
        if (sizes[i] < 0)
            return BAD("trn_graph: negative size %lld in dim %d", (long long)sizes[i], i);
    if (g->count == g->cap) {
        int cap = g->cap ? 2 * g->cap : 64;
        trn__cc_node *n = realloc(g->nodes, (size_t)cap * sizeof *n);
        if (n == NULL) return trn__set_error(TRN_ERROR_OUT_OF_MEMORY, "trn_graph: out of memory");
        g->nodes = n;
        g->cap = cap;
    }
    trn__cc_node *n = &g->nodes[g->count];
    memset(n, 0, sizeof *n);
    n->kind = kind;
    n->dtype = dtype;
    n->ndim = ndim;
    if (ndim) memcpy(n->sizes, sizes, (size_t)ndim * sizeof *sizes);
    contiguous(ndim, n->sizes, n->layout);
    n->host_step = -1;
    n->store_to = -1;
    *out = n;
    *id = g->count++;
    return TRN_SUCCESS;
}

static trn_status check_node(const trn_graph *g, int id, const char *what) {
    if (id < 0 || id >= g->count)
        return BAD("trn_graph: %s is node %d, not one of the %d nodes", what, id, g->count);
    return TRN_SUCCESS;
}

// Dense and non-overlapping: some permutation of the dims is contiguous.
static bool dense(int ndim, const int64_t *sizes, const int64_t *strides) {
    int order[TRN_GRAPH_MAX_DIMS], k = 0;
    for (int i = 0; i < ndim; i++)
        if (sizes[i] > 1) order[k++] = i;
    for (int i = 1; i < k; i++)  // insertion sort by stride
        for (int j = i; j > 0 && strides[order[j]] < strides[order[j - 1]]; j--) {
            int t = order[j];
            order[j] = order[j - 1];
            order[j - 1] = t;
        }
    int64_t expect = 1;
    for (int i = 0; i < k; i++) {
        if (strides[order[i]] != expect) return false;
        expect *= sizes[order[i]];
    }
    return true;
}

static trn_status set_strides(trn__cc_node *n, const int64_t *strides, int id) {
    if (strides == NULL) return TRN_SUCCESS;
    if (!dense(n->ndim, n->sizes, strides))
        return BAD("trn_graph: node %d: layout strides are not dense and non-overlapping", id);
    for (int i = 0; i < n->ndim; i++) n->layout[i] = n->sizes[i] > 1 ? strides[i] : n->layout[i];
    return TRN_SUCCESS;
}

static trn_status check_input_strides(int ndim, const int64_t *sizes, const int64_t *strides) {
    if (strides == NULL) return TRN_SUCCESS;
    for (int i = 0; i < ndim; i++)
        if (strides[i] < 0 && sizes[i] > 1)
            return BAD("trn_graph_input: negative stride in dim %d", i);
    return TRN_SUCCESS;
}

trn_status trn_graph_input(trn_graph *g, trn_dtype dtype, int ndim, const int64_t *sizes,
                           const int64_t *strides, int *id) {
    trn__cc_node *n;
    trn_status st = check_input_strides(ndim, sizes, strides);
    if (st == TRN_SUCCESS) st = add_node(g, CC_INPUT, dtype, ndim, sizes, &n, id);
    if (st != TRN_SUCCESS) return st;
    // Inputs may be any strided view (broadcast or overlapping): no density check.
    if (strides) memcpy(n->layout, strides, (size_t)ndim * sizeof *strides);
    return TRN_SUCCESS;
}

trn_status trn_graph_const(trn_graph *g, trn_dtype dtype, double f, int64_t i, int ndim,
                           const int64_t *sizes, int *id) {
    trn__cc_node *n;
    trn_status st = add_node(g, CC_CONST, dtype, ndim, sizes, &n, id);
    if (st != TRN_SUCCESS) return st;
    n->cf = f;
    n->ci = i;
    if (trn_dtype_is_fp8(dtype)) n->ci = fp8_code(dtype, f);  // held as its code
    return TRN_SUCCESS;
}

trn_status trn_graph_iota(trn_graph *g, trn_dtype dtype, int ndim, const int64_t *sizes,
                          const int64_t *coef, int64_t offset, double start, double step, int *id) {
    if (g == NULL || (ndim > 0 && coef == NULL)) return BAD("trn_graph_iota: NULL argument");
    if (dtype == TRN_DTYPE_BOOL) return BAD("trn_graph_iota: bool values");
    if (trn_dtype_is_fp8(dtype)) return fp8_refused("trn_graph_iota", dtype);
    trn__cc_node *n;
    trn_status st = add_node(g, CC_IOTA, dtype, ndim, sizes, &n, id);
    if (st != TRN_SUCCESS) return st;
    if (ndim) memcpy(n->vstrides, coef, (size_t)ndim * sizeof *coef);
    n->voffset = offset;
    n->params[0] = start;
    n->params[1] = step;
    return TRN_SUCCESS;
}

static bool same_shape(const trn__cc_node *a, const trn__cc_node *b) {
    if (a->ndim != b->ndim) return false;
    for (int i = 0; i < a->ndim; i++)
        if (a->sizes[i] != b->sizes[i]) return false;
    return true;
}

trn_status trn_graph_pointwise(trn_graph *g, trn_ew_op op, trn_dtype compute, trn_dtype out,
                               int n_in, const int *in, const double *params, int *id) {
    if (g == NULL || in == NULL) return BAD("trn_graph_pointwise: graph or inputs NULL");
    if ((unsigned)op >= TRN_EW_OP_COUNT) return BAD("trn_graph_pointwise: invalid op %d", (int)op);
    if (trn_ew_op_arity(op) != n_in)
        return BAD("trn_graph_pointwise: %s takes %d inputs, got %d", trn_ew_op_name(op),
                   trn_ew_op_arity(op), n_in);
    if (!trn_ew_supports(op, compute) || (compute == TRN_DTYPE_F64 && trn_float64_native()))
        return trn__set_error(TRN_ERROR_UNSUPPORTED,
                              "trn_graph_pointwise: %s is not supported for %s", trn_ew_op_name(op),
                              trn_dtype_name(compute));
    if (trn_ew_op_is_predicate(op) && out != TRN_DTYPE_BOOL)
        return BAD("trn_graph_pointwise: %s writes bool, not %s", trn_ew_op_name(op),
                   trn_dtype_name(out));
    if (trn_dtype_is_fp8(compute) || trn_dtype_is_fp8(out))
        return fp8_refused("trn_graph_pointwise", trn_dtype_is_fp8(out) ? out : compute);
    for (int i = 0; i < n_in; i++)
        if (in[i] >= 0 && in[i] < g->count && trn_dtype_is_fp8(g->nodes[in[i]].dtype))
            return fp8_refused("trn_graph_pointwise", g->nodes[in[i]].dtype);
    // The shape is the first non-const input's (consts are uniform).
    const trn__cc_node *shape = NULL;
    for (int i = 0; i < n_in; i++) {
        trn_status st = check_node(g, in[i], "an input");
        if (st != TRN_SUCCESS) return st;
        const trn__cc_node *x = &g->nodes[in[i]];
        if (x->kind == CC_CONST) continue;
        if (shape == NULL)
            shape = x;
        else if (!same_shape(shape, x))
            return BAD("trn_graph_pointwise: %s: input %d has a different shape (views must "
                       "broadcast first)",
                       trn_ew_op_name(op), i);
    }
    if (shape == NULL)  // all consts (uniform): the shape of the one with the most dims
        for (int i = 0; i < n_in; i++)
            if (shape == NULL || g->nodes[in[i]].ndim > shape->ndim) shape = &g->nodes[in[i]];
    int64_t sizes[TRN_GRAPH_MAX_DIMS];
    int ndim = shape->ndim;
    memcpy(sizes, shape->sizes, sizeof sizes);
    trn__cc_node *n;
    trn_status st = add_node(g, CC_POINTWISE, out, ndim, sizes, &n, id);
    if (st != TRN_SUCCESS) return st;
    n->op = op;
    n->compute = compute;
    n->n_in = n_in;
    memcpy(n->in, in, (size_t)n_in * sizeof *in);
    if (params) memcpy(n->params, params, sizeof n->params);
    return TRN_SUCCESS;
}

trn_status trn_graph_cast(trn_graph *g, int in, trn_dtype dtype, int *id) {
    if (g == NULL) return BAD("trn_graph_cast: graph is NULL");
    trn_status st = check_node(g, in, "the input");
    if (st != TRN_SUCCESS) return st;
    if ((unsigned)dtype < TRN_DTYPE_COUNT && !fp8_cast_ok(g->nodes[in].dtype, dtype))
        return trn__set_error(TRN_ERROR_UNSUPPORTED,
                              "trn_graph_cast: %s -> %s is not a cast generated code makes",
                              trn_dtype_name(g->nodes[in].dtype), trn_dtype_name(dtype));
    int64_t sizes[TRN_GRAPH_MAX_DIMS];
    int ndim = g->nodes[in].ndim;
    memcpy(sizes, g->nodes[in].sizes, sizeof sizes);
    trn__cc_node *n;
    st = add_node(g, CC_CAST, dtype, ndim, sizes, &n, id);
    if (st != TRN_SUCCESS) return st;
    n->n_in = 1;
    n->in[0] = in;
    return TRN_SUCCESS;
}

// Largest element offset a strided view reaches (smallest is `offset`).
static int64_t view_last(int ndim, const int64_t *sizes, const int64_t *strides, int64_t offset) {
    int64_t last = offset;
    for (int i = 0; i < ndim; i++)
        if (sizes[i] == 0) return offset;
    for (int i = 0; i < ndim; i++) last += (sizes[i] - 1) * strides[i];
    return last;
}

trn_status trn_graph_view(trn_graph *g, int in, int ndim, const int64_t *sizes,
                          const int64_t *strides, int64_t offset, int *id) {
    if (g == NULL || (strides == NULL && ndim > 0))
        return BAD("trn_graph_view: graph or strides NULL");
    trn_status st = check_node(g, in, "the viewed node");
    if (st != TRN_SUCCESS) return st;
    const trn__cc_node *src = &g->nodes[in];
    if (src->kind == CC_VIEW)
        return BAD("trn_graph_view: node %d is a view; view its base instead", in);
    for (int i = 0; i < ndim; i++)
        if (strides[i] < 0) return BAD("trn_graph_view: negative stride in dim %d", i);
    if (offset < 0) return BAD("trn_graph_view: negative offset");
    if (src->kind != CC_CONST && src->kind != CC_INPUT && src->kind != CC_HOST_RESULT) {
        // The view must stay inside the base's dense layout.
        int64_t span = 0;
        for (int i = 0; i < src->ndim; i++) span += (src->sizes[i] - 1) * src->layout[i];
        int64_t numel = trn__cc_numel(src);
        int64_t last = view_last(ndim, sizes, strides, offset);
        bool empty = false;
        for (int i = 0; i < ndim; i++) empty |= sizes[i] == 0;
        if (!empty && (numel == 0 || last > span))
            return BAD("trn_graph_view: view of node %d reaches element %lld of %lld", in,
                       (long long)last, (long long)numel);
    }
    trn__cc_node *n;
    st = add_node(g, CC_VIEW, src->dtype, ndim, sizes, &n, id);
    if (st != TRN_SUCCESS) return st;
    n->n_in = 1;
    n->in[0] = in;
    if (ndim) memcpy(n->vstrides, strides, (size_t)ndim * sizeof *strides);
    n->voffset = offset;
    return TRN_SUCCESS;
}

trn_status trn_graph_reduce(trn_graph *g, trn_graph_reduce_op op, int in, trn_dtype out,
                            uint32_t dims_mask, int *id) {
    if (g == NULL) return BAD("trn_graph_reduce: graph is NULL");
    trn_status st = check_node(g, in, "the input");
    if (st != TRN_SUCCESS) return st;
    if ((unsigned)op > TRN_GRAPH_MIN) return BAD("trn_graph_reduce: invalid op %d", (int)op);
    const trn__cc_node *x = &g->nodes[in];
    if (x->ndim < 32 && (dims_mask >> x->ndim) != 0)
        return BAD("trn_graph_reduce: dims mask 0x%x out of range for %d dims", dims_mask, x->ndim);
    if (x->dtype == TRN_DTYPE_BOOL || out == TRN_DTYPE_BOOL)
        return trn__set_error(TRN_ERROR_UNSUPPORTED,
                              "trn_graph_reduce: bool reductions are not supported");
    if (trn_dtype_is_fp8(x->dtype) || trn_dtype_is_fp8(out))
        return fp8_refused("trn_graph_reduce", trn_dtype_is_fp8(out) ? out : x->dtype);
    if ((op == TRN_GRAPH_MAX || op == TRN_GRAPH_MIN) && trn__cc_numel(x) == 0)
        return BAD("trn_graph_reduce: max/min of an empty tensor");
    int64_t sizes[TRN_GRAPH_MAX_DIMS];
    for (int i = 0; i < x->ndim; i++) sizes[i] = (dims_mask >> i) & 1 ? 1 : x->sizes[i];
    trn__cc_node *n;
    st = add_node(g, CC_REDUCE, out, x->ndim, sizes, &n, id);
    if (st != TRN_SUCCESS) return st;
    n->rop = op;
    n->mask = dims_mask;
    n->n_in = 1;
    n->in[0] = in;
    return TRN_SUCCESS;
}

trn_status trn_graph_matmul(trn_graph *g, int a, int b, double alpha, int *id) {
    if (g == NULL) return BAD("trn_graph_matmul: graph is NULL");
    trn_status st = check_node(g, a, "A");
    if (st == TRN_SUCCESS) st = check_node(g, b, "B");
    if (st != TRN_SUCCESS) return st;
    const trn__cc_node *A = &g->nodes[a], *B = &g->nodes[b];
    if (A->ndim != 3 || B->ndim != 3)
        return BAD("trn_graph_matmul: operands must be 3-d (batch, rows, cols)");
    if (A->dtype != B->dtype || !trn__cc_is_float(A->dtype) || A->dtype == TRN_DTYPE_F64)
        return trn__set_error(TRN_ERROR_UNSUPPORTED,
                              "trn_graph_matmul: dtypes %s x %s are not supported",
                              trn_dtype_name(A->dtype), trn_dtype_name(B->dtype));
    if (A->sizes[0] != B->sizes[0] || A->sizes[2] != B->sizes[1])
        return BAD("trn_graph_matmul: shapes (%lld,%lld,%lld) x (%lld,%lld,%lld) do not match",
                   (long long)A->sizes[0], (long long)A->sizes[1], (long long)A->sizes[2],
                   (long long)B->sizes[0], (long long)B->sizes[1], (long long)B->sizes[2]);
    int64_t sizes[3] = {A->sizes[0], A->sizes[1], B->sizes[2]};
    trn_dtype dt = A->dtype;
    trn__cc_node *n;
    st = add_node(g, CC_MATMUL, dt, 3, sizes, &n, id);
    if (st != TRN_SUCCESS) return st;
    n->n_in = 2;
    n->in[0] = a;
    n->in[1] = b;
    n->alpha = alpha;
    return TRN_SUCCESS;
}

trn_status trn_graph_conv(trn_graph *g, trn_conv_kind kind, int x, int y, int bias, int spatial,
                          const int64_t *stride, const int64_t *padding, const int64_t *dilation,
                          int64_t groups, int out_ndim, const int64_t *out_sizes, int *id) {
    if (g == NULL || stride == NULL || padding == NULL || dilation == NULL)
        return BAD("trn_graph_conv: NULL argument");
    trn_status st = check_node(g, x, "the first operand");
    if (st == TRN_SUCCESS) st = check_node(g, y, "the second operand");
    if (st == TRN_SUCCESS && bias >= 0) st = check_node(g, bias, "the bias");
    if (st != TRN_SUCCESS) return st;
    if ((unsigned)kind > TRN_CONV_BACKWARD_WEIGHTS) return BAD("trn_graph_conv: invalid kind");
    if (spatial < 1 || spatial > 3 || out_ndim != spatial + 2 || g->nodes[x].ndim != spatial + 2 ||
        g->nodes[y].ndim != spatial + 2)
        return BAD("trn_graph_conv: %d spatial dims with operands of %d/%d dims and a %d-d result",
                   spatial, g->nodes[x].ndim, g->nodes[y].ndim, out_ndim);
    if (bias >= 0 && (kind != TRN_CONV_FORWARD || g->nodes[bias].ndim != 1))
        return BAD("trn_graph_conv: a bias is a 1-d operand of the forward convolution");
    trn_dtype dt = g->nodes[x].dtype;
    if (dt != g->nodes[y].dtype || (bias >= 0 && g->nodes[bias].dtype != dt) ||
        !trn__cc_is_float(dt) || dt == TRN_DTYPE_F64)
        return trn__set_error(TRN_ERROR_UNSUPPORTED, "trn_graph_conv: dtype %s is not supported",
                              trn_dtype_name(dt));
    if (groups < 1) return BAD("trn_graph_conv: groups %lld", (long long)groups);
    trn__cc_node *n;
    st = add_node(g, CC_CONV, dt, out_ndim, out_sizes, &n, id);
    if (st != TRN_SUCCESS) return st;
    n->conv_kind = kind;
    n->spatial = spatial;
    n->n_in = bias >= 0 ? 3 : 2;
    n->in[0] = x;
    n->in[1] = y;
    n->in[2] = bias;
    memcpy(n->cstride, stride, (size_t)spatial * sizeof *stride);
    memcpy(n->cpad, padding, (size_t)spatial * sizeof *padding);
    memcpy(n->cdil, dilation, (size_t)spatial * sizeof *dilation);
    n->groups = groups;
    return TRN_SUCCESS;
}

trn_status trn_graph_host_call(trn_graph *g, int n_args, const int *args, int *step) {
    if (g == NULL || step == NULL || (n_args > 0 && args == NULL))
        return BAD("trn_graph_host_call: NULL argument");
    for (int i = 0; i < n_args; i++) {
        trn_status st = check_node(g, args[i], "a host argument");
        if (st != TRN_SUCCESS) return st;
        const trn__cc_node *a = &g->nodes[args[i]];
        if (a->kind != CC_INPUT && a->kind != CC_HOST_RESULT && !a->exported)
            return BAD(
                "trn_graph_host_call: argument node %d is not an input, a host result or exported",
                args[i]);
    }
    if (g->n_hosts == g->cap_hosts) {
        int cap = g->cap_hosts ? 2 * g->cap_hosts : 8;
        trn__cc_host *h = realloc(g->hosts, (size_t)cap * sizeof *h);
        if (h == NULL)
            return trn__set_error(TRN_ERROR_OUT_OF_MEMORY, "trn_graph_host_call: out of memory");
        g->hosts = h;
        g->cap_hosts = cap;
    }
    trn__cc_host *h = &g->hosts[g->n_hosts];
    h->position = g->count;
    h->n_args = n_args;
    h->args = malloc((size_t)(n_args > 0 ? n_args : 1) * sizeof *args);
    if (h->args == NULL)
        return trn__set_error(TRN_ERROR_OUT_OF_MEMORY, "trn_graph_host_call: out of memory");
    if (n_args) memcpy(h->args, args, (size_t)n_args * sizeof *args);
    *step = g->n_hosts++;
    return TRN_SUCCESS;
}

trn_status trn_graph_host_result(trn_graph *g, int step, trn_dtype dtype, int ndim,
                                 const int64_t *sizes, const int64_t *strides, int *id) {
    if (g == NULL || step < 0 || step >= g->n_hosts)
        return BAD("trn_graph_host_result: no host step %d", step);
    if (step != g->n_hosts - 1)
        return BAD("trn_graph_host_result: results belong to the latest host step");
    trn__cc_node *n;
    trn_status st = check_input_strides(ndim, sizes, strides);
    if (st == TRN_SUCCESS) st = add_node(g, CC_HOST_RESULT, dtype, ndim, sizes, &n, id);
    if (st != TRN_SUCCESS) return st;
    if (strides) memcpy(n->layout, strides, (size_t)ndim * sizeof *strides);
    n->host_step = step;
    return TRN_SUCCESS;
}

void trn__cc_externs_free(trn__cc_extern *e, int n) {
    for (int i = 0; i < n; i++) free(e[i].args);
    free(e);
}

trn_status trn_graph_extern_call(trn_graph *g, int n_args, const int *args, trn_graph_extern_fn fn,
                                 void *ctx, int *call) {
    if (g == NULL || call == NULL || fn == NULL || (n_args > 0 && args == NULL))
        return BAD("trn_graph_extern_call: NULL argument");
    for (int i = 0; i < n_args; i++) {
        trn_status st = check_node(g, args[i], "an extern argument");
        if (st != TRN_SUCCESS) return st;
        const trn__cc_node *a = &g->nodes[args[i]];
        // A const has no memory of its own: the caller materializes it.
        if (a->kind == CC_CONST || (a->kind == CC_VIEW && g->nodes[a->in[0]].kind == CC_CONST))
            return BAD("trn_graph_extern_call: argument node %d is a constant", args[i]);
        if (a->store_to >= 0)
            return BAD("trn_graph_extern_call: argument node %d is a store", args[i]);
    }
    if (g->n_externs == g->cap_externs) {
        int cap = g->cap_externs ? 2 * g->cap_externs : 8;
        trn__cc_extern *e = realloc(g->externs, (size_t)cap * sizeof *e);
        if (e == NULL)
            return trn__set_error(TRN_ERROR_OUT_OF_MEMORY, "trn_graph_extern_call: out of memory");
        g->externs = e;
        g->cap_externs = cap;
    }
    trn__cc_extern *e = &g->externs[g->n_externs];
    memset(e, 0, sizeof *e);
    e->args = malloc((size_t)(n_args > 0 ? n_args : 1) * sizeof *args);
    if (e->args == NULL)
        return trn__set_error(TRN_ERROR_OUT_OF_MEMORY, "trn_graph_extern_call: out of memory");
    if (n_args) memcpy(e->args, args, (size_t)n_args * sizeof *args);
    e->position = g->count;
    e->n_args = n_args;
    e->fn = fn;
    e->ctx = ctx;
    *call = g->n_externs++;
    return TRN_SUCCESS;
}

trn_status trn_graph_extern_result(trn_graph *g, int call, trn_dtype dtype, int ndim,
                                   const int64_t *sizes, const int64_t *strides, int *id) {
    if (g == NULL || call < 0 || call >= g->n_externs)
        return BAD("trn_graph_extern_result: no extern call %d", call);
    trn__cc_extern *e = &g->externs[call];
    if (call != g->n_externs - 1 || g->count != e->position + e->n_results)
        return BAD("trn_graph_extern_result: results are declared right after their extern call");
    trn__cc_node *n;
    trn_status st = strides ? check_input_strides(ndim, sizes, strides) : TRN_SUCCESS;
    if (st == TRN_SUCCESS && strides && !dense(ndim, sizes, strides))
        st = BAD("trn_graph_extern_result: strides are not dense");
    if (st == TRN_SUCCESS) st = add_node(g, CC_EXTERN_RESULT, dtype, ndim, sizes, &n, id);
    if (st != TRN_SUCCESS) return st;
    if (strides) memcpy(n->layout, strides, (size_t)ndim * sizeof *strides);
    n->host_step = call;
    e->n_results++;
    return TRN_SUCCESS;
}

trn_status trn_graph_export(trn_graph *g, int node, const int64_t *strides) {
    if (g == NULL) return BAD("trn_graph_export: graph is NULL");
    trn_status st = check_node(g, node, "the exported node");
    if (st != TRN_SUCCESS) return st;
    trn__cc_node *n = &g->nodes[node];
    if (n->kind == CC_INPUT || n->kind == CC_HOST_RESULT || n->kind == CC_VIEW)
        return BAD("trn_graph_export: node %d is an input, host result or view (the caller has it "
                   "already)",
                   node);
    if (n->kind == CC_EXTERN_RESULT && strides != NULL &&
        memcmp(strides, n->layout, (size_t)n->ndim * sizeof *strides) != 0)
        return BAD("trn_graph_export: node %d is an extern result: its kernel writes its own "
                   "strides",
                   node);
    if (n->store_to >= 0)
        return BAD("trn_graph_export: node %d is a store (it writes input %d)", node, n->store_to);
    if (n->exported) return TRN_SUCCESS;
    st = set_strides(n, strides, node);
    if (st != TRN_SUCCESS) return st;
    n->exported = true;
    return TRN_SUCCESS;
}

trn_status trn_graph_store(trn_graph *g, int input, int src, int *id) {
    if (g == NULL) return BAD("trn_graph_store: graph is NULL");
    trn_status st = check_node(g, input, "the stored input");
    if (st == TRN_SUCCESS) st = check_node(g, src, "the stored value");
    if (st != TRN_SUCCESS) return st;
    const trn__cc_node *x = &g->nodes[input], *v = &g->nodes[src];
    if (x->kind != CC_INPUT) return BAD("trn_graph_store: node %d is not a graph input", input);
    if (x->stored) return BAD("trn_graph_store: input %d is already stored to", input);
    if (v->ndim != x->ndim || memcmp(v->sizes, x->sizes, (size_t)x->ndim * sizeof *x->sizes) != 0)
        return BAD("trn_graph_store: node %d does not have the sizes of input %d", src, input);
    // The store writes through the input's strides: they must not overlap.
    if (!dense(x->ndim, x->sizes, x->layout))
        return trn__set_error(TRN_ERROR_UNSUPPORTED,
                              "trn_graph_store: input %d is not dense and non-overlapping", input);
    int64_t layout[TRN_GRAPH_MAX_DIMS];
    memcpy(layout, x->layout, sizeof layout);
    st = trn_graph_cast(g, src, x->dtype, id);
    if (st != TRN_SUCCESS) return st;
    trn__cc_node *n = &g->nodes[*id];
    memcpy(n->layout, layout, sizeof layout);
    n->store_to = input;
    n->exported = true;  // a caller buffer: the input's
    g->nodes[input].stored = true;
    return TRN_SUCCESS;
}

trn_status trn_graph_set_layout(trn_graph *g, int node, const int64_t *strides) {
    if (g == NULL) return BAD("trn_graph_set_layout: graph is NULL");
    trn_status st = check_node(g, node, "the node");
    if (st != TRN_SUCCESS) return st;
    trn__cc_node *n = &g->nodes[node];
    if (n->kind == CC_INPUT || n->kind == CC_HOST_RESULT || n->store_to >= 0)
        return BAD("trn_graph_set_layout: node %d has the caller's strides", node);
    if (n->kind == CC_EXTERN_RESULT)
        return BAD("trn_graph_set_layout: node %d has its extern kernel's strides", node);
    return set_strides(n, strides, node);
}

trn_status trn_graph_set_label(trn_graph *g, int node, const char *label) {
    if (g == NULL || label == NULL) return BAD("trn_graph_set_label: NULL argument");
    trn_status st = check_node(g, node, "the node");
    if (st != TRN_SUCCESS) return st;
    // Labels go into C comments: keep them to identifier-ish characters.
    size_t n = strlen(label);
    if (n > 200) n = 200;
    char *copy = malloc(n + 1);
    if (copy == NULL)
        return trn__set_error(TRN_ERROR_OUT_OF_MEMORY, "trn_graph_set_label: out of memory");
    for (size_t i = 0; i < n; i++) {
        char c = label[i];
        copy[i] = (c == '*' || c == '/' || c == '\n' || c == '\\') ? '_' : c;
    }
    copy[n] = 0;
    free(g->nodes[node].label);
    g->nodes[node].label = copy;
    return TRN_SUCCESS;
}

// ---- indexed reads and writes -------------------------------------------------------

// Checks a dim map from `it` (the index's sizes) into `dst`: each dst dim
// walked at most once, never one an index selects, within its size.
static trn_status check_map(const char *fn, const trn__cc_node *it, const trn__cc_node *dst,
                            const int *map, int n_sel, const int *sel) {
    bool used[TRN_GRAPH_MAX_DIMS] = {false};
    for (int k = 0; k < n_sel; k++) {
        if (sel[k] < 0 || sel[k] >= dst->ndim)
            return BAD("%s: index %d selects dim %d of a %d-d tensor", fn, k, sel[k], dst->ndim);
        if (used[sel[k]]) return BAD("%s: dim %d is selected twice", fn, sel[k]);
        used[sel[k]] = true;
    }
    for (int j = 0; j < it->ndim; j++) {
        int d = map[j];
        if (d < 0) continue;
        if (d >= dst->ndim)
            return BAD("%s: dim %d maps to dim %d of a %d-d tensor", fn, j, d, dst->ndim);
        if (used[d])
            return BAD("%s: dim %d of the indexed tensor is walked twice or also selected", fn, d);
        used[d] = true;
        if (it->sizes[j] > dst->sizes[d])
            return BAD("%s: dim %d (size %lld) walks dim %d of size %lld", fn, j,
                       (long long)it->sizes[j], d, (long long)dst->sizes[d]);
    }
    return TRN_SUCCESS;
}

static trn_status check_index(const trn_graph *g, const char *fn, int id,
                              const trn__cc_node *shape) {
    trn_status st = check_node(g, id, "an index");
    if (st != TRN_SUCCESS) return st;
    const trn__cc_node *x = &g->nodes[id];
    if (x->dtype != TRN_DTYPE_I64)
        return BAD("%s: index node %d is %s, not int64", fn, id, trn_dtype_name(x->dtype));
    if (shape != NULL && !same_shape(shape, x))
        return BAD("%s: the indices have different shapes", fn);
    return TRN_SUCCESS;
}

// Whether a gather/scatter operand reads memory (not a literal).
static bool in_memory(const trn_graph *g, int id) {
    const trn__cc_node *x = &g->nodes[id];
    if (x->kind == CC_VIEW) x = &g->nodes[x->in[0]];
    return x->kind != CC_CONST;
}

trn_status trn_graph_gather(trn_graph *g, int src, int n_idx, const int *idx, const int *src_dims,
                            const int *out_to_src, int wrap, trn_graph_index_error err, int *id) {
    static const char fn[] = "trn_graph_gather";
    if (g == NULL || idx == NULL || src_dims == NULL || n_idx < 1 || n_idx > 2)
        return BAD("%s: NULL argument or %d indices (1 or 2)", fn, n_idx);
    if ((unsigned)err > TRN_INDEX_ERROR_SOURCE)
        return BAD("%s: invalid error style %d", fn, (int)err);
    trn_status st = check_node(g, src, "the source");
    for (int k = 0; k < n_idx && st == TRN_SUCCESS; k++)
        st = check_index(g, fn, idx[k], k ? &g->nodes[idx[0]] : NULL);
    if (st != TRN_SUCCESS) return st;
    if (trn_dtype_is_fp8(g->nodes[src].dtype)) return fp8_refused(fn, g->nodes[src].dtype);
    const trn__cc_node *it = &g->nodes[idx[0]];
    if (it->ndim > 0 && out_to_src == NULL) return BAD("%s: NULL dim map", fn);
    if (!in_memory(g, src))
        return trn__set_error(TRN_ERROR_UNSUPPORTED, "%s: the source is a constant", fn);
    st = check_map(fn, it, &g->nodes[src], out_to_src, n_idx, src_dims);
    if (st != TRN_SUCCESS) return st;
    int64_t sizes[TRN_GRAPH_MAX_DIMS];
    int ndim = it->ndim;
    memcpy(sizes, it->sizes, sizeof sizes);
    trn__cc_node *n;
    st = add_node(g, CC_GATHER, g->nodes[src].dtype, ndim, sizes, &n, id);
    if (st != TRN_SUCCESS) return st;
    n->n_in = 1 + n_idx;
    n->in[0] = src;
    for (int k = 0; k < n_idx; k++) {
        n->in[1 + k] = idx[k];
        n->gdim[k] = src_dims[k];
    }
    for (int j = 0; j < ndim; j++) n->gmap[j] = out_to_src[j];
    n->wrap = wrap != 0;
    n->ierr = err;
    return TRN_SUCCESS;
}

trn_status trn_graph_scatter(trn_graph *g, int self, int index, int src, int dim,
                             const int *out_to_self, int accumulate, int wrap,
                             trn_graph_index_error err, int *id) {
    static const char fn[] = "trn_graph_scatter";
    if (g == NULL) return BAD("%s: graph is NULL", fn);
    if ((unsigned)err > TRN_INDEX_ERROR_SOURCE)
        return BAD("%s: invalid error style %d", fn, (int)err);
    if (accumulate < 0 || accumulate > 1 + (int)TRN_GRAPH_MIN)
        return BAD("%s: invalid accumulate mode %d", fn, accumulate);
    trn_status st = check_node(g, self, "self");
    if (st == TRN_SUCCESS) st = check_index(g, fn, index, NULL);
    if (st == TRN_SUCCESS) st = check_node(g, src, "the source");
    if (st != TRN_SUCCESS) return st;
    const trn__cc_node *it = &g->nodes[index], *x = &g->nodes[self], *v = &g->nodes[src];
    if (!same_shape(it, v)) return BAD("%s: the source does not have the index's sizes", fn);
    if (v->dtype != x->dtype)
        return BAD("%s: source %s, self %s", fn, trn_dtype_name(v->dtype),
                   trn_dtype_name(x->dtype));
    if (trn_dtype_is_fp8(x->dtype)) return fp8_refused(fn, x->dtype);
    if (it->ndim > 0 && out_to_self == NULL) return BAD("%s: NULL dim map", fn);
    if (!in_memory(g, index) || !in_memory(g, src))
        return trn__set_error(TRN_ERROR_UNSUPPORTED, "%s: the index or source is a constant", fn);
    st = check_map(fn, it, x, out_to_self, 1, &dim);
    if (st != TRN_SUCCESS) return st;
    int64_t sizes[TRN_GRAPH_MAX_DIMS];
    int ndim = x->ndim;
    memcpy(sizes, x->sizes, sizeof sizes);
    trn__cc_node *n;
    st = add_node(g, CC_SCATTER, x->dtype, ndim, sizes, &n, id);
    if (st != TRN_SUCCESS) return st;
    n->n_in = 3;
    n->in[0] = self;
    n->in[1] = index;
    n->in[2] = src;
    n->gdim[0] = dim;
    for (int j = 0; j < g->nodes[index].ndim; j++) n->gmap[j] = out_to_self[j];
    n->accumulate = accumulate;
    n->wrap = wrap != 0;
    n->ierr = err;
    return TRN_SUCCESS;
}
