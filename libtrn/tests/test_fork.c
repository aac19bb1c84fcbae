// test_fork.c - fork safety: a child forked before initialisation may use
// the runtime; a child forked after it gets TRN_ERROR_FORKED from every entry
// point (device counting still works), and the parent is unaffected.
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include "internal.h"
#include "test.h"

static trn_status nop_task(void *args) {
    (void)args;
    return TRN_SUCCESS;
}

static void in_child(void (*fn)(void)) {
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) {
        fn();
        fflush(NULL);
        _exit(test_failed == 0 ? 0 : 1);
    }
    int status = 0;
    CHECK_INT(waitpid(pid, &status, 0), pid);
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
}

static void child_before_init(void) {
    CHECK(!trn_runtime_in_bad_fork());
    void *p;
    CHECK_OK(trn_mem_alloc(0, 128, NULL, &p));
    trn_stream *s;
    CHECK_OK(trn_stream_get_default(0, &s));
    CHECK_OK(trn_stream_launch(s, nop_task, NULL, 0));
    CHECK_OK(trn_stream_synchronize(s));
    CHECK_OK(trn_mem_free(p));
}

static trn_stream *g_stream;
static void *g_block;
static trn_event *g_event;
static void *g_pinned;

static void child_grandchild(void) {
    CHECK(trn_runtime_in_bad_fork());
    trn_stream *s;
    CHECK_STATUS(trn_stream_get_default(0, &s), TRN_ERROR_FORKED);
}

#define CHECK_FORKED(call)                                                       \
    do {                                                                         \
        trn_clear_error();                                                       \
        CHECK_STATUS(call, TRN_ERROR_FORKED);                                    \
        CHECK_CONTAINS(trn_last_error(), "cannot be used in a forked subprocess"); \
        CHECK_CONTAINS(trn_last_error(), "'spawn' start method");                \
    } while (0)

static void child_after_init(void) {
    CHECK(trn_runtime_in_bad_fork());
    CHECK(trn_runtime_is_initialized());
    // Counting and checking devices stay allowed.
    CHECK_INT(trn_device_count(), 2);
    CHECK_OK(trn_device_check(1));
    CHECK_STATUS(trn_device_check(2), TRN_ERROR_INVALID_DEVICE);

    void *p = NULL;
    trn_stream *s;
    trn_event *e;
    trn_device_props props;
    trn_mem_stats stats;
    size_t a, b;
    int dev;
    bool done;
    CHECK_FORKED(trn_runtime_init());
    CHECK_FORKED(trn_mem_alloc(0, 128, NULL, &p));
    CHECK(p == NULL);
    CHECK_FORKED(trn_mem_free(g_block));
    CHECK_FORKED(trn_mem_record_stream(g_block, g_stream));
    CHECK_FORKED(trn_mem_empty_cache(0));
    CHECK_FORKED(trn_mem_get_stats(0, &stats));
    CHECK_FORKED(trn_mem_reset_peak(0));
    CHECK_FORKED(trn_mem_reset_accumulated(0));
    CHECK_FORKED(trn_mem_get_info(0, &a, &b));
    CHECK_FORKED(trn_mem_get_device(g_block, &dev));
    CHECK_FORKED(trn_host_alloc(64, &p));
    CHECK_FORKED(trn_host_free(g_pinned));
    CHECK(!trn_host_is_pinned(g_pinned));
    CHECK_FORKED(trn_device_set_current(0));
    CHECK_FORKED(trn_device_get_props(0, &props));
    CHECK_FORKED(trn_device_synchronize(0));
    CHECK_FORKED(trn_stream_get_default(0, &s));
    CHECK_FORKED(trn_stream_create(0, 0, &s));
    CHECK_FORKED(trn_stream_from_id(0, 1, &s));
    CHECK_FORKED(trn_stream_get_current(0, &s));
    CHECK_FORKED(trn_stream_set_current(g_stream));
    CHECK_FORKED(trn_stream_launch(g_stream, nop_task, NULL, 0));
    CHECK_FORKED(trn_stream_synchronize(g_stream));
    CHECK_FORKED(trn_stream_query(g_stream, &done));
    CHECK_FORKED(trn_stream_wait_event(g_stream, g_event));
    CHECK_FORKED(trn_event_create(0, &e));
    CHECK_FORKED(trn_event_record(g_event, g_stream));
    CHECK_FORKED(trn_event_query(g_event, &done));
    CHECK_FORKED(trn_event_synchronize(g_event));
    double ms;
    CHECK_FORKED(trn_event_elapsed_ms(g_event, g_event, &ms));
    float x = 0, y = 0;
    int64_t one = 1;
    trn_copy_desc c = {1, &one, &x, &one, TRN_DTYPE_F32, &y, &one, TRN_DTYPE_F32};
    CHECK_FORKED(trn_copy_launch(g_stream, &c));
    // A grandchild is just as forked.
    in_child(child_grandchild);
}

int main(void) {
    setenv("TORCH_NEURONX_HBM_SIZE", "1G", 1);
    CHECK(!trn_runtime_is_initialized());
    in_child(child_before_init);
    CHECK(!trn_runtime_is_initialized());

    CHECK_OK(trn_stream_get_default(0, &g_stream));
    CHECK(trn_runtime_is_initialized());
    CHECK_OK(trn_mem_alloc(0, 256, NULL, &g_block));
    CHECK_OK(trn_event_create(0, &g_event));
    CHECK_OK(trn_host_alloc(64, &g_pinned));
    // Leave a worker thread running (async mode) while forking.
    CHECK_OK(trn_stream_launch(g_stream, nop_task, NULL, 0));
    CHECK_OK(trn_event_record(g_event, g_stream));
    in_child(child_after_init);

    // The parent carries on.
    CHECK(!trn_runtime_in_bad_fork());
    CHECK_OK(trn_stream_launch(g_stream, nop_task, NULL, 0));
    CHECK_OK(trn_stream_synchronize(g_stream));
    CHECK_OK(trn_event_synchronize(g_event));
    CHECK_OK(trn_mem_free(g_block));
    CHECK_OK(trn_host_free(g_pinned));
    trn_event_destroy(g_event);
    return TEST_REPORT();
}
