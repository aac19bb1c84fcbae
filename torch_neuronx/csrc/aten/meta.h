// aten/meta.h - runs PyTorch's C++ structured meta function of an op on the
// real (neuron) arguments and records the outputs it declares, instead of
// calling the op on meta tensors.
//
// Why: calling an op on meta tensors dispatches to the Meta key, where
// PyTorch registers Python meta kernels (torch._refs / _meta_registrations)
// for many ops; each call then costs 20-100 us of Python. The C++ meta
// function (at::meta::structured_<op>::meta, the one PyTorch's CPU kernel
// runs) reads only sizes, strides and dtypes, raises the CPU kernel's exact
// errors, and costs well under a microsecond.
//
// Usage:
//   MetaShape<at::meta::structured_sum_dim_IntList> m;
//   m.meta(self, dim, keepdim, dtype);           // may throw PyTorch's error
//   Tensor out = m.output(0);
// As in PyTorch's generated structured kernels, each output is allocated
// (contiguous, on the inputs' device) when the meta function declares it,
// because some meta functions read it back (bmm checks its shape). With
// Alloc = false only sizes and dtype are recorded (for metas that do not
// read their output, e.g. cat whose out= form allows another dtype).
// For out= forms pass the out tensors first (MetaShape<...> m(&out)): the
// meta function sees them through maybe_get_output (some infer the result
// dtype from it), a dtype mismatch raises as PyTorch's out= kernels do, and
// they are resized (at::native::resize_output) to the declared shape.
#pragma once

#include <ATen/TensorMeta.h>
#include <ATen/core/Tensor.h>
#include <ATen/native/Resize.h>
#include <ATen/ops/empty.h>
#include <c10/util/SmallVector.h>

#include <array>

namespace neuron {

template <typename Structured, bool Alloc = true, int N = 2>
struct MetaShape final : Structured {
    explicit MetaShape(const at::Tensor *out0 = nullptr, const at::Tensor *out1 = nullptr)
        : given_{out0, out1} {}

    void set_output_strided(int64_t i, at::IntArrayRef sizes, at::IntArrayRef /*strides*/,
                            at::TensorOptions options) override {
        record(i, sizes, options);
    }
    void set_output_raw_strided(int64_t i, at::IntArrayRef sizes, at::IntArrayRef /*strides*/,
                                at::TensorOptions options) override {
        record(i, sizes, options);
    }
    const at::Tensor &maybe_get_output(int64_t i) override {
        static const at::Tensor undefined;
        if (i < 0 || i >= N)
            return undefined;
        return given_[i] != nullptr ? *given_[i] : outputs_[i];
    }

    at::IntArrayRef sizes(int i) const { return sizes_[i]; }
    at::ScalarType dtype(int i) const { return options_[i].dtype().toScalarType(); }
    const at::TensorOptions &options(int i) const { return options_[i]; }
    // The allocated output i (Alloc, no out tensor given).
    const at::Tensor &output(int i) const { return outputs_[i]; }

private:
    void record(int64_t i, at::IntArrayRef sizes, const at::TensorOptions &options) {
        TORCH_INTERNAL_ASSERT(i >= 0 && i < N, "MetaShape: output index out of range");
        sizes_[i].assign(sizes.begin(), sizes.end());
        options_[i] = options;
        if (const at::Tensor *out = given_[i]) {
            // What the generated out= wrappers check (resize_out).
            TORCH_CHECK(options.dtype() == out->dtype(), "Expected out tensor to have dtype ",
                        options.dtype(), ", but got ", out->dtype(), " instead");
            TORCH_CHECK(options.device() == out->device(), "Expected out tensor to have device ",
                        options.device(), ", but got ", out->device(), " instead");
            at::native::resize_output(*out, sizes);
        } else if (Alloc) {
            outputs_[i] = at::empty(sizes, options);
        }
    }

    std::array<const at::Tensor *, N> given_;
    std::array<c10::SmallVector<int64_t, 6>, N> sizes_;
    std::array<at::TensorOptions, N> options_;
    std::array<at::Tensor, N> outputs_;
};

}  // namespace neuron
