// trn/foreach_chain.h - a chain of _foreach_* launches over the same tensor
// positions run as one task, chunk-major: for each chunk of each position's
// tensors, op 1..K of the chain in their order, each with the per-element
// loop its own trn_foreach_launch runs. Only the order over elements
// changes, so the results are the bits of the K launches one after another,
// while a chunk's operands stay in cache across the K ops (an optimizer step
// of K list ops otherwise streams every list from memory K times).
//
// Owned by libtrn/src/kernels/train/foreach.c (next to the per-op loops it
// reuses); the C++ recorder is torch_neuronx/csrc/aten/foreach_chain.cpp.
// A header of its own so that trn/foreach.h (reached through trn.h) keeps
// its users.
#ifndef TRN_FOREACH_CHAIN_H
#define TRN_FOREACH_CHAIN_H

#include <stdint.h>

#include "trn/foreach.h"

#ifdef __cplusplus
extern "C" {
#endif

// Most ops one chain takes.
#define TRN_FOREACH_CHAIN_MAX_OPS 64

// Launches ops[0 .. nops - 1] (each checked as trn_foreach_launch checks it;
// NORM is refused) as one task. Chunk-major only where that cannot change a
// result: every op has the same count and, position by position, the same
// element count, and no two distinct operands (position, pointer) overlap
// in memory (a one-element scalar_tensor counts as an operand of a position
// of its own). Otherwise the task runs the ops one after another, as K
// launches would. The tensor arrays are copied; the data must stay valid
// until the task has run.
//
// scratch (NULL, or one flag per op): scratch[k] nonzero says nobody reads
// op k's outputs after the chain (an intermediate list only later ops of
// the chain use, such as Adam's sqrt(exp_avg_sq)). A chunk-major run then
// keeps them in a chunk-sized scratch buffer and never stores them: the
// same values, one list less of memory traffic. Ignored for an op that
// writes in place or whose outputs an earlier op touches.
trn_status trn_foreach_chain_launch(trn_stream *stream, const trn_foreach_desc *ops, int64_t nops,
                                    const unsigned char *scratch);

// Chain tasks run so far in this process: chunk-major (*fused) and op by op
// (*unfused, the rule above refused them). For tests and metrics.
void trn_foreach_chain_counts(int64_t *fused, int64_t *unfused);

#ifdef __cplusplus
}
#endif
#endif
