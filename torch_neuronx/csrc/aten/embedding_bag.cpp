// aten/embedding_bag.cpp - embedding_bag on neuron: _embedding_bag,
// _embedding_bag_forward_only, _embedding_bag_dense_backward and
// _embedding_bag_per_sample_weights_backward, run by libtrn's embedding_bag
// kernels (trn/embedding_bag.h). F.embedding_bag / nn.EmbeddingBag reach
// them through aten::embedding_bag (CompositeImplicit), and the backward
// through _embedding_bag_backward, registered here too (CPU and CUDA have
// their own).
//
// The auxiliary outputs are this backend's own, read only by its backward:
// offset2bag is always filled (the bag of every index), bag_size counts the
// non-padding indices of each bag, max_indices holds the weight row of each
// maximum in max mode (-1 for an empty bag) and is a copy of bag_size
// otherwise (CPU's shapes). Index errors fail the kernel; the launch is
// synchronized so they raise at the call. Unsupported dtypes and operands
// from a foreign forward go to the CPU fallback.
#include <ATen/Functions.h>
#include <ATen/Operators.h>
#include <ATen/native/CPUFallback.h>
#include <torch/library.h>

#include <string>
#include <tuple>

#include "fallback/cpu_fallback.h"
#include "runtime/device.h"
#include "observe/op_tracking.h"
#include "trn/embedding_bag.h"

namespace neuron {
namespace {

using at::Tensor;
using Result = std::tuple<Tensor, Tensor, Tensor, Tensor>;

template <typename Op, typename... Args> decltype(auto) fallback_sym(Args &&...args) {
    return at::native::call_fallback_fn_symint<&cpu_fallback, Op>::call(
        std::forward<Args>(args)...);
}

const char *mode_name(int64_t mode) { return mode == 0 ? "sum" : mode == 1 ? "mean" : "max"; }

void *ptr_or_null(const Tensor &t) { return t.defined() && t.numel() ? t.data_ptr() : nullptr; }

// Checks with CPU's rules; returns the indices and offsets in one index
// dtype (int64 when they differ, as PyTorch promotes them).
std::pair<Tensor, Tensor> check_args(const Tensor &weight, const Tensor &indices,
                                     const Tensor &offsets, int64_t mode, const Tensor &psw,
                                     bool include_last_offset) {
    TORCH_CHECK(indices.dim() == 1, "input has to be a 1D or 2D Tensor, but got Tensor of ",
                "dimension ", indices.dim());
    TORCH_CHECK(offsets.dim() == 1, "offsets has to be a 1D Tensor, but got Tensor of dimension ",
                offsets.dim());
    TORCH_CHECK(weight.dim() == 2, "weight has to be a 2D Tensor, but got Tensor of dimension ",
                weight.dim());
    for (const Tensor *t : {&indices, &offsets})
        TORCH_CHECK(t->scalar_type() == at::kLong || t->scalar_type() == at::kInt,
                    "embedding_bag: expected indices and offsets of type Long or Int, got ",
                    t->scalar_type());
    TORCH_CHECK(mode >= 0 && mode <= 2, "embedding_bag: mode must be 0 (sum), 1 (mean) or ",
                "2 (max), got ", mode);
    if (psw.defined()) {
        TORCH_CHECK(mode == 0, "embedding_bag: per_sample_weights was not None. ",
                    "per_sample_weights is only supported for mode='sum' (got mode='",
                    mode_name(mode), "'). Please open a feature request on GitHub.");
        TORCH_CHECK(psw.scalar_type() == weight.scalar_type(), "Expected tensor for argument ",
                    "#1 'per_sample_weights' to have the same type as tensor for argument #1 ",
                    "'weight'; but type ", psw.scalar_type(), " does not equal ",
                    weight.scalar_type());
        TORCH_CHECK(psw.dim() == 1 && psw.numel() == indices.numel(),
                    "embedding_bag: per_sample_weights must be 1-D with as many elements as ",
                    "indices (", indices.numel(), "), got shape ", psw.sizes());
    }
    if (include_last_offset)
        TORCH_CHECK(offsets.size(0) >= 1, "include_last_offset: number of offset should be at ",
                    "least 1");
    if (indices.scalar_type() == offsets.scalar_type())
        return {indices.contiguous(), offsets.contiguous()};
    return {indices.to(at::kLong).contiguous(), offsets.to(at::kLong).contiguous()};
}

std::optional<trn_dtype> index_dtype(const Tensor &t) { return native_dtype(t.scalar_type()); }

std::optional<Result> forward(const Tensor &weight, const Tensor &indices_in,
                              const Tensor &offsets_in, int64_t mode, const Tensor &psw_in,
                              bool include_last_offset, int64_t padding_idx) {
    auto [indices, offsets] =
        check_args(weight, indices_in, offsets_in, mode, psw_in, include_last_offset);
    auto dt = native_dtype(weight.scalar_type());
    auto it = index_dtype(indices);
    if (!dt || !it || !trn_embedding_bag_supports(*dt, *it) || padding_idx < -1 ||
        padding_idx >= weight.size(0))
        return std::nullopt;
    const Tensor w = weight.contiguous();
    const Tensor psw = psw_in.defined() ? psw_in.contiguous() : psw_in;
    const int64_t num_bags = include_last_offset ? offsets.size(0) - 1 : offsets.size(0);
    const int64_t D = weight.size(1);
    const auto lopts = weight.options().dtype(at::kLong);
    Tensor out = at::empty({num_bags, D}, weight.options());
    Tensor offset2bag = at::empty({indices.numel()}, lopts);
    Tensor bag_size = at::empty({num_bags}, lopts);
    Tensor max_indices = mode == 2 ? at::empty({num_bags, D}, lopts) : Tensor();
    trn_embedding_bag_desc d{};
    d.dtype = *dt;
    d.index_dtype = *it;
    d.mode = static_cast<trn_embedding_bag_mode>(mode);
    d.num_weights = weight.size(0);
    d.dim = D;
    d.num_indices = indices.numel();
    d.num_offsets = offsets.numel();
    d.num_bags = num_bags;
    d.padding_idx = padding_idx;
    d.weight = ptr_or_null(w);
    d.indices = ptr_or_null(indices);
    d.offsets = ptr_or_null(offsets);
    d.per_sample_weights = ptr_or_null(psw);
    d.output = ptr_or_null(out);
    d.offset2bag = static_cast<int64_t *>(ptr_or_null(offset2bag));
    d.bag_size = static_cast<int64_t *>(ptr_or_null(bag_size));
    d.max_indices = static_cast<int64_t *>(ptr_or_null(max_indices));
    trn_stream *s = current_trn_stream(weight.device().index());
    // Index and offset errors raise here, as CPU's RuntimeError (from the
    // launch itself under NEURON_LAUNCH_BLOCKING=1).
    const trn_status launched = trn_embedding_bag_launch(s, &d);
    const trn_status st = launched != TRN_SUCCESS ? launched : trn_stream_synchronize(s);
    if (st == TRN_ERROR_INVALID_ARGUMENT) {
        std::string msg = trn_last_error();
        trn_clear_error();
        TORCH_CHECK(false, msg);
    }
    TRN_CHECK(st);
    if (mode != 2) max_indices = bag_size.clone();
    return Result{out, offset2bag, bag_size, max_indices};
}

Result embedding_bag(const Tensor &weight, const Tensor &indices, const Tensor &offsets,
                     bool scale_grad_by_freq, int64_t mode, bool sparse,
                     const std::optional<Tensor> &psw, bool include_last_offset,
                     int64_t padding_idx) {
    if (auto r = forward(weight, indices, offsets, mode, psw.value_or(Tensor()),
                         include_last_offset, padding_idx)) {
        tracking::record_executed("aten::_embedding_bag");
        return *r;
    }
    return fallback<at::_ops::_embedding_bag>(weight, indices, offsets, scale_grad_by_freq, mode,
                                              sparse, psw, include_last_offset, padding_idx);
}

Result embedding_bag_forward_only(const Tensor &weight, const Tensor &indices,
                                  const Tensor &offsets, bool scale_grad_by_freq, int64_t mode,
                                  bool sparse, const std::optional<Tensor> &psw,
                                  bool include_last_offset, int64_t padding_idx) {
    if (auto r = forward(weight, indices, offsets, mode, psw.value_or(Tensor()),
                         include_last_offset, padding_idx)) {
        tracking::record_executed("aten::_embedding_bag_forward_only");
        return *r;
    }
    return fallback<at::_ops::_embedding_bag_forward_only>(weight, indices, offsets,
                                                           scale_grad_by_freq, mode, sparse, psw,
                                                           include_last_offset, padding_idx);
}

Tensor dense_backward(const Tensor &grad, const Tensor &indices, const Tensor &offset2bag,
                      const Tensor &bag_size, const Tensor &max_indices, c10::SymInt sym_nw,
                      bool scale_grad_by_freq, int64_t mode, const std::optional<Tensor> &psw_opt,
                      int64_t padding_idx) {
    const int64_t num_weights = sym_nw.guard_int(__FILE__, __LINE__);
    const Tensor psw = psw_opt.value_or(Tensor());
    auto dt = native_dtype(grad.scalar_type());
    auto it = index_dtype(indices);
    const bool ok = dt && it && trn_embedding_bag_supports(*dt, *it) && grad.dim() == 2 &&
                    indices.dim() == 1 && offset2bag.numel() == indices.numel() &&
                    offset2bag.scalar_type() == at::kLong && bag_size.scalar_type() == at::kLong &&
                    bag_size.numel() == grad.size(0) && mode >= 0 && mode <= 2 &&
                    (mode != 2 || (max_indices.scalar_type() == at::kLong &&
                                   max_indices.sizes().equals(grad.sizes()))) &&
                    (!psw.defined() || (mode == 0 && psw.scalar_type() == grad.scalar_type() &&
                                        psw.numel() == indices.numel())) &&
                    padding_idx >= -1 && padding_idx < num_weights;
    if (!ok)
        return fallback_sym<at::_ops::_embedding_bag_dense_backward>(
            grad, indices, offset2bag, bag_size, max_indices, sym_nw, scale_grad_by_freq, mode,
            psw_opt, padding_idx);
    const Tensor g = grad.contiguous(), idx = indices.contiguous(), o2b = offset2bag.contiguous();
    const Tensor bs = bag_size.contiguous();
    const Tensor mi = mode == 2 ? max_indices.contiguous() : Tensor();
    const Tensor p = psw.defined() ? psw.contiguous() : psw;
    Tensor gw = at::empty({num_weights, grad.size(1)}, grad.options());
    if (gw.numel() != 0) {
        trn_embedding_bag_desc d{};
        d.dtype = *dt;
        d.index_dtype = *it;
        d.mode = static_cast<trn_embedding_bag_mode>(mode);
        d.num_weights = num_weights;
        d.dim = grad.size(1);
        d.num_indices = idx.numel();
        d.num_bags = grad.size(0);
        d.num_offsets = d.num_bags;
        d.padding_idx = padding_idx;
        d.scale_grad_by_freq = scale_grad_by_freq;
        d.indices = ptr_or_null(idx);
        d.per_sample_weights = ptr_or_null(p);
        d.offset2bag = static_cast<int64_t *>(ptr_or_null(o2b));
        d.bag_size = static_cast<int64_t *>(ptr_or_null(bs));
        d.max_indices = static_cast<int64_t *>(ptr_or_null(mi));
        d.grad = ptr_or_null(g);
        d.grad_weight = gw.data_ptr();
        TRN_CHECK(trn_embedding_bag_backward_launch(current_trn_stream(grad.device().index()), &d));
    }
    tracking::record_executed("aten::_embedding_bag_dense_backward");
    return gw;
}

Tensor per_sample_weights_backward(const Tensor &grad, const Tensor &weight, const Tensor &indices,
                                   const Tensor &offsets, const Tensor &offset2bag, int64_t mode,
                                   int64_t padding_idx) {
    TORCH_CHECK(mode == 0, "embedding_bag_backward: per_sample_weights only supported for ",
                "mode='sum'");
    auto dt = native_dtype(grad.scalar_type());
    auto it = index_dtype(indices);
    const bool ok = dt && it && trn_embedding_bag_supports(*dt, *it) && grad.dim() == 2 &&
                    weight.dim() == 2 && weight.scalar_type() == grad.scalar_type() &&
                    weight.size(1) == grad.size(1) && indices.dim() == 1 &&
                    offset2bag.numel() == indices.numel() && offset2bag.scalar_type() == at::kLong;
    if (!ok)
        return fallback<at::_ops::_embedding_bag_per_sample_weights_backward>(
            grad, weight, indices, offsets, offset2bag, mode, padding_idx);
    const Tensor g = grad.contiguous(), w = weight.contiguous(), idx = indices.contiguous();
    const Tensor o2b = offset2bag.contiguous();
    Tensor out = at::empty({indices.numel()}, grad.options());
    if (out.numel() != 0) {
        trn_embedding_bag_desc d{};
        d.dtype = *dt;
        d.index_dtype = *it;
        d.mode = TRN_EMBEDDING_BAG_SUM;
        d.num_weights = weight.size(0);
        d.dim = weight.size(1);
        d.num_indices = idx.numel();
        d.num_bags = grad.size(0);
        d.num_offsets = d.num_bags;
        d.padding_idx = padding_idx;
        d.weight = ptr_or_null(w);
        d.indices = ptr_or_null(idx);
        d.offset2bag = static_cast<int64_t *>(ptr_or_null(o2b));
        d.grad = ptr_or_null(g);
        d.grad_per_sample_weights = out.data_ptr();
        TRN_CHECK(trn_embedding_bag_backward_launch(current_trn_stream(grad.device().index()), &d));
    }
    tracking::record_executed("aten::_embedding_bag_per_sample_weights_backward");
    return out;
}

// What autograd calls for the weight: dense gradients run the kernel above;
// sparse ones (and operands from a foreign forward without offset2bag) go
// to the CPU.
Tensor embedding_bag_backward(const Tensor &grad, const Tensor &indices, const Tensor &offsets,
                              const Tensor &offset2bag, const Tensor &bag_size,
                              const Tensor &max_indices, c10::SymInt num_weights,
                              bool scale_grad_by_freq, int64_t mode, bool sparse,
                              const std::optional<Tensor> &psw, int64_t padding_idx) {
    if (sparse || offset2bag.numel() != indices.numel())
        return fallback_sym<at::_ops::_embedding_bag_backward>(
            grad, indices, offsets, offset2bag, bag_size, max_indices, num_weights,
            scale_grad_by_freq, mode, sparse, psw, padding_idx);
    tracking::record_executed("aten::_embedding_bag_backward");
    return dense_backward(grad, indices, offset2bag, bag_size, max_indices, num_weights,
                          scale_grad_by_freq, mode, psw, padding_idx);
}

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
    m.impl("_embedding_bag_backward", TORCH_FN(embedding_bag_backward));
    m.impl("_embedding_bag", TORCH_FN(embedding_bag));
    m.impl("_embedding_bag_forward_only", TORCH_FN(embedding_bag_forward_only));
    m.impl("_embedding_bag_dense_backward", TORCH_FN(dense_backward));
    m.impl("_embedding_bag_per_sample_weights_backward", TORCH_FN(per_sample_weights_backward));
}

}  // namespace
}  // namespace neuron
