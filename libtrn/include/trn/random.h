// trn/random.h - filling a tensor with random numbers from a counter-based
// generator: element i's value depends only on (seed, offset + i), through
// the same splitmix64 hash as dropout's mask, so a seed reproduces its output
// exactly however the thread pool splits the range, and a fill of elements
// [k, n) at offset o + k reproduces that part of a fill of [0, n) at offset
// o: DTensor's RNG tracker relies on this to give each shard its part of the
// one global tensor (the generator's state is (seed, offset), as CUDA's).
//
// Owned by libtrn/src/kernels/random/random.c; the C++ adapter is
// torch_neuronx/csrc/aten/random.cpp, which takes (seed, offset) from the
// device's generator and advances its offset past the fill
// (torch.manual_seed / get_rng_state / set_rng_state act on it). Values are
// not the CPU generator's: like CUDA's, neuron's random streams are its own.
#ifndef TRN_RANDOM_H
#define TRN_RANDOM_H

#include <stdint.h>

#include "trn/dtype.h"
#include "trn/status.h"
#include "trn/stream.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum trn_random_dist {
    TRN_RANDOM_UNIFORM = 0,      // in [a, b)
    TRN_RANDOM_NORMAL = 1,       // mean a, standard deviation b (Box-Muller)
    TRN_RANDOM_BERNOULLI = 2,    // 1 with probability a, else 0
    TRN_RANDOM_EXPONENTIAL = 3,  // rate a: -log(1 - u) / a
    TRN_RANDOM_INTEGER = 4,      // from + (hash mod range), range >= 1
    TRN_RANDOM_LOG_NORMAL = 5,   // exp(normal(mean a, standard deviation b)), b > 0
    TRN_RANDOM_CAUCHY = 6,       // median a, scale b > 0: a + b * tan(pi * (u - 1/2))
    TRN_RANDOM_GEOMETRIC = 7,    // success probability a in (0, 1): trials to the first, >= 1
    TRN_RANDOM_DIST_COUNT
} trn_random_dist;

// out: n contiguous elements. UNIFORM, NORMAL, EXPONENTIAL, LOG_NORMAL and
// CAUCHY need a floating dtype (F16, BF16, F32, F64); BERNOULLI, INTEGER and
// GEOMETRIC write any dtype but bool-only for INTEGER ranges beyond {0, 1}
// are the caller's check. Floating values are generated in double and
// rounded once.
typedef struct trn_random_desc {
    trn_random_dist dist;
    trn_dtype dtype;
    int64_t n;
    void *out;
    double a, b;
    int64_t from;
    uint64_t range;
    uint64_t seed;
    uint64_t offset;  // counter of element 0
} trn_random_desc;

trn_status trn_random_launch(trn_stream *stream, const trn_random_desc *desc);

// The hash of (seed, counter) the fills use: a 64-bit key for kernels that
// take a seed only (randperm, multinomial, attention dropout), so they too
// follow the generator's (seed, offset).
uint64_t trn_random_key(uint64_t seed, uint64_t counter);

#ifdef __cplusplus
}
#endif

#endif  // TRN_RANDOM_H
