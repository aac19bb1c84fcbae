// metrics.c - owns the fixed per-device counters (stored in the stats page
// so neuron-top reads them live), the named counters and metrics table, and
// the stats page's lifetime: an unnamed shared mapping (memfd) created on
// first use, which the kernel frees with the process, however it ends; a
// private copy in forked children.
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "../internal.h"
#include "trn/log.h"
#include "trn/metrics.h"

_Static_assert(TRN_COUNTER_COUNT <= TRN_STATS_COUNTERS,
               "the stats page has no room for every counter");

// The page: g_page points at the shared mapping once it exists, else at
// g_private. It is set once (inside pthread_once) and only changed again in
// a forked child, whose only thread runs the fork handler; so the threads
// that update counters through it never race with a pointer swap.
static trn_stats_page g_private;
static trn_stats_page *g_page = &g_private;
static pthread_once_t g_page_once = PTHREAD_ONCE_INIT;
// The memfd behind the shared page (-1: none, or closed by
// trn_stats_page_close). Readers find the page through /proc/<pid>/fd/<fd>.
static int g_fd = -1;
static char g_path[64];  // "/proc/<pid>/fd/<fd>", set once
static uint64_t g_nodevice[TRN_COUNTER_COUNT];

static const char *const k_counter_names[] = {
#define TRN__COUNTER_NAME(name, text) text,
    TRN_COUNTER_LIST(TRN__COUNTER_NAME)
#undef TRN__COUNTER_NAME
};

// ---- stats page ---------------------------------------------------------

// memfd_create's flags (linux/memfd.h; the syscall is called directly since
// strict C11 with _DEFAULT_SOURCE does not declare the glibc wrapper).
#define TRN_MFD_CLOEXEC 0x0001u
#define TRN_MFD_NOEXEC_SEAL 0x0008u  // Linux 6.3+; older kernels: EINVAL

static bool env_disabled(const char *name) {
    const char *v = getenv(name);
    return v != NULL && (strcmp(v, "0") == 0 || strcasecmp(v, "false") == 0 ||
                         strcasecmp(v, "off") == 0 || strcasecmp(v, "no") == 0);
}

static void read_command(char *out, size_t size) {
    out[0] = '\0';
    FILE *f = fopen("/proc/self/cmdline", "r");
    if (f == NULL) return;
    size_t n = fread(out, 1, size - 1, f);
    fclose(f);
    for (size_t i = 0; i < n; i++)
        if (out[i] == '\0') out[i] = ' ';
    while (n > 0 && out[n - 1] == ' ') n--;
    out[n] = '\0';
}

static void page_fill_header(trn_stats_page *p) {
    p->version = TRN_STATS_VERSION;
    p->pid = (uint64_t)getpid();
    p->device_count = (uint64_t)trn_device_count();
    p->counter_count = TRN_COUNTER_COUNT;
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    p->start_unix_ns = (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
    read_command(p->command, sizeof p->command);
}

static void page_on_fork_child(void) {
    // The child must neither write into its parent's page nor list it as its
    // own: it counts in a private copy and closes the inherited memfd. Its
    // only thread runs this, so swapping the pointer races with nobody.
    if (g_page != &g_private) {
        trn_stats_page *shared = g_page;
        memcpy(&g_private, shared, sizeof g_private);
        g_page = &g_private;
        (void)munmap(shared, sizeof *shared);
    }
    g_private.pid = (uint64_t)getpid();
    int fd = __atomic_exchange_n(&g_fd, -1, __ATOMIC_ACQ_REL);
    if (fd >= 0) (void)close(fd);
}

static int memfd_open(const char *name) {
    int fd = (int)syscall(SYS_memfd_create, name, TRN_MFD_CLOEXEC | TRN_MFD_NOEXEC_SEAL);
    if (fd < 0 && errno == EINVAL) fd = (int)syscall(SYS_memfd_create, name, TRN_MFD_CLOEXEC);
    return fd;
}

static void page_open(void) {
    page_fill_header(&g_private);
    g_private.magic = TRN_STATS_MAGIC;
    int rc = pthread_atfork(NULL, NULL, page_on_fork_child);
    if (rc != 0) {
        // Without the handler a forked child would write into this page.
        trn_log(TRN_LOG_INFO, "metrics", "no stats page (pthread_atfork: %s)", strerror(rc));
        return;
    }
    if (env_disabled("TORCH_NEURONX_STATS_PAGE")) return;
    // An unnamed shared mapping: nothing to remove at exit, and nothing is
    // left behind when the process is killed. Readers open it through
    // /proc/<pid>/fd/<fd> (readlink: "/memfd:trn-stats (deleted)").
    int fd = memfd_open("trn-stats");
    if (fd < 0) {
        trn_log(TRN_LOG_INFO, "metrics", "no stats page (memfd_create: %s)", strerror(errno));
        return;
    }
    if (ftruncate(fd, sizeof(trn_stats_page)) != 0) {
        trn_log(TRN_LOG_INFO, "metrics", "no stats page (ftruncate: %s)", strerror(errno));
        (void)close(fd);
        return;
    }
    void *p = mmap(NULL, sizeof(trn_stats_page), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (p == MAP_FAILED) {
        trn_log(TRN_LOG_INFO, "metrics", "no stats page (mmap: %s)", strerror(errno));
        (void)close(fd);
        return;
    }
    trn_stats_page *page = p;
    memcpy(page, &g_private, sizeof *page);
    page->magic = 0;
    // Readers skip the page until the header is complete.
    __atomic_store_n(&page->magic, TRN_STATS_MAGIC, __ATOMIC_RELEASE);
    snprintf(g_path, sizeof g_path, "/proc/%ld/fd/%d", (long)getpid(), fd);
    g_page = page;
    __atomic_store_n(&g_fd, fd, __ATOMIC_RELEASE);
    trn_log(TRN_LOG_DEBUG, "metrics", "stats page %s", g_path);
}

// The launch path reads the page ~5 times per op.
static atomic_bool g_page_ready;

trn_stats_page *trn_stats_page_get(void) {
    (void)trn__once_fast(&g_page_once, &g_page_ready, page_open);
    return g_page;
}

const char *trn_stats_page_path(void) {
    (void)trn_stats_page_get();
    return __atomic_load_n(&g_fd, __ATOMIC_ACQUIRE) >= 0 ? g_path : "";
}

void trn_stats_page_close(void) {
    (void)trn_stats_page_get();
    // Unlisted from now on; counting goes on in the same mapping (threads
    // may hold a pointer into it at any time), which the kernel frees with
    // the process.
    int fd = __atomic_exchange_n(&g_fd, -1, __ATOMIC_ACQ_REL);
    if (fd >= 0) (void)close(fd);
}

// ---- fixed counters -------------------------------------------------------

// Counters are plain uint64_t (the page layout is read by other processes)
// updated with the compiler's atomic builtins.
static uint64_t *counter_slot(trn_counter c, int device) {
    if (device >= 0 && device < TRN_MAX_DEVICES)
        return &trn_stats_page_get()->devices[device].counters[c];
    return &g_nodevice[c];
}

void trn_counter_add(trn_counter counter, int device, uint64_t delta) {
    if ((unsigned)counter >= TRN_COUNTER_COUNT) return;
    __atomic_fetch_add(counter_slot(counter, device), delta, __ATOMIC_RELAXED);
}

uint64_t trn_counter_get(trn_counter counter, int device) {
    if ((unsigned)counter >= TRN_COUNTER_COUNT) return 0;
    if (device != TRN_ALL_DEVICES)
        return __atomic_load_n(counter_slot(counter, device), __ATOMIC_RELAXED);
    uint64_t sum = 0;
    for (int d = -1; d < TRN_MAX_DEVICES; d++)
        sum += __atomic_load_n(counter_slot(counter, d), __ATOMIC_RELAXED);
    return sum;
}

const char *trn_counter_name(trn_counter counter) {
    return (unsigned)counter < TRN_COUNTER_COUNT ? k_counter_names[counter] : NULL;
}

// ---- named counters and metrics --------------------------------------------

static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
static trn_metric_info g_table[TRN_METRICS_MAX];
static size_t g_table_n;

// Entry for name (created if missing); NULL when the table is full. Caller
// holds g_mu.
static trn_metric_info *table_entry(const char *name, bool is_counter) {
    for (size_t i = 0; i < g_table_n; i++)
        if (strncmp(g_table[i].name, name, sizeof g_table[i].name - 1) == 0) return &g_table[i];
    if (g_table_n == TRN_METRICS_MAX) return NULL;
    trn_metric_info *e = &g_table[g_table_n++];
    memset(e, 0, sizeof *e);
    snprintf(e->name, sizeof e->name, "%s", name);
    e->is_counter = is_counter;
    return e;
}

static void table_add(const char *name, bool is_counter, double value) {
    if (name == NULL) return;
    pthread_mutex_lock(&g_mu);
    trn_metric_info *e = table_entry(name, is_counter);
    if (e != NULL) {
        if (e->count == 0 || value < e->min) e->min = value;
        if (e->count == 0 || value > e->max) e->max = value;
        e->count++;
        e->sum += value;
    }
    pthread_mutex_unlock(&g_mu);
}

void trn_named_counter_add(const char *name, int64_t delta) {
    table_add(name, true, (double)delta);
}

void trn_metric_record(const char *name, double value) {
    if (!isnan(value)) table_add(name, false, value);
}

size_t trn_metrics_list(trn_metric_info *out, size_t max) {
    pthread_mutex_lock(&g_mu);
    size_t n = g_table_n;
    if (out != NULL) memcpy(out, g_table, (n < max ? n : max) * sizeof *out);
    pthread_mutex_unlock(&g_mu);
    return n;
}

void trn_metrics_reset(void) {
    pthread_mutex_lock(&g_mu);
    g_table_n = 0;
    pthread_mutex_unlock(&g_mu);
    for (int c = 0; c < TRN_COUNTER_COUNT; c++) {
        for (int d = -1; d < TRN_MAX_DEVICES; d++)
            __atomic_store_n(counter_slot((trn_counter)c, d), 0, __ATOMIC_RELAXED);
    }
}

// ---- fork (see fork.c): the named-metrics table's lock is held across fork. -----
void trn__metrics_fork_prepare(void) { pthread_mutex_lock(&g_mu); }
void trn__metrics_fork_release(void) { pthread_mutex_unlock(&g_mu); }
