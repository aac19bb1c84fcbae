// observe/host_view.cpp - CPU tensors that read neuron tensors' values in
// place, for observers that re-run device ops on the CPU (the shadow numerics
// of torch_neuronx/evaluate/shadow.py): device memory is host memory, so after
// a device synchronize a CPU tensor over the same bytes holds the values a copy
// would, without the copy.
//
// Owns: torch_neuronx._C._host_views, and _undeclared_write (the CPU
// fallback's list of arguments some aten kernels write although their schema
// does not say so, fallback/writes.h, for callers that decide from the schema
// what an op writes). Converts and checks only. Callers must not write through
// a view (it is the device tensor's memory) and must not read one after
// queueing device work that writes the tensor; each view keeps its device
// storage alive.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>
#include <torch/csrc/utils/pybind.h>

#include <string>
#include <vector>

#include <ATen/ATen.h>

#include "fallback/writes.h"
#include "runtime/bindings.h"
#include "runtime/trn_check.h"
#include "trn/trn.h"

namespace py = pybind11;

namespace neuron::host_view {
namespace {

// A view can alias a dense strided tensor; conj/neg bits, other layouts and
// protected device memory (TORCH_NEURONX_DEBUG_PROTECT_MEMORY: the host
// cannot read it) get a copy, which holds the same values.
bool aliasable(const at::Tensor &t) {
    return t.layout() == at::kStrided && !t.is_conj() && !t.is_neg() && t.numel() > 0 &&
           !trn_mem_protect_enabled();
}

at::Tensor view_of(const at::Tensor &t) {
    if (!aliasable(t)) return t.to(at::kCPU, /*non_blocking=*/false, /*copy=*/true);
    c10::Storage keep = t.storage();
    return at::from_blob(
        t.data_ptr(), t.sizes(), t.strides(), [keep](void *) {}, t.options().device(at::kCPU));
}

std::vector<at::Tensor> host_views(const std::vector<at::Tensor> &ts) {
    // One synchronize per device (it also ends an open fused eager group, so
    // the bytes hold every queued write).
    std::vector<c10::DeviceIndex> synced;
    for (const auto &t : ts) {
        TORCH_CHECK(t.device().type() == c10::DeviceType::PrivateUse1,
                    "_host_views: expected neuron tensors, got one on ", t.device());
        auto idx = t.device().index();
        bool seen = false;
        for (auto d : synced) seen = seen || d == idx;
        if (!seen) {
            TRN_CHECK(trn_device_synchronize(idx));
            synced.push_back(idx);
        }
    }
    std::vector<at::Tensor> out;
    out.reserve(ts.size());
    for (const auto &t : ts) out.push_back(view_of(t));
    return out;
}

BindingsRegistrar reg([](py::module_ &m) {
    m.def("_host_views", [](const std::vector<at::Tensor> &ts) {
        return guarded([&] { return host_views(ts); });
    });
    m.def("_undeclared_write",
          [](const std::string &name, const std::string &overload, const std::string &arg) {
              return is_undeclared_write(c10::OperatorName(name, overload), arg);
          });
});

}  // namespace
}  // namespace neuron::host_view
