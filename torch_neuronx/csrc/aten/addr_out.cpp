// aten/addr_out.cpp - addr and addr.out on neuron: PyTorch's composite form
// (math_addr: self + alpha * outer(vec1, vec2); math_addr_out: addr into a
// temporary, then copy_ into out) with two corrections that make it compute
// what CPU's addr kernel computes:
// - the vectors are promoted to the result dtype first, as CPU's
//   TensorIterator promotes every operand to the common dtype: otherwise
//   outer(vec1, vec2) of float16 vectors is rounded to float16 before it is
//   added to a complex64 / float32 self (errors of 1e-2 where CPU's are 1e-7);
// - the TensorIterator memory checks of CPU's addr_out kernel in front of
//   .out. Without them an out that partially overlaps `self` was silently
//   accepted (copy_ checks only out itself), where CPU raises.
#include <ATen/ATen.h>
#include <ATen/native/TypeProperties.h>
#include <ATen/ops/addr_native.h>
#include <torch/library.h>

#include <vector>

#include "aten/meta.h"

namespace neuron {
namespace {

at::Tensor promoted(const at::Tensor &v, at::ScalarType dtype) {
    return v.scalar_type() == dtype ? v : v.to(dtype);
}

at::Tensor addr(const at::Tensor &self, const at::Tensor &vec1, const at::Tensor &vec2,
                const at::Scalar &beta, const at::Scalar &alpha) {
    const std::vector<at::Tensor> operands{self, vec1, vec2};
    const at::ScalarType dtype = at::native::result_type(at::ITensorListRef(operands));
    return at::native::math_addr(self, promoted(vec1, dtype), promoted(vec2, dtype), beta, alpha);
}

at::Tensor &addr_out(const at::Tensor &self, const at::Tensor &vec1, const at::Tensor &vec2,
                     const at::Scalar &beta, const at::Scalar &alpha, at::Tensor &out) {
    check_out_overlap(out, self, vec1, vec2);
    return at::native::math_addr_out(self, vec1, vec2, beta, alpha, out);
}

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
    m.impl("addr", TORCH_FN(addr));
    m.impl("addr.out", TORCH_FN(addr_out));
}

}  // namespace
}  // namespace neuron
