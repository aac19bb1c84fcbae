// program.c - trn_nki_compile / run / launch (trn/nki.h).
//
// Owns: trn_nki_program: the checked program, its rendered C and the loaded
// shared object (built by the graph compiler's jit and disk cache:
// trn__cc_build_shared). A run executes every SPMD instance, instances in
// parallel over the device's threads, each with its own scratch (its SBUF,
// PSUM, private HBM and matmul accumulator).
#include <dlfcn.h>
#include <stdlib.h>
#include <string.h>

#include "trn/memory.h"
#include "trn/parallel.h"

#include "../compiler/compiler_impl.h"
#include "../internal.h"
#include "nki_impl.h"

typedef int (*nki_instance_fn)(void *const *args, const int64_t *pid, char *scratch);

struct trn_nki_program {
    nki_prog prog;
    char *source;
    void *dl;
    nki_instance_fn fn;
    int64_t scratch;
    int64_t instances;
    char key[65];
    int from_cache;
    double seconds;
};

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
        if (abi == NULL || bytes == NULL || sym == NULL || *abi != 1)
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
    *out = p;
    return TRN_SUCCESS;
}

void trn_nki_program_free(trn_nki_program *p) {
    if (p == NULL) return;
    if (p->dl) dlclose(p->dl);
    nki__prog_free(&p->prog);
    free(p->source);
    free(p);
}

int trn_nki_program_arg_count(const trn_nki_program *p) { return p ? p->prog.nargs : 0; }
int trn_nki_program_from_cache(const trn_nki_program *p) { return p ? p->from_cache : 0; }
double trn_nki_program_compile_seconds(const trn_nki_program *p) { return p ? p->seconds : 0.0; }
const char *trn_nki_program_source(const trn_nki_program *p) {
    return p && p->source ? p->source : "";
}
const char *trn_nki_program_cache_key(const trn_nki_program *p) { return p ? p->key : ""; }

typedef struct run_ctx {
    const trn_nki_program *p;
    void *const *args;
    int failed;  // first failing statement + 1 (atomic), or -1: out of memory
} run_ctx;

static void run_range(void *vctx, int64_t begin, int64_t end) {
    run_ctx *c = vctx;
    const trn_nki_program *p = c->p;
    char *scratch = malloc((size_t)p->scratch + 64);
    if (scratch == NULL) {
        int zero = 0;
        __atomic_compare_exchange_n(&c->failed, &zero, -1, false, __ATOMIC_RELAXED,
                                    __ATOMIC_RELAXED);
        return;
    }
    for (int64_t i = begin; i < end; i++) {
        int64_t pid[4] = {0, 0, 0, 0}, rest = i;
        for (int a = p->prog.ngrid - 1; a >= 0; a--) {
            pid[a] = rest % p->prog.grid[a];
            rest /= p->prog.grid[a];
        }
        int rc = p->fn(c->args, pid, scratch);
        if (rc != 0) {
            int zero = 0;
            __atomic_compare_exchange_n(&c->failed, &zero, rc, false, __ATOMIC_RELAXED,
                                        __ATOMIC_RELAXED);
            break;
        }
    }
    free(scratch);
}

trn_status trn_nki_run(const trn_nki_program *p, void *const *args) {
    if (p == NULL || (args == NULL && p->prog.nargs > 0))
        return trn__set_error(TRN_ERROR_INVALID_ARGUMENT, "trn_nki_run: NULL argument");
    run_ctx c = {p, args, 0};
    trn_parallel_for(p->instances, 1, run_range, &c);
    if (c.failed == -1)
        return trn__set_error(TRN_ERROR_OUT_OF_MEMORY,
                              "nki kernel '%s': out of memory for the "
                              "instance scratch (%lld bytes)",
                              p->prog.name, (long long)p->scratch);
    if (c.failed > 0) {
        const nki_stmt *s = &p->prog.s[c.failed - 1];
        return trn__set_error(TRN_ERROR_INVALID_ARGUMENT,
                              "nki kernel '%s': %s at %s: out-of-bounds access at run "
                              "time (a masked access pattern leaves its tensor)",
                              p->prog.name, s->ins ? s->ins->name : "?",
                              s->ins ? s->ins->loc : "?");
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
