// device.c - owns the visible-device count (parsed once from
// NEURON_RT_VISIBLE_CORES / NEURON_RT_NUM_CORES), the per-thread current
// device (by default LOCAL_RANK's under a launcher) and device properties. Parsing never fails loudly: a bad value means
// zero devices, and trn_device_check() carries the explanation to the user at
// the first call that needs a device.
#include <ctype.h>
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../internal.h"

// Physical core indices accepted in NEURON_RT_VISIBLE_CORES.
#define MAX_CORE_INDEX 1023

static pthread_once_t g_count_once = PTHREAD_ONCE_INIT;
static int g_count;
static char g_count_why[256];

// -1 until the thread picks a device: then the process default (below).
static _Thread_local int tl_device = -1;
// The process default, -1 until read. A forked child starts like a spawned
// one: on the default device, read again (notebook_launcher forks before it
// sets each child's LOCAL_RANK), not on the forking thread's current device.
static atomic_int g_default_device = -1;
static pthread_once_t g_default_atfork_once = PTHREAD_ONCE_INIT;

static const char *skip_space(const char *p) {
    while (isspace((unsigned char)*p)) p++;
    return p;
}

// Reads a decimal index at *p (no sign); false if there is none or it is
// larger than MAX_CORE_INDEX.
static bool read_index(const char **p, long *out) {
    const char *s = skip_space(*p);
    if (!isdigit((unsigned char)*s)) return false;
    long v = 0;
    for (; isdigit((unsigned char)*s); s++) {
        v = v * 10 + (*s - '0');
        if (v > MAX_CORE_INDEX) return false;
    }
    *out = v;
    *p = skip_space(s);
    return true;
}

static int parse_visible(const char *text, char *why, size_t why_size) {
    static const char hint[] = "expected core indices like '0-1', '0,2' or '3'";
    unsigned char seen[MAX_CORE_INDEX + 1] = {0};
    int count = 0;
    const char *p = text;
    for (;;) {
        long lo, hi;
        if (!read_index(&p, &lo)) goto bad;
        hi = lo;
        if (*p == '-') {
            p++;
            if (!read_index(&p, &hi)) goto bad;
            if (hi < lo) {
                snprintf(why, why_size,
                         "NEURON_RT_VISIBLE_CORES='%s' is invalid: range "
                         "%ld-%ld is reversed",
                         text, lo, hi);
                return 0;
            }
        }
        for (long i = lo; i <= hi; i++) {
            if (seen[i]) {
                snprintf(why, why_size,
                         "NEURON_RT_VISIBLE_CORES='%s' is invalid: core %ld "
                         "is listed twice",
                         text, i);
                return 0;
            }
            seen[i] = 1;
            if (++count > TRN_MAX_DEVICES) {
                snprintf(why, why_size,
                         "NEURON_RT_VISIBLE_CORES='%s' is invalid: it selects "
                         "more than the %d supported cores",
                         text, TRN_MAX_DEVICES);
                return 0;
            }
        }
        if (*p == '\0') return count;
        if (*p != ',') goto bad;
        p++;
    }
bad:
    snprintf(why, why_size, "NEURON_RT_VISIBLE_CORES='%s' is invalid: %s", text, hint);
    return 0;
}

static int parse_num(const char *text, char *why, size_t why_size) {
    const char *p = skip_space(text);
    char *end = NULL;
    errno = 0;
    long v = isdigit((unsigned char)*p) ? strtol(p, &end, 10) : -1;
    if (v >= 1 && v <= TRN_MAX_DEVICES && errno == 0 && *skip_space(end) == '\0') return (int)v;
    snprintf(why, why_size,
             "NEURON_RT_NUM_CORES='%s' is invalid: expected a core count from "
             "1 to %d",
             text, TRN_MAX_DEVICES);
    return 0;
}

int trn__device_parse_env(const char *visible_cores, const char *num_cores, char *why,
                          size_t why_size) {
    if (why_size > 0) why[0] = '\0';
    // An empty variable is treated as unset, as shells often export "".
    if (visible_cores != NULL && *visible_cores != '\0')
        return parse_visible(visible_cores, why, why_size);
    if (num_cores != NULL && *num_cores != '\0') return parse_num(num_cores, why, why_size);
    return TRN_DEFAULT_DEVICE_COUNT;
}

// Allocation and launch checks ask for the count on every op.
static atomic_bool g_count_ready;

static void count_read(void) {
    g_count = trn__device_parse_env(getenv("NEURON_RT_VISIBLE_CORES"),
                                    getenv("NEURON_RT_NUM_CORES"), g_count_why, sizeof g_count_why);
}

int trn_device_count(void) {
    if (trn__once_fast(&g_count_once, &g_count_ready, count_read) != 0) return 0;
    return g_count;
}

trn_status trn_device_check(int device) {
    int count = trn_device_count();
    if (device >= 0 && device < count) return TRN_SUCCESS;
    if (g_count_why[0] != '\0')
        return trn__set_error(TRN_ERROR_INVALID_DEVICE,
                              "neuron:%d is out of range: %d devices (%s)", device, count,
                              g_count_why);
    return trn__set_error(TRN_ERROR_INVALID_DEVICE, "neuron:%d is out of range: %d device%s",
                          device, count, count == 1 ? "" : "s");
}

// A launcher (torchrun, accelerate) starts one process per core and sets
// LOCAL_RANK: that rank's device is its own core, as on TorchNeuron, where
// each rank sees only its core. So code that never calls set_device (and
// libraries that use "neuron:{current_device()}") lands on the rank's core.
// With fewer visible cores than local ranks (NEURON_RT_VISIBLE_CORES set
// per rank), device 0.
static int default_device_read(void) {
    const char *v = getenv("LOCAL_RANK");
    char *end = NULL;
    long r = v && *v ? strtol(v, &end, 10) : -1;
    return end && *end == '\0' && r >= 0 && r < trn_device_count() ? (int)r : 0;
}

static void default_device_forget(void) {
    atomic_store(&g_default_device, -1);
    tl_device = -1;  // the child's only thread is the one that forked
}

static void default_device_atfork(void) {
    // Without the handler a child keeps the parent's default: still a valid
    // device, so a failure here is not an error.
    (void)pthread_atfork(NULL, NULL, default_device_forget);
}

int trn_device_get_current(void) {
    if (tl_device >= 0) return tl_device;
    int d = atomic_load_explicit(&g_default_device, memory_order_relaxed);
    if (d >= 0) return d;
    (void)pthread_once(&g_default_atfork_once, default_device_atfork);
    // Threads racing here read the same environment: same value.
    d = default_device_read();
    atomic_store(&g_default_device, d);
    return d;
}

trn_status trn_device_set_current(int device) {
    trn_status st = trn__device_enter(device);
    if (st != TRN_SUCCESS) return st;
    tl_device = device;
    return TRN_SUCCESS;
}

trn_status trn_device_get_props(int device, trn_device_props *props) {
    trn_status st = trn__device_enter(device);
    if (st != TRN_SUCCESS) return st;
    if (props == NULL)
        return trn__set_error(TRN_ERROR_INVALID_ARGUMENT, "trn_device_get_props: props is NULL");
    const trn__config *cfg = trn__config_get();
    if (cfg->capacity_error[0] != '\0')
        return trn__set_error(TRN_ERROR_INVALID_ARGUMENT, "%s", cfg->capacity_error);
    memset(props, 0, sizeof *props);
    snprintf(props->name, sizeof props->name, "OpenNeuron NeuronCore-v3 (emulated)");
    props->total_memory = cfg->capacity;
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    long per_device = cpus > 0 ? cpus / trn_device_count() : 1;
    props->core_count = per_device > 0 ? (int)per_device : 1;
    return TRN_SUCCESS;
}
