// test_sleep_task.h - the task the stream and event tests queue work behind:
// it sleeps `usec` microseconds, then raises *flag (when given), so a test
// can tell whether later work waited for it.
#ifndef TRN_TEST_SLEEP_TASK_H
#define TRN_TEST_SLEEP_TASK_H

#include <stdatomic.h>
#include <unistd.h>

#include "trn/stream.h"

typedef struct sleep_args {
    unsigned usec;
    atomic_int *flag;
} sleep_args;

static trn_status sleep_task(void *p) {
    const sleep_args *a = p;
    usleep(a->usec);
    if (a->flag) atomic_store(a->flag, 1);
    return TRN_SUCCESS;
}

#endif
