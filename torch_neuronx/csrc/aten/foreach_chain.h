// aten/foreach_chain.h - consecutive _foreach_* ops held back and run as one
// chunk-major libtrn task (trn/foreach_chain.h): an optimizer step's 8 list
// ops then read each chunk of each list once from memory, not 8 times, with
// the bits of the ops run one by one.
//
// Owns the held chain (one per process, on one stream). A chain ends when
// anything else reaches its stream (libtrn's pending hook, shared with
// Adaptive Eager: eager_group_record.cpp calls flush()), when an
// elementwise op is recorded into an Adaptive Eager group, when a foreach op
// of another stream or other list sizes comes, and at kMaxOps ops. On only
// where Adaptive Eager is on (same switches: its environment variable,
// deterministic algorithms, eager_fusion.set_enabled) and unless
// TORCH_NEURONX_FOREACH_CHAIN=0. Adapter: aten/foreach.cpp.
#pragma once

#include <ATen/core/Tensor.h>

#include <vector>

#include "trn/foreach.h"

namespace neuron::foreach_chain {

// Holds launch `d` of list `ts` on stream `s` when chaining is on, keeping
// `hold` (its input lists) and `fresh` (the output list of an out-of-place
// op, else empty) alive until the chain launches. True: held, the caller
// must not launch it. False: launch it as usual (a held chain runs first:
// the launch reaches the stream's pending hook). d.tensors is ignored.
// At the launch, a fresh list nobody but the chain holds any more (an
// intermediate such as Adam's sqrt(exp_avg_sq), dropped by Python before the
// step ended) is kept in scratch and never written (trn/foreach_chain.h).
bool offer(trn_stream *s, const trn_foreach_desc &d, std::vector<trn_foreach_tensor> &&ts,
           std::vector<at::Tensor> &&hold, std::vector<at::Tensor> &&fresh);

// Whether an op like `op` would be held now (chaining and Adaptive Eager on,
// not a norm): lets the adapter skip gathering what offer() keeps.
bool wanted(trn_foreach_op op);

// Launches the held chain if it is on stream `s` (nullptr: on any stream).
// Cost when nothing is held: one relaxed load.
void flush(trn_stream *s);

}  // namespace neuron::foreach_chain
