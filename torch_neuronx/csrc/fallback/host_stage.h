// fallback/host_stage.h - runs one boxed aten call on the CPU with its neuron
// operands staged on the host so that they alias on the host exactly as they
// alias on the device (owner: the CPU fallback).
//
// PyTorch's generic at::native::cpu_fallback copies each device operand to a
// host tensor of its own: an `out=` that overlaps an input, or an input passed
// twice, stops sharing memory on the CPU, so CPU's overlap checks never fire
// (neuron returned values CPU refuses) and legal full aliasing
// (sort(x, out=(x, idx))) reads an input the kernel no longer writes. Here the
// operands whose byte ranges in one device storage intersect are staged as
// views (same offsets, strides, dtype, conj/neg bits) of ONE host copy of the
// range they cover, and after the CPU kernel the written ranges go back to the
// device as the bytes the CPU kernel left in that copy.
#pragma once

#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/stack.h>

namespace neuron {

// Runs `op` with the arguments on `stack` on the CPU kernel and leaves its
// returns on `stack`: written operands copied back to the device (declared
// Tensor(a!) arguments and the undeclared writes of fallback/writes.h),
// mutable-alias returns replaced by the caller's device tensors, other
// returns moved to the device of the call. A view op (a non-writing alias
// return) is refused before anything runs: a CPU result cannot alias device
// memory.
void run_on_host(const c10::OperatorHandle &op, torch::jit::Stack *stack);

}  // namespace neuron
