// test_event.c - events: record/query/synchronize, elapsed time, a stream
// waiting on another stream's event, re-recording, destroying an event whose
// record is still queued, and deferred errors seen through an event.
// CTest runs it in both execution modes.
#include <stdatomic.h>
#include <stdlib.h>
#include <unistd.h>

#include "internal.h"
#include "test.h"
#include "test_sleep_task.h"

static bool g_async;

typedef struct check_args {
    atomic_int *flag;
} check_args;

// Fails unless the flag was already set by the other stream.
static trn_status check_flag_task(void *p) {
    const check_args *a = p;
    if (!atomic_load(a->flag))
        return trn__set_error(TRN_ERROR_KERNEL, "ran before the event completed");
    return TRN_SUCCESS;
}

static trn_status fail_task(void *p) {
    (void)p;
    return trn__set_error(TRN_ERROR_KERNEL, "failure seen through an event");
}

static void test_basics(void) {
    trn_event *e;
    CHECK_OK(trn_event_create(0, &e));
    bool done = false;
    CHECK_OK(trn_event_query(e, &done));
    CHECK(done);  // never recorded counts as done
    CHECK_OK(trn_event_synchronize(e));
    CHECK_INT(trn_event_device(e), -1);
    trn_stream *s, *dev1;
    CHECK_OK(trn_stream_create(0, 0, &s));
    CHECK_OK(trn_stream_wait_event(s, e));  // no-op

    atomic_int flag = 0;
    sleep_args slow = {100000, &flag};
    CHECK_OK(trn_stream_launch(s, sleep_task, &slow, sizeof slow));
    CHECK_OK(trn_event_record(e, s));
    CHECK_INT(trn_event_device(e), 0);
    CHECK_OK(trn_event_query(e, &done));
    CHECK(done == !g_async);
    CHECK_OK(trn_event_synchronize(e));
    CHECK_INT(atomic_load(&flag), 1);
    CHECK_OK(trn_event_query(e, &done));
    CHECK(done);

    CHECK_OK(trn_stream_get_default(1, &dev1));
    CHECK_OK(trn_event_record(e, dev1));
    CHECK_INT(trn_event_device(e), 1);
    CHECK_OK(trn_event_synchronize(e));
    trn_event_destroy(e);
    trn_event_destroy(NULL);

    CHECK_STATUS(trn_event_create(0, NULL), TRN_ERROR_INVALID_ARGUMENT);
    CHECK_STATUS(trn_event_record(NULL, s), TRN_ERROR_INVALID_ARGUMENT);
    CHECK_STATUS(trn_event_query(NULL, &done), TRN_ERROR_INVALID_ARGUMENT);
    CHECK_STATUS(trn_event_synchronize(NULL), TRN_ERROR_INVALID_ARGUMENT);
    CHECK_STATUS(trn_stream_wait_event(s, NULL), TRN_ERROR_INVALID_ARGUMENT);
    CHECK_INT(trn_event_device(NULL), -1);
}

static void test_elapsed(void) {
    trn_stream *s;
    CHECK_OK(trn_stream_create(0, 0, &s));
    trn_event *start, *end, *plain;
    CHECK_OK(trn_event_create(TRN_EVENT_TIMING, &start));
    CHECK_OK(trn_event_create(TRN_EVENT_TIMING, &end));
    CHECK_OK(trn_event_create(0, &plain));
    double ms = -1;
    CHECK_STATUS(trn_event_elapsed_ms(start, end, &ms), TRN_ERROR_INVALID_ARGUMENT);
    CHECK_CONTAINS(trn_last_error(), "never recorded");

    sleep_args slow = {30000, NULL};
    CHECK_OK(trn_event_record(start, s));
    CHECK_OK(trn_stream_launch(s, sleep_task, &slow, sizeof slow));
    CHECK_OK(trn_event_record(end, s));
    if (g_async) {
        CHECK_STATUS(trn_event_elapsed_ms(start, end, &ms), TRN_ERROR_INVALID_ARGUMENT);
        CHECK_CONTAINS(trn_last_error(), "has not completed");
    }
    CHECK_OK(trn_event_synchronize(end));
    CHECK_OK(trn_event_elapsed_ms(start, end, &ms));
    CHECK(ms >= 25.0 && ms < 5000.0);
    double back = 0;
    CHECK_OK(trn_event_elapsed_ms(end, start, &back));
    CHECK(back == -ms);

    CHECK_OK(trn_event_record(plain, s));
    CHECK_OK(trn_event_synchronize(plain));
    CHECK_STATUS(trn_event_elapsed_ms(start, plain, &ms), TRN_ERROR_INVALID_ARGUMENT);
    CHECK_CONTAINS(trn_last_error(), "TRN_EVENT_TIMING");
    CHECK_STATUS(trn_event_elapsed_ms(start, end, NULL), TRN_ERROR_INVALID_ARGUMENT);
    trn_event_destroy(start);
    trn_event_destroy(end);
    trn_event_destroy(plain);
}

static void test_cross_stream_wait(void) {
    trn_stream *producer, *consumer;
    CHECK_OK(trn_stream_from_id(0, 1, &producer));
    CHECK_OK(trn_stream_from_id(0, 2, &consumer));
    trn_event *e;
    CHECK_OK(trn_event_create(0, &e));
    for (int round = 0; round < 5; round++) {
        atomic_int flag = 0;
        sleep_args slow = {20000, &flag};
        check_args check = {&flag};
        CHECK_OK(trn_stream_launch(producer, sleep_task, &slow, sizeof slow));
        CHECK_OK(trn_event_record(e, producer));
        CHECK_OK(trn_stream_wait_event(consumer, e));
        CHECK_OK(trn_stream_launch(consumer, check_flag_task, &check, sizeof check));
        CHECK_OK(trn_stream_synchronize(consumer));
        CHECK_OK(trn_stream_synchronize(producer));
    }
    // Across devices too.
    trn_stream *other_dev;
    CHECK_OK(trn_stream_get_default(1, &other_dev));
    atomic_int flag = 0;
    sleep_args slow = {20000, &flag};
    check_args check = {&flag};
    CHECK_OK(trn_stream_launch(producer, sleep_task, &slow, sizeof slow));
    CHECK_OK(trn_event_record(e, producer));
    CHECK_OK(trn_stream_wait_event(other_dev, e));
    CHECK_OK(trn_stream_launch(other_dev, check_flag_task, &check, sizeof check));
    CHECK_OK(trn_stream_synchronize(other_dev));
    trn_event_destroy(e);
}

static void test_rerecord_and_destroy(void) {
    trn_stream *busy, *idle;
    CHECK_OK(trn_stream_from_id(0, 7, &busy));
    CHECK_OK(trn_stream_from_id(0, 8, &idle));
    trn_event *e;
    CHECK_OK(trn_event_create(TRN_EVENT_TIMING, &e));
    atomic_int flag = 0;
    sleep_args slow = {200000, &flag};
    CHECK_OK(trn_stream_launch(busy, sleep_task, &slow, sizeof slow));
    CHECK_OK(trn_event_record(e, busy));
    // Re-recording on an idle stream replaces the capture: the event
    // completes without waiting for the busy stream.
    CHECK_OK(trn_event_record(e, idle));
    CHECK_OK(trn_event_synchronize(e));
    if (g_async) CHECK_INT(atomic_load(&flag), 0);
    bool done = false;
    CHECK_OK(trn_event_query(e, &done));
    CHECK(done);
    CHECK_OK(trn_stream_synchronize(busy));
    CHECK_OK(trn_event_query(e, &done));
    CHECK(done);

    // Destroy while the record is still queued behind a slow task.
    trn_event *pending;
    CHECK_OK(trn_event_create(TRN_EVENT_TIMING, &pending));
    CHECK_OK(trn_stream_launch(busy, sleep_task, &slow, sizeof slow));
    CHECK_OK(trn_event_record(pending, busy));
    trn_stream *waiter;
    CHECK_OK(trn_stream_from_id(0, 4, &waiter));
    CHECK_OK(trn_stream_wait_event(waiter, pending));
    trn_event_destroy(pending);
    CHECK_OK(trn_stream_synchronize(waiter));
    CHECK_OK(trn_stream_synchronize(busy));
    trn_event_destroy(e);
}

static void test_error_through_event(void) {
    if (getenv("NEURON_LAUNCH_BLOCKING") && strcmp(getenv("NEURON_LAUNCH_BLOCKING"), "1") == 0)
        return;  // launches report errors themselves then
    trn_stream *s;
    CHECK_OK(trn_stream_from_id(0, 3, &s));
    trn_event *e;
    CHECK_OK(trn_event_create(0, &e));
    CHECK_OK(trn_stream_launch(s, fail_task, NULL, 0));
    CHECK_OK(trn_event_record(e, s));
    CHECK_STATUS(trn_event_synchronize(e), TRN_ERROR_KERNEL);
    CHECK_STR(trn_last_error(), "failure seen through an event");
    CHECK_OK(trn_stream_synchronize(s));  // cleared
    CHECK_OK(trn_event_synchronize(e));
    trn_event_destroy(e);
}

int main(void) {
    const char *mode = getenv("TORCH_NEURONX_ENABLE_ASYNC_NRT");
    g_async = mode == NULL || strcmp(mode, "0") != 0;  // worker threads unless "0"
    CHECK(trn_stream_async_enabled() == g_async);
    test_basics();
    test_elapsed();
    test_cross_stream_wait();
    test_rerecord_and_destroy();
    test_error_through_event();
    return TEST_REPORT();
}
