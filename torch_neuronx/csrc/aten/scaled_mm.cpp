// aten/scaled_mm.cpp - torch._scaled_mm on neuron (and its out= form), run
// by libtrn's scaled-mm kernel (trn/scaled_mm.h).
//
// Native: float8 operands (e4m3fn, e5m2 and the fnuz pair, mixed allowed)
// with tensorwise scales (one float32 each) or rowwise ones (scale_a
// (M, 1), scale_b (1, N), float32, contiguous), an optional bias row, and an
// output of float32, bfloat16, float16 or float8 without scale_result.
// Anything else - scale_result, block (MX) scales, which PyTorch CPU does
// not take either - goes to the CPU, which computes it or raises its own
// error. use_fast_accum changes nothing: accumulation is float32 always.
#include <ATen/ATen.h>
#include <ATen/Operators.h>
#include <ATen/native/Resize.h>
#include <torch/library.h>

#include <trn/scaled_mm.h>

#include "aten/float8.h"
#include "fallback/cpu_fallback.h"
#include "observe/op_tracking.h"
#include "runtime/device.h"

namespace neuron {
namespace {

using at::Tensor;

bool on_device(const Tensor &t, const Tensor &ref) { return t.device() == ref.device(); }

// Whether the call is one the kernel computes; the caller falls back if not.
bool native_ok(const Tensor &a, const Tensor &b, const Tensor &sa, const Tensor &sb,
               const std::optional<Tensor> &bias, const std::optional<Tensor> &scale_result,
               at::ScalarType out_dtype) {
    if (a.dim() != 2 || b.dim() != 2 || a.size(1) != b.size(0) || scale_result.has_value())
        return false;
    auto da = native_dtype(a.scalar_type()), db = native_dtype(b.scalar_type()),
         dout = native_dtype(out_dtype);
    if (!da || !db || !dout || !trn_scaled_mm_supports(*da, *db, *dout)) return false;
    if (sa.scalar_type() != at::kFloat || sb.scalar_type() != at::kFloat) return false;
    if (!on_device(b, a) || !on_device(sa, a) || !on_device(sb, a)) return false;
    const int64_t m = a.size(0), n = b.size(1);
    const bool tensorwise = sa.numel() == 1 && sb.numel() == 1;
    const bool rowwise = sa.dim() == 2 && sa.size(0) == m && sa.size(1) == 1 && sb.dim() == 2 &&
                         sb.size(0) == 1 && sb.size(1) == n && sa.is_contiguous() &&
                         sb.is_contiguous();
    if (!tensorwise && !rowwise) return false;
    if (bias) {
        auto bd = bias->scalar_type();
        if (bias->dim() != 1 || bias->size(0) != n || !on_device(*bias, a) ||
            !(bd == at::kFloat || bd == at::kBFloat16 || bd == at::kHalf))
            return false;
    }
    return true;
}

void launch(const Tensor &a, const Tensor &b, const Tensor &sa, const Tensor &sb,
            const std::optional<Tensor> &bias, const Tensor &out) {
    if (out.numel() == 0) return;
    trn_scaled_mm_desc d{};
    d.a_dtype = *native_dtype(a.scalar_type());
    d.b_dtype = *native_dtype(b.scalar_type());
    d.out_dtype = *native_dtype(out.scalar_type());
    d.m = a.size(0);
    d.n = b.size(1);
    d.k = a.size(1);
    d.a = a.const_data_ptr();
    d.a_strides[0] = a.stride(0);
    d.a_strides[1] = a.stride(1);
    d.b = b.const_data_ptr();
    d.b_strides[0] = b.stride(0);
    d.b_strides[1] = b.stride(1);
    d.c = out.data_ptr();
    d.c_strides[0] = out.stride(0);
    d.c_strides[1] = out.stride(1);
    d.scale_a = sa.const_data_ptr<float>();
    d.scale_a_count = sa.numel() == 1 ? 1 : sa.size(0);
    d.scale_a_stride = 1;
    d.scale_b = sb.const_data_ptr<float>();
    d.scale_b_count = sb.numel() == 1 ? 1 : sb.size(1);
    d.scale_b_stride = 1;
    if (bias) {
        d.bias = bias->const_data_ptr();
        d.bias_dtype = *native_dtype(bias->scalar_type());
        d.bias_stride = bias->stride(0);
    }
    TRN_CHECK(trn_scaled_mm_launch(current_trn_stream(out.device().index()), &d));
}

Tensor scaled_mm(const Tensor &a, const Tensor &b, const Tensor &sa, const Tensor &sb,
                 const std::optional<Tensor> &bias, const std::optional<Tensor> &scale_result,
                 std::optional<at::ScalarType> out_dtype, bool use_fast_accum) {
    const at::ScalarType ot = out_dtype.value_or(a.scalar_type());
    if (!native_ok(a, b, sa, sb, bias, scale_result, ot))
        return fallback<at::_ops::_scaled_mm>(a, b, sa, sb, bias, scale_result, out_dtype,
                                              use_fast_accum);
    Tensor out = at::empty({a.size(0), b.size(1)}, a.options().dtype(ot));
    launch(a, b, sa, sb, bias, out);
    tracking::record_executed("aten::_scaled_mm");
    return out;
}

Tensor &scaled_mm_out(const Tensor &a, const Tensor &b, const Tensor &sa, const Tensor &sb,
                      const std::optional<Tensor> &bias, const std::optional<Tensor> &scale_result,
                      std::optional<at::ScalarType> out_dtype, bool use_fast_accum, Tensor &out) {
    const at::ScalarType ot = out_dtype.value_or(a.scalar_type());
    if (!native_ok(a, b, sa, sb, bias, scale_result, ot) || out.scalar_type() != ot ||
        !on_device(out, a))
        return fallback<at::_ops::_scaled_mm_out>(a, b, sa, sb, bias, scale_result, out_dtype,
                                                  use_fast_accum, out);
    at::native::resize_output(out, {a.size(0), b.size(1)});
    Tensor dst = out.is_contiguous() ? out : at::empty({a.size(0), b.size(1)}, out.options());
    launch(a, b, sa, sb, bias, dst);
    if (!dst.is_same(out)) out.copy_(dst);
    tracking::record_executed("aten::_scaled_mm.out");
    return out;
}

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
    m.impl("_scaled_mm", TORCH_FN(scaled_mm));
    m.impl("_scaled_mm.out", TORCH_FN(scaled_mm_out));
}

}  // namespace
}  // namespace neuron
