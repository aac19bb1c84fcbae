// compiler_impl.h - the graph IR and the schedule, shared by the compiler's
// stages (graph/ builds nodes, schedule/ plans them, render/ prints them,
// jit/ compiles and runs). Nothing here is public; names carry trn__cc_.
#ifndef TRN_COMPILER_IMPL_H
#define TRN_COMPILER_IMPL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "trn/compiler.h"
#include "trn/graph_extern.h"
#include "trn/kernel_abi.h"

typedef enum trn__cc_kind {
    CC_INPUT,
    CC_HOST_RESULT,
    CC_CONST,
    CC_POINTWISE,
    CC_CAST,
    CC_VIEW,
    CC_REDUCE,
    CC_MATMUL,
    CC_CONV,
    CC_GATHER,         // in[0] src, in[1..] indices
    CC_SCATTER,        // in[0] self, in[1] index, in[2] src
    CC_IOTA,           // start + step * (voffset + sum(i_k * vstrides_k)), params[0..1]
    CC_EXTERN_RESULT,  // written by extern call host_step (trn/graph_extern.h)
} trn__cc_kind;

typedef struct trn__cc_node {
    trn__cc_kind kind;
    trn_dtype dtype;
    int ndim;
    int64_t sizes[TRN_GRAPH_MAX_DIMS];
    int64_t layout[TRN_GRAPH_MAX_DIMS];  // strides when in memory
    int n_in;
    int in[3];
    // pointwise
    trn_ew_op op;
    trn_dtype compute;
    double params[4];
    // const
    double cf;
    int64_t ci;
    // view
    int64_t vstrides[TRN_GRAPH_MAX_DIMS];
    int64_t voffset;
    // reduce
    trn_graph_reduce_op rop;
    uint32_t mask;
    // matmul / conv
    double alpha;
    trn_conv_kind conv_kind;
    int spatial;
    int64_t cstride[3], cpad[3], cdil[3], groups;
    // gather / scatter: the src (self) dim each result (index) dim walks or
    // -1, the dim each index selects, and how a bad index is reported
    int gmap[TRN_GRAPH_MAX_DIMS];
    int gdim[2];
    int wrap, accumulate;
    trn_graph_index_error ierr;
    // host
    int host_step;  // host result: its step; extern result: its call
    int store_to;   // store node (trn_graph_store): the input it writes; else -1
    bool stored;    // input: a store writes it
    bool exported;
    char *label;
} trn__cc_node;

typedef struct trn__cc_host {
    int position;  // nodes [0, position) exist when the step runs
    int n_args;
    int *args;
} trn__cc_host;

// An extern call: its results are nodes [position, position + n_results).
typedef struct trn__cc_extern {
    int position;  // nodes [0, position) exist when it runs
    int n_args, n_results;
    int *args;
    trn_graph_extern_fn fn;
    void *ctx;
} trn__cc_extern;

struct trn_graph {
    trn__cc_node *nodes;
    int count, cap;
    trn__cc_host *hosts;
    int n_hosts, cap_hosts;
    trn__cc_extern *externs;
    int n_externs, cap_externs;
};

// ---- schedule ------------------------------------------------------------------
typedef enum trn__cc_step_kind {
    STEP_KERNEL,
    STEP_MATMUL,
    STEP_CONV,
    STEP_HOST,
    STEP_EXTERN
} trn__cc_step_kind;

typedef struct trn__cc_step {
    trn__cc_step_kind kind;
    int node;    // the node the step produces (kernel/matmul/conv)
    int kernel;  // kernel index in the shared object (STEP_KERNEL)
    int host;    // host step number (STEP_HOST), extern call number (STEP_EXTERN)
} trn__cc_step;

// Where a node lives once scheduled.
typedef enum trn__cc_home {
    HOME_FUSED,      // computed inside its readers' kernels
    HOME_CALLER,     // input, host result or exported: caller's buffer
    HOME_WORKSPACE,  // a piece of the workspace
    HOME_NONE,       // const or view: no memory of its own
} trn__cc_home;

typedef struct trn__cc_schedule {
    int n_nodes;
    trn__cc_home *home;
    int64_t *ws_offset;  // bytes, for HOME_WORKSPACE
    size_t ws_size;
    trn__cc_step *steps;
    int n_steps;
    int n_kernels;
} trn__cc_schedule;

// Operand access: the buffer node a value is read from, and how.
typedef struct trn__cc_access {
    int buffer;  // node id whose memory is read; -1 for a const
    int64_t strides[TRN_GRAPH_MAX_DIMS];
    int64_t offset;
} trn__cc_access;

// Fails with TRN_ERROR_UNSUPPORTED when stores (trn_graph_store) cannot be
// ordered after every read of the old input values.
trn_status trn__cc_schedule_build(const trn_graph *g, trn__cc_schedule *s);
void trn__cc_schedule_free(trn__cc_schedule *s);
// Resolves how node `n` (a buffer, or a view of one, or a const) is read.
void trn__cc_access_of(const trn_graph *g, int n, trn__cc_access *a);
// Frees the extern calls' argument lists and the array (graph.c).
void trn__cc_externs_free(trn__cc_extern *e, int n);
int64_t trn__cc_numel(const trn__cc_node *n);
// The memory a gather reads (its src's access), as strides over the
// gather's own dims (src dims it does not walk contribute 0); *idx_strides
// and *idx_sizes get the stride and size of each indexed src dim.
void trn__cc_gather_access(const trn_graph *g, int n, trn__cc_access *a, int64_t *idx_strides,
                           int64_t *idx_sizes);
bool trn__cc_is_float(trn_dtype d);

// ---- render ----------------------------------------------------------------------
// Renders the graph's kernels as one C translation unit (malloc'd string).
trn_status trn__cc_render(const trn_graph *g, const trn__cc_schedule *s, char **source);

// ---- cache --------------------------------------------------------------------------
// SHA-256, streaming (sha256.c), and bytes as lower-case hex (out: 2n+1).
typedef struct trn__sha256 {
    uint32_t h[8];
    uint64_t len;
    unsigned char buf[64];
    size_t fill;
} trn__sha256;
void trn__sha256_init(trn__sha256 *c);
void trn__sha256_update(trn__sha256 *c, const void *data, size_t len);
void trn__sha256_final(trn__sha256 *c, unsigned char out[32]);
void trn__hex(const unsigned char *bytes, size_t n, char *out);

// The verified bytes of the cached object for `key` (malloc'd, *len set),
// or NULL: no entry, an entry whose MAC does not verify, or a directory
// that fails trn_compile_cache_check_dir. Never a path: the caller loads a
// private copy, so nothing can change between the check and the load.
char *trn__cc_cache_read(const char *dir, const char *key, size_t *len);
// Stores `len` bytes under `key` atomically with their MAC; errors are
// reported but non-fatal to the caller (the program still runs).
trn_status trn__cc_cache_store(const char *dir, const char *key, const char *bytes, size_t len);
// The compile lock of `key` in `dir` (locks/<key>.lock, flock): waits up to
// timeout_s for another process holding it. The lock's fd, or -1 (timed
// out) or -2 (no lock possible: a refused directory); either way the caller
// compiles anyway.
int trn__cc_lock(const char *dir, const char *key, double timeout_s);
void trn__cc_unlock(int fd);
// mkdir -p with mode 0700 for what it creates.
trn_status trn__cc_mkdir_private(const char *dir);
// Refuses a path that is a symlink, not a directory, not owned by the
// calling user, or writable by group or others (the message says which).
trn_status trn__cc_check_private_dir(const char *dir, const char *what);

// ---- jit ----------------------------------------------------------------------------
// Makes a fresh private directory (0700) for one compile in `out`: inside
// the process's scratch root, which trn-janitor removes (and whose compilers
// it kills) however the process ends; without a janitor (a warning, once),
// $TMPDIR/trn-cc-XXXXXX. *group: the process group to run compilers in (the
// janitor's; 0: our own). janitor.c.
trn_status trn__cc_scratch_dir(char *out, size_t cap, pid_t *group);
// Removes a directory made by trn__cc_scratch_dir and every file in it.
void trn__cc_scratch_remove(const char *dir);
// Runs kernel `kernel` of `p` on the program's buffer table `bufs` (one base
// address per node); returns its status (an index error, via abi).
trn_status trn__cc_kernel_launch(const trn_program *p, int kernel, void *const *bufs,
                                 const trn_kernel_abi *abi);

// The one path from generated C to a loaded shared object, for graphs
// (trn_program_compile) and NKI kernels (trn__cc_build_shared): key (source,
// compiler and its version, flags, headers, CPU) -> cached load -> per-key
// lock (another process compiling it: wait, then load) -> compile -> store
// (then the LRU bound, opts->cache_max_bytes) -> dlopen. jit.c.
typedef struct trn__cc_job {
    const char *what;   // error prefix: the public entry point
    const char *kind;   // in the lock warning: "graph", "nki kernel"
    const char *needs;  // in the missing-compiler message: who needs a C compiler
    // NULL, or a check of the loaded object (symbols, ABI): a cached object
    // that fails it is compiled again; a compiled one fails the build.
    trn_status (*check)(void *ctx, void *dl, const char *path);
    void *ctx;
} trn__cc_job;
typedef struct trn__cc_built {
    void *dl;
    char key[65];
    char *object;  // the shared object's bytes (malloc'd: the caller frees)
    size_t object_len;
    int from_cache;
    double seconds;  // the C compiler's time (0 from the cache)
} trn__cc_built;
trn_status trn__cc_build(const char *source, const trn_compile_options *opts,
                         const trn__cc_job *job, trn__cc_built *out);
// trn__cc_build for src/nki/: no check, the bytes not kept; *key gets the
// cache key.
trn_status trn__cc_build_shared(const char *source, const trn_compile_options *opts, void **dl,
                                char key[65], int *from_cache, double *seconds);

struct trn_program {
    trn_graph graph;  // a copy: runs need node shapes and strides
    trn__cc_schedule sched;
    void *dl;
    const trn_kernel_launch *launches;  // per kernel, in the shared object
    char *source;
    char *object;  // the shared object's bytes (trn_program_object)
    size_t object_len;
    char key[65];
    int from_cache;
    double compile_seconds;
    // What every run looks up, found once (a run used to scan every node
    // twice, and trn_program_checks_indices once more: ~1300 nodes in
    // GPT-2's optimizer graph): stores (they run in their input's buffer)
    // and the nodes whose buffers the caller must set.
    int checks_indices;
    int n_stores, n_caller;
    int *stores, *caller;
};

#endif
