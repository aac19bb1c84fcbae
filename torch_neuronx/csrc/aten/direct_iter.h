// aten/direct_iter.h - a TensorIterator whose new outputs come from the
// neuron allocator directly.
//
// at::TensorIterator allocates an output it was not given through
// at::empty / at::empty_strided: a dispatcher round trip (BackendSelect,
// then our factory kernel) on every functional elementwise op, a few
// percent of a decode-sized op. DirectIter builds with the same
// TensorIteratorBase builders (so the same shapes, strides, dtypes and
// names) and allocates those outputs itself. Only for outputs the caller
// leaves undefined: out= and in-place calls keep at::TensorIterator, whose
// resize logic they need.
#pragma once

#include <ATen/TensorIterator.h>

#include <array>

namespace neuron {

// empty_view.cpp: the factory kernels' allocation (same checks, same device
// guard), called without the dispatcher. Empty strides: contiguous in
// options' memory format.
at::Tensor empty_for_iter(at::IntArrayRef sizes, at::IntArrayRef strides,
                          const at::TensorOptions &options);

struct DirectIter final : at::TensorIteratorBase {
    std::array<at::Tensor, 2> outs;

    const at::Tensor &maybe_get_output(int64_t i) override { return outs.at(i); }

    void set_output_raw_strided(int64_t i, at::IntArrayRef sizes, at::IntArrayRef strides,
                                at::TensorOptions options) override {
        // Every output is undefined (see above): allocate, then let the base
        // borrow it as the operand.
        TORCH_INTERNAL_ASSERT(!outs.at(i).defined());
        outs[i] = empty_for_iter(sizes, strides, options);
        at::TensorIteratorBase::set_output_raw_strided(i, sizes, strides, options);
    }
};

}  // namespace neuron
