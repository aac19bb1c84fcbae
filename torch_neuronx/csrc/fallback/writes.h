// fallback/writes.h - the CPU fallback's list of ops that write an
// argument their schema does not mark as written, and the copy-back for it.
//
// at::native::cpu_fallback copies back only the arguments marked Tensor(a!).
// A few aten ops also update unmarked arguments in place (native_batch_norm's
// running_mean / running_var in training mode): run on CPU copies, their
// update would be lost and the model would silently evaluate wrongly. The
// list is the result of scripts/audit_fallback_writes.py (docs/training-ops.md).
#pragma once

#include <ATen/core/Tensor.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/stack.h>

#include <utility>
#include <vector>

namespace neuron {

// A neuron tensor the op writes without declaring it, and the CPU copy the
// CPU kernel writes instead.
using UndeclaredWrite = std::pair<at::Tensor, at::Tensor>;

// For a listed op: replaces each undeclared written neuron argument on the
// stack by a CPU copy and returns the pairs; for any other op, nothing.
std::vector<UndeclaredWrite> stage_undeclared_writes(const c10::OperatorHandle &op,
                                                     torch::jit::Stack &stack);

// After the CPU kernel ran: copies each CPU copy back into its neuron tensor.
void commit_undeclared_writes(const std::vector<UndeclaredWrite> &writes);

}  // namespace neuron
