// test_observe.c - observability in libtrn: log levels and their parsing,
// fixed and named counters, metrics, the shared-memory stats page (an
// unnamed memfd found through /proc/<pid>/fd: live figures another opener
// sees, unlisted on close, neither written nor listed by a forked child),
// traced launches (labels, copies named by
// direction, correlation ids) and the per-process memory limit.
#include <fcntl.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "internal.h"
#include "test.h"
#include "trn/ipc.h"

static trn_status noop_task(void *p) {
    (void)p;
    return TRN_SUCCESS;
}

static void test_log_levels(void) {
    trn_log_level l = TRN_LOG_ERROR;
    CHECK(trn_log_parse_level("DEBUG", &l));
    CHECK_INT(l, TRN_LOG_DEBUG);
    CHECK(trn_log_parse_level("warning", &l));
    CHECK_INT(l, TRN_LOG_WARNING);
    CHECK(trn_log_parse_level("2", &l));
    CHECK_INT(l, TRN_LOG_INFO);
    CHECK(!trn_log_parse_level("LOUD", &l));
    CHECK(!trn_log_parse_level("7", &l));
    trn_log_set_level(TRN_LOG_ERROR);
    CHECK(trn_log_enabled(TRN_LOG_ERROR));
    CHECK(!trn_log_enabled(TRN_LOG_INFO));
    trn_log_set_level(TRN_LOG_DEBUG);
    CHECK(trn_log_enabled(TRN_LOG_DEBUG));
    trn_log_set_level(TRN_LOG_WARNING);
}

static void test_counters_and_metrics(void) {
    trn_metrics_reset();
    trn_counter_add(TRN_COUNTER_FALLBACKS, 1, 3);
    trn_counter_add(TRN_COUNTER_FALLBACKS, -1, 2);
    CHECK_U64(trn_counter_get(TRN_COUNTER_FALLBACKS, 1), 3);
    CHECK_U64(trn_counter_get(TRN_COUNTER_FALLBACKS, -1), 2);
    CHECK_U64(trn_counter_get(TRN_COUNTER_FALLBACKS, TRN_ALL_DEVICES), 5);
    CHECK_STR(trn_counter_name(TRN_COUNTER_KERNEL_LAUNCHES), "kernel_launches");
    CHECK(trn_counter_name(TRN_COUNTER_COUNT) == NULL);
    trn_named_counter_add("compile.graphs", 2);
    trn_named_counter_add("compile.graphs", 1);
    trn_metric_record("compile.time_ms", 4.0);
    trn_metric_record("compile.time_ms", 1.0);
    trn_metric_info info[8];
    size_t n = trn_metrics_list(info, 8);
    CHECK_INT(n, 2);
    CHECK_STR(info[0].name, "compile.graphs");
    CHECK(info[0].is_counter && info[0].sum == 3.0 && info[0].count == 2);
    CHECK(!info[1].is_counter && info[1].min == 1.0 && info[1].max == 4.0);
    trn_metrics_reset();
    CHECK_U64(trn_counter_get(TRN_COUNTER_FALLBACKS, TRN_ALL_DEVICES), 0);
    CHECK_INT(trn_metrics_list(NULL, 0), 0);
}

// The page as another process sees it: opened through its /proc path.
static const trn_stats_page *map_page_path(const char *path) {
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return NULL;
    void *p = mmap(NULL, sizeof(trn_stats_page), PROT_READ, MAP_SHARED, fd, 0);
    close(fd);
    return p == MAP_FAILED ? NULL : p;
}

static void test_trace_and_page(void) {
    trn_stats_page *page = trn_stats_page_get();
    char path[64], want[64], link[128];
    snprintf(path, sizeof path, "%s", trn_stats_page_path());
    struct stat sb;
    CHECK(path[0] != '\0');  // memfd_create works on the test hosts
    int fd = -1;
    CHECK(sscanf(path, "/proc/%*d/fd/%d", &fd) == 1);
    snprintf(want, sizeof want, "/proc/%ld/fd/%d", (long)getpid(), fd);
    CHECK_STR(path, want);
    ssize_t ln = readlink(path, link, sizeof link - 1);
    CHECK(ln > 0);
    link[ln > 0 ? ln : 0] = '\0';
    CHECK_STR(link, "/memfd:trn-stats (deleted)");  // what neuron-ls looks for
    CHECK_U64(page->pid, (uint64_t)getpid());
    CHECK_U64(page->magic, TRN_STATS_MAGIC);
    const trn_stats_page *seen = map_page_path(path);
    CHECK(seen != NULL && seen != page);

    trn_stream *s = NULL;
    CHECK_INT(trn_stream_get_default(0, &s), TRN_SUCCESS);
    uint64_t before = trn_counter_get(TRN_COUNTER_KERNEL_LAUNCHES, 0);
    trn_trace_start(0);
    trn_trace_push(TRN_ACTIVITY_KERNEL, "trn::noop", "[[2, 3]]", 42, 24);
    CHECK_INT(trn_stream_launch(s, noop_task, NULL, 0), TRN_SUCCESS);
    trn_trace_pop();
    float host[16] = {0}, back[16];
    void *dev = NULL;
    CHECK_INT(trn_mem_alloc(0, sizeof host, s, &dev), TRN_SUCCESS);
    int64_t n = 16, one = 1;
    trn_copy_desc c = {1, &n, dev, &one, TRN_DTYPE_F32, host, &one, TRN_DTYPE_F32};
    CHECK_INT(trn_copy_launch(s, &c), TRN_SUCCESS);
    c.dst = back;
    c.src = dev;
    CHECK_INT(trn_copy_launch(s, &c), TRN_SUCCESS);
    CHECK_INT(trn_stream_synchronize(s), TRN_SUCCESS);
    trn_trace_stop();
    CHECK_U64(trn_counter_get(TRN_COUNTER_KERNEL_LAUNCHES, 0), before + 3);
    CHECK_U64(trn_counter_get(TRN_COUNTER_BYTES_H2D, 0), sizeof host);
    CHECK_U64(trn_counter_get(TRN_COUNTER_BYTES_D2H, 0), sizeof host);
    CHECK_U64(page->devices[0].mem_allocated, trn__mem_round_size(sizeof host));
    CHECK_U64(page->devices[0].running, 0);
    if (seen != NULL) {  // the same memory, live
        CHECK_U64(seen->pid, (uint64_t)getpid());
        CHECK_U64(seen->devices[0].counters[TRN_COUNTER_KERNEL_LAUNCHES],
                  trn_counter_get(TRN_COUNTER_KERNEL_LAUNCHES, 0));
        CHECK_U64(seen->devices[0].mem_allocated, trn__mem_round_size(sizeof host));
    }

    trn_activity acts[8];
    size_t got = trn_trace_drain(acts, 8);
    CHECK_INT(got, 3);
    if (got == 3) {
        CHECK_STR(acts[0].name, "trn::noop");
        CHECK_STR(acts[0].detail, "[[2, 3]]");
        CHECK_U64(acts[0].correlation, 42);
        CHECK_U64(acts[0].bytes, 24);
        CHECK(acts[0].end_ns >= acts[0].start_ns && acts[0].start_ns > 0);
        CHECK_INT(acts[1].kind, TRN_ACTIVITY_MEMCPY);
        CHECK_STR(acts[1].name, "Memcpy HtoD (Host -> Device)");
        CHECK_U64(acts[1].bytes, sizeof host);
        CHECK_STR(acts[2].name, "Memcpy DtoH (Device -> Host)");
        CHECK(acts[1].seq < acts[2].seq);
    }
    // Off: nothing more is recorded.
    CHECK_INT(trn_stream_launch(s, noop_task, NULL, 0), TRN_SUCCESS);
    CHECK_INT(trn_trace_pending(), 0);
    CHECK_INT(trn_mem_free(dev), TRN_SUCCESS);

    // A forked child counts in a private copy and does not list the page.
    uint64_t copies = trn_counter_get(TRN_COUNTER_COPIES, 0);
    int pipefd[2];
    CHECK(pipe(pipefd) == 0);
    pid_t child = fork();
    if (child == 0) {
        close(pipefd[0]);
        int bad = 0;
        if (trn_stats_page_path()[0] != '\0') bad |= 1;
        if (fcntl(fd, F_GETFD) != -1) bad |= 2;  // the inherited memfd is closed
        trn_counter_add(TRN_COUNTER_COPIES, 0, 1000);
        if (trn_counter_get(TRN_COUNTER_COPIES, 0) != copies + 1000) bad |= 4;
        if (trn_stats_page_get()->pid != (uint64_t)getpid()) bad |= 8;
        _exit(write(pipefd[1], &bad, sizeof bad) == (ssize_t)sizeof bad ? 0 : 1);
    }
    close(pipefd[1]);
    CHECK(child > 0);
    int bad = -1, status = -1;
    CHECK(read(pipefd[0], &bad, sizeof bad) == (ssize_t)sizeof bad);
    close(pipefd[0]);
    CHECK(child > 0 && waitpid(child, &status, 0) == child);
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    CHECK_INT(bad, 0);
    CHECK_U64(trn_counter_get(TRN_COUNTER_COPIES, 0), copies);
    if (seen != NULL) CHECK_U64(seen->devices[0].counters[TRN_COUNTER_COPIES], copies);

    trn_stats_page_close();
    CHECK(stat(path, &sb) != 0);  // no longer listed
    CHECK_STR(trn_stats_page_path(), "");
    // Counting goes on in the same page.
    trn_counter_add(TRN_COUNTER_COPIES, 0, 1);
    CHECK_U64(trn_counter_get(TRN_COUNTER_COPIES, 0), copies + 1);
    CHECK(trn_stats_page_get() == page);
    if (seen != NULL) {
        CHECK_U64(seen->devices[0].counters[TRN_COUNTER_COPIES], copies + 1);
        munmap((void *)seen, sizeof *seen);
    }
}

static int g_segment_events, g_oom_events;
static void observer(void *ctx, trn_mem_event ev, int device, const void *ptr, size_t size,
                     int64_t stream) {
    (void)ctx, (void)device, (void)ptr, (void)size, (void)stream;
    if (ev == TRN_MEM_EVENT_OOM)
        g_oom_events++;
    else
        g_segment_events++;
}

static void test_limit_and_snapshot(void) {
    trn_mem_set_observer(observer, NULL);
    CHECK_INT(trn_mem_set_limit(1, 1 << 20), TRN_SUCCESS);
    CHECK_U64(trn_mem_get_limit(1), 1 << 20);
    void *a = NULL, *b = NULL;
    CHECK_INT(trn_mem_alloc(1, 600 << 10, NULL, &a), TRN_SUCCESS);
    CHECK_INT(trn_mem_alloc(1, 600 << 10, NULL, &b), TRN_ERROR_OUT_OF_MEMORY);
    CHECK(strstr(trn_last_error(), "per-process limit") != NULL);
    CHECK_INT(g_oom_events, 1);
    trn_mem_block_info blocks[4];
    CHECK_INT(trn_mem_snapshot(1, blocks, 4), 1);
    CHECK(blocks[0].ptr == a && blocks[0].allocated && blocks[0].requested == (600 << 10));
    CHECK_INT(trn_mem_free(a), TRN_SUCCESS);
    CHECK_INT(trn_mem_snapshot(1, blocks, 4), 1);
    CHECK(!blocks[0].allocated);
    CHECK_INT(trn_mem_empty_cache(1), TRN_SUCCESS);
    CHECK_INT(trn_mem_snapshot(1, NULL, 0), 0);
    CHECK_INT(g_segment_events, 2);  // one reserve, one release
    CHECK_INT(trn_mem_set_limit(1, (size_t)-1), TRN_ERROR_INVALID_ARGUMENT);
    CHECK_INT(trn_mem_set_limit(1, 0), TRN_SUCCESS);
    CHECK_INT(trn_mem_alloc(1, 2 << 20, NULL, &b), TRN_SUCCESS);
    CHECK_INT(trn_mem_free(b), TRN_SUCCESS);
    trn_mem_set_observer(NULL, NULL);
}

static void test_ipc(void) {
    void *a = NULL, *b = NULL;
    CHECK_INT(trn_ipc_alloc(0, 4096, &a), TRN_SUCCESS);
    CHECK(trn_ipc_is_shared(a));
    int fd = -1;
    size_t n = 0;
    CHECK_INT(trn_ipc_export(a, &fd, &n), TRN_SUCCESS);
    CHECK_U64(n, 4096);
    // A second mapping of the same pages, as another process would make.
    CHECK_INT(trn_ipc_import(0, fd, n, &b), TRN_SUCCESS);
    close(fd);
    CHECK(a != b);
    ((unsigned char *)a)[100] = 42;
    CHECK_INT(((unsigned char *)b)[100], 42);
    CHECK_INT(trn_mem_free(a), TRN_SUCCESS);  // b still holds the pages
    CHECK_INT(((unsigned char *)b)[100], 42);
    CHECK_INT(trn_mem_free(b), TRN_SUCCESS);
    CHECK_INT(trn_ipc_export(b, &fd, &n), TRN_ERROR_INVALID_POINTER);
    void *plain = NULL;
    CHECK_INT(trn_mem_alloc(0, 64, NULL, &plain), TRN_SUCCESS);
    CHECK(!trn_ipc_is_shared(plain));
    CHECK_INT(trn_ipc_export(plain, &fd, &n), TRN_ERROR_INVALID_POINTER);
    CHECK_INT(trn_mem_free(plain), TRN_SUCCESS);
    CHECK_INT(trn_ipc_import(0, -1, 64, &b), TRN_ERROR_INVALID_ARGUMENT);
}

int main(void) {
    setenv("TORCH_NEURONX_HBM_SIZE", "64M", 1);
    test_log_levels();
    test_counters_and_metrics();
    test_trace_and_page();
    test_limit_and_snapshot();
    test_ipc();
    return TEST_REPORT();
}
