// trn/fork.h - locks of the layers above libtrn held across fork by the
// runtime's fork handlers (src/runtime/fork.c). A header of its own (not
// trn/device.h) so the few users include it.
#ifndef TRN_FORK_H
#define TRN_FORK_H

#include "trn/status.h"

#ifdef __cplusplus
extern "C" {
#endif

// A lock of a layer above libtrn (the adapter's op log) that a forked child
// may need: the runtime's fork handlers hold it across fork, so no child
// inherits it held by a thread the child does not have (it would wait on it
// forever). Only for leaves: locks under which nothing takes another lock
// (libtrn's, the GIL, another leaf) or calls into libtrn. The handlers take
// them after all of libtrn's own locks, in registration order, and release
// them first, in reverse. TRN_ERROR_INVALID_ARGUMENT for a NULL function,
// TRN_ERROR_UNSUPPORTED once TRN_FORK_LEAVES_MAX are registered. They take
// effect once the runtime is initialised (its first use).
#define TRN_FORK_LEAVES_MAX 8
typedef void (*trn_fork_lock_fn)(void);
trn_status trn_fork_add_leaf_lock(trn_fork_lock_fn lock, trn_fork_lock_fn unlock);

#ifdef __cplusplus
}
#endif
#endif
