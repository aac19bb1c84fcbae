// aten/group_norm.cpp - group norm on neuron: native_group_norm and
// native_group_norm_backward, run by libtrn's group_norm kernels
// (trn/group_norm.h). F.group_norm / nn.GroupNorm reach these through
// aten::group_norm (CompositeImplicit), as on CPU and CUDA.
//
// Shapes, dtypes and errors follow PyTorch CPU's checks; operands are made
// contiguous (a native copy) before their pointers reach libtrn, and outputs
// take the input's memory format back. Dtype combinations the kernel does not
// support go to the CPU fallback.
#include <ATen/Functions.h>
#include <ATen/Operators.h>
#include <ATen/native/CPUFallback.h>
#include <torch/library.h>

#include <tuple>

#include "fallback/cpu_fallback.h"
#include "runtime/device.h"
#include "observe/op_tracking.h"
#include "trn/group_norm.h"

namespace neuron {
namespace {

using at::Tensor;
using Result = std::tuple<Tensor, Tensor, Tensor>;

template <typename Op, typename... Args> decltype(auto) fallback_sym(Args &&...args) {
    return at::native::call_fallback_fn_symint<&cpu_fallback, Op>::call(
        std::forward<Args>(args)...);
}

struct GnDtypes {
    trn_dtype x, param, stat;
    at::ScalarType stat_type;
};

// x's dtype for everything, or float32 parameters and statistics with a
// 16-bit x (CPU's mixed type); nullopt sends the call to the CPU.
std::optional<GnDtypes> gn_dtypes(const Tensor &input, const Tensor &weight, const Tensor &bias) {
    auto d = native_dtype(input.scalar_type());
    if (!d) return std::nullopt;
    if (weight.defined() && bias.defined() && weight.scalar_type() != bias.scalar_type())
        return std::nullopt;
    const at::ScalarType pt = weight.defined() ? weight.scalar_type()
                              : bias.defined() ? bias.scalar_type()
                                               : input.scalar_type();
    auto p = native_dtype(pt);
    if (!p || !trn_group_norm_supports(*d, *p, *p)) return std::nullopt;
    return GnDtypes{*d, *p, *p, pt};
}

void check_gn(const Tensor &input, const Tensor &weight, const Tensor &bias, int64_t N, int64_t C,
              int64_t HxW, int64_t group) {
    TORCH_CHECK(group > 0, "Expected num groups to be greater than 0, got ", group);
    TORCH_CHECK(C % group == 0, "Expected number of channels in input to be divisible by ",
                "num_groups, but got input of shape ", input.sizes(), " and num_groups=", group);
    TORCH_CHECK(input.numel() == N * C * HxW, "Expected input to have ", N * C * HxW,
                " elements, got ", input.numel());
    TORCH_CHECK(!weight.defined() || weight.numel() == C, "Expected weight to be a vector of ",
                "size equal to the number of channels in input, but got weight of shape ",
                weight.sizes(), " and input of shape ", input.sizes());
    TORCH_CHECK(!bias.defined() || bias.numel() == C, "Expected bias to be a vector of size ",
                "equal to the number of channels in input, but got bias of shape ", bias.sizes(),
                " and input of shape ", input.sizes());
}

Tensor in_format_of(const Tensor &t, const Tensor &like) {
    const auto fmt = like.suggest_memory_format();
    return fmt != at::MemoryFormat::Contiguous && !like.is_contiguous() ? t.contiguous(fmt) : t;
}

Result native_group_norm(const Tensor &input, const std::optional<Tensor> &weight_opt,
                         const std::optional<Tensor> &bias_opt, c10::SymInt sN, c10::SymInt sC,
                         c10::SymInt sHxW, int64_t group, double eps) {
    const Tensor weight = weight_opt.value_or(Tensor());
    const Tensor bias = bias_opt.value_or(Tensor());
    const int64_t N = sN.guard_int(__FILE__, __LINE__), C = sC.guard_int(__FILE__, __LINE__);
    const int64_t HxW = sHxW.guard_int(__FILE__, __LINE__);
    check_gn(input, weight, bias, N, C, HxW, group);
    auto dts = gn_dtypes(input, weight, bias);
    if (!dts)
        return fallback_sym<at::_ops::native_group_norm>(input, weight_opt, bias_opt, sN, sC, sHxW,
                                                         group, eps);
    const Tensor x = input.contiguous();
    const Tensor w = weight.defined() ? weight.contiguous() : weight;
    const Tensor b = bias.defined() ? bias.contiguous() : bias;
    Tensor y =
        at::empty(input.sizes(), input.options().memory_format(at::MemoryFormat::Contiguous));
    Tensor mean = at::empty({N, group}, input.options().dtype(dts->stat_type));
    Tensor rstd = at::empty({N, group}, input.options().dtype(dts->stat_type));
    trn_group_norm_desc d{};
    d.dtype = dts->x;
    d.param_dtype = dts->param;
    d.stat_dtype = dts->stat;
    d.n = N;
    d.channels = C;
    d.spatial = HxW;
    d.groups = group;
    d.x = x.numel() ? x.data_ptr() : nullptr;
    d.weight = w.defined() ? w.data_ptr() : nullptr;
    d.bias = b.defined() ? b.data_ptr() : nullptr;
    d.y = y.numel() ? y.data_ptr() : nullptr;
    d.mean = mean.numel() ? mean.data_ptr() : nullptr;
    d.rstd = rstd.numel() ? rstd.data_ptr() : nullptr;
    d.eps = eps;
    TRN_CHECK(trn_group_norm_launch(current_trn_stream(input.device().index()), &d));
    tracking::record_executed("aten::native_group_norm");
    return {in_format_of(y, input), mean, rstd};
}

Result native_group_norm_backward(const Tensor &grad_out, const Tensor &input, const Tensor &mean,
                                  const Tensor &rstd, const std::optional<Tensor> &weight_opt,
                                  c10::SymInt sN, c10::SymInt sC, c10::SymInt sHxW, int64_t group,
                                  std::array<bool, 3> mask) {
    const Tensor weight = weight_opt.value_or(Tensor());
    const int64_t N = sN.guard_int(__FILE__, __LINE__), C = sC.guard_int(__FILE__, __LINE__);
    const int64_t HxW = sHxW.guard_int(__FILE__, __LINE__);
    check_gn(input, weight, Tensor(), N, C, HxW, group);
    TORCH_CHECK(grad_out.numel() == N * C * HxW, "Expect dY to have ", N * C * HxW, " elements");
    TORCH_CHECK(mean.numel() == N * group && rstd.numel() == N * group,
                "Expect mean and rstd to have ", N * group, " elements");
    auto dts = gn_dtypes(input, weight, Tensor());
    if (!dts || grad_out.scalar_type() != input.scalar_type() ||
        mean.scalar_type() != dts->stat_type || rstd.scalar_type() != dts->stat_type)
        return fallback_sym<at::_ops::native_group_norm_backward>(
            grad_out, input, mean, rstd, weight_opt, sN, sC, sHxW, group, mask);
    const Tensor x = input.contiguous(), dy = grad_out.contiguous();
    const Tensor w = weight.defined() ? weight.contiguous() : weight;
    const Tensor mc = mean.contiguous(), rc = rstd.contiguous();
    const auto popts = input.options().dtype(dts->stat_type);
    Tensor dx, dw, db;
    if (mask[0])
        dx = at::empty(input.sizes(), input.options().memory_format(at::MemoryFormat::Contiguous));
    if (mask[1]) dw = at::empty({C}, popts);
    if (mask[2]) db = at::empty({C}, popts);
    trn_group_norm_backward_desc d{};
    d.dtype = dts->x;
    d.param_dtype = dts->param;
    d.stat_dtype = dts->stat;
    d.n = N;
    d.channels = C;
    d.spatial = HxW;
    d.groups = group;
    d.dy = dy.numel() ? dy.data_ptr() : nullptr;
    d.x = x.numel() ? x.data_ptr() : nullptr;
    d.mean = mc.numel() ? mc.data_ptr() : nullptr;
    d.rstd = rc.numel() ? rc.data_ptr() : nullptr;
    d.weight = w.defined() ? w.data_ptr() : nullptr;
    d.dx = dx.defined() && dx.numel() ? dx.data_ptr() : nullptr;
    d.dweight = dw.defined() && C ? dw.data_ptr() : nullptr;
    d.dbias = db.defined() && C ? db.data_ptr() : nullptr;
    TRN_CHECK(trn_group_norm_backward_launch(current_trn_stream(input.device().index()), &d));
    tracking::record_executed("aten::native_group_norm_backward");
    if (dx.defined()) dx = in_format_of(dx, input);
    return {dx, dw, db};
}

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
    m.impl("native_group_norm", TORCH_FN(native_group_norm));
    m.impl("native_group_norm_backward", TORCH_FN(native_group_norm_backward));
}

}  // namespace
}  // namespace neuron
