// aten/loss.cpp - the elementwise losses and their helpers on neuron: sgn
// (l1_loss's backward), smooth_l1_loss, huber_loss, binary_cross_entropy,
// log_sigmoid (binary_cross_entropy_with_logits) and xlogy (kl_div), each
// with its backward.
//
// Every one is a short composition of ops that are already native
// (elementwise kernels of trn/elementwise.h, reductions of trn/reduce.h), in
// the formulas PyTorch's CPU kernels use, so results agree with CPU to
// rounding. Complex inputs (sgn only) go to the CPU fallback.
#include <ATen/Operators.h>
#include <ATen/native/CPUFallback.h>
#include <ATen/native/Resize.h>
#include <c10/core/DefaultDtype.h>
#include <c10/core/ScalarTypeToTypeMeta.h>
#include <torch/library.h>

#include "aten/meta.h"
#include "fallback/cpu_fallback.h"
#include "runtime/device.h"
#include "observe/op_tracking.h"

namespace neuron {
namespace {

using at::Scalar;
using at::Tensor;

Tensor reduce(const Tensor &loss, int64_t reduction) {
    if (reduction == at::Reduction::Mean) return at::mean(loss);
    if (reduction == at::Reduction::Sum) return at::sum(loss);
    return loss;
}

// 16-bit inputs compute in float32 and round once, as CPU's kernels do.
bool low(const Tensor &t) {
    return t.scalar_type() == at::kHalf || t.scalar_type() == at::kBFloat16;
}
Tensor up(const Tensor &t) { return low(t) ? t.to(at::kFloat) : t; }
Tensor down(const Tensor &r, const Tensor &like) {
    return low(like) ? r.to(like.scalar_type()) : r;
}

// Operands ATen's CPU loss kernels take: floating, of one dtype. Others
// (integers, complex, mixed) go to the CPU path, which raises ATen's own
// dtype error.
bool same_floating(const Tensor &a, const Tensor &b) {
    return at::isFloatingType(a.scalar_type()) && a.scalar_type() == b.scalar_type();
}

// The factor a reduced loss's gradient carries per element.
double grad_norm(const Tensor &self, int64_t reduction) {
    return reduction == at::Reduction::Mean ? 1.0 / static_cast<double>(self.numel()) : 1.0;
}

// ---------------------------------------------------------------------------
// sgn: sign for real dtypes.
// ---------------------------------------------------------------------------
Tensor sgn(const Tensor &self) {
    if (self.is_complex()) return fallback<at::_ops::sgn>(self);
    tracking::record_executed("aten::sgn");
    return at::sign(self);
}
Tensor &sgn_(Tensor &self) {
    if (self.is_complex()) return fallback<at::_ops::sgn_>(self);
    tracking::record_executed("aten::sgn");
    return self.sign_();
}
Tensor &sgn_out(const Tensor &self, Tensor &out) {
    if (self.is_complex() || out.is_complex()) return fallback<at::_ops::sgn_out>(self, out);
    tracking::record_executed("aten::sgn");
    return at::sign_out(out, self);
}

// ---------------------------------------------------------------------------
// smooth_l1_loss / huber_loss: |d| < b ? quadratic : linear, d = self - target.
// ---------------------------------------------------------------------------
Tensor smooth_l1_loss(const Tensor &self, const Tensor &target, int64_t reduction, double beta) {
    TORCH_CHECK(beta >= 0, "smooth_l1_loss does not support negative values for beta.");
    if (!same_floating(self, target))
        return fallback<at::_ops::smooth_l1_loss>(self, target, reduction, beta);
    tracking::record_executed("aten::smooth_l1_loss");
    Tensor z = at::abs(at::sub(up(self), up(target)));
    if (beta == 0) return reduce(down(z, self), reduction);
    Tensor quad = at::mul(at::mul(z, z), Scalar(0.5 / beta));
    Tensor lin = at::sub(z, Scalar(0.5 * beta));
    return reduce(down(at::where(at::lt(z, Scalar(beta)), quad, lin), self), reduction);
}
Tensor smooth_l1_loss_backward(const Tensor &grad_output, const Tensor &self, const Tensor &target,
                               int64_t reduction, double beta) {
    tracking::record_executed("aten::smooth_l1_loss_backward");
    Tensor d = at::sub(up(self), up(target));
    const double norm = grad_norm(self, reduction);
    // beta 0 is l1: the gradient is sign(d) (0 at d == 0, as CPU).
    // beta 0 is l1: CPU's formula gives -norm for d <= 0 (zero included),
    // norm for d > 0 and NaN for NaN.
    Tensor g = beta <= 0
                   ? at::where(at::le(d, Scalar(0)), Scalar(-norm),
                               at::where(at::gt(d, Scalar(0)), Scalar(norm), at::mul(d, Scalar(0))))
                   : at::mul(at::clamp(d, Scalar(-beta), Scalar(beta)), Scalar(norm / beta));
    return down(at::mul(g, up(grad_output)), self);
}

Tensor huber_loss(const Tensor &self, const Tensor &target, int64_t reduction, double delta) {
    TORCH_CHECK(delta > 0, "huber_loss does not support non-positive values for delta.");
    if (!same_floating(self, target))
        return fallback<at::_ops::huber_loss>(self, target, reduction, delta);
    tracking::record_executed("aten::huber_loss");
    Tensor z = at::abs(at::sub(up(self), up(target)));
    Tensor quad = at::mul(at::mul(z, z), Scalar(0.5));
    Tensor lin = at::mul(at::sub(z, Scalar(0.5 * delta)), Scalar(delta));
    return reduce(down(at::where(at::lt(z, Scalar(delta)), quad, lin), self), reduction);
}
Tensor huber_loss_backward(const Tensor &grad_output, const Tensor &self, const Tensor &target,
                           int64_t reduction, double delta) {
    tracking::record_executed("aten::huber_loss_backward");
    Tensor d = at::clamp(at::sub(up(self), up(target)), Scalar(-delta), Scalar(delta));
    Tensor g = at::mul(at::mul(d, Scalar(grad_norm(self, reduction))), up(grad_output));
    return down(g, self);
}

// ---------------------------------------------------------------------------
// binary_cross_entropy: -(t log(x) + (1 - t) log(1 - x)), logs clamped at
// -100 as CPU does; weight multiplies each element.
// ---------------------------------------------------------------------------
void check_bce(const Tensor &self, const Tensor &target) {
    TORCH_CHECK(self.sizes() == target.sizes(), "Using a target size (", target.sizes(),
                ") that is different to the input size (", self.sizes(), ") is deprecated. ",
                "Please ensure they have the same size.");
    // CPU checks each element, input then target, that 0 <= v <= 1 (so NaN
    // fails too) and raises for the first element that fails; so do we (one
    // sync).
    if (self.numel() > 0) {
        auto outside = [](const Tensor &t) {
            return at::logical_not(at::logical_and(at::ge(t, Scalar(0)), at::le(t, Scalar(1))))
                .reshape({-1})
                .to(at::kFloat);
        };
        const Tensor bad_in = outside(self), bad = at::maximum(bad_in, outside(target));
        // 0: all in range; 1: the first bad element's input is bad; 2: its target.
        const Tensor first = at::argmax(bad).reshape({1});
        const double code =
            at::mul(at::max(bad), at::rsub(bad_in.index_select(0, first), Scalar(2)))
                .item<double>();
        if (code != 0) {
            TORCH_CHECK(code != 1, "all elements of input should be between 0 and 1");
            TORCH_CHECK(false, "all elements of target should be between 0 and 1");
        }
    }
}

Tensor binary_cross_entropy(const Tensor &self, const Tensor &target,
                            const std::optional<Tensor> &weight, int64_t reduction) {
    if (!same_floating(self, target) ||
        (weight && weight->defined() && !same_floating(self, *weight)))
        return fallback<at::_ops::binary_cross_entropy>(self, target, weight, reduction);
    check_bce(self, target);
    tracking::record_executed("aten::binary_cross_entropy");
    Tensor x = up(self), t = up(target);
    Tensor log_x = at::clamp_min(at::log(x), Scalar(-100));
    Tensor log_1mx = at::clamp_min(at::log1p(at::neg(x)), Scalar(-100));
    // (t - 1) log(1 - x) - t log(x)
    Tensor loss = at::sub(at::mul(at::sub(t, Scalar(1)), log_1mx), at::mul(t, log_x));
    if (weight && weight->defined()) loss = at::mul(loss, up(*weight));
    return reduce(down(loss, self), reduction);
}
Tensor binary_cross_entropy_backward(const Tensor &grad_output, const Tensor &self,
                                     const Tensor &target, const std::optional<Tensor> &weight,
                                     int64_t reduction) {
    tracking::record_executed("aten::binary_cross_entropy_backward");
    // (x - t) / max((1 - x) x, 1e-12)
    Tensor x = up(self);
    Tensor denom = at::clamp_min(at::mul(at::rsub(x, Scalar(1)), x), Scalar(1e-12));
    Tensor g = at::div(at::sub(x, up(target)), denom);
    g = at::mul(at::mul(g, Scalar(grad_norm(self, reduction))), up(grad_output));
    if (weight && weight->defined()) g = at::mul(g, up(*weight));
    return down(g, self);
}

// ---------------------------------------------------------------------------
// log_sigmoid: min(x, 0) - log1p(exp(-|x|)). CPU's buffer is empty; so is ours.
// ---------------------------------------------------------------------------
std::tuple<Tensor, Tensor> log_sigmoid_forward(const Tensor &self) {
    TORCH_CHECK(self.is_floating_point(),
                "log_sigmoid_forward: expected a floating point input, got ", self.scalar_type());
    tracking::record_executed("aten::log_sigmoid_forward");
    Tensor x = up(self);
    Tensor out = at::sub(at::clamp_max(x, Scalar(0)), at::log1p(at::exp(at::neg(at::abs(x)))));
    return {down(out, self), at::empty({0}, self.options())};
}
Tensor log_sigmoid_backward(const Tensor &grad_output, const Tensor &self, const Tensor &buffer) {
    (void)buffer;
    tracking::record_executed("aten::log_sigmoid_backward");
    // d/dx = 1 - sigmoid(x) = sigmoid(-x)
    return down(at::mul(up(grad_output), at::sigmoid(at::neg(up(self)))), self);
}

// ---------------------------------------------------------------------------
// xlogy: NaN where other is NaN, else 0 where self == 0, else self * log(other).
// ---------------------------------------------------------------------------
Tensor xlogy_impl(const Tensor &self, const Tensor &other, at::ScalarType type) {
    at::Device dev = self.is_cpu() ? other.device() : self.device();
    Tensor x = self.to(dev, type), y = other.to(dev, type);
    Tensor prod = at::mul(x, at::log(y));
    Tensor zeroed = at::where(at::eq(x, Scalar(0)), at::zeros({}, prod.options()), prod);
    return at::where(at::isnan(y), y, zeroed);
}
at::ScalarType xlogy_type(const Tensor &self, const Tensor &other) {
    auto t = at::result_type(self, other);
    return at::isIntegralType(t, /*includeBool=*/true)
               ? c10::typeMetaToScalarType(at::get_default_dtype())
               : t;
}
// Complex operands: the CPU path (ATen's xlogy has no complex kernel).
Tensor xlogy(const Tensor &self, const Tensor &other) {
    if (self.is_complex() || other.is_complex())
        return fallback<at::_ops::xlogy_Tensor>(self, other);
    tracking::record_executed("aten::xlogy");
    return xlogy_impl(self, other, xlogy_type(self, other));
}
Tensor &xlogy_(Tensor &self, const Tensor &other) {
    if (self.is_complex() || other.is_complex())
        return fallback<at::_ops::xlogy__Tensor>(self, other);
    auto t = xlogy_type(self, other);
    TORCH_CHECK(at::canCast(t, self.scalar_type()), "result type ", t,
                " can't be cast to the desired output type ", self.scalar_type());
    tracking::record_executed("aten::xlogy");
    Tensor r = xlogy_impl(self, other, t);
    TORCH_CHECK(r.sizes() == self.sizes(), "output with shape ", self.sizes(),
                " doesn't match the broadcast shape ", r.sizes());
    return self.copy_(r);
}
Tensor &xlogy_out(const Tensor &self, const Tensor &other, Tensor &out) {
    if (self.is_complex() || other.is_complex() || out.is_complex())
        return fallback<at::_ops::xlogy_OutTensor>(self, other, out);
    auto t = xlogy_type(self, other);
    TORCH_CHECK(at::canCast(t, out.scalar_type()), "result type ", t,
                " can't be cast to the desired output type ", out.scalar_type());
    check_out_device(out, self.device());
    tracking::record_executed("aten::xlogy");
    Tensor r = xlogy_impl(self, other, t);  // a new tensor: out may be self or other
    at::native::resize_output(out, r.sizes());
    check_out_overlap(out, self, other);
    return out.copy_(r);
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
    m.impl("sgn", TORCH_FN(sgn));
    m.impl("sgn_", TORCH_FN(sgn_));
    m.impl("sgn.out", TORCH_FN(sgn_out));
    m.impl("smooth_l1_loss", TORCH_FN(smooth_l1_loss));
    m.impl("smooth_l1_loss_backward", TORCH_FN(smooth_l1_loss_backward));
    m.impl("huber_loss", TORCH_FN(huber_loss));
    m.impl("huber_loss_backward", TORCH_FN(huber_loss_backward));
    m.impl("binary_cross_entropy", TORCH_FN(binary_cross_entropy));
    m.impl("binary_cross_entropy_backward", TORCH_FN(binary_cross_entropy_backward));
    m.impl("log_sigmoid_forward", TORCH_FN(log_sigmoid_forward));
    m.impl("log_sigmoid_backward", TORCH_FN(log_sigmoid_backward));
    m.impl("xlogy.Tensor", TORCH_FN(xlogy));
    m.impl("xlogy_.Tensor", TORCH_FN(xlogy_));
    m.impl("xlogy.OutTensor", TORCH_FN(xlogy_out));
}

}  // namespace neuron
