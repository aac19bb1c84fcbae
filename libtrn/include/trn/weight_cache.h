// trn/weight_cache.h - the packed-weight cache of few-row float32 products.
//
// A product C = A.B with a few rows (a decode step) may keep a packed copy
// of B between calls when its descriptor carries B's version
// (trn_matmul_desc.b_version): the copy is found again only for the same
// operand (address, sizes, strides) at the same version, and dropped when
// the memory holding B is freed. Its bytes are bounded by
// TORCH_NEURONX_WEIGHT_CACHE_SIZE (default 256M; 0 turns it off).
#ifndef TRN_WEIGHT_CACHE_PUBLIC_H
#define TRN_WEIGHT_CACHE_PUBLIC_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct trn_weight_cache_stats {
    size_t entries;               // operands recorded (seen once) or packed
    size_t packed;                // of them, with a packed copy
    size_t bytes;                 // of the packed copies (host memory)
    size_t budget;                // TORCH_NEURONX_WEIGHT_CACHE_SIZE
    uint64_t hits, packs, drops;  // since the process started
} trn_weight_cache_stats;

void trn_weight_cache_stats_get(trn_weight_cache_stats *out);
// Drops every entry (a copy in use is freed when its product ends).
void trn_weight_cache_clear(void);

#ifdef __cplusplus
}
#endif

#endif
