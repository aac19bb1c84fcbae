// aten/shallow_copy.cpp - tells PyTorch that a dense neuron tensor may take a
// dense CPU tensor's place (and back) in a shallow copy.
//
// nn.Module._apply (model.to / .cpu / .neuron), Tensor.data assignment and
// Variable.set_data ask aten::_has_compatible_shallow_copy_type whether the
// existing Parameter object can simply adopt the moved tensor's storage and
// metadata. TensorImpl's built-in answer only knows the in-tree dense
// backends (CPU, CUDA, MPS, ...) and leaves PrivateUse1 to the backend. If we
// answered "no", Module._apply would silently create NEW Parameter objects:
// tied weights (GPT-2 wte / lm_head) come apart and optimizers built before
// the move keep training stale CPU tensors. CUDA answers "yes"; so do we.
#include <ATen/core/Tensor.h>
#include <torch/library.h>

#include "runtime/device.h"

namespace neuron {
namespace {

// Dense strided tensors on CPU or neuron hold the same TensorImpl class and
// the same kind of metadata (sizes, strides, one storage), so one can be
// shallow-copied into the other. Sparse, quantized, nested or
// functional-wrapper tensors keep PyTorch's stricter rule (same key set).
bool is_dense_host_or_neuron(const at::Tensor &t) {
    if (t.layout() != c10::kStrided || t.is_quantized() || t.is_nested()) return false;
    const c10::DispatchKeySet ks = t.key_set();
    if (!ks.has(c10::DispatchKey::Dense)) return false;
    const c10::DeviceType dev = t.device().type();
    return dev == c10::DeviceType::CPU || dev == kNeuron;
}

bool has_compatible_shallow_copy_type(const at::Tensor &self, const at::Tensor &from) {
    if (self.key_set() == from.key_set()) return true;
    if (is_dense_host_or_neuron(self) && is_dense_host_or_neuron(from)) return true;
    // Anything else: PyTorch's own rule (it covers e.g. CPU <-> sparse cases).
    return self.unsafeGetTensorImpl()->has_compatible_shallow_copy_type(from.key_set());
}

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
    m.impl("_has_compatible_shallow_copy_type", TORCH_FN(has_compatible_shallow_copy_type));
}

}  // namespace
}  // namespace neuron
