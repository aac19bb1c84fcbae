// trn/metrics.h - counters and metrics of the device, shared by every layer
// (the C++ adapters, the compiler, collectives) and exported three ways:
// torch_neuronx.metrics (Python), the profiler, and a small shared-memory
// stats page per process that neuron-top and neuron-ls read.
//
// Counters: a fixed set (trn_counter) kept per device, cheap enough for hot
// paths (one relaxed atomic add), plus named counters any component may
// create ("compile.graph_breaks"). Metrics: named samples summarised as count,
// sum, min and max ("compile.time_ms").
//
// Stats page: an unnamed shared mapping (memfd "trn-stats"), created on
// first use unless TORCH_NEURONX_STATS_PAGE=0. The kernel frees it with the
// process, however that ends (SIGKILL included): nothing to remove, nothing
// to sweep. Other processes of the same user (or root) read it through
// /proc/<pid>/fd/<fd>, whose link reads "/memfd:trn-stats (deleted)"; a
// forked child counts in a private copy and closes the inherited fd. Layout:
// see trn_stats_page below (all fields little-endian uint64 unless noted).
#ifndef TRN_METRICS_H
#define TRN_METRICS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "trn/device.h"

#ifdef __cplusplus
extern "C" {
#endif

// X(enum name, printable name) - the fixed per-device counters.
#define TRN_COUNTER_LIST(X)                                                                        \
    X(TRN_COUNTER_KERNEL_LAUNCHES, "kernel_launches")                                              \
    X(TRN_COUNTER_FALLBACKS, "cpu_fallbacks")                                                      \
    X(TRN_COUNTER_COPIES, "copies")                                                                \
    X(TRN_COUNTER_BYTES_H2D, "bytes_host_to_device")                                               \
    X(TRN_COUNTER_BYTES_D2H, "bytes_device_to_host")                                               \
    X(TRN_COUNTER_BYTES_D2D, "bytes_device_to_device")                                             \
    X(TRN_COUNTER_COMPILES, "compiles")                                                            \
    X(TRN_COUNTER_COMPILE_NS, "compile_ns")                                                        \
    X(TRN_COUNTER_COMPILE_CACHE_HITS, "compile_cache_hits")                                        \
    X(TRN_COUNTER_COMPILE_CACHE_MISSES, "compile_cache_misses")                                    \
    X(TRN_COUNTER_COMPILED_LAUNCHES, "compiled_graph_launches")                                    \
    X(TRN_COUNTER_COLLECTIVES, "collectives")                                                      \
    X(TRN_COUNTER_COLLECTIVE_BYTES, "collective_bytes")                                            \
    X(TRN_COUNTER_OOMS, "out_of_memory_errors")

typedef enum trn_counter {
#define TRN__COUNTER_ENUM(name, text) name,
    TRN_COUNTER_LIST(TRN__COUNTER_ENUM)
#undef TRN__COUNTER_ENUM
        TRN_COUNTER_COUNT
} trn_counter;

// Adds delta to the counter of `device`; work with no device (device -1 or
// any index outside 0..TRN_MAX_DEVICES-1) counts in a process-wide slot.
void trn_counter_add(trn_counter counter, int device, uint64_t delta);
// Value for one device, for the process-wide slot (device -1), or the sum of
// all (device == TRN_ALL_DEVICES).
#define TRN_ALL_DEVICES (-2)
uint64_t trn_counter_get(trn_counter counter, int device);
// "kernel_launches"; NULL for an out-of-range value.
const char *trn_counter_name(trn_counter counter);
// Zeroes every fixed and named counter and metric (not the page's memory
// figures, which are live state).
void trn_metrics_reset(void);

// Named counters and metrics (up to TRN_METRICS_MAX names in all; names are
// copied, at most 63 characters). Thread-safe.
#define TRN_METRICS_MAX 256
void trn_named_counter_add(const char *name, int64_t delta);
void trn_metric_record(const char *name, double value);

typedef struct trn_metric_info {
    char name[64];
    bool is_counter;  // named counter (value in sum) or metric
    uint64_t count;   // samples recorded (counters: number of adds)
    double sum, min, max;
} trn_metric_info;
// Copies up to max entries into out; returns the number of entries that
// exist (may exceed max).
size_t trn_metrics_list(trn_metric_info *out, size_t max);

// ---- the shared-memory stats page (read by neuron-top / neuron-ls) -------
#define TRN_STATS_MAGIC 0x31544154534e5254ULL  // "TRNSTAT1"
#define TRN_STATS_VERSION 1
#define TRN_STATS_COUNTERS 16  // >= TRN_COUNTER_COUNT

typedef struct trn_stats_device {
    uint64_t counters[TRN_STATS_COUNTERS];  // trn_counter order
    uint64_t in_use;                        // 1 once the process allocated or launched here
    uint64_t running;                       // tasks executing right now (sampled by
                                            // neuron-top for utilization: timing every
                                            // task would cost ~0.2 us per launch here)
    uint64_t mem_allocated;                 // bytes handed to tensors
    uint64_t mem_reserved;                  // allocated + cached
    uint64_t mem_capacity;                  // emulated HBM (or the per-process limit)
} trn_stats_device;

typedef struct trn_stats_page {
    uint64_t magic, version, pid, device_count;
    uint64_t start_unix_ns;
    uint64_t counter_count;  // TRN_COUNTER_COUNT when written
    char command[128];       // NUL-terminated, from /proc/self/cmdline
    trn_stats_device devices[TRN_MAX_DEVICES];
} trn_stats_page;

// The process's page (the shared one, or a private copy when shared memory
// is disabled or unavailable). Never NULL.
trn_stats_page *trn_stats_page_get(void);
// "/proc/<pid>/fd/<fd>": a path another process of the same user can open
// to read this process's page; "" when there is none (disabled, closed, or
// in a forked child).
const char *trn_stats_page_path(void);
// Unlists this process's page now (closes its fd: readers no longer find
// it). Counting goes on in the same memory; the kernel frees it at exit.
void trn_stats_page_close(void);

#ifdef __cplusplus
}
#endif
#endif
