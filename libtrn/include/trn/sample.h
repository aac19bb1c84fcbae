// trn/sample.h - random sampling kernels: a random permutation (randperm)
// and categorical draws (multinomial), from the same counter-based
// splitmix64 hash as trn/random.h, so a seed reproduces the result exactly
// however the thread pool splits the work.
//
// Owned by libtrn/src/kernels/random/sample.c; the C++ adapter is
// torch_neuronx/csrc/aten/sample.cpp, which draws the seed from the
// device's generator and checks the probabilities (with PyTorch's messages)
// before launching. Values are not the CPU generator's.
#ifndef TRN_SAMPLE_H
#define TRN_SAMPLE_H

#include <stdint.h>

#include "trn/dtype.h"
#include "trn/status.h"
#include "trn/stream.h"

#ifdef __cplusplus
extern "C" {
#endif

// out: n elements of `dtype` (U8, I8, I16, I32, I64, F16, BF16, F32, F64),
// a uniformly random permutation of 0 .. n-1 (Fisher-Yates). The caller
// checks that n - 1 is representable in the dtype.
typedef struct trn_randperm_desc {
    trn_dtype dtype;
    int64_t n;
    void *out;
    uint64_t seed;
} trn_randperm_desc;

trn_status trn_randperm_launch(trn_stream *stream, const trn_randperm_desc *desc);

// probs: [rows, categories] non-negative weights (F16, BF16, F32, F64),
// each row with a positive finite sum; out: [rows, samples] int64 category
// indices. With replacement, each draw inverts the row's cumulative
// distribution (zero-weight categories are never drawn); without it
// (samples <= categories), the categories with the largest p / E keys,
// E ~ Exp(1) per category, in decreasing key order: draws in sequence
// without replacement. A row with a negative, NaN or infinite weight or a
// zero sum is an INVALID_ARGUMENT error reported by the task.
typedef struct trn_multinomial_desc {
    trn_dtype dtype;
    int64_t rows, categories, samples;
    int replacement;
    const void *probs;
    int64_t *out;
    uint64_t seed;
} trn_multinomial_desc;

trn_status trn_multinomial_launch(trn_stream *stream, const trn_multinomial_desc *desc);

#ifdef __cplusplus
}
#endif
#endif
