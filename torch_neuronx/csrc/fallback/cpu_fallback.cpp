// fallback/cpu_fallback.cpp - the boxed CPU fallback for every op without a native
// neuron kernel, plus the dispatch-key fallthroughs (autograd, autocast).
//
// Each invocation is logged (get_fallback_ops) and the first one of each op
// warns. Random ops get the neuron device's generator: CPU kernels accept only
// CPU generators, so a neuron generator (a missing one: the device default)
// is swapped for a fresh CPU generator seeded from its (seed, offset), whose
// offset advances (see runtime/generator.h).
#include <ATen/native/CPUFallback.h>
#include <torch/library.h>

#include "fallback/cpu_fallback.h"
#include "aten/eager_group.h"
#include "fallback/host_stage.h"
#include "runtime/generator.h"
#include "runtime/device.h"
#include "observe/op_tracking.h"

namespace neuron {
namespace {

bool is_generator_arg(const c10::Argument &arg) {
    c10::TypePtr type = arg.real_type();
    if (auto opt = type->cast<c10::OptionalType>()) type = opt->getElementType();
    return type->kind() == c10::TypeKind::GeneratorType;
}

// Device of the first neuron tensor among the arguments; current otherwise.
c10::DeviceIndex op_device(const torch::jit::Stack &stack, size_t begin) {
    for (size_t i = begin; i < stack.size(); ++i) {
        const c10::IValue &v = stack[i];
        if (v.isTensor() && v.toTensor().defined() && v.toTensor().device().type() == kNeuron)
            return v.toTensor().device().index();
        if (v.isTensorList())
            for (const at::Tensor &t : v.toTensorList().vec())
                if (t.defined() && t.device().type() == kNeuron) return t.device().index();
    }
    return current_device();
}

void use_cpu_generators(const c10::OperatorHandle &op, torch::jit::Stack &stack) {
    const auto &args = op.schema().arguments();
    const size_t begin = stack.size() - args.size();
    for (size_t i = 0; i < args.size(); ++i) {
        if (!is_generator_arg(args[i])) continue;
        c10::IValue &v = stack[begin + i];
        if (v.isNone()) {
            v = fallback_cpu_generator(default_generator(op_device(stack, begin)));
        } else if (v.isGenerator() && v.toGenerator().device().type() == kNeuron) {
            v = fallback_cpu_generator(v.toGenerator());
        }
    }
}

}  // namespace

void cpu_fallback(const c10::OperatorHandle &op, torch::jit::Stack *stack) {
    const std::string &name = op.schema().operator_name().name;
    eager_group::EndHint hint(eager_group::End::Fallback);
    tracking::record_fallback(name);
    tracking::warn_fallback_once(name, "has no native neuron kernel");
    if (stack->size() >= op.schema().arguments().size()) {
        const size_t begin = stack->size() - op.schema().arguments().size();
        trn_counter_add(TRN_COUNTER_FALLBACKS, op_device(*stack, begin), 1);
    }
    trn_log(TRN_LOG_DEBUG, "fallback", "%s has no native neuron kernel: runs on CPU", name.c_str());
    use_cpu_generators(op, *stack);
    // Operands that share device memory share it on the host too, so CPU's
    // overlap checks and legal aliasing behave as on CPU; written operands
    // (declared, and the undeclared ones of fallback/writes.h) come back.
    run_on_host(op, stack);
}

namespace {

TORCH_LIBRARY_IMPL(_, PrivateUse1, m) {
    m.fallback(torch::CppFunction::makeFromBoxedFunction<&cpu_fallback>());
}

// Autograd for aten ops is registered through the Autograd alias key; custom
// ops without a neuron autograd kernel pass through to the device kernel, as
// in torch_mlu and TorchTPU. Autocast likewise passes through for ops that
// have no autocast policy.
TORCH_LIBRARY_IMPL(_, AutogradPrivateUse1, m) { m.fallback(torch::CppFunction::makeFallthrough()); }

TORCH_LIBRARY_IMPL(_, AutocastPrivateUse1, m) { m.fallback(torch::CppFunction::makeFallthrough()); }

}  // namespace
}  // namespace neuron
