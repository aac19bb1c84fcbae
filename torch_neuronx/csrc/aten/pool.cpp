// aten/pool.cpp - 2-d pooling on neuron: max_pool2d_with_indices and
// avg_pool2d with their backwards, run by libtrn's pool kernels
// (trn/pool.h). Argument checks, output sizes and error messages follow
// PyTorch CPU (pooling_output_shape, pool2d_shape_check); inputs are made
// contiguous; channels_last inputs get channels_last results. Dtypes the
// kernels do not support go to the CPU fallback.
#include <ATen/Functions.h>
#include <ATen/Operators.h>
#include <ATen/native/CPUFallback.h>
#include <torch/library.h>

#include <tuple>

#include "fallback/cpu_fallback.h"
#include "runtime/device.h"
#include "observe/op_tracking.h"
#include "aten/pool_run.h"
#include "aten/pool_shape.h"
#include "trn/pool.h"

namespace neuron {
namespace {

using at::Tensor;

struct Pool2d {
    trn_pool2d_geometry g{};
    bool batched = false;
    int64_t n = 1, c = 0;
};

// Validates like ATen's max/avg_pool2d and fills the geometry.
Pool2d pool2d_setup(const char *name, const Tensor &input, at::IntArrayRef kernel,
                    at::IntArrayRef stride, at::IntArrayRef padding, at::IntArrayRef dilation,
                    bool ceil) {
    TORCH_CHECK(kernel.size() == 1 || kernel.size() == 2, name,
                ": kernel_size must either be a single int, or a tuple of two ints");
    TORCH_CHECK(stride.empty() || stride.size() == 1 || stride.size() == 2, name,
                ": stride must either be omitted, a single int, or a tuple of two ints");
    TORCH_CHECK(padding.size() == 1 || padding.size() == 2, name,
                ": padding must either be a single int, or a tuple of two ints");
    TORCH_CHECK(dilation.size() == 1 || dilation.size() == 2, name,
                ": dilation must be either a single int, or a tuple of two ints");
    TORCH_CHECK((input.dim() == 3 || input.dim() == 4), "non-empty 3D or 4D (batch mode) tensor ",
                "expected for input");
    Pool2d p;
    auto &g = p.g;
    g.kh = kernel[0];
    g.kw = kernel.size() == 1 ? g.kh : kernel[1];
    g.sh = stride.empty() ? g.kh : stride[0];
    g.sw = stride.empty() ? g.kw : (stride.size() == 1 ? g.sh : stride[1]);
    g.ph = padding[0];
    g.pw = padding.size() == 1 ? g.ph : padding[1];
    g.dh = dilation[0];
    g.dw = dilation.size() == 1 ? g.dh : dilation[1];
    TORCH_CHECK(g.kw > 0 && g.kh > 0, "kernel size should be greater than zero, but got kH: ", g.kh,
                " kW: ", g.kw);
    TORCH_CHECK(g.sw > 0 && g.sh > 0, "stride should be greater than zero, but got dH: ", g.sh,
                " dW: ", g.sw);
    TORCH_CHECK(g.dh > 0 && g.dw > 0,
                "dilation should be greater than zero, but got dilationH: ", g.dh,
                " dilationW: ", g.dw);
    p.batched = input.dim() == 4;
    p.n = p.batched ? input.size(0) : 1;
    p.c = input.size(-3);
    g.in_h = input.size(-2);
    g.in_w = input.size(-1);
    TORCH_CHECK(p.c > 0 && g.in_h > 0 && g.in_w > 0,
                "Expected 3D or 4D (batch mode) tensor with optional 0 dim batch size for "
                "input, but got:",
                input.sizes());
    g.out_h = pool_out(g.in_h, g.kh, g.ph, g.sh, g.dh, ceil);
    g.out_w = pool_out(g.in_w, g.kw, g.pw, g.sw, g.dw, ceil);
    TORCH_CHECK(g.out_w >= 1 && g.out_h >= 1, "Given input size: (", p.c, "x", g.in_h, "x", g.in_w,
                "). Calculated output size: (", p.c, "x", g.out_h, "x", g.out_w,
                "). Output size is too small");
    g.planes = p.n * p.c;
    return p;
}

std::vector<int64_t> out_sizes(const Pool2d &p) {
    if (p.batched) return {p.n, p.c, p.g.out_h, p.g.out_w};
    return {p.c, p.g.out_h, p.g.out_w};
}

std::tuple<Tensor, Tensor> max_pool2d_with_indices(const Tensor &input, at::IntArrayRef kernel,
                                                   at::IntArrayRef stride, at::IntArrayRef padding,
                                                   at::IntArrayRef dilation, bool ceil) {
    if (!pool_native_ok(input))
        return fallback<at::_ops::max_pool2d_with_indices>(input, kernel, stride, padding, dilation,
                                                           ceil);
    Pool2d p = pool2d_setup("max_pool2d", input, kernel, stride, padding, dilation, ceil);
    return pool_run_forward(trn_pool2d_launch, input, p.g, out_sizes(p), TRN_POOL_MAX,
                            "aten::max_pool2d_with_indices");
}

Tensor max_pool2d_with_indices_backward(const Tensor &grad_out, const Tensor &input,
                                        at::IntArrayRef kernel, at::IntArrayRef stride,
                                        at::IntArrayRef padding, at::IntArrayRef dilation,
                                        bool ceil, const Tensor &indices) {
    if (!pool_native_ok(input) || grad_out.scalar_type() != input.scalar_type() ||
        indices.scalar_type() != at::kLong)
        return fallback<at::_ops::max_pool2d_with_indices_backward>(
            grad_out, input, kernel, stride, padding, dilation, ceil, indices);
    Pool2d p = pool2d_setup("max_pool2d", input, kernel, stride, padding, dilation, ceil);
    return pool_run_backward(trn_pool2d_backward_launch, grad_out, input, indices, p.g,
                             out_sizes(p), TRN_POOL_MAX, "aten::max_pool2d_with_indices_backward");
}

Pool2d avg_setup(const Tensor &input, at::IntArrayRef kernel, at::IntArrayRef stride,
                 at::IntArrayRef padding, bool ceil, bool count_include_pad,
                 std::optional<int64_t> divisor) {
    return pool_avg_setup(
        [&](at::IntArrayRef one) {
            return pool2d_setup("avg_pool2d", input, kernel, stride, padding, one, ceil);
        },
        count_include_pad, divisor);
}

Tensor avg_pool2d(const Tensor &input, at::IntArrayRef kernel, at::IntArrayRef stride,
                  at::IntArrayRef padding, bool ceil, bool count_include_pad,
                  std::optional<int64_t> divisor) {
    if (!pool_native_ok(input))
        return fallback<at::_ops::avg_pool2d>(input, kernel, stride, padding, ceil,
                                              count_include_pad, divisor);
    Pool2d p = avg_setup(input, kernel, stride, padding, ceil, count_include_pad, divisor);
    return std::get<0>(pool_run_forward(trn_pool2d_launch, input, p.g, out_sizes(p), TRN_POOL_AVG,
                                        "aten::avg_pool2d"));
}

Tensor avg_pool2d_backward(const Tensor &grad_out, const Tensor &input, at::IntArrayRef kernel,
                           at::IntArrayRef stride, at::IntArrayRef padding, bool ceil,
                           bool count_include_pad, std::optional<int64_t> divisor) {
    if (!pool_native_ok(input) || grad_out.scalar_type() != input.scalar_type())
        return fallback<at::_ops::avg_pool2d_backward>(grad_out, input, kernel, stride, padding,
                                                       ceil, count_include_pad, divisor);
    Pool2d p = avg_setup(input, kernel, stride, padding, ceil, count_include_pad, divisor);
    return pool_run_backward(trn_pool2d_backward_launch, grad_out, input, Tensor(), p.g,
                             out_sizes(p), TRN_POOL_AVG, "aten::avg_pool2d_backward");
}

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
    m.impl("max_pool2d_with_indices", TORCH_FN(max_pool2d_with_indices));
    m.impl("max_pool2d_with_indices_backward", TORCH_FN(max_pool2d_with_indices_backward));
    m.impl("avg_pool2d", TORCH_FN(avg_pool2d));
    m.impl("avg_pool2d_backward", TORCH_FN(avg_pool2d_backward));
}

}  // namespace
}  // namespace neuron
