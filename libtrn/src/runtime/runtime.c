// runtime.c - owns process-wide runtime state: the environment settings read
// once (execution mode, launch blocking, memory protection, HBM capacity),
// lazy initialisation, and the fork flag. A child forked after
// initialisation keeps using the device (fork.c makes its locks and queues
// consistent); only if that fails is the flag set, which every entry point
// checks first.
#include <ctype.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "../internal.h"
#include "cpu_level.h"

#define GiB ((size_t)1 << 30)

static trn__config g_config;
static pthread_once_t g_config_once = PTHREAD_ONCE_INIT;

static pthread_once_t g_init_once = PTHREAD_ONCE_INIT;
static trn_status g_init_status = TRN_SUCCESS;
static char g_init_error[TRN__ERROR_MAX];

static atomic_bool g_initialized;
static atomic_bool g_init_ran;  // runtime_init_once has run (it may have failed)
static atomic_bool g_bad_fork;

// Unset or empty -> fallback; "0", "false", "no", "off" -> false; else true.
static bool env_flag(const char *name, bool fallback) {
    const char *v = getenv(name);
    if (v == NULL || *v == '\0') return fallback;
    return !(strcmp(v, "0") == 0 || strcasecmp(v, "false") == 0 || strcasecmp(v, "no") == 0 ||
             strcasecmp(v, "off") == 0);
}

static size_t default_capacity(void) {
    size_t capacity = 16 * GiB;
    long pages = sysconf(_SC_PHYS_PAGES);
    long page_size = sysconf(_SC_PAGE_SIZE);
    if (pages > 0 && page_size > 0) {
        int count = trn_device_count();
        size_t ram = (size_t)pages * (size_t)page_size;
        size_t share = ram / (size_t)(count > 0 ? count : 1);
        if (share < capacity) capacity = share;
    }
    return capacity;
}

static void config_read(void) {
    g_config.async = env_flag("TORCH_NEURONX_ENABLE_ASYNC_NRT", true);
    g_config.launch_blocking = env_flag("NEURON_LAUNCH_BLOCKING", false);
    g_config.protect = env_flag("TORCH_NEURONX_DEBUG_PROTECT_MEMORY", false);
    g_config.poison = env_flag("TORCH_NEURONX_DEBUG_POISON_FREED", false);
    const char *hbm = getenv("TORCH_NEURONX_HBM_SIZE");
    if (hbm == NULL || *hbm == '\0') {
        g_config.capacity = default_capacity();
        return;
    }
    size_t bytes = 0;
    if (!trn__parse_size(hbm, &bytes) || bytes == 0) {
        snprintf(g_config.capacity_error, sizeof g_config.capacity_error,
                 "TORCH_NEURONX_HBM_SIZE='%s' is invalid: expected a positive "
                 "byte count with an optional K, M, G or T suffix, like '16G'",
                 hbm);
        g_config.capacity = 0;
        return;
    }
    g_config.capacity = bytes;
}

// Every launch reads the config several times.
static atomic_bool g_config_ready;

const trn__config *trn__config_get(void) {
    // pthread_once cannot fail with a valid once-control; if it somehow did,
    // the zeroed config (inline, no protection) is still a safe answer.
    (void)trn__once_fast(&g_config_once, &g_config_ready, config_read);
    return &g_config;
}

void trn__fork_mark_bad(void) { atomic_store(&g_bad_fork, true); }

static void runtime_init_once(void) {
    (void)trn__config_get();
    int rc = trn__fork_handlers_install();
    if (rc != 0) {
        g_init_status = TRN_ERROR_SYSTEM;
        snprintf(g_init_error, sizeof g_init_error,
                 "neuron runtime initialisation failed: pthread_atfork "
                 "returned %d",
                 rc);
        return;
    }
    atomic_store(&g_initialized, true);
}

trn_status trn__fork_check(void) {
    if (!atomic_load_explicit(&g_bad_fork, memory_order_relaxed)) return TRN_SUCCESS;
    return trn__set_error(TRN_ERROR_FORKED,
                          "neuron runtime cannot be used in this forked subprocess: restoring "
                          "its locks after fork failed; use the 'spawn' start method");
}

trn_status trn_runtime_init(void) {
    trn_status st = trn__fork_check();
    if (st != TRN_SUCCESS) return st;
    // A refused TORCH_NEURONX_CPU_CAPABILITY fails the first device use.
    st = trn_cpu_level_status();
    if (st != TRN_SUCCESS) return st;
    // trn_stream_get_current and trn_mem_alloc come here on every op.
    int rc = trn__once_fast(&g_init_once, &g_init_ran, runtime_init_once);
    if (rc != 0)
        return trn__set_error(TRN_ERROR_SYSTEM,
                              "neuron runtime initialisation failed: "
                              "pthread_once returned %d",
                              rc);
    if (g_init_status != TRN_SUCCESS) return trn__set_error(g_init_status, "%s", g_init_error);
    return TRN_SUCCESS;
}

bool trn_runtime_is_initialized(void) { return atomic_load(&g_initialized); }

bool trn_runtime_in_bad_fork(void) { return atomic_load(&g_bad_fork); }

trn_status trn__device_enter(int device) {
    trn_status st = trn__fork_check();
    if (st != TRN_SUCCESS) return st;
    return trn_device_check(device);
}
