// weight_cache.h - packed copies of matrix operands reused across calls.
//
// A decode step multiplies one row by each weight of the model, and every
// token does it again with the same weights. nn.Linear gives its weight
// transposed (n rows of k), which the few-row kernels transpose block by
// block in registers on every call; a copy packed k-major once streams with
// one load and one multiply-add per 16 floats instead. The copy is only
// right while the weight's memory holds what it held when packed, so an
// entry is keyed by the operand's address, sizes and strides and by the
// version the caller passes (the tensor's version counter, bumped by every
// in-place write), and dropped when the block holding the operand is freed
// (trn_mem_free), so an address reused by a new allocation never finds it.
//
// Internal to libtrn. The table is process-wide (weight_cache.c is built
// once, not per CPU level); the packing and the products are per CPU level
// (weight_cache_mm.c).
#ifndef TRN_WEIGHT_CACHE_H
#define TRN_WEIGHT_CACHE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "trn/blas.h"
#include "trn/weight_cache.h"

typedef struct trn__wcache_key {
    const void *b;       // the operand's first element
    int64_t k, n;        // rows and columns of the operand as B (k x n)
    int64_t rs, cs;      // its element strides along k and along n
    int32_t dtype, fmt;  // element type; packed layout (weight_cache_mm.c)
} trn__wcache_key;

typedef struct trn__wcache_entry trn__wcache_entry;

// Fills `packed` (`bytes` long) from the operand; called without the lock.
typedef void (*trn__wcache_pack_fn)(const trn__wcache_key *key, void *packed);

// The packed copy of `key` at `version`, held until trn__wcache_release, or
// NULL: the caller then computes from the operand itself. The first call
// for a key only records it (a product seen once, as a training step's,
// never pays for a copy); the second at the same version packs, within the
// byte budget (TORCH_NEURONX_WEIGHT_CACHE_SIZE). A call at a newer version
// drops the older copy.
const void *trn__wcache_acquire(const trn__wcache_key *key, uint64_t version, size_t bytes,
                                trn__wcache_pack_fn pack, trn__wcache_entry **held);
void trn__wcache_release(trn__wcache_entry *e);
// Drops the entry found stale by its holder (a sampled element differs:
// memory written without the version moving, as through a tensor's .data).
void trn__wcache_invalidate(trn__wcache_entry *e);

// Drops every entry whose operand starts inside [lo, lo + nbytes): the
// allocator calls it when it frees a block, before the block can be reused.
void trn__wcache_drop_range(const void *lo, size_t nbytes);

// memory.c: trn__mem_device_of (internal.h) for an operand the cache is
// about to record, which also marks its block: trn_mem_free calls
// trn__wcache_drop_range only for marked blocks, so frees of activations
// skip the cache's lock. The caller keeps the operand alive until its entry
// is in the table.
int trn__mem_mark_wcached(const void *ptr);

// weight_cache_mm.c (per CPU level): C = alpha * A.B (+ bias, of C's dtype)
// from the cached packed copy of B (bfloat16: from a copy packed for the
// call where none is cached); false (nothing written) where the path does
// not apply or float32 has no copy yet, and the caller computes as without
// a cache.
bool trn__wcache_matmul(const trn_matmul_desc *d, const void *bias, int64_t bias_stride);

#endif
