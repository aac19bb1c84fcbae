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
// The version the kernel sees is a token the launch took on the host
// (trn__mem_wcache_token): a new one per allocation and version counter, as
// with worker-thread streams the kernel may run after the host freed the
// operand and gave its address to another tensor.
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

// Rows of A a cached product may have (float32; bfloat16 fewer): a batch of
// 8 sequences decoding. Larger products never read the cache, so their
// launch takes no token.
#define TRN__WCACHE_MAX_ROWS 8

// memory.c, on the launching thread: the token that names the allocation
// holding ptr at `version` (the caller's version counter), unique in the
// process; 0 where ptr is not in an allocated block (never cached).
// trn_matmul_launch puts it in the queued descriptor's b_version, so the
// kernel's lookup (which may run after the host freed the operand and gave
// its address to another tensor) can only match the same allocation.
uint64_t trn__mem_wcache_token(const void *ptr, uint64_t version);
// memory.c: under the allocator's lock, if the block holding ptr is still the
// allocation `token` names, marks it (its free then calls
// trn__wcache_drop_range; frees of activations skip the cache's lock) and
// calls record(ctx); false otherwise. The allocator's lock is taken before
// the cache's, as in trn_mem_free.
bool trn__mem_wcache_record(const void *ptr, uint64_t token, void (*record)(void *ctx), void *ctx);

// weight_cache_mm.c (per CPU level): C = alpha * A.B (+ bias, of C's dtype)
// from the cached packed copy of B (bfloat16: from a copy packed for the
// call where none is cached); false (nothing written) where the path does
// not apply or float32 has no copy yet, and the caller computes as without
// a cache.
bool trn__wcache_matmul(const trn_matmul_desc *d, const void *bias, int64_t bias_stride);

#endif
