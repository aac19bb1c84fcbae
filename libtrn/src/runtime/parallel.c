// parallel.c - owns the worker pool behind trn_parallel_for.
//
// One job at a time, split into chunks that whoever is ready claims: the
// launcher publishes (fn, ctx, n, chunks) in one of two job slots, then a
// single 64-bit state word {generation, claimed, finished}. Every
// participant (the launcher included) claims chunks by a compare-and-swap on
// that word and counts each finished chunk into it; the launcher returns
// once every chunk is finished. So a worker that is asleep or descheduled
// when the job starts costs nothing - the others take its chunks - where a
// static split waited for it (100-300 us to wake one in this VM, whole
// scheduler quanta on a loaded machine). A worker that comes late finds the
// generation moved on or nothing left to claim; the two slots mean the job
// it may still be reading is never the one being written. Workers spin on
// the state for a while before sleeping on a condition variable, so
// back-to-back kernels find them awake.
#define _GNU_SOURCE 1
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>
#include <unistd.h>

#include "../internal.h"
#include "trn/parallel.h"
#include "parallel_assist.h"

#define MAX_THREADS 64
// Spin iterations (pause instructions) before a worker sleeps: ~0.5 ms.
#define SPIN_LIMIT 20000
// Past this many, a spinning thread also calls sched_yield every YIELD_EVERY
// iterations: alone on its core that returns at once (the wake-up stays
// quick), but when other threads wait for a core - the launching thread, a
// kernel's other participants, another process on a loaded machine - they get
// it instead of our spin.
#define YIELD_AFTER 2000
#define YIELD_EVERY 64
// Chunks per thread: enough for a late thread's share to be taken by others.
#define CHUNKS_PER_THREAD 4

// State word: generation (20 bits) | claimed from the front (14 bits) |
// claimed from the back (14) | finished (16). Chunks never exceed
// MAX_THREADS * CHUNKS_PER_THREAD (256), far below the fields' limits.
//
// The launching thread claims chunks from the front (0, 1, ...), workers
// from the back (last, last - 1, ...): at two threads the launcher runs the
// first half of every job and the worker the second, as a static split
// would, so an op reads the half of its operand that the same core wrote
// in the op before (in its L2) instead of whichever chunks it happened to
// claim (the other core's L2, one cross-core transfer per line). Who runs
// a chunk never changes its result: the chunks are the same either way.
#define FIN_BITS 16
#define SIDE_BITS 14
#define BACK_SHIFT FIN_BITS
#define FRONT_SHIFT (FIN_BITS + SIDE_BITS)
#define GEN_SHIFT (FIN_BITS + 2 * SIDE_BITS)
#define FIN_MASK ((UINT64_C(1) << FIN_BITS) - 1)
#define SIDE_MASK ((UINT64_C(1) << SIDE_BITS) - 1)
#define GEN_MASK ((UINT64_C(1) << (64 - GEN_SHIFT)) - 1)
_Static_assert((MAX_THREADS * CHUNKS_PER_THREAD) <= SIDE_MASK, "chunks overflow the state word");

static inline uint64_t st_gen(uint64_t s) { return s >> GEN_SHIFT; }
static inline int64_t st_front(uint64_t s) { return (int64_t)((s >> FRONT_SHIFT) & SIDE_MASK); }
static inline int64_t st_back(uint64_t s) { return (int64_t)((s >> BACK_SHIFT) & SIDE_MASK); }
static inline int64_t st_finished(uint64_t s) { return (int64_t)(s & FIN_MASK); }

// A job slot. Fields are relaxed atomics: a late worker may read a slot
// while it is rewritten, but then its claim fails and it uses nothing read.
typedef struct job {
    _Atomic(trn_parallel_fn) fn;
    _Atomic(void *) ctx;
    _Atomic int64_t n;
    _Atomic int64_t chunks;
} job;

static struct {
    pthread_once_t once;
    int threads;  // including the launching thread
    atomic_flag busy;
    pthread_mutex_t mutex;
    pthread_cond_t wake;
    _Atomic uint64_t state;
    atomic_int sleepers;
    atomic_bool forked;
    job slots[2];
} pool = {.once = PTHREAD_ONCE_INIT,
          .busy = ATOMIC_FLAG_INIT,
          .mutex = PTHREAD_MUTEX_INITIALIZER,
          .wake = PTHREAD_COND_INITIALIZER};

static _Thread_local bool in_parallel;

static void piece_bounds(int64_t n, int64_t pieces, int64_t i, int64_t *b, int64_t *e) {
    *b = n * i / pieces;
    *e = n * (i + 1) / pieces;
}

// Claims and runs chunks of job generation `gen` until none is left (or the
// job is gone), from the front (the launcher) or the back (workers).
// Returns when this thread has nothing more to do for it.
static void run_chunks(uint64_t gen, bool from_back) {
    const uint64_t one = UINT64_C(1) << (from_back ? BACK_SHIFT : FRONT_SHIFT);
    uint64_t s = atomic_load_explicit(&pool.state, memory_order_acquire);
    for (;;) {
        if (st_gen(s) != gen) return;
        const job *j = &pool.slots[gen & 1];
        const int64_t chunks = atomic_load_explicit(&j->chunks, memory_order_relaxed);
        if (st_front(s) + st_back(s) >= chunks) return;
        const int64_t c = from_back ? chunks - 1 - st_back(s) : st_front(s);
        if (!atomic_compare_exchange_weak_explicit(&pool.state, &s, s + one, memory_order_acquire,
                                                   memory_order_acquire))
            continue;  // s now holds the current state
        // Claimed chunk c of job `gen`: the job cannot finish (and its slot
        // cannot be reused) before this chunk is counted finished below.
        const trn_parallel_fn fn = atomic_load_explicit(&j->fn, memory_order_relaxed);
        void *ctx = atomic_load_explicit(&j->ctx, memory_order_relaxed);
        const int64_t n = atomic_load_explicit(&j->n, memory_order_relaxed);
        int64_t b, e;
        piece_bounds(n, chunks, c, &b, &e);
        if (e > b) fn(ctx, b, e);
        s = atomic_fetch_add_explicit(&pool.state, 1, memory_order_acq_rel) + 1;
    }
}

static void *worker_main(void *arg) {
    (void)arg;
    uint64_t seen = st_gen(atomic_load(&pool.state));
    in_parallel = true;
    for (;;) {
        uint64_t gen;
        int spins = 0;
        while ((gen = st_gen(atomic_load_explicit(&pool.state, memory_order_acquire))) == seen) {
            if (++spins < SPIN_LIMIT) {
                trn__cpu_relax();
                if (spins > YIELD_AFTER && spins % YIELD_EVERY == 0) sched_yield();
                continue;
            }
            trn__lock(&pool.mutex);
            atomic_fetch_add(&pool.sleepers, 1);
            while (st_gen(atomic_load(&pool.state)) == seen) trn__wait(&pool.wake, &pool.mutex);
            atomic_fetch_sub(&pool.sleepers, 1);
            trn__unlock(&pool.mutex);
            spins = 0;
        }
        seen = gen;
        run_chunks(gen, true);
    }
    return NULL;
}

static void on_fork_child(void) { atomic_store(&pool.forked, true); }

static int parse_threads(void) {
    const char *env = getenv("TORCH_NEURONX_NUM_THREADS");
    if (env != NULL && *env != '\0') {
        char *end;
        long v = strtol(env, &end, 10);
        if (*end == '\0' && v >= 1) return v > MAX_THREADS ? MAX_THREADS : (int)v;
    }
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof set, &set) == 0) {
        int c = CPU_COUNT(&set);
        if (c >= 1) return c > MAX_THREADS ? MAX_THREADS : c;
    }
    long c = sysconf(_SC_NPROCESSORS_ONLN);
    return c < 1 ? 1 : (c > MAX_THREADS ? MAX_THREADS : (int)c);
}

static void pool_init(void) {
    pool.threads = parse_threads();
    pthread_atfork(NULL, NULL, on_fork_child);
    // With asynchronous streams a stream's worker launches the kernels and
    // the application's thread joins them whenever it waits for that worker
    // (trn__parallel_assist), so one dedicated worker fewer keeps the threads
    // that run at once to the pool's size: while the application's thread
    // runs Python, its core is not also wanted by a worker.
    const int dedicated =
        trn__config_get()->async && pool.threads > 1 ? pool.threads - 1 : pool.threads;
    for (int i = 1; i < dedicated; i++) {
        pthread_t t;
        pthread_attr_t attr;
        pthread_attr_init(&attr);
        pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
        // A worker that cannot start just leaves the pool smaller.
        if (pthread_create(&t, &attr, worker_main, (void *)(intptr_t)i) != 0) {
            pool.threads = i + pool.threads - dedicated;
            pthread_attr_destroy(&attr);
            break;
        }
        pthread_attr_destroy(&attr);
    }
}

int trn_parallel_threads(void) {
    pthread_once(&pool.once, pool_init);
    return pool.threads;
}

void trn_parallel_for(int64_t n, int64_t grain, trn_parallel_fn fn, void *ctx) {
    if (n <= 0) return;
    if (grain < 1) grain = 1;
    int threads = (n >= 2 * grain && !in_parallel) ? trn_parallel_threads() : 1;
    int64_t max_chunks = n / grain;
    int64_t chunks = (int64_t)threads * CHUNKS_PER_THREAD;
    if (chunks > max_chunks) chunks = max_chunks;
    if (threads <= 1 || chunks <= 1 || atomic_load(&pool.forked) ||
        atomic_flag_test_and_set(&pool.busy)) {
        fn(ctx, 0, n);
        return;
    }
    const uint64_t gen = (st_gen(atomic_load(&pool.state)) + 1) & GEN_MASK;
    job *j = &pool.slots[gen & 1];
    atomic_store_explicit(&j->fn, fn, memory_order_relaxed);
    atomic_store_explicit(&j->ctx, ctx, memory_order_relaxed);
    atomic_store_explicit(&j->n, n, memory_order_relaxed);
    atomic_store_explicit(&j->chunks, chunks, memory_order_relaxed);
    atomic_store_explicit(&pool.state, gen << GEN_SHIFT, memory_order_release);
    if (atomic_load(&pool.sleepers) > 0) {
        trn__lock(&pool.mutex);
        trn__broadcast(&pool.wake);
        trn__unlock(&pool.mutex);
    }
    in_parallel = true;
    run_chunks(gen, false);
    in_parallel = false;
    // Only chunks another thread claimed can still be running. Yield while
    // waiting long: the thread running them may have been preempted and need
    // this core (a loaded machine), where a pure spin would hold it for a
    // whole scheduler slice.
    for (unsigned i = 1;
         st_finished(atomic_load_explicit(&pool.state, memory_order_acquire)) < chunks; i++) {
        trn__cpu_relax();
        if (i > YIELD_AFTER && i % YIELD_EVERY == 0) sched_yield();
    }
    atomic_flag_clear(&pool.busy);
}

bool trn__parallel_assist(const atomic_uint_fast64_t *counter, uint64_t target,
                          atomic_uint_fast64_t *wake_at) {
    pthread_once(&pool.once, pool_init);
    if (atomic_load(&pool.forked)) return false;
    uint64_t helped = UINT64_MAX, idle_since = 0;
    for (unsigned i = 1; atomic_load_explicit(counter, memory_order_acquire) < target; i++) {
        const uint64_t gen = st_gen(atomic_load_explicit(&pool.state, memory_order_acquire));
        if (gen != helped && !in_parallel) {
            // A chunk this thread runs gives the same result as on a worker:
            // the chunks are fixed when the job is published.
            helped = gen;
            in_parallel = true;
            run_chunks(gen, true);
            in_parallel = false;
            idle_since = 0;
            continue;
        }
        trn__cpu_relax();
        if (i % 64 != 0) continue;
        const uint64_t now = trn__now_ns();
        if (idle_since == 0) idle_since = now;
        // Spin as a stream's synchroniser does before sleeping until a new
        // job or the target.
        if (now - idle_since < TRN__SYNC_SPIN_NS) {
            if (now - idle_since > TRN__SYNC_YIELD_NS) sched_yield();
            continue;
        }
        // Sleep until a new job or the target. The notifier bumps *counter,
        // then reads *wake_at; this thread lowers *wake_at, then reads
        // *counter (all seq_cst): one of them sees the other's write.
        trn__lock(&pool.mutex);
        atomic_fetch_add(&pool.sleepers, 1);
        for (;;) {
            uint64_t w = atomic_load(wake_at);
            while (w > target && !atomic_compare_exchange_weak(wake_at, &w, target)) {}
            if (atomic_load(counter) >= target || st_gen(atomic_load(&pool.state)) != helped) break;
            trn__wait(&pool.wake, &pool.mutex);
        }
        atomic_fetch_sub(&pool.sleepers, 1);
        trn__unlock(&pool.mutex);
        idle_since = 0;
    }
    return true;
}

void trn__parallel_assist_reached(atomic_uint_fast64_t *wake_at, uint64_t value) {
    if (atomic_load(wake_at) > value) return;
    // Every sleeper re-registers its target before it sleeps again.
    trn__lock(&pool.mutex);
    atomic_store(wake_at, UINT64_MAX);
    trn__broadcast(&pool.wake);
    trn__unlock(&pool.mutex);
}
