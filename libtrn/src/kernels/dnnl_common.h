// dnnl_common.h - what the oneDNN-backed kernels (matmul.c, conv.c) share:
// the engine, a per-thread stream and workspace, status translation, and a
// cache of built "plans" (primitives plus whatever a call needs around them).
//
// Internal to libtrn: nothing here is public API.
//
// Why a plan cache of our own on top of oneDNN's primitive cache (capacity
// 1024 by default): oneDNN caches primitives, but building the primitive
// descriptor that is the cache key still costs tens of microseconds per call.
// Plans are keyed by the call's full geometry (shapes, strides, dtypes,
// alpha/beta) and are never freed while the process runs, so a task may use a
// plan without holding a lock; when the cache is full, callers build a
// private plan and destroy it after the call.
#ifndef TRN_DNNL_COMMON_H
#define TRN_DNNL_COMMON_H

#include <stddef.h>
#include <stdint.h>

#include <oneapi/dnnl/dnnl.h>

#include "../internal.h"

// The process-wide CPU engine, created on first use (thread-safe).
trn_status trn__dnnl_engine(dnnl_engine_t *engine);
// The calling thread's oneDNN stream (created on first use, destroyed when
// the thread exits).
trn_status trn__dnnl_stream(dnnl_stream_t *stream);
// A 64-byte aligned per-thread buffer of at least `bytes` (grow-only, freed
// when the thread exits). Valid until the next call on the same thread.
trn_status trn__dnnl_workspace(size_t bytes, void **ptr);

// Sets the libtrn error for a failed oneDNN call and returns its trn status.
trn_status trn__dnnl_error(dnnl_status_t st, const char *call,
                           const char *context);

// Evaluates a oneDNN call; on failure records "<call> failed: <reason>
// (<ctx>)" and jumps to `fail` with `st` set.
#define TRN_DNNL_TRY(call, ctx)                                           \
    do {                                                                  \
        dnnl_status_t trn__ds = (call);                                   \
        if (trn__ds != dnnl_success) {                                    \
            st = trn__dnnl_error(trn__ds, #call, (ctx));                  \
            goto fail;                                                    \
        }                                                                 \
    } while (0)

// ---- plan cache --------------------------------------------------------------
#define TRN__PLAN_KEY_MAX 512

// Looks up a plan by key (key_size bytes, <= TRN__PLAN_KEY_MAX). Returns NULL
// when absent.
void *trn__plan_find(const void *key, size_t key_size);
// Inserts `plan` under `key`. Returns the plan stored under the key (another
// thread's if it won the race, in which case the caller destroys its own),
// or NULL when the cache is full (the caller owns and destroys `plan`).
void *trn__plan_insert(const void *key, size_t key_size, void *plan);

// Byte offsets [lo, hi] (inclusive of one element) that a strided view
// touches; false on overflow. Sizes must all be > 0.
int trn__view_span(int ndim, const int64_t *sizes, const int64_t *strides,
                   size_t esize, int64_t *lo, int64_t *span);

#endif
