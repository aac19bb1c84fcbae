// trn/status.h - status codes and the thread-local last-error message.
//
// Every fallible libtrn call returns a trn_status. On failure it also leaves a
// human-readable message, readable with trn_last_error() on the same thread,
// that names the object involved ("neuron:3 is out of range: 2 devices").
// Rationale: the C++ layer turns (status, message) into a PyTorch exception,
// so the message must be complete on its own.
#ifndef TRN_STATUS_H
#define TRN_STATUS_H

#ifdef __cplusplus
extern "C" {
#endif

// X(name, value, short description) - the single source of the status list.
#define TRN_STATUS_LIST(X)                                                                         \
    X(TRN_SUCCESS, 0, "success")                                                                   \
    X(TRN_ERROR_INVALID_ARGUMENT, -1, "invalid argument")                                          \
    X(TRN_ERROR_INVALID_DEVICE, -2, "invalid device")                                              \
    X(TRN_ERROR_OUT_OF_MEMORY, -3, "out of device memory")                                         \
    X(TRN_ERROR_INVALID_POINTER, -4, "invalid device pointer")                                     \
    X(TRN_ERROR_UNSUPPORTED, -5, "unsupported")                                                    \
    X(TRN_ERROR_FORKED, -6, "runtime used in a forked child")                                      \
    X(TRN_ERROR_SYSTEM, -7, "system error")                                                        \
    X(TRN_ERROR_KERNEL, -8, "kernel failed")

typedef enum trn_status {
#define TRN__STATUS_ENUM(name, value, text) name = value,
    TRN_STATUS_LIST(TRN__STATUS_ENUM)
#undef TRN__STATUS_ENUM
} trn_status;

// "TRN_ERROR_OUT_OF_MEMORY"; "TRN_UNKNOWN_STATUS" for values not in the list.
const char *trn_status_name(trn_status status);
// "out of device memory"
const char *trn_status_string(trn_status status);

// Message of the last failed call on this thread; "" if none. The pointer
// stays valid until the next libtrn call on this thread.
const char *trn_last_error(void);
// Forget the last error on this thread.
void trn_clear_error(void);

#ifdef __cplusplus
}
#endif
#endif
