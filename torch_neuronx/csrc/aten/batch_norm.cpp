// aten/batch_norm.cpp - batch norm on neuron: native_batch_norm (training
// with the running-stat update, eval), _native_batch_norm_legit and its
// no_stats / no_training forms, and native_batch_norm_backward, run by
// libtrn's batch_norm kernels (trn/batch_norm.h).
//
// Shapes and errors follow PyTorch CPU; operands are made contiguous (a
// native copy) before their pointers reach libtrn. Running stats are updated
// in place by the kernel, exactly as CPU does (momentum, unbiased variance).
// Dtype combinations the kernel does not support go to the CPU fallback
// (which copies the running stats back, see fallback/writes.h).
#include <ATen/Functions.h>
#include <ATen/Operators.h>
#include <ATen/native/CPUFallback.h>
#include <torch/library.h>

#include <optional>
#include <tuple>

#include "fallback/cpu_fallback.h"
#include "runtime/device.h"
#include "observe/op_tracking.h"
#include "trn/batch_norm.h"

namespace neuron {
namespace {

using at::Tensor;
using Result = std::tuple<Tensor, Tensor, Tensor>;

Tensor opt(const std::optional<Tensor> &t) { return t.value_or(Tensor()); }

// [batch, channels, spatial] view of input, with PyTorch's checks.
struct BnShape {
    int64_t batch, channels, spatial;
};

BnShape bn_shape(const Tensor &input) {
    TORCH_CHECK(input.dim() >= 2, "batch_norm: expected input with at least 2 dimensions, got ",
                input.dim());
    int64_t spatial = 1;
    for (int64_t d = 2; d < input.dim(); ++d) spatial *= input.size(d);
    return {input.size(0), input.size(1), spatial};
}

void check_channel_vec(const Tensor &t, int64_t c, const char *name) {
    TORCH_CHECK(!t.defined() || t.numel() == c, name, " should contain ", c, " elements not ",
                t.numel());
}

// The dtype of every per-channel vector: all defined ones must agree and be
// the input's dtype, or float32 with 16-bit input (PyTorch's mixed type).
std::optional<std::pair<trn_dtype, trn_dtype>>
bn_dtypes(const Tensor &input, std::initializer_list<Tensor> vecs, at::ScalarType *param_type) {
    auto d = native_dtype(input.scalar_type());
    if (!d) return std::nullopt;
    std::optional<at::ScalarType> pt;
    for (const Tensor &v : vecs) {
        if (!v.defined()) continue;
        if (pt && *pt != v.scalar_type()) return std::nullopt;
        pt = v.scalar_type();
    }
    const at::ScalarType p = pt.value_or(input.scalar_type());
    auto pd = native_dtype(p);
    if (!pd || !trn_batch_norm_supports(*d, *pd)) return std::nullopt;
    *param_type = p;
    return std::make_pair(*d, *pd);
}

// The kernel writes running stats in place: a non-contiguous one is updated
// through a contiguous copy that is copied back afterwards.
struct InPlaceVec {
    Tensor target, work;
    explicit InPlaceVec(const Tensor &t) : target(t), work(t.defined() ? t.contiguous() : t) {}
    void *ptr() const { return work.defined() ? work.data_ptr() : nullptr; }
    void finish() {
        if (target.defined() && !work.is_same(target)) target.copy_(work);
    }
};

// Runs the forward kernel; nullopt when the dtypes need the CPU fallback.
std::optional<Result> bn_forward(const Tensor &input, const Tensor &weight, const Tensor &bias,
                                 const Tensor &running_mean, const Tensor &running_var,
                                 bool training, double momentum, double eps) {
    const BnShape sh = bn_shape(input);
    for (auto [t, name] : {std::pair{weight, "weight"},
                           {bias, "bias"},
                           {running_mean, "running_mean"},
                           {running_var, "running_var"}})
        check_channel_vec(t, sh.channels, name);
    if (!training && (!running_mean.defined() || !running_var.defined()))
        return std::nullopt;  // eval without running stats: CPU's own rule
    at::ScalarType ptype;
    auto dts = bn_dtypes(input, {weight, bias, running_mean, running_var}, &ptype);
    if (!dts) return std::nullopt;
    const Tensor x = input.contiguous();
    Tensor y =
        at::empty(input.sizes(), input.options().memory_format(at::MemoryFormat::Contiguous));
    // Saved stats: input's dtype, or the parameters' in mixed type (CPU's rule).
    const auto stat_opts = input.options().dtype(ptype);
    Tensor save_mean = at::empty({training ? sh.channels : 0}, stat_opts);
    Tensor save_invstd = at::empty({training ? sh.channels : 0}, stat_opts);
    const Tensor w = weight.defined() ? weight.contiguous() : weight;
    const Tensor b = bias.defined() ? bias.contiguous() : bias;
    InPlaceVec rm(running_mean), rv(running_var);
    trn_batch_norm_desc d{};
    d.dtype = dts->first;
    d.param_dtype = dts->second;
    d.batch = sh.batch;
    d.channels = sh.channels;
    d.spatial = sh.spatial;
    d.x = x.data_ptr();
    d.weight = w.defined() ? w.data_ptr() : nullptr;
    d.bias = b.defined() ? b.data_ptr() : nullptr;
    d.running_mean = rm.ptr();
    d.running_var = rv.ptr();
    d.y = y.data_ptr();
    d.save_mean = training ? save_mean.data_ptr() : nullptr;
    d.save_invstd = training ? save_invstd.data_ptr() : nullptr;
    d.training = training;
    d.momentum = momentum;
    d.eps = eps;
    TRN_CHECK(trn_batch_norm_launch(current_trn_stream(input.device().index()), &d));
    if (training) {
        rm.finish();
        rv.finish();
    }
    const auto fmt = input.suggest_memory_format();
    if (fmt != at::MemoryFormat::Contiguous && !input.is_contiguous()) y = y.contiguous(fmt);
    return Result{y, save_mean, save_invstd};
}

Result native_batch_norm(const Tensor &input, const std::optional<Tensor> &weight,
                         const std::optional<Tensor> &bias,
                         const std::optional<Tensor> &running_mean,
                         const std::optional<Tensor> &running_var, bool training, double momentum,
                         double eps) {
    if (auto r = bn_forward(input, opt(weight), opt(bias), opt(running_mean), opt(running_var),
                            training, momentum, eps)) {
        tracking::record_executed("aten::native_batch_norm");
        return *r;
    }
    return fallback<at::_ops::native_batch_norm>(input, weight, bias, running_mean, running_var,
                                                 training, momentum, eps);
}

Result batch_norm_legit(const Tensor &input, const std::optional<Tensor> &weight,
                        const std::optional<Tensor> &bias, Tensor &running_mean,
                        Tensor &running_var, bool training, double momentum, double eps) {
    if (auto r = bn_forward(input, opt(weight), opt(bias), running_mean, running_var, training,
                            momentum, eps)) {
        tracking::record_executed("aten::_native_batch_norm_legit");
        return *r;
    }
    return fallback<at::_ops::_native_batch_norm_legit>(input, weight, bias, running_mean,
                                                        running_var, training, momentum, eps);
}

Result batch_norm_legit_no_stats(const Tensor &input, const std::optional<Tensor> &weight,
                                 const std::optional<Tensor> &bias, bool training, double momentum,
                                 double eps) {
    if (training) {
        if (auto r = bn_forward(input, opt(weight), opt(bias), Tensor(), Tensor(), true, momentum,
                                eps)) {
            tracking::record_executed("aten::_native_batch_norm_legit");
            return *r;
        }
    }
    return fallback<at::_ops::_native_batch_norm_legit_no_stats>(input, weight, bias, training,
                                                                 momentum, eps);
}

Result batch_norm_legit_no_training(const Tensor &input, const std::optional<Tensor> &weight,
                                    const std::optional<Tensor> &bias, const Tensor &running_mean,
                                    const Tensor &running_var, double momentum, double eps) {
    if (auto r = bn_forward(input, opt(weight), opt(bias), running_mean, running_var, false,
                            momentum, eps)) {
        tracking::record_executed("aten::_native_batch_norm_legit_no_training");
        return *r;
    }
    return fallback<at::_ops::_native_batch_norm_legit_no_training>(
        input, weight, bias, running_mean, running_var, momentum, eps);
}

Result bn_backward(const Tensor &grad_out, const Tensor &input,
                   const std::optional<Tensor> &weight_opt,
                   const std::optional<Tensor> &running_mean_opt,
                   const std::optional<Tensor> &running_var_opt,
                   const std::optional<Tensor> &save_mean_opt,
                   const std::optional<Tensor> &save_invstd_opt, bool train, double eps,
                   std::array<bool, 3> mask) {
    const Tensor weight = opt(weight_opt);
    const Tensor mean = train ? opt(save_mean_opt) : opt(running_mean_opt);
    const Tensor stat = train ? opt(save_invstd_opt) : opt(running_var_opt);
    const BnShape sh = bn_shape(input);
    at::ScalarType ptype;
    std::optional<std::pair<trn_dtype, trn_dtype>> dts;
    if (mean.defined() && stat.defined() && grad_out.scalar_type() == input.scalar_type() &&
        grad_out.sizes().equals(input.sizes()) && mean.numel() == sh.channels &&
        stat.numel() == sh.channels)
        dts = bn_dtypes(input, {weight, mean, stat}, &ptype);
    if (!dts || (weight.defined() && weight.numel() != sh.channels))
        return fallback<at::_ops::native_batch_norm_backward>(
            grad_out, input, weight_opt, running_mean_opt, running_var_opt, save_mean_opt,
            save_invstd_opt, train, eps, mask);
    const Tensor x = input.contiguous(), dy = grad_out.contiguous();
    const Tensor w = weight.defined() ? weight.contiguous() : weight;
    const Tensor mc = mean.contiguous(), sc = stat.contiguous();
    const auto popts = input.options().dtype(weight.defined() ? weight.scalar_type() : ptype);
    Tensor dx, dw, db;
    if (mask[0])
        dx = at::empty(input.sizes(), input.options().memory_format(at::MemoryFormat::Contiguous));
    if (mask[1]) dw = at::empty({sh.channels}, popts);
    if (mask[2]) db = at::empty({sh.channels}, popts);
    trn_batch_norm_backward_desc d{};
    d.dtype = dts->first;
    d.param_dtype = dts->second;
    d.batch = sh.batch;
    d.channels = sh.channels;
    d.spatial = sh.spatial;
    d.dy = dy.data_ptr();
    d.x = x.data_ptr();
    d.weight = w.defined() ? w.data_ptr() : nullptr;
    d.mean = mc.data_ptr();
    d.invstd_or_var = sc.data_ptr();
    d.training = train;
    d.eps = eps;
    d.dx = dx.defined() ? dx.data_ptr() : nullptr;
    d.dweight = dw.defined() ? dw.data_ptr() : nullptr;
    d.dbias = db.defined() ? db.data_ptr() : nullptr;
    TRN_CHECK(trn_batch_norm_backward_launch(current_trn_stream(input.device().index()), &d));
    tracking::record_executed("aten::native_batch_norm_backward");
    if (dx.defined() && !input.is_contiguous()) {
        const auto fmt = input.suggest_memory_format();
        if (fmt != at::MemoryFormat::Contiguous) dx = dx.contiguous(fmt);
    }
    return {dx, dw, db};
}

// The newer batch norm stack (torch.export, OpInfo): the same kernels plus an
// empty `reserve` (CPU keeps nothing there either).
using Result4 = std::tuple<Tensor, Tensor, Tensor, Tensor>;

Result4 with_reserve(const Tensor &input, Result r) {
    return {std::get<0>(r), std::get<1>(r), std::get<2>(r),
            at::empty({0}, input.options().dtype(at::kByte))};
}

Result4 batch_norm_with_update(const Tensor &input, const std::optional<Tensor> &weight,
                               const std::optional<Tensor> &bias, Tensor &running_mean,
                               Tensor &running_var, double momentum, double eps) {
    if (auto r = bn_forward(input, opt(weight), opt(bias), running_mean, running_var, true,
                            momentum, eps)) {
        tracking::record_executed("aten::_batch_norm_with_update");
        return with_reserve(input, *r);
    }
    return fallback<at::_ops::_batch_norm_with_update>(input, weight, bias, running_mean,
                                                       running_var, momentum, eps);
}

Result4 batch_norm_no_update(const Tensor &input, const std::optional<Tensor> &weight,
                             const std::optional<Tensor> &bias,
                             const std::optional<Tensor> &running_mean,
                             const std::optional<Tensor> &running_var, double momentum,
                             double eps) {
    if (auto r = bn_forward(input, opt(weight), opt(bias), opt(running_mean), opt(running_var),
                            false, momentum, eps)) {
        tracking::record_executed("aten::_batch_norm_no_update");
        return with_reserve(input, *r);
    }
    return fallback<at::_ops::_batch_norm_no_update>(input, weight, bias, running_mean, running_var,
                                                     momentum, eps);
}

Result batch_norm_backward(const Tensor &grad_out, const Tensor &input, const Tensor &weight,
                           const std::optional<Tensor> &running_mean,
                           const std::optional<Tensor> &running_var,
                           const std::optional<Tensor> &save_mean,
                           const std::optional<Tensor> &save_var, bool update, double eps,
                           std::array<bool, 3> mask, const Tensor & /*reserve*/) {
    // `update` is whether the forward used batch statistics (training).
    return bn_backward(grad_out, input, weight, running_mean, running_var, save_mean, save_var,
                       update, eps, mask);
}

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
    m.impl("_batch_norm_with_update", TORCH_FN(batch_norm_with_update));
    m.impl("_batch_norm_no_update", TORCH_FN(batch_norm_no_update));
    m.impl("batch_norm_backward", TORCH_FN(batch_norm_backward));
    m.impl("native_batch_norm", TORCH_FN(native_batch_norm));
    m.impl("_native_batch_norm_legit", TORCH_FN(batch_norm_legit));
    m.impl("_native_batch_norm_legit.no_stats", TORCH_FN(batch_norm_legit_no_stats));
    m.impl("_native_batch_norm_legit_no_training", TORCH_FN(batch_norm_legit_no_training));
    m.impl("native_batch_norm_backward", TORCH_FN(bn_backward));
}

}  // namespace
}  // namespace neuron
