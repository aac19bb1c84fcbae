// trn/device.h - emulated NeuronCores: how many, which one is current,
// their properties, and the process-wide runtime state.
//
// Device count comes from NEURON_RT_VISIBLE_CORES ("0-1", "0,2", "3") or else
// NEURON_RT_NUM_CORES ("4"); with neither set it is TRN_DEFAULT_DEVICE_COUNT.
// The environment is read once, on first use. An unparsable value gives zero
// devices, and trn_device_check() then reports why.
//
// Fork safety: once the runtime is initialized (first allocation, stream or
// launch), a forked child may not use it: every call that touches devices
// returns TRN_ERROR_FORKED there. Counting devices stays allowed.
#ifndef TRN_DEVICE_H
#define TRN_DEVICE_H

#include <stdbool.h>
#include <stddef.h>

#include "trn/status.h"

#ifdef __cplusplus
extern "C" {
#endif

#define TRN_DEFAULT_DEVICE_COUNT 2
#define TRN_MAX_DEVICES 64

typedef struct trn_device_props {
    char name[64];        // "OpenNeuron NeuronCore-v3 (emulated)"
    size_t total_memory;  // capacity of the emulated HBM, bytes
    int core_count;       // host threads the device may use for kernels
} trn_device_props;

// Number of visible devices; never fails (0 when the environment is invalid).
int trn_device_count(void);
// TRN_SUCCESS if 0 <= device < count, else TRN_ERROR_INVALID_DEVICE with a
// message naming the index and the count (and the bad env var, if any).
trn_status trn_device_check(int device);

// The calling thread's current device: until set, LOCAL_RANK when a
// launcher set it and that device exists (one process per core), else 0.
int trn_device_get_current(void);
trn_status trn_device_set_current(int device);

trn_status trn_device_get_props(int device, trn_device_props *props);
// Waits for all work on every stream of the device; returns the first
// deferred kernel error of those streams, if any.
trn_status trn_device_synchronize(int device);

// Lazily initialises process-wide state (fork handler, allocators).
// Idempotent and thread-safe; called implicitly by every entry point that
// needs it. TRN_ERROR_FORKED in a child forked after initialisation.
trn_status trn_runtime_init(void);
bool trn_runtime_is_initialized(void);
// True in a child forked after the parent initialised the runtime.
bool trn_runtime_in_bad_fork(void);

#ifdef __cplusplus
}
#endif
#endif
