// aten/pool3d.cpp - 3-d pooling and adaptive pooling on neuron:
// max_pool3d_with_indices, avg_pool3d, _adaptive_avg_pool2d / 3d and
// adaptive_max_pool2d / 3d, each with its backward, run by libtrn's 3-d
// pooling kernel (trn/pool3d.h; 2-d volumes have depth 1). The 1-d forms
// reach these through PyTorch's own decompositions (adaptive_*_pool1d
// unsqueeze to 2-d). Argument checks, output sizes and error messages follow
// PyTorch CPU; inputs are made contiguous; channels_last inputs get
// channels_last results. Dtypes the kernel does not support go to the CPU
// fallback.
#include <ATen/Functions.h>
#include <ATen/Operators.h>
#include <ATen/native/CPUFallback.h>
#include <torch/library.h>

#include <tuple>
#include <utility>
#include <vector>

#include "fallback/cpu_fallback.h"
#include "runtime/device.h"
#include "observe/op_tracking.h"
#include "aten/pool_run.h"
#include "aten/pool_shape.h"
#include "trn/pool3d.h"

namespace neuron {
namespace {

using at::Tensor;

// The volumes of an input with `sd` spatial dims (2 or 3) after one (C) or
// two (N, C) leading dims; 2-d volumes get depth 1.
struct Vol {
    trn_pool3d_geometry g{};
    std::vector<int64_t> lead;  // the leading dims
};

Vol vol_of(const Tensor &input, int sd) {
    Vol v;
    v.g.planes = 1;
    for (int64_t i = 0; i < input.dim() - sd; i++) {
        v.lead.push_back(input.size(i));
        v.g.planes *= input.size(i);
    }
    for (int i = 0; i < 3; i++) {
        v.g.in[i] = i < 3 - sd ? 1 : input.size(input.dim() - 3 + i);
        v.g.out[i] = 1;
        v.g.k[i] = v.g.s[i] = v.g.dil[i] = 1;
    }
    return v;
}

std::vector<int64_t> out_sizes(const Vol &v, int sd) {
    std::vector<int64_t> s = v.lead;
    for (int i = 3 - sd; i < 3; i++) s.push_back(v.g.out[i]);
    return s;
}

std::tuple<Tensor, Tensor> run_forward(const Tensor &input, const Vol &v, int sd,
                                       trn_pool_mode mode, const char *name) {
    return pool_run_forward(trn_pool3d_launch, input, v.g, out_sizes(v, sd), mode, name);
}

Tensor run_backward(const Tensor &grad_out, const Tensor &input, const Tensor &indices,
                    const Vol &v, int sd, trn_pool_mode mode, const char *name) {
    return pool_run_backward(trn_pool3d_backward_launch, grad_out, input, indices, v.g,
                             out_sizes(v, sd), mode, name);
}

// ---- fixed-window 3-d pooling ------------------------------------------------

// Validates like ATen's max_pool3d / avg_pool3d and fills the geometry.
Vol pool3d_setup(const char *name, const Tensor &input, at::IntArrayRef kernel,
                 at::IntArrayRef stride, at::IntArrayRef padding, at::IntArrayRef dilation,
                 bool ceil) {
    TORCH_CHECK(kernel.size() == 1 || kernel.size() == 3, name,
                ": kernel_size must either be a single int, or a tuple of three ints");
    TORCH_CHECK(stride.empty() || stride.size() == 1 || stride.size() == 3, name,
                ": stride must either be omitted, a single int, or a tuple of three ints");
    TORCH_CHECK(padding.size() == 1 || padding.size() == 3, name,
                ": padding must either be a single int, or a tuple of three ints");
    TORCH_CHECK(dilation.size() == 1 || dilation.size() == 3, name,
                ": dilation must be either a single int, or a tuple of three ints");
    TORCH_CHECK(input.dim() == 4 || input.dim() == 5,
                "non-empty 4D or 5D (batch mode) tensor expected for input");
    Vol v = vol_of(input, 3);
    auto &g = v.g;
    for (int i = 0; i < 3; i++) {
        g.k[i] = kernel.size() == 1 ? kernel[0] : kernel[i];
        g.s[i] = stride.empty() ? g.k[i] : (stride.size() == 1 ? stride[0] : stride[i]);
        g.p[i] = padding.size() == 1 ? padding[0] : padding[i];
        g.dil[i] = dilation.size() == 1 ? dilation[0] : dilation[i];
    }
    TORCH_CHECK(g.k[0] > 0 && g.k[1] > 0 && g.k[2] > 0,
                "kernel size should be greater than zero, but got kT: ", g.k[0], " kH: ", g.k[1],
                " kW: ", g.k[2]);
    TORCH_CHECK(g.s[0] > 0 && g.s[1] > 0 && g.s[2] > 0,
                "stride should be greater than zero, but got dT: ", g.s[0], " dH: ", g.s[1],
                " dW: ", g.s[2]);
    TORCH_CHECK(g.dil[0] > 0 && g.dil[1] > 0 && g.dil[2] > 0,
                "dilation should be greater than zero, but got dilationT: ", g.dil[0],
                " dilationH: ", g.dil[1], " dilationW: ", g.dil[2]);
    for (int64_t i = input.dim() == 5 ? 1 : 0; i < input.dim(); i++)
        TORCH_CHECK(input.size(i) > 0, name,
                    ": Expected input's non-batch dimensions to have positive length, but "
                    "input has a shape of ",
                    input.sizes(), " and non-batch dimension ", input.size(i), " has length zero!");
    for (int i = 0; i < 3; i++)
        TORCH_CHECK(g.k[i] / 2 >= g.p[i],
                    "pad should be smaller than or equal to half of kernel size, but got kT: ",
                    g.k[0], " kW: ", g.k[2], " kH: ", g.k[1], " padT: ", g.p[0], " padW: ", g.p[2],
                    " padH: ", g.p[1]);
    for (int i = 0; i < 3; i++)
        g.out[i] = pool_out(g.in[i], g.k[i], g.p[i], g.s[i], g.dil[i], ceil);
    TORCH_CHECK(g.out[0] >= 1 && g.out[1] >= 1 && g.out[2] >= 1, "Given input size: (",
                input.size(-4), "x", g.in[0], "x", g.in[1], "x", g.in[2],
                "). Calculated output size: (", input.size(-4), "x", g.out[0], "x", g.out[1], "x",
                g.out[2], "). Output size is too small");
    return v;
}

std::tuple<Tensor, Tensor> max_pool3d_with_indices(const Tensor &input, at::IntArrayRef kernel,
                                                   at::IntArrayRef stride, at::IntArrayRef padding,
                                                   at::IntArrayRef dilation, bool ceil) {
    if (!pool_native_ok(input))
        return fallback<at::_ops::max_pool3d_with_indices>(input, kernel, stride, padding, dilation,
                                                           ceil);
    Vol v = pool3d_setup("max_pool3d", input, kernel, stride, padding, dilation, ceil);
    return run_forward(input, v, 3, TRN_POOL_MAX, "aten::max_pool3d_with_indices");
}

Tensor max_pool3d_with_indices_backward(const Tensor &grad_out, const Tensor &input,
                                        at::IntArrayRef kernel, at::IntArrayRef stride,
                                        at::IntArrayRef padding, at::IntArrayRef dilation,
                                        bool ceil, const Tensor &indices) {
    if (!pool_native_ok(input) || grad_out.scalar_type() != input.scalar_type() ||
        indices.scalar_type() != at::kLong)
        return fallback<at::_ops::max_pool3d_with_indices_backward>(
            grad_out, input, kernel, stride, padding, dilation, ceil, indices);
    Vol v = pool3d_setup("max_pool3d", input, kernel, stride, padding, dilation, ceil);
    return run_backward(grad_out, input, indices, v, 3, TRN_POOL_MAX,
                        "aten::max_pool3d_with_indices_backward");
}

Vol avg3d_setup(const Tensor &input, at::IntArrayRef kernel, at::IntArrayRef stride,
                at::IntArrayRef padding, bool ceil, bool count_include_pad,
                std::optional<int64_t> divisor) {
    return pool_avg_setup(
        [&](at::IntArrayRef one) {
            return pool3d_setup("avg_pool3d", input, kernel, stride, padding, one, ceil);
        },
        count_include_pad, divisor);
}

Tensor avg_pool3d(const Tensor &input, at::IntArrayRef kernel, at::IntArrayRef stride,
                  at::IntArrayRef padding, bool ceil, bool count_include_pad,
                  std::optional<int64_t> divisor) {
    if (!pool_native_ok(input))
        return fallback<at::_ops::avg_pool3d>(input, kernel, stride, padding, ceil,
                                              count_include_pad, divisor);
    Vol v = avg3d_setup(input, kernel, stride, padding, ceil, count_include_pad, divisor);
    return std::get<0>(run_forward(input, v, 3, TRN_POOL_AVG, "aten::avg_pool3d"));
}

Tensor avg_pool3d_backward(const Tensor &grad_out, const Tensor &input, at::IntArrayRef kernel,
                           at::IntArrayRef stride, at::IntArrayRef padding, bool ceil,
                           bool count_include_pad, std::optional<int64_t> divisor) {
    if (!pool_native_ok(input) || grad_out.scalar_type() != input.scalar_type())
        return fallback<at::_ops::avg_pool3d_backward>(grad_out, input, kernel, stride, padding,
                                                       ceil, count_include_pad, divisor);
    Vol v = avg3d_setup(input, kernel, stride, padding, ceil, count_include_pad, divisor);
    return run_backward(grad_out, input, Tensor(), v, 3, TRN_POOL_AVG, "aten::avg_pool3d_backward");
}

// ---- adaptive pooling ----------------------------------------------------------

// Validates like ATen's adaptive pools ("adaptive_avg_pool2d" ...) and fills
// the geometry; `sd` spatial dims.
Vol adaptive_setup(const char *name, const Tensor &input, at::IntArrayRef output_size, int sd) {
    TORCH_CHECK(static_cast<int>(output_size.size()) == sd, name, ": output_size must be ", sd);
    TORCH_CHECK(input.dim() == sd + 1 || input.dim() == sd + 2, name, "(): Expected ", sd + 1,
                "D or ", sd + 2, "D tensor, but got ", input.sizes());
    for (int64_t i = input.dim() - sd - 1; i < input.dim(); i++)
        TORCH_CHECK(input.size(i) > 0, name,
                    "(): Expected input to have non-zero size for non-batch dimensions, but "
                    "input has sizes ",
                    input.sizes(), " with dimension ", i, " being empty");
    for (int i = 0; i < sd; i++)
        TORCH_CHECK(output_size[i] >= 0, name,
                    ": elements of output_size must be greater than or equal to 0 but "
                    "received ",
                    output_size);
    Vol v = vol_of(input, sd);
    v.g.adaptive = 1;
    for (int i = 0; i < sd; i++) v.g.out[3 - sd + i] = output_size[i];
    return v;
}

// The output size an adaptive backward's grad_output implies.
std::vector<int64_t> grad_spatial(const Tensor &grad_out, int sd) {
    TORCH_CHECK(grad_out.dim() >= sd, "adaptive pooling backward: grad_output has too few dims");
    std::vector<int64_t> s;
    for (int64_t i = grad_out.dim() - sd; i < grad_out.dim(); i++) s.push_back(grad_out.size(i));
    return s;
}

Tensor adaptive_avg(const Tensor &input, c10::SymIntArrayRef sym_out, int sd) {
    const at::IntArrayRef out = C10_AS_INTARRAYREF_SLOW(sym_out);
    const char *name = sd == 2 ? "adaptive_avg_pool2d" : "adaptive_avg_pool3d";
    Vol v = adaptive_setup(name, input, out, sd);
    return std::get<0>(
        run_forward(input, v, sd, TRN_POOL_AVG,
                    sd == 2 ? "aten::_adaptive_avg_pool2d" : "aten::_adaptive_avg_pool3d"));
}

template <typename Op, typename... Args> decltype(auto) fallback_sym(Args &&...args) {
    return at::native::call_fallback_fn_symint<&cpu_fallback, Op>::call(
        std::forward<Args>(args)...);
}

Tensor adaptive_avg_pool2d(const Tensor &input, c10::SymIntArrayRef out) {
    if (!pool_native_ok(input)) return fallback_sym<at::_ops::_adaptive_avg_pool2d>(input, out);
    return adaptive_avg(input, out, 2);
}

Tensor adaptive_avg_pool3d(const Tensor &input, c10::SymIntArrayRef out) {
    if (!pool_native_ok(input)) return fallback_sym<at::_ops::_adaptive_avg_pool3d>(input, out);
    return adaptive_avg(input, out, 3);
}

Tensor adaptive_avg_backward(const Tensor &grad_out, const Tensor &input, int sd) {
    const char *name = sd == 2 ? "adaptive_avg_pool2d_backward" : "adaptive_avg_pool3d_backward";
    Vol v = adaptive_setup(name, input, grad_spatial(grad_out, sd), sd);
    return run_backward(grad_out, input, Tensor(), v, sd, TRN_POOL_AVG,
                        sd == 2 ? "aten::_adaptive_avg_pool2d_backward"
                                : "aten::_adaptive_avg_pool3d_backward");
}

Tensor adaptive_avg_pool2d_backward(const Tensor &grad_out, const Tensor &input) {
    if (!pool_native_ok(input) || grad_out.scalar_type() != input.scalar_type())
        return fallback<at::_ops::_adaptive_avg_pool2d_backward>(grad_out, input);
    return adaptive_avg_backward(grad_out, input, 2);
}

Tensor adaptive_avg_pool3d_backward(const Tensor &grad_out, const Tensor &input) {
    if (!pool_native_ok(input) || grad_out.scalar_type() != input.scalar_type())
        return fallback<at::_ops::_adaptive_avg_pool3d_backward>(grad_out, input);
    return adaptive_avg_backward(grad_out, input, 3);
}

std::tuple<Tensor, Tensor> adaptive_max_pool2d(const Tensor &input, at::IntArrayRef out) {
    if (!pool_native_ok(input)) return fallback<at::_ops::adaptive_max_pool2d>(input, out);
    Vol v = adaptive_setup("adaptive_max_pool2d", input, out, 2);
    return run_forward(input, v, 2, TRN_POOL_MAX, "aten::adaptive_max_pool2d");
}

std::tuple<Tensor, Tensor> adaptive_max_pool3d(const Tensor &input, at::IntArrayRef out) {
    if (!pool_native_ok(input)) return fallback<at::_ops::adaptive_max_pool3d>(input, out);
    Vol v = adaptive_setup("adaptive_max_pool3d", input, out, 3);
    return run_forward(input, v, 3, TRN_POOL_MAX, "aten::adaptive_max_pool3d");
}

Tensor adaptive_max_pool2d_backward(const Tensor &grad_out, const Tensor &input,
                                    const Tensor &indices) {
    if (!pool_native_ok(input) || grad_out.scalar_type() != input.scalar_type() ||
        indices.scalar_type() != at::kLong)
        return fallback<at::_ops::adaptive_max_pool2d_backward>(grad_out, input, indices);
    Vol v = adaptive_setup("adaptive_max_pool2d_backward", input, grad_spatial(grad_out, 2), 2);
    return run_backward(grad_out, input, indices, v, 2, TRN_POOL_MAX,
                        "aten::adaptive_max_pool2d_backward");
}

Tensor adaptive_max_pool3d_backward(const Tensor &grad_out, const Tensor &input,
                                    const Tensor &indices) {
    if (!pool_native_ok(input) || grad_out.scalar_type() != input.scalar_type() ||
        indices.scalar_type() != at::kLong)
        return fallback<at::_ops::adaptive_max_pool3d_backward>(grad_out, input, indices);
    Vol v = adaptive_setup("adaptive_max_pool3d_backward", input, grad_spatial(grad_out, 3), 3);
    return run_backward(grad_out, input, indices, v, 3, TRN_POOL_MAX,
                        "aten::adaptive_max_pool3d_backward");
}

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
    m.impl("max_pool3d_with_indices", TORCH_FN(max_pool3d_with_indices));
    m.impl("max_pool3d_with_indices_backward", TORCH_FN(max_pool3d_with_indices_backward));
    m.impl("avg_pool3d", TORCH_FN(avg_pool3d));
    m.impl("avg_pool3d_backward", TORCH_FN(avg_pool3d_backward));
    m.impl("_adaptive_avg_pool2d", TORCH_FN(adaptive_avg_pool2d));
    m.impl("_adaptive_avg_pool2d_backward", TORCH_FN(adaptive_avg_pool2d_backward));
    m.impl("_adaptive_avg_pool3d", TORCH_FN(adaptive_avg_pool3d));
    m.impl("_adaptive_avg_pool3d_backward", TORCH_FN(adaptive_avg_pool3d_backward));
    m.impl("adaptive_max_pool2d", TORCH_FN(adaptive_max_pool2d));
    m.impl("adaptive_max_pool2d_backward", TORCH_FN(adaptive_max_pool2d_backward));
    m.impl("adaptive_max_pool3d", TORCH_FN(adaptive_max_pool3d));
    m.impl("adaptive_max_pool3d_backward", TORCH_FN(adaptive_max_pool3d_backward));
}

}  // namespace
}  // namespace neuron
