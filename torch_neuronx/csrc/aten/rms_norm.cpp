// aten/rms_norm.cpp - RMS norm on neuron: aten::_fused_rms_norm and
// _fused_rms_norm_backward, run by libtrn's rms_norm kernels
// (trn/rms_norm.h).
//
// aten::rms_norm (CompositeImplicit) calls _fused_rms_norm for a device that
// registers it (as CUDA does) and otherwise decomposes into pow / mean /
// rsqrt / mul; registering it here makes F.rms_norm and nn.RMSNorm one fused
// kernel forward and one backward (the autograd formula of _fused_rms_norm
// is _fused_rms_norm_backward). Outputs follow PyTorch's reference
// (torch._decomp's _fused_rms_norm): y in the input's dtype, rstd in the
// computation dtype (float32, or float64 for float64 input) with the input's
// leading dims and 1 per normalized dim.
#include <ATen/Functions.h>
#include <ATen/Operators.h>
#include <torch/library.h>

#include <limits>
#include <sstream>
#include <tuple>

#include "fallback/cpu_fallback.h"
#include "runtime/device.h"
#include "observe/op_tracking.h"
#include "trn/rms_norm.h"

namespace neuron {
namespace {

using at::Tensor;

// M rows of N = prod(normalized_shape) elements, with ATen's shape checks.
std::pair<int64_t, int64_t> rms_rows(const Tensor &input, at::IntArrayRef shape,
                                     const Tensor &weight) {
    const int64_t nd = static_cast<int64_t>(shape.size());
    TORCH_CHECK(nd >= 1, "Expected normalized_shape to be at least 1-dimensional, i.e., ",
                "containing at least one element, but got normalized_shape = ", shape);
    TORCH_CHECK(!weight.defined() || weight.sizes().equals(shape),
                "Expected weight to be of same shape as normalized_shape, but got ",
                "weight of shape ", weight.sizes(), " and normalized_shape = ", shape);
    TORCH_CHECK(!weight.defined() || weight.device() == input.device(),
                "Expected weight and input on the same device, got ", weight.device(), " and ",
                input.device());
    const auto in_shape = input.sizes();
    const int64_t in_nd = input.dim();
    if (in_nd < nd || !in_shape.slice(in_nd - nd).equals(shape)) {
        std::stringstream ss;
        ss << "Given normalized_shape=" << shape << ", expected input with shape [*";
        for (auto size : shape) ss << ", " << size;
        ss << "], but got input of size" << in_shape;
        TORCH_CHECK(false, ss.str());
    }
    const auto axis = in_shape.cbegin() + (in_nd - nd);
    return {c10::multiply_integers(in_shape.cbegin(), axis),
            c10::multiply_integers(axis, in_shape.cend())};
}

at::ScalarType stat_type(const Tensor &input) {
    return input.scalar_type() == at::kDouble ? at::kDouble : at::kFloat;
}

bool rms_dtypes(const Tensor &input, const Tensor &weight, trn_rms_norm_desc &d) {
    auto x = native_dtype(input.scalar_type());
    auto w = native_dtype(weight.defined() ? weight.scalar_type() : input.scalar_type());
    auto s = native_dtype(stat_type(input));
    if (!x || !w || !s || !trn_rms_norm_supports(*x, *w, *s)) return false;
    d.dtype = *x;
    d.param_dtype = *w;
    d.stat_dtype = *s;
    return true;
}

std::vector<int64_t> rstd_shape(const Tensor &input, size_t nd) {
    std::vector<int64_t> s(input.sizes().begin(), input.sizes().end());
    for (size_t i = s.size() - nd; i < s.size(); ++i) s[i] = 1;
    return s;
}

std::tuple<Tensor, Tensor> fused_rms_norm(const Tensor &input, at::IntArrayRef shape,
                                          const std::optional<Tensor> &weight_opt,
                                          std::optional<double> eps_opt) {
    const Tensor weight = weight_opt.value_or(Tensor());
    auto [M, N] = rms_rows(input, shape, weight);
    trn_rms_norm_desc d{};
    if (!rms_dtypes(input, weight, d) || (M > 0 && N == 0))
        return fallback<at::_ops::_fused_rms_norm>(input, shape, weight_opt, eps_opt);
    // No eps: the machine epsilon of the computation dtype, as ATen.
    d.eps = eps_opt.value_or(input.scalar_type() == at::kDouble
                                 ? std::numeric_limits<double>::epsilon()
                                 : static_cast<double>(std::numeric_limits<float>::epsilon()));
    const Tensor x = input.contiguous();
    const Tensor w = weight.defined() ? weight.contiguous() : weight;
    Tensor y =
        at::empty(input.sizes(), input.options().memory_format(at::MemoryFormat::Contiguous));
    Tensor rstd =
        at::empty(rstd_shape(input, shape.size()), input.options().dtype(stat_type(input)));
    d.rows = M;
    d.cols = N;
    d.x = x.data_ptr();
    d.weight = w.defined() ? w.data_ptr() : nullptr;
    d.y = y.data_ptr();
    d.rstd = rstd.data_ptr();
    TRN_CHECK(trn_rms_norm_launch(current_trn_stream(input.device().index()), &d));
    tracking::record_executed("aten::_fused_rms_norm");
    return {y, rstd};
}

std::tuple<Tensor, Tensor> fused_rms_norm_backward(const Tensor &grad_out, const Tensor &input,
                                                   at::IntArrayRef shape, const Tensor &rstd,
                                                   const std::optional<Tensor> &weight_opt,
                                                   std::array<bool, 2> mask) {
    const Tensor weight = weight_opt.value_or(Tensor());
    auto [M, N] = rms_rows(input, shape, weight);
    trn_rms_norm_desc dts{};
    if (!rms_dtypes(input, weight, dts) || grad_out.scalar_type() != input.scalar_type() ||
        !grad_out.sizes().equals(input.sizes()) || rstd.scalar_type() != stat_type(input) ||
        rstd.numel() != M)
        return fallback<at::_ops::_fused_rms_norm_backward>(grad_out, input, shape, rstd,
                                                            weight_opt, mask);
    const Tensor x = input.contiguous(), dy = grad_out.contiguous(), rc = rstd.contiguous();
    const Tensor w = weight.defined() ? weight.contiguous() : weight;
    Tensor dx, dw;
    if (mask[0])
        dx = at::empty(input.sizes(), input.options().memory_format(at::MemoryFormat::Contiguous));
    if (mask[1] && weight.defined()) dw = at::empty(weight.sizes(), weight.options());
    if ((dx.defined() && M > 0) || (dw.defined() && N > 0)) {
        trn_rms_norm_backward_desc d{};
        d.dtype = dts.dtype;
        d.param_dtype = dts.param_dtype;
        d.stat_dtype = dts.stat_dtype;
        d.rows = N > 0 ? M : 0;
        d.cols = N;
        const bool any = M > 0 && N > 0;
        d.dy = any ? dy.data_ptr() : nullptr;
        d.x = any ? x.data_ptr() : nullptr;
        d.rstd = any ? rc.data_ptr() : nullptr;
        d.weight = w.defined() ? w.data_ptr() : nullptr;
        d.dx = dx.defined() && any ? dx.data_ptr() : nullptr;
        d.dweight = dw.defined() && N ? dw.data_ptr() : nullptr;
        TRN_CHECK(trn_rms_norm_backward_launch(current_trn_stream(input.device().index()), &d));
    }
    tracking::record_executed("aten::_fused_rms_norm_backward");
    return {dx, dw};
}

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
    m.impl("_fused_rms_norm", TORCH_FN(fused_rms_norm));
    m.impl("_fused_rms_norm_backward", TORCH_FN(fused_rms_norm_backward));
}

}  // namespace
}  // namespace neuron
