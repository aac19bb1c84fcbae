// schedule.c - from nodes to steps: fusion decisions and buffer planning.
//
// Owns: trn__cc_schedule. Fusion rule (Inductor's, simplified): a pointwise
// node is computed inside the kernel of each node that reads it, unless it
// must be in memory: it is exported, viewed, an operand of an extern call
// (matmul, conv), or read by two or more nodes (recomputing it would repeat
// its loads and math). Reductions and extern calls always write memory.
// Extern calls (trn/graph_extern.h) read their arguments from memory and
// write their results there, as steps of their own between the kernels.
// Every node in memory that is not the caller's gets a workspace piece,
// planned greedily in step order and reused once its last reader ran.
#include <stdlib.h>
#include <string.h>

#include "../../internal.h"
#include "../compiler_impl.h"

void trn__cc_access_of(const trn_graph *g, int n, trn__cc_access *a) {
    const trn__cc_node *x = &g->nodes[n];
    memset(a, 0, sizeof *a);
    if (x->kind == CC_CONST) {
        a->buffer = -1;
        return;
    }
    if (x->kind == CC_VIEW) {
        const trn__cc_node *src = &g->nodes[x->in[0]];
        a->buffer = src->kind == CC_CONST ? -1 : x->in[0];
        memcpy(a->strides, x->vstrides, sizeof a->strides);
        a->offset = x->voffset;
        return;
    }
    a->buffer = n;
    memcpy(a->strides, x->layout, sizeof a->strides);
}

void trn__cc_gather_access(const trn_graph *g, int n, trn__cc_access *a, int64_t *idx_strides,
                           int64_t *idx_sizes) {
    const trn__cc_node *x = &g->nodes[n];
    trn__cc_access src;
    trn__cc_access_of(g, x->in[0], &src);
    a->buffer = src.buffer;
    a->offset = src.offset;
    memset(a->strides, 0, sizeof a->strides);
    for (int j = 0; j < x->ndim; j++)
        if (x->gmap[j] >= 0) a->strides[j] = src.strides[x->gmap[j]];
    for (int k = 0; k < x->n_in - 1; k++) {
        idx_strides[k] = src.strides[x->gdim[k]];
        idx_sizes[k] = g->nodes[x->in[0]].sizes[x->gdim[k]];
    }
}

static size_t node_bytes(const trn__cc_node *n) {
    int64_t numel = trn__cc_numel(n);
    return numel == 0 ? 0 : (size_t)numel * trn_dtype_size(n->dtype);
}

// Marks which nodes must live in memory. With copy_stores, every stored
// value (trn_graph_store) is in memory, so a store kernel only copies it.
static trn_status plan_homes(const trn_graph *g, trn__cc_home *home, bool copy_stores) {
    int *readers = calloc((size_t)g->count + 1, sizeof *readers);
    bool *forced = calloc((size_t)g->count + 1, sizeof *forced);
    if (readers == NULL || forced == NULL) {
        free(readers);
        free(forced);
        return trn__set_error(TRN_ERROR_OUT_OF_MEMORY, "trn_program_compile: out of memory");
    }
    for (int i = 0; i < g->count; i++) {
        const trn__cc_node *n = &g->nodes[i];
        for (int k = 0; k < n->n_in; k++) {
            int src = n->in[k];
            if (src < 0) continue;
            readers[src]++;
            if (n->kind == CC_VIEW || n->kind == CC_MATMUL || n->kind == CC_CONV)
                forced[src] = true;
            // Indexed operands are read at run-time positions: from memory.
            if ((n->kind == CC_GATHER && k == 0) || (n->kind == CC_SCATTER && k > 0))
                forced[src] = true;
            if (copy_stores && n->store_to >= 0) forced[src] = true;
        }
    }
    for (int e = 0; e < g->n_externs; e++)
        for (int k = 0; k < g->externs[e].n_args; k++) {
            readers[g->externs[e].args[k]]++;
            forced[g->externs[e].args[k]] = true;
        }
    for (int i = 0; i < g->count; i++) {
        const trn__cc_node *n = &g->nodes[i];
        switch (n->kind) {
        case CC_INPUT:
        case CC_HOST_RESULT: home[i] = HOME_CALLER; break;
        case CC_VIEW: home[i] = HOME_NONE; break;
        case CC_CONST:
            // A const is a literal, unless an extern call needs it in memory.
            home[i] = n->exported                                            ? HOME_CALLER
                      : (forced[i] && n->kind == CC_CONST && readers[i] > 0) ? HOME_WORKSPACE
                                                                             : HOME_NONE;
            break;
        case CC_REDUCE:
        case CC_MATMUL:
        case CC_CONV:
        case CC_SCATTER:
        case CC_EXTERN_RESULT: home[i] = n->exported ? HOME_CALLER : HOME_WORKSPACE; break;
        case CC_IOTA:  // cheaper to recompute than to load: only forced into memory
            home[i] = n->exported ? HOME_CALLER : forced[i] ? HOME_WORKSPACE : HOME_FUSED;
            break;
        case CC_GATHER:
        case CC_POINTWISE:
        case CC_CAST:
            if (n->exported)
                home[i] = HOME_CALLER;
            else if (forced[i] || readers[i] >= 2)
                home[i] = HOME_WORKSPACE;
            else
                home[i] = HOME_FUSED;
            break;
        }
    }
    // A view of a const reads no memory: the const stays a literal there.
    for (int i = 0; i < g->count; i++) {
        const trn__cc_node *n = &g->nodes[i];
        if (n->kind == CC_VIEW && g->nodes[n->in[0]].kind == CC_CONST &&
            !g->nodes[n->in[0]].exported) {
            bool other = false;  // is the const also an extern operand?
            for (int j = 0; j < g->count && !other; j++) {
                const trn__cc_node *m = &g->nodes[j];
                if (m->kind == CC_MATMUL || m->kind == CC_CONV)
                    for (int k = 0; k < m->n_in; k++) other |= m->in[k] == n->in[0];
            }
            if (!other) home[n->in[0]] = HOME_NONE;
        }
    }
    free(readers);
    free(forced);
    return TRN_SUCCESS;
}

// Buffers a step reads: the memory nodes reached through fused nodes.
static void step_reads(const trn_graph *g, const trn__cc_home *home, int root, bool top,
                       void (*fn)(void *, int), void *ctx) {
    const trn__cc_node *n = &g->nodes[root];
    if (!top) {
        if (n->kind == CC_VIEW) {
            trn__cc_access a;
            trn__cc_access_of(g, root, &a);
            if (a.buffer >= 0) fn(ctx, a.buffer);
            return;
        }
        if (home[root] != HOME_FUSED) {
            if (home[root] != HOME_NONE) fn(ctx, root);
            return;
        }
    }
    for (int k = 0; k < n->n_in; k++)
        if (n->in[k] >= 0) step_reads(g, home, n->in[k], false, fn, ctx);
}

// Buffers an extern call reads: each argument's (a view's base).
static void extern_reads(const trn_graph *g, const trn__cc_extern *x, void (*fn)(void *, int),
                         void *ctx) {
    for (int k = 0; k < x->n_args; k++) {
        trn__cc_access a;
        trn__cc_access_of(g, x->args[k], &a);
        if (a.buffer >= 0) fn(ctx, a.buffer);
    }
}

typedef struct last_use_ctx {
    int *last;
    int step;
} last_use_ctx;

static void note_last(void *ctx, int node) {
    last_use_ctx *c = ctx;
    if (c->last[node] < c->step) c->last[node] = c->step;
}

typedef struct block {
    int64_t off, size;
} block;

static trn_status build(const trn_graph *g, trn__cc_schedule *s, bool copy_stores) {
    memset(s, 0, sizeof *s);
    s->n_nodes = g->count;
    size_t n = (size_t)g->count + 1;
    s->home = calloc(n, sizeof *s->home);
    s->ws_offset = calloc(n, sizeof *s->ws_offset);
    s->steps = calloc(n + (size_t)g->n_hosts + (size_t)g->n_externs, sizeof *s->steps);
    int *last = malloc(n * sizeof *last);
    block *free_list = malloc(n * sizeof *free_list);
    if (!s->home || !s->ws_offset || !s->steps || !last || !free_list) {
        free(last);
        free(free_list);
        trn__cc_schedule_free(s);
        return trn__set_error(TRN_ERROR_OUT_OF_MEMORY, "trn_program_compile: out of memory");
    }
    trn_status st = plan_homes(g, s->home, copy_stores);
    if (st != TRN_SUCCESS) goto fail;

    // Steps in node order, host steps and extern calls at their positions.
    int h = 0, e = 0;
    for (int i = 0; i <= g->count; i++) {
        while (h < g->n_hosts && g->hosts[h].position == i) {
            s->steps[s->n_steps++] = (trn__cc_step){STEP_HOST, -1, -1, h};
            h++;
        }
        while (e < g->n_externs && g->externs[e].position == i) {
            const trn__cc_extern *x = &g->externs[e];
            for (int k = 0; k < x->n_args; k++) {
                trn__cc_access a;
                trn__cc_access_of(g, x->args[k], &a);
                if (a.buffer < 0) {
                    st = trn__set_error(TRN_ERROR_UNSUPPORTED,
                                        "trn_program_compile: extern call %d reads a constant", e);
                    goto fail;
                }
            }
            s->steps[s->n_steps++] = (trn__cc_step){STEP_EXTERN, -1, -1, e};
            e++;
        }
        if (i == g->count) break;
        const trn__cc_node *x = &g->nodes[i];
        bool computed = (s->home[i] == HOME_WORKSPACE || s->home[i] == HOME_CALLER) &&
                        x->kind != CC_INPUT && x->kind != CC_HOST_RESULT &&
                        x->kind != CC_EXTERN_RESULT;
        if (!computed) continue;
        trn__cc_step step = {STEP_KERNEL, i, -1, -1};
        if (x->kind == CC_MATMUL)
            step.kind = STEP_MATMUL;
        else if (x->kind == CC_CONV)
            step.kind = STEP_CONV;
        else
            step.kernel = s->n_kernels++;
        if (step.kind != STEP_KERNEL)
            for (int k = 0; k < x->n_in; k++) {
                trn__cc_access a;
                if (x->in[k] < 0) continue;
                trn__cc_access_of(g, x->in[k], &a);
                if (a.buffer < 0) {
                    st = trn__set_error(
                        TRN_ERROR_UNSUPPORTED,
                        "trn_program_compile: node %d: an extern call reads a view of a constant",
                        i);
                    goto fail;
                }
            }
        s->steps[s->n_steps++] = step;
    }

    // Liveness: the last step reading each buffer.
    for (size_t i = 0; i < n; i++) last[i] = -1;
    for (int k = 0; k < s->n_steps; k++) {
        last_use_ctx c = {last, k};
        const trn__cc_step *sp = &s->steps[k];
        if (sp->kind == STEP_HOST) {
            const trn__cc_host *hc = &g->hosts[sp->host];
            for (int a = 0; a < hc->n_args; a++) note_last(&c, hc->args[a]);
        } else if (sp->kind == STEP_EXTERN) {
            extern_reads(g, &g->externs[sp->host], note_last, &c);
        } else {
            step_reads(g, s->home, sp->node, true, note_last, &c);
        }
    }
    // Greedy best-fit planning in step order.
    int nfree = 0;
    int64_t top = 0;
    for (int k = 0; k < s->n_steps; k++) {
        const trn__cc_step *sp = &s->steps[k];
        // The nodes this step writes: its own, or an extern call's results.
        int first = sp->node, end = sp->node + 1;
        if (sp->kind == STEP_HOST) first = end = 0;
        if (sp->kind == STEP_EXTERN) {
            first = g->externs[sp->host].position;
            end = first + g->externs[sp->host].n_results;
        }
        for (int w = first; w < end; w++) {
            if (s->home[w] != HOME_WORKSPACE) continue;
            int64_t size = (int64_t)((node_bytes(&g->nodes[w]) + 63) & ~(size_t)63);
            int best = -1;
            for (int b = 0; b < nfree; b++)
                if (free_list[b].size >= size &&
                    (best < 0 || free_list[b].size < free_list[best].size))
                    best = b;
            if (best >= 0) {
                s->ws_offset[w] = free_list[best].off;
                free_list[best].off += size;
                free_list[best].size -= size;
                if (free_list[best].size == 0) free_list[best] = free_list[--nfree];
            } else {
                s->ws_offset[w] = top;
                top += size;
            }
            if (last[w] < k) last[w] = k;  // written, never read
        }
        // Release pieces whose last reader is this step.
        for (int i = 0; i < g->count; i++) {
            if (s->home[i] != HOME_WORKSPACE || last[i] != k) continue;
            int64_t size = (int64_t)((node_bytes(&g->nodes[i]) + 63) & ~(size_t)63);
            if (size > 0) free_list[nfree++] = (block){s->ws_offset[i], size};
        }
    }
    s->ws_size = (size_t)top;
    free(last);
    free(free_list);
    return TRN_SUCCESS;
fail:
    free(last);
    free(free_list);
    trn__cc_schedule_free(s);
    return st;
}

// ---- stores: in-place writes of graph inputs --------------------------------------

typedef struct hit_ctx {
    int target;
    bool hit;
} hit_ctx;

static void note_hit(void *ctx, int node) {
    hit_ctx *c = ctx;
    c->hit |= node == c->target;
}

// Whether the kernel of store node `root` reads input `x` only at the element
// it writes (then overwriting it in the same loop iteration is safe). Every
// fused node has the store's sizes (pointwise inputs share their node's
// sizes), and `x` read directly has the store's layout, so only views of `x`
// can read another element.
static bool reads_in_place(const trn_graph *g, const trn__cc_home *home, int n, bool top, int x,
                           const trn__cc_node *store) {
    const trn__cc_node *nd = &g->nodes[n];
    if (!top) {
        if (nd->kind == CC_VIEW) {
            trn__cc_access a;
            trn__cc_access_of(g, n, &a);
            if (a.buffer != x) return true;
            if (a.offset != 0) return false;
            for (int i = 0; i < nd->ndim; i++)
                if (nd->sizes[i] > 1 && a.strides[i] != store->layout[i]) return false;
            return true;
        }
        if (home[n] != HOME_FUSED) return true;
        if (nd->kind == CC_GATHER) {  // reads its source anywhere
            trn__cc_access a;
            trn__cc_access_of(g, nd->in[0], &a);
            if (a.buffer == x) return false;
        }
    }
    for (int k = 0; k < nd->n_in; k++)
        if (nd->in[k] >= 0 && !reads_in_place(g, home, nd->in[k], false, x, store)) return false;
    return true;
}

// The first store node after whose step something still reads the old
// values of the input it overwrote, or -1.
static int store_hazard(const trn_graph *g, const trn__cc_schedule *s) {
    for (int k = 0; k < s->n_steps; k++) {
        const trn__cc_step *sp = &s->steps[k];
        if (sp->kind != STEP_KERNEL || g->nodes[sp->node].store_to < 0) continue;
        const trn__cc_node *st = &g->nodes[sp->node];
        const int x = st->store_to;
        if (!reads_in_place(g, s->home, sp->node, true, x, st)) return sp->node;
        for (int j = k + 1; j < s->n_steps; j++) {
            const trn__cc_step *later = &s->steps[j];
            hit_ctx c = {x, false};
            if (later->kind == STEP_HOST) {
                const trn__cc_host *hc = &g->hosts[later->host];
                for (int a = 0; a < hc->n_args; a++) c.hit |= hc->args[a] == x;
            } else if (later->kind == STEP_EXTERN) {
                extern_reads(g, &g->externs[later->host], note_hit, &c);
            } else {
                step_reads(g, s->home, later->node, true, note_hit, &c);
            }
            if (c.hit) return sp->node;
        }
    }
    return -1;
}

trn_status trn__cc_schedule_build(const trn_graph *g, trn__cc_schedule *s) {
    bool stores = false;
    for (int i = 0; i < g->count; i++) stores |= g->nodes[i].store_to >= 0;
    trn_status st = build(g, s, false);
    if (st != TRN_SUCCESS || !stores || store_hazard(g, s) < 0) return st;
    // A store fused its value's computation where the old input is still
    // needed: compute every stored value first, then copy.
    trn__cc_schedule_free(s);
    st = build(g, s, true);
    if (st != TRN_SUCCESS) return st;
    int bad = store_hazard(g, s);
    if (bad < 0) return TRN_SUCCESS;
    trn__cc_schedule_free(s);
    return trn__set_error(
        TRN_ERROR_UNSUPPORTED,
        "trn_program_compile: store node %d overwrites input %d while a later step still reads it",
        bad, g->nodes[bad].store_to);
}

void trn__cc_schedule_free(trn__cc_schedule *s) {
    free(s->home);
    free(s->ws_offset);
    free(s->steps);
    memset(s, 0, sizeof *s);
}
