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
//
// This file walks the schedule: each kernel's fused nodes and leaves, its
// comment and launch-table row, and bodies shared between kernels; the
// render_*.c files emit the code itself (render_impl.h lists them).
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "render_impl.h"

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

static const char *label_of(const trn_graph *g, int n, char *buf, size_t size) {
    if (g->nodes[n].label) return g->nodes[n].label;
    snprintf(buf, size, "node%d", n);
    return buf;
}

// The kernel's launch: its buffers in the body's pointer order and, for a
// scatter, the serial pass that runs after the body wrote self.
static void put_launch(sb *b, sb *table, const kernel *k, int kid, int body, int64_t items,
                       int64_t grain) {
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
    put(table, "    {k%d_body, %lld, %lld, %d, k%d_bufs, ", body, (long long)items,
        (long long)grain, k->n_slots, kid);
    if (scatter)
        put(table, "k%d_after", kid);
    else
        put(table, "0");
    put(table, "},  // kernel %d: %s\n", kid, label_of(k->g, k->root, lb, sizeof lb));
}

static void put_comment(sb *b, const kernel *k, int kid, int body) {
    char lb[32];
    const trn__cc_node *r = &k->g->nodes[k->root];
    put(b, "// kernel %d: %s %s", kid,
        r->kind == CC_REDUCE    ? "reduction"
        : r->kind == CC_GATHER  ? "gather"
        : r->kind == CC_SCATTER ? "scatter"
                                : "pointwise",
        label_of(k->g, k->root, lb, sizeof lb));
    put(b, " -> buffer %d (%s", k->root, trn_dtype_name(r->dtype));
    for (int i = 0; i < r->ndim; i++) put(b, "%s%lld", i ? "x" : " ", (long long)r->sizes[i]);
    put(b, ")");
    if (r->store_to >= 0)
        put(b, " = input %s, in place", label_of(k->g, r->store_to, lb, sizeof lb));
    put(b, "\n");
    if (k->n_fused) {
        put(b, "//   fuses:");
        for (int i = 0; i < k->n_fused; i++)
            put(b, " %s", label_of(k->g, k->fused[i], lb, sizeof lb));
        put(b, "\n");
    }
    if (k->n_leaves) {
        put(b, "//   reads:");
        for (int i = 0; i < k->n_leaves; i++)
            put(b, " %s", label_of(k->g, k->leaves[i], lb, sizeof lb));
        put(b, "\n");
    }
    if (k->n_named) {
        put(b, "//   values:");
        for (int i = 0; i < k->n_named; i++)
            put(b, "%s v%d %s", i ? "," : "", i, label_of(k->g, k->named[i], lb, sizeof lb));
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
    "static inline float trn_g_round_half(float x) { return "
    "trn_half_to_float(trn_float_to_half(x)); }\n"
    "static inline float trn_g_round_bf16(float x) { return "
    "trn_bf16_to_float(trn_float_to_bf16(x)); }\n\n"
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
    "static inline void trn_g_fail(trn_kernel_ctx *c, int64_t value, int dim, int64_t size, int "
    "style) {\n"
    "    int expected = 0;\n"
    "    if (__atomic_compare_exchange_n(&c->failed, &expected, 1, 0, __ATOMIC_ACQ_REL, "
    "__ATOMIC_ACQUIRE)) {\n"
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
    bodies seen = {calloc(nk, sizeof(char *)), calloc(nk, sizeof(uint64_t)),
                   calloc(nk, sizeof(int)), 0};
    if (!k.fused || !k.leaves || !k.acc || !k.mark || !k.local || !k.named || !k.slot || !k.slots ||
        !seen.text || !seen.hash || !seen.kid)
        b.oom = true;
    else {
        for (size_t i = 0; i < n; i++) k.local[i] = k.slot[i] = -1;
    }
    for (int st = 0; st < s->n_steps && !b.oom; st++) {
        const trn__cc_step *sp = &s->steps[st];
        char lb[32];
        if (sp->kind == STEP_MATMUL || sp->kind == STEP_CONV) {
            put(&b, "// step %d: extern %s %s -> buffer %d\n\n", st,
                sp->kind == STEP_MATMUL ? "matmul" : "convolution",
                label_of(g, sp->node, lb, sizeof lb), sp->node);
            continue;
        }
        if (sp->kind == STEP_HOST) {
            put(&b, "// step %d: host call %d (an eager op)\n\n", st, sp->host);
            continue;
        }
        if (sp->kind == STEP_EXTERN) {
            put(&b, "// step %d: extern kernel call %d\n\n", st, sp->host);
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
        if (k.reduce)
            render_reduce(&body, &k, &items, &grain);
        else
            render_pointwise(&body, &k, &items, &grain);
        if (body.oom || body.s == NULL) {
            b.oom = true;
            free(body.s);
            break;
        }
        bool kept;
        int first = bodies_find(&seen, body.s, sp->kernel, &kept);
        put(&b, "// step %d\n", st);
        put_comment(&b, &k, sp->kernel, first);
        if (kept)
            put(&b, "static void k%d_body%s", first, body.s);
        else
            free(body.s);
        put_launch(&b, &table, &k, sp->kernel, first, items, grain);
        for (int i = 0; i < k.n_named; i++) k.local[k.named[i]] = -1;
        for (int i = 0; i + 1 < k.n_slots; i++) k.slot[k.slots[i]] = -1;
    }
    put(&b, "const int trn_graph_abi_version = TRN_KERNEL_ABI_VERSION;\n");
    put(&b, "const int trn_graph_kernel_count = %d;\n", s->n_kernels);
    put(&b, "const trn_kernel_launch trn_graph_launches[%d] = {\n",
        s->n_kernels ? s->n_kernels : 1);
    if (table.oom)
        b.oom = true;
    else if (s->n_kernels == 0)
        put(&b, "    {0, 0, 0, 0, 0, 0},\n");
    else
        put(&b, "%s", table.s);
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
        return trn__set_error(TRN_ERROR_OUT_OF_MEMORY,
                              "trn_program_compile: out of memory rendering");
    }
    *source = b.s;
    return TRN_SUCCESS;
}
