// aten/scaled_mm.cpp - torch._scaled_mm and torch._scaled_mm_v2 on neuron
// (and their out= forms), run by libtrn's scaled-mm kernel (trn/scaled_mm.h).
//
// Native: float8 operands (e4m3fn, e5m2 and the fnuz pair, mixed allowed)
// with tensorwise scales (one float32 each) or rowwise ones (scale_a
// (M, 1), scale_b (1, N), float32, contiguous), an optional bias row, and an
// output of float32, bfloat16, float16 or float8 without scale_result.
// MX (MXFP8) block scaling as PyTorch's CUDA path takes it: e4m3fn/e5m2
// operands, float8_e8m0fnu scales for every 32 K elements, contiguous, in
// the swizzled layout (SWIZZLE_32_4_4; _scaled_mm assumes it, _scaled_mm_v2
// names it with recipe BlockWise1x32) with exactly the element counts CUDA
// checks; other MX requests (unswizzled scales, fnuz or float4 operands,
// wrong sizes) raise here, since PyTorch CPU has no MX path to fall back to.
// Anything else - scale_result, the DeepSeek 1x128/128x128 and NVFP4
// recipes - goes to the CPU, which computes it or raises its own error.
// use_fast_accum changes nothing: accumulation is float32 always.
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

// PyTorch's ScalingType / SwizzleType values (torch.nn.functional).
constexpr int64_t kTensorWise = 0, kRowWise = 1, kBlockWise1x32 = 3, kSwizzle32_4_4 = 1;

bool is_mx_scale(const Tensor &s) { return s.scalar_type() == at::kFloat8_e8m0fnu; }

// Checks an MX request (either scale e8m0fnu) the way CUDA's MXFP8 path
// does and raises a ValueError naming what is wrong.
void check_mx(const Tensor &a, const Tensor &b, const Tensor &sa, const Tensor &sb,
              const std::optional<Tensor> &bias, const std::optional<Tensor> &scale_result,
              at::ScalarType out_dtype) {
    TORCH_CHECK_VALUE(is_mx_scale(sa) && is_mx_scale(sb),
                      "_scaled_mm on neuron: MX block scaling needs both scales in "
                      "float8_e8m0fnu, got ",
                      sa.scalar_type(), " and ", sb.scalar_type());
    TORCH_CHECK_VALUE(a.dim() == 2 && b.dim() == 2 && a.size(1) == b.size(0),
                      "_scaled_mm on neuron: MX block scaling needs 2-d operands (M, K) and "
                      "(K, N), got ",
                      a.sizes(), " and ", b.sizes());
    auto mxfp8 = [](at::ScalarType t) { return t == at::kFloat8_e4m3fn || t == at::kFloat8_e5m2; };
    TORCH_CHECK_NOT_IMPLEMENTED(mxfp8(a.scalar_type()) && mxfp8(b.scalar_type()),
                                "_scaled_mm on neuron: MX block scaling takes float8_e4m3fn or "
                                "float8_e5m2 operands (MXFP8), got ",
                                a.scalar_type(), " and ", b.scalar_type());
    TORCH_CHECK_VALUE(!scale_result.has_value(),
                      "_scaled_mm on neuron: scale_result is not taken with MX scales");
    const int64_t ea = trn_scaled_mm_mx_scale_bytes(a.size(0), a.size(1)),
                  eb = trn_scaled_mm_mx_scale_bytes(b.size(1), a.size(1));
    TORCH_CHECK_VALUE(sa.numel() == ea && sb.numel() == eb,
                      "_scaled_mm on neuron: for MX block scaling (one scale per 32 K elements, "
                      "swizzled 32x4x4) scale_a should have ",
                      ea, " elements and scale_b ", eb, ", got ", sa.numel(), " and ", sb.numel());
    TORCH_CHECK_VALUE(sa.is_contiguous() && sb.is_contiguous(),
                      "_scaled_mm on neuron: MX scales must be contiguous");
    TORCH_CHECK_VALUE(on_device(b, a) && on_device(sa, a) && on_device(sb, a),
                      "_scaled_mm on neuron: operands and scales must be on one device");
    auto dout = native_dtype(out_dtype);
    TORCH_CHECK_VALUE(dout && trn_scaled_mm_supports(TRN_DTYPE_F8E4M3FN, TRN_DTYPE_F8E4M3FN, *dout),
                      "_scaled_mm on neuron: MX output dtype ", out_dtype,
                      " is not float32, bfloat16, float16 or float8");
    if (bias) {
        auto bd = bias->scalar_type();
        TORCH_CHECK_VALUE(bias->dim() == 1 && bias->size(0) == b.size(1) && on_device(*bias, a) &&
                              (bd == at::kFloat || bd == at::kBFloat16 || bd == at::kHalf),
                          "_scaled_mm on neuron: bias must be a float32, bfloat16 or float16 "
                          "vector of ",
                          b.size(1), " elements on the operands' device");
    }
}

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
    if (is_mx_scale(sa)) {
        d.mx_scale_a = static_cast<const uint8_t *>(sa.const_data_ptr());
        d.mx_scale_b = static_cast<const uint8_t *>(sb.const_data_ptr());
    } else {
        d.scale_a = sa.const_data_ptr<float>();
        d.scale_a_count = sa.numel() == 1 ? 1 : sa.size(0);
        d.scale_a_stride = 1;
        d.scale_b = sb.const_data_ptr<float>();
        d.scale_b_count = sb.numel() == 1 ? 1 : sb.size(1);
        d.scale_b_stride = 1;
    }
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
    const bool mx = is_mx_scale(sa) || is_mx_scale(sb);
    if (mx) check_mx(a, b, sa, sb, bias, scale_result, ot);
    if (!mx && !native_ok(a, b, sa, sb, bias, scale_result, ot))
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
    const bool mx = is_mx_scale(sa) || is_mx_scale(sb);
    if (mx) {
        check_mx(a, b, sa, sb, bias, scale_result, ot);
        TORCH_CHECK_VALUE(
            out.scalar_type() == ot && on_device(out, a), "_scaled_mm.out on neuron: out must be ",
            ot, " on the operands' device, got ", out.scalar_type(), " on ", out.device());
    }
    if (!mx && (!native_ok(a, b, sa, sb, bias, scale_result, ot) || out.scalar_type() != ot ||
                !on_device(out, a)))
        return fallback<at::_ops::_scaled_mm_out>(a, b, sa, sb, bias, scale_result, out_dtype,
                                                  use_fast_accum, out);
    at::native::resize_output(out, {a.size(0), b.size(1)});
    Tensor dst = out.is_contiguous() ? out : at::empty({a.size(0), b.size(1)}, out.options());
    launch(a, b, sa, sb, bias, dst);
    if (!dst.is_same(out)) out.copy_(dst);
    tracking::record_executed("aten::_scaled_mm.out");
    return out;
}

// _scaled_mm_v2's recipe lists mapped onto _scaled_mm's: one scale each,
// both TensorWise, both RowWise, or both BlockWise1x32 with swizzled scales,
// K contracted as in mm. false: not a v2 call the kernel takes (MX ones
// raise instead, as in check_mx).
bool v2_as_v1(const Tensor &a, at::TensorList scale_a, at::IntArrayRef recipe_a,
              at::IntArrayRef swizzle_a, at::TensorList scale_b, at::IntArrayRef recipe_b,
              at::IntArrayRef swizzle_b, at::IntArrayRef contraction_dim) {
    if (scale_a.size() != 1 || scale_b.size() != 1 || recipe_a.size() != 1 ||
        recipe_b.size() != 1 || recipe_a[0] != recipe_b[0])
        return false;
    if (!contraction_dim.empty() &&
        !(contraction_dim.size() == 2 && contraction_dim[0] == 1 && contraction_dim[1] == 0))
        return false;
    const int64_t r = recipe_a[0];
    if (r == kBlockWise1x32) {
        const bool swz = swizzle_a.size() == 1 && swizzle_b.size() == 1 &&
                         swizzle_a[0] == kSwizzle32_4_4 && swizzle_b[0] == kSwizzle32_4_4;
        TORCH_CHECK_VALUE(swz,
                          "_scaled_mm_v2 on neuron: MX (BlockWise1x32) scales must be swizzled "
                          "SWIZZLE_32_4_4, as on CUDA, got swizzle_a=",
                          swizzle_a, " swizzle_b=", swizzle_b);
        TORCH_CHECK_VALUE(is_mx_scale(scale_a[0]) && is_mx_scale(scale_b[0]),
                          "_scaled_mm_v2 on neuron: BlockWise1x32 scales must be "
                          "float8_e8m0fnu, got ",
                          scale_a[0].scalar_type(), " and ", scale_b[0].scalar_type());
        return true;
    }
    (void)a;
    return (r == kTensorWise || r == kRowWise) && !is_mx_scale(scale_a[0]) &&
           !is_mx_scale(scale_b[0]);
}

Tensor scaled_mm_v2(const Tensor &a, const Tensor &b, at::TensorList scale_a,
                    at::IntArrayRef recipe_a, at::IntArrayRef swizzle_a, at::TensorList scale_b,
                    at::IntArrayRef recipe_b, at::IntArrayRef swizzle_b,
                    const std::optional<Tensor> &bias, std::optional<at::ScalarType> out_dtype,
                    at::IntArrayRef contraction_dim, bool use_fast_accum) {
    if (v2_as_v1(a, scale_a, recipe_a, swizzle_a, scale_b, recipe_b, swizzle_b, contraction_dim)) {
        const Tensor &sa = scale_a[0], &sb = scale_b[0];
        const at::ScalarType ot = out_dtype.value_or(a.scalar_type());
        const bool mx = recipe_a[0] == kBlockWise1x32;
        if (mx) check_mx(a, b, sa, sb, bias, std::nullopt, ot);
        // v2's rowwise scales may be (M,) / (N,): shape them as v1's.
        const bool rowwise = recipe_a[0] == kRowWise && sa.numel() == a.size(0) && b.dim() == 2 &&
                             sb.numel() == b.size(1);
        const Tensor sa1 = rowwise ? sa.reshape({-1, 1}) : sa;
        const Tensor sb1 = rowwise ? sb.reshape({1, -1}) : sb;
        if (mx || native_ok(a, b, sa1, sb1, bias, std::nullopt, ot)) {
            Tensor out = at::empty({a.size(0), b.size(1)}, a.options().dtype(ot));
            launch(a, b, sa1, sb1, bias, out);
            tracking::record_executed("aten::_scaled_mm_v2");
            return out;
        }
    }
    return fallback<at::_ops::_scaled_mm_v2>(a, b, scale_a, recipe_a, swizzle_a, scale_b, recipe_b,
                                             swizzle_b, bias, out_dtype, contraction_dim,
                                             use_fast_accum);
}

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
    m.impl("_scaled_mm", TORCH_FN(scaled_mm));
    m.impl("_scaled_mm.out", TORCH_FN(scaled_mm_out));
    m.impl("_scaled_mm_v2", TORCH_FN(scaled_mm_v2));
}

}  // namespace
}  // namespace neuron
