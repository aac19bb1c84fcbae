// trn/kernel_abi.h - the only libtrn interface that generated kernels see.
//
// Owner: src/compiler/ (render/ writes code against it, jit/ fills it in).
// Freestanding on purpose: no libtrn symbol is referenced by name from a
// generated shared object, so the .so links nothing and loads into any
// process; everything it needs from the runtime arrives in this table.
// Rationale (TVM's c_backend_api.h): generated code gets the narrowest
// possible contract, so the runtime can change behind it.
#ifndef TRN_KERNEL_ABI_H
#define TRN_KERNEL_ABI_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

// Bump when the table or the kernel signature changes: the disk cache keys
// on it, so old shared objects are recompiled instead of misused.
#define TRN_KERNEL_ABI_VERSION 2

typedef void (*trn_kernel_range_fn)(void *ctx, int64_t begin, int64_t end);

typedef struct trn_kernel_abi {
    int version;  // TRN_KERNEL_ABI_VERSION
    // Calls fn on pieces of [0, n) of at least `grain` items over the device's
    // cores and returns when all are done (trn_parallel_for).
    void (*parallel_for)(int64_t n, int64_t grain, trn_kernel_range_fn fn, void *ctx);
    // Reports an out-of-range index as the calling thread's libtrn error
    // (`style`: trn_graph_index_error) and returns the status the kernel
    // returns.
    int (*index_error)(int64_t value, int dim, int64_t size, int style);
} trn_kernel_abi;

// A generated kernel: `bufs[i]` is the base address of buffer i (the
// program's numbering; see trn/compiler.h). Returns 0, or the status of
// index_error: every shape and stride was checked when the graph was built,
// so an index value read at run time is the only way a kernel can fail.
typedef int (*trn_kernel_fn)(void *const *bufs, const trn_kernel_abi *abi);

#ifdef __cplusplus
}
#endif
#endif
