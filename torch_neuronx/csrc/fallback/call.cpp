// fallback/call.cpp - torch_neuronx._C._cpu_fallback_call: runs one aten
// overload on neuron tensors through the CPU fallback even when it has a
// native kernel, so tests can prove the fallback itself is correct (e.g. the
// undeclared-write copy-back of fallback/writes.h) for ops whose
// fallback path is otherwise reached only with rare inputs.
#include <torch/csrc/jit/python/pybind_utils.h>

#include "fallback/cpu_fallback.h"
#include "runtime/bindings.h"

namespace neuron {
namespace {

pybind11::object cpu_fallback_call(const std::string &name, const std::string &overload,
                                   pybind11::args args, pybind11::kwargs kwargs) {
    const c10::OperatorHandle op =
        c10::Dispatcher::singleton().findSchemaOrThrow(name.c_str(), overload.c_str());
    torch::jit::Stack stack =
        torch::jit::createStackForSchema(op.schema(), args, kwargs, std::nullopt);
    {
        pybind11::gil_scoped_release no_gil;
        cpu_fallback(op, &stack);
    }
    return torch::jit::createPyObjectForStack(std::move(stack));
}

static BindingsRegistrar reg_fallback_call([](pybind11::module_ &m) {
    m.def("_cpu_fallback_call", &cpu_fallback_call,
          "Runs aten `name`.`overload` through the CPU fallback (tests only).");
});

}  // namespace
}  // namespace neuron
