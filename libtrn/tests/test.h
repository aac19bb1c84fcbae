// test.h - the tests' tiny harness: CHECK macros that print file:line and
// both values on failure, counters, and TEST_REPORT(), which prints the final
// "N passed, N failed" line and gives the exit status.
#ifndef TRN_TEST_H
#define TRN_TEST_H

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "trn/trn.h"

// Atomic: tests check from several threads (ThreadSanitizer runs them).
static _Atomic int test_passed, test_failed;

static inline void test_fail_header(const char *file, int line) {
    test_failed++;
    fprintf(stderr, "%s:%d: FAILED ", file, line);
}

#define CHECK(cond)                                                                                \
    do {                                                                                           \
        if (cond) {                                                                                \
            test_passed++;                                                                         \
        } else {                                                                                   \
            test_fail_header(__FILE__, __LINE__);                                                  \
            fprintf(stderr, "CHECK(%s)\n", #cond);                                                 \
        }                                                                                          \
    } while (0)

#define CHECK_INT(a, b)                                                                            \
    do {                                                                                           \
        long long check_a_ = (long long)(a), check_b_ = (long long)(b);                            \
        if (check_a_ == check_b_) {                                                                \
            test_passed++;                                                                         \
        } else {                                                                                   \
            test_fail_header(__FILE__, __LINE__);                                                  \
            fprintf(stderr, "%s == %s: %lld vs %lld\n", #a, #b, check_a_, check_b_);               \
        }                                                                                          \
    } while (0)

#define CHECK_U64(a, b)                                                                            \
    do {                                                                                           \
        uint64_t check_a_ = (uint64_t)(a), check_b_ = (uint64_t)(b);                               \
        if (check_a_ == check_b_) {                                                                \
            test_passed++;                                                                         \
        } else {                                                                                   \
            test_fail_header(__FILE__, __LINE__);                                                  \
            fprintf(stderr, "%s == %s: %" PRIu64 " vs %" PRIu64 "\n", #a, #b, check_a_, check_b_); \
        }                                                                                          \
    } while (0)

#define CHECK_STR(a, b)                                                                            \
    do {                                                                                           \
        const char *check_a_ = (a), *check_b_ = (b);                                               \
        if (strcmp(check_a_, check_b_) == 0) {                                                     \
            test_passed++;                                                                         \
        } else {                                                                                   \
            test_fail_header(__FILE__, __LINE__);                                                  \
            fprintf(stderr, "%s == %s: \"%s\" vs \"%s\"\n", #a, #b, check_a_, check_b_);           \
        }                                                                                          \
    } while (0)

// Substring check, for error messages.
#define CHECK_CONTAINS(haystack, needle)                                                           \
    do {                                                                                           \
        const char *check_h_ = (haystack), *check_n_ = (needle);                                   \
        if (strstr(check_h_, check_n_) != NULL) {                                                  \
            test_passed++;                                                                         \
        } else {                                                                                   \
            test_fail_header(__FILE__, __LINE__);                                                  \
            fprintf(stderr, "\"%s\" contains \"%s\"\n", check_h_, check_n_);                       \
        }                                                                                          \
    } while (0)

#define CHECK_STATUS(call, expected)                                                               \
    do {                                                                                           \
        trn_status check_s_ = (call), check_e_ = (expected);                                       \
        if (check_s_ == check_e_) {                                                                \
            test_passed++;                                                                         \
        } else {                                                                                   \
            test_fail_header(__FILE__, __LINE__);                                                  \
            fprintf(stderr, "%s: %s vs %s (last error: %s)\n", #call, trn_status_name(check_s_),   \
                    trn_status_name(check_e_), trn_last_error());                                  \
        }                                                                                          \
    } while (0)

#define CHECK_OK(call) CHECK_STATUS(call, TRN_SUCCESS)

#define TEST_REPORT()                                                                              \
    (printf("%d passed, %d failed\n", test_passed, test_failed), fflush(stdout),                   \
     test_failed == 0 ? 0 : 1)

// main() of a test file whose tests take no arguments and run on device 0's
// default stream, which the file keeps in its own `g_stream`: each test in
// order, then the report.
#define TEST_MAIN_DEFAULT_STREAM(...)                                                              \
    int main(void) {                                                                               \
        CHECK_OK(trn_stream_get_default(0, &g_stream));                                            \
        void (*const tests_[])(void) = {__VA_ARGS__};                                              \
        for (size_t t_ = 0; t_ < sizeof tests_ / sizeof *tests_; t_++) tests_[t_]();               \
        return TEST_REPORT();                                                                      \
    }

#endif
