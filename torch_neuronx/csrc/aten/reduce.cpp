// aten/reduce.cpp - reductions, scans and softmax on neuron, run by
// libtrn's trn_reduce_launch / trn_scan_launch / trn_softmax_launch.
//
// PyTorch decides everything about a call: each op first runs on meta
// tensors (the same structured meta functions its CPU kernels use), which
// raises PyTorch's exact errors and gives the result's shape and dtype. This
// file then casts the input where PyTorch's CPU kernel does (sum(dtype=...),
// logsumexp of integers, ...), splits the input's dims into kept (outer) and
// reduced (inner) parts and hands libtrn one descriptor. A dtype libtrn does
// not support (complex) goes to the CPU fallback.
#include <ATen/Operators.h>
#include <ATen/native/CPUFallback.h>
#include <ATen/native/ReduceOpsUtils.h>
#include <ATen/native/Resize.h>
#include <ATen/ops/_log_softmax_backward_data_meta.h>
#include <ATen/ops/_log_softmax_meta.h>
#include <ATen/ops/_softmax_backward_data_meta.h>
#include <ATen/ops/_softmax_meta.h>
#include <ATen/ops/all_meta.h>
#include <ATen/ops/amax_meta.h>
#include <ATen/ops/amin_meta.h>
#include <ATen/ops/any_meta.h>
#include <ATen/ops/argmax_meta.h>
#include <ATen/ops/argmin_meta.h>
#include <ATen/ops/cumprod_meta.h>
#include <ATen/ops/cumsum_meta.h>
#include <ATen/ops/linalg_vector_norm_meta.h>
#include <ATen/ops/max_meta.h>
#include <ATen/ops/mean_meta.h>
#include <ATen/ops/min_meta.h>
#include <ATen/ops/prod_meta.h>
#include <ATen/ops/sum_meta.h>
#include <torch/library.h>

#include <cmath>
#include <string>
#include <vector>

#include "fallback/cpu_fallback.h"
#include "aten/float8.h"
#include "runtime/device.h"
#include "aten/meta.h"
#include "observe/op_tracking.h"

namespace neuron {
namespace {

using at::IntArrayRef;
using at::OptionalIntArrayRef;
using at::Scalar;
using at::ScalarType;
using at::Tensor;
using DimMask = at::native::DimMask;

Tensor meta_of(const Tensor &t) {
    return at::empty_strided(t.sizes(), t.strides(), t.options().device(at::kMeta));
}

// A meta tensor standing for an out= argument.
Tensor meta_out(const Tensor &out) {
    return at::empty(out.sizes(), out.options().device(at::kMeta));
}

void resize_to(Tensor &out, IntArrayRef sizes) {
    if (out.sizes() != sizes) at::native::resize_output(out, sizes);
}

void resize_like_meta(Tensor &out, const Tensor &m) {
    if (out.sizes() != m.sizes()) at::native::resize_output(out, m.sizes());
}

bool native_ok(trn_reduce_op op, ScalarType in, ScalarType out) {
    auto a = native_dtype(in);
    auto b = native_dtype(out);
    return a && b && trn_reduce_supports(op, *a, *b);
}

// Kernel dtype of each op's result given its compute (input) dtype.
ScalarType kernel_out_dtype(trn_reduce_op op, ScalarType compute) {
    switch (op) {
    case TRN_REDUCE_ARGMAX:
    case TRN_REDUCE_ARGMIN:
    case TRN_REDUCE_COUNT_NONZERO: return at::kLong;
    case TRN_REDUCE_ANY:
    case TRN_REDUCE_ALL: return compute == at::kByte ? at::kByte : at::kBool;
    default: return compute;
    }
}

bool supported(trn_reduce_op op, ScalarType compute) {
    return native_ok(op, compute, kernel_out_dtype(op, compute));
}

// Reduces `self` (cast to `compute`) over the dims in `mask` into `out`
// (and `out2`), whose shape is the kept dims with or without keepdim.
// Outputs of another dtype than the kernel's are computed into a temporary
// and copied. Records `name` as executed.
void run_reduce(trn_reduce_op op, const Tensor &self, const DimMask &mask, const Tensor &out,
                const Tensor *out2, double param, ScalarType compute, const char *name) {
    if (out.numel() != 0) {
        Tensor in = self.scalar_type() == compute ? self : self.to(compute);
        const ScalarType kout = kernel_out_dtype(op, compute);
        Tensor o =
            out.scalar_type() == kout ? out : at::empty(out.sizes(), out.options().dtype(kout));
        const ScalarType kout2 = (op == TRN_REDUCE_MAX || op == TRN_REDUCE_MIN) ? at::kLong : kout;
        Tensor o2;
        if (out2)
            o2 = out2->scalar_type() == kout2
                     ? *out2
                     : at::empty(out2->sizes(), out2->options().dtype(kout2));
        const int64_t nd = in.dim();
        const bool keep = out.dim() == nd;
        std::vector<int64_t> osz, ois, oos, oos2, isz, iis;
        int64_t k = 0;
        for (int64_t d = 0; d < nd; ++d) {
            if (mask[d]) {
                isz.push_back(in.size(d));
                iis.push_back(in.stride(d));
            } else {
                const int64_t od = keep ? d : k++;
                osz.push_back(in.size(d));
                ois.push_back(in.stride(d));
                oos.push_back(o.stride(od));
                oos2.push_back(out2 ? o2.stride(od) : 0);
            }
        }
        trn_reduce_desc desc{};
        desc.op = op;
        desc.dtype = *native_dtype(compute);
        desc.out_dtype = *native_dtype(kout);
        desc.in = in.numel() ? in.const_data_ptr() : nullptr;
        desc.out = o.data_ptr();
        desc.out2 = out2 ? o2.data_ptr() : nullptr;
        desc.outer_ndim = static_cast<int>(osz.size());
        desc.outer_sizes = osz.data();
        desc.in_outer_strides = ois.data();
        desc.out_strides = oos.data();
        desc.out2_strides = oos2.data();
        desc.inner_ndim = static_cast<int>(isz.size());
        desc.inner_sizes = isz.data();
        desc.in_inner_strides = iis.data();
        desc.param = param;
        TRN_CHECK(trn_reduce_launch(current_trn_stream(out.device().index()), &desc));
        if (!o.is_same(out)) const_cast<Tensor &>(out).copy_(o);
        if (out2 && !o2.is_same(*out2)) const_cast<Tensor &>(*out2).copy_(o2);
    }
    tracking::record_executed(name);
}

DimMask mask_of(OptionalIntArrayRef dim, int64_t ndim, bool allow_empty = false) {
    return at::native::make_dim_mask(dim, ndim, allow_empty);
}

// The result shape of reducing `dim` (none or empty: all dims), with
// PyTorch's errors for bad or repeated dims.
at::DimVector reduced_shape(const Tensor &self, OptionalIntArrayRef dim, bool keepdim) {
    return at::native::shape_from_dim_mask(self, mask_of(dim, self.dim()), keepdim);
}

DimMask mask_one(int64_t dim, int64_t ndim) {
    DimMask m;
    if (ndim > 0) m.set(c10::maybe_wrap_dim(dim, ndim));
    return m;
}

// ---------------------------------------------------------------------------
// sum / mean / prod
// ---------------------------------------------------------------------------
// The dims a reduction's `dim` argument names: a list (none or empty: all
// dims) or one dim.
DimMask mask_for(OptionalIntArrayRef dim, int64_t ndim) { return mask_of(dim, ndim); }
DimMask mask_for(int64_t dim, int64_t ndim) { return mask_one(dim, ndim); }

// sum / mean / prod over `dim` with an optional result dtype: the functional
// form (FnOp) and the out= form (OutOp), shaped by the structured meta S.
template <typename FnOp, typename OutOp, typename S, trn_reduce_op OP, typename Dim>
struct DtypeReduceOp {
    static Tensor fn(const Tensor &self, Dim dim, bool keepdim, std::optional<ScalarType> dtype) {
        MetaShape<S> m;
        m.meta(self, dim, keepdim, dtype);
        if (!supported(OP, m.dtype(0))) return fallback<FnOp>(self, dim, keepdim, dtype);
        Tensor out = m.output(0);
        run_reduce(OP, self, mask_for(dim, self.dim()), out, nullptr, 0, m.dtype(0), FnOp::name);
        return out;
    }
    static Tensor &out(const Tensor &self, Dim dim, bool keepdim, std::optional<ScalarType> dtype,
                       Tensor &out) {
        MetaShape<S> m(&out);
        m.meta(self, dim, keepdim, dtype);
        check_out_overlap(out, self);
        if (!supported(OP, out.scalar_type()))
            return fallback<OutOp>(self, dim, keepdim, dtype, out);
        resize_to(out, m.sizes(0));
        run_reduce(OP, self, mask_for(dim, self.dim()), out, nullptr, 0, out.scalar_type(),
                   FnOp::name);
        return out;
    }
};

using SumOp =
    DtypeReduceOp<at::_ops::sum_dim_IntList, at::_ops::sum_IntList_out,
                  at::meta::structured_sum_dim_IntList, TRN_REDUCE_SUM, OptionalIntArrayRef>;
using MeanOp = DtypeReduceOp<at::_ops::mean_dim, at::_ops::mean_out, at::meta::structured_mean_dim,
                             TRN_REDUCE_MEAN, OptionalIntArrayRef>;
using ProdOp = DtypeReduceOp<at::_ops::prod_dim_int, at::_ops::prod_int_out,
                             at::meta::structured_prod_dim_int, TRN_REDUCE_PROD, int64_t>;

Tensor prod_full(const Tensor &self, std::optional<ScalarType> dtype) {
    const ScalarType t = at::native::get_dtype_from_self(self, dtype, /*promote_integers=*/true);
    if (!supported(TRN_REDUCE_PROD, t)) return fallback<at::_ops::prod>(self, dtype);
    Tensor out = at::empty({}, self.options().dtype(t));
    run_reduce(TRN_REDUCE_PROD, self, mask_of(std::nullopt, self.dim()), out, nullptr, 0, t,
               "aten::prod");
    return out;
}

// ---------------------------------------------------------------------------
// amax / amin / max / min / argmax / argmin
// ---------------------------------------------------------------------------
// The meta functions of amax/amin/max/min do not raise PyTorch CPU's
// errors for empty reductions; these checks do, with the same messages.
template <typename Op> std::string fn_name() {
    std::string n = Op::name;
    return n.substr(n.find("::") + 2) + "()";
}

template <typename FnOp, typename OutOp, typename S, trn_reduce_op OP> struct AminmaxOp {
    static Tensor fn(const Tensor &self, IntArrayRef dim, bool keepdim) {
        if (self.numel() == 0)
            at::native::zero_numel_check_dims(self, dim, fn_name<FnOp>().c_str());
        MetaShape<S> m;
        m.meta(self, dim, keepdim);
        if (Tensor r; float8_extreme(OP == TRN_REDUCE_AMAX, self, dim, keepdim, r)) return r;
        if (!supported(OP, self.scalar_type())) return fallback<FnOp>(self, dim, keepdim);
        Tensor out = m.output(0);
        run_reduce(OP, self, mask_of(dim, self.dim()), out, nullptr, 0, self.scalar_type(),
                   FnOp::name);
        return out;
    }
    static Tensor &out(const Tensor &self, IntArrayRef dim, bool keepdim, Tensor &result) {
        if (self.numel() == 0)
            at::native::zero_numel_check_dims(self, dim, fn_name<FnOp>().c_str());
        MetaShape<S> m(&result);
        m.meta(self, dim, keepdim);
        check_out_overlap(result, self);
        if (result.scalar_type() == self.scalar_type() &&
            float8_extreme(OP == TRN_REDUCE_AMAX, self, dim, keepdim, result))
            return result;
        if (!supported(OP, self.scalar_type())) return fallback<OutOp>(self, dim, keepdim, result);
        resize_to(result, m.sizes(0));
        run_reduce(OP, self, mask_of(dim, self.dim()), result, nullptr, 0, self.scalar_type(),
                   OutOp::name);
        return result;
    }
};

// max() / min(): the extreme of all elements (NaN propagates).
template <typename FnOp, trn_reduce_op OP> Tensor full_extreme(const Tensor &self) {
    TORCH_CHECK(self.numel() > 0, fn_name<FnOp>(),
                ": Expected reduction dim to be specified for input.numel() == 0. Specify the "
                "reduction dim with the 'dim' argument.");
    if (!supported(OP, self.scalar_type())) return fallback<FnOp>(self);
    Tensor out = at::empty({}, self.options());
    run_reduce(OP, self, mask_of(std::nullopt, self.dim()), out, nullptr, 0, self.scalar_type(),
               FnOp::name);
    return out;
}

template <typename FnOp, typename OutOp, typename S, trn_reduce_op OP> struct MaxDimOp {
    static std::tuple<Tensor, Tensor> fn(const Tensor &self, int64_t dim, bool keepdim) {
        if (self.numel() == 0)
            at::native::zero_numel_check_dims(self, dim, fn_name<FnOp>().c_str());
        MetaShape<S> m;
        m.meta(self, dim, keepdim);
        if (!supported(OP, self.scalar_type())) return fallback<FnOp>(self, dim, keepdim);
        Tensor values = m.output(0);
        Tensor indices = m.output(1);
        run_reduce(OP, self, mask_one(dim, self.dim()), values, &indices, 0, self.scalar_type(),
                   FnOp::name);
        return {values, indices};
    }
    static std::tuple<Tensor &, Tensor &> out(const Tensor &self, int64_t dim, bool keepdim,
                                              Tensor &values, Tensor &indices) {
        if (self.numel() == 0)
            at::native::zero_numel_check_dims(self, dim, fn_name<FnOp>().c_str());
        MetaShape<S> m(&values, &indices);
        m.meta(self, dim, keepdim);
        check_out_overlap(values, self);
        check_out_overlap(indices, self);
        if (!supported(OP, self.scalar_type()))
            return fallback<OutOp>(self, dim, keepdim, values, indices);
        resize_to(values, m.sizes(0));
        resize_to(indices, m.sizes(1));
        run_reduce(OP, self, mask_one(dim, self.dim()), values, &indices, 0, self.scalar_type(),
                   OutOp::name);
        return {values, indices};
    }
};

template <typename FnOp, typename OutOp, typename S, trn_reduce_op OP> struct ArgOp {
    static DimMask mask(const Tensor &self, std::optional<int64_t> dim) {
        return dim ? mask_one(*dim, self.dim()) : mask_of(std::nullopt, self.dim());
    }
    static Tensor fn(const Tensor &self, std::optional<int64_t> dim, bool keepdim) {
        MetaShape<S> m;
        m.meta(self, dim, keepdim);
        if (!supported(OP, self.scalar_type())) return fallback<FnOp>(self, dim, keepdim);
        Tensor out = m.output(0);
        run_reduce(OP, self, mask(self, dim), out, nullptr, 0, self.scalar_type(), FnOp::name);
        return out;
    }
    static Tensor &out(const Tensor &self, std::optional<int64_t> dim, bool keepdim,
                       Tensor &result) {
        MetaShape<S> m(&result);
        m.meta(self, dim, keepdim);
        check_out_overlap(result, self);
        if (!supported(OP, self.scalar_type())) return fallback<OutOp>(self, dim, keepdim, result);
        resize_to(result, m.sizes(0));
        run_reduce(OP, self, mask(self, dim), result, nullptr, 0, self.scalar_type(), OutOp::name);
        return result;
    }
};

// ---------------------------------------------------------------------------
// var / std (+ mean)
// ---------------------------------------------------------------------------
double correction_of(const std::optional<Scalar> &c) { return c ? c->toDouble() : 1.0; }

// PyTorch CPU's warning when the correction leaves no degrees of freedom.
template <typename Op>
void warn_dof(const Tensor &self, const Tensor &out, const std::optional<Scalar> &correction) {
    const int64_t n = out.numel() == 0 ? 0 : self.numel() / out.numel();
    if (static_cast<double>(n) - correction_of(correction) <= 0) {
        std::string name = Op::name;
        TORCH_WARN(name.substr(name.find("::") + 2),
                   "(): degrees of freedom is <= 0. Correction should be strictly less than the "
                   "reduction factor (input numel divided by output numel).");
    }
}

template <typename FnOp, typename OutOp, trn_reduce_op OP> struct VarOp {
    static Tensor fn(const Tensor &self, OptionalIntArrayRef dim,
                     const std::optional<Scalar> &correction, bool keepdim) {
        if (!supported(OP, self.scalar_type()))
            return fallback<FnOp>(self, dim, correction, keepdim);
        Tensor out = at::empty(reduced_shape(self, dim, keepdim), self.options());
        warn_dof<FnOp>(self, out, correction);
        run_reduce(OP, self, mask_of(dim, self.dim()), out, nullptr, correction_of(correction),
                   self.scalar_type(), FnOp::name);
        return out;
    }
    static Tensor &out(const Tensor &self, OptionalIntArrayRef dim,
                       const std::optional<Scalar> &correction, bool keepdim, Tensor &result) {
        // CPU's std_var_out checks (the meta function words them otherwise).
        check_out_device(result, self.device());
        if (!self.is_complex())
            TORCH_CHECK(at::canCast(self.scalar_type(), result.scalar_type()), "result type ",
                        self.scalar_type(), " can't be cast to the desired output type ",
                        result.scalar_type());
        Tensor mo = meta_out(result);
        OutOp::call(meta_of(self), dim, correction, keepdim, mo);
        check_out_overlap(result, self);
        if (!supported(OP, self.scalar_type()))
            return fallback<OutOp>(self, dim, correction, keepdim, result);
        resize_like_meta(result, mo);
        run_reduce(OP, self, mask_of(dim, self.dim()), result, nullptr, correction_of(correction),
                   self.scalar_type(), OutOp::name);
        return result;
    }
};

template <typename FnOp, trn_reduce_op OP>
std::tuple<Tensor, Tensor> var_mean(const Tensor &self, OptionalIntArrayRef dim,
                                    const std::optional<Scalar> &correction, bool keepdim) {
    if (!supported(OP, self.scalar_type())) return fallback<FnOp>(self, dim, correction, keepdim);
    const auto shape = reduced_shape(self, dim, keepdim);
    Tensor v = at::empty(shape, self.options());
    Tensor mean = at::empty(shape, self.options());
    warn_dof<FnOp>(self, v, correction);
    run_reduce(OP, self, mask_of(dim, self.dim()), v, &mean, correction_of(correction),
               self.scalar_type(), FnOp::name);
    return {v, mean};
}

// ---------------------------------------------------------------------------
// norms and logsumexp
// ---------------------------------------------------------------------------
bool norm_run(const Tensor &self, double p, OptionalIntArrayRef dim, const Tensor &out,
              const char *name) {
    const ScalarType compute = out.scalar_type();
    if (!supported(TRN_REDUCE_NORM, compute) || self.is_complex()) return false;
    run_reduce(TRN_REDUCE_NORM, self, mask_of(dim, self.dim()), out, nullptr, p, compute, name);
    return true;
}

Tensor vector_norm(const Tensor &self, const Scalar &ord, OptionalIntArrayRef dim, bool keepdim,
                   std::optional<ScalarType> dtype) {
    MetaShape<at::meta::structured_linalg_vector_norm> m;
    m.meta(self, ord, dim, keepdim, dtype);
    Tensor out = m.output(0);
    if (!norm_run(self, ord.toDouble(), dim, out, "aten::linalg_vector_norm"))
        return fallback<at::_ops::linalg_vector_norm>(self, ord, dim, keepdim, dtype);
    return out;
}

Tensor &vector_norm_out(const Tensor &self, const Scalar &ord, OptionalIntArrayRef dim,
                        bool keepdim, std::optional<ScalarType> dtype, Tensor &result) {
    MetaShape<at::meta::structured_linalg_vector_norm> m(&result);
    m.meta(self, ord, dim, keepdim, dtype);
    check_out_overlap(result, self);
    if (!supported(TRN_REDUCE_NORM, result.scalar_type()) || self.is_complex())
        return fallback<at::_ops::linalg_vector_norm_out>(self, ord, dim, keepdim, dtype, result);
    resize_to(result, m.sizes(0));
    norm_run(self, ord.toDouble(), dim, result, "aten::linalg_vector_norm");
    return result;
}

double norm_p(const std::optional<Scalar> &p) { return p ? p->toDouble() : 2.0; }

Tensor norm_dim(const Tensor &self, const std::optional<Scalar> &p, IntArrayRef dim, bool keepdim) {
    Tensor m = at::_ops::norm_ScalarOpt_dim::call(meta_of(self), p, dim, keepdim);
    Tensor out = at::empty(m.sizes(), self.options().dtype(m.scalar_type()));
    if (!norm_run(self, norm_p(p), dim, out, "aten::norm"))
        return fallback<at::_ops::norm_ScalarOpt_dim>(self, p, dim, keepdim);
    return out;
}

Tensor norm_dim_dtype(const Tensor &self, const std::optional<Scalar> &p, IntArrayRef dim,
                      bool keepdim, ScalarType dtype) {
    Tensor m = at::_ops::norm_ScalarOpt_dim_dtype::call(meta_of(self), p, dim, keepdim, dtype);
    Tensor out = at::empty(m.sizes(), self.options().dtype(m.scalar_type()));
    if (!norm_run(self, norm_p(p), dim, out, "aten::norm"))
        return fallback<at::_ops::norm_ScalarOpt_dim_dtype>(self, p, dim, keepdim, dtype);
    return out;
}

Tensor &norm_out(const Tensor &self, const std::optional<Scalar> &p, IntArrayRef dim, bool keepdim,
                 Tensor &result) {
    check_out_device(result, self.device());
    Tensor mo = meta_out(result);
    at::_ops::norm_out::call(meta_of(self), p, dim, keepdim, mo);
    check_out_overlap(result, self);
    if (!supported(TRN_REDUCE_NORM, result.scalar_type()) || self.is_complex())
        return fallback<at::_ops::norm_out>(self, p, dim, keepdim, result);
    resize_like_meta(result, mo);
    norm_run(self, norm_p(p), dim, result, "aten::norm");
    return result;
}

Tensor &norm_dtype_out(const Tensor &self, const std::optional<Scalar> &p, IntArrayRef dim,
                       bool keepdim, ScalarType dtype, Tensor &result) {
    check_out_device(result, self.device());
    Tensor mo = meta_out(result);
    at::_ops::norm_dtype_out::call(meta_of(self), p, dim, keepdim, dtype, mo);
    check_out_overlap(result, self);
    if (!supported(TRN_REDUCE_NORM, result.scalar_type()) || self.is_complex())
        return fallback<at::_ops::norm_dtype_out>(self, p, dim, keepdim, dtype, result);
    resize_like_meta(result, mo);
    norm_run(self, norm_p(p), dim, result, "aten::norm");
    return result;
}

Tensor logsumexp(const Tensor &self, IntArrayRef dim, bool keepdim) {
    // Integers (and bool) compute in the default float dtype, as on CPU.
    const ScalarType t = at::isIntegralType(self.scalar_type(), /*includeBool=*/true)
                             ? c10::typeMetaToScalarType(c10::get_default_dtype())
                             : self.scalar_type();
    if (dim.empty() || !supported(TRN_REDUCE_LOGSUMEXP, t) || self.is_complex())
        return fallback<at::_ops::logsumexp>(self, dim, keepdim);
    Tensor out = at::empty(reduced_shape(self, dim, keepdim), self.options().dtype(t));
    run_reduce(TRN_REDUCE_LOGSUMEXP, self, mask_of(dim, self.dim()), out, nullptr, 0, t,
               "aten::logsumexp");
    return out;
}

Tensor &logsumexp_out(const Tensor &self, IntArrayRef dim, bool keepdim, Tensor &result) {
    // CPU's logsumexp_out checks (the meta function words them otherwise).
    check_out_device(result, self.device());
    TORCH_CHECK(at::isFloatingType(result.scalar_type()) || at::isComplexType(result.scalar_type()),
                "logsumexp(): Expected floating point type for result tensor, but got: ",
                result.scalar_type());
    Tensor mo = meta_out(result);
    at::_ops::logsumexp_out::call(meta_of(self), dim, keepdim, mo);
    check_out_overlap(result, self);
    if (!supported(TRN_REDUCE_LOGSUMEXP, result.scalar_type()) || self.is_complex())
        return fallback<at::_ops::logsumexp_out>(self, dim, keepdim, result);
    resize_like_meta(result, mo);
    run_reduce(TRN_REDUCE_LOGSUMEXP, self, mask_of(dim, self.dim()), result, nullptr, 0,
               result.scalar_type(), "aten::logsumexp");
    return result;
}

// ---------------------------------------------------------------------------
// any / all / count_nonzero
// ---------------------------------------------------------------------------
template <trn_reduce_op OP, typename FullOp, typename DimOp, typename DimsOp, typename FullOut,
          typename DimOut, typename DimsOut, typename SFull, typename SDim, typename SDims>
struct AnyAllOp {
    static bool run(const Tensor &self, const DimMask &mask, const Tensor &out) {
        if (!supported(OP, self.scalar_type())) return false;
        run_reduce(OP, self, mask, out, nullptr, 0, self.scalar_type(), FullOp::name);
        return true;
    }
    static Tensor full(const Tensor &self) {
        MetaShape<SFull> m;
        m.meta(self);
        Tensor out = m.output(0);
        if (!run(self, mask_of(std::nullopt, self.dim()), out)) return fallback<FullOp>(self);
        return out;
    }
    static Tensor dim(const Tensor &self, int64_t d, bool keepdim) {
        MetaShape<SDim> m;
        m.meta(self, d, keepdim);
        Tensor out = m.output(0);
        if (!run(self, mask_one(d, self.dim()), out)) return fallback<DimOp>(self, d, keepdim);
        return out;
    }
    static Tensor dims(const Tensor &self, OptionalIntArrayRef d, bool keepdim) {
        MetaShape<SDims> m;
        m.meta(self, d, keepdim);
        Tensor out = m.output(0);
        if (!run(self, mask_of(d, self.dim(), /*allow_empty=*/true), out))
            return fallback<DimsOp>(self, d, keepdim);
        return out;
    }
    static Tensor &full_out(const Tensor &self, Tensor &result) {
        MetaShape<SFull> m(&result);
        m.meta(self);
        check_out_overlap(result, self);
        if (!supported(OP, self.scalar_type())) return fallback<FullOut>(self, result);
        resize_to(result, m.sizes(0));
        run(self, mask_of(std::nullopt, self.dim()), result);
        return result;
    }
    static Tensor &dim_out(const Tensor &self, int64_t d, bool keepdim, Tensor &result) {
        MetaShape<SDim> m(&result);
        m.meta(self, d, keepdim);
        check_out_overlap(result, self);
        if (!supported(OP, self.scalar_type())) return fallback<DimOut>(self, d, keepdim, result);
        resize_to(result, m.sizes(0));
        run(self, mask_one(d, self.dim()), result);
        return result;
    }
    static Tensor &dims_out(const Tensor &self, OptionalIntArrayRef d, bool keepdim,
                            Tensor &result) {
        MetaShape<SDims> m(&result);
        m.meta(self, d, keepdim);
        check_out_overlap(result, self);
        if (!supported(OP, self.scalar_type())) return fallback<DimsOut>(self, d, keepdim, result);
        resize_to(result, m.sizes(0));
        run(self, mask_of(d, self.dim(), /*allow_empty=*/true), result);
        return result;
    }
};

Tensor count_nonzero_dims(const Tensor &self, IntArrayRef dim) {
    if (!supported(TRN_REDUCE_COUNT_NONZERO, self.scalar_type()))
        return fallback<at::_ops::count_nonzero_dim_IntList>(self, dim);
    Tensor out = at::empty(reduced_shape(self, dim, false), self.options().dtype(at::kLong));
    run_reduce(TRN_REDUCE_COUNT_NONZERO, self, mask_of(dim, self.dim()), out, nullptr, 0,
               self.scalar_type(), "aten::count_nonzero");
    return out;
}

// ---------------------------------------------------------------------------
// cumsum / cumprod
// ---------------------------------------------------------------------------
bool scan_supported(trn_scan_op op, ScalarType t) {
    // PyTorch has no bool cumsum / cumprod kernel (CPU nor CUDA): the CPU
    // path raises its NotImplementedError.
    if (t == at::kBool) return false;
    auto d = native_dtype(t);
    return d && trn_scan_supports(op, *d);
}

// Scans `self` (cast to out's dtype, as PyTorch's CPU kernel does) along
// `dim` into `out` (same shape).
void run_scan(trn_scan_op op, const Tensor &self, int64_t dim, const Tensor &out,
              const char *name) {
    if (out.numel() != 0) {
        Tensor in = self.scalar_type() == out.scalar_type() ? self : self.to(out.scalar_type());
        const int64_t nd = in.dim();
        std::vector<int64_t> osz, ois, oos;
        int64_t len = 1, is = 1, os = 1;
        if (nd > 0) {
            dim = c10::maybe_wrap_dim(dim, nd);
            len = in.size(dim);
            is = in.stride(dim);
            os = out.stride(dim);
        }
        for (int64_t d = 0; d < nd; ++d) {
            if (d == dim) continue;
            osz.push_back(in.size(d));
            ois.push_back(in.stride(d));
            oos.push_back(out.stride(d));
        }
        trn_scan_desc desc{};
        desc.op = op;
        desc.dtype = *native_dtype(out.scalar_type());
        desc.in = in.const_data_ptr();
        desc.out = out.data_ptr();
        desc.outer_ndim = static_cast<int>(osz.size());
        desc.outer_sizes = osz.data();
        desc.in_outer_strides = ois.data();
        desc.out_outer_strides = oos.data();
        desc.len = len;
        desc.in_stride = is;
        desc.out_stride = os;
        TRN_CHECK(trn_scan_launch(current_trn_stream(out.device().index()), &desc));
    }
    tracking::record_executed(name);
}

template <trn_scan_op OP, typename FnOp, typename InOp, typename OutOp, typename S> struct ScanOp {
    static Tensor fn(const Tensor &self, int64_t dim, std::optional<ScalarType> dtype) {
        MetaShape<S> m;
        m.meta(self, dim, dtype);
        if (!scan_supported(OP, m.dtype(0))) return fallback<FnOp>(self, dim, dtype);
        Tensor out = m.output(0);
        run_scan(OP, self, dim, out, FnOp::name);
        return out;
    }
    static Tensor &inplace(Tensor &self, int64_t dim, std::optional<ScalarType> dtype) {
        Tensor ms = meta_of(self);
        InOp::call(ms, dim, dtype);
        if (!scan_supported(OP, self.scalar_type())) return fallback<InOp>(self, dim, dtype);
        run_scan(OP, self, dim, self, InOp::name);
        return self;
    }
    static Tensor &out(const Tensor &self, int64_t dim, std::optional<ScalarType> dtype,
                       Tensor &result) {
        MetaShape<S> m(&result);
        m.meta(self, dim, dtype);
        check_out_overlap(result, self);
        if (!scan_supported(OP, result.scalar_type()))
            return fallback<OutOp>(self, dim, dtype, result);
        resize_to(result, m.sizes(0));
        // out = self (or its memory): the scan reads what it has overwritten.
        if (out_aliases(result, self) || !result.is_non_overlapping_and_dense()) {
            Tensor tmp = at::empty(result.sizes(), result.options());
            run_scan(OP, self, dim, tmp, OutOp::name);
            result.copy_(tmp);
        } else {
            run_scan(OP, self, dim, result, OutOp::name);
        }
        return result;
    }
};

// ---------------------------------------------------------------------------
// softmax / log_softmax and their backward
// ---------------------------------------------------------------------------
bool softmax_supported(trn_softmax_op op, ScalarType t) {
    auto d = native_dtype(t);
    return d && trn_softmax_supports(op, *d);
}

// in (and grad) are made contiguous in dtype `t`; out receives the result.
void run_softmax(trn_softmax_op op, const Tensor &in_, const Tensor *grad_, int64_t dim,
                 const Tensor &out, ScalarType t, const char *name) {
    if (out.numel() != 0) {
        Tensor in = in_.to(t).contiguous();
        Tensor grad = grad_ ? grad_->to(t).contiguous() : Tensor();
        const bool direct = out.scalar_type() == t && out.is_contiguous();
        Tensor o = direct ? out : at::empty(in.sizes(), in.options());
        const int64_t nd = in.dim();
        int64_t outer = 1, len = 1, inner = 1;
        if (nd > 0) {
            dim = c10::maybe_wrap_dim(dim, nd);
            for (int64_t d = 0; d < dim; ++d) outer *= in.size(d);
            len = in.size(dim);
            for (int64_t d = dim + 1; d < nd; ++d) inner *= in.size(d);
        }
        trn_softmax_desc desc{};
        desc.op = op;
        desc.dtype = *native_dtype(t);
        desc.in = in.const_data_ptr();
        desc.grad = grad_ ? grad.const_data_ptr() : nullptr;
        desc.out = o.data_ptr();
        desc.outer = outer;
        desc.dim = len;
        desc.inner = inner;
        TRN_CHECK(trn_softmax_launch(current_trn_stream(out.device().index()), &desc));
        if (!direct) const_cast<Tensor &>(out).copy_(o);
    }
    tracking::record_executed(name);
}

template <trn_softmax_op OP, typename FnOp, typename OutOp, typename S> struct SoftmaxOp {
    // half_to_float: PyTorch computes in float32 and returns float32; the
    // input is converted first (exact), so the kernel runs in float32.
    static Tensor fn(const Tensor &self, int64_t dim, bool half_to_float) {
        MetaShape<S> m;
        m.meta(self, dim, half_to_float);
        if (!softmax_supported(OP, m.dtype(0))) return fallback<FnOp>(self, dim, half_to_float);
        Tensor out = m.output(0);
        run_softmax(OP, self, nullptr, dim, out, m.dtype(0), FnOp::name);
        return out;
    }
    static Tensor &out(const Tensor &self, int64_t dim, bool half_to_float, Tensor &result) {
        MetaShape<S> m(&result);
        m.meta(self, dim, half_to_float);
        check_out_overlap(result, self);
        const ScalarType t = half_to_float ? at::kFloat : self.scalar_type();
        if (!softmax_supported(OP, t)) return fallback<OutOp>(self, dim, half_to_float, result);
        resize_to(result, m.sizes(0));
        if (out_aliases(result, self)) {  // the kernel reads each row more than once
            Tensor tmp = at::empty(result.sizes(), result.options());
            run_softmax(OP, self, nullptr, dim, tmp, t, OutOp::name);
            result.copy_(tmp);
        } else {
            run_softmax(OP, self, nullptr, dim, result, t, OutOp::name);
        }
        return result;
    }
};

template <trn_softmax_op OP, typename FnOp, typename OutOp, typename S> struct SoftmaxBackwardOp {
    static Tensor fn(const Tensor &grad, const Tensor &output, int64_t dim,
                     ScalarType input_dtype) {
        MetaShape<S> m;
        m.meta(grad, output, dim, input_dtype);
        if (!softmax_supported(OP, grad.scalar_type()) ||
            output.scalar_type() != grad.scalar_type())
            return fallback<FnOp>(grad, output, dim, input_dtype);
        Tensor out = m.output(0);
        run_softmax(OP, output, &grad, dim, out, grad.scalar_type(), FnOp::name);
        return out;
    }
    static Tensor &out(const Tensor &grad, const Tensor &output, int64_t dim,
                       ScalarType input_dtype, Tensor &result) {
        MetaShape<S> m(&result);
        m.meta(grad, output, dim, input_dtype);
        check_out_overlap(result, grad, output);
        if (!softmax_supported(OP, grad.scalar_type()) ||
            output.scalar_type() != grad.scalar_type())
            return fallback<OutOp>(grad, output, dim, input_dtype, result);
        resize_to(result, m.sizes(0));
        if (out_aliases(result, grad, output)) {  // the kernel reads each row more than once
            Tensor tmp = at::empty(result.sizes(), result.options());
            run_softmax(OP, output, &grad, dim, tmp, grad.scalar_type(), OutOp::name);
            result.copy_(tmp);
        } else {
            run_softmax(OP, output, &grad, dim, result, grad.scalar_type(), OutOp::name);
        }
        return result;
    }
};

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
    m.impl("sum.dim_IntList", TORCH_FN(SumOp::fn));
    m.impl("sum.IntList_out", TORCH_FN(SumOp::out));
    m.impl("mean.dim", TORCH_FN(MeanOp::fn));
    m.impl("mean.out", TORCH_FN(MeanOp::out));
    m.impl("prod", TORCH_FN(prod_full));
    m.impl("prod.dim_int", TORCH_FN(ProdOp::fn));
    m.impl("prod.int_out", TORCH_FN(ProdOp::out));

    using Amax =
        AminmaxOp<at::_ops::amax, at::_ops::amax_out, at::meta::structured_amax, TRN_REDUCE_AMAX>;
    using Amin =
        AminmaxOp<at::_ops::amin, at::_ops::amin_out, at::meta::structured_amin, TRN_REDUCE_AMIN>;
    m.impl("amax", TORCH_FN(Amax::fn));
    m.impl("amax.out", TORCH_FN(Amax::out));
    m.impl("amin", TORCH_FN(Amin::fn));
    m.impl("amin.out", TORCH_FN(Amin::out));
    m.impl("max", TORCH_FN((full_extreme<at::_ops::max, TRN_REDUCE_AMAX>)));
    m.impl("min", TORCH_FN((full_extreme<at::_ops::min, TRN_REDUCE_AMIN>)));
    using MaxDim = MaxDimOp<at::_ops::max_dim, at::_ops::max_dim_max, at::meta::structured_max_dim,
                            TRN_REDUCE_MAX>;
    using MinDim = MaxDimOp<at::_ops::min_dim, at::_ops::min_dim_min, at::meta::structured_min_dim,
                            TRN_REDUCE_MIN>;
    m.impl("max.dim", TORCH_FN(MaxDim::fn));
    m.impl("max.dim_max", TORCH_FN(MaxDim::out));
    m.impl("min.dim", TORCH_FN(MinDim::fn));
    m.impl("min.dim_min", TORCH_FN(MinDim::out));
    using Argmax = ArgOp<at::_ops::argmax, at::_ops::argmax_out, at::meta::structured_argmax,
                         TRN_REDUCE_ARGMAX>;
    using Argmin = ArgOp<at::_ops::argmin, at::_ops::argmin_out, at::meta::structured_argmin,
                         TRN_REDUCE_ARGMIN>;
    m.impl("argmax", TORCH_FN(Argmax::fn));
    m.impl("argmax.out", TORCH_FN(Argmax::out));
    m.impl("argmin", TORCH_FN(Argmin::fn));
    m.impl("argmin.out", TORCH_FN(Argmin::out));

    using Var = VarOp<at::_ops::var_correction, at::_ops::var_correction_out, TRN_REDUCE_VAR>;
    using Std = VarOp<at::_ops::std_correction, at::_ops::std_correction_out, TRN_REDUCE_STD>;
    m.impl("var.correction", TORCH_FN(Var::fn));
    m.impl("var.correction_out", TORCH_FN(Var::out));
    m.impl("std.correction", TORCH_FN(Std::fn));
    m.impl("std.correction_out", TORCH_FN(Std::out));
    m.impl("var_mean.correction",
           TORCH_FN((var_mean<at::_ops::var_mean_correction, TRN_REDUCE_VAR_MEAN>)));
    m.impl("std_mean.correction",
           TORCH_FN((var_mean<at::_ops::std_mean_correction, TRN_REDUCE_STD_MEAN>)));

    m.impl("linalg_vector_norm", TORCH_FN(vector_norm));
    m.impl("linalg_vector_norm.out", TORCH_FN(vector_norm_out));
    m.impl("norm.ScalarOpt_dim", TORCH_FN(norm_dim));
    m.impl("norm.ScalarOpt_dim_dtype", TORCH_FN(norm_dim_dtype));
    m.impl("norm.out", TORCH_FN(norm_out));
    m.impl("norm.dtype_out", TORCH_FN(norm_dtype_out));
    m.impl("logsumexp", TORCH_FN(logsumexp));
    m.impl("logsumexp.out", TORCH_FN(logsumexp_out));

    using Any = AnyAllOp<TRN_REDUCE_ANY, at::_ops::any, at::_ops::any_dim, at::_ops::any_dims,
                         at::_ops::any_all_out, at::_ops::any_out, at::_ops::any_dims_out,
                         at::meta::structured_any, at::meta::structured_any_dim,
                         at::meta::structured_any_dims>;
    using All = AnyAllOp<TRN_REDUCE_ALL, at::_ops::all, at::_ops::all_dim, at::_ops::all_dims,
                         at::_ops::all_all_out, at::_ops::all_out, at::_ops::all_dims_out,
                         at::meta::structured_all, at::meta::structured_all_dim,
                         at::meta::structured_all_dims>;
    m.impl("any", TORCH_FN(Any::full));
    m.impl("any.dim", TORCH_FN(Any::dim));
    m.impl("any.dims", TORCH_FN(Any::dims));
    m.impl("any.all_out", TORCH_FN(Any::full_out));
    m.impl("any.out", TORCH_FN(Any::dim_out));
    m.impl("any.dims_out", TORCH_FN(Any::dims_out));
    m.impl("all", TORCH_FN(All::full));
    m.impl("all.dim", TORCH_FN(All::dim));
    m.impl("all.dims", TORCH_FN(All::dims));
    m.impl("all.all_out", TORCH_FN(All::full_out));
    m.impl("all.out", TORCH_FN(All::dim_out));
    m.impl("all.dims_out", TORCH_FN(All::dims_out));
    m.impl("count_nonzero.dim_IntList", TORCH_FN(count_nonzero_dims));

    using Cumsum = ScanOp<TRN_SCAN_CUMSUM, at::_ops::cumsum, at::_ops::cumsum_,
                          at::_ops::cumsum_out, at::meta::structured_cumsum>;
    using Cumprod = ScanOp<TRN_SCAN_CUMPROD, at::_ops::cumprod, at::_ops::cumprod_,
                           at::_ops::cumprod_out, at::meta::structured_cumprod>;
    m.impl("cumsum", TORCH_FN(Cumsum::fn));
    m.impl("cumsum_", TORCH_FN(Cumsum::inplace));
    m.impl("cumsum.out", TORCH_FN(Cumsum::out));
    m.impl("cumprod", TORCH_FN(Cumprod::fn));
    m.impl("cumprod_", TORCH_FN(Cumprod::inplace));
    m.impl("cumprod.out", TORCH_FN(Cumprod::out));

    using Softmax = SoftmaxOp<TRN_SOFTMAX, at::_ops::_softmax, at::_ops::_softmax_out,
                              at::meta::structured__softmax>;
    using LogSoftmax = SoftmaxOp<TRN_LOG_SOFTMAX, at::_ops::_log_softmax,
                                 at::_ops::_log_softmax_out, at::meta::structured__log_softmax>;
    m.impl("_softmax", TORCH_FN(Softmax::fn));
    m.impl("_softmax.out", TORCH_FN(Softmax::out));
    m.impl("_log_softmax", TORCH_FN(LogSoftmax::fn));
    m.impl("_log_softmax.out", TORCH_FN(LogSoftmax::out));
    using SoftmaxBw = SoftmaxBackwardOp<TRN_SOFTMAX_BACKWARD, at::_ops::_softmax_backward_data,
                                        at::_ops::_softmax_backward_data_out,
                                        at::meta::structured__softmax_backward_data>;
    using LogSoftmaxBw =
        SoftmaxBackwardOp<TRN_LOG_SOFTMAX_BACKWARD, at::_ops::_log_softmax_backward_data,
                          at::_ops::_log_softmax_backward_data_out,
                          at::meta::structured__log_softmax_backward_data>;
    m.impl("_softmax_backward_data", TORCH_FN(SoftmaxBw::fn));
    m.impl("_softmax_backward_data.out", TORCH_FN(SoftmaxBw::out));
    m.impl("_log_softmax_backward_data", TORCH_FN(LogSoftmaxBw::fn));
    m.impl("_log_softmax_backward_data.out", TORCH_FN(LogSoftmaxBw::out));
}

}  // namespace
}  // namespace neuron
