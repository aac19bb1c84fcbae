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

#include <ATen/MemoryOverlap.h>
#include <ATen/TensorMeta.h>
#include <ATen/core/Tensor.h>
#include <ATen/native/Resize.h>
#include <ATen/ops/empty.h>
#include <c10/util/SmallVector.h>

#include <array>
#include <optional>

namespace neuron {

// ---------------------------------------------------------------------------
// out= checks. Every native out= path checks its out tensor before a kernel
// writes into it, as PyTorch's CPU kernels do:
//   check_out(out, dtype, device)   the generated out= wrappers' checks
//                                   (resize_out), with their wording;
//   check_out_device(out, device)   the device alone (out= forms whose dtype
//                                   rule is the op's own);
//   check_out_overlap(out, in...)   TensorIterator's memory checks
//                                   (compute_mem_overlaps): no internal
//                                   overlap in out, no partial overlap with
//                                   any input; out may *be* an input;
//   out_aliases(out, in...)         whether out may share memory with an
//                                   input (the full aliasing allowed above):
//                                   a kernel that cannot run in place then
//                                   computes into a temporary, copied back.
// Undefined inputs are skipped. The overlap tests are ATen's own
// (ATen/MemoryOverlap.h).
// ---------------------------------------------------------------------------
inline void check_out_device(const at::Tensor &out, at::Device device) {
    TORCH_CHECK(out.device() == device, "Expected out tensor to have device ", device, ", but got ",
                out.device(), " instead");
}

inline void check_out(const at::Tensor &out, at::ScalarType dtype, at::Device device) {
    TORCH_CHECK(out.scalar_type() == dtype, "Expected out tensor to have dtype ",
                c10::scalarTypeToTypeMeta(dtype), ", but got ", out.dtype(), " instead");
    check_out_device(out, device);
}

namespace detail {
inline void no_partial_overlap(const at::Tensor &out, const at::Tensor &in) {
    if (in.defined() && !in.is_same(out)) at::assert_no_partial_overlap(out, in);
}
inline void no_partial_overlap(const at::Tensor &out, const std::optional<at::Tensor> &in) {
    if (in) no_partial_overlap(out, *in);
}
inline bool may_share(const at::Tensor &out, const at::Tensor &in) {
    return in.defined() && at::get_overlap_status(out, in) != at::MemOverlapStatus::No;
}
inline bool may_share(const at::Tensor &out, const std::optional<at::Tensor> &in) {
    return in && may_share(out, *in);
}
}  // namespace detail

template <typename... Inputs>
void check_out_overlap(const at::Tensor &out, const Inputs &...inputs) {
    at::assert_no_internal_overlap(out);
    (detail::no_partial_overlap(out, inputs), ...);
}

template <typename... Inputs> bool out_aliases(const at::Tensor &out, const Inputs &...inputs) {
    return (detail::may_share(out, inputs) || ...);
}

template <typename Structured, bool Alloc = true, int N = 2> struct MetaShape final : Structured {
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
        if (i < 0 || i >= N) return undefined;
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
