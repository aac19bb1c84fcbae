// stream.c - owns streams: the per-device table (default stream + pool),
// each stream's bounded task queue, its execution (a lazily started worker
// thread, or inline on the launching thread), completion counters that
// synchronisation waits on, the deferred ("sticky") error, and the per-thread
// current stream. Device-wide synchronisation lives here too because it is a
// walk over this table. The queue is a byte ring holding each task's header
// followed by its private copy of the arguments, so a launch costs one memcpy
// and no allocation; an entry that does not fit before the ring's end is
// preceded by a padding entry.
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../internal.h"
#include "../observe/trace_next.h"
#include "parallel_assist.h"
#include "stream_drain.h"
#include "trn/stream_hook.h"

#define RING_BYTES ((size_t)256 * 1024)
#define TRN_CACHE_LINE 64
#define ENTRY_ALIGN 32
// How long an idle worker spins before sleeping. Longer: waking a sleeping
// worker costs the launching thread a futex wake, ~10 us here (launch@200us
// in bench/c/stream_overhead.c) against ~0.2 us, and a decode token's Python
// pauses between ops for 50-500 us several times a token (HF's logits and
// stopping code). OpenMP runtimes spin for as long or longer.
#define WORKER_SPIN_NS 500000

// What a launch under NEURON_LAUNCH_BLOCKING waits for: the task's own status.
typedef struct task_result {
    trn_status status;
    char message[TRN__ERROR_MAX];
} task_result;

typedef struct task_header {
    _Alignas(ENTRY_ALIGN) trn_task_fn fn;  // NULL: padding to the ring's end
    task_result *result;                   // blocking launcher, or NULL
    uint32_t len;                          // whole entry, header included
    uint32_t args_size;
} task_header;

_Static_assert(sizeof(task_header) % ENTRY_ALIGN == 0, "header alignment");
_Static_assert(RING_BYTES % ENTRY_ALIGN == 0, "ring alignment");

struct trn_stream {
    int device;
    int index;  // 0 = default stream, 1..TRN_STREAM_POOL_SIZE = pool
    int priority;
    pthread_mutex_t mu;
    pthread_cond_t work_cv;  // the worker sleeps here
    pthread_cond_t done_cv;  // synchronisers and launchers facing a full ring
    // Inline mode: keeps tasks of this stream in order when several threads
    // launch on it.
    pthread_mutex_t exec_mu;
    unsigned char *ring;
    // The worker consumes without mu: launchers (serialised by mu) write an
    // entry into free space, then add its bytes to `used`; the worker runs
    // the entries that `used` counts from `head`, then subtracts them. A lock
    // both sides took for every task made them queue on each other's futex
    // when a launch and a task's end coincided. The data always lies in
    // [tail - used, tail) modulo RING_BYTES. What launchers write on every
    // launch, what the worker writes on every task and the count both write
    // lie on separate cache lines, so one side's stores do not take away the
    // line the other is about to write.
    _Alignas(TRN_CACHE_LINE) size_t tail;  // the launchers' write offset, guarded by mu
    atomic_uint_fast64_t launched;
    _Alignas(TRN_CACHE_LINE) size_t head;  // the worker's read offset (only the worker's)
    atomic_uint_fast64_t completed;
    _Alignas(TRN_CACHE_LINE) atomic_uint_fast64_t used;
    // Threads in done_cv. Atomic so that the worker can skip the lock when
    // nobody waits: it bumps `completed`, then reads this, while a waiter
    // bumps this, then reads `completed` (both seq_cst), so one of them
    // always sees the other.
    atomic_int waiters;
    // Set under mu; atomic so that a synchroniser can read it without mu
    // and assist the worker's kernels (wait_completed).
    atomic_bool worker_started;
    // Set under mu before the worker re-checks `used` and sleeps; a launcher
    // adds to `used`, then reads this (both seq_cst), so either the worker
    // sees the entry or the launcher sees it asleep and signals work_cv.
    atomic_bool worker_sleeping;
    // Lowest completion count an assisting synchroniser sleeps for
    // (UINT64_MAX: none); see parallel_assist.h.
    atomic_uint_fast64_t assist_wake;
    trn_status error;  // first deferred error, guarded by mu
    char error_message[TRN__ERROR_MAX];
    _Alignas(TRN_CACHE_LINE) atomic_bool pending;  // held work above libtrn
                                                   // (trn_stream_mark_pending)
};

#define STREAMS_PER_DEVICE (1 + TRN_STREAM_POOL_SIZE)

static pthread_mutex_t g_table_mu = PTHREAD_MUTEX_INITIALIZER;
static trn_stream *_Atomic g_streams[TRN_MAX_DEVICES][STREAMS_PER_DEVICE];
static atomic_uint g_next_pool[TRN_MAX_DEVICES];
static _Thread_local trn_stream *tl_current[TRN_MAX_DEVICES];
// The stream whose worker this thread is (NULL on other threads).
static _Thread_local trn_stream *tl_worker_of;

bool trn_stream_async_enabled(void) { return trn__config_get()->async; }

// ---- held work (trn_stream_set_pending_hook) ----------------------------------

static _Atomic(trn_pending_hook) g_pending_hook;

void trn_stream_set_pending_hook(trn_pending_hook hook) { atomic_store(&g_pending_hook, hook); }

void trn_stream_mark_pending(trn_stream *stream) {
    if (stream != NULL) atomic_store(&stream->pending, true);
}

// Runs the hook once if the stream is marked (the mark is cleared first, so
// the hook's own launches pass straight through). Cost when nothing is
// held: one relaxed load.
static trn_status pending_run(trn_stream *s, int why) {
    if (!atomic_load_explicit(&s->pending, memory_order_relaxed)) return TRN_SUCCESS;
    if (!atomic_exchange(&s->pending, false)) return TRN_SUCCESS;
    trn_pending_hook hook = atomic_load(&g_pending_hook);
    if (hook == NULL) return TRN_SUCCESS;
    char msg[TRN__ERROR_MAX] = "";
    // The held kernels are not the launch the caller named (a copy's Memcpy).
    trn__trace_next next;
    trn__trace_stash_next(&next);
    trn_status st = hook(s, why, msg, sizeof msg);
    trn__trace_restore_next(&next);
    if (st == TRN_SUCCESS) return st;
    return trn__set_error(st, "%s", msg[0] ? msg : "held eager work failed to launch");
}

// For waits, which report errors through the stream: a failed hook becomes
// the stream's deferred error.
static void pending_run_sticky(trn_stream *s) {
    trn_status st = pending_run(s, TRN_PENDING_SYNC);
    if (st == TRN_SUCCESS) return;
    trn__lock(&s->mu);
    if (s->error == TRN_SUCCESS) {
        s->error = st;
        snprintf(s->error_message, sizeof s->error_message, "%s", trn_last_error());
    }
    trn__unlock(&s->mu);
}

// ---- table --------------------------------------------------------------------

static trn_stream *stream_new(int device, int index) {
    trn_stream *s = aligned_alloc(TRN_CACHE_LINE, sizeof *s);
    if (s == NULL) return NULL;
    memset(s, 0, sizeof *s);
    s->device = device;
    s->index = index;
    atomic_init(&s->assist_wake, UINT64_MAX);
    int stage = 0;
    if (pthread_mutex_init(&s->mu, NULL) != 0) goto fail;
    stage = 1;
    if (pthread_mutex_init(&s->exec_mu, NULL) != 0) goto fail;
    stage = 2;
    if (pthread_cond_init(&s->work_cv, NULL) != 0) goto fail;
    stage = 3;
    if (pthread_cond_init(&s->done_cv, NULL) != 0) goto fail;
    return s;
fail:
    if (stage > 2) pthread_cond_destroy(&s->work_cv);
    if (stage > 1) pthread_mutex_destroy(&s->exec_mu);
    if (stage > 0) pthread_mutex_destroy(&s->mu);
    free(s);
    return NULL;
}

// The stream (device, index), created on first use. Device already checked.
static trn_status stream_get(int device, int index, trn_stream **out) {
    trn_stream *s = atomic_load(&g_streams[device][index]);
    if (s == NULL) {
        trn__lock(&g_table_mu);
        s = atomic_load(&g_streams[device][index]);
        if (s == NULL) {
            s = stream_new(device, index);
            if (s != NULL) atomic_store(&g_streams[device][index], s);
        }
        trn__unlock(&g_table_mu);
        if (s == NULL)
            return trn__set_error(TRN_ERROR_SYSTEM, "could not create stream %d of neuron:%d",
                                  index, device);
    }
    *out = s;
    return TRN_SUCCESS;
}

static trn_status stream_enter(int device, trn_stream **out) {
    if (out == NULL)
        return trn__set_error(TRN_ERROR_INVALID_ARGUMENT, "stream output pointer is NULL");
    trn_status st = trn_runtime_init();
    if (st == TRN_SUCCESS) st = trn_device_check(device);
    return st;
}

trn_status trn_stream_get_default(int device, trn_stream **stream) {
    trn_status st = stream_enter(device, stream);
    return st != TRN_SUCCESS ? st : stream_get(device, 0, stream);
}

trn_status trn_stream_create(int device, int priority, trn_stream **stream) {
    trn_status st = stream_enter(device, stream);
    if (st != TRN_SUCCESS) return st;
    unsigned n = atomic_fetch_add(&g_next_pool[device], 1u);
    st = stream_get(device, 1 + (int)(n % TRN_STREAM_POOL_SIZE), stream);
    // Priority is recorded only; the stream is shared, so the last wins.
    if (st == TRN_SUCCESS) {
        trn__lock(&(*stream)->mu);
        (*stream)->priority = priority;
        trn__unlock(&(*stream)->mu);
    }
    return st;
}

trn_status trn_stream_from_id(int device, int64_t id, trn_stream **stream) {
    trn_status st = stream_enter(device, stream);
    if (st != TRN_SUCCESS) return st;
    if (id < 0 || id > TRN_STREAM_POOL_SIZE)
        return trn__set_error(TRN_ERROR_INVALID_ARGUMENT,
                              "stream id %lld is not a stream of neuron:%d "
                              "(ids are 0..%d)",
                              (long long)id, device, TRN_STREAM_POOL_SIZE);
    return stream_get(device, (int)id, stream);
}

int64_t trn_stream_id(const trn_stream *stream) { return stream != NULL ? stream->index : -1; }

int trn_stream_device(const trn_stream *stream) { return stream != NULL ? stream->device : -1; }

int trn__stream_index(const trn_stream *stream) { return stream->index; }

trn_status trn_stream_get_current(int device, trn_stream **stream) {
    // Every op and allocation asks (~400 calls a decode token). A stream of
    // `device` exists only once stream_enter passed for it (runtime
    // initialised, CPU level accepted, device in range), so finding one
    // repeats nothing but the fork check.
    if ((unsigned)device < TRN_MAX_DEVICES && stream != NULL && trn__fork_check() == TRN_SUCCESS) {
        trn_stream *s = tl_current[device];
        if (s == NULL) s = atomic_load_explicit(&g_streams[device][0], memory_order_acquire);
        if (s != NULL) {
            *stream = s;
            return TRN_SUCCESS;
        }
    }
    trn_status st = stream_enter(device, stream);
    if (st != TRN_SUCCESS) return st;
    if (tl_current[device] != NULL) {
        *stream = tl_current[device];
        return TRN_SUCCESS;
    }
    return stream_get(device, 0, stream);
}

trn_status trn_stream_set_current(trn_stream *stream) {
    if (stream == NULL)
        return trn__set_error(TRN_ERROR_INVALID_ARGUMENT, "trn_stream_set_current: stream is NULL");
    trn_status st = trn__fork_check();
    if (st != TRN_SUCCESS) return st;
    tl_current[stream->device] = stream;
    return TRN_SUCCESS;
}

// ---- waiting and errors -------------------------------------------------------

uint64_t trn__stream_launched(const trn_stream *stream) {
    return atomic_load_explicit(&stream->launched, memory_order_acquire);
}

uint64_t trn__stream_completed(const trn_stream *stream) {
    return atomic_load_explicit(&stream->completed, memory_order_acquire);
}

// Spins for up to `spin_ns` until *counter reaches `target` (or, with
// `changed`, differs from it). True if it did.
static bool spin_until(atomic_uint_fast64_t *counter, uint64_t target, bool changed,
                       uint64_t spin_ns) {
    uint64_t start = trn__now_ns();
    for (unsigned i = 1;; i++) {
        uint64_t v = atomic_load_explicit(counter, memory_order_acquire);
        if (changed ? v != target : v >= target) return true;
        trn__cpu_relax();
        if (i % 64 == 0) {
            uint64_t spent = trn__now_ns() - start;
            if (spent > spin_ns) return false;
            if (spent > TRN__SYNC_YIELD_NS) sched_yield();
        }
    }
}

// Waits until `target` tasks have completed: a short spin first, because the
// common case (synchronise right after a small launch) finishes within
// microseconds and a futex sleep/wake pair costs more than that.
static void wait_completed(trn_stream *s, uint64_t target) {
    if (trn__stream_completed(s) >= target) return;
    // A worker thread runs this stream's tasks: this thread's core joins
    // their kernels' parallel pieces while it waits, instead of idling.
    if (atomic_load_explicit(&s->worker_started, memory_order_acquire)) {
        if (trn__parallel_assist(&s->completed, target, &s->assist_wake)) return;
    }
    if (spin_until(&s->completed, target, false, TRN__SYNC_SPIN_NS)) return;
    trn__lock(&s->mu);
    atomic_fetch_add(&s->waiters, 1);
    while (atomic_load(&s->completed) < target) trn__wait(&s->done_cv, &s->mu);
    atomic_fetch_sub(&s->waiters, 1);
    trn__unlock(&s->mu);
}

void trn__stream_wait_idle(trn_stream *stream) {
    pending_run_sticky(stream);
    wait_completed(stream, trn__stream_launched(stream));
}

void trn__stream_wait_launched(trn_stream *stream) {
    wait_completed(stream, trn__stream_launched(stream));
}

void trn__device_wait_idle(int device) {
    for (int i = 0; i < STREAMS_PER_DEVICE; i++) {
        trn_stream *s = atomic_load(&g_streams[device][i]);
        if (s != NULL) trn__stream_wait_idle(s);
    }
}

// Clears the deferred error; copies its message into `message` if non-NULL.
static trn_status take_error(trn_stream *s, char *message, size_t size) {
    trn__lock(&s->mu);
    trn_status st = s->error;
    if (st != TRN_SUCCESS) {
        if (message != NULL) snprintf(message, size, "%s", s->error_message);
        s->error = TRN_SUCCESS;
        s->error_message[0] = '\0';
    }
    trn__unlock(&s->mu);
    return st;
}

trn_status trn__stream_take_error(trn_stream *stream) {
    char message[TRN__ERROR_MAX];
    trn_status st = take_error(stream, message, sizeof message);
    return st == TRN_SUCCESS ? st : trn__set_error(st, "%s", message);
}

trn_status trn_stream_synchronize(trn_stream *stream) {
    if (stream == NULL)
        return trn__set_error(TRN_ERROR_INVALID_ARGUMENT, "trn_stream_synchronize: stream is NULL");
    trn_status st = trn__fork_check();
    if (st != TRN_SUCCESS) return st;
    trn__stream_wait_idle(stream);
    return trn__stream_take_error(stream);
}

trn_status trn_stream_query(trn_stream *stream, bool *done) {
    if (stream == NULL || done == NULL)
        return trn__set_error(TRN_ERROR_INVALID_ARGUMENT,
                              "trn_stream_query: stream or done is NULL");
    trn_status st = trn__fork_check();
    if (st != TRN_SUCCESS) return st;
    pending_run_sticky(stream);
    uint64_t launched = trn__stream_launched(stream);
    *done = trn__stream_completed(stream) >= launched;
    return TRN_SUCCESS;
}

trn_status trn_device_synchronize(int device) {
    trn_status st = trn__device_enter(device);
    if (st != TRN_SUCCESS) return st;
    trn_status first = TRN_SUCCESS;
    char message[TRN__ERROR_MAX] = "";
    for (int i = 0; i < STREAMS_PER_DEVICE; i++) {
        trn_stream *s = atomic_load(&g_streams[device][i]);
        if (s == NULL) continue;
        trn__stream_wait_idle(s);
        // Every stream's error is cleared; the first one is reported.
        st = take_error(s, first == TRN_SUCCESS ? message : NULL, sizeof message);
        if (first == TRN_SUCCESS) first = st;
    }
    return first == TRN_SUCCESS ? first : trn__set_error(first, "%s", message);
}

void trn__streams_drain(void) {
    for (int d = 0; d < TRN_MAX_DEVICES; d++)
        for (int i = 0; i < STREAMS_PER_DEVICE; i++) {
            trn_stream *s = atomic_load(&g_streams[d][i]);
            if (s == NULL || s == tl_worker_of) continue;
            trn__lock(&s->mu);
            const bool queued = s->worker_started;
            trn__unlock(&s->mu);
            if (queued) trn__stream_wait_launched(s);
        }
}

// ---- execution ----------------------------------------------------------------

// Records a task's failure, with s->mu held: either for its blocking
// launcher or as the stream's deferred error (the first one sticks).
static void task_failed(trn_stream *s, trn_status st, task_result *result) {
    const char *message = trn_last_error();
    char fallback[128];
    if (message[0] == '\0') {
        snprintf(fallback, sizeof fallback, "task on neuron:%d stream %d failed: %s", s->device,
                 s->index, trn_status_string(st));
        message = fallback;
    }
    if (result != NULL) {
        snprintf(result->message, sizeof result->message, "%s", message);
    } else if (s->error == TRN_SUCCESS) {
        s->error = st;
        snprintf(s->error_message, sizeof s->error_message, "%s", message);
    }
}

// Publishes one more finished task and wakes synchronisers, if any.
static void task_done(trn_stream *s, trn_status st, task_result *result) {
    if (result != NULL) result->status = st;
    const uint64_t completed = atomic_fetch_add(&s->completed, 1) + 1;
    if (atomic_load(&s->waiters) > 0) {
        trn__lock(&s->mu);
        trn__broadcast(&s->done_cv);
        trn__unlock(&s->mu);
    }
    trn__parallel_assist_reached(&s->assist_wake, completed);
}

// Runs one queued task (or skips padding); returns the entry's length.
static size_t worker_run(trn_stream *s, task_header *h) {
    if (h->fn == NULL) return h->len;
    trn_clear_error();
    trn__stats_running(s->device, 1);
    trn_status st = h->fn(h + 1);
    trn__stats_running(s->device, -1);
    if (st != TRN_SUCCESS) {
        trn__lock(&s->mu);
        task_failed(s, st, h->result);
        trn__unlock(&s->mu);
    }
    task_done(s, st, h->result);
    return h->len;
}

// Sleeps until a launch adds to the queue. Only the worker calls this.
static void worker_sleep(trn_stream *s) {
    trn__lock(&s->mu);
    atomic_store(&s->worker_sleeping, true);
    while (atomic_load(&s->used) == 0) trn__wait(&s->work_cv, &s->mu);
    atomic_store(&s->worker_sleeping, false);
    trn__unlock(&s->mu);
}

static void *worker_main(void *arg) {
    trn_stream *s = arg;
    tl_worker_of = s;
    for (;;) {
        const uint64_t batch = atomic_load_explicit(&s->used, memory_order_acquire);
        if (batch == 0) {
            // Spin briefly first: a launch right after the last one is then
            // picked up without a sleep/wake round trip.
            if (!spin_until(&s->used, 0, true, WORKER_SPIN_NS)) worker_sleep(s);
            continue;
        }
        // Run everything queued so far; launchers only write to free space,
        // so these entries stay intact until `used` gives them back.
        size_t offset = s->head;
        for (uint64_t done = 0; done < batch;) {
            size_t len = worker_run(s, (task_header *)(s->ring + offset));
            done += len;
            offset += len;
            if (offset == RING_BYTES) offset = 0;
        }
        s->head = offset;
        atomic_fetch_sub(&s->used, batch);
        // A launcher may be waiting for ring space (it counts itself in
        // `waiters`, then re-reads `used`: one of the two sees the other).
        if (atomic_load(&s->waiters) > 0) {
            trn__lock(&s->mu);
            trn__broadcast(&s->done_cv);
            trn__unlock(&s->mu);
        }
    }
    return NULL;
}

// Starts the worker with asynchronous signals blocked, so they keep going to
// the application's threads (Python handles signals on its main thread).
static trn_status worker_start(trn_stream *s) {
    s->ring = aligned_alloc(ENTRY_ALIGN, RING_BYTES);
    if (s->ring == NULL)
        return trn__set_error(TRN_ERROR_OUT_OF_MEMORY,
                              "no host memory for the queue of neuron:%d "
                              "stream %d",
                              s->device, s->index);
    sigset_t all, old;
    sigfillset(&all);
    static const int synchronous[] = {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGTRAP, SIGABRT, SIGSYS};
    for (size_t i = 0; i < sizeof synchronous / sizeof synchronous[0]; i++)
        sigdelset(&all, synchronous[i]);
    int rc = pthread_sigmask(SIG_BLOCK, &all, &old);
    pthread_t thread;
    if (rc == 0) {
        rc = pthread_create(&thread, NULL, worker_main, s);
        (void)pthread_sigmask(SIG_SETMASK, &old, NULL);
    }
    if (rc == 0) rc = pthread_detach(thread);
    if (rc != 0) {
        free(s->ring);
        s->ring = NULL;
        return trn__set_error(TRN_ERROR_SYSTEM,
                              "could not start the worker thread of neuron:%d "
                              "stream %d: %s",
                              s->device, s->index, strerror(rc));
    }
    atomic_store_explicit(&s->worker_started, true, memory_order_release);
    return TRN_SUCCESS;
}

// Offset where an entry of `len` bytes can go, with mu held; if it must wrap,
// a padding entry is written at the end and its bytes are added to *pad (the
// launcher publishes them with the entry). False if the ring has no room
// now. The worker only frees space meanwhile, so a stale `used` is safe. The
// load is seq_cst: a launcher that found no room counts itself in `waiters`
// and reads `used` again, while the worker subtracts from `used` and then
// reads `waiters`, so one of the two sees the other.
static bool ring_reserve(trn_stream *s, size_t len, size_t *offset, size_t *pad) {
    const size_t used = (size_t)atomic_load(&s->used);
    if (used == RING_BYTES) return false;
    const size_t head = (s->tail + RING_BYTES - used) % RING_BYTES;
    if (s->tail >= head) {  // data in [head, tail): free at both ends
        if (RING_BYTES - s->tail >= len) {
            *offset = s->tail;
            return true;
        }
        if (head < len) return false;
        task_header *p = (task_header *)(s->ring + s->tail);
        p->fn = NULL;
        p->len = (uint32_t)(RING_BYTES - s->tail);
        *pad = p->len;
        s->tail = 0;
        *offset = 0;
        return true;
    }
    if (head - s->tail < len) return false;  // wrapped: free in [tail, head)
    *offset = s->tail;
    return true;
}

static trn_status launch_async(trn_stream *s, trn_task_fn fn, const void *args, size_t args_size,
                               task_result *result) {
    size_t len = (sizeof(task_header) + args_size + ENTRY_ALIGN - 1) / ENTRY_ALIGN * ENTRY_ALIGN;
    trn__lock(&s->mu);
    if (!s->worker_started) {
        trn_status st = worker_start(s);
        if (st != TRN_SUCCESS) {
            trn__unlock(&s->mu);
            return st;
        }
    }
    size_t offset, pad = 0;
    if (!ring_reserve(s, len, &offset, &pad)) {
        atomic_fetch_add(&s->waiters, 1);
        while (!ring_reserve(s, len, &offset, &pad)) trn__wait(&s->done_cv, &s->mu);
        atomic_fetch_sub(&s->waiters, 1);
    }
    task_header *h = (task_header *)(s->ring + offset);
    h->fn = fn;
    h->result = result;
    h->len = (uint32_t)len;
    h->args_size = (uint32_t)args_size;
    if (args_size != 0) memcpy(h + 1, args, args_size);
    s->tail = offset + len;
    if (s->tail == RING_BYTES) s->tail = 0;
    // Counted launched before the worker can see it, so `completed` never
    // passes `launched`.
    uint64_t seq = atomic_fetch_add_explicit(&s->launched, 1, memory_order_release) + 1;
    atomic_fetch_add(&s->used, pad + len);
    if (atomic_load(&s->worker_sleeping)) trn__signal(&s->work_cv);
    trn__unlock(&s->mu);
    if (result == NULL) return TRN_SUCCESS;
    wait_completed(s, seq);
    // wait_completed may have returned from its spin without the lock; the
    // worker wrote the result before publishing completion (release order).
    if (result->status != TRN_SUCCESS) return trn__set_error(result->status, "%s", result->message);
    return TRN_SUCCESS;
}

static trn_status launch_inline(trn_stream *s, trn_task_fn fn, const void *args, size_t args_size,
                                bool blocking) {
    // The task gets its own aligned copy, as in the queued mode.
    _Alignas(ENTRY_ALIGN) unsigned char copy[TRN__TRACE_HEADER + TRN_TASK_MAX_ARGS];
    if (args_size != 0) memcpy(copy, args, args_size);
    trn__lock(&s->exec_mu);
    atomic_fetch_add_explicit(&s->launched, 1, memory_order_release);
    trn_clear_error();
    trn__stats_running(s->device, 1);
    trn_status st = fn(copy);
    trn__stats_running(s->device, -1);
    task_result result;
    if (st != TRN_SUCCESS) {
        trn__lock(&s->mu);
        task_failed(s, st, blocking ? &result : NULL);
        trn__unlock(&s->mu);
    }
    task_done(s, st, NULL);
    trn__unlock(&s->exec_mu);
    if (!blocking || st == TRN_SUCCESS) return TRN_SUCCESS;
    // task_finish filled in a message even if the task gave none.
    return trn__set_error(st, "%s", result.message);
}

// trn__stats_launch without its read of the page's `in_use` once this process
// has set it: that word shares a cache line with `running`, which the worker
// writes twice a task, so the read missed in this core's cache on every
// launch (~0.1 us, launch@5us in bench/c/stream_overhead.c). The page is
// copied on fork and never cleared, so once set it stays set.
static atomic_bool g_page_in_use[TRN_MAX_DEVICES];

static void stats_launch(int device) {
    trn_stats_device *d = &trn_stats_page_get()->devices[device];
    __atomic_fetch_add(&d->counters[TRN_COUNTER_KERNEL_LAUNCHES], 1, __ATOMIC_RELAXED);
    if (!atomic_load_explicit(&g_page_in_use[device], memory_order_relaxed)) {
        __atomic_store_n(&d->in_use, 1, __ATOMIC_RELAXED);
        atomic_store_explicit(&g_page_in_use[device], true, memory_order_relaxed);
    }
}

trn_status trn_stream_launch(trn_stream *stream, trn_task_fn fn, const void *args,
                             size_t args_size) {
    if (stream == NULL || fn == NULL)
        return trn__set_error(TRN_ERROR_INVALID_ARGUMENT,
                              "trn_stream_launch: stream or task is NULL");
    if (args_size > TRN_TASK_MAX_ARGS)
        return trn__set_error(TRN_ERROR_INVALID_ARGUMENT,
                              "trn_stream_launch: %zu argument bytes exceed "
                              "TRN_TASK_MAX_ARGS (%d)",
                              args_size, TRN_TASK_MAX_ARGS);
    if (args == NULL && args_size != 0)
        return trn__set_error(TRN_ERROR_INVALID_ARGUMENT,
                              "trn_stream_launch: args is NULL but args_size "
                              "is %zu",
                              args_size);
    trn_status st = trn__fork_check();
    if (st != TRN_SUCCESS) return st;
    st = pending_run(stream, TRN_PENDING_LAUNCH);
    if (st != TRN_SUCCESS) return st;
    stats_launch(stream->device);
    // While a profiler traces, the task runs wrapped in one that times it
    // and records it (trace.c).
    _Alignas(ENTRY_ALIGN) unsigned char traced[TRN__TRACE_HEADER + TRN_TASK_MAX_ARGS];
    if (trn_trace_active()) {
        args_size = trn__trace_wrap(stream->device, trn_stream_id(stream), fn, args, args_size,
                                    traced, &fn);
        args = traced;
    }
    const trn__config *cfg = trn__config_get();
    if (!cfg->async) return launch_inline(stream, fn, args, args_size, cfg->launch_blocking);
    if (!cfg->launch_blocking) return launch_async(stream, fn, args, args_size, NULL);
    task_result result = {TRN_SUCCESS, ""};
    return launch_async(stream, fn, args, args_size, &result);
}

// ---- fork (see fork.c) ----------------------------------------------------------

// Which streams' exec_mu the fork handlers hold (only the forking thread
// reads or writes it, between prepare and parent/child).
static bool g_fork_held[TRN_MAX_DEVICES][STREAMS_PER_DEVICE];

static void fork_release_exec(void) {
    for (int d = TRN_MAX_DEVICES - 1; d >= 0; d--)
        for (int i = STREAMS_PER_DEVICE - 1; i >= 0; i--)
            if (g_fork_held[d][i]) {
                trn__unlock(&atomic_load(&g_streams[d][i])->exec_mu);
                g_fork_held[d][i] = false;
            }
}

// Every stream's locks, taken in the order launches nest them (exec_mu, then
// the table, then mu), with each queue drained: a child then starts with no
// queued work and no worker thread it would wait for. A stream another
// thread creates while the exec locks are being taken would be missed (and
// later unlocked without being locked, found by ThreadSanitizer): then all
// are released and taken again.
void trn__stream_fork_prepare(void) {
    for (;;) {
        for (int d = 0; d < TRN_MAX_DEVICES; d++)
            for (int i = 0; i < STREAMS_PER_DEVICE; i++) {
                trn_stream *s = atomic_load(&g_streams[d][i]);
                g_fork_held[d][i] = s != NULL;
                if (s != NULL) trn__lock(&s->exec_mu);
            }
        trn__lock(&g_table_mu);
        bool missed = false;
        for (int d = 0; d < TRN_MAX_DEVICES && !missed; d++)
            for (int i = 0; i < STREAMS_PER_DEVICE; i++)
                missed |= atomic_load(&g_streams[d][i]) != NULL && !g_fork_held[d][i];
        if (!missed) break;
        trn__unlock(&g_table_mu);
        fork_release_exec();
    }
    for (int d = 0; d < TRN_MAX_DEVICES; d++)
        for (int i = 0; i < STREAMS_PER_DEVICE; i++) {
            trn_stream *s = atomic_load(&g_streams[d][i]);
            if (s == NULL) continue;
            // The worker releases ring space only after the tasks in it have
            // completed, so an empty ring under the lock means an idle queue.
            for (;;) {
                trn__lock(&s->mu);
                if (atomic_load(&s->used) == 0) break;
                trn__unlock(&s->mu);
                // Not trn__stream_wait_idle: held eager work (the pending
                // hook) must not launch while every exec_mu is held.
                wait_completed(s, trn__stream_launched(s));
            }
        }
}

static void streams_unlock(void) {
    for (int d = TRN_MAX_DEVICES - 1; d >= 0; d--)
        for (int i = STREAMS_PER_DEVICE - 1; i >= 0; i--) {
            trn_stream *s = atomic_load(&g_streams[d][i]);
            if (s != NULL) trn__unlock(&s->mu);
        }
    trn__unlock(&g_table_mu);
    fork_release_exec();
}

void trn__stream_fork_parent(void) { streams_unlock(); }

// The child has only the forking thread: the workers are gone, and condition
// variables may still count waiters that no longer exist. Each stream starts
// over with an empty queue; a worker is started on its next async launch.
bool trn__stream_fork_child(void) {
    bool ok = true;
    for (int d = 0; d < TRN_MAX_DEVICES; d++)
        for (int i = 0; i < STREAMS_PER_DEVICE; i++) {
            trn_stream *s = atomic_load(&g_streams[d][i]);
            if (s == NULL) continue;
            if (s->worker_started) {
                free(s->ring);
                s->ring = NULL;
                atomic_store(&s->worker_started, false);
            }
            atomic_store(&s->worker_sleeping, false);
            s->head = s->tail = 0;
            atomic_store(&s->used, 0);
            atomic_store(&s->waiters, 0);
            atomic_store(&s->assist_wake, UINT64_MAX);
            ok = pthread_cond_init(&s->work_cv, NULL) == 0 && ok;
            ok = pthread_cond_init(&s->done_cv, NULL) == 0 && ok;
        }
    streams_unlock();
    return ok;
}
