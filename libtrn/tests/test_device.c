// test_device.c - device-count parsing (all env forms, valid and invalid),
// the environment read itself (in forked children, before the runtime
// exists), current device, range errors, properties and runtime state.
#include <pthread.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include "internal.h"
#include "test.h"

static int parse(const char *visible, const char *num, char *why) {
    return trn__device_parse_env(visible, num, why, 256);
}

static void test_parser(void) {
    char why[256];
    CHECK_INT(parse(NULL, NULL, why), TRN_DEFAULT_DEVICE_COUNT);
    CHECK_STR(why, "");
    CHECK_INT(parse("", "", why), TRN_DEFAULT_DEVICE_COUNT);
    CHECK_INT(parse("0-1", NULL, why), 2);
    CHECK_STR(why, "");
    CHECK_INT(parse("0,2", NULL, why), 2);
    CHECK_INT(parse("3", NULL, why), 1);
    CHECK_INT(parse("4-7", NULL, why), 4);
    CHECK_INT(parse("0-1,4,6-7", NULL, why), 5);
    CHECK_INT(parse(" 0 - 2 , 5 ", NULL, why), 4);
    CHECK_INT(parse("0-63", NULL, why), 64);
    // VISIBLE_CORES wins over NUM_CORES.
    CHECK_INT(parse("0", "4", why), 1);
    CHECK_INT(parse(NULL, "4", why), 4);
    CHECK_INT(parse(NULL, " 1 ", why), 1);
    CHECK_INT(parse(NULL, "64", why), 64);

    CHECK_INT(parse("abc", NULL, why), 0);
    CHECK_CONTAINS(why, "NEURON_RT_VISIBLE_CORES='abc' is invalid");
    CHECK_CONTAINS(why, "'0-1', '0,2' or '3'");
    CHECK_INT(parse("1-", NULL, why), 0);
    CHECK_CONTAINS(why, "NEURON_RT_VISIBLE_CORES='1-'");
    CHECK_INT(parse("0,", NULL, why), 0);
    CHECK_INT(parse("-1", NULL, why), 0);
    CHECK_INT(parse("0;1", NULL, why), 0);
    CHECK_INT(parse("3-1", NULL, why), 0);
    CHECK_CONTAINS(why, "range 3-1 is reversed");
    CHECK_INT(parse("0,1,1", NULL, why), 0);
    CHECK_CONTAINS(why, "core 1 is listed twice");
    CHECK_INT(parse("0-64", NULL, why), 0);
    CHECK_CONTAINS(why, "more than the 64 supported");
    CHECK_INT(parse("99999999999999999999", NULL, why), 0);
    CHECK_INT(parse("abc", "2", why), 0);  // a bad VISIBLE_CORES is not ignored

    CHECK_INT(parse(NULL, "0", why), 0);
    CHECK_CONTAINS(why, "NEURON_RT_NUM_CORES='0' is invalid");
    CHECK_CONTAINS(why, "from 1 to 64");
    CHECK_INT(parse(NULL, "65", why), 0);
    CHECK_INT(parse(NULL, "-2", why), 0);
    CHECK_INT(parse(NULL, "2x", why), 0);
    CHECK_INT(parse(NULL, "two", why), 0);
    CHECK_INT(parse(NULL, "99999999999999999999999", why), 0);
}

// Runs the real environment read in a child (the count is read once per
// process) and checks the count and the message of trn_device_check(0).
static void check_env(const char *visible, const char *num, int expected,
                      const char *message_part) {
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) {
        if (visible)
            setenv("NEURON_RT_VISIBLE_CORES", visible, 1);
        else
            unsetenv("NEURON_RT_VISIBLE_CORES");
        if (num)
            setenv("NEURON_RT_NUM_CORES", num, 1);
        else
            unsetenv("NEURON_RT_NUM_CORES");
        CHECK_INT(trn_device_count(), expected);
        CHECK_INT(trn_device_count(), expected);  // stable
        if (message_part != NULL) {
            CHECK_STATUS(trn_device_check(0), TRN_ERROR_INVALID_DEVICE);
            CHECK_CONTAINS(trn_last_error(), "neuron:0 is out of range: 0 devices");
            CHECK_CONTAINS(trn_last_error(), message_part);
            void *p = NULL;
            CHECK_STATUS(trn_mem_alloc(0, 16, NULL, &p), TRN_ERROR_INVALID_DEVICE);
            CHECK_CONTAINS(trn_last_error(), message_part);
        } else {
            CHECK_OK(trn_device_check(expected - 1));
            CHECK_STATUS(trn_device_check(expected), TRN_ERROR_INVALID_DEVICE);
        }
        fflush(NULL);
        _exit(test_failed == 0 ? 0 : 1);
    }
    int status = 0;
    CHECK_INT(waitpid(pid, &status, 0), pid);
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
}

static void test_env(void) {
    check_env(NULL, NULL, 2, NULL);
    check_env("0-1", NULL, 2, NULL);
    check_env("0,2", NULL, 2, NULL);
    check_env("3", NULL, 1, NULL);
    check_env(NULL, "4", 4, NULL);
    check_env("0-2", "7", 3, NULL);
    check_env("x", NULL, 0, "NEURON_RT_VISIBLE_CORES='x' is invalid");
    check_env(NULL, "zero", 0, "NEURON_RT_NUM_CORES='zero' is invalid");
}

static void *thread_device(void *arg) {
    *(int *)arg = trn_device_get_current();
    return NULL;
}

static void test_current(void) {
    CHECK_INT(trn_device_get_current(), 0);
    CHECK_OK(trn_device_set_current(1));
    CHECK_INT(trn_device_get_current(), 1);
    CHECK_STATUS(trn_device_set_current(2), TRN_ERROR_INVALID_DEVICE);
    CHECK_STR(trn_last_error(), "neuron:2 is out of range: 2 devices");
    CHECK_INT(trn_device_get_current(), 1);
    int seen = -1;
    pthread_t t;
    CHECK_INT(pthread_create(&t, NULL, thread_device, &seen), 0);
    CHECK_INT(pthread_join(t, NULL), 0);
    CHECK_INT(seen, 0);  // current device is per thread
    CHECK_OK(trn_device_set_current(0));

    CHECK_STATUS(trn_device_check(-1), TRN_ERROR_INVALID_DEVICE);
    CHECK_STR(trn_last_error(), "neuron:-1 is out of range: 2 devices");
    CHECK_STATUS(trn_device_check(TRN_MAX_DEVICES), TRN_ERROR_INVALID_DEVICE);
    CHECK_CONTAINS(trn_last_error(), "2 devices");
    trn_stream *s;
    CHECK_STATUS(trn_stream_get_default(5, &s), TRN_ERROR_INVALID_DEVICE);
    CHECK_STR(trn_last_error(), "neuron:5 is out of range: 2 devices");
    void *p;
    CHECK_STATUS(trn_mem_alloc(2, 64, NULL, &p), TRN_ERROR_INVALID_DEVICE);
    CHECK_STR(trn_last_error(), "neuron:2 is out of range: 2 devices");
    CHECK_STATUS(trn_device_synchronize(3), TRN_ERROR_INVALID_DEVICE);
}

static void test_props(void) {
    trn_device_props props;
    CHECK_OK(trn_device_get_props(1, &props));
    CHECK_STR(props.name, "OpenNeuron NeuronCore-v3 (emulated)");
    CHECK_U64(props.total_memory, (uint64_t)3 << 30);
    CHECK(props.core_count >= 1);
    CHECK_STATUS(trn_device_get_props(0, NULL), TRN_ERROR_INVALID_ARGUMENT);
    CHECK_STATUS(trn_device_get_props(2, &props), TRN_ERROR_INVALID_DEVICE);
}

static void test_runtime(void) {
    CHECK_OK(trn_runtime_init());
    CHECK_OK(trn_runtime_init());
    CHECK(trn_runtime_is_initialized());
    CHECK(!trn_runtime_in_bad_fork());
    CHECK_OK(trn_device_synchronize(0));
    CHECK_OK(trn_device_synchronize(1));
}

int main(void) {
    test_parser();
    test_env();  // before this process reads its own environment
    unsetenv("NEURON_RT_VISIBLE_CORES");
    unsetenv("NEURON_RT_NUM_CORES");
    setenv("TORCH_NEURONX_HBM_SIZE", "3G", 1);
    CHECK(!trn_runtime_is_initialized());
    CHECK_OK(trn_device_synchronize(0));   // nothing to wait for yet
    CHECK(!trn_runtime_is_initialized());  // device calls alone do not init
    test_current();
    test_props();
    test_runtime();
    return TEST_REPORT();
}
