// bindings.h - lets any adapter file add Python functions to torch_neuronx._C
// without editing Module.cpp: a file defines
//   static neuron::BindingsRegistrar reg([](pybind11::module_ &m) { m.def(...); });
// and Module.cpp's PYBIND11_MODULE runs every registered function once.
// Owned by Module.cpp (it drains the list); files only append to it.
#pragma once
#include <pybind11/pybind11.h>

namespace neuron {

using BindingsFn = void (*)(pybind11::module_ &);

struct BindingsRegistrar {
    explicit BindingsRegistrar(BindingsFn fn);
};

}  // namespace neuron
