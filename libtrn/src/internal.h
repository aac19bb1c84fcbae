// internal.h - declarations shared between libtrn's translation units.
//
// Nothing here is public API: names carry the trn__ prefix. They are exported
// from libtrn.so (default visibility) so that the tests can drive the parsers
// and the kernels' memory-access hooks directly.
#ifndef TRN_INTERNAL_H
#define TRN_INTERNAL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "trn/trn.h"

#if defined(__GNUC__)
#define TRN__PRINTF(fmt_index, first_arg) __attribute__((format(printf, fmt_index, first_arg)))
#else
#define TRN__PRINTF(fmt_index, first_arg)
#endif

// Longest error message kept (per thread, and per stream for deferred errors).
#define TRN__ERROR_MAX 1024

// ---- once ------------------------------------------------------------------
// Runs `init` once per process, like pthread_once, but once it has run each
// call costs one acquire load: the per-op paths (allocation, launch, logging,
// stats) ask for their settings several times per op, and pthread_once is a
// library call every time. Returns pthread_once's result (0 once `init` ran).
static inline int trn__once_fast(pthread_once_t *once, atomic_bool *ready, void (*init)(void)) {
    if (atomic_load_explicit(ready, memory_order_acquire)) return 0;
    int rc = pthread_once(once, init);
    if (rc == 0) atomic_store_explicit(ready, true, memory_order_release);
    return rc;
}

// ---- status.c --------------------------------------------------------------
// Formats the calling thread's last-error message and returns `status`, so an
// error path reads `return trn__set_error(TRN_ERROR_..., "...", ...);`.
trn_status trn__set_error(trn_status status, const char *fmt, ...) TRN__PRINTF(2, 3);

// ---- runtime.c -------------------------------------------------------------
// Settings read from the environment once, before any stream or block exists.
typedef struct trn__config {
    bool async;                // TORCH_NEURONX_ENABLE_ASYNC_NRT (default on)
    bool launch_blocking;      // NEURON_LAUNCH_BLOCKING
    bool protect;              // TORCH_NEURONX_DEBUG_PROTECT_MEMORY
    bool poison;               // TORCH_NEURONX_DEBUG_POISON_FREED
    size_t capacity;           // bytes per device (0 when capacity_error is set)
    char capacity_error[256];  // why TORCH_NEURONX_HBM_SIZE was rejected
} trn__config;

const trn__config *trn__config_get(void);
// TRN_ERROR_FORKED (with its message) in a child forked after init whose
// runtime could not be restored (fork.c); TRN_SUCCESS otherwise.
trn_status trn__fork_check(void);
// Fork check + validated device index (does not initialise the runtime).
trn_status trn__device_enter(int device);

// ---- device.c --------------------------------------------------------------
// Device count for the given values of NEURON_RT_VISIBLE_CORES and
// NEURON_RT_NUM_CORES (NULL = unset). An invalid value gives 0 and a reason
// in `why` (which is "" otherwise).
int trn__device_parse_env(const char *visible_cores, const char *num_cores, char *why,
                          size_t why_size);

// ---- size.c ----------------------------------------------------------------
// "16G", "512M", "4096K", "123" (optionally followed by "B" or "iB") -> bytes.
bool trn__parse_size(const char *text, size_t *bytes);
// "1.00 GiB", "12.00 MiB", "512 bytes".
void trn__format_bytes(char *buf, size_t size, uint64_t bytes);
uint64_t trn__now_ns(void);  // CLOCK_MONOTONIC
void trn__cpu_relax(void);   // pause instruction for spin loops
// How a thread that waits for another (a stream's synchroniser, an assisting
// synchroniser in parallel.c) spins before it sleeps: long enough to catch a
// small task's end, short enough not to burn a core; past TRN__SYNC_YIELD_NS
// it yields between checks, because when every core is busy the thread being
// waited for may need ours.
#define TRN__SYNC_SPIN_NS 50000
#define TRN__SYNC_YIELD_NS 10000

// Lock, unlock and wait on mutexes and condition variables that libtrn
// initialised itself. These fail only if that state is corrupt (never because
// of a user's arguments), so a failure reports the call and aborts rather
// than continuing with a broken invariant.
_Noreturn void trn__die(const char *what, int rc);
static inline void trn__lock(pthread_mutex_t *m) {
    int rc = pthread_mutex_lock(m);
    if (rc != 0) trn__die("pthread_mutex_lock", rc);
}
static inline void trn__unlock(pthread_mutex_t *m) {
    int rc = pthread_mutex_unlock(m);
    if (rc != 0) trn__die("pthread_mutex_unlock", rc);
}
static inline void trn__wait(pthread_cond_t *c, pthread_mutex_t *m) {
    int rc = pthread_cond_wait(c, m);
    if (rc != 0) trn__die("pthread_cond_wait", rc);
}
static inline void trn__signal(pthread_cond_t *c) {
    int rc = pthread_cond_signal(c);
    if (rc != 0) trn__die("pthread_cond_signal", rc);
}
static inline void trn__broadcast(pthread_cond_t *c) {
    int rc = pthread_cond_broadcast(c);
    if (rc != 0) trn__die("pthread_cond_broadcast", rc);
}

// ---- memory.c --------------------------------------------------------------
// Size a request of nbytes occupies in the cache (see memory.h).
size_t trn__mem_round_size(size_t nbytes);
// Size of the host segment reserved for a rounded request the cache cannot
// serve (outside protect mode).
size_t trn__mem_segment_size(size_t size);
// Kernels bracket every access to [ptr, ptr + nbytes) with these. In protect
// mode they make the device block holding ptr accessible (reference-counted,
// so overlapping accesses from several streams work); otherwise, and for host
// pointers, they do nothing. begin fails if the range leaves its block.
trn_status trn__mem_access_begin(const void *ptr, size_t nbytes);
void trn__mem_access_end(const void *ptr, size_t nbytes);
// The ranges one task touches, opened together before it computes and closed
// in reverse after (each kernel used to keep its own copy of this). Null or
// empty ranges are skipped. begin opens none if more than TRN__ACCESS_MAX
// were added, and on a failure closes what it opened: end is always safe.
enum { TRN__ACCESS_MAX = 20 };
typedef struct trn__access_set {
    const void *ptr[TRN__ACCESS_MAX];
    size_t nbytes[TRN__ACCESS_MAX];
    int count, begun;
} trn__access_set;
void trn__access_add(trn__access_set *set, const void *ptr, size_t nbytes);
trn_status trn__access_begin(trn__access_set *set);
void trn__access_end(trn__access_set *set);
// Device owning ptr (interior pointers allowed), or -1 for host memory. Sets
// no error.
int trn__mem_device_of(const void *ptr);

// ---- stream.c --------------------------------------------------------------
// Waits until the stream has run every task launched before the call, without
// touching its deferred error (the allocator uses this before it recycles
// memory).
void trn__stream_wait_idle(trn_stream *stream);
// Waits for the tasks already launched on `stream`, without running its
// pending hook (safe inside a deleter, which a hook's flush may call).
void trn__stream_wait_launched(trn_stream *stream);
// The same for every stream of the device that exists.
void trn__device_wait_idle(int device);
// Counters of launched and finished tasks; a block freed when launched == n
// is safe to hand to the host once completed >= n.
uint64_t trn__stream_launched(const trn_stream *stream);
uint64_t trn__stream_completed(const trn_stream *stream);
// Returns and clears the stream's deferred error, copying its message to the
// calling thread.
trn_status trn__stream_take_error(trn_stream *stream);
// Pool index of a stream: 0 for the default stream, 1..TRN_STREAM_POOL_SIZE.
int trn__stream_index(const trn_stream *stream);

// ---- observe/ (trace.c, metrics.c) ----------------------------------------
#include "trn/metrics.h"
#include "trn/trace.h"
// Bytes a traced launch puts before the task's own arguments.
#define TRN__TRACE_HEADER 320
// While tracing: writes the traced task's arguments (header + args) to out
// (TRN__TRACE_HEADER + args_size bytes), sets *out_fn and returns the size.
size_t trn__trace_wrap(int device, int64_t stream, trn_task_fn fn, const void *args,
                       size_t args_size, void *out, trn_task_fn *out_fn);
// Kind, name (a string literal) and bytes of the calling thread's next
// traced launch; call only while trn_trace_active().
void trn__trace_mark_next(trn_activity_kind kind, const char *name, uint64_t bytes);
void trn__trace_clear_next(void);
// Fills an activity with the calling thread's current label.
void trn__trace_fill(trn_activity *a, int device, int64_t stream, trn_activity_kind kind,
                     const char *name, uint64_t bytes);

// Counts a copy by direction (metrics) and names it for the trace.
void trn__copy_observe(trn_stream *stream, const void *dst, const void *src, uint64_t bytes);

// Per-device live figures in the stats page.
static inline void trn__stats_launch(int device) {
    trn_stats_device *d = &trn_stats_page_get()->devices[device];
    __atomic_fetch_add(&d->counters[TRN_COUNTER_KERNEL_LAUNCHES], 1, __ATOMIC_RELAXED);
    if (!__atomic_load_n(&d->in_use, __ATOMIC_RELAXED))
        __atomic_store_n(&d->in_use, 1, __ATOMIC_RELAXED);
}
static inline void trn__stats_running(int device, int64_t delta) {
    __atomic_fetch_add(&trn_stats_page_get()->devices[device].running, (uint64_t)delta,
                       __ATOMIC_RELAXED);
}

// ---- fork.c ------------------------------------------------------------------
// A child forked from a process that used the device keeps using it. Each
// owner of a lock takes it before fork (prepare) and releases it after, in
// parent and child alike (the forking thread, the child's only one, holds it);
// streams also reset their worker state in the child. fork.c calls them in
// the order in which locks nest.
// pthread_atfork's result.
int trn__fork_handlers_install(void);
void trn__stream_fork_prepare(void);
void trn__stream_fork_parent(void);
bool trn__stream_fork_child(void);  // false: a condition variable failed
void trn__mem_fork_prepare(void);
void trn__mem_fork_release(void);
void trn__wcache_fork_prepare(void);  // the weight cache's table (nests inside the allocator's)
void trn__wcache_fork_release(void);
void trn__host_fork_prepare(void);
void trn__host_fork_release(void);
void trn__plan_fork_prepare(void);
void trn__plan_fork_release(void);
void trn__trace_fork_prepare(void);
void trn__trace_fork_release(void);
void trn__metrics_fork_prepare(void);
void trn__metrics_fork_release(void);
// Set by the child handler when it could not restore the runtime.
void trn__fork_mark_bad(void);

#endif
