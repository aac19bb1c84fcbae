// fallback/cpu_fallback.h - the boxed CPU fallback, for native kernels that hand an
// input they do not support (a dtype, a mode) to the CPU:
//   at::native::call_fallback_fn<&neuron::cpu_fallback, ATEN_OP(add_Tensor)>::call(...)
#pragma once

#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/stack.h>
#include <ATen/native/CPUFallback.h>

#include <utility>

namespace neuron {

// Logs the op as a fallback, warns once, runs it on the CPU.
void cpu_fallback(const c10::OperatorHandle &op, torch::jit::Stack *stack);

// Unboxed form for adapters: fallback<ATEN_OP(add_Tensor)>(self, other, alpha)
// reruns the op on the CPU with the adapter's own arguments.
template <typename Op, typename... Args> decltype(auto) fallback(Args &&...args) {
    return at::native::call_fallback_fn<&cpu_fallback, Op>::call(std::forward<Args>(args)...);
}

}  // namespace neuron
