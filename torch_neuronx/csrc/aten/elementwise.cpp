// aten/elementwise.cpp - elementwise ATen ops on neuron, run by libtrn's
// trn_ew_launch. PyTorch decides everything about the call - broadcasting,
// type promotion, output allocation and resizing, casting rules, overlap
// checks - through the same TensorIterator configurations its CPU and CUDA
// kernels use; this file turns the built iterator into a flat descriptor.
// A dtype libtrn does not support (complex, say) goes to the CPU fallback.
#include <ATen/Dispatch_v2.h>
#include <ATen/Operators.h>
#include <ATen/Parallel.h>
#include <ATen/ScalarOps.h>
#include <ATen/TensorIterator.h>
#include <ATen/native/BinaryOps.h>
#include <ATen/native/CPUFallback.h>
#include <ATen/native/Resize.h>
#include <ATen/native/TypeProperties.h>
#include <ATen/ops/result_type_native.h>
#include <torch/library.h>

#include <array>
#include <atomic>
#include <cmath>
#include <limits>
#include <type_traits>

#include "fallback/cpu_fallback.h"
#include "aten/cpu_add_block.h"
#include "aten/direct_iter.h"
#include "aten/eager_group.h"
#include "aten/float8.h"
#include "runtime/device.h"
#include "observe/op_tracking.h"

namespace neuron {
namespace {

using at::Scalar;
using at::Tensor;
using at::TensorIterator;
using at::TensorIteratorConfig;

bool supports(trn_ew_op op, at::ScalarType type) {
    auto d = native_dtype(type);
    return d && trn_ew_supports(op, *d);
}

bool is_integer_division(trn_ew_op op) {
    return op == TRN_EW_DIV_TRUNC || op == TRN_EW_DIV_FLOOR || op == TRN_EW_REMAINDER ||
           op == TRN_EW_FMOD;
}

// Kernel input slot -> a scalar operand not in the iterator (clamp bounds,
// lerp's scalar weight).
struct ExtraScalar {
    int slot;
    Scalar value;
};

trn_scalar scalar_for(at::ScalarType expected, double f, int64_t i) {
    trn_scalar s;
    if (at::isFloatingType(expected))
        s.f = f;
    else
        s.i = i;
    return s;
}

// A CPU scalar operand (a Python number or a 0-dim CPU tensor) as ATen's CPU
// kernels read it: cast to the compute dtype, as TensorIterator casts every
// input to the common dtype (a float16 remainder with a float32 0-dim tensor
// reads it rounded to float16; a uint8 comparison with -1 reads 255). The
// exception: for float16 / bfloat16, ATen's CPU mul and divisions read their
// second operand unrounded, in float32 (original_scalar_value<opmath_t>).
trn_scalar cpu_scalar_value(at::TensorIteratorBase &iter, int arg, int slot, trn_ew_op op,
                            at::ScalarType expected) {
    trn_scalar s{};
    const bool opmath =
        slot == 1 && at::isReducedFloatingType(expected) &&
        (op == TRN_EW_MUL || op == TRN_EW_DIV || op == TRN_EW_DIV_TRUNC || op == TRN_EW_DIV_FLOOR);
    if (opmath) {
        s.f = static_cast<double>(iter.original_scalar_value<float>(arg));
        return s;
    }
    AT_DISPATCH_V2(expected, "neuron_cpu_scalar", AT_WRAP([&] {
                       const scalar_t v = iter.scalar_value<scalar_t>(arg);
                       if constexpr (std::is_integral_v<scalar_t>)
                           s.i = static_cast<int64_t>(v);
                       else
                           s.f = static_cast<double>(v);
                   }),
                   AT_EXPAND(AT_ALL_TYPES), at::kBool, at::kHalf, at::kBFloat16,
                   AT_EXPAND(AT_BAREBONES_UNSIGNED_TYPES));
    return s;
}

// Whether libtrn can run `op` in compute dtype `compute` over the iterator's
// operand dtypes (it converts on the fly, like CUDA's dynamic casting).
bool operands_supported(const at::TensorIteratorBase &iter, trn_ew_op op, at::ScalarType compute) {
    auto c = native_dtype(compute);
    if (!c || !trn_ew_supports(op, *c)) return false;
    for (int arg = 0; arg < iter.ntensors(); ++arg) {
        const bool is_out = arg < iter.noutputs();
        if (!is_out && iter.is_cpu_scalar(arg)) continue;
        auto d = native_dtype(iter.dtype(arg));
        if (!d) return false;
        if (op == TRN_EW_WHERE && arg == iter.noutputs() && *d == TRN_DTYPE_BOOL) continue;
        if (!trn_ew_supports_operand(op, *c, *d, is_out)) return false;
    }
    return true;
}

// For tests (_ew_launch_use_count_probe_for_test): while armed, launch()
// keeps the use count of its first input's TensorImpl.
std::atomic<bool> g_use_count_probe_armed{false};
std::atomic<int64_t> g_use_count_probe{-1};

// Launches `op` over a built iterator (output 0, inputs in kernel slot
// order) in compute dtype `compute`. Returns false, having done nothing,
// when an operand dtype is unsupported (the caller falls back). Records the
// op as executed natively.
bool launch(at::TensorIteratorBase &iter, trn_ew_op op, at::ScalarType compute, const char *name,
            std::array<double, 4> params = {}, std::initializer_list<ExtraScalar> extras = {}) {
    if (C10_UNLIKELY(g_use_count_probe_armed.load(std::memory_order_relaxed)))
        g_use_count_probe =
            iter.ninputs() > 0 ? static_cast<int64_t>(iter.tensor_base(iter.noutputs()).use_count())
                               : -1;
    if (!operands_supported(iter, op, compute)) return false;
    if (compute == at::kDouble && !trn_float64_native()) {
        TORCH_WARN_ONCE("neuron computes float64 tensors in float32 (as TorchNeuron does): "
                        "results keep dtype float64 but have float32 precision. Set "
                        "TORCH_NEURONX_NATIVE_FLOAT64=1 to compute float64 natively.");
    }
    if (iter.numel() != 0) {
        // TensorIterator orders dims fastest-moving first; libtrn wants the
        // innermost dim last (row-major), or a broadcast op walks memory
        // with the outer stride innermost (10-30x slower, no coalescing).
        const int nd = static_cast<int>(iter.ndim());
        TORCH_CHECK(nd <= TRN_MAX_DIMS, "neuron elementwise ops support at most ", TRN_MAX_DIMS,
                    " dimensions, got ", nd);
        std::array<std::array<int64_t, TRN_MAX_DIMS>, 5> rev;  // sizes, out, 3 inputs
        auto reversed = [&](int slot, at::IntArrayRef v) {
            for (int k = 0; k < nd; ++k) rev[slot][nd - 1 - k] = v[k];
            return rev[slot].data();
        };
        trn_ew_desc d{};
        d.op = op;
        d.dtype = *native_dtype(compute);
        d.ndim = nd;
        d.sizes = reversed(0, iter.shape());
        d.out = iter.data_ptr(0);
        d.out_strides = reversed(1, iter.strides(0));
        d.out_dtype = *native_dtype(iter.dtype(0));
        for (int k = 0; k < 4; ++k) d.params[k] = params[k];
        d.cpu_block = cpu_add_block();
        d.cpu_threads = at::get_num_threads();
        for (int i = 0; i < iter.ninputs(); ++i) {
            const int arg = i + iter.noutputs();
            const at::ScalarType expected = (op == TRN_EW_WHERE && i == 0) ? at::kBool : compute;
            if (iter.is_cpu_scalar(arg)) {
                d.in[i] = nullptr;
                d.scalar_in[i] = cpu_scalar_value(iter, arg, i, op, expected);
            } else {
                d.in[i] = iter.data_ptr(arg);
                d.in_strides[i] = reversed(2 + i, iter.strides(arg));
                d.in_dtype[i] = *native_dtype(iter.dtype(arg));
            }
        }
        for (const ExtraScalar &e : extras) {
            d.in[e.slot] = nullptr;
            d.scalar_in[e.slot] = scalar_for(compute, e.value.toDouble(),
                                             e.value.isIntegral(true) ? e.value.toLong() : 0);
        }
        trn_stream *s = current_trn_stream(iter.device(0).index());
        // Integer division syncs below (its error must raise here): never recorded.
        if (is_integer_division(op) || !eager_group::offer_ew(s, d, iter, name))
            TRN_CHECK(trn_ew_launch(s, &d));
        // Integer division by zero must raise at the call, as on CPU (a
        // RuntimeError whose message is "ZeroDivisionError").
        if (is_integer_division(op) && !at::isFloatingType(compute)) {
            const trn_status st = trn_stream_synchronize(s);
            TORCH_CHECK(st == TRN_SUCCESS, trn_last_error());
        }
    }
    tracking::record_executed(name);
    return true;
}

// ---------------------------------------------------------------------------
// binary ops: (self, other), optionally with alpha
// ---------------------------------------------------------------------------
enum class Kind { Binary, BinaryFloat, Comparison };

// Borrowing builders (the same configs as build_binary_op and the rest,
// operands held by reference): the caller keeps `out`, `a` and `b` alive for
// the iterator's life. An owned operand bumps the TensorImpl's refcount, and
// PyTorch 2.13 takes the GIL (incref_pyobject / decref_pyobject) when that
// count leaves and returns to 1, as it does for a tensor only Python holds:
// two GIL round trips per lone op, which PyTorch's CPU kernels (borrowing
// too) do not pay.
template <typename It>
void build_binary(It &iter, Kind kind, const Tensor &out, const Tensor &a, const Tensor &b) {
    switch (kind) {
    case Kind::BinaryFloat: iter.build_borrowing_binary_float_op(out, a, b); break;
    case Kind::Comparison: iter.build_borrowing_comparison_op(out, a, b); break;
    default: iter.build_borrowing_binary_op(out, a, b);
    }
}

template <trn_ew_op OP, Kind K>
bool binary_run(Tensor &out, const Tensor &a, const Tensor &b, const char *name,
                double alpha = 1.0) {
    if constexpr (K == Kind::Comparison && (OP == TRN_EW_EQ || OP == TRN_EW_NE)) {
        if (float8_compare(OP == TRN_EW_EQ, out, a, b)) return true;
    }
    at::ScalarType rt = at::native::result_type(a, b);
    if (K == Kind::BinaryFloat && at::isIntegralType(rt, /*includeBool=*/true))
        rt = c10::typeMetaToScalarType(c10::get_default_dtype());
    if (!supports(OP, rt)) return false;
    if (!out.defined()) {
        DirectIter iter;
        build_binary(iter, K, out, a, b);
        if (!launch(iter, OP, iter.common_dtype(), name, {alpha, 0, 0, 0})) return false;
        out = iter.outs[0];
        return true;
    }
    TensorIterator iter;
    build_binary(iter, K, out, a, b);
    return launch(iter, OP, iter.common_dtype(), name, {alpha, 0, 0, 0});
}

template <typename FnOp, typename InOp, typename OutOp, trn_ew_op OP, Kind K> struct BinaryOp {
    static Tensor fn(const Tensor &a, const Tensor &b) {
        Tensor out;
        if (!binary_run<OP, K>(out, a, b, FnOp::name)) return fallback<FnOp>(a, b);
        return out;
    }
    static Tensor &inplace(Tensor &a, const Tensor &b) {
        // `a` itself as the (defined, never reassigned) output: a copy of the
        // handle would cost two GIL round trips (see build_binary).
        if (!binary_run<OP, K>(a, a, b, InOp::name)) return fallback<InOp>(a, b);
        return a;
    }
    static Tensor &out(const Tensor &a, const Tensor &b, Tensor &result) {
        Tensor o = result;
        if (!binary_run<OP, K>(o, a, b, OutOp::name)) return fallback<OutOp>(a, b, result);
        return result;
    }
};

// add / sub: alpha checked exactly as PyTorch's meta function does.
template <typename FnOp, typename InOp, typename OutOp, trn_ew_op OP> struct AlphaOp {
    static void check(const Tensor &a, const Tensor &b, const Scalar &alpha) {
        if (OP == TRN_EW_SUB) at::native::sub_check(a, b);
        at::native::alpha_check(at::native::result_type(a, b), alpha);
    }
    static double value(const Scalar &alpha) {
        return alpha.isBoolean() ? (alpha.toBool() ? 1.0 : 0.0) : alpha.toDouble();
    }
    static Tensor fn(const Tensor &a, const Tensor &b, const Scalar &alpha) {
        check(a, b, alpha);
        Tensor out;
        if (!binary_run<OP, Kind::Binary>(out, a, b, FnOp::name, value(alpha)))
            return fallback<FnOp>(a, b, alpha);
        return out;
    }
    static Tensor &inplace(Tensor &a, const Tensor &b, const Scalar &alpha) {
        check(a, b, alpha);
        if (!binary_run<OP, Kind::Binary>(a, a, b, InOp::name, value(alpha)))
            return fallback<InOp>(a, b, alpha);
        return a;
    }
    static Tensor &out(const Tensor &a, const Tensor &b, const Scalar &alpha, Tensor &result) {
        check(a, b, alpha);
        Tensor o = result;
        if (!binary_run<OP, Kind::Binary>(o, a, b, OutOp::name, value(alpha)))
            return fallback<OutOp>(a, b, alpha, result);
        return result;
    }
};

// div with rounding_mode: None -> true division, "trunc", "floor".
trn_ew_op div_op(std::optional<std::string_view> mode, Kind &kind) {
    if (!mode) {
        kind = Kind::BinaryFloat;
        return TRN_EW_DIV;
    }
    kind = Kind::Binary;
    if (*mode == "trunc") return TRN_EW_DIV_TRUNC;
    TORCH_CHECK(*mode == "floor",
                "div expected rounding_mode to be one of None, 'trunc', or 'floor' "
                "but found '",
                *mode, "'");
    return TRN_EW_DIV_FLOOR;
}

bool div_run(Tensor &out, const Tensor &a, const Tensor &b, std::optional<std::string_view> mode,
             const char *name) {
    Kind kind;
    trn_ew_op op = div_op(mode, kind);
    switch (op) {
    case TRN_EW_DIV: return binary_run<TRN_EW_DIV, Kind::BinaryFloat>(out, a, b, name);
    case TRN_EW_DIV_TRUNC: return binary_run<TRN_EW_DIV_TRUNC, Kind::Binary>(out, a, b, name);
    default: return binary_run<TRN_EW_DIV_FLOOR, Kind::Binary>(out, a, b, name);
    }
}

Tensor div_mode(const Tensor &a, const Tensor &b, std::optional<std::string_view> mode) {
    Tensor out;
    if (!div_run(out, a, b, mode, "aten::div"))
        return fallback<at::_ops::div_Tensor_mode>(a, b, mode);
    return out;
}
Tensor &div_mode_(Tensor &a, const Tensor &b, std::optional<std::string_view> mode) {
    if (!div_run(a, a, b, mode, "aten::div_"))
        return fallback<at::_ops::div__Tensor_mode>(a, b, mode);
    return a;
}
Tensor &div_mode_out(const Tensor &a, const Tensor &b, std::optional<std::string_view> mode,
                     Tensor &result) {
    Tensor o = result;
    if (!div_run(o, a, b, mode, "aten::div"))
        return fallback<at::_ops::div_out_mode>(a, b, mode, result);
    return result;
}

// Comparisons with a Scalar: the scalar becomes a wrapped CPU number, as in
// PyTorch's own Scalar overloads.
template <typename FnOp, typename InOp, typename OutOp, trn_ew_op OP> struct ScalarCompare {
    static Tensor fn(const Tensor &a, const Scalar &s) {
        Tensor out;
        if (!binary_run<OP, Kind::Comparison>(out, a, at::native::wrapped_scalar_tensor(s),
                                              FnOp::name))
            return fallback<FnOp>(a, s);
        return out;
    }
    static Tensor &inplace(Tensor &a, const Scalar &s) {
        if (!binary_run<OP, Kind::Comparison>(a, a, at::native::wrapped_scalar_tensor(s),
                                              InOp::name))
            return fallback<InOp>(a, s);
        return a;
    }
    static Tensor &out(const Tensor &a, const Scalar &s, Tensor &result) {
        Tensor o = result;
        if (!binary_run<OP, Kind::Comparison>(o, a, at::native::wrapped_scalar_tensor(s),
                                              OutOp::name))
            return fallback<OutOp>(a, s, result);
        return result;
    }
};

// logical_and/or/xor: PyTorch's functional forms allocate a bool result and
// call .out, so only .out is a backend kernel.
template <typename OutOp, trn_ew_op OP>
Tensor &logical_out(const Tensor &a, const Tensor &b, Tensor &result) {
    Tensor o = result;
    if (!binary_run<OP, Kind::Comparison>(o, a, b, OutOp::name))
        return fallback<OutOp>(a, b, result);
    return result;
}

// ---------------------------------------------------------------------------
// unary ops
// ---------------------------------------------------------------------------
// Borrowing, as build_binary (above) explains.
template <bool FLOAT, typename It> void build_unary(It &iter, const Tensor &out, const Tensor &a) {
    if (FLOAT)
        iter.build_borrowing_unary_float_op(out, a);
    else
        iter.build_borrowing_unary_op(out, a);
}

template <trn_ew_op OP, bool FLOAT>
bool unary_run(Tensor &out, const Tensor &a, const char *name, std::array<double, 4> p = {}) {
    at::ScalarType rt = a.scalar_type();
    if (FLOAT && at::isIntegralType(rt, true))
        rt = c10::typeMetaToScalarType(c10::get_default_dtype());
    if (!supports(OP, rt)) return false;
    auto build = [&](auto &iter) { build_unary<FLOAT>(iter, out, a); };
    if (!out.defined()) {
        DirectIter iter;
        build(iter);
        if (!launch(iter, OP, iter.common_dtype(), name, p)) return false;
        out = iter.outs[0];
        return true;
    }
    TensorIterator iter;
    build(iter);
    return launch(iter, OP, iter.common_dtype(), name, p);
}

template <typename FnOp, typename InOp, typename OutOp, trn_ew_op OP, bool FLOAT> struct UnaryOp {
    static Tensor fn(const Tensor &a) {
        Tensor out;
        if (!unary_run<OP, FLOAT>(out, a, FnOp::name)) return fallback<FnOp>(a);
        return out;
    }
    static Tensor &inplace(Tensor &a) {
        // `a` as the output, not a copy (see BinaryOp::inplace).
        if (!unary_run<OP, FLOAT>(a, a, InOp::name)) return fallback<InOp>(a);
        return a;
    }
    static Tensor &out(const Tensor &a, Tensor &result) {
        Tensor o = result;
        if (!unary_run<OP, FLOAT>(o, a, OutOp::name)) return fallback<OutOp>(a, result);
        return result;
    }
};

Tensor &abs_out(const Tensor &a, Tensor &result) {
    if (float8_abs_out(a, result)) return result;
    Tensor o = result;
    // ATen has no bool abs: the CPU path raises its NotImplementedError.
    if (a.is_complex() || a.scalar_type() == at::kBool ||
        !unary_run<TRN_EW_ABS, false>(o, a, "aten::abs"))
        return fallback<at::_ops::abs_out>(a, result);
    return result;
}

Tensor relu(const Tensor &a) {
    TORCH_CHECK(a.scalar_type() != at::kBool, "Boolean inputs not supported for relu");
    Tensor out;
    if (!unary_run<TRN_EW_RELU, false>(out, a, "aten::relu")) return fallback<at::_ops::relu>(a);
    return out;
}
Tensor &relu_(Tensor &a) {
    TORCH_CHECK(a.scalar_type() != at::kBool, "Boolean inputs not supported for relu");
    if (!unary_run<TRN_EW_RELU, false>(a, a, "aten::relu_")) return fallback<at::_ops::relu_>(a);
    return a;
}

// logical_not: any input dtype, result of any dtype (computed as bool).
Tensor &logical_not_out(const Tensor &a, Tensor &result) {
    if (!supports(TRN_EW_LOGICAL_NOT, a.scalar_type()))
        return fallback<at::_ops::logical_not_out>(a, result);
    at::native::resize_output(result, a.sizes());
    Tensor target = result.scalar_type() == at::kBool ? result : at::empty_like(result, at::kBool);
    TensorIterator iter = TensorIteratorConfig()
                              .check_all_same_dtype(false)
                              .add_output(target)
                              .add_const_input(a)
                              .build();
    if (!launch(iter, TRN_EW_LOGICAL_NOT, a.scalar_type(), "aten::logical_not"))
        return fallback<at::_ops::logical_not_out>(a, result);
    if (!target.is_same(result)) result.copy_(target);
    return result;
}

// Unary ops with parameters: leaky_relu, hardtanh, nan_to_num.
template <typename FnOp, typename InOp, typename OutOp> struct LeakyRelu {
    static Tensor fn(const Tensor &a, const Scalar &slope) {
        Tensor out;
        if (!unary_run<TRN_EW_LEAKY_RELU, false>(out, a, FnOp::name, {slope.toDouble()}))
            return fallback<FnOp>(a, slope);
        return out;
    }
    static Tensor &inplace(Tensor &a, const Scalar &slope) {
        if (!unary_run<TRN_EW_LEAKY_RELU, false>(a, a, InOp::name, {slope.toDouble()}))
            return fallback<InOp>(a, slope);
        return a;
    }
    static Tensor &out(const Tensor &a, const Scalar &slope, Tensor &result) {
        Tensor o = result;
        if (!unary_run<TRN_EW_LEAKY_RELU, false>(o, a, OutOp::name, {slope.toDouble()}))
            return fallback<OutOp>(a, slope, result);
        return result;
    }
};

struct Hardtanh {
    static std::array<double, 4> p(const Scalar &lo, const Scalar &hi) {
        return {lo.toDouble(), hi.toDouble(), 0, 0};
    }
    static Tensor fn(const Tensor &a, const Scalar &lo, const Scalar &hi) {
        Tensor out;
        if (a.scalar_type() == at::kBool ||
            !unary_run<TRN_EW_HARDTANH, false>(out, a, "aten::hardtanh", p(lo, hi)))
            return fallback<at::_ops::hardtanh>(a, lo, hi);
        return out;
    }
    static Tensor &inplace(Tensor &a, const Scalar &lo, const Scalar &hi) {
        if (a.scalar_type() == at::kBool ||
            !unary_run<TRN_EW_HARDTANH, false>(a, a, "aten::hardtanh_", p(lo, hi)))
            return fallback<at::_ops::hardtanh_>(a, lo, hi);
        return a;
    }
    static Tensor &out(const Tensor &a, const Scalar &lo, const Scalar &hi, Tensor &result) {
        Tensor o = result;
        if (a.scalar_type() == at::kBool ||
            !unary_run<TRN_EW_HARDTANH, false>(o, a, "aten::hardtanh", p(lo, hi)))
            return fallback<at::_ops::hardtanh_out>(a, lo, hi, result);
        return result;
    }
};

Tensor &nan_to_num_out(const Tensor &a, std::optional<double> nan, std::optional<double> posinf,
                       std::optional<double> neginf, Tensor &result) {
    // Integers have nothing to replace: ATen copies (here, the native copy).
    if (at::isIntegralType(a.scalar_type(), true) && supports(TRN_EW_NAN_TO_NUM, at::kFloat)) {
        TORCH_CHECK(result.scalar_type() == a.scalar_type(),
                    "nan_to_num: dtype of out: ", result.scalar_type(),
                    " should be same as input: ", a.scalar_type());
        at::native::resize_output(result, a.sizes());
        result.copy_(a);
        tracking::record_executed("aten::nan_to_num");
        return result;
    }
    if (!at::isFloatingType(a.scalar_type()) || !supports(TRN_EW_NAN_TO_NUM, a.scalar_type()))
        return fallback<at::_ops::nan_to_num_out>(a, nan, posinf, neginf, result);
    double hi = 0, lo = 0;
    AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, a.scalar_type(), "nan_to_num", [&] {
        hi = static_cast<double>(std::numeric_limits<scalar_t>::max());
        lo = static_cast<double>(std::numeric_limits<scalar_t>::lowest());
    });
    Tensor o = result;
    TensorIterator iter = TensorIterator::unary_op(o, a);
    if (!launch(iter, TRN_EW_NAN_TO_NUM, iter.common_dtype(), "aten::nan_to_num",
                {nan.value_or(0.0), posinf.value_or(hi), neginf.value_or(lo), 0}))
        return fallback<at::_ops::nan_to_num_out>(a, nan, posinf, neginf, result);
    return result;
}

// ---------------------------------------------------------------------------
// ternary ops
// ---------------------------------------------------------------------------
Tensor &where_out(const Tensor &cond, const Tensor &self, const Tensor &other, Tensor &result) {
    TORCH_CHECK(cond.scalar_type() == at::kBool,
                "where expected condition to be a boolean tensor, but got a tensor with dtype ",
                cond.scalar_type());
    at::ScalarType rt = at::native::result_type(self, other);
    // CPU's where_self_out: out= must have the promoted type (no casting).
    TORCH_CHECK(result.scalar_type() == rt, "Expected out type to be ", rt, " but got ",
                result.scalar_type());
    if (!supports(TRN_EW_WHERE, rt))
        return fallback<at::_ops::where_self_out>(cond, self, other, result);
    Tensor out = result;
    TensorIterator iter = TensorIteratorConfig()
                              .check_all_same_dtype(false)
                              .allow_cpu_scalars(true)
                              .add_output(out)
                              .add_const_input(cond)
                              .add_const_input(self)
                              .add_const_input(other)
                              .build();
    if (!launch(iter, TRN_EW_WHERE, rt, "aten::where"))
        return fallback<at::_ops::where_self_out>(cond, self, other, result);
    return result;
}

Tensor where(const Tensor &cond, const Tensor &self, const Tensor &other) {
    at::ScalarType rt = at::native::result_type(self, other);
    if (!supports(TRN_EW_WHERE, rt)) return fallback<at::_ops::where_self>(cond, self, other);
    Tensor result = at::empty({0}, self.options().dtype(rt));
    return where_out(cond, self, other, result);
}

// clamp with scalar bounds (and clamp_min / clamp_max): PyTorch promotes
// the result type over self and the bounds.
bool clamp_run(Tensor &out, const Tensor &self, const std::optional<Scalar> &lo,
               const std::optional<Scalar> &hi, const char *name) {
    TORCH_CHECK(lo || hi, "torch.clamp: At least one of 'min' or 'max' must not be None");
    at::ScalarType rt = self.scalar_type();
    if (!at::isFloatingType(rt)) {  // floating is the highest clamp promotes to
        if (lo) rt = c10::promoteTypes(rt, at::native::result_type(self, *lo));
        if (hi) rt = c10::promoteTypes(rt, at::native::result_type(self, *hi));
    }
    // In-place clamping may not promote; the CPU path raises PyTorch's error.
    if (out.defined() && out.is_same(self) && rt != self.scalar_type()) return false;
    // ATen has no bool clamp: the CPU path raises its NotImplementedError.
    if (!supports(TRN_EW_CLAMP, rt) || rt == at::kBool) return false;
    // A promoted copy only when needed: a second handle to `self` would cost
    // two GIL round trips (build_binary).
    Tensor promoted;
    if (self.scalar_type() != rt) promoted = self.to(rt);
    const Tensor &s = promoted.defined() ? promoted : self;
    TensorIterator iter;  // borrowing (build_binary): `out` and `s` outlive it
    iter.build_borrowing_unary_op(out, s);
    if (!launch(iter, TRN_EW_CLAMP, rt, name, {lo ? 1.0 : 0.0, hi ? 1.0 : 0.0, 0, 0},
                {ExtraScalar{1, lo.value_or(Scalar(0))}, ExtraScalar{2, hi.value_or(Scalar(0))}}))
        return false;
    if (!out.defined()) out = iter.output();
    return true;
}

Tensor neuron_clamp(const Tensor &self, const std::optional<Scalar> &lo,
                    const std::optional<Scalar> &hi) {
    Tensor out;
    if (!clamp_run(out, self, lo, hi, "aten::clamp"))
        return fallback<at::_ops::clamp>(self, lo, hi);
    return out;
}
Tensor &neuron_clamp_(Tensor &self, const std::optional<Scalar> &lo,
                      const std::optional<Scalar> &hi) {
    if (!clamp_run(self, self, lo, hi, "aten::clamp_"))
        return fallback<at::_ops::clamp_>(self, lo, hi);
    return self;
}
Tensor &neuron_clamp_out(const Tensor &self, const std::optional<Scalar> &lo,
                         const std::optional<Scalar> &hi, Tensor &result) {
    Tensor o = result;
    if (!clamp_run(o, self, lo, hi, "aten::clamp"))
        return fallback<at::_ops::clamp_out>(self, lo, hi, result);
    return result;
}
Tensor neuron_clamp_min(const Tensor &self, const Scalar &lo) {
    return neuron_clamp(self, lo, std::nullopt);
}
Tensor &neuron_clamp_min_(Tensor &self, const Scalar &lo) {
    return neuron_clamp_(self, lo, std::nullopt);
}
Tensor &neuron_clamp_min_out(const Tensor &self, const Scalar &lo, Tensor &result) {
    return neuron_clamp_out(self, lo, std::nullopt, result);
}
Tensor neuron_clamp_max(const Tensor &self, const Scalar &hi) {
    return neuron_clamp(self, std::nullopt, hi);
}
Tensor &neuron_clamp_max_(Tensor &self, const Scalar &hi) {
    return neuron_clamp_(self, std::nullopt, hi);
}
Tensor &neuron_clamp_max_out(const Tensor &self, const Scalar &hi, Tensor &result) {
    return neuron_clamp_out(self, std::nullopt, hi, result);
}

// addcmul / addcdiv: self + value * t1 (*|/) t2, promoted like PyTorch.
template <trn_ew_op OP>
bool pointwise_run(Tensor &out, const Tensor &self, const Tensor &t1, const Tensor &t2,
                   const Scalar &value, const char *name) {
    at::native::ResultTypeState state{};
    state = at::native::update_result_type_state(self, state);
    state = at::native::update_result_type_state(t1, state);
    state = at::native::update_result_type_state(t2, state);
    at::ScalarType rt = at::native::result_type(state);
    if (!supports(OP, rt) || (OP == TRN_EW_ADDCDIV && at::isIntegralType(rt, true))) return false;
    TensorIterator iter = TensorIteratorConfig()
                              .promote_inputs_to_common_dtype(true)
                              .cast_common_dtype_to_outputs(true)
                              .enforce_safe_casting_to_output(true)
                              .add_output(out)
                              .add_const_input(self)
                              .add_const_input(t1)
                              .add_const_input(t2)
                              .build();
    if (!launch(iter, OP, iter.common_dtype(), name, {value.toDouble(), 0, 0, 0})) return false;
    if (!out.defined()) out = iter.output();
    return true;
}

template <typename FnOp, typename InOp, typename OutOp, trn_ew_op OP> struct PointwiseOp {
    static Tensor fn(const Tensor &s, const Tensor &a, const Tensor &b, const Scalar &v) {
        Tensor out;
        if (!pointwise_run<OP>(out, s, a, b, v, FnOp::name)) return fallback<FnOp>(s, a, b, v);
        return out;
    }
    static Tensor &inplace(Tensor &s, const Tensor &a, const Tensor &b, const Scalar &v) {
        Tensor out = s;
        if (!pointwise_run<OP>(out, s, a, b, v, InOp::name)) return fallback<InOp>(s, a, b, v);
        return s;
    }
    static Tensor &out(const Tensor &s, const Tensor &a, const Tensor &b, const Scalar &v,
                       Tensor &result) {
        Tensor o = result;
        if (!pointwise_run<OP>(o, s, a, b, v, OutOp::name))
            return fallback<OutOp>(s, a, b, v, result);
        return result;
    }
};

// ---------------------------------------------------------------------------
// unary ops with parameters (activations, logit, round.decimals)
// ---------------------------------------------------------------------------
// Runs a float unary op with parameters; `FLOAT` promotes integer inputs to
// the default dtype (unary_float_op), else integers are unsupported here.
bool param_unary_run(Tensor &out, const Tensor &a, trn_ew_op op, bool float_op,
                     std::array<double, 4> p, const char *name) {
    at::ScalarType rt = a.scalar_type();
    if (float_op && at::isIntegralType(rt, true))
        rt = c10::typeMetaToScalarType(c10::get_default_dtype());
    if (!supports(op, rt)) return false;
    // Borrowing, as build_binary explains: `out` and `a` outlive the iterator.
    TensorIterator iter;
    if (float_op)
        iter.build_borrowing_unary_float_op(out, a);
    else
        iter.build_borrowing_unary_op(out, a);
    if (!launch(iter, op, iter.common_dtype(), name, p)) return false;
    if (!out.defined()) out = iter.output();
    return true;
}

// Generates fn / fn_ / fn.out for an op whose extra arguments map to params.
#define NEURON_PARAM_UNARY(NAME, OPS_FN, OPS_IN, OPS_OUT, OP, FLOAT, PARAMS, ...)                  \
    struct NAME {                                                                                  \
        static Tensor fn(const Tensor &a, __VA_ARGS__) {                                           \
            Tensor out;                                                                            \
            if (!param_unary_run(out, a, OP, FLOAT, PARAMS, OPS_FN::name))                         \
                return fallback<OPS_FN>(a, ARGS);                                                  \
            return out;                                                                            \
        }                                                                                          \
        static Tensor &inplace(Tensor &a, __VA_ARGS__) {                                           \
            if (!param_unary_run(a, a, OP, FLOAT, PARAMS, OPS_IN::name))                           \
                return fallback<OPS_IN>(a, ARGS);                                                  \
            return a;                                                                              \
        }                                                                                          \
        static Tensor &out(const Tensor &a, __VA_ARGS__, Tensor &result) {                         \
            Tensor o = result;                                                                     \
            if (!param_unary_run(o, a, OP, FLOAT, PARAMS, OPS_OUT::name))                          \
                return fallback<OPS_OUT>(a, ARGS, result);                                         \
            return result;                                                                         \
        }                                                                                          \
    };

trn_ew_op gelu_op(std::string_view approximate) {
    TORCH_CHECK(approximate == "none" || approximate == "tanh",
                "approximate argument must be either none or tanh.");
    return approximate == "tanh" ? TRN_EW_GELU_TANH : TRN_EW_GELU;
}
struct Gelu {
    static Tensor fn(const Tensor &a, std::string_view approx) {
        Tensor out;
        if (!param_unary_run(out, a, gelu_op(approx), false, {}, "aten::gelu"))
            return fallback<at::_ops::gelu>(a, approx);
        return out;
    }
    static Tensor &inplace(Tensor &a, std::string_view approx) {
        if (!param_unary_run(a, a, gelu_op(approx), false, {}, "aten::gelu_"))
            return fallback<at::_ops::gelu_>(a, approx);
        return a;
    }
    static Tensor &out(const Tensor &a, std::string_view approx, Tensor &result) {
        Tensor o = result;
        if (!param_unary_run(o, a, gelu_op(approx), false, {}, "aten::gelu"))
            return fallback<at::_ops::gelu_out>(a, approx, result);
        return result;
    }
};

#define ARGS eps
NEURON_PARAM_UNARY(Logit, at::_ops::logit, at::_ops::logit_, at::_ops::logit_out, TRN_EW_LOGIT,
                   true, (std::array<double, 4>{eps ? *eps : -1.0, 0, 0, 0}),
                   std::optional<double> eps)
#undef ARGS

std::array<double, 4> round_params(int64_t decimals) {
    const double ten = std::pow(10.0, static_cast<double>(std::abs(decimals)));
    return {ten, decimals < 0 ? 1.0 : 0.0, 0, 0};
}
#define ARGS decimals
NEURON_PARAM_UNARY(RoundDecimals, at::_ops::round_decimals, at::_ops::round__decimals,
                   at::_ops::round_decimals_out, TRN_EW_ROUND_DECIMALS, false,
                   round_params(decimals), int64_t decimals)
#undef ARGS

#define ARGS alpha, scale, input_scale
NEURON_PARAM_UNARY(Elu, at::_ops::elu, at::_ops::elu_, at::_ops::elu_out, TRN_EW_ELU, false,
                   (std::array<double, 4>{alpha.toDouble(), scale.toDouble(),
                                          input_scale.toDouble(), 0}),
                   const Scalar &alpha, const Scalar &scale, const Scalar &input_scale)
#undef ARGS

Tensor softplus(const Tensor &a, const Scalar &beta, const Scalar &threshold) {
    Tensor out;
    if (!param_unary_run(out, a, TRN_EW_SOFTPLUS, false,
                         {beta.toDouble(), threshold.toDouble(), 0, 0}, "aten::softplus"))
        return fallback<at::_ops::softplus>(a, beta, threshold);
    return out;
}
Tensor &softplus_out(const Tensor &a, const Scalar &beta, const Scalar &threshold, Tensor &result) {
    Tensor o = result;
    if (!param_unary_run(o, a, TRN_EW_SOFTPLUS, false,
                         {beta.toDouble(), threshold.toDouble(), 0, 0}, "aten::softplus"))
        return fallback<at::_ops::softplus_out>(a, beta, threshold, result);
    return result;
}

// ---------------------------------------------------------------------------
// pow: Tensor ^ Tensor, Tensor ^ Scalar, Scalar ^ Tensor
// ---------------------------------------------------------------------------
struct PowTT {
    static Tensor fn(const Tensor &a, const Tensor &b) {
        Tensor out;
        if (!binary_run<TRN_EW_POW, Kind::Binary>(out, a, b, "aten::pow"))
            return fallback<at::_ops::pow_Tensor_Tensor>(a, b);
        return out;
    }
    static Tensor &inplace(Tensor &a, const Tensor &b) {
        if (!binary_run<TRN_EW_POW, Kind::Binary>(a, a, b, "aten::pow_"))
            return fallback<at::_ops::pow__Tensor>(a, b);
        return a;
    }
    static Tensor &out(const Tensor &a, const Tensor &b, Tensor &result) {
        Tensor o = result;
        if (!binary_run<TRN_EW_POW, Kind::Binary>(o, a, b, "aten::pow"))
            return fallback<at::_ops::pow_Tensor_Tensor_out>(a, b, result);
        return result;
    }
};

// Tensor ^ Scalar: ATen's result type is result_type(self, exponent); an
// integer base with a negative integer exponent is an error.
bool pow_scalar_run(Tensor &out, const Tensor &a, const Scalar &e, const char *name) {
    if (at::isIntegralType(a.scalar_type(), true) && e.isIntegral(true))
        TORCH_CHECK(e.toLong() >= 0, "Integers to negative integer powers are not allowed.");
    return binary_run<TRN_EW_POW, Kind::Binary>(out, a, at::native::wrapped_scalar_tensor(e), name);
}
struct PowTS {
    static Tensor fn(const Tensor &a, const Scalar &e) {
        Tensor out;
        if (a.is_complex() || e.isComplex() || !pow_scalar_run(out, a, e, "aten::pow"))
            return fallback<at::_ops::pow_Tensor_Scalar>(a, e);
        return out;
    }
    static Tensor &inplace(Tensor &a, const Scalar &e) {
        if (a.is_complex() || e.isComplex() || !pow_scalar_run(a, a, e, "aten::pow_"))
            return fallback<at::_ops::pow__Scalar>(a, e);
        return a;
    }
    static Tensor &out(const Tensor &a, const Scalar &e, Tensor &result) {
        Tensor o = result;
        if (a.is_complex() || e.isComplex() || !pow_scalar_run(o, a, e, "aten::pow"))
            return fallback<at::_ops::pow_Tensor_Scalar_out>(a, e, result);
        return result;
    }
};
Tensor &pow_scalar_base_out(const Scalar &base, const Tensor &e, Tensor &result) {
    Tensor o = result;
    if (base.isComplex() || e.is_complex() ||
        !binary_run<TRN_EW_POW, Kind::Binary>(o, at::native::wrapped_scalar_tensor(base), e,
                                              "aten::pow"))
        return fallback<at::_ops::pow_Scalar_out>(base, e, result);
    return result;
}
Tensor pow_scalar_base(const Scalar &base, const Tensor &e) {
    Tensor out;
    if (base.isComplex() || e.is_complex() ||
        !binary_run<TRN_EW_POW, Kind::Binary>(out, at::native::wrapped_scalar_tensor(base), e,
                                              "aten::pow"))
        return fallback<at::_ops::pow_Scalar>(base, e);
    return out;
}

// ---------------------------------------------------------------------------
// clamp with tensor bounds, lerp
// ---------------------------------------------------------------------------
bool clamp_tensor_run(Tensor &out, const Tensor &self, const std::optional<Tensor> &lo,
                      const std::optional<Tensor> &hi, const char *name) {
    const bool has_lo = lo && lo->defined(), has_hi = hi && hi->defined();
    TORCH_CHECK(has_lo || has_hi, "torch.clamp: At least one of 'min' or 'max' must not be None");
    TORCH_CHECK(!self.is_complex(), "clamp is not supported for complex types");
    at::native::ResultTypeState state{};
    state = at::native::update_result_type_state(self, state);
    if (has_lo) state = at::native::update_result_type_state(*lo, state);
    if (has_hi) state = at::native::update_result_type_state(*hi, state);
    const at::ScalarType rt = at::native::result_type(state);
    if (out.defined() && out.is_same(self) && rt != self.scalar_type())
        return false;  // the CPU path raises PyTorch's can't-cast error
    if (!supports(TRN_EW_CLAMP, rt)) return false;
    // A missing bound is a placeholder scalar the kernel ignores (p0/p1 = 0).
    // (a bool wrapped number: the lowest category, so it never promotes).
    Tensor l = has_lo ? *lo : at::native::wrapped_scalar_tensor(Scalar(false));
    Tensor h = has_hi ? *hi : at::native::wrapped_scalar_tensor(Scalar(false));
    TensorIterator iter = TensorIteratorConfig()
                              .set_check_mem_overlap(true)
                              .allow_cpu_scalars(true)
                              .add_output(out)
                              .add_const_input(self)
                              .add_const_input(l)
                              .add_const_input(h)
                              .promote_inputs_to_common_dtype(true)
                              .cast_common_dtype_to_outputs(true)
                              .enforce_safe_casting_to_output(true)
                              .build();
    if (!launch(iter, TRN_EW_CLAMP, iter.common_dtype(), name,
                {has_lo ? 1.0 : 0.0, has_hi ? 1.0 : 0.0, 0, 0}))
        return false;
    if (!out.defined()) out = iter.output();
    return true;
}
Tensor clamp_tensor(const Tensor &self, const std::optional<Tensor> &lo,
                    const std::optional<Tensor> &hi) {
    Tensor out;
    if (!clamp_tensor_run(out, self, lo, hi, "aten::clamp"))
        return fallback<at::_ops::clamp_Tensor>(self, lo, hi);
    return out;
}
Tensor &clamp_tensor_(Tensor &self, const std::optional<Tensor> &lo,
                      const std::optional<Tensor> &hi) {
    if (!clamp_tensor_run(self, self, lo, hi, "aten::clamp_"))
        return fallback<at::_ops::clamp__Tensor>(self, lo, hi);
    return self;
}
Tensor &clamp_tensor_out(const Tensor &self, const std::optional<Tensor> &lo,
                         const std::optional<Tensor> &hi, Tensor &result) {
    Tensor o = result;
    if (!clamp_tensor_run(o, self, lo, hi, "aten::clamp"))
        return fallback<at::_ops::clamp_Tensor_out>(self, lo, hi, result);
    return result;
}
Tensor clamp_min_t(const Tensor &s, const Tensor &lo) { return clamp_tensor(s, lo, std::nullopt); }
Tensor &clamp_min_t_(Tensor &s, const Tensor &lo) { return clamp_tensor_(s, lo, std::nullopt); }
Tensor &clamp_min_t_out(const Tensor &s, const Tensor &lo, Tensor &r) {
    return clamp_tensor_out(s, lo, std::nullopt, r);
}
Tensor clamp_max_t(const Tensor &s, const Tensor &hi) { return clamp_tensor(s, std::nullopt, hi); }
Tensor &clamp_max_t_(Tensor &s, const Tensor &hi) { return clamp_tensor_(s, std::nullopt, hi); }
Tensor &clamp_max_t_out(const Tensor &s, const Tensor &hi, Tensor &r) {
    return clamp_tensor_out(s, std::nullopt, hi, r);
}

// lerp(start, end, weight): same dtype for all (ATen checks), float only.
bool lerp_run(Tensor &out, const Tensor &start, const Tensor &end, const Tensor *weight,
              const Scalar *weight_s, const char *name) {
    TORCH_CHECK(start.dtype() == end.dtype(), "expected dtype ", start.dtype(),
                " for `end` but got dtype ", end.dtype());
    if (weight)
        TORCH_CHECK(start.dtype() == weight->dtype(), "expected dtype ", start.dtype(),
                    " for `weight` but got dtype ", weight->dtype());
    if (!supports(TRN_EW_LERP, start.scalar_type())) return false;
    TensorIteratorConfig config;
    config.add_output(out).add_const_input(start).add_const_input(end);
    if (weight) config.add_const_input(*weight);
    TensorIterator iter = config.build();
    if (weight_s) {
        if (!launch(iter, TRN_EW_LERP, iter.common_dtype(), name, {}, {ExtraScalar{2, *weight_s}}))
            return false;
    } else if (!launch(iter, TRN_EW_LERP, iter.common_dtype(), name)) {
        return false;
    }
    if (!out.defined()) out = iter.output();
    return true;
}
struct LerpScalar {
    static Tensor fn(const Tensor &s, const Tensor &e, const Scalar &w) {
        Tensor out;
        if (!lerp_run(out, s, e, nullptr, &w, "aten::lerp"))
            return fallback<at::_ops::lerp_Scalar>(s, e, w);
        return out;
    }
    static Tensor &inplace(Tensor &s, const Tensor &e, const Scalar &w) {
        Tensor out = s;
        if (!lerp_run(out, s, e, nullptr, &w, "aten::lerp_"))
            return fallback<at::_ops::lerp__Scalar>(s, e, w);
        return s;
    }
    static Tensor &out(const Tensor &s, const Tensor &e, const Scalar &w, Tensor &result) {
        Tensor o = result;
        if (!lerp_run(o, s, e, nullptr, &w, "aten::lerp"))
            return fallback<at::_ops::lerp_Scalar_out>(s, e, w, result);
        return result;
    }
};
struct LerpTensor {
    static Tensor fn(const Tensor &s, const Tensor &e, const Tensor &w) {
        Tensor out;
        if (!lerp_run(out, s, e, &w, nullptr, "aten::lerp"))
            return fallback<at::_ops::lerp_Tensor>(s, e, w);
        return out;
    }
    static Tensor &inplace(Tensor &s, const Tensor &e, const Tensor &w) {
        Tensor out = s;
        if (!lerp_run(out, s, e, &w, nullptr, "aten::lerp_"))
            return fallback<at::_ops::lerp__Tensor>(s, e, w);
        return s;
    }
    static Tensor &out(const Tensor &s, const Tensor &e, const Tensor &w, Tensor &result) {
        Tensor o = result;
        if (!lerp_run(o, s, e, &w, nullptr, "aten::lerp"))
            return fallback<at::_ops::lerp_Tensor_out>(s, e, w, result);
        return result;
    }
};

template <trn_ew_op OP> Tensor fallback_predicate(const Tensor &a) {
    if constexpr (OP == TRN_EW_ISNAN)
        return fallback<at::_ops::isnan>(a);
    else if constexpr (OP == TRN_EW_ISINF)
        return fallback<at::_ops::isinf>(a);
    else
        return fallback<at::_ops::isfinite>(a);
}

// isposinf / isneginf (SDPA's math path uses isneginf through _safe_softmax).
template <trn_ew_op OP> Tensor &inf_predicate_out(const Tensor &a, Tensor &result) {
    const char *name = OP == TRN_EW_ISPOSINF ? "aten::isposinf" : "aten::isneginf";
    TORCH_CHECK(!a.is_complex(), (OP == TRN_EW_ISPOSINF ? "isposinf" : "isneginf"),
                " does not support complex inputs.");
    TORCH_CHECK(result.scalar_type() == at::kBool,
                (OP == TRN_EW_ISPOSINF ? "isposinf" : "isneginf"),
                " does not support non-boolean outputs.");
    if (supports(OP, a.scalar_type())) {
        at::native::resize_output(result, a.sizes());
        TensorIterator iter = TensorIteratorConfig()
                                  .check_all_same_dtype(false)
                                  .add_output(result)
                                  .add_const_input(a)
                                  .build();
        if (launch(iter, OP, a.scalar_type(), name)) return result;
    }
    if constexpr (OP == TRN_EW_ISPOSINF)
        return fallback<at::_ops::isposinf_out>(a, result);
    else
        return fallback<at::_ops::isneginf_out>(a, result);
}
template <trn_ew_op OP> Tensor inf_predicate(const Tensor &a) {
    Tensor out = at::empty({0}, a.options().dtype(at::kBool));
    inf_predicate_out<OP>(a, out);
    return out;
}

// isnan / isinf / isfinite: one predicate kernel instead of ATen's
// composites (self != self, abs == inf, ...), integers included.
template <trn_ew_op OP> Tensor predicate(const Tensor &a) {
    if (!supports(OP, a.scalar_type())) return fallback_predicate<OP>(a);
    Tensor out = at::empty(a.sizes(), a.options().dtype(at::kBool));
    TensorIterator iter = TensorIteratorConfig()
                              .check_all_same_dtype(false)
                              .add_output(out)
                              .add_const_input(a)
                              .build();
    const char *name = OP == TRN_EW_ISNAN   ? "aten::isnan"
                       : OP == TRN_EW_ISINF ? "aten::isinf"
                                            : "aten::isfinite";
    if (!launch(iter, OP, a.scalar_type(), name)) return fallback_predicate<OP>(a);
    return out;
}

// rsub(self, other, alpha) = other - alpha * self.
Tensor rsub_tensor(const Tensor &self, const Tensor &other, const Scalar &alpha) {
    return at::sub(other, self, alpha);
}
Tensor rsub_scalar(const Tensor &self, const Scalar &other, const Scalar &alpha) {
    return at::sub(at::native::wrapped_scalar_tensor(other), self, alpha);
}

#define NEURON_REG_FN_OUT(T, fn_name, out_name)                                                    \
    m.impl(fn_name, TORCH_FN(T::fn));                                                              \
    m.impl(out_name, TORCH_FN(T::out));
#define NEURON_REG3(T, fn_name, in_name, out_name)                                                 \
    NEURON_REG_FN_OUT(T, fn_name, out_name)                                                        \
    m.impl(in_name, TORCH_FN(T::inplace));

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
    // binary arithmetic
    using Add = AlphaOp<at::_ops::add_Tensor, at::_ops::add__Tensor, at::_ops::add_out, TRN_EW_ADD>;
    using Sub = AlphaOp<at::_ops::sub_Tensor, at::_ops::sub__Tensor, at::_ops::sub_out, TRN_EW_SUB>;
    using Mul = BinaryOp<at::_ops::mul_Tensor, at::_ops::mul__Tensor, at::_ops::mul_out, TRN_EW_MUL,
                         Kind::Binary>;
    using Div = BinaryOp<at::_ops::div_Tensor, at::_ops::div__Tensor, at::_ops::div_out, TRN_EW_DIV,
                         Kind::BinaryFloat>;
    using FloorDivide = BinaryOp<at::_ops::floor_divide, at::_ops::floor_divide__Tensor,
                                 at::_ops::floor_divide_out, TRN_EW_DIV_FLOOR, Kind::Binary>;
    using Remainder = BinaryOp<at::_ops::remainder_Tensor, at::_ops::remainder__Tensor,
                               at::_ops::remainder_Tensor_out, TRN_EW_REMAINDER, Kind::Binary>;
    using Fmod = BinaryOp<at::_ops::fmod_Tensor, at::_ops::fmod__Tensor, at::_ops::fmod_Tensor_out,
                          TRN_EW_FMOD, Kind::Binary>;
    using Maximum = BinaryOp<at::_ops::maximum, at::_ops::maximum, at::_ops::maximum_out,
                             TRN_EW_MAXIMUM, Kind::Binary>;
    using Minimum = BinaryOp<at::_ops::minimum, at::_ops::minimum, at::_ops::minimum_out,
                             TRN_EW_MINIMUM, Kind::Binary>;
    using Fmax =
        BinaryOp<at::_ops::fmax, at::_ops::fmax, at::_ops::fmax_out, TRN_EW_FMAX, Kind::Binary>;
    using Fmin =
        BinaryOp<at::_ops::fmin, at::_ops::fmin, at::_ops::fmin_out, TRN_EW_FMIN, Kind::Binary>;
    using Copysign = BinaryOp<at::_ops::copysign_Tensor, at::_ops::copysign__Tensor,
                              at::_ops::copysign_out, TRN_EW_COPYSIGN, Kind::BinaryFloat>;
    NEURON_REG3(Add, "add.Tensor", "add_.Tensor", "add.out")
    NEURON_REG3(Sub, "sub.Tensor", "sub_.Tensor", "sub.out")
    NEURON_REG3(Mul, "mul.Tensor", "mul_.Tensor", "mul.out")
    NEURON_REG3(Div, "div.Tensor", "div_.Tensor", "div.out")
    m.impl("div.Tensor_mode", TORCH_FN(div_mode));
    m.impl("div_.Tensor_mode", TORCH_FN(div_mode_));
    m.impl("div.out_mode", TORCH_FN(div_mode_out));
    NEURON_REG3(FloorDivide, "floor_divide", "floor_divide_.Tensor", "floor_divide.out")
    NEURON_REG3(Remainder, "remainder.Tensor", "remainder_.Tensor", "remainder.Tensor_out")
    NEURON_REG3(Fmod, "fmod.Tensor", "fmod_.Tensor", "fmod.Tensor_out")
    NEURON_REG_FN_OUT(Maximum, "maximum", "maximum.out")
    NEURON_REG_FN_OUT(Minimum, "minimum", "minimum.out")
    NEURON_REG_FN_OUT(Fmax, "fmax", "fmax.out")
    NEURON_REG_FN_OUT(Fmin, "fmin", "fmin.out")
    NEURON_REG3(Copysign, "copysign.Tensor", "copysign_.Tensor", "copysign.out")

    // comparisons, logical and bitwise
#define NEURON_COMPARE(op, OP)                                                                     \
    {                                                                                              \
        using T = BinaryOp<at::_ops::op##_Tensor, at::_ops::op##__Tensor,                          \
                           at::_ops::op##_Tensor_out, OP, Kind::Comparison>;                       \
        using S = ScalarCompare<at::_ops::op##_Scalar, at::_ops::op##__Scalar,                     \
                                at::_ops::op##_Scalar_out, OP>;                                    \
        NEURON_REG3(T, #op ".Tensor", #op "_.Tensor", #op ".Tensor_out")                           \
        NEURON_REG3(S, #op ".Scalar", #op "_.Scalar", #op ".Scalar_out")                           \
    }
    NEURON_COMPARE(eq, TRN_EW_EQ)
    NEURON_COMPARE(ne, TRN_EW_NE)
    NEURON_COMPARE(lt, TRN_EW_LT)
    NEURON_COMPARE(le, TRN_EW_LE)
    NEURON_COMPARE(gt, TRN_EW_GT)
    NEURON_COMPARE(ge, TRN_EW_GE)
#undef NEURON_COMPARE
    m.impl("logical_and.out",
           TORCH_FN((logical_out<at::_ops::logical_and_out, TRN_EW_LOGICAL_AND>)));
    m.impl("logical_or.out", TORCH_FN((logical_out<at::_ops::logical_or_out, TRN_EW_LOGICAL_OR>)));
    m.impl("logical_xor.out",
           TORCH_FN((logical_out<at::_ops::logical_xor_out, TRN_EW_LOGICAL_XOR>)));
    m.impl("logical_not.out", TORCH_FN(logical_not_out));
#define NEURON_BITWISE(op, OP)                                                                     \
    {                                                                                              \
        using T = BinaryOp<at::_ops::op##_Tensor, at::_ops::op##__Tensor,                          \
                           at::_ops::op##_Tensor_out, OP, Kind::Binary>;                           \
        NEURON_REG3(T, #op ".Tensor", #op "_.Tensor", #op ".Tensor_out")                           \
    }
    NEURON_BITWISE(bitwise_and, TRN_EW_BITWISE_AND)
    NEURON_BITWISE(bitwise_or, TRN_EW_BITWISE_OR)
    NEURON_BITWISE(bitwise_xor, TRN_EW_BITWISE_XOR)
    NEURON_BITWISE(bitwise_left_shift, TRN_EW_LSHIFT)
    NEURON_BITWISE(bitwise_right_shift, TRN_EW_RSHIFT)
#undef NEURON_BITWISE

    // unary
#define NEURON_UNARY(op, OP, FLOAT)                                                                \
    {                                                                                              \
        using T = UnaryOp<at::_ops::op, at::_ops::op##_, at::_ops::op##_out, OP, FLOAT>;           \
        NEURON_REG3(T, #op, #op "_", #op ".out")                                                   \
    }
    NEURON_UNARY(neg, TRN_EW_NEG, false)
    NEURON_UNARY(sign, TRN_EW_SIGN, false)
    NEURON_UNARY(floor, TRN_EW_FLOOR, false)
    NEURON_UNARY(ceil, TRN_EW_CEIL, false)
    NEURON_UNARY(round, TRN_EW_ROUND, false)
    NEURON_UNARY(trunc, TRN_EW_TRUNC, false)
    NEURON_UNARY(frac, TRN_EW_FRAC, false)
    NEURON_UNARY(sqrt, TRN_EW_SQRT, true)
    NEURON_UNARY(rsqrt, TRN_EW_RSQRT, true)
    NEURON_UNARY(reciprocal, TRN_EW_RECIPROCAL, true)
    NEURON_UNARY(bitwise_not, TRN_EW_BITWISE_NOT, false)
    NEURON_UNARY(hardsigmoid, TRN_EW_HARDSIGMOID, false)
    NEURON_UNARY(hardswish, TRN_EW_HARDSWISH, false)
    NEURON_UNARY(exp, TRN_EW_EXP, true)
    NEURON_UNARY(exp2, TRN_EW_EXP2, true)
    NEURON_UNARY(expm1, TRN_EW_EXPM1, true)
    NEURON_UNARY(log, TRN_EW_LOG, true)
    NEURON_UNARY(log2, TRN_EW_LOG2, true)
    NEURON_UNARY(log10, TRN_EW_LOG10, true)
    NEURON_UNARY(log1p, TRN_EW_LOG1P, true)
    NEURON_UNARY(sin, TRN_EW_SIN, true)
    NEURON_UNARY(cos, TRN_EW_COS, true)
    NEURON_UNARY(tan, TRN_EW_TAN, true)
    NEURON_UNARY(asin, TRN_EW_ASIN, true)
    NEURON_UNARY(acos, TRN_EW_ACOS, true)
    NEURON_UNARY(atan, TRN_EW_ATAN, true)
    NEURON_UNARY(sinh, TRN_EW_SINH, true)
    NEURON_UNARY(cosh, TRN_EW_COSH, true)
    NEURON_UNARY(tanh, TRN_EW_TANH, true)
    NEURON_UNARY(sigmoid, TRN_EW_SIGMOID, true)
    NEURON_UNARY(erf, TRN_EW_ERF, true)
    NEURON_UNARY(erfc, TRN_EW_ERFC, true)
    NEURON_UNARY(erfinv, TRN_EW_ERFINV, true)
    NEURON_UNARY(silu, TRN_EW_SILU, false)
    NEURON_UNARY(mish, TRN_EW_MISH, false)
#undef NEURON_UNARY
    NEURON_REG3(Gelu, "gelu", "gelu_", "gelu.out")
    NEURON_REG3(Logit, "logit", "logit_", "logit.out")
    NEURON_REG3(RoundDecimals, "round.decimals", "round_.decimals", "round.decimals_out")
    NEURON_REG3(Elu, "elu", "elu_", "elu.out")
    m.impl("softplus", TORCH_FN(softplus));
    m.impl("softplus.out", TORCH_FN(softplus_out));
    NEURON_REG3(PowTT, "pow.Tensor_Tensor", "pow_.Tensor", "pow.Tensor_Tensor_out")
    NEURON_REG3(PowTS, "pow.Tensor_Scalar", "pow_.Scalar", "pow.Tensor_Scalar_out")
    m.impl("pow.Scalar", TORCH_FN(pow_scalar_base));
    m.impl("pow.Scalar_out", TORCH_FN(pow_scalar_base_out));
    {
        using Atan2 = BinaryOp<at::_ops::atan2, at::_ops::atan2_, at::_ops::atan2_out, TRN_EW_ATAN2,
                               Kind::BinaryFloat>;
        using Hypot = BinaryOp<at::_ops::hypot, at::_ops::hypot_, at::_ops::hypot_out, TRN_EW_HYPOT,
                               Kind::Binary>;
        NEURON_REG3(Atan2, "atan2", "atan2_", "atan2.out")
        NEURON_REG3(Hypot, "hypot", "hypot_", "hypot.out")
    }
    m.impl("clamp.Tensor", TORCH_FN(clamp_tensor));
    m.impl("clamp_.Tensor", TORCH_FN(clamp_tensor_));
    m.impl("clamp.Tensor_out", TORCH_FN(clamp_tensor_out));
    m.impl("clamp_min.Tensor", TORCH_FN(clamp_min_t));
    m.impl("clamp_min_.Tensor", TORCH_FN(clamp_min_t_));
    m.impl("clamp_min.Tensor_out", TORCH_FN(clamp_min_t_out));
    m.impl("clamp_max.Tensor", TORCH_FN(clamp_max_t));
    m.impl("clamp_max_.Tensor", TORCH_FN(clamp_max_t_));
    m.impl("clamp_max.Tensor_out", TORCH_FN(clamp_max_t_out));
    NEURON_REG3(LerpScalar, "lerp.Scalar", "lerp_.Scalar", "lerp.Scalar_out")
    NEURON_REG3(LerpTensor, "lerp.Tensor", "lerp_.Tensor", "lerp.Tensor_out")
    m.impl("abs.out", TORCH_FN(abs_out));
    m.impl("isnan", TORCH_FN(predicate<TRN_EW_ISNAN>));
    m.impl("isinf", TORCH_FN(predicate<TRN_EW_ISINF>));
    m.impl("isposinf", TORCH_FN(inf_predicate<TRN_EW_ISPOSINF>));
    m.impl("isposinf.out", TORCH_FN(inf_predicate_out<TRN_EW_ISPOSINF>));
    m.impl("isneginf", TORCH_FN(inf_predicate<TRN_EW_ISNEGINF>));
    m.impl("isneginf.out", TORCH_FN(inf_predicate_out<TRN_EW_ISNEGINF>));
    m.impl("isfinite", TORCH_FN(predicate<TRN_EW_ISFINITE>));
    m.impl("rsub.Tensor", TORCH_FN(rsub_tensor));
    m.impl("rsub.Scalar", TORCH_FN(rsub_scalar));
    m.impl("relu", TORCH_FN(relu));
    m.impl("relu_", TORCH_FN(relu_));
    using Leaky = LeakyRelu<at::_ops::leaky_relu, at::_ops::leaky_relu_, at::_ops::leaky_relu_out>;
    NEURON_REG3(Leaky, "leaky_relu", "leaky_relu_", "leaky_relu.out")
    NEURON_REG3(Hardtanh, "hardtanh", "hardtanh_", "hardtanh.out")
    m.impl("nan_to_num.out", TORCH_FN(nan_to_num_out));

    // ternary
    m.impl("where.self", TORCH_FN(where));
    m.impl("where.self_out", TORCH_FN(where_out));
    m.impl("clamp", TORCH_FN(neuron_clamp));
    m.impl("clamp_", TORCH_FN(neuron_clamp_));
    m.impl("clamp.out", TORCH_FN(neuron_clamp_out));
    m.impl("clamp_min", TORCH_FN(neuron_clamp_min));
    m.impl("clamp_min_", TORCH_FN(neuron_clamp_min_));
    m.impl("clamp_min.out", TORCH_FN(neuron_clamp_min_out));
    m.impl("clamp_max", TORCH_FN(neuron_clamp_max));
    m.impl("clamp_max_", TORCH_FN(neuron_clamp_max_));
    m.impl("clamp_max.out", TORCH_FN(neuron_clamp_max_out));
    using Addcmul =
        PointwiseOp<at::_ops::addcmul, at::_ops::addcmul_, at::_ops::addcmul_out, TRN_EW_ADDCMUL>;
    using Addcdiv =
        PointwiseOp<at::_ops::addcdiv, at::_ops::addcdiv_, at::_ops::addcdiv_out, TRN_EW_ADDCDIV>;
    NEURON_REG3(Addcmul, "addcmul", "addcmul_", "addcmul.out")
    NEURON_REG3(Addcdiv, "addcdiv", "addcdiv_", "addcdiv.out")
}

// ---------------------------------------------------------------------------
// activation backward: (grad_output, x) -> grad_input, as ATen's structured
// kernels build them (a binary op over grad and the saved tensor).
// ---------------------------------------------------------------------------
bool backward_run(Tensor &out, const Tensor &grad, const Tensor &x, trn_ew_op op, const char *name,
                  std::array<double, 4> p = {}) {
    if (!supports(op, at::native::result_type(grad, x))) return false;
    TensorIterator iter = TensorIterator::borrowing_binary_op(out, grad, x);
    if (!launch(iter, op, iter.common_dtype(), name, p)) return false;
    if (!out.defined()) out = iter.output();
    return true;
}

// FnOp(grad, x, extra...) and OutOp(grad, x, extra..., grad_input); ARGS is
// the parenthesized list of extra argument names, each preceded by a comma.
#define NB_UNPAREN(...) __VA_ARGS__
#define NEURON_BACKWARD(NAME, FN_OP, OUT_OP, OP, PARAMS, ARGS, ...)                                \
    struct NAME {                                                                                  \
        static Tensor fn(const Tensor &grad, const Tensor &x __VA_OPT__(, ) __VA_ARGS__) {         \
            Tensor out;                                                                            \
            if (!backward_run(out, grad, x, OP, FN_OP::name, PARAMS))                              \
                return fallback<FN_OP>(grad, x NB_UNPAREN ARGS);                                   \
            return out;                                                                            \
        }                                                                                          \
        static Tensor &out(const Tensor &grad, const Tensor &x,                                    \
                           __VA_OPT__(__VA_ARGS__, ) Tensor &result) {                             \
            Tensor o = result;                                                                     \
            if (!backward_run(o, grad, x, OP, OUT_OP::name, PARAMS))                               \
                return fallback<OUT_OP>(grad, x NB_UNPAREN ARGS, result);                          \
            return result;                                                                         \
        }                                                                                          \
    };
#define NOPARAMS (std::array<double, 4>{})
NEURON_BACKWARD(ThresholdBackward, at::_ops::threshold_backward,
                at::_ops::threshold_backward_grad_input, TRN_EW_THRESHOLD_BACKWARD,
                (std::array<double, 4>{threshold.toDouble(), 0, 0, 0}), (, threshold),
                const Scalar &threshold)
NEURON_BACKWARD(SigmoidBackward, at::_ops::sigmoid_backward, at::_ops::sigmoid_backward_grad_input,
                TRN_EW_SIGMOID_BACKWARD, NOPARAMS, ())
NEURON_BACKWARD(TanhBackward, at::_ops::tanh_backward, at::_ops::tanh_backward_grad_input,
                TRN_EW_TANH_BACKWARD, NOPARAMS, ())
NEURON_BACKWARD(HardtanhBackward, at::_ops::hardtanh_backward,
                at::_ops::hardtanh_backward_grad_input, TRN_EW_HARDTANH_BACKWARD,
                (std::array<double, 4>{lo.toDouble(), hi.toDouble(), 0, 0}), (, lo, hi),
                const Scalar &lo, const Scalar &hi)
NEURON_BACKWARD(HardsigmoidBackward, at::_ops::hardsigmoid_backward,
                at::_ops::hardsigmoid_backward_grad_input, TRN_EW_HARDSIGMOID_BACKWARD, NOPARAMS,
                ())
NEURON_BACKWARD(HardswishBackward, at::_ops::hardswish_backward, at::_ops::hardswish_backward_out,
                TRN_EW_HARDSWISH_BACKWARD, NOPARAMS, ())
NEURON_BACKWARD(SiluBackward, at::_ops::silu_backward, at::_ops::silu_backward_grad_input,
                TRN_EW_SILU_BACKWARD, NOPARAMS, ())
NEURON_BACKWARD(SoftplusBackward, at::_ops::softplus_backward,
                at::_ops::softplus_backward_grad_input, TRN_EW_SOFTPLUS_BACKWARD,
                (std::array<double, 4>{beta.toDouble(), threshold.toDouble(), 0, 0}),
                (, beta, threshold), const Scalar &beta, const Scalar &threshold)
#undef NOPARAMS

void check_leaky_slope(const Scalar &slope, bool self_is_result) {
    TORCH_CHECK(!self_is_result || slope.to<double>() >= 0.0,
                "In-place leakyReLu backward calculation is triggered with a negative slope "
                "which is not supported. This is caused by calling in-place forward function "
                "with a negative slope, please call out-of-place version instead. File an "
                "issue at https://github.com/pytorch/pytorch if you do require supporting "
                "in-place leakRelu backward calculation with negative slope");
}
Tensor leaky_relu_backward(const Tensor &grad, const Tensor &x, const Scalar &slope,
                           bool self_is_result) {
    check_leaky_slope(slope, self_is_result);
    Tensor out;
    if (!backward_run(out, grad, x, TRN_EW_LEAKY_RELU_BACKWARD, "aten::leaky_relu_backward",
                      {slope.toDouble(), 0, 0, 0}))
        return fallback<at::_ops::leaky_relu_backward>(grad, x, slope, self_is_result);
    return out;
}
Tensor &leaky_relu_backward_out(const Tensor &grad, const Tensor &x, const Scalar &slope,
                                bool self_is_result, Tensor &result) {
    check_leaky_slope(slope, self_is_result);
    Tensor o = result;
    if (!backward_run(o, grad, x, TRN_EW_LEAKY_RELU_BACKWARD, "aten::leaky_relu_backward",
                      {slope.toDouble(), 0, 0, 0}))
        return fallback<at::_ops::leaky_relu_backward_grad_input>(grad, x, slope, self_is_result,
                                                                  result);
    return result;
}

trn_ew_op gelu_backward_op(std::string_view approximate) {
    return gelu_op(approximate) == TRN_EW_GELU_TANH ? TRN_EW_GELU_TANH_BACKWARD
                                                    : TRN_EW_GELU_BACKWARD;
}
Tensor gelu_backward(const Tensor &grad, const Tensor &x, std::string_view approx) {
    Tensor out;
    if (!backward_run(out, grad, x, gelu_backward_op(approx), "aten::gelu_backward"))
        return fallback<at::_ops::gelu_backward>(grad, x, approx);
    return out;
}
Tensor &gelu_backward_out(const Tensor &grad, const Tensor &x, std::string_view approx,
                          Tensor &result) {
    Tensor o = result;
    if (!backward_run(o, grad, x, gelu_backward_op(approx), "aten::gelu_backward"))
        return fallback<at::_ops::gelu_backward_grad_input>(grad, x, approx, result);
    return result;
}

std::array<double, 4> elu_bw_params(const Scalar &alpha, const Scalar &scale,
                                    const Scalar &input_scale, bool is_result) {
    return {alpha.toDouble(), scale.toDouble(), input_scale.toDouble(), is_result ? 1.0 : 0.0};
}
void check_elu_result(const Scalar &alpha, bool is_result) {
    TORCH_CHECK(!is_result || alpha.to<double>() >= 0.0,
                "In-place elu backward calculation is triggered with a negative slope which is "
                "not supported. This is caused by calling in-place forward function with a "
                "negative slope, please call out-of-place version instead.");
}
Tensor elu_backward(const Tensor &grad, const Scalar &alpha, const Scalar &scale,
                    const Scalar &input_scale, bool is_result, const Tensor &x) {
    check_elu_result(alpha, is_result);
    Tensor out;
    if (!backward_run(out, grad, x, TRN_EW_ELU_BACKWARD, "aten::elu_backward",
                      elu_bw_params(alpha, scale, input_scale, is_result)))
        return fallback<at::_ops::elu_backward>(grad, alpha, scale, input_scale, is_result, x);
    return out;
}
Tensor &elu_backward_out(const Tensor &grad, const Scalar &alpha, const Scalar &scale,
                         const Scalar &input_scale, bool is_result, const Tensor &x,
                         Tensor &result) {
    check_elu_result(alpha, is_result);
    Tensor o = result;
    if (!backward_run(o, grad, x, TRN_EW_ELU_BACKWARD, "aten::elu_backward",
                      elu_bw_params(alpha, scale, input_scale, is_result)))
        return fallback<at::_ops::elu_backward_grad_input>(grad, alpha, scale, input_scale,
                                                           is_result, x, result);
    return result;
}

Tensor mish_backward(const Tensor &grad, const Tensor &x) {
    Tensor out;
    if (!backward_run(out, grad, x, TRN_EW_MISH_BACKWARD, "aten::mish_backward"))
        return fallback<at::_ops::mish_backward>(grad, x);
    return out;
}

// native_dropout_backward: grad * mask * scale (mask bool or the grad's dtype).
Tensor native_dropout_backward(const Tensor &grad, const Tensor &mask, double scale) {
    TORCH_CHECK(mask.scalar_type() == at::kBool || mask.scalar_type() == grad.scalar_type(),
                "Mask should be Bool or same dtype as input");
    // Integer grads promote with the float scale (a float result): the CPU path.
    if (at::isFloatingType(grad.scalar_type()) && supports(TRN_EW_ADDCMUL, grad.scalar_type())) {
        // ADDCMUL computes x + p0 * a * b: x = 0 (a CPU scalar), a = grad,
        // b = mask, p0 = scale; one rounding, as grad * mask * scale.
        Tensor out = at::empty_like(grad);
        Tensor zero = at::native::wrapped_scalar_tensor(Scalar(0.0));
        TensorIterator iter = TensorIteratorConfig()
                                  .add_output(out)
                                  .add_const_input(zero)
                                  .add_const_input(grad)
                                  .add_const_input(mask)
                                  .check_all_same_dtype(false)
                                  .allow_cpu_scalars(true)
                                  .build();
        if (launch(iter, TRN_EW_ADDCMUL, grad.scalar_type(), "aten::native_dropout_backward",
                   {scale, 0, 0, 0}))
            return out;
    }
    return fallback<at::_ops::native_dropout_backward>(grad, mask, scale);
}

}  // namespace

namespace {
TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
    NEURON_REG_FN_OUT(ThresholdBackward, "threshold_backward", "threshold_backward.grad_input")
    NEURON_REG_FN_OUT(SigmoidBackward, "sigmoid_backward", "sigmoid_backward.grad_input")
    NEURON_REG_FN_OUT(TanhBackward, "tanh_backward", "tanh_backward.grad_input")
    NEURON_REG_FN_OUT(HardtanhBackward, "hardtanh_backward", "hardtanh_backward.grad_input")
    NEURON_REG_FN_OUT(HardsigmoidBackward, "hardsigmoid_backward",
                      "hardsigmoid_backward.grad_input")
    NEURON_REG_FN_OUT(HardswishBackward, "hardswish_backward", "hardswish_backward.out")
    NEURON_REG_FN_OUT(SiluBackward, "silu_backward", "silu_backward.grad_input")
    NEURON_REG_FN_OUT(SoftplusBackward, "softplus_backward", "softplus_backward.grad_input")
    m.impl("leaky_relu_backward", TORCH_FN(leaky_relu_backward));
    m.impl("leaky_relu_backward.grad_input", TORCH_FN(leaky_relu_backward_out));
    m.impl("gelu_backward", TORCH_FN(gelu_backward));
    m.impl("gelu_backward.grad_input", TORCH_FN(gelu_backward_out));
    m.impl("elu_backward", TORCH_FN(elu_backward));
    m.impl("elu_backward.grad_input", TORCH_FN(elu_backward_out));
    m.impl("mish_backward", TORCH_FN(mish_backward));
    m.impl("native_dropout_backward", TORCH_FN(native_dropout_backward));
}
}  // namespace

// For tests (bound in runtime/module.cpp): arms or disarms launch()'s use
// count probe and returns the count it last kept (-1: none).
int64_t ew_launch_use_count_probe_for_test(bool arm) {
    g_use_count_probe_armed = arm;
    return g_use_count_probe.exchange(-1);
}

// For tests (bound in runtime/module.cpp): the use count of `a`'s TensorImpl before and while each
// functional builder (binary, float, comparison, unary, unary float) holds it
// as an operand. Equal when the builders borrow (no GIL round trip).
std::vector<int64_t> ew_operand_use_counts_for_test(const Tensor &a, const Tensor &b) {
    std::vector<int64_t> counts{static_cast<int64_t>(a.use_count())};
    const Tensor undefined;
    for (Kind k : {Kind::Binary, Kind::BinaryFloat, Kind::Comparison}) {
        DirectIter iter;
        build_binary(iter, k, undefined, a, b);
        counts.push_back(static_cast<int64_t>(a.use_count()));
    }
    {
        DirectIter iter;
        build_unary<false>(iter, undefined, a);
        counts.push_back(static_cast<int64_t>(a.use_count()));
    }
    {
        DirectIter iter;
        build_unary<true>(iter, undefined, a);
        counts.push_back(static_cast<int64_t>(a.use_count()));
    }
    return counts;
}

}  // namespace neuron
