// observe/op_tracking.h - which ops ran natively on neuron and which fell back to the
// CPU, one entry per invocation (torch_neuronx.get_executed_ops /
// get_fallback_ops), plus the policy for native kernels that fail.
#pragma once

#include <string>
#include <vector>

namespace c10 {
class Error;
}

namespace neuron::tracking {

// `op` is the qualified name without overload: "aten::mm".
void record_executed(const std::string &op);
// The same for a name the caller keeps alive for the call (a literal, as
// every kernel passes): looked up by its address first, without building a
// std::string or hashing it.
void record_executed(const char *op);
void record_fallback(const std::string &op);
std::vector<std::string> executed_ops();
std::vector<std::string> fallback_ops();
void clear();

// Warns once per process and op that `op` runs on the CPU.
void warn_fallback_once(const std::string &op, const std::string &why);

// TORCH_NEURONX_FALLBACK_ONLY_FOR_UNIMPLEMENTED_OPS=1: a native kernel that
// cannot handle its input raises instead of rerunning on the CPU.
bool fallback_only_for_unimplemented();

// Called from a native kernel's catch block: rethrows (with "CPU fallback
// disabled") when the policy forbids falling back, else records the fallback
// and warns once, so the caller can rerun the op on the CPU.
void native_failed(const std::string &op, const c10::Error &error);

}  // namespace neuron::tracking
