// runtime/bindings.h - lets any adapter file add Python functions to torch_neuronx._C
// without editing runtime/module.cpp: a file defines
//   static neuron::BindingsRegistrar reg([](pybind11::module_ &m) { m.def(...); });
// and runtime/module.cpp's PYBIND11_MODULE runs every registered function once.
// Owned by runtime/module.cpp (it drains the list); files only append to it.
#pragma once
#include <pybind11/pybind11.h>
#include <torch/csrc/Exceptions.h>

#include <exception>

namespace neuron {

using BindingsFn = void (*)(pybind11::module_ &);

struct BindingsRegistrar {
    explicit BindingsRegistrar(BindingsFn fn);
};

// Runs f; a C++ exception (c10 errors from TRN_CHECK included) becomes the
// Python exception PyTorch users know (torch.OutOfMemoryError, ValueError,
// NotImplementedError, RuntimeError). Every binding body goes through it.
template <typename F> auto guarded(F &&f) -> decltype(f()) {
    try {
        return f();
    } catch (const pybind11::error_already_set &) {
        throw;
    } catch (...) {
        torch::translate_exception_to_python(std::current_exception());
        throw pybind11::error_already_set();
    }
}

}  // namespace neuron
