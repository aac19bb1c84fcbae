// kit/counter_rng.h - owns the counter-based random numbers of every kernel
// (random fills, randperm/multinomial, dropout, attention's dropout): the
// splitmix64 hash of (seed, counter) and the uniforms drawn from it. One
// definition, so dropout and fused attention drop the same elements for a
// seed, and results never depend on how the thread pool splits the work.
#ifndef TRN_KERNELS_KIT_COUNTER_RNG_H
#define TRN_KERNELS_KIT_COUNTER_RNG_H

#include <stdint.h>

// splitmix64's output for counter i of stream `seed`.
static inline uint64_t trn__rng_hash(uint64_t seed, uint64_t i) {
    uint64_t z = seed + (i + 1) * 0x9E3779B97F4A7C15ull;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

// Uniform in [0, 1) with 53 random bits.
static inline double trn__rng_unit(uint64_t h) { return (double)(h >> 11) * 0x1p-53; }

// Dropout's keep decision: a 24-bit float uniform below `keep` (= 1 - p).
static inline int trn__rng_keep(uint64_t h, float keep) {
    return (float)(h >> 40) * 0x1p-24f < keep;
}

#endif
