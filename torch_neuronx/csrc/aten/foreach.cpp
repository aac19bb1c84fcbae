// aten/foreach.cpp - the _foreach_* ops and the fused optimizer steps
// (_fused_adam_, _fused_adamw_, _fused_sgd_) on neuron, each one launch of
// libtrn's list kernels (trn/foreach.h) over the whole tensor list.
//
// Fast path (one launch), as CUDA's: every list position holds tensors on
// one neuron device, of one floating dtype, contiguous, with equal sizes
// across the lists, and the scalars are real. Anything else runs PyTorch's
// own per-tensor loop (at::native::foreach_tensor_*_slow), whose ops are
// native on neuron too, so results and errors are PyTorch's.
#include <ATen/Functions.h>
#include <ATen/NativeFunctions.h>
#include <ATen/Parallel.h>
#include <ATen/Version.h>
#include <torch/library.h>

#include <cmath>
#include <vector>

#include "aten/cpu_add_block.h"
#include "aten/foreach_chain.h"
#include "runtime/device.h"
#include "observe/op_tracking.h"
#include "trn/foreach.h"

namespace neuron {
namespace {

using at::Scalar;
using at::Tensor;
using at::TensorList;

// Whether lists (the first one decides device, dtype and sizes) can take
// the fast path.
bool fast_ok(std::initializer_list<TensorList> lists) {
    const TensorList self = *lists.begin();
    if (self.empty()) return false;
    const Tensor &t0 = self[0];
    if (!t0.defined() || t0.device().type() != kNeuron) return false;
    auto dt = native_dtype(t0.scalar_type());
    if (!dt || !trn_foreach_supports(TRN_FOREACH_ADD, *dt)) return false;
    for (TensorList l : lists) {
        if (l.size() != self.size()) return false;
        for (size_t i = 0; i < l.size(); i++) {
            const Tensor &t = l[i];
            if (!t.defined() || t.device() != t0.device() || t.scalar_type() != t0.scalar_type() ||
                !t.is_contiguous() || t.layout() != at::kStrided ||
                !t.sizes().equals(self[i].sizes()))
                return false;
        }
    }
    return true;
}

bool real(const Scalar &s) { return !s.isComplex(); }
bool real(at::ArrayRef<Scalar> ss) {
    for (const Scalar &s : ss)
        if (s.isComplex()) return false;
    return true;
}
// Scalars the kernel takes for `op`: real ones, and no bool operand of a
// subtraction (ATen refuses it; the per-tensor loop raises its error).
bool fast_scalar(trn_foreach_op op, const Scalar &s) {
    return real(s) && !(op == TRN_FOREACH_SUB && s.isBoolean());
}
bool fast_scalar(trn_foreach_op op, at::ArrayRef<Scalar> ss) {
    for (const Scalar &s : ss)
        if (!fast_scalar(op, s)) return false;
    return true;
}
// alpha on floating lists: real and not bool (ATen's alpha_check refuses a
// bool alpha for non-bool results; the per-tensor loop raises its error).
bool fast_alpha(const Scalar &a) { return real(a) && !a.isBoolean(); }

// A one-element scalar operand: on the device it is read by the kernel (no
// synchronization); on the CPU its value is taken now.
struct ScalarArg {
    at::Tensor keep;  // the device tensor read by the kernel
    const void *ptr = nullptr;
    trn_dtype dtype = TRN_DTYPE_F32;
    double value = 0;
};
bool scalar_arg(const Tensor &t, const Tensor &like, ScalarArg &out) {
    if (!t.defined() || t.numel() != 1 || t.is_complex()) return false;
    if (t.device().type() == at::kCPU) {
        out.value = t.item<double>();
        return true;
    }
    if (t.device() != like.device()) return false;
    auto d = native_dtype(t.scalar_type());
    if (!d || *d == TRN_DTYPE_U16 || *d == TRN_DTYPE_U32 || *d == TRN_DTYPE_U64 ||
        *d == TRN_DTYPE_I8 || *d == TRN_DTYPE_I16)
        return false;
    out.keep = t;
    out.ptr = t.const_data_ptr();
    out.dtype = *d;
    return true;
}

// The tensors a held launch (foreach_chain.h) keeps alive until it runs.
std::vector<Tensor> hold_lists(std::initializer_list<TensorList> lists, const ScalarArg *sarg) {
    size_t n = sarg && sarg->ptr ? 1 : 0;
    for (TensorList l : lists) n += l.size();
    std::vector<Tensor> v;
    v.reserve(n);
    for (TensorList l : lists) v.insert(v.end(), l.begin(), l.end());
    if (sarg && sarg->ptr) v.push_back(sarg->keep);
    return v;
}

// One launch: out[i] = op(self[i], b[i], c[i]; scalar_i), or held in the
// current chain of foreach ops (foreach_chain.h), which runs it later with
// the same bits.
void launch(trn_foreach_op op, TensorList self, TensorList b, TensorList c, TensorList out,
            const std::vector<double> &scalars, double alpha, const ScalarArg *sarg,
            const char *name) {
    std::vector<trn_foreach_tensor> ts(self.size());
    for (size_t i = 0; i < self.size(); i++) {
        trn_foreach_tensor &t = ts[i];
        t.out = out[i].data_ptr();
        t.a = self[i].const_data_ptr();
        t.b = b.empty() ? nullptr : b[i].const_data_ptr();
        t.c = c.empty() ? nullptr : c[i].const_data_ptr();
        t.n = self[i].numel();
        t.scalar = scalars.empty() ? 0.0 : (scalars.size() == 1 ? scalars[0] : scalars[i]);
    }
    trn_foreach_desc d{};
    d.op = op;
    d.dtype = *native_dtype(self[0].scalar_type());
    d.count = static_cast<int64_t>(ts.size());
    d.tensors = ts.data();
    d.alpha = alpha;
    if (sarg && sarg->ptr) {
        d.scalar_tensor = sarg->ptr;
        d.scalar_dtype = sarg->dtype;
    }
    d.ord = 2;
    d.cpu_block = cpu_add_block();
    d.cpu_threads = at::get_num_threads();
    trn_stream *s = current_trn_stream(self[0].device().index());
    const bool in_place = out.data() == self.data();
    if (!foreach_chain::wanted(op) ||
        !foreach_chain::offer(
            s, d, std::move(ts), hold_lists({self, b, c, in_place ? out : TensorList{}}, sarg),
            in_place ? std::vector<Tensor>{} : std::vector<Tensor>(out.begin(), out.end())))
        TRN_CHECK(trn_foreach_launch(s, &d));
    // In-place: bump each tensor's version as ATen's foreach kernels do, so
    // autograd sees saved tensors modified in place (fused optimizers don't,
    // on CPU either).
    if (out.data() == self.data())
        for (const Tensor &t : out) t.unsafeGetTensorImpl()->bump_version();
    tracking::record_executed(name);
}

std::vector<Tensor> empty_like_list(TensorList self) {
    std::vector<Tensor> out;
    out.reserve(self.size());
    for (const Tensor &t : self) out.push_back(at::empty_like(t));
    return out;
}

std::vector<double> to_doubles(at::ArrayRef<Scalar> ss) {
    std::vector<double> v;
    v.reserve(ss.size());
    for (const Scalar &s : ss) v.push_back(s.toDouble());
    return v;
}

// ---- the op table ---------------------------------------------------------------------
// Each macro defines the out-of-place and in-place kernels of one overload.
// SLOW is the at::native per-tensor loop of the same overload.
#define FE_NAME(OP, OVL) "aten::_foreach_" #OP "." #OVL

// self, Scalar
#define FE_SCALAR(OP, KOP, SLOW)                                                                   \
    std::vector<Tensor> OP##_scalar(TensorList self, const Scalar &s) {                            \
        if (!fast_ok({self}) || !fast_scalar(KOP, s)) return at::native::SLOW(self, s);            \
        auto out = empty_like_list(self);                                                          \
        launch(KOP, self, {}, {}, out, {s.toDouble()}, 1.0, nullptr, FE_NAME(OP, Scalar));         \
        return out;                                                                                \
    }                                                                                              \
    void OP##_scalar_(TensorList self, const Scalar &s) {                                          \
        if (!fast_ok({self}) || !fast_scalar(KOP, s)) return at::native::SLOW##_(self, s);         \
        launch(KOP, self, {}, {}, self, {s.toDouble()}, 1.0, nullptr, FE_NAME(OP##_, Scalar));     \
    }

// self, Scalar[]
#define FE_SCALARLIST(OP, KOP, SLOW)                                                               \
    std::vector<Tensor> OP##_scalarlist(TensorList self, at::ArrayRef<Scalar> s) {                 \
        if (!fast_ok({self}) || !fast_scalar(KOP, s) || s.size() != self.size())                   \
            return at::native::SLOW(self, s);                                                      \
        auto out = empty_like_list(self);                                                          \
        launch(KOP, self, {}, {}, out, to_doubles(s), 1.0, nullptr, FE_NAME(OP, ScalarList));      \
        return out;                                                                                \
    }                                                                                              \
    void OP##_scalarlist_(TensorList self, at::ArrayRef<Scalar> s) {                               \
        if (!fast_ok({self}) || !fast_scalar(KOP, s) || s.size() != self.size())                   \
            return at::native::SLOW##_(self, s);                                                   \
        launch(KOP, self, {}, {}, self, to_doubles(s), 1.0, nullptr, FE_NAME(OP##_, ScalarList));  \
    }

// self, other[] (no alpha)
#define FE_LIST(OP, KOP, SLOW)                                                                     \
    std::vector<Tensor> OP##_list(TensorList self, TensorList other) {                             \
        if (!fast_ok({self, other})) return at::native::SLOW(self, other);                         \
        auto out = empty_like_list(self);                                                          \
        launch(KOP, self, other, {}, out, {}, 1.0, nullptr, FE_NAME(OP, List));                    \
        return out;                                                                                \
    }                                                                                              \
    void OP##_list_(TensorList self, TensorList other) {                                           \
        if (!fast_ok({self, other})) return at::native::SLOW##_(self, other);                      \
        launch(KOP, self, other, {}, self, {}, 1.0, nullptr, FE_NAME(OP##_, List));                \
    }

// self, other[], alpha
#define FE_LIST_ALPHA(OP, KOP, SLOW)                                                               \
    std::vector<Tensor> OP##_list(TensorList self, TensorList other, const Scalar &alpha) {        \
        if (!fast_ok({self, other}) || !fast_alpha(alpha))                                         \
            return at::native::SLOW(self, other, alpha);                                           \
        auto out = empty_like_list(self);                                                          \
        launch(KOP, self, other, {}, out, {}, alpha.toDouble(), nullptr, FE_NAME(OP, List));       \
        return out;                                                                                \
    }                                                                                              \
    void OP##_list_(TensorList self, TensorList other, const Scalar &alpha) {                      \
        if (!fast_ok({self, other}) || !fast_alpha(alpha))                                         \
            return at::native::SLOW##_(self, other, alpha);                                        \
        launch(KOP, self, other, {}, self, {}, alpha.toDouble(), nullptr, FE_NAME(OP##_, List));   \
    }

// self, Tensor other (one element), no alpha
#define FE_TENSOR(OP, KOP, SLOW)                                                                   \
    std::vector<Tensor> OP##_tensor(TensorList self, const Tensor &other) {                        \
        ScalarArg sa;                                                                              \
        if (!fast_ok({self}) || !scalar_arg(other, self[0], sa))                                   \
            return at::native::SLOW(self, other);                                                  \
        auto out = empty_like_list(self);                                                          \
        launch(KOP, self, {}, {}, out, {sa.value}, 1.0, &sa, FE_NAME(OP, Tensor));                 \
        return out;                                                                                \
    }                                                                                              \
    void OP##_tensor_(TensorList self, const Tensor &other) {                                      \
        ScalarArg sa;                                                                              \
        if (!fast_ok({self}) || !scalar_arg(other, self[0], sa))                                   \
            return at::native::SLOW##_(self, other);                                               \
        launch(KOP, self, {}, {}, self, {sa.value}, 1.0, &sa, FE_NAME(OP##_, Tensor));             \
    }

// unary
#define FE_UNARY(OP, KOP, SLOW)                                                                    \
    std::vector<Tensor> OP##_unary(TensorList self) {                                              \
        if (!fast_ok({self})) return at::native::SLOW(self);                                       \
        auto out = empty_like_list(self);                                                          \
        launch(KOP, self, {}, {}, out, {}, 1.0, nullptr, "aten::_foreach_" #OP);                   \
        return out;                                                                                \
    }                                                                                              \
    void OP##_unary_(TensorList self) {                                                            \
        if (!fast_ok({self})) return at::native::SLOW##_(self);                                    \
        launch(KOP, self, {}, {}, self, {}, 1.0, nullptr, "aten::_foreach_" #OP "_");              \
    }

// addcmul / addcdiv: self, t1[], t2[], value(s)
#define FE_POINTWISE(OP, KOP, SLOW)                                                                \
    std::vector<Tensor> OP##_scalar(TensorList self, TensorList t1, TensorList t2,                 \
                                    const Scalar &v) {                                             \
        if (!fast_ok({self, t1, t2}) || !real(v))                                                  \
            return at::native::SLOW##_scalar_slow(self, t1, t2, v);                                \
        auto out = empty_like_list(self);                                                          \
        launch(KOP, self, t1, t2, out, {v.toDouble()}, 1.0, nullptr, FE_NAME(OP, Scalar));         \
        return out;                                                                                \
    }                                                                                              \
    void OP##_scalar_(TensorList self, TensorList t1, TensorList t2, const Scalar &v) {            \
        if (!fast_ok({self, t1, t2}) || !real(v))                                                  \
            return at::native::SLOW##_scalar_slow_(self, t1, t2, v);                               \
        launch(KOP, self, t1, t2, self, {v.toDouble()}, 1.0, nullptr, FE_NAME(OP##_, Scalar));     \
    }                                                                                              \
    std::vector<Tensor> OP##_scalarlist(TensorList self, TensorList t1, TensorList t2,             \
                                        at::ArrayRef<Scalar> v) {                                  \
        if (!fast_ok({self, t1, t2}) || !real(v) || v.size() != self.size())                       \
            return at::native::SLOW##_scalarlist_slow(self, t1, t2, v);                            \
        auto out = empty_like_list(self);                                                          \
        launch(KOP, self, t1, t2, out, to_doubles(v), 1.0, nullptr, FE_NAME(OP, ScalarList));      \
        return out;                                                                                \
    }                                                                                              \
    void OP##_scalarlist_(TensorList self, TensorList t1, TensorList t2, at::ArrayRef<Scalar> v) { \
        if (!fast_ok({self, t1, t2}) || !real(v) || v.size() != self.size())                       \
            return at::native::SLOW##_scalarlist_slow_(self, t1, t2, v);                           \
        launch(KOP, self, t1, t2, self, to_doubles(v), 1.0, nullptr, FE_NAME(OP##_, ScalarList));  \
    }                                                                                              \
    /* Tensor scalars: a 1-d CPU tensor of one value per list position. */                         \
    bool OP##_cpu_values(const Tensor &s, size_t n, std::vector<double> &out) {                    \
        if (!s.defined() || s.device().type() != at::kCPU || s.dim() != 1 ||                       \
            static_cast<size_t>(s.numel()) != n || s.is_complex())                                 \
            return false;                                                                          \
        const Tensor d = s.to(at::kDouble).contiguous();                                           \
        out.assign(d.const_data_ptr<double>(), d.const_data_ptr<double>() + n);                    \
        return true;                                                                               \
    }                                                                                              \
    std::vector<Tensor> OP##_tensor(TensorList self, TensorList t1, TensorList t2,                 \
                                    const Tensor &s) {                                             \
        std::vector<double> v;                                                                     \
        if (!fast_ok({self, t1, t2}) || !OP##_cpu_values(s, self.size(), v))                       \
            return at::native::SLOW##_tensor_slow(self, t1, t2, s);                                \
        auto out = empty_like_list(self);                                                          \
        launch(KOP, self, t1, t2, out, v, 1.0, nullptr, FE_NAME(OP, Tensor));                      \
        return out;                                                                                \
    }                                                                                              \
    void OP##_tensor_(TensorList self, TensorList t1, TensorList t2, const Tensor &s) {            \
        std::vector<double> v;                                                                     \
        if (!fast_ok({self, t1, t2}) || !OP##_cpu_values(s, self.size(), v))                       \
            return at::native::SLOW##_tensor_slow_(self, t1, t2, s);                               \
        launch(KOP, self, t1, t2, self, v, 1.0, nullptr, FE_NAME(OP##_, Tensor));                  \
    }

FE_SCALAR(add, TRN_FOREACH_ADD, foreach_tensor_add_scalar_kernel_slow)
FE_SCALARLIST(add, TRN_FOREACH_ADD, foreach_tensor_add_scalarlist_kernel_slow)
FE_LIST_ALPHA(add, TRN_FOREACH_ADD, foreach_tensor_add_list_kernel_slow)
FE_SCALAR(sub, TRN_FOREACH_SUB, foreach_tensor_sub_scalar_kernel_slow)
FE_SCALARLIST(sub, TRN_FOREACH_SUB, foreach_tensor_sub_scalarlist_kernel_slow)
FE_LIST_ALPHA(sub, TRN_FOREACH_SUB, foreach_tensor_sub_list_kernel_slow)
FE_SCALAR(mul, TRN_FOREACH_MUL, foreach_tensor_mul_scalar_kernel_slow)
FE_SCALARLIST(mul, TRN_FOREACH_MUL, foreach_tensor_mul_scalarlist_kernel_slow)
FE_LIST(mul, TRN_FOREACH_MUL, foreach_tensor_mul_list_kernel_slow)
FE_TENSOR(mul, TRN_FOREACH_MUL, foreach_tensor_mul_tensor_kernel_slow)
FE_SCALAR(div, TRN_FOREACH_DIV, foreach_tensor_div_scalar_kernel_slow)
FE_SCALARLIST(div, TRN_FOREACH_DIV, foreach_tensor_div_scalarlist_kernel_slow)
FE_LIST(div, TRN_FOREACH_DIV, foreach_tensor_div_list_kernel_slow)
FE_TENSOR(div, TRN_FOREACH_DIV, foreach_tensor_div_tensor_kernel_slow)
FE_SCALAR(maximum, TRN_FOREACH_CLAMP_MIN, foreach_tensor_clamp_min_scalar_kernel_slow)
FE_SCALARLIST(maximum, TRN_FOREACH_CLAMP_MIN, foreach_tensor_clamp_min_scalarlist_kernel_slow)
FE_LIST(maximum, TRN_FOREACH_MAXIMUM, foreach_tensor_clamp_min_list_kernel_slow)
FE_SCALAR(minimum, TRN_FOREACH_CLAMP_MAX, foreach_tensor_clamp_max_scalar_kernel_slow)
FE_SCALARLIST(minimum, TRN_FOREACH_CLAMP_MAX, foreach_tensor_clamp_max_scalarlist_kernel_slow)
FE_LIST(minimum, TRN_FOREACH_MINIMUM, foreach_tensor_clamp_max_list_kernel_slow)
FE_SCALAR(clamp_min, TRN_FOREACH_CLAMP_MIN, foreach_tensor_clamp_min_scalar_kernel_slow)
FE_SCALARLIST(clamp_min, TRN_FOREACH_CLAMP_MIN, foreach_tensor_clamp_min_scalarlist_kernel_slow)
FE_LIST(clamp_min, TRN_FOREACH_MAXIMUM, foreach_tensor_clamp_min_list_kernel_slow)
FE_SCALAR(clamp_max, TRN_FOREACH_CLAMP_MAX, foreach_tensor_clamp_max_scalar_kernel_slow)
FE_SCALARLIST(clamp_max, TRN_FOREACH_CLAMP_MAX, foreach_tensor_clamp_max_scalarlist_kernel_slow)
FE_LIST(clamp_max, TRN_FOREACH_MINIMUM, foreach_tensor_clamp_max_list_kernel_slow)
FE_SCALAR(pow, TRN_FOREACH_POW, foreach_tensor_pow_scalar_kernel_slow)
FE_SCALARLIST(pow, TRN_FOREACH_POW, foreach_tensor_pow_scalarlist_kernel_slow)
FE_LIST(pow, TRN_FOREACH_POW, foreach_tensor_pow_list_kernel_slow)
FE_UNARY(sqrt, TRN_FOREACH_SQRT, foreach_tensor_sqrt_slow)
FE_UNARY(neg, TRN_FOREACH_NEG, foreach_tensor_neg_slow)
FE_UNARY(abs, TRN_FOREACH_ABS, foreach_tensor_abs_slow)
FE_UNARY(exp, TRN_FOREACH_EXP, foreach_tensor_exp_slow)
FE_UNARY(reciprocal, TRN_FOREACH_RECIPROCAL, foreach_tensor_reciprocal_slow)
FE_POINTWISE(addcmul, TRN_FOREACH_ADDCMUL, foreach_tensor_addcmul)
FE_POINTWISE(addcdiv, TRN_FOREACH_ADDCDIV, foreach_tensor_addcdiv)

// add.Tensor has an alpha: self + alpha * other.
std::vector<Tensor> add_tensor(TensorList self, const Tensor &other, const Scalar &alpha) {
    ScalarArg sa;
    if (!fast_ok({self}) || !fast_alpha(alpha) || !scalar_arg(other, self[0], sa))
        return at::native::foreach_tensor_add_tensor_kernel_slow(self, other, alpha);
    auto out = empty_like_list(self);
    launch(TRN_FOREACH_ADD, self, {}, {}, out, {sa.value}, alpha.toDouble(), &sa,
           "aten::_foreach_add.Tensor");
    return out;
}
void add_tensor_(TensorList self, const Tensor &other, const Scalar &alpha) {
    ScalarArg sa;
    if (!fast_ok({self}) || !fast_alpha(alpha) || !scalar_arg(other, self[0], sa))
        return at::native::foreach_tensor_add_tensor_kernel_slow_(self, other, alpha);
    launch(TRN_FOREACH_ADD, self, {}, {}, self, {sa.value}, alpha.toDouble(), &sa,
           "aten::_foreach_add_.Tensor");
}

// lerp with a list of ends and a weight list / tensor list.
std::vector<Tensor> lerp_scalar2(TensorList self, TensorList end, const Scalar &w) {
    if (!fast_ok({self, end}) || !real(w))
        return at::native::foreach_tensor_lerp_list_kernel_slow(self, end, w);
    auto out = empty_like_list(self);
    launch(TRN_FOREACH_LERP, self, end, {}, out, {w.toDouble()}, 1.0, nullptr,
           "aten::_foreach_lerp.Scalar");
    return out;
}
void lerp_scalar2_(TensorList self, TensorList end, const Scalar &w) {
    if (!fast_ok({self, end}) || !real(w))
        return at::native::foreach_tensor_lerp_list_kernel_slow_(self, end, w);
    launch(TRN_FOREACH_LERP, self, end, {}, self, {w.toDouble()}, 1.0, nullptr,
           "aten::_foreach_lerp_.Scalar");
}
std::vector<Tensor> lerp_scalarlist2(TensorList self, TensorList end, at::ArrayRef<Scalar> w) {
    if (!fast_ok({self, end}) || !real(w) || w.size() != self.size())
        return at::native::foreach_tensor_lerp_scalarlist_kernel_slow(self, end, w);
    auto out = empty_like_list(self);
    launch(TRN_FOREACH_LERP, self, end, {}, out, to_doubles(w), 1.0, nullptr,
           "aten::_foreach_lerp.ScalarList");
    return out;
}
void lerp_scalarlist2_(TensorList self, TensorList end, at::ArrayRef<Scalar> w) {
    if (!fast_ok({self, end}) || !real(w) || w.size() != self.size())
        return at::native::foreach_tensor_lerp_scalarlist_kernel_slow_(self, end, w);
    launch(TRN_FOREACH_LERP, self, end, {}, self, to_doubles(w), 1.0, nullptr,
           "aten::_foreach_lerp_.ScalarList");
}
std::vector<Tensor> lerp_list(TensorList self, TensorList end, TensorList w) {
    if (!fast_ok({self, end, w})) return at::native::foreach_tensor_ternary_lerp_slow(self, end, w);
    auto out = empty_like_list(self);
    launch(TRN_FOREACH_LERP, self, end, w, out, {}, 1.0, nullptr, "aten::_foreach_lerp.List");
    return out;
}
void lerp_list_(TensorList self, TensorList end, TensorList w) {
    if (!fast_ok({self, end, w}))
        return at::native::foreach_tensor_ternary_lerp_slow_(self, end, w);
    launch(TRN_FOREACH_LERP, self, end, w, self, {}, 1.0, nullptr, "aten::_foreach_lerp_.List");
}

// scalar ** list
std::vector<Tensor> pow_scalar_base(const Scalar &base, TensorList exps) {
    if (!fast_ok({exps}) || !real(base))
        return at::native::foreach_scalar_pow_list_kernel_slow(base, exps);
    auto out = empty_like_list(exps);
    launch(TRN_FOREACH_RPOW, exps, {}, {}, out, {base.toDouble()}, 1.0, nullptr,
           "aten::_foreach_pow.ScalarAndTensor");
    return out;
}

void zero_(TensorList self) {
    if (!fast_ok({self})) return at::native::foreach_tensor_zero_slow_(self);
    launch(TRN_FOREACH_ZERO, self, {}, {}, self, {}, 1.0, nullptr, "aten::_foreach_zero_");
}

std::vector<Tensor> norm(TensorList self, const Scalar &ord, std::optional<at::ScalarType> dtype) {
    const double p = ord.isComplex() ? -1 : ord.toDouble();
    const bool ok_ord = p == 1 || p == 2 || p == INFINITY;
    if (!fast_ok({self}) || !ok_ord || (dtype.has_value() && *dtype != self[0].scalar_type()))
        return at::native::foreach_tensor_norm_slow(self, ord, dtype);
    std::vector<Tensor> out;
    out.reserve(self.size());
    for (const Tensor &t : self) out.push_back(at::empty({}, t.options()));
    std::vector<trn_foreach_tensor> ts(self.size());
    for (size_t i = 0; i < self.size(); i++) {
        ts[i].out = out[i].data_ptr();
        ts[i].a = self[i].const_data_ptr();
        ts[i].n = self[i].numel();
    }
    trn_foreach_desc d{};
    d.op = TRN_FOREACH_NORM;
    d.dtype = *native_dtype(self[0].scalar_type());
    d.count = static_cast<int64_t>(ts.size());
    d.tensors = ts.data();
    d.ord = p;
    TRN_CHECK(trn_foreach_launch(current_trn_stream(self[0].device().index()), &d));
    tracking::record_executed("aten::_foreach_norm.Scalar");
    return out;
}

// ---- fused optimizers -------------------------------------------------------------------
const float *opt_scalar(const std::optional<Tensor> &t, const Tensor &like, const char *what) {
    if (!t.has_value() || !t->defined()) return nullptr;
    TORCH_CHECK(t->numel() == 1 && t->scalar_type() == at::kFloat && t->device() == like.device(),
                what, " must be a one-element float32 tensor on ", like.device());
    return t->const_data_ptr<float>();
}

void check_opt_lists(const char *op, std::initializer_list<TensorList> lists) {
    const TensorList params = *lists.begin();
    for (TensorList l : lists)
        TORCH_CHECK(l.empty() || l.size() == params.size(), op,
                    ": all tensor lists must have the same length");
    if (params.empty()) return;
    const Tensor &p0 = params[0];
    auto dt = native_dtype(p0.scalar_type());
    TORCH_CHECK(dt && trn_foreach_supports(TRN_FOREACH_ADD, *dt), op,
                ": params must be floating point, got ", p0.scalar_type());
    for (TensorList l : lists)
        for (size_t i = 0; i < l.size(); i++) {
            const Tensor &t = l[i];
            TORCH_CHECK(t.device() == p0.device(), op, ": all tensors must be on ", p0.device(),
                        ", got ", t.device());
            TORCH_CHECK(t.scalar_type() == p0.scalar_type(), op, ": all tensors must have dtype ",
                        p0.scalar_type(), ", got ", t.scalar_type());
            TORCH_CHECK(t.is_contiguous() && t.sizes().equals(params[i].sizes()), op,
                        ": tensors must be contiguous and match their parameter's shape");
        }
}

// The launch tail both fused optimizers share: the list, dtype and
// grad_scale / found_inf of descriptor d, the launch, the op recorded.
template <typename Desc, typename Entry>
void launch_opt(Desc &d, std::vector<Entry> &ts, TensorList params,
                const std::optional<Tensor> &grad_scale, const std::optional<Tensor> &found_inf,
                trn_status (*launch)(trn_stream *, const Desc *), const char *name) {
    d.dtype = *native_dtype(params[0].scalar_type());
    d.count = static_cast<int64_t>(ts.size());
    d.tensors = ts.data();
    d.grad_scale = opt_scalar(grad_scale, params[0], "grad_scale");
    d.found_inf = opt_scalar(found_inf, params[0], "found_inf");
    TRN_CHECK(launch(current_trn_stream(params[0].device().index()), &d));
    tracking::record_executed(name);
}

void fused_adam_impl(TensorList params, TensorList grads, TensorList exp_avgs,
                     TensorList exp_avg_sqs, TensorList max_exp_avg_sqs, TensorList steps,
                     double lr, double beta1, double beta2, double weight_decay, double eps,
                     bool amsgrad, bool maximize, const std::optional<Tensor> &grad_scale,
                     const std::optional<Tensor> &found_inf, bool adamw) {
    const char *op = adamw ? "_fused_adamw_" : "_fused_adam_";
    check_opt_lists(op, {params, grads, exp_avgs, exp_avg_sqs});
    if (params.empty()) return;
    TORCH_CHECK(steps.size() == params.size(), op, ": state_steps must match params");
    TORCH_CHECK(!amsgrad || max_exp_avg_sqs.size() == params.size(), op,
                ": amsgrad needs one max_exp_avg_sq per param");
    if (amsgrad) check_opt_lists(op, {params, max_exp_avg_sqs});
    std::vector<trn_fused_adam_tensor> ts(params.size());
    for (size_t i = 0; i < params.size(); i++) {
        const Tensor &s = steps[i];
        TORCH_CHECK(
            s.numel() == 1 && s.scalar_type() == at::kFloat && s.device() == params[0].device(), op,
            ": state_steps must be one-element float32 tensors on ", params[0].device());
        ts[i].param = params[i].data_ptr();
        ts[i].grad = grads[i].data_ptr();
        ts[i].exp_avg = exp_avgs[i].data_ptr();
        ts[i].exp_avg_sq = exp_avg_sqs[i].data_ptr();
        ts[i].max_exp_avg_sq = amsgrad ? max_exp_avg_sqs[i].data_ptr() : nullptr;
        ts[i].step = s.const_data_ptr<float>();
        ts[i].n = params[i].numel();
    }
    trn_fused_adam_desc d{};
    d.lr = lr;
    d.beta1 = beta1;
    d.beta2 = beta2;
    d.weight_decay = weight_decay;
    d.eps = eps;
    d.amsgrad = amsgrad;
    d.maximize = maximize;
    d.adamw = adamw;
    launch_opt(d, ts, params, grad_scale, found_inf, trn_fused_adam_launch,
               adamw ? "aten::_fused_adamw_" : "aten::_fused_adam_");
}

double lr_value(const Tensor &lr) {
    TORCH_CHECK(lr.numel() == 1, "lr must be a one-element tensor");
    return lr.item<double>();  // a device lr synchronizes once per step, as CPU's .item()
}

#define ADAM_ARGS                                                                                  \
    TensorList params, TensorList grads, TensorList exp_avgs, TensorList exp_avg_sqs,              \
        TensorList max_exp_avg_sqs, TensorList steps
#define ADAM_TAIL                                                                                  \
    double beta1, double beta2, double weight_decay, double eps, bool amsgrad, bool maximize,      \
        const std::optional<Tensor> &grad_scale, const std::optional<Tensor> &found_inf
#define ADAM_PASS params, grads, exp_avgs, exp_avg_sqs, max_exp_avg_sqs, steps
#define ADAM_TAIL_PASS beta1, beta2, weight_decay, eps, amsgrad, maximize, grad_scale, found_inf

void fused_adam(ADAM_ARGS, double lr, ADAM_TAIL) {
    fused_adam_impl(ADAM_PASS, lr, ADAM_TAIL_PASS, false);
}
void fused_adam_tlr(ADAM_ARGS, const Tensor &lr, ADAM_TAIL) {
    fused_adam_impl(ADAM_PASS, lr_value(lr), ADAM_TAIL_PASS, false);
}
void fused_adamw(ADAM_ARGS, double lr, ADAM_TAIL) {
    fused_adam_impl(ADAM_PASS, lr, ADAM_TAIL_PASS, true);
}
void fused_adamw_tlr(ADAM_ARGS, const Tensor &lr, ADAM_TAIL) {
    fused_adam_impl(ADAM_PASS, lr_value(lr), ADAM_TAIL_PASS, true);
}

void fused_sgd_impl(TensorList params, TensorList grads, TensorList bufs, double weight_decay,
                    double momentum, double lr, double dampening, bool nesterov, bool maximize,
                    bool is_first_step, const std::optional<Tensor> &grad_scale,
                    const std::optional<Tensor> &found_inf) {
    check_opt_lists("_fused_sgd_", {params, grads});
    if (params.empty()) return;
    const bool has_buf = momentum != 0;
    TORCH_CHECK(!has_buf || bufs.size() == params.size(),
                "_fused_sgd_: momentum needs one momentum buffer per param");
    if (has_buf) check_opt_lists("_fused_sgd_", {params, bufs});
    std::vector<trn_fused_sgd_tensor> ts(params.size());
    for (size_t i = 0; i < params.size(); i++) {
        ts[i].param = params[i].data_ptr();
        ts[i].grad = grads[i].data_ptr();
        ts[i].momentum_buffer = has_buf ? bufs[i].data_ptr() : nullptr;
        ts[i].n = params[i].numel();
    }
    trn_fused_sgd_desc d{};
    d.weight_decay = weight_decay;
    d.momentum = momentum;
    d.lr = lr;
    d.dampening = dampening;
    d.nesterov = nesterov;
    d.maximize = maximize;
    d.is_first_step = is_first_step;
    launch_opt(d, ts, params, grad_scale, found_inf, trn_fused_sgd_launch, "aten::_fused_sgd_");
}

void fused_sgd(TensorList params, TensorList grads, TensorList bufs, double weight_decay,
               double momentum, double lr, double dampening, bool nesterov, bool maximize,
               bool is_first_step, const std::optional<Tensor> &grad_scale,
               const std::optional<Tensor> &found_inf) {
    fused_sgd_impl(params, grads, bufs, weight_decay, momentum, lr, dampening, nesterov, maximize,
                   is_first_step, grad_scale, found_inf);
}
void fused_sgd_tlr(TensorList params, TensorList grads, TensorList bufs, double weight_decay,
                   double momentum, const Tensor &lr, double dampening, bool nesterov,
                   bool maximize, bool is_first_step, const std::optional<Tensor> &grad_scale,
                   const std::optional<Tensor> &found_inf) {
    fused_sgd_impl(params, grads, bufs, weight_decay, momentum, lr_value(lr), dampening, nesterov,
                   maximize, is_first_step, grad_scale, found_inf);
}

#define REG2(NAME, OVL, FN)                                                                        \
    m.impl("_foreach_" #NAME "." #OVL, TORCH_FN(FN));                                              \
    m.impl("_foreach_" #NAME "_." #OVL, TORCH_FN(FN##_));

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
    REG2(add, Scalar, add_scalar)
    REG2(add, ScalarList, add_scalarlist)
    REG2(add, List, add_list)
    REG2(add, Tensor, add_tensor)
    REG2(sub, Scalar, sub_scalar)
    REG2(sub, ScalarList, sub_scalarlist)
    REG2(sub, List, sub_list)
    REG2(mul, Scalar, mul_scalar)
    REG2(mul, ScalarList, mul_scalarlist)
    REG2(mul, List, mul_list)
    REG2(mul, Tensor, mul_tensor)
    REG2(div, Scalar, div_scalar)
    REG2(div, ScalarList, div_scalarlist)
    REG2(div, List, div_list)
    REG2(div, Tensor, div_tensor)
    REG2(maximum, Scalar, maximum_scalar)
    REG2(maximum, ScalarList, maximum_scalarlist)
    REG2(maximum, List, maximum_list)
    REG2(minimum, Scalar, minimum_scalar)
    REG2(minimum, ScalarList, minimum_scalarlist)
    REG2(minimum, List, minimum_list)
    REG2(clamp_min, Scalar, clamp_min_scalar)
    REG2(clamp_min, ScalarList, clamp_min_scalarlist)
    REG2(clamp_min, List, clamp_min_list)
    REG2(clamp_max, Scalar, clamp_max_scalar)
    REG2(clamp_max, ScalarList, clamp_max_scalarlist)
    REG2(clamp_max, List, clamp_max_list)
    REG2(pow, Scalar, pow_scalar)
    REG2(pow, ScalarList, pow_scalarlist)
    REG2(pow, List, pow_list)
    m.impl("_foreach_pow.ScalarAndTensor", TORCH_FN(pow_scalar_base));
    REG2(lerp, Scalar, lerp_scalar2)
    REG2(lerp, ScalarList, lerp_scalarlist2)
    REG2(lerp, List, lerp_list)
    REG2(addcmul, Scalar, addcmul_scalar)
    REG2(addcmul, ScalarList, addcmul_scalarlist)
    REG2(addcmul, Tensor, addcmul_tensor)
    REG2(addcdiv, Scalar, addcdiv_scalar)
    REG2(addcdiv, ScalarList, addcdiv_scalarlist)
    REG2(addcdiv, Tensor, addcdiv_tensor)
    m.impl("_foreach_sqrt", TORCH_FN(sqrt_unary));
    m.impl("_foreach_sqrt_", TORCH_FN(sqrt_unary_));
    m.impl("_foreach_neg", TORCH_FN(neg_unary));
    m.impl("_foreach_neg_", TORCH_FN(neg_unary_));
    m.impl("_foreach_abs", TORCH_FN(abs_unary));
    m.impl("_foreach_abs_", TORCH_FN(abs_unary_));
    m.impl("_foreach_exp", TORCH_FN(exp_unary));
    m.impl("_foreach_exp_", TORCH_FN(exp_unary_));
    m.impl("_foreach_reciprocal", TORCH_FN(reciprocal_unary));
    m.impl("_foreach_reciprocal_", TORCH_FN(reciprocal_unary_));
    m.impl("_foreach_zero_", TORCH_FN(zero_));
    m.impl("_foreach_norm.Scalar", TORCH_FN(norm));
    m.impl("_fused_adam_", TORCH_FN(fused_adam));
    m.impl("_fused_adam_.tensor_lr", TORCH_FN(fused_adam_tlr));
    m.impl("_fused_adamw_", TORCH_FN(fused_adamw));
    m.impl("_fused_adamw_.tensor_lr", TORCH_FN(fused_adamw_tlr));
    m.impl("_fused_sgd_", TORCH_FN(fused_sgd));
    m.impl("_fused_sgd_.tensor_lr", TORCH_FN(fused_sgd_tlr));
}

}  // namespace
}  // namespace neuron
