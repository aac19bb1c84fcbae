// trn/compiler.h - the graph compiler: build a graph, compile it to fused C,
// run it on a stream.
//
// Owner: src/compiler/, folders in pipeline order:
//   graph/     the IR and this builder API (validation happens here)
//   schedule/  which nodes become buffers, kernels and steps; buffer planning
//   render/    one C translation unit per graph, one function per kernel
//   jit/       the system C compiler, dlopen, and running a program
//   cache/     compiled shared objects on disk, keyed by a hash of the source
//
// Example (y = relu(x + 1) on a 4x8 float32 input):
//   trn_graph *g; trn_graph_create(&g);
//   int x, one, s, y, slot;
//   int64_t sz[2] = {4, 8}, st[2] = {8, 1};
//   trn_graph_input(g, TRN_DTYPE_F32, 2, sz, st, &x);
//   trn_graph_const(g, TRN_DTYPE_F32, 1.0, 1, 0, NULL, &one);
//   trn_graph_pointwise(g, TRN_EW_ADD, TRN_DTYPE_F32, TRN_DTYPE_F32, 2,
//                       (int[]){x, one}, (double[]){1, 0, 0, 0}, &s);
//   trn_graph_pointwise(g, TRN_EW_RELU, TRN_DTYPE_F32, TRN_DTYPE_F32, 1, &s, NULL, &y);
//   trn_graph_export(g, y, st);
//   trn_program *p; trn_program_compile(g, &opts, &p);      // gcc + dlopen
//   trn_run *r; trn_run_create(p, workspace, &r);
//   trn_run_set_buffer(r, x, x_ptr); trn_run_set_buffer(r, y, y_ptr);
//   int host; trn_run_continue(r, stream, &host);           // host == -1: done
//   trn_run_finish(r, stream);
//
// Nodes are numbered in creation order (which must be topological: inputs of
// a node exist before it). A node's value is a dense tensor of its sizes.
// Buffers: graph inputs and host results are given by the caller; nodes
// exported with trn_graph_export are written into caller buffers; every
// other node that must live in memory gets a piece of one workspace whose
// size the program reports (pieces are reused once their last reader ran).
// All strides are in ELEMENTS. Every function returns a trn_status and, on
// failure, leaves a message (trn_last_error) naming the node.
#ifndef TRN_COMPILER_H
#define TRN_COMPILER_H

#include <stddef.h>
#include <stdint.h>

#include "trn/dtype.h"
#include "trn/elementwise.h"
#include "trn/status.h"
#include "trn/stream.h"

#ifdef __cplusplus
extern "C" {
#endif

// Version of the compiler's output and of its fixed gcc flags: part of
// every disk cache key.
#define TRN_COMPILER_VERSION "openneuron-compiler-4"
#define TRN_GRAPH_MAX_DIMS 8

typedef struct trn_graph trn_graph;
typedef struct trn_program trn_program;
typedef struct trn_run trn_run;

typedef enum trn_graph_reduce_op {
    TRN_GRAPH_SUM,
    TRN_GRAPH_PROD,
    TRN_GRAPH_MAX,  // NaN propagates
    TRN_GRAPH_MIN,
} trn_graph_reduce_op;

// How an out-of-range index is reported (PyTorch's wording per op). The
// run that hits one fails: the first bad index of a kernel becomes the
// stream's error, the element reads 0 (nothing is read out of bounds) and
// the rest of the kernel's steps still run.
typedef enum trn_graph_index_error {
    // "index 7 is out of bounds for dimension 0 with size 5",
    // TRN_ERROR_INVALID_ARGUMENT (indexing, index_put: an IndexError)
    TRN_INDEX_ERROR_BOUNDS,
    // "index out of range in self", TRN_ERROR_INVALID_ARGUMENT
    // (index_select, embedding: an IndexError)
    TRN_INDEX_ERROR_SELF,
    // the BOUNDS wording, TRN_ERROR_KERNEL (gather, scatter: a RuntimeError)
    TRN_INDEX_ERROR_GATHER,
    // x[mask] = values with a count of selected elements other than the
    // values' size along the selection: the index is -1 - count and the dim's
    // size is the values' (eager's "shape mismatch" wording), TRN_ERROR_KERNEL
    TRN_INDEX_ERROR_COUNT,
    // masked_scatter with fewer source elements than selected ones (the
    // index is -1 - count): "Number of elements of source < number of ones
    // in mask", TRN_ERROR_KERNEL
    TRN_INDEX_ERROR_SOURCE,
} trn_graph_index_error;

typedef enum trn_conv_kind {
    TRN_CONV_FORWARD,           // (input, weight[, bias]) -> output
    TRN_CONV_BACKWARD_DATA,     // (grad_output, weight) -> grad_input
    TRN_CONV_BACKWARD_WEIGHTS,  // (input, grad_output) -> grad_weight
} trn_conv_kind;

trn_status trn_graph_create(trn_graph **graph);
void trn_graph_free(trn_graph *graph);  // NULL is fine

// ---- nodes ----------------------------------------------------------------
// A buffer the caller passes to every run (trn_run_set_buffer(node)).
trn_status trn_graph_input(trn_graph *g, trn_dtype dtype, int ndim, const int64_t *sizes,
                           const int64_t *strides, int *node);
// A tensor of `sizes` whose every element is the value (.f for floating
// dtypes, .i otherwise). Consts fuse into every reader and never take memory.
trn_status trn_graph_const(trn_graph *g, trn_dtype dtype, double f, int64_t i, int ndim,
                           const int64_t *sizes, int *node);
// An index-valued tensor of `sizes`: element (i0..) is
// start + step * (offset + sum(i_k * coef_k)) in `dtype` (computed in
// double for floating dtypes, int64 otherwise): arange and its views, and
// the coordinates that pads and concatenations select with. Never takes
// memory unless viewed or exported.
trn_status trn_graph_iota(trn_graph *g, trn_dtype dtype, int ndim, const int64_t *sizes,
                          const int64_t *coef, int64_t offset, double start, double step,
                          int *node);
// Elementwise op of trn/scalar.h computed in `compute` (the op's compute
// dtype, as for trn_ew_launch), result of dtype `out`. Every input has the
// node's sizes, or is a const; `params` (4 values, NULL = zeros) as in
// TRN_EW_OP_LIST.
trn_status trn_graph_pointwise(trn_graph *g, trn_ew_op op, trn_dtype compute, trn_dtype out,
                               int n_in, const int *in, const double *params, int *node);
// Conversion to `dtype` with PyTorch's rules (float -> int truncates,
// anything -> bool is != 0, 16-bit floats round to nearest even).
trn_status trn_graph_cast(trn_graph *g, int in, trn_dtype dtype, int *node);
// A strided view of `in`'s memory: element (i0..) is at
// offset + sum(i_k * strides_k) of `in` laid out with its layout strides
// (set by trn_graph_export / trn_graph_set_layout; contiguous by default).
// Forces `in` into memory unless it is a const.
trn_status trn_graph_view(trn_graph *g, int in, int ndim, const int64_t *sizes,
                          const int64_t *strides, int64_t offset, int *node);
// Reduction over the dims whose bit is set in `dims_mask`; the result keeps
// them with size 1. Floating sums and products accumulate in double.
trn_status trn_graph_reduce(trn_graph *g, trn_graph_reduce_op op, int in, trn_dtype out,
                            uint32_t dims_mask, int *node);
// Batched matrix product through the oneDNN kernel (an extern call):
// a is (batch, m, k), b is (batch, k, n), both 3-d nodes of one floating
// dtype; the result is (batch, m, n) of that dtype. alpha scales the product.
trn_status trn_graph_matmul(trn_graph *g, int a, int b, double alpha, int *node);
// Convolution through the oneDNN kernels (an extern call). `x` and `y` are
// the kernel's two inputs in the order of trn_conv_kind; `bias` is -1 or a
// 1-d node (forward only). `out_sizes` is the result's shape.
trn_status trn_graph_conv(trn_graph *g, trn_conv_kind kind, int x, int y, int bias, int spatial,
                          const int64_t *stride, const int64_t *padding, const int64_t *dilation,
                          int64_t groups, int out_ndim, const int64_t *out_sizes, int *node);
// Indexed read: element i (the sizes of the index nodes, which all have
// them: broadcast with views first) of the result is `src` at coordinates
// c where c[out_to_src[j]] = i_j for the result dims j that walk a `src`
// dim (out_to_src[j] >= 0; at most once per src dim, i_j must stay below
// that dim's size), c[src_dims[k]] = index k's value (int64; negative
// values count from the end when `wrap` is set; out of [0, size) fails the
// run as `err` says), and 0 in every other src dim. Covers gather,
// index_select, embedding and advanced indexing. At most 2 indices. Fuses
// like a pointwise node (the indices too); `src` is read from memory.
trn_status trn_graph_gather(trn_graph *g, int src, int n_idx, const int *idx, const int *src_dims,
                            const int *out_to_src, int wrap, trn_graph_index_error err, int *node);
// Indexed write: the result is `self` (any node) with, for each element i
// of `index`'s sizes, element c of it (c as for trn_graph_gather, with
// `self` for `src`, one index at self dim `dim`) replaced by `src`'s
// element i (`src` has the index's sizes), or, with `accumulate` = 1 + a
// trn_graph_reduce_op, folded into it (1: added; 2: multiplied; 3, 4: max,
// min, a NaN source winning, as eager scatter_reduce). Elements are written
// one at a time in row-major order, so duplicate positions accumulate
// deterministically and a plain write keeps the last. `index` and `src` are
// read from memory.
trn_status trn_graph_scatter(trn_graph *g, int self, int index, int src, int dim,
                             const int *out_to_self, int accumulate, int wrap,
                             trn_graph_index_error err, int *node);
// A host step: at this point of a run, trn_run_continue returns `*step` so
// the caller can run something the compiler cannot (an eager op) on `args`
// (which become caller-visible: each must be exported, an input or a host
// result). Its results are declared with trn_graph_host_result and set with
// trn_run_set_buffer before continuing.
trn_status trn_graph_host_call(trn_graph *g, int n_args, const int *args, int *step);
trn_status trn_graph_host_result(trn_graph *g, int step, trn_dtype dtype, int ndim,
                                 const int64_t *sizes, const int64_t *strides, int *node);
// The node is written into a caller buffer with these strides (dense, no
// overlap); the caller passes it with trn_run_set_buffer.
trn_status trn_graph_export(trn_graph *g, int node, const int64_t *strides);
// An in-place update of a graph input (how a functionalized graph ends for an
// optimizer's parameters and states): when the run ends, `input`'s buffer
// holds `src`'s value, converted to the input's dtype as trn_graph_cast does.
// `src` has the input's sizes; the input's strides must be dense and
// non-overlapping; one store per input. *node is the store node: a kernel
// writing straight into the input's buffer (no trn_run_set_buffer for it),
// which computes `src` itself when nothing else reads it. The schedule makes
// sure no step reads the input's old values after the store overwrote them
// (first by putting every stored value in memory, so stores are plain
// copies); when even that cannot be ensured, trn_program_compile fails with
// TRN_ERROR_UNSUPPORTED and the caller copies eagerly instead.
trn_status trn_graph_store(trn_graph *g, int input, int src, int *node);
// Strides the node gets if it is put in memory (dense, no overlap).
trn_status trn_graph_set_layout(trn_graph *g, int node, const int64_t *strides);
// Names the node in the generated source (an FX node name). Copied.
trn_status trn_graph_set_label(trn_graph *g, int node, const char *label);
int trn_graph_node_count(const trn_graph *g);

// ---- compile -----------------------------------------------------------------
// Fields after `name` may be left zero (the defaults).
typedef struct trn_compile_options {
    const char *include_dir;  // where trn/kernel_abi.h and trn/scalar.h live
    const char *cache_dir;    // disk cache (see trn_compile_cache_check_dir); NULL: none
    const char *debug_dir;    // NULL, or a directory for graph.c, command, log
    const char *name;         // file stem in debug_dir (e.g. "graph_3_fw")
    int opt_level;            // the C compiler's -O level + 1 (1..4 = -O0..-O3); 0: -O2
    const char *cc_flags;     // extra C compiler flags, split on blanks; NULL: none
    // Processes sharing cache_dir compile each key once: a compile waits up
    // to this long for another process compiling the same key (a lock the
    // kernel drops if that process dies), then compiles itself. 0: 1200 s;
    // < 0: do not wait.
    double lock_timeout_s;
    // > 0: after storing an entry, the least recently used entries are
    // removed until cache_dir (with its aot/ folder) holds at most this.
    int64_t cache_max_bytes;
} trn_compile_options;

// Schedules, renders, compiles (or loads from the disk cache) and dlopens.
// The graph may be freed afterwards. The compiler is $CC (default gcc); a
// compiler that cannot be started fails with a message saying how to get one.
trn_status trn_program_compile(const trn_graph *g, const trn_compile_options *opts,
                               trn_program **program);
void trn_program_free(trn_program *p);
size_t trn_program_workspace_size(const trn_program *p);
int trn_program_kernel_count(const trn_program *p);
// 1 when the shared object came from the disk cache (nothing was compiled).
int trn_program_from_cache(const trn_program *p);
double trn_program_compile_seconds(const trn_program *p);  // C compiler only
const char *trn_program_source(const trn_program *p);      // the rendered C
const char *trn_program_cache_key(const trn_program *p);   // hex sha256
// The shared object's bytes (as compiled or verified from the cache), for
// carrying the program to another cache (*len set); NULL if none.
const void *trn_program_object(const trn_program *p, size_t *len);
// 1 when a run may fail on an out-of-range index (the program gathers or
// scatters): callers that must raise at the op synchronize after the run.
int trn_program_checks_indices(const trn_program *p);

// ---- run -------------------------------------------------------------------
// A run holds the buffer addresses of one call. `workspace` has at least
// trn_program_workspace_size bytes (64-byte aligned) and stays valid until
// the stream has run the work.
trn_status trn_run_create(const trn_program *p, void *workspace, trn_run **run);
trn_status trn_run_set_buffer(trn_run *run, int node, void *ptr);
// Launches the next steps on `stream` up to the next host step (*host_step
// set to its number) or to the end (*host_step = -1).
trn_status trn_run_continue(trn_run *run, trn_stream *stream, int *host_step);
// Releases the run once the stream has executed its work (a stream task).
trn_status trn_run_finish(trn_run *run, trn_stream *stream);

// sha256 of `len` bytes as 64 hex digits + NUL (used by the cache key).
void trn_sha256_hex(const void *data, size_t len, char out[65]);

// ---- disk cache trust ------------------------------------------------------
// A cache directory is used only when it is a directory (not a symlink) owned
// by the calling user and not writable by group or others; it is created 0700
// when missing. TRN_SUCCESS, or an error whose message says why it is refused.
trn_status trn_compile_cache_check_dir(const char *dir);
// HMAC-SHA256 (64 hex digits + NUL) of `label` and `len` bytes under the
// user's cache key: 32 random bytes in $XDG_CONFIG_HOME/openneuron/
// compile-cache.key (default ~/.config/...), created 0600 on first use and
// refused unless private. Every cache entry carries it, so bytes that another
// user planted never load; the label (the entry's key) keeps an entry from
// being passed off under another name.
trn_status trn_compile_cache_mac(const char *label, const void *data, size_t len, char out[65]);
// Stores `len` bytes as the entry for `key` (64 hex digits) in `dir`, with
// its MAC under the user's key: how a cache bundle the user chose to load
// (torch.compiler.load_cache_artifacts) enters their cache.
trn_status trn_compile_cache_store(const char *dir, const char *key, const void *bytes, size_t len);
// Removes the least recently used entries (<key>.so + .mac, aot/<key>.bin;
// a hit counts as a use) until `dir` holds at most max_bytes of them.
// `keep` (a key, or NULL) is never removed. Returns the bytes removed via
// *removed (may be NULL).
trn_status trn_compile_cache_evict(const char *dir, int64_t max_bytes, const char *keep,
                                   int64_t *removed);

#ifdef __cplusplus
}
#endif
#endif
