// fallback/writes.h - the CPU fallback's list of ops that write an
// argument their schema does not mark as written.
//
// A copy-back driven by the schema alone copies back only the arguments
// marked Tensor(a!).
// A few aten ops also update unmarked arguments in place (native_batch_norm's
// running_mean / running_var in training mode): run on CPU copies, their
// update would be lost and the model would silently evaluate wrongly. The
// list is the result of scripts/audit_fallback_writes.py (docs/training-ops.md).
#pragma once

#include <ATen/core/dispatch/Dispatcher.h>

#include <string_view>

namespace neuron {

// Whether the CPU kernel of `op` writes its argument `arg` (a name of its
// schema) in place although the schema does not mark it as written; the
// fallback (fallback/host_stage.h) then copies it back like a Tensor(a!).
bool is_undeclared_write(const c10::OperatorName &op, std::string_view arg);

}  // namespace neuron
