// aten/train.cpp - the training-step ops that are not elementwise: layer
// norm (forward/backward), nll_loss / nll_loss2d (forward/backward),
// dropout and mse_loss, run by libtrn's norm/loss/dropout kernels.
// Shapes, dtypes and errors follow PyTorch CPU's checks; operands are made
// contiguous (a native copy) before their pointers reach libtrn. Dtypes the
// kernels do not support go to the CPU fallback.
#include <ATen/Functions.h>
#include <ATen/Operators.h>
#include <ATen/core/Reduction.h>
#include <ATen/native/CPUFallback.h>
#include <ATen/native/Resize.h>
#include <torch/library.h>

#include <tuple>

#include "aten/index_checked.h"
#include "fallback/cpu_fallback.h"
#include "runtime/generator.h"
#include "runtime/device.h"
#include "observe/op_tracking.h"

namespace neuron {
namespace {

using at::Tensor;

// For schemas with SymInt arguments.
template <typename Op, typename... Args> decltype(auto) fallback_sym(Args &&...args) {
    return at::native::call_fallback_fn_symint<&cpu_fallback, Op>::call(
        std::forward<Args>(args)...);
}

trn_stream *stream_of(const Tensor &t) { return current_trn_stream(t.device().index()); }

// ---------------------------------------------------------------------------
// layer norm
// ---------------------------------------------------------------------------
// M rows of N = prod(normalized_shape) elements, as ATen's _check_layer_norm_inputs.
std::pair<int64_t, int64_t> layer_norm_rows(const Tensor &input, at::IntArrayRef shape,
                                            const Tensor &weight, const Tensor &bias) {
    const int64_t nd = static_cast<int64_t>(shape.size());
    TORCH_CHECK(nd >= 1, "Expected normalized_shape to be at least 1-dimensional, i.e., ",
                "containing at least one element, but got normalized_shape = ", shape);
    TORCH_CHECK(!weight.defined() || weight.sizes().equals(shape),
                "Expected weight to be of same shape as normalized_shape, but got ",
                "weight of shape ", weight.sizes(), " and normalized_shape = ", shape);
    TORCH_CHECK(!bias.defined() || bias.sizes().equals(shape),
                "Expected bias to be of same shape as normalized_shape, but got ", "bias of shape ",
                bias.sizes(), " and normalized_shape = ", shape);
    const auto in_shape = input.sizes();
    const int64_t in_nd = input.dim();
    if (in_nd < nd || !in_shape.slice(in_nd - nd).equals(shape)) {
        std::stringstream ss;
        ss << "Given normalized_shape=" << shape << ", expected input with shape [*";
        for (auto size : shape) ss << ", " << size;
        ss << "], but got input of size" << in_shape;
        TORCH_CHECK(false, ss.str());
    }
    const int axis = static_cast<int>(in_nd - nd);
    const int64_t M = c10::multiply_integers(in_shape.cbegin(), in_shape.cbegin() + axis);
    const int64_t N = c10::multiply_integers(in_shape.cbegin() + axis, in_shape.cend());
    return {M, N};
}

// Stats shape: input's leading dims, then 1 per normalized dim.
std::vector<int64_t> stat_shape(const Tensor &input, size_t nd) {
    std::vector<int64_t> s(input.sizes().begin(), input.sizes().end());
    for (size_t i = s.size() - nd; i < s.size(); ++i) s[i] = 1;
    return s;
}

bool ln_dtypes(const Tensor &input, const Tensor &weight, const Tensor &bias, trn_dtype &dt,
               trn_dtype &pdt, trn_dtype &sdt) {
    auto d = native_dtype(input.scalar_type());
    if (!d) return false;
    at::ScalarType pt = weight.defined()
                            ? weight.scalar_type()
                            : (bias.defined() ? bias.scalar_type() : input.scalar_type());
    if (weight.defined() && bias.defined() && weight.scalar_type() != bias.scalar_type())
        return false;
    auto p = native_dtype(pt);
    if (!p) return false;
    dt = *d;
    pdt = *p;
    sdt = pdt;  // ATen: stats in the parameter dtype when mixed (float), else input's
    return trn_layer_norm_supports(dt, pdt, sdt) != 0;
}

std::tuple<Tensor, Tensor, Tensor> native_layer_norm(const Tensor &input,
                                                     c10::SymIntArrayRef sym_shape,
                                                     const std::optional<Tensor> &weight_opt,
                                                     const std::optional<Tensor> &bias_opt,
                                                     double eps) {
    const at::IntArrayRef shape = C10_AS_INTARRAYREF_SLOW(sym_shape);
    const Tensor weight = weight_opt.value_or(Tensor());
    const Tensor bias = bias_opt.value_or(Tensor());
    auto [M, N] = layer_norm_rows(input, shape, weight, bias);
    trn_dtype dt, pdt, sdt;
    if (!ln_dtypes(input, weight, bias, dt, pdt, sdt) || (M > 0 && N == 0))
        return fallback_sym<at::_ops::native_layer_norm>(input, sym_shape, weight_opt, bias_opt,
                                                         eps);
    const Tensor x = input.contiguous();
    const Tensor w = weight.defined() ? weight.contiguous() : weight;
    const Tensor b = bias.defined() ? bias.contiguous() : bias;
    Tensor y =
        at::empty(input.sizes(), input.options().memory_format(at::MemoryFormat::Contiguous));
    auto sshape = stat_shape(input, shape.size());
    const auto stat_type = weight.defined() || bias.defined()
                               ? (weight.defined() ? weight.scalar_type() : bias.scalar_type())
                               : input.scalar_type();
    Tensor mean = at::empty(sshape, input.options().dtype(stat_type));
    Tensor rstd = at::empty(sshape, input.options().dtype(stat_type));
    trn_layer_norm_desc d{};
    d.dtype = dt;
    d.param_dtype = pdt;
    d.stat_dtype = sdt;
    d.rows = M;
    d.cols = N;
    d.x = x.data_ptr();
    d.weight = w.defined() ? w.data_ptr() : nullptr;
    d.bias = b.defined() ? b.data_ptr() : nullptr;
    d.y = y.data_ptr();
    d.mean = mean.data_ptr();
    d.rstd = rstd.data_ptr();
    d.eps = eps;
    TRN_CHECK(trn_layer_norm_launch(stream_of(input), &d));
    tracking::record_executed("aten::native_layer_norm");
    return {y, mean, rstd};
}

std::tuple<Tensor, Tensor, Tensor>
native_layer_norm_backward(const Tensor &grad_out, const Tensor &input,
                           c10::SymIntArrayRef sym_shape, const Tensor &mean, const Tensor &rstd,
                           const std::optional<Tensor> &weight_opt,
                           const std::optional<Tensor> &bias_opt, std::array<bool, 3> mask) {
    const at::IntArrayRef shape = C10_AS_INTARRAYREF_SLOW(sym_shape);
    const Tensor weight = weight_opt.value_or(Tensor());
    const Tensor bias = bias_opt.value_or(Tensor());
    auto [M, N] = layer_norm_rows(input, shape, weight, bias);
    trn_dtype dt, pdt, sdt;
    const bool ok = ln_dtypes(input, weight, bias, dt, pdt, sdt) &&
                    grad_out.scalar_type() == input.scalar_type() &&
                    native_dtype(mean.scalar_type()) && native_dtype(rstd.scalar_type()) &&
                    mean.scalar_type() == rstd.scalar_type() && !(M > 0 && N == 0);
    if (ok) sdt = *native_dtype(mean.scalar_type());
    if (!ok || !trn_layer_norm_supports(dt, pdt, sdt))
        return fallback_sym<at::_ops::native_layer_norm_backward>(grad_out, input, sym_shape, mean,
                                                                  rstd, weight_opt, bias_opt, mask);
    const Tensor x = input.contiguous(), dy = grad_out.contiguous();
    const Tensor mc = mean.contiguous(), rc = rstd.contiguous();
    const Tensor w = weight.defined() ? weight.contiguous() : weight;
    Tensor dx, dw, db;
    if (mask[0])
        dx = at::empty(input.sizes(), input.options().memory_format(at::MemoryFormat::Contiguous));
    if (mask[1] && weight.defined())
        dw =
            at::empty(weight.sizes(), weight.options().memory_format(at::MemoryFormat::Contiguous));
    if (mask[2] && bias.defined())
        db = at::empty(bias.sizes(), bias.options().memory_format(at::MemoryFormat::Contiguous));
    trn_layer_norm_backward_desc d{};
    d.dtype = dt;
    d.param_dtype = pdt;
    d.stat_dtype = sdt;
    d.rows = M;
    d.cols = N;
    d.dy = dy.data_ptr();
    d.x = x.data_ptr();
    d.mean = mc.data_ptr();
    d.rstd = rc.data_ptr();
    d.weight = w.defined() ? w.data_ptr() : nullptr;
    d.dx = dx.defined() ? dx.data_ptr() : nullptr;
    d.dweight = dw.defined() ? dw.data_ptr() : nullptr;
    d.dbias = db.defined() ? db.data_ptr() : nullptr;
    TRN_CHECK(trn_layer_norm_backward_launch(stream_of(input), &d));
    tracking::record_executed("aten::native_layer_norm_backward");
    return {dx, dw, db};
}

// ---------------------------------------------------------------------------
// nll_loss / nll_loss2d
// ---------------------------------------------------------------------------
// Synchronizes so an out-of-range target raises at the call, as on CPU
// (IndexError "Target k is out of bounds."). `launched`: the launch's
// status, which carries the kernel's error under NEURON_LAUNCH_BLOCKING=1.
void sync_targets(trn_stream *s, trn_status launched) {
    const trn_status st = launched != TRN_SUCCESS ? launched : trn_stream_synchronize(s);
    if (st == TRN_SUCCESS) return;
    const std::string msg = trn_last_error();
    TORCH_CHECK_INDEX(msg.find("out of bounds") == std::string::npos, msg);
    TRN_CHECK(st);
}

struct NllShape {
    int64_t batch, classes, inner;
};

bool nll_supported(const Tensor &self, const Tensor &target, const Tensor &weight) {
    auto d = native_dtype(self.scalar_type());
    auto t = native_dtype(target.scalar_type());
    return d && t && trn_nll_loss_supports(*d, *t) &&
           (!weight.defined() || weight.scalar_type() == self.scalar_type());
}

// nll_loss's checks (ATen's nll_loss_forward meta function).
NllShape nll_check(const Tensor &self, const Tensor &target, const Tensor &weight) {
    TORCH_CHECK(self.dim() > 0 && self.dim() <= 2, "input tensor should be 1D or 2D");
    TORCH_CHECK(target.dim() <= 1, "0D or 1D target tensor expected, multi-target not supported");
    const auto no_batch_dim = self.dim() == 1 && target.dim() == 0;
    TORCH_CHECK(no_batch_dim || (self.size(0) == target.size(0)),
                "size mismatch (got input: ", self.sizes(), ", target: ", target.sizes(), ")")
    const auto n_classes = self.size(-1);
    TORCH_CHECK(!weight.defined() || (weight.dim() == 1 && weight.numel() == n_classes),
                "weight tensor should be defined either for all ", n_classes,
                " classes or no classes"
                " but got weight tensor of shape: ",
                weight.sizes());
    return {self.dim() == 1 ? 1 : self.size(0), n_classes, 1};
}

NllShape nll2d_check(const Tensor &self, const Tensor &target, const Tensor &weight) {
    TORCH_CHECK(target.dim() == 3,
                "only batches of spatial targets supported (3D tensors)"
                " but got targets of dimension: ",
                target.dim());
    TORCH_CHECK(self.dim() == 4,
                "only batches of spatial inputs supported (4D tensors), "
                "but got input of dimension: ",
                self.dim());
    TORCH_CHECK(!weight.defined() || weight.numel() == self.size(1),
                "weight tensor should be defined either for all or no classes");
    TORCH_CHECK(self.size(0) == target.size(0) && self.size(2) == target.size(1) &&
                    self.size(3) == target.size(2),
                "input and target batch or spatial sizes don't match: target ", target.sizes(),
                ", input ", self.sizes());
    return {self.size(0), self.size(1), self.size(2) * self.size(3)};
}

// The fields nll_loss's forward and backward descriptors share.
template <typename Desc>
void nll_desc_common(Desc &d, const Tensor &self, const Tensor &target, const Tensor &weight,
                     int64_t reduction, int64_t ignore_index, const NllShape &sh) {
    d.dtype = *native_dtype(self.scalar_type());
    d.target_dtype = *native_dtype(target.scalar_type());
    d.reduction = static_cast<trn_reduction>(reduction);
    d.batch = sh.batch;
    d.classes = sh.classes;
    d.inner = sh.inner;
    d.ignore_index = ignore_index;
    d.target = target.data_ptr();
    d.weight = weight.defined() ? weight.data_ptr() : nullptr;
}

void nll_forward_run(const Tensor &self, const Tensor &target, const Tensor &weight,
                     int64_t reduction, int64_t ignore_index, const NllShape &sh, Tensor &output,
                     Tensor &total_weight, const char *name) {
    const Tensor x = self.contiguous(), t = target.contiguous();
    const Tensor w = weight.defined() ? weight.contiguous() : weight;
    trn_nll_loss_desc d{};
    nll_desc_common(d, self, t, w, reduction, ignore_index, sh);
    d.input = x.data_ptr();
    d.out = output.data_ptr();
    d.total_weight = total_weight.data_ptr();
    trn_stream *s = stream_of(self);
    sync_targets(s, trn_nll_loss_launch(s, &d));
    index_checked_note(t, {IndexCheck::Kind::Target, sh.classes, ignore_index});
    tracking::record_executed(name);
}

// nll_loss_forward / nll_loss2d_forward (Op), the input already checked
// into sh: CPU's result where libtrn has no kernel, else the output
// (output_of() allocates it: its shape depends on the op) and total weight.
template <typename Op, typename OutputFn>
std::tuple<Tensor, Tensor> nll_forward_op(const Tensor &self, const Tensor &target,
                                          const std::optional<Tensor> &weight_opt,
                                          int64_t reduction, const c10::SymInt &ignore_index,
                                          const NllShape &sh, OutputFn output_of) {
    const Tensor weight = weight_opt.value_or(Tensor());
    if (!nll_supported(self, target, weight))
        return fallback_sym<Op>(self, target, weight_opt, reduction, ignore_index);
    Tensor output = output_of();
    Tensor total_weight = at::empty({}, self.options());
    nll_forward_run(self, target, weight, reduction, ignore_index.expect_int(), sh, output,
                    total_weight, Op::name);
    return {output, total_weight};
}

std::tuple<Tensor, Tensor> nll_loss_forward(const Tensor &self, const Tensor &target,
                                            const std::optional<Tensor> &weight_opt,
                                            int64_t reduction, c10::SymInt ignore_index) {
    const NllShape sh = nll_check(self, target, weight_opt.value_or(Tensor()));
    return nll_forward_op<at::_ops::nll_loss_forward>(
        self, target, weight_opt, reduction, ignore_index, sh, [&] {
            return reduction == at::Reduction::None && self.dim() == 2
                       ? at::empty({sh.batch}, self.options())
                       : at::empty({}, self.options());
        });
}

std::tuple<Tensor, Tensor> nll_loss2d_forward(const Tensor &self, const Tensor &target,
                                              const std::optional<Tensor> &weight_opt,
                                              int64_t reduction, c10::SymInt ignore_index) {
    const NllShape sh = nll2d_check(self, target, weight_opt.value_or(Tensor()));
    return nll_forward_op<at::_ops::nll_loss2d_forward>(
        self, target, weight_opt, reduction, ignore_index, sh, [&] {
            return reduction == at::Reduction::None ? at::empty(target.sizes(), self.options())
                                                    : at::empty({}, self.options());
        });
}

Tensor nll_backward_run(const Tensor &grad_output, const Tensor &self, const Tensor &target,
                        const Tensor &weight, int64_t reduction, int64_t ignore_index,
                        const Tensor &total_weight, const NllShape &sh, const char *name) {
    const Tensor g = grad_output.contiguous(), t = target.contiguous();
    const Tensor w = weight.defined() ? weight.contiguous() : weight;
    const Tensor tw = total_weight.contiguous();
    Tensor grad_input =
        at::empty(self.sizes(), self.options().memory_format(at::MemoryFormat::Contiguous));
    trn_nll_loss_backward_desc d{};
    nll_desc_common(d, self, t, w, reduction, ignore_index, sh);
    d.grad_output = g.data_ptr();
    d.total_weight = tw.data_ptr();
    d.grad_input = grad_input.data_ptr();
    trn_stream *s = stream_of(self);
    // The forward checked this target (unless it was written since): its
    // kernel still fails on a bad one, reported at the next synchronize.
    if (index_checked_covers(t, {IndexCheck::Kind::Target, sh.classes, ignore_index}))
        TRN_CHECK(trn_nll_loss_backward_launch(s, &d));
    else
        sync_targets(s, trn_nll_loss_backward_launch(s, &d));
    tracking::record_executed(name);
    return grad_input;
}

bool nll_backward_supported(const Tensor &grad_output, const Tensor &self, const Tensor &target,
                            const Tensor &weight, const Tensor &total_weight) {
    return nll_supported(self, target, weight) && grad_output.scalar_type() == self.scalar_type() &&
           total_weight.scalar_type() == self.scalar_type() && total_weight.numel() == 1;
}

Tensor nll_loss_backward(const Tensor &grad_output, const Tensor &self, const Tensor &target,
                         const std::optional<Tensor> &weight_opt, int64_t reduction,
                         c10::SymInt ignore_index, const Tensor &total_weight) {
    const Tensor weight = weight_opt.value_or(Tensor());
    const NllShape sh = nll_check(self, target, weight);
    if (reduction == at::Reduction::None && self.dim() == 2) {
        TORCH_CHECK(grad_output.dim() == 1 && grad_output.size(0) == sh.batch,
                    "Expected a tensor of dimension 1 and tensor.size[0] == ", sh.batch,
                    " but got: dimension ", grad_output.dim(),
                    " and tensor.size[0] == ", grad_output.dim() > 0 ? grad_output.size(0) : 0);
    } else {
        TORCH_CHECK(grad_output.dim() <= 1 && grad_output.numel() == 1,
                    "Expected a single element grad_output tensor, but got: ", grad_output.sizes());
    }
    if (!nll_backward_supported(grad_output, self, target, weight, total_weight))
        return fallback_sym<at::_ops::nll_loss_backward>(grad_output, self, target, weight_opt,
                                                         reduction, ignore_index, total_weight);
    return nll_backward_run(grad_output, self, target, weight, reduction, ignore_index.expect_int(),
                            total_weight, sh, "aten::nll_loss_backward");
}

Tensor nll_loss2d_backward(const Tensor &grad_output, const Tensor &self, const Tensor &target,
                           const std::optional<Tensor> &weight_opt, int64_t reduction,
                           c10::SymInt ignore_index, const Tensor &total_weight) {
    const Tensor weight = weight_opt.value_or(Tensor());
    const NllShape sh = nll2d_check(self, target, weight);
    if (!nll_backward_supported(grad_output, self, target, weight, total_weight) ||
        (reduction == at::Reduction::None && !grad_output.sizes().equals(target.sizes())) ||
        (reduction != at::Reduction::None && grad_output.numel() != 1))
        return fallback_sym<at::_ops::nll_loss2d_backward>(grad_output, self, target, weight_opt,
                                                           reduction, ignore_index, total_weight);
    return nll_backward_run(grad_output, self, target, weight, reduction, ignore_index.expect_int(),
                            total_weight, sh, "aten::nll_loss2d_backward");
}

// ---------------------------------------------------------------------------
// dropout
// ---------------------------------------------------------------------------
// The mask takes (seed, offset) from the device's generator, as the random
// fills do (runtime/generator.h), so DTensor's tracker gives each shard its
// part of the whole tensor's mask.
std::tuple<Tensor, Tensor> native_dropout(const Tensor &input, double p,
                                          std::optional<bool> train) {
    auto d = native_dtype(input.scalar_type());
    if (!d ||
        (*d != TRN_DTYPE_F32 && *d != TRN_DTYPE_BF16 && *d != TRN_DTYPE_F16 && *d != TRN_DTYPE_F64))
        return fallback<at::_ops::native_dropout>(input, p, train);
    TORCH_CHECK(p >= 0 && p <= 1, "dropout probability has to be between 0 and 1, but got ", p);
    const bool training = !train.has_value() || *train;
    const double keep = 1.0 - p;
    const double scale = !training ? 1.0 : (keep == 0.0 ? 0.0 : 1.0 / keep);
    const Tensor x = input.contiguous();
    Tensor out =
        at::empty(input.sizes(), input.options().memory_format(at::MemoryFormat::Contiguous));
    Tensor mask =
        at::empty(input.sizes(),
                  input.options().dtype(at::kBool).memory_format(at::MemoryFormat::Contiguous));
    trn_dropout_desc dd{};
    dd.dtype = *d;
    dd.n = input.numel();
    dd.x = x.data_ptr();
    dd.out = out.data_ptr();
    dd.mask = static_cast<uint8_t *>(mask.data_ptr());
    dd.p = training ? p : 0.0;  // eval: the input, and an all-true mask
    dd.scale = scale;
    if (training && dd.n > 0) {
        const CounterRange r =
            reserve_counters(std::nullopt, input.device().index(), static_cast<uint64_t>(dd.n));
        dd.seed = r.seed;
        dd.offset = r.offset;
    }
    TRN_CHECK(trn_dropout_launch(stream_of(input), &dd));
    tracking::record_executed("aten::native_dropout");
    return {out, mask};
}

// ---------------------------------------------------------------------------
// mse_loss: (self - target)^2, reduced; composed from native ops.
// ---------------------------------------------------------------------------
Tensor mse_loss(const Tensor &self, const Tensor &target, int64_t reduction) {
    // ATen's CPU kernel takes floating operands only: others (complex,
    // integers) go to the CPU path, which raises its own error.
    if (!at::isFloatingType(self.scalar_type()) || !at::isFloatingType(target.scalar_type()))
        return fallback<at::_ops::mse_loss>(self, target, reduction);
    Tensor d = at::sub(self, target);
    Tensor sq = at::mul(d, d);
    tracking::record_executed("aten::mse_loss");
    if (reduction == at::Reduction::Mean) return at::mean(sq);
    if (reduction == at::Reduction::Sum) return at::sum(sq);
    return sq;
}
Tensor mse_loss_backward(const Tensor &grad_output, const Tensor &self, const Tensor &target,
                         int64_t reduction) {
    const double norm =
        reduction == at::Reduction::Mean ? 2.0 / static_cast<double>(self.numel()) : 2.0;
    tracking::record_executed("aten::mse_loss_backward");
    return at::mul(at::mul(at::sub(self, target), grad_output), at::Scalar(norm));
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
    m.impl("native_layer_norm", TORCH_FN(native_layer_norm));
    m.impl("native_layer_norm_backward", TORCH_FN(native_layer_norm_backward));
    m.impl("nll_loss_forward", TORCH_FN(nll_loss_forward));
    m.impl("nll_loss_backward", TORCH_FN(nll_loss_backward));
    m.impl("nll_loss2d_forward", TORCH_FN(nll_loss2d_forward));
    m.impl("nll_loss2d_backward", TORCH_FN(nll_loss2d_backward));
    m.impl("native_dropout", TORCH_FN(native_dropout));
    m.impl("mse_loss", TORCH_FN(mse_loss));
    m.impl("mse_loss_backward", TORCH_FN(mse_loss_backward));
}

}  // namespace neuron
