// aten/pool_run.h - the launch half the 2-d (aten/pool.cpp) and 3-d /
// adaptive (aten/pool3d.cpp) pooling adapters share once their geometry is
// checked: outputs of the pooled size, contiguous operands, the descriptor
// (trn_pool2d_* and trn_pool3d_* descriptors have the same fields), the
// launch, and results in the input's memory format.
#pragma once

#include <ATen/ATen.h>

#include <optional>
#include <tuple>
#include <vector>

#include "observe/op_tracking.h"
#include "runtime/device.h"
#include "runtime/trn_check.h"
#include "trn/pool.h"

namespace neuron {

// Whether libtrn's pooling kernels take t's dtype (else: the CPU fallback).
inline bool pool_native_ok(const at::Tensor &t) {
    auto dt = native_dtype(t.scalar_type());
    return dt && trn_pool_supports(*dt);
}

// Results in the input's memory format (channels_last stays channels_last).
inline at::Tensor pool_like_input(const at::Tensor &t, const at::Tensor &input) {
    const auto fmt = input.suggest_memory_format();
    return fmt == at::MemoryFormat::Contiguous ? t : t.contiguous(fmt);
}

// Forward: y (and indices for max) of sizes osz, by launch(stream, &desc)
// with geometry g; `name` is the op recorded as executed.
template <typename Desc, typename Geometry>
std::tuple<at::Tensor, at::Tensor>
pool_run_forward(trn_status (*launch)(trn_stream *, const Desc *), const at::Tensor &input,
                 const Geometry &g, const std::vector<int64_t> &osz, trn_pool_mode mode,
                 const char *name) {
    const at::Tensor x = input.contiguous();
    at::Tensor y = at::empty(osz, input.options());
    at::Tensor idx =
        mode == TRN_POOL_MAX ? at::empty(osz, input.options().dtype(at::kLong)) : at::Tensor();
    Desc d{};
    d.dtype = *native_dtype(input.scalar_type());
    d.mode = mode;
    d.g = g;
    d.x = x.data_ptr();
    d.y = y.data_ptr();
    d.indices = mode == TRN_POOL_MAX ? idx.data_ptr<int64_t>() : nullptr;
    TRN_CHECK(launch(current_trn_stream(input.device().index()), &d));
    tracking::record_executed(name);
    return {pool_like_input(y, input), mode == TRN_POOL_MAX ? pool_like_input(idx, input) : idx};
}

// Backward: dx of the input's size from grad_out (and indices for max),
// both of sizes osz (checked; the messages start with `name`).
template <typename Desc, typename Geometry>
at::Tensor
pool_run_backward(trn_status (*launch)(trn_stream *, const Desc *), const at::Tensor &grad_out,
                  const at::Tensor &input, const at::Tensor &indices, const Geometry &g,
                  const std::vector<int64_t> &osz, trn_pool_mode mode, const char *name) {
    TORCH_CHECK(grad_out.sizes().equals(osz), name, ": expected grad_output of size ",
                at::IntArrayRef(osz), ", got ", grad_out.sizes());
    TORCH_CHECK(mode != TRN_POOL_MAX || indices.sizes().equals(osz), name,
                ": expected indices of size ", at::IntArrayRef(osz), ", got ", indices.sizes());
    const at::Tensor dy = grad_out.contiguous();
    const at::Tensor ix = mode == TRN_POOL_MAX ? indices.contiguous() : at::Tensor();
    at::Tensor dx =
        at::empty(input.sizes(), input.options().memory_format(at::MemoryFormat::Contiguous));
    Desc d{};
    d.dtype = *native_dtype(input.scalar_type());
    d.mode = mode;
    d.g = g;
    d.dy = dy.data_ptr();
    d.indices = mode == TRN_POOL_MAX ? ix.data_ptr<int64_t>() : nullptr;
    d.dx = dx.data_ptr();
    TRN_CHECK(launch(current_trn_stream(input.device().index()), &d));
    tracking::record_executed(name);
    return pool_like_input(dx, input);
}

// avg pooling's geometry: ATen's divisor check, then setup(dilation) (the
// 2-d or 3-d checks and geometry; avg pooling has dilation 1), then the
// average's options.
template <typename Setup>
auto pool_avg_setup(Setup setup, bool count_include_pad, std::optional<int64_t> divisor) {
    TORCH_CHECK(!divisor.has_value() || *divisor != 0, "divisor must be not zero");
    const int64_t one[1] = {1};
    auto p = setup(at::IntArrayRef(one));
    p.g.count_include_pad = count_include_pad;
    p.g.divisor = divisor.value_or(0);
    return p;
}

}  // namespace neuron
