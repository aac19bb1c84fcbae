// test_poison.c - debug poisoning of freed device memory
// (TORCH_NEURONX_DEBUG_POISON_FREED, read once at init). Children re-exec
// this binary with it on, inline and with worker-thread streams: memory no
// tensor owns reads as 0xFF bytes (NaN floats), a freed block waits in the
// quarantine before reuse, a free poisons only after the work queued before
// it ran, and a host write into a freed block aborts when the block leaves
// the quarantine; a block freed while another stream still reads it (no
// trn_mem_record_stream) reads as NaN there, every time. Under AddressSanitizer the host
// touches of freed blocks are ASan's to report, so those checks are skipped.
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <unistd.h>

#include "internal.h"
#include "test.h"
#include "test_reexec.h"

#if defined(__SANITIZE_ADDRESS__)
#define TRN_TEST_ASAN 1
#else
#define TRN_TEST_ASAN 0
#endif

static bool all_poison(const void *p, size_t n) {
    const unsigned char *b = p;
    for (size_t i = 0; i < n; i++)
        if (b[i] != 0xFF) return false;
    return true;
}

// Sleeps, then writes `value` over n floats: work queued on a stream that
// still writes a block when the host frees it.
typedef struct late_write_args {
    unsigned usec;
    float *dst;
    int n;
    float value;
} late_write_args;

static trn_status late_write_task(void *p) {
    const late_write_args *a = p;
    usleep(a->usec);
    for (int i = 0; i < a->n; i++) a->dst[i] = a->value;
    return TRN_SUCCESS;
}

// Holds its stream until *open is set: work queued behind it waits for the
// test, not for a clock.
typedef struct gate_args {
    atomic_int *open;
} gate_args;

static trn_status gate_task(void *p) {
    const gate_args *g = p;
    while (!atomic_load(g->open)) usleep(100);
    return TRN_SUCCESS;
}

static void *open_later(void *p) {
    usleep(20000);
    atomic_store((atomic_int *)p, 1);
    return NULL;
}

static trn_status copy_f32(trn_stream *s, void *dst, const void *src, int64_t n) {
    int64_t one = 1;
    trn_copy_desc c = {1, &n, dst, &one, TRN_DTYPE_F32, src, &one, TRN_DTYPE_F32};
    return trn_copy_launch(s, &c);
}

// Child: what must hold with poisoning on (and never abort).
static int child_fill(void) {
    CHECK(trn__config_get()->poison);
    trn_stream *s;
    CHECK_OK(trn_stream_get_default(0, &s));
    enum { N = 1000 };
    float h[N], back[N];
    for (int i = 0; i < N; i++) h[i] = (float)i;

    // A fresh block holds poison, not zeros: an unwritten output is NaN.
    void *d;
    CHECK_OK(trn_mem_alloc(0, sizeof h, NULL, &d));
    CHECK_OK(copy_f32(s, back, d, N));
    CHECK_OK(trn_stream_synchronize(s));
    CHECK(back[0] != back[0] && back[N - 1] != back[N - 1]);

    // The next owner of a freed block never sees the last owner's values.
    CHECK_OK(copy_f32(s, d, h, N));
    CHECK_OK(trn_stream_synchronize(s));
    CHECK_OK(trn_mem_free(d));
#if !TRN_TEST_ASAN
    CHECK(all_poison(d, sizeof h));  // a read after the free sees NaN
#endif
    // Not handed out again at once (quarantine): a late reader meets poison.
    void *d2;
    CHECK_OK(trn_mem_alloc(0, sizeof h, NULL, &d2));
    CHECK(d2 != d);
    CHECK(all_poison(d2, sizeof h));

    // Work queued before the free still writes the block: the free poisons
    // after it, so the poison is intact when the block leaves the quarantine
    // (empty_cache drains it; without the wait, the late write would abort).
    late_write_args a = {20000, d2, N, 7.0f};
    CHECK_OK(trn_stream_launch(s, late_write_task, &a, sizeof a));
    CHECK_OK(trn_mem_free(d2));
    CHECK_OK(trn_mem_empty_cache(0));
    void *d3;
    CHECK_OK(trn_mem_alloc(0, sizeof h, NULL, &d3));
    CHECK(all_poison(d3, sizeof h));

    // Past the quarantine's length, freed blocks are reused again.
    void *many[300];
    for (int i = 0; i < 300; i++) CHECK_OK(trn_mem_alloc(0, 512, NULL, &many[i]));
    for (int i = 0; i < 300; i++) CHECK_OK(trn_mem_free(many[i]));
    void *again;
    CHECK_OK(trn_mem_alloc(0, 512, NULL, &again));
    bool reused = false;
    for (int i = 0; i < 300; i++) reused = reused || again == many[i];
    CHECK(reused);
    CHECK(all_poison(again, 512));
    CHECK_OK(trn_mem_free(again));

    // A block read on another stream and freed without
    // trn_mem_record_stream: the free poisons it at once (its own stream is
    // idle), so the other stream's queued read computes NaN every time,
    // where without poisoning it would read the old values or, after reuse,
    // the next owner's. Recorded, the free waits for that stream first.
    if (trn_stream_async_enabled()) {
        trn_stream *side;
        CHECK_OK(trn_stream_create(0, 0, &side));
        static atomic_int open;
        for (int record = TRN_TEST_ASAN; record < 2; record++) {
            atomic_store(&open, 0);
            void *x;
            CHECK_OK(trn_mem_alloc(0, sizeof h, NULL, &x));
            CHECK_OK(copy_f32(s, x, h, N));
            CHECK_OK(trn_stream_synchronize(s));
            gate_args g = {&open};
            CHECK_OK(trn_stream_launch(side, gate_task, &g, sizeof g));
            back[0] = back[N - 1] = 0.0f;
            CHECK_OK(copy_f32(side, back, x, N));
            if (record) {
                CHECK_OK(trn_mem_record_stream(x, side));
                pthread_t t;
                CHECK_INT(pthread_create(&t, NULL, open_later, &open), 0);
                CHECK_OK(trn_mem_free(x));  // returns once the side stream ran
                CHECK_INT(pthread_join(t, NULL), 0);
            } else {
                CHECK_OK(trn_mem_free(x));
                atomic_store(&open, 1);
            }
            CHECK_OK(trn_stream_synchronize(side));
            if (record)
                CHECK(back[0] == 0.0f && back[N - 1] == (float)(N - 1));
            else
                CHECK(back[0] != back[0] && back[N - 1] != back[N - 1]);
        }
    }

    // Split and merged blocks stay poisoned too.
    void *big, *part;
    CHECK_OK(trn_mem_alloc(0, 200 * 1024, NULL, &big));
    memset(big, 0, 200 * 1024);
    CHECK_OK(trn_mem_free(big));
    CHECK_OK(trn_mem_alloc(0, 100 * 1024, NULL, &part));
    CHECK(all_poison(part, 100 * 1024));
    CHECK_OK(trn_mem_free(part));
    CHECK_OK(trn_mem_free(d3));
    CHECK_OK(trn_stream_synchronize(s));
    CHECK_OK(trn_mem_empty_cache(0));
    return TEST_REPORT();
}

// Child: a host write into a freed block must abort when the block leaves
// the quarantine (drained here by empty_cache).
static int child_write_after_free(void) {
    void *d;
    if (trn_mem_alloc(0, 4096, NULL, &d) != TRN_SUCCESS || trn_mem_free(d) != TRN_SUCCESS) return 2;
    ((volatile float *)d)[100] = 1.0f;  // the late writer
    (void)trn_mem_empty_cache(0);       // must abort
    return 3;
}

// The child's settings: poisoning on, worker-thread streams (`*async`) or not.
static void poison_env(const void *async) {
    setenv("TORCH_NEURONX_DEBUG_POISON_FREED", "1", 1);
    setenv("TORCH_NEURONX_ENABLE_ASYNC_NRT", *(const bool *)async ? "1" : "0", 1);
}

int main(int argc, char **argv) {
    if (argc > 1 && strcmp(argv[1], "fill") == 0) return child_fill();
    if (argc > 1 && strcmp(argv[1], "write") == 0) return child_write_after_free();

    // Off unless asked for.
    unsetenv("TORCH_NEURONX_DEBUG_POISON_FREED");
    CHECK_OK(trn_runtime_init());
    CHECK(!trn__config_get()->poison);

    for (int async = 0; async < 2; async++) {
        const bool on = async;
        int st = test_reexec(argv[0], "fill", poison_env, &on);
        CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    }
    if (!TRN_TEST_ASAN) {
        const bool off = false;
        int st = test_reexec(argv[0], "write", poison_env, &off);
        CHECK(WIFSIGNALED(st));
        if (WIFSIGNALED(st))
            CHECK_INT(WTERMSIG(st), SIGABRT);
        else
            fprintf(stderr, "write child exited with %d\n", WEXITSTATUS(st));
    }
    return TEST_REPORT();
}
