// parallel.c - owns the worker pool behind trn_parallel_for.
//
// One job at a time: a launcher publishes (fn, ctx, n, pieces) and bumps a
// generation counter; each worker takes piece = its index + 1 (the launcher
// runs piece 0), then counts itself done. Workers spin on the generation for
// a while before sleeping on a condition variable, so back-to-back kernels
// find them awake.
#define _GNU_SOURCE 1
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>
#include <unistd.h>

#include "../internal.h"
#include "trn/parallel.h"

#define MAX_THREADS 64
// Spin iterations (pause instructions) before a worker sleeps: ~0.5 ms.
#define SPIN_LIMIT 20000

static struct {
    pthread_once_t once;
    int threads;  // including the launching thread
    atomic_flag busy;
    pthread_mutex_t mutex;
    pthread_cond_t wake;
    atomic_uint_fast64_t generation;
    atomic_int sleepers;
    atomic_int done;
    atomic_bool forked;
    // The job (written by the launcher before the generation bump).
    trn_parallel_fn fn;
    void *ctx;
    int64_t n;
    int pieces;
} pool = {.once = PTHREAD_ONCE_INIT,
          .busy = ATOMIC_FLAG_INIT,
          .mutex = PTHREAD_MUTEX_INITIALIZER,
          .wake = PTHREAD_COND_INITIALIZER};

static _Thread_local bool in_parallel;

static void piece_bounds(int64_t n, int pieces, int i, int64_t *b, int64_t *e) {
    *b = n * i / pieces;
    *e = n * (i + 1) / pieces;
}

static void *worker_main(void *arg) {
    const int index = (int)(intptr_t)arg;  // 1..threads-1
    uint64_t seen = 0;
    in_parallel = true;
    for (;;) {
        uint64_t gen;
        int spins = 0;
        while ((gen = atomic_load_explicit(&pool.generation, memory_order_acquire)) == seen) {
            if (++spins < SPIN_LIMIT) {
                trn__cpu_relax();
                continue;
            }
            trn__lock(&pool.mutex);
            atomic_fetch_add(&pool.sleepers, 1);
            while (atomic_load(&pool.generation) == seen) trn__wait(&pool.wake, &pool.mutex);
            atomic_fetch_sub(&pool.sleepers, 1);
            trn__unlock(&pool.mutex);
            spins = 0;
        }
        seen = gen;
        if (index < pool.pieces) {
            int64_t b, e;
            piece_bounds(pool.n, pool.pieces, index, &b, &e);
            if (e > b) pool.fn(pool.ctx, b, e);
        }
        atomic_fetch_add_explicit(&pool.done, 1, memory_order_release);
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
    for (int i = 1; i < pool.threads; i++) {
        pthread_t t;
        pthread_attr_t attr;
        pthread_attr_init(&attr);
        pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
        // A worker that cannot start just leaves the pool smaller.
        if (pthread_create(&t, &attr, worker_main, (void *)(intptr_t)i) != 0) {
            pool.threads = i;
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
    int64_t max_pieces = n / grain;
    int pieces = threads < max_pieces ? threads : (int)max_pieces;
    if (pieces <= 1 || atomic_load(&pool.forked) || atomic_flag_test_and_set(&pool.busy)) {
        fn(ctx, 0, n);
        return;
    }
    pool.fn = fn;
    pool.ctx = ctx;
    pool.n = n;
    pool.pieces = pieces;
    atomic_store(&pool.done, 0);
    atomic_fetch_add_explicit(&pool.generation, 1, memory_order_release);
    if (atomic_load(&pool.sleepers) > 0) {
        trn__lock(&pool.mutex);
        trn__broadcast(&pool.wake);
        trn__unlock(&pool.mutex);
    }
    in_parallel = true;
    int64_t b, e;
    piece_bounds(n, pieces, 0, &b, &e);
    fn(ctx, b, e);
    in_parallel = false;
    // Every worker reports, even those without a piece, so none can still
    // read the job when the next one is published.
    while (atomic_load_explicit(&pool.done, memory_order_acquire) < pool.threads - 1)
        trn__cpu_relax();
    atomic_flag_clear(&pool.busy);
}
