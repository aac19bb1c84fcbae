// test_stream_hook.c - the pending hook (trn/stream_hook.h): a marked stream
// calls the hook once before its next launch, synchronize or query, and
// before a device synchronize; the hook's own launches pass straight
// through (the mark is cleared first); a failing hook fails the launch, or
// becomes the stream's deferred error for a synchronize.
#include <stdatomic.h>

#include "test.h"
#include "trn/stream_hook.h"

static atomic_int g_calls, g_order, g_hook_ran_at, g_task_ran_at, g_last_why;
static trn_status g_hook_result = TRN_SUCCESS;

static trn_status order_task(void *p) {
    atomic_int *slot = *(atomic_int **)p;
    atomic_store(slot, atomic_fetch_add(&g_order, 1) + 1);
    return TRN_SUCCESS;
}

static trn_status hook(trn_stream *s, int why, char *msg, size_t msg_size) {
    atomic_fetch_add(&g_calls, 1);
    atomic_store(&g_last_why, why);
    if (g_hook_result != TRN_SUCCESS) {
        snprintf(msg, msg_size, "held work failed");
        return g_hook_result;
    }
    atomic_int *slot = &g_hook_ran_at;
    return trn_stream_launch(s, order_task, &slot, sizeof slot);  // not re-entered
}

int main(void) {
    trn_stream_set_pending_hook(hook);
    trn_stream *s;
    CHECK_OK(trn_stream_create(0, 0, &s));
    atomic_int *slot = &g_task_ran_at;

    // Unmarked: no call.
    CHECK_OK(trn_stream_launch(s, order_task, &slot, sizeof slot));
    CHECK_OK(trn_stream_synchronize(s));
    CHECK_INT(atomic_load(&g_calls), 0);

    // Marked: the held work runs before the next task, once.
    trn_stream_mark_pending(s);
    CHECK_OK(trn_stream_launch(s, order_task, &slot, sizeof slot));
    CHECK_OK(trn_stream_synchronize(s));
    CHECK_INT(atomic_load(&g_calls), 1);
    CHECK_INT(atomic_load(&g_last_why), TRN_PENDING_LAUNCH);
    CHECK(atomic_load(&g_hook_ran_at) < atomic_load(&g_task_ran_at));

    // Synchronize, query and device synchronize each reach it.
    trn_stream_mark_pending(s);
    CHECK_OK(trn_stream_synchronize(s));
    CHECK_INT(atomic_load(&g_calls), 2);
    CHECK_INT(atomic_load(&g_last_why), TRN_PENDING_SYNC);
    trn_stream_mark_pending(s);
    bool done = false;
    CHECK_OK(trn_stream_query(s, &done));
    CHECK_INT(atomic_load(&g_calls), 3);
    trn_stream_mark_pending(s);
    CHECK_OK(trn_device_synchronize(0));
    CHECK_INT(atomic_load(&g_calls), 4);
    CHECK_OK(trn_stream_synchronize(s));
    CHECK_INT(atomic_load(&g_calls), 4);  // cleared

    // A failing hook: the launch fails with its message; a synchronize
    // reports it once as the stream's error.
    g_hook_result = TRN_ERROR_KERNEL;
    trn_stream_mark_pending(s);
    CHECK_STATUS(trn_stream_launch(s, order_task, &slot, sizeof slot), TRN_ERROR_KERNEL);
    CHECK_STR(trn_last_error(), "held work failed");
    trn_stream_mark_pending(s);
    CHECK_STATUS(trn_stream_synchronize(s), TRN_ERROR_KERNEL);
    CHECK_OK(trn_stream_synchronize(s));
    g_hook_result = TRN_SUCCESS;
    trn_stream_set_pending_hook(NULL);
    return TEST_REPORT();
}
