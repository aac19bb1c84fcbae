// program.c - trn_nki_compile / run / launch (trn/nki.h).
//
// Owns: trn_nki_program: the checked program, its rendered C and the loaded
// shared object (built by the graph compiler's jit and disk cache:
// trn__cc_build_shared). A run executes every SPMD instance, instances in
// parallel over the device's threads, each with its own scratch (its SBUF,
// PSUM, private HBM and matmul accumulator), and gives each the run-time
// services of nki_rt: loops whose iterations are independent (parallel.c)
// spread over the pool, and tile products through libtrn's matmul kernel.
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "trn/memory.h"
#include "trn/parallel.h"

#include "../compiler/compiler_impl.h"
#include "../internal.h"
#include "../kernels/blas/matmul_run.h"
#include "../runtime/stream_drain.h"
#include "nki_impl.h"

typedef int (*nki_instance_fn)(void *const *args, const int64_t *pid, char *scratch,
                               const nki_rt *rt);

struct trn_nki_program {
    nki_prog prog;
    char *source;
    void *dl;
    nki_instance_fn fn;
    int64_t scratch;
    int64_t instances;
    // per argument: byte extent from its address, and whether the kernel writes it
    int64_t *arg_lo, *arg_hi;
    bool *arg_written;
    // instance scratch buffers kept between runs (a fresh malloc of a few
    // hundred KiB is a fresh mmap: page faults on every run)
    char **pool;
    int npool;
    char key[65];
    int from_cache;
    double seconds;
    // the program's record of a failed indirect access (prelude.c nki_oob:
    // flat element, tensor size), for the error message
    long long *oob;
};

// Which arguments the kernel writes and the bytes each spans, for the run
// time's overlap check (two arguments that are one tensor run serially).
static trn_status arg_extents(trn_nki_program *p) {
    const nki_prog *g = &p->prog;
    size_t n = (size_t)g->nargs + 1;
    p->arg_lo = calloc(n, sizeof *p->arg_lo);
    p->arg_hi = calloc(n, sizeof *p->arg_hi);
    p->arg_written = calloc(n, sizeof *p->arg_written);
    if (!p->arg_lo || !p->arg_hi || !p->arg_written)
        return trn__set_error(TRN_ERROR_OUT_OF_MEMORY, "trn_nki_compile: out of memory");
    for (int i = 0; i < g->nt; i++) {
        const nki_tensor *t = &g->t[i];
        if (t->kind != NKI_ARG && t->kind != NKI_OUT) continue;
        int64_t lo = 0, hi = 0, sz = nki__dtype_size(t->dtype);
        for (int d = 0; d < t->ndim; d++) {
            int64_t x = t->strides[d] * (t->sizes[d] > 0 ? t->sizes[d] - 1 : 0) * sz;
            if (x < 0)
                lo += x;
            else
                hi += x;
        }
        p->arg_lo[t->arg] = lo;
        p->arg_hi[t->arg] = hi + sz;
    }
    for (int i = 0; i < g->ns; i++) {
        const nki_stmt *s = &g->s[i];
        if (s->kind != NKI_INSTR) continue;
        for (int k = 0; k < s->ins->nopd; k++) {
            const nki_tensor *r = &g->t[g->t[s->ins->opd[k].tid].root];
            if (nki__instr_writes(s->ins, k) && (r->kind == NKI_ARG || r->kind == NKI_OUT))
                p->arg_written[r->arg] = true;
        }
    }
    return TRN_SUCCESS;
}

trn_status trn_nki_compile(const char *ir, const trn_compile_options *opts, trn_nki_program **out) {
    if (ir == NULL || opts == NULL || out == NULL)
        return trn__set_error(TRN_ERROR_INVALID_ARGUMENT, "trn_nki_compile: NULL argument");
    trn_nki_program *p = calloc(1, sizeof *p);
    if (p == NULL) return trn__set_error(TRN_ERROR_OUT_OF_MEMORY, "trn_nki_compile: out of memory");
    trn_status st = nki__parse(ir, &p->prog);
    if (st != TRN_SUCCESS) {
        free(p);
        return st;
    }
    st = nki__check(&p->prog);
    if (st == TRN_SUCCESS) st = nki__render(&p->prog, &p->source);
    // -O3 unless the caller chose a level: tile loops vectorize only with
    // its loop versioning and unrolling (measured 2-10x over -O2).
    trn_compile_options o = *opts;
    if (o.opt_level == 0) o.opt_level = 4;
    opts = &o;
    if (st == TRN_SUCCESS)
        st = trn__cc_build_shared(p->source, opts, &p->dl, p->key, &p->from_cache, &p->seconds);
    if (st == TRN_SUCCESS) {
        const int *abi = dlsym(p->dl, "nki_abi");
        const long long *bytes = dlsym(p->dl, "nki_scratch_bytes");
        void *sym = dlsym(p->dl, "nki_instance");
        memcpy(&p->fn, &sym, sizeof sym);
        p->oob = dlsym(p->dl, "nki_oob");
        if (abi == NULL || bytes == NULL || sym == NULL || *abi != 2)
            st = trn__set_error(TRN_ERROR_SYSTEM,
                                "trn_nki_compile: the shared object is not an NKI program of this "
                                "libtrn");
        else
            p->scratch = *bytes;
    }
    if (st != TRN_SUCCESS) {
        trn_nki_program_free(p);
        return st;
    }
    p->instances = 1;
    for (int i = 0; i < p->prog.ngrid; i++) p->instances *= p->prog.grid[i];
    st = arg_extents(p);
    p->npool = trn_parallel_threads() + 1;
    if (p->npool > 8) p->npool = 8;
    if (p->scratch > (4 << 20)) p->npool = 2;
    p->pool = calloc((size_t)p->npool, sizeof *p->pool);
    if (st == TRN_SUCCESS && p->pool == NULL)
        st = trn__set_error(TRN_ERROR_OUT_OF_MEMORY, "trn_nki_compile: out of memory");
    if (st != TRN_SUCCESS) {
        trn_nki_program_free(p);
        return st;
    }
    *out = p;
    return TRN_SUCCESS;
}

void trn_nki_program_free(trn_nki_program *p) {
    if (p == NULL) return;
    // Queued launches of the kernel call its code and use its buffers.
    trn__streams_drain();
    if (p->dl) dlclose(p->dl);
    nki__prog_free(&p->prog);
    free(p->source);
    free(p->arg_lo);
    free(p->arg_hi);
    free(p->arg_written);
    for (int i = 0; p->pool && i < p->npool; i++) free(p->pool[i]);
    free(p->pool);
    free(p);
}

int trn_nki_program_arg_count(const trn_nki_program *p) { return p ? p->prog.nargs : 0; }
int trn_nki_program_output_covered(const trn_nki_program *p, int arg) {
    if (p == NULL) return 0;
    for (int i = 0; i < p->prog.nt; i++)
        if ((p->prog.t[i].kind == NKI_ARG || p->prog.t[i].kind == NKI_OUT) &&
            p->prog.t[i].arg == arg)
            return nki__output_covered(&p->prog, i) ? 1 : 0;
    return 0;
}
int trn_nki_program_from_cache(const trn_nki_program *p) { return p ? p->from_cache : 0; }
double trn_nki_program_compile_seconds(const trn_nki_program *p) { return p ? p->seconds : 0.0; }
const char *trn_nki_program_source(const trn_nki_program *p) {
    return p && p->source ? p->source : "";
}
const char *trn_nki_program_cache_key(const trn_nki_program *p) { return p ? p->key : ""; }

static char *scratch_take(const trn_nki_program *p) {
    for (int i = 0; i < p->npool; i++) {
        char *s = __atomic_exchange_n(&p->pool[i], NULL, __ATOMIC_ACQ_REL);
        if (s) return s;
    }
    return malloc((size_t)p->scratch + 64);
}

static void scratch_give(const trn_nki_program *p, char *s) {
    for (int i = 0; i < p->npool; i++) {
        char *none = NULL;
        if (__atomic_compare_exchange_n(&p->pool[i], &none, s, false, __ATOMIC_ACQ_REL,
                                        __ATOMIC_RELAXED))
            return;
    }
    free(s);
}

typedef struct run_ctx {
    const trn_nki_program *p;
    void *const *args;
    const nki_rt *rt;
    int failed;  // first failing statement + 1 (atomic), or -1: out of memory
} run_ctx;

static void set_failed(int *failed, int rc) {
    int zero = 0;
    __atomic_compare_exchange_n(failed, &zero, rc, false, __ATOMIC_RELAXED, __ATOMIC_RELAXED);
}

// ---- nki_rt: what generated code calls back into --------------------------
typedef struct pfor_ctx {
    const nki_rt *rt;
    nki_body_fn body;
    void *ctx;
    const int64_t *live;
    int nlive;
    char *scratch;
    int failed;
} pfor_ctx;

static void pfor_range(void *vctx, int64_t begin, int64_t end) {
    pfor_ctx *c = vctx;
    const trn_nki_program *p = c->rt->prog;
    char *scratch = c->scratch, *own = NULL;
    if (begin != 0) {
        // the piece with iteration 0 runs on the instance's scratch (the
        // whole loop, when the pool runs it serially); others on a copy of
        // what the body reads from it
        own = scratch_take(p);
        if (own == NULL) {
            set_failed(&c->failed, -1);
            return;
        }
        for (int k = 0; k < c->nlive; k++)
            memcpy(own + c->live[2 * k], c->scratch + c->live[2 * k], (size_t)c->live[2 * k + 1]);
        scratch = own;
    }
    for (int64_t it = begin; it < end; it++) {
        int rc = c->body(c->ctx, it, scratch);
        if (rc != 0) {
            set_failed(&c->failed, rc);
            break;
        }
    }
    if (own) scratch_give(p, own);
}

static int rt_pfor(const nki_rt *rt, int64_t n, nki_body_fn body, void *ctx, const int64_t *live,
                   int nlive, char *scratch) {
    if (rt->serial) {
        for (int64_t it = 0; it < n; it++) {
            int rc = body(ctx, it, scratch);
            if (rc != 0) return rc;
        }
        return 0;
    }
    pfor_ctx c = {rt, body, ctx, live, nlive, scratch, 0};
    trn_parallel_for(n, 1, pfor_range, &c);
    return c.failed;
}

static void rt_matmul(int64_t m, int64_t n, int64_t k, const float *a, int64_t ars, int64_t acs,
                      const float *b, int64_t brs, int64_t bcs, float *c, int64_t crs, float beta) {
    trn_matmul_desc d = {.dtype = TRN_DTYPE_F32,
                         .batch = 1,
                         .m = m,
                         .n = n,
                         .k = k,
                         .a = a,
                         .a_strides = {m * k, ars, acs},
                         .b = b,
                         .b_strides = {k * n, brs, bcs},
                         .c = c,
                         .c_strides = {m * crs, crs, 1},
                         .alpha = 1.0,
                         .beta = beta};
    if (trn__matmul_run_now(&d) == TRN_SUCCESS) return;
    // cannot happen for these sizes; a plain product keeps the result right
    for (int64_t i = 0; i < m; i++)
        for (int64_t j = 0; j < n; j++) {
            float s = 0.0f;
            for (int64_t q = 0; q < k; q++) s += a[i * ars + q * acs] * b[q * brs + j * bcs];
            c[i * crs + j] = beta != 0.0f ? c[i * crs + j] + s : s;
        }
}

static void run_range(void *vctx, int64_t begin, int64_t end) {
    run_ctx *c = vctx;
    const trn_nki_program *p = c->p;
    char *scratch = scratch_take(p);
    if (scratch == NULL) {
        set_failed(&c->failed, -1);
        return;
    }
    for (int64_t i = begin; i < end; i++) {
        int64_t pid[4] = {0, 0, 0, 0}, rest = i;
        for (int a = p->prog.ngrid - 1; a >= 0; a--) {
            pid[a] = rest % p->prog.grid[a];
            rest /= p->prog.grid[a];
        }
        int rc = p->fn(c->args, pid, scratch, c->rt);
        if (rc != 0) {
            set_failed(&c->failed, rc);
            break;
        }
    }
    scratch_give(p, scratch);
}

trn_status trn_nki_run(const trn_nki_program *p, void *const *args) {
    if (p == NULL || (args == NULL && p->prog.nargs > 0))
        return trn__set_error(TRN_ERROR_INVALID_ARGUMENT, "trn_nki_run: NULL argument");
    nki_rt rt = {rt_pfor, rt_matmul, p, 0};
    // arguments that share memory with one the kernel writes: no loop may
    // reorder its iterations
    for (int i = 0; i < p->prog.nargs && !rt.serial; i++) {
        if (!p->arg_written[i] || args[i] == NULL) continue;
        const uintptr_t lo = (uintptr_t)args[i] + (uintptr_t)p->arg_lo[i];
        const uintptr_t hi = (uintptr_t)args[i] + (uintptr_t)p->arg_hi[i];
        for (int j = 0; j < p->prog.nargs; j++) {
            if (j == i || args[j] == NULL) continue;
            const uintptr_t lo2 = (uintptr_t)args[j] + (uintptr_t)p->arg_lo[j];
            const uintptr_t hi2 = (uintptr_t)args[j] + (uintptr_t)p->arg_hi[j];
            if (lo < hi2 && lo2 < hi) rt.serial = 1;
        }
    }
    run_ctx c = {p, args, &rt, 0};
    trn_parallel_for(p->instances, 1, run_range, &c);
    if (c.failed == -1)
        return trn__set_error(TRN_ERROR_OUT_OF_MEMORY,
                              "nki kernel '%s': out of memory for the "
                              "instance scratch (%lld bytes)",
                              p->prog.name, (long long)p->scratch);
    if (c.failed > 0) {
        const nki_stmt *s = &p->prog.s[c.failed - 1];
        char where[96] = "";
        const long long n = p->oob ? __atomic_load_n(&p->oob[1], __ATOMIC_RELAXED) : 0;
        // an index tile's row: the flat element it names (NumPy's wording,
        // as AWS's simulator reports it)
        if (n > 0)
            snprintf(where, sizeof where, "; index %lld is out of bounds for axis 0 with size %lld",
                     __atomic_load_n(&p->oob[0], __ATOMIC_RELAXED), n);
        if (p->oob) __atomic_store_n(&p->oob[1], 0LL, __ATOMIC_RELAXED);
        return trn__set_error(TRN_ERROR_INVALID_ARGUMENT,
                              "nki kernel '%s': %s at %s: out-of-bounds access at run "
                              "time (a masked access pattern leaves its tensor, or an index tile "
                              "holds a row out of range)%s",
                              p->prog.name, s->ins ? s->ins->name : "?", s->ins ? s->ins->loc : "?",
                              where);
    }
    return TRN_SUCCESS;
}

typedef struct launch_args {
    const trn_nki_program *p;
    void **args;
} launch_args;

static trn_status run_task(void *vargs) {
    launch_args *a = vargs;
    const bool protect = trn_mem_protect_enabled();
    int opened = 0;
    trn_status st = TRN_SUCCESS;
    if (protect)
        for (; opened < a->p->prog.nargs && st == TRN_SUCCESS; opened++)
            if (a->args[opened]) st = trn__mem_access_begin(a->args[opened], 1);
    if (st == TRN_SUCCESS) st = trn_nki_run(a->p, a->args);
    if (protect)
        for (int i = opened - 1; i >= 0; i--)
            if (a->args[i]) trn__mem_access_end(a->args[i], 1);
    free(a->args);
    return st;
}

trn_status trn_nki_launch(const trn_nki_program *p, trn_stream *stream, void *const *args) {
    if (p == NULL || stream == NULL)
        return trn__set_error(TRN_ERROR_INVALID_ARGUMENT, "trn_nki_launch: NULL argument");
    launch_args a = {p, malloc(((size_t)p->prog.nargs + 1) * sizeof(void *))};
    if (a.args == NULL)
        return trn__set_error(TRN_ERROR_OUT_OF_MEMORY, "trn_nki_launch: out of memory");
    if (p->prog.nargs) memcpy(a.args, args, (size_t)p->prog.nargs * sizeof(void *));
    trn_status st = trn_stream_launch(stream, run_task, &a, sizeof a);
    if (st != TRN_SUCCESS) free(a.args);
    return st;
}
