// aten/addr_out.cpp - addr.out on neuron: PyTorch's composite form
// (math_addr_out: addr into a temporary, then copy_ into out) with the
// TensorIterator memory checks of CPU's addr_out kernel in front. Without
// them an out that partially overlaps `self` was silently accepted (copy_
// checks only out itself), where CPU raises.
#include <ATen/ops/addr_native.h>
#include <torch/library.h>

#include "aten/meta.h"

namespace neuron {
namespace {

at::Tensor &addr_out(const at::Tensor &self, const at::Tensor &vec1, const at::Tensor &vec2,
                     const at::Scalar &beta, const at::Scalar &alpha, at::Tensor &out) {
    check_out_overlap(out, self, vec1, vec2);
    return at::native::math_addr_out(self, vec1, vec2, beta, alpha, out);
}

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) { m.impl("addr.out", TORCH_FN(addr_out)); }

}  // namespace
}  // namespace neuron
