// log.c - owns the log level, the log sink and record formatting (see
// trn/log.h). The level is an atomic so the enabled check on hot paths is a
// single load; the sink is a FILE guarded by its own lock (flockfile) so
// records from several threads never interleave.
#include <execinfo.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#include "../internal.h"
#include "trn/log.h"

static pthread_once_t g_once = PTHREAD_ONCE_INIT;
static atomic_int g_level = TRN_LOG_WARNING;
static bool g_stack;
static FILE *g_sink;

static const char *const k_names[] = {"ERROR", "WARNING", "INFO", "DEBUG"};

bool trn_log_parse_level(const char *text, trn_log_level *level) {
    if (text == NULL) return false;
    for (int i = 0; i < 4; i++) {
        char digit[2] = {(char)('0' + i), '\0'};
        if (strcasecmp(text, k_names[i]) == 0 || strcmp(text, digit) == 0 ||
            (i == TRN_LOG_WARNING && strcasecmp(text, "WARN") == 0)) {
            *level = (trn_log_level)i;
            return true;
        }
    }
    return false;
}

static bool env_on(const char *name) {
    const char *v = getenv(name);
    return v != NULL && *v != '\0' && strcmp(v, "0") != 0 && strcasecmp(v, "false") != 0 &&
           strcasecmp(v, "off") != 0 && strcasecmp(v, "no") != 0;
}

static void log_init(void) {
    g_sink = stderr;
    const char *file = getenv("TORCH_NEURONX_LOG_FILE");
    if (file != NULL && *file != '\0') {
        FILE *f = fopen(file, "a");
        if (f != NULL) {
            setvbuf(f, NULL, _IOLBF, 0);
            g_sink = f;
        } else {
            fprintf(stderr,
                    "[neuron W] log: cannot open TORCH_NEURONX_LOG_FILE"
                    "='%s'; logging to stderr\n",
                    file);
        }
    }
    g_stack = env_on("TORCH_NEURONX_ENABLE_STACK_TRACE");
    const char *text = getenv("TORCH_NEURONX_LOG_LEVEL");
    trn_log_level level = TRN_LOG_WARNING;
    if (text != NULL && *text != '\0' && !trn_log_parse_level(text, &level))
        fprintf(g_sink,
                "[neuron W] log: TORCH_NEURONX_LOG_LEVEL='%s' is not "
                "one of ERROR, WARNING, INFO, DEBUG or 0..3; using "
                "WARNING\n",
                text);
    atomic_store(&g_level, (int)level);
}

// trn_log_enabled runs twice per allocation.
static atomic_bool g_ready;

static void ensure_init(void) { (void)trn__once_fast(&g_once, &g_ready, log_init); }

bool trn_log_enabled(trn_log_level level) {
    ensure_init();
    return (int)level <= atomic_load_explicit(&g_level, memory_order_relaxed);
}

trn_log_level trn_log_get_level(void) {
    ensure_init();
    return (trn_log_level)atomic_load(&g_level);
}

void trn_log_set_level(trn_log_level level) {
    ensure_init();
    if (level < TRN_LOG_ERROR) level = TRN_LOG_ERROR;
    if (level > TRN_LOG_DEBUG) level = TRN_LOG_DEBUG;
    atomic_store(&g_level, (int)level);
}

bool trn_log_stack_trace_enabled(void) {
    ensure_init();
    return g_stack;
}

void trn_log_message(trn_log_level level, const char *component, const char *message) {
    if (!trn_log_enabled(level)) return;
    int li = level < TRN_LOG_ERROR ? 0 : level > TRN_LOG_DEBUG ? 3 : (int)level;
    struct timeval tv;
    gettimeofday(&tv, NULL);
    struct tm tm;
    time_t secs = tv.tv_sec;
    localtime_r(&secs, &tm);
    flockfile(g_sink);
    fprintf(g_sink, "[neuron %c %02d:%02d:%02d.%03ld pid %ld] %s: %s\n", k_names[li][0], tm.tm_hour,
            tm.tm_min, tm.tm_sec, (long)(tv.tv_usec / 1000), (long)getpid(),
            component != NULL ? component : "neuron", message);
    if (g_stack && level <= TRN_LOG_WARNING) {
        void *frames[48];
        int n = backtrace(frames, 48);
        fflush(g_sink);
        // Skip this function's own frame.
        if (n > 1) backtrace_symbols_fd(frames + 1, n - 1, fileno(g_sink));
    }
    funlockfile(g_sink);
}

void trn_log(trn_log_level level, const char *component, const char *fmt, ...) {
    if (!trn_log_enabled(level)) return;
    char buf[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    trn_log_message(level, component, buf);
}
