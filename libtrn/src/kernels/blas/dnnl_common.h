// dnnl_common.h - what the oneDNN-backed kernels (matmul.c, conv.c) share:
// the engine, a per-thread stream and workspace, status translation, and a
// cache of built "plans" (primitives plus whatever a call needs around them).
//
// Internal to libtrn: nothing here is public API.
//
// Why a plan cache of our own on top of oneDNN's primitive cache (capacity
// 1024 by default): oneDNN caches primitives, but building the primitive
// descriptor that is the cache key still costs tens of microseconds per call.
// Plans are keyed by the call's full geometry (shapes, strides, dtypes,
// alpha/beta) and are never freed while the process runs, so a task may use a
// plan without holding a lock; when the cache is full, callers build a
// private plan and destroy it after the call.
#ifndef TRN_DNNL_COMMON_H
#define TRN_DNNL_COMMON_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <oneapi/dnnl/dnnl.h>
#include <oneapi/dnnl/dnnl_debug.h>

#include "../../internal.h"

// ---- loading ------------------------------------------------------------------
// libdnnl is dlopen-ed with RTLD_DEEPBIND, not linked: libtorch_cpu embeds
// its own (static, newer) oneDNN and exports some of its template instances
// (e.g. gemm_info_t<float, float, float>::jit_init's call_once lambda), and
// a normally loaded libdnnl binds those to PyTorch's copies - its GEMM then
// fails with "unimplemented" or returns garbage. DEEPBIND makes libdnnl
// resolve its own symbols first. (Sanitizer builds link libdnnl and skip
// DEEPBIND, which the sanitizer runtimes reject; the C tests do not load
// PyTorch.)
// Every oneDNN call below goes through this table; the macros keep the
// ordinary names in the kernels.
// clang-format off
#define TRN__DNNL_API(X)                                                       \
    X(dnnl_engine_create) X(dnnl_stream_create) X(dnnl_stream_destroy)         \
    X(dnnl_stream_wait) X(dnnl_status2str) X(dnnl_memory_desc_init_by_strides) \
    X(dnnl_memory_desc_init_by_tag) X(dnnl_memory_desc_equal)                  \
    X(dnnl_memory_desc_get_size) X(dnnl_memory_create) X(dnnl_memory_destroy)  \
    X(dnnl_primitive_attr_create) X(dnnl_primitive_attr_destroy)               \
    X(dnnl_primitive_attr_clone) X(dnnl_primitive_attr_set_scratchpad_mode)    \
    X(dnnl_primitive_attr_set_output_scales) X(dnnl_primitive_attr_set_post_ops) \
    X(dnnl_post_ops_create) X(dnnl_post_ops_append_sum) X(dnnl_post_ops_destroy) \
    X(dnnl_matmul_desc_init) X(dnnl_primitive_desc_create)                     \
    X(dnnl_primitive_desc_destroy) X(dnnl_primitive_desc_query)                \
    X(dnnl_primitive_desc_query_md) X(dnnl_primitive_create)                   \
    X(dnnl_primitive_destroy) X(dnnl_primitive_execute)                        \
    X(dnnl_reorder_primitive_desc_create)                                      \
    X(dnnl_dilated_convolution_forward_desc_init)                              \
    X(dnnl_dilated_convolution_backward_data_desc_init)                        \
    X(dnnl_dilated_convolution_backward_weights_desc_init)                    \
    X(dnnl_get_effective_cpu_isa) X(dnnl_sgemm)
// clang-format on

typedef struct trn__dnnl_api {
#define TRN__DNNL_MEMBER(name) __typeof__(&name) name##_fn;
    TRN__DNNL_API(TRN__DNNL_MEMBER)
#undef TRN__DNNL_MEMBER
} trn__dnnl_api;

// Filled by the first trn__dnnl_engine() call.
extern trn__dnnl_api trn__dnnl;

#define dnnl_engine_create (trn__dnnl.dnnl_engine_create_fn)
#define dnnl_stream_create (trn__dnnl.dnnl_stream_create_fn)
#define dnnl_stream_destroy (trn__dnnl.dnnl_stream_destroy_fn)
#define dnnl_stream_wait (trn__dnnl.dnnl_stream_wait_fn)
#define dnnl_status2str (trn__dnnl.dnnl_status2str_fn)
#define dnnl_memory_desc_init_by_strides (trn__dnnl.dnnl_memory_desc_init_by_strides_fn)
#define dnnl_memory_desc_init_by_tag (trn__dnnl.dnnl_memory_desc_init_by_tag_fn)
#define dnnl_memory_desc_equal (trn__dnnl.dnnl_memory_desc_equal_fn)
#define dnnl_memory_desc_get_size (trn__dnnl.dnnl_memory_desc_get_size_fn)
#define dnnl_memory_create (trn__dnnl.dnnl_memory_create_fn)
#define dnnl_memory_destroy (trn__dnnl.dnnl_memory_destroy_fn)
#define dnnl_primitive_attr_create (trn__dnnl.dnnl_primitive_attr_create_fn)
#define dnnl_primitive_attr_destroy (trn__dnnl.dnnl_primitive_attr_destroy_fn)
#define dnnl_primitive_attr_clone (trn__dnnl.dnnl_primitive_attr_clone_fn)
#define dnnl_primitive_attr_set_scratchpad_mode                                                    \
    (trn__dnnl.dnnl_primitive_attr_set_scratchpad_mode_fn)
#define dnnl_primitive_attr_set_output_scales (trn__dnnl.dnnl_primitive_attr_set_output_scales_fn)
#define dnnl_primitive_attr_set_post_ops (trn__dnnl.dnnl_primitive_attr_set_post_ops_fn)
#define dnnl_post_ops_create (trn__dnnl.dnnl_post_ops_create_fn)
#define dnnl_post_ops_append_sum (trn__dnnl.dnnl_post_ops_append_sum_fn)
#define dnnl_post_ops_destroy (trn__dnnl.dnnl_post_ops_destroy_fn)
#define dnnl_matmul_desc_init (trn__dnnl.dnnl_matmul_desc_init_fn)
#define dnnl_primitive_desc_create (trn__dnnl.dnnl_primitive_desc_create_fn)
#define dnnl_primitive_desc_destroy (trn__dnnl.dnnl_primitive_desc_destroy_fn)
#define dnnl_primitive_desc_query (trn__dnnl.dnnl_primitive_desc_query_fn)
#define dnnl_primitive_desc_query_md (trn__dnnl.dnnl_primitive_desc_query_md_fn)
#define dnnl_primitive_create (trn__dnnl.dnnl_primitive_create_fn)
#define dnnl_primitive_destroy (trn__dnnl.dnnl_primitive_destroy_fn)
#define dnnl_primitive_execute (trn__dnnl.dnnl_primitive_execute_fn)
#define dnnl_reorder_primitive_desc_create (trn__dnnl.dnnl_reorder_primitive_desc_create_fn)
#define dnnl_get_effective_cpu_isa (trn__dnnl.dnnl_get_effective_cpu_isa_fn)
#define dnnl_sgemm (trn__dnnl.dnnl_sgemm_fn)
#define dnnl_dilated_convolution_forward_desc_init                                                 \
    (trn__dnnl.dnnl_dilated_convolution_forward_desc_init_fn)
#define dnnl_dilated_convolution_backward_data_desc_init                                           \
    (trn__dnnl.dnnl_dilated_convolution_backward_data_desc_init_fn)
#define dnnl_dilated_convolution_backward_weights_desc_init                                        \
    (trn__dnnl.dnnl_dilated_convolution_backward_weights_desc_init_fn)

// oneDNN runs its primitives on an OpenMP team of its own per calling thread,
// whose workers spin after each call (libgomp's default) and compete with
// libtrn's pool for the same cores. serial_begin makes the calling thread's
// next oneDNN calls single-threaded (returns what serial_end restores), so a
// kernel can split its work over libtrn's pool instead. can_serialize is
// false when that oneDNN's OpenMP runtime was not found (the engine must
// exist first); begin/end are then no-ops.
int trn__dnnl_serial_begin(void);
void trn__dnnl_serial_end(int saved);
bool trn__dnnl_can_serialize(void);

// The first failure among the pieces of a call split over the pool: pieces
// stop once `failed` is set, the piece that set it keeps its status and
// message (libtrn's error is per thread), and the caller re-raises it on its
// own thread after the join.
typedef struct trn__split_error {
    _Atomic int failed;
    trn_status status;
    char message[TRN__ERROR_MAX];
} trn__split_error;
static inline bool trn__split_failed(trn__split_error *e) {
    return atomic_load_explicit(&e->failed, memory_order_relaxed) != 0;
}
void trn__split_error_record(trn__split_error *e, trn_status st);  // message: trn_last_error()
trn_status trn__split_error_raise(trn__split_error *e);            // TRN_SUCCESS if none

// The process-wide CPU engine, created on first use (thread-safe), after
// loading libdnnl.
trn_status trn__dnnl_engine(dnnl_engine_t *engine);
// The calling thread's oneDNN stream (created on first use, destroyed when
// the thread exits).
trn_status trn__dnnl_stream(dnnl_stream_t *stream);
// A 64-byte aligned per-thread buffer of at least `bytes` (grow-only, freed
// when the thread exits). Valid until the next call on the same thread.
trn_status trn__dnnl_workspace(size_t bytes, void **ptr);

// A second such buffer, for data that lives across several oneDNN calls
// (each of which may grow and move the workspace): convolution's blocked
// reductions keep their partial sums here.
trn_status trn__dnnl_accum_buffer(size_t bytes, void **ptr);

// A third one, for the float32 copies of a float16 matmul's or
// convolution's tensors (h16_stage.h): they live across the whole float32
// kernel, which uses the other two on every thread it runs on.
trn_status trn__dnnl_stage_buffer(size_t bytes, void **ptr);

// Sets the libtrn error for a failed oneDNN call and returns its trn status.
trn_status trn__dnnl_error(dnnl_status_t st, const char *call, const char *context);

// Evaluates a oneDNN call; on failure records "<call> failed: <reason>
// (<ctx>)" and jumps to `fail` with `st` set.
#define TRN_DNNL_TRY(call, ctx)                                                                    \
    do {                                                                                           \
        dnnl_status_t trn__ds = (call);                                                            \
        if (trn__ds != dnnl_success) {                                                             \
            st = trn__dnnl_error(trn__ds, #call, (ctx));                                           \
            goto fail;                                                                             \
        }                                                                                          \
    } while (0)

// ---- implementation choice ---------------------------------------------------
// Which kind of kernel oneDNN picked for a primitive descriptor: one of its
// optimized (jit, brgemm, gemm) kernels, its reference loops ("ref:...",
// orders of magnitude slower), or unknown when the query itself failed. Each
// caller decides what an unknown answer means (matmul keeps the primitive,
// convolution's native bfloat16 attempt refuses it).
typedef enum trn__dnnl_impl {
    TRN__DNNL_IMPL_OPTIMIZED,
    TRN__DNNL_IMPL_REFERENCE,
    TRN__DNNL_IMPL_UNKNOWN,
} trn__dnnl_impl;
trn__dnnl_impl trn__dnnl_impl_of(const_dnnl_primitive_desc_t pd);

// ---- native bfloat16 ----------------------------------------------------------
// Whether bfloat16 GEMMs and convolutions run as bfloat16 in oneDNN or on
// the float32 kernels with widened operands (the default: where the CPU has
// AVX512-BF16 and its vdpbf16ps outruns float32 FMA, see dnnl_common.c and
// bf16_rate.c). trn__dnnl_set_bf16_native forces a path (1: native where the
// CPU has the instruction, 0: float32) or restores the default (-1). One
// switch for both kernels (public as trn_matmul_bf16_native /
// trn_matmul_set_bf16_native).
bool trn__dnnl_bf16_native(void);
void trn__dnnl_set_bf16_native(int forced);
// Multiply-adds per second of vdpbf16ps over float32 FMA on this core,
// measured (bf16_rate.c; ~50 us); 0 where it cannot be measured.
double trn__bf16_dot_rate_ratio(void);

// Whether oneDNN dispatches to AMX tiles (the CPU has AMX-BF16, the OS lets
// the process use the tile state, ONEDNN_MAX_CPU_ISA allows it): its
// bfloat16 kernels that use the tiles want their own layouts (see conv.c).
// False when oneDNN cannot be loaded. trn__dnnl_set_amx forces the answer
// (1 or 0; -1 asks oneDNN again) so that a test can run the AMX layout
// choices on any CPU.
bool trn__dnnl_amx(void);
void trn__dnnl_set_amx(int forced);

// ---- plan cache --------------------------------------------------------------
#define TRN__PLAN_KEY_MAX 512

// Looks up a plan by key (key_size bytes, <= TRN__PLAN_KEY_MAX). Returns NULL
// when absent.
void *trn__plan_find(const void *key, size_t key_size);
// Inserts `plan` under `key`. Returns the plan stored under the key (another
// thread's if it won the race, in which case the caller destroys its own),
// or NULL when the cache is full (the caller owns and destroys `plan`).
void *trn__plan_insert(const void *key, size_t key_size, void *plan);

// Byte offsets [lo, hi] (inclusive of one element) that a strided view
// touches; false on overflow. Sizes must all be > 0.
int trn__view_span(int ndim, const int64_t *sizes, const int64_t *strides, size_t esize,
                   int64_t *lo, int64_t *span);

#endif
