// test_stream.c - streams in the mode the environment selects (CTest runs
// this binary with TORCH_NEURONX_ENABLE_ASYNC_NRT=0/1 and
// NEURON_LAUNCH_BLOCKING=0/1): stream ids and the pool, current stream,
// in-order execution of many tasks with argument blocks of every size (ring
// wrap-around), query, synchronize, deferred errors, launch blocking,
// concurrent launches from several threads, parallel streams, a synchronising
// thread running a worker's parallel chunks, a full ring, a sleeping worker.
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#include "internal.h"
#include "test.h"
#include "test_sleep_task.h"

static bool g_async, g_blocking;

static bool env_is(const char *name, const char *value) {
    const char *v = getenv(name);
    return v != NULL && strcmp(v, value) == 0;
}

static void test_ids(void) {
    trn_stream *def, *s, *first = NULL;
    CHECK_OK(trn_stream_get_default(0, &def));
    CHECK_INT(trn_stream_id(def), 0);
    CHECK_INT(trn_stream_device(def), 0);
    int64_t seen = 0;
    for (int i = 0; i < TRN_STREAM_POOL_SIZE; i++) {
        CHECK_OK(trn_stream_create(0, -1, &s));
        CHECK(trn_stream_id(s) >= 1 && trn_stream_id(s) <= TRN_STREAM_POOL_SIZE);
        seen |= INT64_C(1) << trn_stream_id(s);
        if (i == 0) first = s;
    }
    CHECK_INT(seen, ((INT64_C(1) << TRN_STREAM_POOL_SIZE) - 1) << 1);  // all ids
    CHECK_OK(trn_stream_create(0, 0, &s));
    CHECK(s == first);  // round-robin wraps
    for (int64_t id = 0; id <= TRN_STREAM_POOL_SIZE; id++) {
        CHECK_OK(trn_stream_from_id(0, id, &s));
        CHECK_INT(trn_stream_id(s), id);
    }
    CHECK_OK(trn_stream_from_id(0, 0, &s));
    CHECK(s == def);
    CHECK_STATUS(trn_stream_from_id(0, TRN_STREAM_POOL_SIZE + 1, &s), TRN_ERROR_INVALID_ARGUMENT);
    CHECK_CONTAINS(trn_last_error(), "stream id 9 is not a stream of neuron:0");
    CHECK_STATUS(trn_stream_from_id(0, -1, &s), TRN_ERROR_INVALID_ARGUMENT);
    CHECK_STATUS(trn_stream_from_id(2, 0, &s), TRN_ERROR_INVALID_DEVICE);
    CHECK_STATUS(trn_stream_get_default(0, NULL), TRN_ERROR_INVALID_ARGUMENT);
    CHECK_OK(trn_stream_get_default(1, &s));
    CHECK_INT(trn_stream_device(s), 1);
    CHECK(s != def);
    CHECK_INT(trn_stream_id(NULL), -1);
    CHECK_INT(trn_stream_device(NULL), -1);
}

static void *current_in_thread(void *arg) {
    trn_stream **out = arg;
    if (trn_stream_get_current(0, out) != TRN_SUCCESS) *out = NULL;
    return NULL;
}

static void test_current(void) {
    trn_stream *def, *pool, *cur, *dev1;
    CHECK_OK(trn_stream_get_default(0, &def));
    CHECK_OK(trn_stream_get_current(0, &cur));
    CHECK(cur == def);
    CHECK_OK(trn_stream_from_id(0, 3, &pool));
    CHECK_OK(trn_stream_set_current(pool));
    CHECK_OK(trn_stream_get_current(0, &cur));
    CHECK(cur == pool);
    // Per device, and per thread.
    CHECK_OK(trn_stream_get_default(1, &dev1));
    CHECK_OK(trn_stream_get_current(1, &cur));
    CHECK(cur == dev1);
    trn_stream *other = NULL;
    pthread_t t;
    CHECK_INT(pthread_create(&t, NULL, current_in_thread, &other), 0);
    CHECK_INT(pthread_join(t, NULL), 0);
    CHECK(other == def);
    CHECK_OK(trn_stream_set_current(def));
    CHECK_STATUS(trn_stream_set_current(NULL), TRN_ERROR_INVALID_ARGUMENT);
    CHECK_STATUS(trn_stream_get_current(5, &cur), TRN_ERROR_INVALID_DEVICE);
    // With streams of device 0 made, the quick path still refuses bad arguments.
    CHECK_STATUS(trn_stream_get_current(-1, &cur), TRN_ERROR_INVALID_DEVICE);
    CHECK_STATUS(trn_stream_get_current(TRN_MAX_DEVICES, &cur), TRN_ERROR_INVALID_DEVICE);
    CHECK_STATUS(trn_stream_get_current(0, NULL), TRN_ERROR_INVALID_ARGUMENT);
}

// Ordering: each task checks its argument block and appends its sequence
// number to a log.
typedef struct order_log {
    int64_t *entries;
    int64_t count;
} order_log;

typedef struct order_args {
    order_log *log;
    int64_t seq;
    uint32_t fill_size;
    unsigned char fill[];  // fill_size bytes of a pattern derived from seq
} order_args;

static trn_status order_task(void *p) {
    const order_args *a = p;
    for (uint32_t i = 0; i < a->fill_size; i++)
        if (a->fill[i] != (unsigned char)(a->seq * 31 + i))
            return trn__set_error(TRN_ERROR_KERNEL, "task %lld: corrupt args", (long long)a->seq);
    a->log->entries[a->log->count++] = a->seq;
    return TRN_SUCCESS;
}

static void test_order(void) {
    enum { N = 20000 };
    order_log log = {calloc(N, sizeof(int64_t)), 0};
    CHECK(log.entries != NULL);
    if (log.entries == NULL) return;
    _Alignas(16) unsigned char buf[TRN_TASK_MAX_ARGS];
    order_args *a = (order_args *)buf;
    trn_stream *s;
    CHECK_OK(trn_stream_create(0, 0, &s));
    int failures = 0;
    for (int64_t i = 0; i < N; i++) {
        // Argument sizes from header-only up to TRN_TASK_MAX_ARGS exactly.
        size_t max_fill = TRN_TASK_MAX_ARGS - sizeof(order_args);
        uint32_t fill = i % 97 == 0 ? (uint32_t)max_fill : (uint32_t)((i * 37) % 300);
        a->log = &log;
        a->seq = i;
        a->fill_size = fill;
        for (uint32_t k = 0; k < fill; k++) a->fill[k] = (unsigned char)(i * 31 + k);
        failures += trn_stream_launch(s, order_task, a, sizeof(order_args) + fill) != TRN_SUCCESS;
    }
    CHECK_INT(failures, 0);
    CHECK_OK(trn_stream_synchronize(s));
    CHECK_INT(log.count, N);
    int out_of_order = 0;
    for (int64_t i = 0; i < log.count; i++) out_of_order += log.entries[i] != i;
    CHECK_INT(out_of_order, 0);
    bool done = false;
    CHECK_OK(trn_stream_query(s, &done));
    CHECK(done);
    free(log.entries);
}

typedef struct fail_args {
    int code;
} fail_args;

static trn_status fail_task(void *p) {
    const fail_args *a = p;
    return trn__set_error(TRN_ERROR_KERNEL, "kernel %d failed on purpose", a->code);
}

static trn_status silent_fail_task(void *p) {
    (void)p;
    return TRN_ERROR_KERNEL;  // without a message
}

static void test_query_sync(void) {
    trn_stream *s;
    CHECK_OK(trn_stream_create(0, 0, &s));
    bool done = false;
    CHECK_OK(trn_stream_query(s, &done));
    CHECK(done);  // nothing launched
    atomic_int flag = 0;
    sleep_args a = {100000, &flag};
    CHECK_OK(trn_stream_launch(s, sleep_task, &a, sizeof a));
    CHECK_OK(trn_stream_query(s, &done));
    if (g_async && !g_blocking) {
        CHECK(!done);  // the task is still sleeping
        CHECK_INT(atomic_load(&flag), 0);
    } else {
        CHECK(done);  // ran before the launch returned
        CHECK_INT(atomic_load(&flag), 1);
    }
    CHECK_OK(trn_stream_synchronize(s));
    CHECK_INT(atomic_load(&flag), 1);
    CHECK_OK(trn_stream_query(s, &done));
    CHECK(done);
    // A worker that went to sleep wakes for the next launch.
    usleep(20000);
    atomic_store(&flag, 0);
    a.usec = 0;
    CHECK_OK(trn_stream_launch(s, sleep_task, &a, sizeof a));
    CHECK_OK(trn_stream_synchronize(s));
    CHECK_INT(atomic_load(&flag), 1);

    CHECK_STATUS(trn_stream_launch(NULL, sleep_task, &a, sizeof a), TRN_ERROR_INVALID_ARGUMENT);
    CHECK_STATUS(trn_stream_launch(s, NULL, &a, sizeof a), TRN_ERROR_INVALID_ARGUMENT);
    CHECK_STATUS(trn_stream_launch(s, sleep_task, NULL, 8), TRN_ERROR_INVALID_ARGUMENT);
    CHECK_STATUS(trn_stream_launch(s, sleep_task, &a, TRN_TASK_MAX_ARGS + 1),
                 TRN_ERROR_INVALID_ARGUMENT);
    CHECK_CONTAINS(trn_last_error(), "TRN_TASK_MAX_ARGS");
    CHECK_STATUS(trn_stream_synchronize(NULL), TRN_ERROR_INVALID_ARGUMENT);
    CHECK_STATUS(trn_stream_query(s, NULL), TRN_ERROR_INVALID_ARGUMENT);
}

static void test_errors(void) {
    trn_stream *s, *other;
    CHECK_OK(trn_stream_create(0, 0, &s));
    CHECK_OK(trn_stream_create(0, 0, &other));
    atomic_int flag = 0;
    sleep_args after = {0, &flag};
    fail_args f1 = {1}, f2 = {2};
    if (g_blocking) {
        // The launch itself reports the task's failure; nothing is deferred.
        CHECK_STATUS(trn_stream_launch(s, fail_task, &f1, sizeof f1), TRN_ERROR_KERNEL);
        CHECK_STR(trn_last_error(), "kernel 1 failed on purpose");
        CHECK_OK(trn_stream_launch(s, sleep_task, &after, sizeof after));
        CHECK_INT(atomic_load(&flag), 1);
        CHECK_OK(trn_stream_synchronize(s));
        CHECK_STATUS(trn_stream_launch(s, silent_fail_task, NULL, 0), TRN_ERROR_KERNEL);
        CHECK_CONTAINS(trn_last_error(), "kernel failed");
        CHECK_OK(trn_device_synchronize(0));
        return;
    }
    // Deferred: launches succeed, later tasks still run, the first error is
    // reported by the next synchronize, once.
    CHECK_OK(trn_stream_launch(s, fail_task, &f1, sizeof f1));
    CHECK_OK(trn_stream_launch(s, fail_task, &f2, sizeof f2));
    CHECK_OK(trn_stream_launch(s, sleep_task, &after, sizeof after));
    trn_clear_error();
    CHECK_STATUS(trn_stream_synchronize(s), TRN_ERROR_KERNEL);
    CHECK_STR(trn_last_error(), "kernel 1 failed on purpose");
    CHECK_INT(atomic_load(&flag), 1);
    CHECK_OK(trn_stream_synchronize(s));
    CHECK_OK(trn_stream_synchronize(other));  // errors stick to their stream

    // Device synchronize reports (the first) and clears every stream's error.
    CHECK_OK(trn_stream_launch(s, fail_task, &f1, sizeof f1));
    CHECK_OK(trn_stream_launch(other, fail_task, &f2, sizeof f2));
    CHECK_STATUS(trn_device_synchronize(0), TRN_ERROR_KERNEL);
    CHECK_CONTAINS(trn_last_error(), "failed on purpose");
    CHECK_OK(trn_stream_synchronize(s));
    CHECK_OK(trn_stream_synchronize(other));
    CHECK_OK(trn_device_synchronize(0));

    // A task that fails without a message still gets a useful one.
    CHECK_OK(trn_stream_launch(s, silent_fail_task, NULL, 0));
    CHECK_STATUS(trn_stream_synchronize(s), TRN_ERROR_KERNEL);
    CHECK_CONTAINS(trn_last_error(), "kernel failed");
    CHECK_OK(trn_stream_synchronize(s));
}

// Several threads launching on one stream: tasks never overlap, so a plain
// counter is safe, and every task runs.
typedef struct counter_args {
    int64_t *counter;
} counter_args;

static trn_status count_task(void *p) {
    const counter_args *a = p;
    int64_t v = *a->counter;
    *a->counter = v + 1;
    return TRN_SUCCESS;
}

typedef struct thread_ctx {
    trn_stream *stream;
    int64_t *counter;
    int failures;
} thread_ctx;

static void *launcher(void *arg) {
    thread_ctx *ctx = arg;
    counter_args a = {ctx->counter};
    for (int i = 0; i < 5000; i++)
        ctx->failures += trn_stream_launch(ctx->stream, count_task, &a, sizeof a) != TRN_SUCCESS;
    return NULL;
}

static void test_threads(void) {
    trn_stream *s;
    CHECK_OK(trn_stream_create(1, 0, &s));
    int64_t counter = 0;
    enum { T = 4 };
    thread_ctx ctx[T];
    pthread_t th[T];
    for (int i = 0; i < T; i++) {
        ctx[i] = (thread_ctx){s, &counter, 0};
        CHECK_INT(pthread_create(&th[i], NULL, launcher, &ctx[i]), 0);
    }
    for (int i = 0; i < T; i++) {
        CHECK_INT(pthread_join(th[i], NULL), 0);
        CHECK_INT(ctx[i].failures, 0);
    }
    CHECK_OK(trn_stream_synchronize(s));
    CHECK_INT(counter, T * 5000);
}

// Streams run in parallel in async mode: a task on one stream can wait for a
// task on another.
typedef struct rendezvous_args {
    atomic_int *flag;
} rendezvous_args;

static trn_status wait_flag_task(void *p) {
    const rendezvous_args *a = p;
    uint64_t start = trn__now_ns();
    while (!atomic_load(a->flag))
        if (trn__now_ns() - start > 5000000000u)
            return trn__set_error(TRN_ERROR_KERNEL, "streams did not run in parallel");
    return TRN_SUCCESS;
}

static trn_status set_flag_task(void *p) {
    const rendezvous_args *a = p;
    atomic_store(a->flag, 1);
    return TRN_SUCCESS;
}

static void test_parallel(void) {
    if (!g_async || g_blocking) return;
    trn_stream *a, *b;
    CHECK_OK(trn_stream_from_id(0, 5, &a));
    CHECK_OK(trn_stream_from_id(0, 6, &b));
    atomic_int flag = 0;
    rendezvous_args r = {&flag};
    CHECK_OK(trn_stream_launch(a, wait_flag_task, &r, sizeof r));
    CHECK_OK(trn_stream_launch(b, set_flag_task, &r, sizeof r));
    CHECK_OK(trn_stream_synchronize(a));
    CHECK_OK(trn_stream_synchronize(b));
}

// With worker threads, a thread that waits for a stream lends its core to the
// kernels the worker runs: some of a parallel kernel's chunks run on it.
enum { ASSIST_CHUNKS = 8 };
typedef struct assist_args {
    pthread_t *ran_on;
} assist_args;

static void assist_chunk(void *ctx, int64_t begin, int64_t end) {
    pthread_t *ran_on = ctx;
    for (int64_t i = begin; i < end; i++) {
        ran_on[i] = pthread_self();
        // Long enough that the synchronising thread arrives while chunks are
        // left, even on a loaded machine.
        struct timespec ts = {0, 25 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
}

static trn_status assist_task(void *p) {
    const assist_args *a = p;
    trn_parallel_for(ASSIST_CHUNKS, 1, assist_chunk, a->ran_on);
    return TRN_SUCCESS;
}

static void test_sync_assists(void) {
    if (!g_async || trn_parallel_threads() < 2) return;
    trn_stream *s;
    CHECK_OK(trn_stream_from_id(0, 7, &s));
    pthread_t ran_on[ASSIST_CHUNKS];
    assist_args a = {ran_on};
    CHECK_OK(trn_stream_launch(s, assist_task, &a, sizeof a));
    CHECK_OK(trn_stream_synchronize(s));
    int here = 0;
    for (int i = 0; i < ASSIST_CHUNKS; i++) here += pthread_equal(ran_on[i], pthread_self()) != 0;
    CHECK(here > 0);
    CHECK(here < ASSIST_CHUNKS);  // the worker ran its share too
}

// The worker takes queued tasks without the launchers' lock. A ring full
// behind a task that has not finished makes launchers wait for space, which
// the worker's release must wake; entries that wrap (padding published with
// them) must still run in order with their arguments intact.
static trn_status gate_task(void *p) {
    atomic_int *gate = *(atomic_int **)p;
    uint64_t start = trn__now_ns();
    while (!atomic_load(gate))
        if (trn__now_ns() - start > 5000000000u)
            return trn__set_error(TRN_ERROR_KERNEL, "the gate was never opened");
    return TRN_SUCCESS;
}

enum { FULL_RING_TASKS = 300 };  // ~1.2 MB of entries, several ring lengths

typedef struct fill_ctx {
    trn_stream *stream;
    order_log *log;
    atomic_int launched;
    int failures;
} fill_ctx;

static void *fill_launcher(void *arg) {
    fill_ctx *ctx = arg;
    _Alignas(16) unsigned char buf[TRN_TASK_MAX_ARGS];
    order_args *a = (order_args *)buf;
    for (int64_t i = 0; i < FULL_RING_TASKS; i++) {
        uint32_t fill = (uint32_t)(TRN_TASK_MAX_ARGS - sizeof(order_args) - (i % 7) * 96);
        a->log = ctx->log;
        a->seq = i;
        a->fill_size = fill;
        for (uint32_t k = 0; k < fill; k++) a->fill[k] = (unsigned char)(i * 31 + k);
        ctx->failures +=
            trn_stream_launch(ctx->stream, order_task, a, sizeof(order_args) + fill) != TRN_SUCCESS;
        atomic_fetch_add(&ctx->launched, 1);
    }
    return NULL;
}

static void test_full_ring(void) {
    if (!g_async || g_blocking) return;  // inline, the gate would block here
    trn_stream *s;
    CHECK_OK(trn_stream_from_id(0, 5, &s));
    order_log log = {calloc(FULL_RING_TASKS, sizeof(int64_t)), 0};
    CHECK(log.entries != NULL);
    if (log.entries == NULL) return;
    atomic_int gate = 0;
    atomic_int *gp = &gate;
    CHECK_OK(trn_stream_launch(s, gate_task, &gp, sizeof gp));
    fill_ctx ctx = {s, &log, 0, 0};
    pthread_t th;
    CHECK_INT(pthread_create(&th, NULL, fill_launcher, &ctx), 0);
    usleep(50000);
    // The ring holds well under FULL_RING_TASKS entries of ~4 KB.
    CHECK(atomic_load(&ctx.launched) < FULL_RING_TASKS);
    atomic_store(&gate, 1);
    CHECK_INT(pthread_join(th, NULL), 0);
    CHECK_INT(ctx.failures, 0);
    CHECK_OK(trn_stream_synchronize(s));
    CHECK_INT(log.count, FULL_RING_TASKS);
    int out_of_order = 0;
    for (int64_t i = 0; i < log.count; i++) out_of_order += log.entries[i] != i;
    CHECK_INT(out_of_order, 0);
    free(log.entries);
}

// A launch must wake a worker that went to sleep (idle past its spin): the
// task runs without anyone synchronising.
static void test_wakes_sleeping_worker(void) {
    trn_stream *s;
    CHECK_OK(trn_stream_from_id(0, 6, &s));
    for (int round = 0; round < 20; round++) {
        CHECK_OK(trn_stream_synchronize(s));
        usleep(2000);  // longer than the worker spins before it sleeps
        atomic_int flag = 0;
        sleep_args a = {0, &flag};
        CHECK_OK(trn_stream_launch(s, sleep_task, &a, sizeof a));
        uint64_t start = trn__now_ns();
        while (!atomic_load(&flag) && trn__now_ns() - start < 2000000000u) usleep(100);
        CHECK(atomic_load(&flag));
        if (!atomic_load(&flag)) break;
    }
    CHECK_OK(trn_stream_synchronize(s));
}

int main(void) {
    g_async = env_is("TORCH_NEURONX_ENABLE_ASYNC_NRT", "1");
    g_blocking = env_is("NEURON_LAUNCH_BLOCKING", "1");
    printf("mode: %s%s\n", g_async ? "worker threads" : "inline",
           g_blocking ? ", launch blocking" : "");
    CHECK(trn_stream_async_enabled() == g_async);
    test_ids();
    test_current();
    test_order();
    test_query_sync();
    test_errors();
    test_threads();
    test_parallel();
    test_sync_assists();
    test_full_ring();
    test_wakes_sleeping_worker();
    return TEST_REPORT();
}
