// aten/upsample.cpp - upsampling on neuron: upsample_nearest{1,2,3}d,
// _upsample_nearest_exact{1,2,3}d, upsample_linear1d, upsample_bilinear2d,
// upsample_bicubic2d and upsample_trilinear3d, with their backwards, run by libtrn's upsample
// kernels (trn/upsample.h). F.interpolate
// and nn.Upsample reach them through the CompositeImplicit .vec overloads,
// which compute the output size and pass the scale factors on.
//
// Shapes and errors follow PyTorch CPU's checks; operands are made contiguous
// (a native copy) before their pointers reach libtrn, and outputs take the
// input's memory format back. Nearest forward takes every dtype; bilinear,
// bicubic and the backwards are floating point, other dtypes go to the CPU fallback.
#include <ATen/Functions.h>
#include <ATen/Operators.h>
#include <ATen/native/CPUFallback.h>
#include <torch/library.h>

#include <optional>
#include <vector>

#include "fallback/cpu_fallback.h"
#include "runtime/device.h"
#include "observe/op_tracking.h"
#include "trn/upsample.h"

namespace neuron {
namespace {

using at::Tensor;
using Scale = std::optional<double>;

template <typename Op, typename... Args> decltype(auto) fallback_sym(Args &&...args) {
    return at::native::call_fallback_fn_symint<&cpu_fallback, Op>::call(
        std::forward<Args>(args)...);
}

std::vector<int64_t> ints(c10::SymIntArrayRef s) {
    auto r = C10_AS_INTARRAYREF_SLOW(s);
    return {r.begin(), r.end()};
}

// Fills the [planes, d, h, w] description of `input_size` -> `output_size`
// (the spatial dims right-aligned into d, h, w), with PyTorch's checks.
trn_upsample_desc describe(at::IntArrayRef input_size, at::IntArrayRef output_size,
                           std::initializer_list<Scale> scales, trn_upsample_mode mode,
                           bool align_corners) {
    const size_t sp = output_size.size();
    TORCH_CHECK(input_size.size() == sp + 2, "It is expected input_size equals to ", sp + 2,
                ", but got size ", input_size.size());
    trn_upsample_desc d{};
    d.mode = mode;
    d.align_corners = align_corners;
    d.planes = input_size[0] * input_size[1];
    d.spatial_dims = static_cast<int>(sp);
    bool ok = true;
    for (int k = 0; k < 3; ++k) {
        d.in_size[k] = d.out_size[k] = 1;
        d.scales[k] = 0;
    }
    auto sc = scales.begin();
    for (size_t i = 0; i < sp; ++i, ++sc) {
        const size_t k = 3 - sp + i;
        d.in_size[k] = input_size[2 + i];
        d.out_size[k] = output_size[i];
        d.scales[k] = sc->has_value() ? **sc : 0.0;
        ok = ok && d.in_size[k] > 0 && d.out_size[k] > 0;
    }
    TORCH_CHECK(ok, "Input and output sizes should be greater than 0, but got input (",
                input_size.slice(2), ") and output (", output_size, ")");
    return d;
}

Tensor in_format_of(const Tensor &t, const Tensor &like) {
    const auto fmt = like.suggest_memory_format();
    return fmt != at::MemoryFormat::Contiguous && !like.is_contiguous() ? t.contiguous(fmt) : t;
}

// Forward; nullopt when the dtype needs the CPU fallback.
std::optional<Tensor> up_forward(const Tensor &self, at::IntArrayRef output_size,
                                 std::initializer_list<Scale> scales, trn_upsample_mode mode,
                                 bool align_corners, const char *op) {
    const size_t sp = output_size.size();
    TORCH_CHECK(self.dim() == static_cast<int64_t>(sp) + 2, "Expected ", sp + 2, "D input (got ",
                self.dim(), "D)");
    trn_upsample_desc d = describe(self.sizes(), output_size, scales, mode, align_corners);
    auto dt = native_dtype(self.scalar_type());
    // ATen's CPU kernels take floating dtypes and uint8 only: other integer
    // and bool inputs go to the CPU path, which raises its NotImplementedError.
    const bool aten_dtype =
        at::isFloatingType(self.scalar_type()) || self.scalar_type() == at::kByte;
    if (!dt || !aten_dtype || !trn_upsample_supports(*dt, mode, 0)) return std::nullopt;
    d.dtype = *dt;
    std::vector<int64_t> osize{self.size(0), self.size(1)};
    osize.insert(osize.end(), output_size.begin(), output_size.end());
    const Tensor x = self.contiguous();
    Tensor y = at::empty(osize, self.options().memory_format(at::MemoryFormat::Contiguous));
    d.src = x.numel() ? x.data_ptr() : nullptr;
    d.dst = y.numel() ? y.data_ptr() : nullptr;
    TRN_CHECK(trn_upsample_launch(current_trn_stream(self.device().index()), &d));
    tracking::record_executed(op);
    return in_format_of(y, self);
}

std::optional<Tensor> up_backward(const Tensor &grad_out, at::IntArrayRef output_size,
                                  at::IntArrayRef input_size, std::initializer_list<Scale> scales,
                                  trn_upsample_mode mode, bool align_corners, const char *op) {
    trn_upsample_desc d = describe(input_size, output_size, scales, mode, align_corners);
    TORCH_CHECK(grad_out.dim() == static_cast<int64_t>(input_size.size()),
                "Expected grad_output to be a tensor of dimension ", input_size.size(),
                " but got: dimension ", grad_out.dim());
    for (size_t i = 0; i < input_size.size(); ++i) {
        const int64_t want = i < 2 ? input_size[i] : output_size[i - 2];
        TORCH_CHECK(grad_out.size(static_cast<int64_t>(i)) == want,
                    "Expected grad_output to have the same shape as output; output.size(", i,
                    ") = ", want, " but got grad_output.size(", i,
                    ") = ", grad_out.size(static_cast<int64_t>(i)));
    }
    auto dt = native_dtype(grad_out.scalar_type());
    if (!dt || !trn_upsample_supports(*dt, mode, 1)) return std::nullopt;
    d.dtype = *dt;
    const Tensor g = grad_out.contiguous();
    Tensor gi =
        at::empty(input_size, grad_out.options().memory_format(at::MemoryFormat::Contiguous));
    d.src = g.numel() ? g.data_ptr() : nullptr;
    d.dst = gi.numel() ? gi.data_ptr() : nullptr;
    TRN_CHECK(trn_upsample_backward_launch(current_trn_stream(grad_out.device().index()), &d));
    tracking::record_executed(op);
    return in_format_of(gi, grad_out);
}

constexpr auto NEAREST = TRN_UPSAMPLE_NEAREST;
constexpr auto EXACT = TRN_UPSAMPLE_NEAREST_EXACT;

// One forward and one backward wrapper per op: the kernel, or the op's own
// CPU fallback.
#define NEAREST_OPS(NAME, MODE, DIMS, SCALE_PARAMS, SCALE_LIST, SCALE_ARGS)                        \
    Tensor NAME(const Tensor &self, c10::SymIntArrayRef out, SCALE_PARAMS) {                       \
        if (auto r = up_forward(self, ints(out), SCALE_LIST, MODE, false, "aten::" #NAME))         \
            return *r;                                                                             \
        return fallback_sym<at::_ops::NAME>(self, out, SCALE_ARGS);                                \
    }                                                                                              \
    Tensor NAME##_backward(const Tensor &g, c10::SymIntArrayRef out, c10::SymIntArrayRef in,       \
                           SCALE_PARAMS) {                                                         \
        if (auto r = up_backward(g, ints(out), ints(in), SCALE_LIST, MODE, false,                  \
                                 "aten::" #NAME "_backward"))                                      \
            return *r;                                                                             \
        return fallback_sym<at::_ops::NAME##_backward>(g, out, in, SCALE_ARGS);                    \
    }

#define P1 Scale s
#define P2 Scale sh, Scale sw
#define P3 Scale sd, Scale sh, Scale sw
#define L1                                                                                         \
    { s }
#define L2                                                                                         \
    { sh, sw }
#define L3                                                                                         \
    { sd, sh, sw }
#define A1 s
#define A2 sh, sw
#define A3 sd, sh, sw
NEAREST_OPS(upsample_nearest1d, NEAREST, 1, P1, L1, A1)
NEAREST_OPS(upsample_nearest2d, NEAREST, 2, P2, L2, A2)
NEAREST_OPS(upsample_nearest3d, NEAREST, 3, P3, L3, A3)
NEAREST_OPS(_upsample_nearest_exact1d, EXACT, 1, P1, L1, A1)
NEAREST_OPS(_upsample_nearest_exact2d, EXACT, 2, P2, L2, A2)
NEAREST_OPS(_upsample_nearest_exact3d, EXACT, 3, P3, L3, A3)
#undef NEAREST_OPS

Tensor upsample_bilinear2d(const Tensor &self, c10::SymIntArrayRef out, bool align, Scale sh,
                           Scale sw) {
    if (auto r = up_forward(self, ints(out), {sh, sw}, TRN_UPSAMPLE_BILINEAR, align,
                            "aten::upsample_bilinear2d"))
        return *r;
    return fallback_sym<at::_ops::upsample_bilinear2d>(self, out, align, sh, sw);
}

Tensor upsample_bilinear2d_backward(const Tensor &g, c10::SymIntArrayRef out,
                                    c10::SymIntArrayRef in, bool align, Scale sh, Scale sw) {
    if (auto r = up_backward(g, ints(out), ints(in), {sh, sw}, TRN_UPSAMPLE_BILINEAR, align,
                             "aten::upsample_bilinear2d_backward"))
        return *r;
    return fallback_sym<at::_ops::upsample_bilinear2d_backward>(g, out, in, align, sh, sw);
}

// Bicubic 2-d (antialias=False; F.interpolate's antialias=True is
// _upsample_bicubic2d_aa, which stays on the CPU fallback).
Tensor upsample_bicubic2d(const Tensor &self, c10::SymIntArrayRef out, bool align, Scale sh,
                          Scale sw) {
    if (auto r = up_forward(self, ints(out), {sh, sw}, TRN_UPSAMPLE_BICUBIC, align,
                            "aten::upsample_bicubic2d"))
        return *r;
    return fallback_sym<at::_ops::upsample_bicubic2d>(self, out, align, sh, sw);
}

Tensor upsample_bicubic2d_backward(const Tensor &g, c10::SymIntArrayRef out, c10::SymIntArrayRef in,
                                   bool align, Scale sh, Scale sw) {
    if (auto r = up_backward(g, ints(out), ints(in), {sh, sw}, TRN_UPSAMPLE_BICUBIC, align,
                             "aten::upsample_bicubic2d_backward"))
        return *r;
    return fallback_sym<at::_ops::upsample_bicubic2d_backward>(g, out, in, align, sh, sw);
}

// Linear 1-d is the bilinear kernel with a height of 1 (in and out).
Tensor upsample_linear1d(const Tensor &self, c10::SymIntArrayRef out, bool align, Scale s) {
    if (auto r = up_forward(self, ints(out), {s}, TRN_UPSAMPLE_BILINEAR, align,
                            "aten::upsample_linear1d"))
        return *r;
    return fallback_sym<at::_ops::upsample_linear1d>(self, out, align, s);
}

Tensor upsample_linear1d_backward(const Tensor &g, c10::SymIntArrayRef out, c10::SymIntArrayRef in,
                                  bool align, Scale s) {
    if (auto r = up_backward(g, ints(out), ints(in), {s}, TRN_UPSAMPLE_BILINEAR, align,
                             "aten::upsample_linear1d_backward"))
        return *r;
    return fallback_sym<at::_ops::upsample_linear1d_backward>(g, out, in, align, s);
}

// Trilinear: the same kernel, linear in d too.
Tensor upsample_trilinear3d(const Tensor &self, c10::SymIntArrayRef out, bool align, Scale sd,
                            Scale sh, Scale sw) {
    if (auto r = up_forward(self, ints(out), {sd, sh, sw}, TRN_UPSAMPLE_BILINEAR, align,
                            "aten::upsample_trilinear3d"))
        return *r;
    return fallback_sym<at::_ops::upsample_trilinear3d>(self, out, align, sd, sh, sw);
}

Tensor upsample_trilinear3d_backward(const Tensor &g, c10::SymIntArrayRef out,
                                     c10::SymIntArrayRef in, bool align, Scale sd, Scale sh,
                                     Scale sw) {
    if (auto r = up_backward(g, ints(out), ints(in), {sd, sh, sw}, TRN_UPSAMPLE_BILINEAR, align,
                             "aten::upsample_trilinear3d_backward"))
        return *r;
    return fallback_sym<at::_ops::upsample_trilinear3d_backward>(g, out, in, align, sd, sh, sw);
}

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
#define REG(NAME)                                                                                  \
    m.impl(#NAME, TORCH_FN(NAME));                                                                 \
    m.impl(#NAME "_backward", TORCH_FN(NAME##_backward));
    REG(upsample_nearest1d)
    REG(upsample_nearest2d)
    REG(upsample_nearest3d)
    REG(_upsample_nearest_exact1d)
    REG(_upsample_nearest_exact2d)
    REG(_upsample_nearest_exact3d)
    REG(upsample_bilinear2d)
    REG(upsample_bicubic2d)
    REG(upsample_linear1d)
    REG(upsample_trilinear3d)
#undef REG
}

}  // namespace
}  // namespace neuron
