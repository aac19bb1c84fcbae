// test_status.c - status names and texts, and the thread-local last error.
#include <pthread.h>

#include "internal.h"
#include "test.h"

typedef struct thread_result {
    char before[64], after[64];
} thread_result;

// Records what a fresh thread sees; main checks it after joining (the
// harness counters are not thread-safe).
static void *other_thread(void *arg) {
    thread_result *r = arg;
    snprintf(r->before, sizeof r->before, "%s", trn_last_error());
    trn__set_error(TRN_ERROR_KERNEL, "worker %d", 7);
    snprintf(r->after, sizeof r->after, "%s", trn_last_error());
    return NULL;
}

int main(void) {
    CHECK_STR(trn_status_name(TRN_SUCCESS), "TRN_SUCCESS");
    CHECK_STR(trn_status_name(TRN_ERROR_OUT_OF_MEMORY), "TRN_ERROR_OUT_OF_MEMORY");
    CHECK_STR(trn_status_name(TRN_ERROR_FORKED), "TRN_ERROR_FORKED");
    CHECK_STR(trn_status_name(TRN_ERROR_KERNEL), "TRN_ERROR_KERNEL");
    CHECK_STR(trn_status_name((trn_status)42), "TRN_UNKNOWN_STATUS");
    CHECK_STR(trn_status_string(TRN_ERROR_OUT_OF_MEMORY), "out of device memory");
    CHECK_STR(trn_status_string(TRN_ERROR_INVALID_POINTER), "invalid device pointer");
    CHECK_STR(trn_status_string(TRN_SUCCESS), "success");
    CHECK_STR(trn_status_string((trn_status)-99), "unknown status");
#define EVERY_STATUS(name, value, text)                                                            \
    CHECK_STR(trn_status_name(name), #name);                                                       \
    CHECK_STR(trn_status_string(name), text);                                                      \
    CHECK_INT(name, value);
    TRN_STATUS_LIST(EVERY_STATUS)
#undef EVERY_STATUS

    CHECK_STR(trn_last_error(), "");
    CHECK_INT(
        trn__set_error(TRN_ERROR_INVALID_DEVICE, "neuron:%d is out of range: %d devices", 3, 2),
        TRN_ERROR_INVALID_DEVICE);
    CHECK_STR(trn_last_error(), "neuron:3 is out of range: 2 devices");
    // The previous message may be an argument of the next one.
    trn__set_error(TRN_ERROR_KERNEL, "wrapped: %s", trn_last_error());
    CHECK_STR(trn_last_error(), "wrapped: neuron:3 is out of range: 2 devices");

    pthread_t t;
    thread_result r;
    int rc = pthread_create(&t, NULL, other_thread, &r);
    CHECK_INT(rc, 0);
    if (rc == 0) {
        CHECK_INT(pthread_join(t, NULL), 0);
        CHECK_STR(r.before, "");         // a fresh thread starts without an error
        CHECK_STR(r.after, "worker 7");  // and keeps its own
    }
    CHECK_STR(trn_last_error(), "wrapped: neuron:3 is out of range: 2 devices");
    trn_clear_error();
    CHECK_STR(trn_last_error(), "");

    // Long messages are truncated, not overflowed.
    char big[4000];
    memset(big, 'x', sizeof big - 1);
    big[sizeof big - 1] = '\0';
    trn__set_error(TRN_ERROR_SYSTEM, "%s", big);
    CHECK_INT(strlen(trn_last_error()), TRN__ERROR_MAX - 1);

    CHECK_INT(trn_dtype_size(TRN_DTYPE_C128), 16);
    CHECK_INT(trn_dtype_size(TRN_DTYPE_BF16), 2);
    CHECK_INT(trn_dtype_size((trn_dtype)-1), 0);
    CHECK_INT(trn_dtype_size(TRN_DTYPE_COUNT), 0);
    CHECK_STR(trn_dtype_name(TRN_DTYPE_F32), "float32");
    CHECK_STR(trn_dtype_name(TRN_DTYPE_BOOL), "bool");
    CHECK_STR(trn_dtype_name((trn_dtype)99), "invalid");
    return TEST_REPORT();
}
