// metrics.c - owns the fixed per-device counters (stored in the stats page
// so neuron-top reads them live), the named counters and metrics table, and
// the stats page's lifetime: creation on first use, removal at exit, a
// private copy in forked children, and sweeping pages of dead processes.
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "trn/log.h"
#include "trn/metrics.h"

_Static_assert(TRN_COUNTER_COUNT <= TRN_STATS_COUNTERS,
               "the stats page has no room for every counter");

static trn_stats_page g_private;          // when there is no shared page
static trn_stats_page *g_page = &g_private;
static pthread_once_t g_page_once = PTHREAD_ONCE_INIT;
static char g_path[64];                   // "" when no shared page
static char g_name[48];                   // shm_open name
static pid_t g_owner;
static uint64_t g_nodevice[TRN_COUNTER_COUNT];

static const char *const k_counter_names[] = {
#define TRN__COUNTER_NAME(name, text) text,
    TRN_COUNTER_LIST(TRN__COUNTER_NAME)
#undef TRN__COUNTER_NAME
};

// ---- stats page ---------------------------------------------------------

static bool env_disabled(const char *name) {
    const char *v = getenv(name);
    return v != NULL && (strcmp(v, "0") == 0 || strcasecmp(v, "false") == 0 ||
                         strcasecmp(v, "off") == 0 || strcasecmp(v, "no") == 0);
}

// Whether `pid` has exited: gone, or a zombie (SIGKILLed, not yet reaped by
// its parent, so kill(pid, 0) still succeeds).
static bool pid_exited(long pid) {
    if (kill((pid_t)pid, 0) != 0) return errno == ESRCH;
    char path[48], buf[256];
    snprintf(path, sizeof path, "/proc/%ld/stat", pid);
    FILE *f = fopen(path, "r");
    if (f == NULL) return false;
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = '\0';
    const char *close = strrchr(buf, ')');  // the command may contain spaces
    return close != NULL && close[1] == ' ' && (close[2] == 'Z' || close[2] == 'X');
}

// Removes /dev/shm/trn-stats-<pid> files whose process no longer runs.
static void sweep_dead_pages(void) {
    DIR *dir = opendir("/dev/shm");
    if (dir == NULL) return;
    struct dirent *e;
    while ((e = readdir(dir)) != NULL) {
        long pid = 0;
        char tail;
        if (sscanf(e->d_name, "trn-stats-%ld%c", &pid, &tail) != 1 || pid <= 0)
            continue;
        if (!pid_exited(pid)) continue;
        char name[64];
        snprintf(name, sizeof name, "/trn-stats-%ld", pid);
        (void)shm_unlink(name);
    }
    closedir(dir);
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

static void page_at_exit(void) {
    if (g_path[0] != '\0' && getpid() == g_owner) trn_stats_page_close();
}

static void page_on_fork_child(void) {
    // The child must not write into (or later unlink) its parent's page.
    if (g_page != &g_private) {
        memcpy(&g_private, g_page, sizeof g_private);
        g_page = &g_private;
    }
    g_path[0] = '\0';
    g_private.pid = (uint64_t)getpid();
}

static void page_open(void) {
    page_fill_header(&g_private);
    g_private.magic = TRN_STATS_MAGIC;
    (void)pthread_atfork(NULL, NULL, page_on_fork_child);
    if (env_disabled("TORCH_NEURONX_STATS_PAGE")) return;
    sweep_dead_pages();
    g_owner = getpid();
    snprintf(g_name, sizeof g_name, "/trn-stats-%ld", (long)g_owner);
    int fd = shm_open(g_name, O_CREAT | O_RDWR | O_TRUNC, 0644);
    if (fd < 0) {
        trn_log(TRN_LOG_INFO, "metrics", "no stats page (shm_open %s: %s)",
                g_name, strerror(errno));
        return;
    }
    void *p = MAP_FAILED;
    if (ftruncate(fd, sizeof(trn_stats_page)) == 0)
        p = mmap(NULL, sizeof(trn_stats_page), PROT_READ | PROT_WRITE,
                 MAP_SHARED, fd, 0);
    close(fd);
    if (p == MAP_FAILED) {
        (void)shm_unlink(g_name);
        return;
    }
    trn_stats_page *page = p;
    memcpy(page, &g_private, sizeof *page);
    page->magic = 0;
    // Readers skip the page until the header is complete.
    __atomic_store_n(&page->magic, TRN_STATS_MAGIC, __ATOMIC_RELEASE);
    g_page = page;
    snprintf(g_path, sizeof g_path, "/dev/shm%s", g_name);
    atexit(page_at_exit);
    trn_log(TRN_LOG_DEBUG, "metrics", "stats page %s", g_path);
}

trn_stats_page *trn_stats_page_get(void) {
    (void)pthread_once(&g_page_once, page_open);
    return g_page;
}

const char *trn_stats_page_path(void) {
    (void)trn_stats_page_get();
    return g_path;
}

void trn_stats_page_close(void) {
    (void)trn_stats_page_get();
    if (g_path[0] == '\0') return;
    trn_stats_page *shared = g_page;
    memcpy(&g_private, shared, sizeof g_private);
    g_page = &g_private;
    (void)shm_unlink(g_name);
    g_path[0] = '\0';
    // Threads may still hold the old pointer for a moment; leaving the
    // mapping in place (one page) avoids a fault in them.
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
    return (unsigned)counter < TRN_COUNTER_COUNT ? k_counter_names[counter]
                                                 : NULL;
}

// ---- named counters and metrics --------------------------------------------

static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
static trn_metric_info g_table[TRN_METRICS_MAX];
static size_t g_table_n;

// Entry for name (created if missing); NULL when the table is full. Caller
// holds g_mu.
static trn_metric_info *table_entry(const char *name, bool is_counter) {
    for (size_t i = 0; i < g_table_n; i++)
        if (strncmp(g_table[i].name, name, sizeof g_table[i].name - 1) == 0)
            return &g_table[i];
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
    if (out != NULL)
        memcpy(out, g_table, (n < max ? n : max) * sizeof *out);
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
