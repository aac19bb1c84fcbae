// run.c - running a compiled program on a stream.
//
// Owns: trn_run. Each run of consecutive generated kernels is one stream
// task, each extern call one launch (matmul, convolution, an extern kernel
// of trn/graph_extern.h) on the same stream, so compiled steps
// stay ordered with eager work exactly like eager kernels. The run's array
// of buffer addresses is read by the queued tasks, so it is freed by a task
// queued after them (trn_run_finish).
#include <stdlib.h>
#include <string.h>

#include "trn/blas.h"
#include "trn/conv.h"
#include "trn/memory.h"
#include "trn/parallel.h"

#include "../../internal.h"
#include "../compiler_impl.h"

struct trn_run {
    const trn_program *p;
    void **ptrs;  // per node
    int next;     // next step
};

static void abi_parallel_for(int64_t n, int64_t grain, trn_kernel_range_fn fn, void *ctx) {
    trn_parallel_for(n, grain, fn, ctx);
}

// An out-of-range index met by a generated kernel, in PyTorch's wording for
// the op (trn_graph_index_error); the kernel's task fails with the status.
static int abi_index_error(int64_t value, int dim, int64_t size, int style) {
    if (style == TRN_INDEX_ERROR_SELF)
        return trn__set_error(TRN_ERROR_INVALID_ARGUMENT, "index out of range in self");
    if (style == TRN_INDEX_ERROR_SOURCE)
        return trn__set_error(TRN_ERROR_KERNEL,
                              "Number of elements of source < number of ones in mask");
    if (style == TRN_INDEX_ERROR_COUNT)
        return trn__set_error(
            TRN_ERROR_KERNEL,
            "shape mismatch: value tensor of size %lld along dimension %d cannot be broadcast to "
            "indexing result of %lld selected elements",
            (long long)size, dim, (long long)(-1 - value));
    return trn__set_error(style == TRN_INDEX_ERROR_GATHER ? TRN_ERROR_KERNEL
                                                          : TRN_ERROR_INVALID_ARGUMENT,
                          "index %lld is out of bounds for dimension %d with size %lld",
                          (long long)value, dim, (long long)size);
}

static const trn_kernel_abi kernel_abi = {TRN_KERNEL_ABI_VERSION, abi_parallel_for,
                                          abi_index_error};

// Consecutive generated kernels (no extern call or host step between them)
// run as one stream task: one queue hop per run of kernels, not per kernel.
typedef struct kernel_task {
    const trn_program *p;
    void *const *ptrs;
    int first, end;  // steps [first, end), all STEP_KERNEL
} kernel_task;

// Protect mode: generated code cannot bracket its own accesses, so the task
// opens the block of every bound buffer first (reference-counted, so views
// of one block and the workspace's many nodes are fine) and closes them after.
static trn_status open_buffers(const kernel_task *t, int *opened) {
    const trn_graph *g = &t->p->graph;
    for (*opened = 0; *opened < g->count; (*opened)++) {
        const int i = *opened;
        if (t->ptrs[i] == NULL || trn__cc_numel(&g->nodes[i]) == 0) continue;
        trn_status st = trn__mem_access_begin(t->ptrs[i], 1);
        if (st != TRN_SUCCESS) return st;
    }
    return TRN_SUCCESS;
}

static void close_buffers(const kernel_task *t, int opened) {
    for (int i = opened - 1; i >= 0; i--)
        if (t->ptrs[i] != NULL && trn__cc_numel(&t->p->graph.nodes[i]) > 0)
            trn__mem_access_end(t->ptrs[i], 1);
}

static trn_status run_kernels(void *args) {
    const kernel_task *t = args;
    const bool protect = trn_mem_protect_enabled();
    int opened = 0;
    trn_status st = protect ? open_buffers(t, &opened) : TRN_SUCCESS;
    // A failed kernel (a bad index) ends the task: its error is the stream's.
    for (int i = t->first; i < t->end && st == TRN_SUCCESS; i++)
        st = trn__cc_kernel_launch(t->p, t->p->sched.steps[i].kernel, t->ptrs, &kernel_abi);
    if (protect) close_buffers(t, opened);
    return st;
}

static trn_status free_run(void *args) {
    trn_run *r = *(trn_run **)args;
    free(r->ptrs);
    free(r);
    return TRN_SUCCESS;
}

trn_status trn_run_create(const trn_program *p, void *workspace, trn_run **run) {
    if (p == NULL || run == NULL)
        return trn__set_error(TRN_ERROR_INVALID_ARGUMENT, "trn_run_create: NULL argument");
    if (p->sched.ws_size > 0 && workspace == NULL)
        return trn__set_error(TRN_ERROR_INVALID_ARGUMENT,
                              "trn_run_create: the program needs %zu bytes of workspace",
                              p->sched.ws_size);
    trn_run *r = calloc(1, sizeof *r);
    void **ptrs = calloc((size_t)p->graph.count + 1, sizeof *ptrs);
    if (r == NULL || ptrs == NULL) {
        free(r);
        free(ptrs);
        return trn__set_error(TRN_ERROR_OUT_OF_MEMORY, "trn_run_create: out of memory");
    }
    for (int i = 0; i < p->graph.count; i++)
        if (p->sched.home[i] == HOME_WORKSPACE) ptrs[i] = (char *)workspace + p->sched.ws_offset[i];
    r->p = p;
    r->ptrs = ptrs;
    *run = r;
    return TRN_SUCCESS;
}

trn_status trn_run_set_buffer(trn_run *r, int node, void *ptr) {
    if (r == NULL || node < 0 || node >= r->p->graph.count)
        return trn__set_error(TRN_ERROR_INVALID_ARGUMENT, "trn_run_set_buffer: no node %d", node);
    if (r->p->graph.nodes[node].store_to >= 0)
        return trn__set_error(TRN_ERROR_INVALID_ARGUMENT,
                              "trn_run_set_buffer: node %d is a store (it uses its input's buffer)",
                              node);
    if (r->p->sched.home[node] != HOME_CALLER)
        return trn__set_error(
            TRN_ERROR_INVALID_ARGUMENT,
            "trn_run_set_buffer: node %d is not an input, host result or exported node", node);
    r->ptrs[node] = ptr;
    return TRN_SUCCESS;
}

static void *at(const trn_run *r, const trn__cc_access *a) {
    const trn__cc_node *b = &r->p->graph.nodes[a->buffer];
    return (char *)r->ptrs[a->buffer] + a->offset * (int64_t)trn_dtype_size(b->dtype);
}

static trn_status launch_matmul(const trn_run *r, trn_stream *s, int node) {
    const trn_graph *g = &r->p->graph;
    const trn__cc_node *n = &g->nodes[node];
    trn__cc_access A, B;
    trn__cc_access_of(g, n->in[0], &A);
    trn__cc_access_of(g, n->in[1], &B);
    trn_matmul_desc d;
    memset(&d, 0, sizeof d);
    d.dtype = n->dtype;
    d.batch = n->sizes[0];
    d.m = n->sizes[1];
    d.n = n->sizes[2];
    d.k = g->nodes[n->in[0]].sizes[2];
    d.a = at(r, &A);
    d.b = at(r, &B);
    d.c = r->ptrs[node];
    memcpy(d.a_strides, A.strides, sizeof d.a_strides);
    memcpy(d.b_strides, B.strides, sizeof d.b_strides);
    memcpy(d.c_strides, n->layout, sizeof d.c_strides);
    d.alpha = n->alpha;
    d.beta = 0.0;
    d.alpha_int = 1;
    return trn_matmul_launch(s, &d);
}

static void operand(const trn_run *r, int node, void **ptr, int64_t *strides, int nd) {
    trn__cc_access a;
    trn__cc_access_of(&r->p->graph, node, &a);
    *ptr = at(r, &a);
    memcpy(strides, a.strides, (size_t)nd * sizeof *strides);
}

static trn_status launch_conv(const trn_run *r, trn_stream *s, int node) {
    const trn_graph *g = &r->p->graph;
    const trn__cc_node *n = &g->nodes[node];
    const trn__cc_node *x = &g->nodes[n->in[0]], *y = &g->nodes[n->in[1]];
    const int sp = n->spatial, nd = sp + 2;
    trn_conv_desc d;
    memset(&d, 0, sizeof d);
    d.dtype = n->dtype;
    d.spatial = sp;
    d.groups = n->groups;
    memcpy(d.stride, n->cstride, sizeof d.stride);
    memcpy(d.padding, n->cpad, sizeof d.padding);
    memcpy(d.dilation, n->cdil, sizeof d.dilation);
    const trn__cc_node *in, *w, *out;
    switch (n->conv_kind) {
    case TRN_CONV_FORWARD:
        in = x, w = y, out = n;
        operand(r, n->in[0], &d.input, d.input_strides, nd);
        operand(r, n->in[1], &d.weight, d.weight_strides, nd);
        d.output = r->ptrs[node];
        memcpy(d.output_strides, n->layout, (size_t)nd * sizeof(int64_t));
        if (n->n_in == 3 && n->in[2] >= 0) {
            int64_t bs;
            operand(r, n->in[2], &d.bias, &bs, 1);
            d.bias_stride = bs;
        }
        break;
    case TRN_CONV_BACKWARD_DATA:
        out = x, w = y, in = n;
        operand(r, n->in[0], &d.output, d.output_strides, nd);
        operand(r, n->in[1], &d.weight, d.weight_strides, nd);
        d.input = r->ptrs[node];
        memcpy(d.input_strides, n->layout, (size_t)nd * sizeof(int64_t));
        break;
    default:
        in = x, out = y, w = n;
        operand(r, n->in[0], &d.input, d.input_strides, nd);
        operand(r, n->in[1], &d.output, d.output_strides, nd);
        d.weight = r->ptrs[node];
        memcpy(d.weight_strides, n->layout, (size_t)nd * sizeof(int64_t));
        break;
    }
    d.n = in->sizes[0];
    d.c_in = in->sizes[1];
    d.c_out = out->sizes[1];
    for (int i = 0; i < sp; i++) {
        d.in_size[i] = in->sizes[2 + i];
        d.out_size[i] = out->sizes[2 + i];
        d.kernel[i] = w->sizes[2 + i];
    }
    switch (n->conv_kind) {
    case TRN_CONV_FORWARD: return trn_conv_forward_launch(s, &d);
    case TRN_CONV_BACKWARD_DATA: return trn_conv_backward_data_launch(s, &d);
    default: return trn_conv_backward_weights_launch(s, &d);
    }
}

// An extern kernel: its arguments' addresses (through their views), then
// its results'; the function queues the kernel on the stream.
static trn_status launch_extern(const trn_run *r, trn_stream *s, int call) {
    const trn__cc_extern *x = &r->p->graph.externs[call];
    const int n = x->n_args + x->n_results;
    void **bufs = malloc((size_t)(n > 0 ? n : 1) * sizeof *bufs);
    if (bufs == NULL) return trn__set_error(TRN_ERROR_OUT_OF_MEMORY, "trn_run: out of memory");
    for (int k = 0; k < x->n_args; k++) {
        trn__cc_access a;
        trn__cc_access_of(&r->p->graph, x->args[k], &a);
        bufs[k] = at(r, &a);
    }
    for (int k = 0; k < x->n_results; k++) bufs[x->n_args + k] = r->ptrs[x->position + k];
    trn_status st = x->fn(x->ctx, s, bufs, n);
    free(bufs);
    return st;
}

trn_status trn_run_continue(trn_run *r, trn_stream *s, int *host_step) {
    if (r == NULL || s == NULL || host_step == NULL)
        return trn__set_error(TRN_ERROR_INVALID_ARGUMENT, "trn_run_continue: NULL argument");
    const trn__cc_schedule *sc = &r->p->sched;
    if (r->next == 0) {
        const trn_program *p = r->p;
        for (int s = 0; s < p->n_stores; s++)  // a store writes its input's buffer
            r->ptrs[p->stores[s]] = r->ptrs[p->graph.nodes[p->stores[s]].store_to];
        for (int c = 0; c < p->n_caller; c++)
            if (r->ptrs[p->caller[c]] == NULL)
                return trn__set_error(TRN_ERROR_INVALID_ARGUMENT,
                                      "trn_run_continue: buffer of node %d was not set",
                                      p->caller[c]);
    }
    while (r->next < sc->n_steps) {
        const trn__cc_step *sp = &sc->steps[r->next++];
        trn_status st = TRN_SUCCESS;
        switch (sp->kind) {
        case STEP_HOST: *host_step = sp->host; return TRN_SUCCESS;
        case STEP_KERNEL: {
            kernel_task t = {r->p, r->ptrs, r->next - 1, r->next};
            while (t.end < sc->n_steps && sc->steps[t.end].kind == STEP_KERNEL) t.end++;
            r->next = t.end;
            st = trn_stream_launch(s, run_kernels, &t, sizeof t);
            break;
        }
        case STEP_MATMUL: st = launch_matmul(r, s, sp->node); break;
        case STEP_CONV: st = launch_conv(r, s, sp->node); break;
        case STEP_EXTERN: st = launch_extern(r, s, sp->host); break;
        }
        if (st != TRN_SUCCESS) return st;
    }
    *host_step = -1;
    return TRN_SUCCESS;
}

trn_status trn_run_finish(trn_run *r, trn_stream *s) {
    if (r == NULL) return TRN_SUCCESS;
    if (s == NULL)
        return trn__set_error(TRN_ERROR_INVALID_ARGUMENT, "trn_run_finish: stream is NULL");
    trn_status st = trn_stream_launch(s, free_run, &r, sizeof r);
    if (st != TRN_SUCCESS) {  // nothing can still read it only if the stream is idle
        trn_stream_synchronize(s);
        free(r->ptrs);
        free(r);
    }
    return st;
}
