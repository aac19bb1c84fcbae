// trn/kernel_abi.h - the only libtrn interface that generated kernels see.
//
// Owner: src/compiler/ (render/ writes code against it, jit/ fills it in).
// Freestanding on purpose: no libtrn symbol is referenced by name from a
// generated shared object, so the .so links nothing and loads into any
// process; it exports data (trn_kernel_launch) and loop functions that the
// runtime calls, and calls nothing of the runtime's.
// Rationale (TVM's c_backend_api.h): generated code gets the narrowest
// possible contract, so the runtime can change behind it.
#ifndef TRN_KERNEL_ABI_H
#define TRN_KERNEL_ABI_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

// Bump when a type here changes: the disk cache keys on it, so old shared
// objects are recompiled instead of misused.
#define TRN_KERNEL_ABI_VERSION 3

typedef void (*trn_kernel_range_fn)(void *ctx, int64_t begin, int64_t end);

// What a kernel's loop gets as `ctx`: its buffers (the base addresses of the
// launch's `bufs`, in that order) and the first out-of-range index its loops
// met (failed != 0; `style`: trn_graph_index_error).
typedef struct trn_kernel_ctx {
    void *const *bufs;
    int failed, dim, style;
    int64_t value, size;
} trn_kernel_ctx;

// A generated shared object exports `trn_graph_launches[trn_graph_kernel_count]`,
// data rather than one function per kernel (gcc spends about as long on a
// tiny function as on a loop): kernels that compute the same thing on
// different buffers share one body. The runtime runs kernel i as
// body(ctx, ...) over pieces of [0, items) of at least `grain` items on the
// device's cores, then `after` (or nothing) on one thread with the program's
// buffer table (`program_bufs[n]`: the base address of buffer n, the
// numbering of trn/compiler.h). Every shape and stride was checked when the
// graph was built, so an index value read at run time is the only way a
// kernel can fail; the runtime reports it from ctx.
typedef struct trn_kernel_launch {
    trn_kernel_range_fn body;
    int64_t items, grain;
    int n_bufs;
    const int *bufs;
    void (*after)(void *const *program_bufs, trn_kernel_ctx *ctx);
} trn_kernel_launch;

// The runtime's services for a launch (it is run by libtrn, not by
// generated code).
typedef struct trn_kernel_abi {
    int version;  // TRN_KERNEL_ABI_VERSION
    // Calls fn on pieces of [0, n) of at least `grain` items over the device's
    // cores and returns when all are done (trn_parallel_for).
    void (*parallel_for)(int64_t n, int64_t grain, trn_kernel_range_fn fn, void *ctx);
    // Reports an out-of-range index as the calling thread's libtrn error
    // (`style`: trn_graph_index_error) and returns the status to fail with.
    int (*index_error)(int64_t value, int dim, int64_t size, int style);
} trn_kernel_abi;

#ifdef __cplusplus
}
#endif
#endif
