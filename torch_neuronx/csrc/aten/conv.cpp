// aten/conv.cpp - convolution on neuron, run by libtrn's oneDNN-backed
// kernels (trn/conv.h). PyTorch routes a PrivateUse1 tensor's
// aten::convolution through _convolution (which checks shapes and expands
// stride/padding/dilation to one entry per spatial dim) to
// convolution_overrideable, and its backward to
// convolution_backward_overrideable; both are registered here.
//
// Native: 1-d/2-d/3-d convolution in float32, bfloat16 and float16 (any
// strides: channels-last stays channels-last); transposed convolution is
// aten/conv_transpose.cpp's. Other dtypes (float64) run PyTorch's CPU
// implementation on host copies and are recorded as fallbacks
// (get_fallback_ops), because the boxed CPU fallback cannot serve these two
// ops: on CPU they are stubs.
#include <ATen/ATen.h>
#include <ATen/native/ConvUtils.h>
#include <torch/library.h>

#include <cstdlib>
#include <cstring>

#include "aten/conv_transpose.h"
#include "trn/conv_backward.h"
#include "runtime/device.h"
#include "observe/op_tracking.h"

namespace neuron {
namespace {

using at::IntArrayRef;
using at::Tensor;

bool native_conv(const Tensor &input, bool transposed) {
    auto d = native_dtype(input.scalar_type());
    return !transposed && d && trn_conv_supports(*d);
}

void record_cpu(const char *op, const char *why) {
    tracking::record_fallback(op);
    tracking::warn_fallback_once(op, why);
}

const char *cpu_reason(bool transposed) {
    return transposed ? "has no native neuron kernel for transposed convolution in this dtype"
                      : "has no native neuron kernel for this dtype";
}

// TORCH_NEURONX_CONV_BACKWARD_ONE_LAUNCH=0: the input and weight gradients
// in two launches (each moving the output gradient itself), for
// side-by-side measurements; read per call (15 per ResNet step) so that a
// benchmark can switch it between steps.
bool backward_one_launch() {
    const char *v = std::getenv("TORCH_NEURONX_CONV_BACKWARD_ONE_LAUNCH");
    return v == nullptr || std::strcmp(v, "0") != 0;
}

void check_same_type(const Tensor &input, const Tensor &other, const char *what) {
    TORCH_CHECK(input.scalar_type() == other.scalar_type(), "Input type (", input.scalar_type(),
                ") and ", what, " type (", other.scalar_type(), ") should be the same");
    TORCH_CHECK(other.device() == input.device(), "Input and ", what,
                " should be on the same device, but got ", input.device(), " and ", other.device());
}

Tensor convolution_overrideable(const Tensor &input, const Tensor &weight,
                                const std::optional<Tensor> &bias_opt, IntArrayRef stride,
                                IntArrayRef padding, IntArrayRef dilation, bool transposed,
                                IntArrayRef output_padding, int64_t groups) {
    const Tensor bias = bias_opt.has_value() ? *bias_opt : Tensor();
    check_same_type(input, weight, "weight");
    if (bias.defined()) check_same_type(input, bias, "bias");
    if (transposed && conv_transpose_native(input)) {
        Tensor out = conv_transpose_forward(input, weight, bias, stride, padding, dilation,
                                            output_padding, groups);
        tracking::record_executed("aten::convolution_overrideable");
        return out;
    }
    if (!native_conv(input, transposed)) {
        record_cpu("aten::convolution_overrideable", cpu_reason(transposed));
        Tensor out =
            at::convolution(input.cpu(), weight.cpu(),
                            bias.defined() ? std::optional<Tensor>(bias.cpu()) : std::nullopt,
                            stride, padding, dilation, transposed, output_padding, groups);
        return out.to(input.device());
    }
    auto sizes =
        at::native::conv_output_size(input.sizes(), weight.sizes(), padding, stride, dilation);
    Tensor output = at::empty(sizes, input.options().memory_format(input.suggest_memory_format()));
    if (output.numel() != 0) {
        trn_conv_desc d =
            make_desc(input, weight, output, stride, padding, dilation, groups, "convolution");
        if (bias.defined()) {
            d.bias = bias.data_ptr();
            d.bias_stride = bias.stride(0);
        }
        TRN_CHECK(trn_conv_forward_launch(current_trn_stream(input.device().index()), &d));
    }
    tracking::record_executed("aten::convolution_overrideable");
    return output;
}

std::tuple<Tensor, Tensor, Tensor>
convolution_backward_overrideable(const Tensor &grad_output, const Tensor &input,
                                  const Tensor &weight, IntArrayRef stride, IntArrayRef padding,
                                  IntArrayRef dilation, bool transposed, IntArrayRef output_padding,
                                  int64_t groups, std::array<bool, 3> output_mask) {
    check_same_type(input, weight, "weight");
    check_same_type(input, grad_output, "grad_output");
    if (transposed && conv_transpose_native(input)) {
        check_output_padding(stride, dilation, output_padding);
        auto r = conv_transpose_backward(grad_output, input, weight, stride, padding, dilation,
                                         groups, output_mask);
        tracking::record_executed("aten::convolution_backward_overrideable");
        return r;
    }
    if (!native_conv(input, transposed)) {
        record_cpu("aten::convolution_backward_overrideable", cpu_reason(transposed));
        const int64_t c_out = transposed ? weight.size(1) * groups : weight.size(0);
        std::vector<int64_t> bias_sizes{c_out};
        auto [gi, gw, gb] = at::convolution_backward(
            grad_output.cpu(), input.cpu(), weight.cpu(),
            output_mask[2] ? std::optional<IntArrayRef>(bias_sizes) : std::nullopt, stride, padding,
            dilation, transposed, output_padding, groups, output_mask);
        auto back = [&](const Tensor &t) { return t.defined() ? t.to(input.device()) : t; };
        return {back(gi), back(gw), back(gb)};
    }
    trn_stream *s = current_trn_stream(input.device().index());
    Tensor grad_input, grad_weight, grad_bias;
    if (output_mask[0] && output_mask[1] && input.numel() != 0 && backward_one_launch()) {
        // Both gradients in one launch: libtrn moves the output gradient to
        // the kernels' blocked layout once for the two.
        grad_input = at::empty_like(input);
        grad_weight = at::empty_like(weight);
        if (output_mask[2]) grad_bias = at::empty({weight.size(0)}, weight.options());
        trn_conv_desc dd = make_desc(grad_input, weight, grad_output, stride, padding, dilation,
                                     groups, "convolution");
        trn_conv_desc dw = make_desc(input, grad_weight, grad_output, stride, padding, dilation,
                                     groups, "convolution");
        if (grad_bias.defined()) {
            dw.bias = grad_bias.data_ptr();
            dw.bias_stride = 1;
        }
        TRN_CHECK(trn_conv_backward_launch(s, &dd, &dw));
        tracking::record_executed("aten::convolution_backward_overrideable");
        return {grad_input, grad_weight, grad_bias};
    }
    if (output_mask[0]) {
        grad_input = at::empty_like(input);
        if (grad_input.numel() != 0) {
            trn_conv_desc d = make_desc(grad_input, weight, grad_output, stride, padding, dilation,
                                        groups, "convolution");
            TRN_CHECK(trn_conv_backward_data_launch(s, &d));
        }
    }
    if (output_mask[1] || output_mask[2]) {
        grad_weight = at::empty_like(weight);
        if (output_mask[2]) grad_bias = at::empty({weight.size(0)}, weight.options());
        trn_conv_desc d = make_desc(input, grad_weight, grad_output, stride, padding, dilation,
                                    groups, "convolution");
        if (grad_bias.defined()) {
            d.bias = grad_bias.data_ptr();
            d.bias_stride = 1;
        }
        TRN_CHECK(trn_conv_backward_weights_launch(s, &d));
        if (!output_mask[1]) grad_weight = Tensor();
    }
    tracking::record_executed("aten::convolution_backward_overrideable");
    return {grad_input, grad_weight, grad_bias};
}

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
    m.impl("convolution_overrideable", TORCH_FN(convolution_overrideable));
    m.impl("convolution_backward_overrideable", TORCH_FN(convolution_backward_overrideable));
}

}  // namespace

trn_conv_desc make_desc(const Tensor &input, const Tensor &weight, const Tensor &output,
                        IntArrayRef stride, IntArrayRef padding, IntArrayRef dilation,
                        int64_t groups, const char *what) {
    const int sp = static_cast<int>(input.dim()) - 2;
    TORCH_CHECK(sp >= 1 && sp <= 3, "neuron ", what, " supports 1-d, 2-d and 3-d inputs, got ",
                input.dim(), "-d input");
    trn_conv_desc d{};
    d.dtype = *native_dtype(input.scalar_type());
    d.spatial = sp;
    d.n = input.size(0);
    d.c_in = input.size(1);
    d.c_out = weight.size(0);
    d.groups = groups;
    for (int i = 0; i < sp; ++i) {
        d.in_size[i] = input.size(2 + i);
        d.out_size[i] = output.size(2 + i);
        d.kernel[i] = weight.size(2 + i);
        d.stride[i] = stride[i];
        d.padding[i] = padding[i];
        d.dilation[i] = dilation[i];
    }
    for (int i = 0; i < sp + 2; ++i) {
        d.input_strides[i] = input.stride(i);
        d.weight_strides[i] = weight.stride(i);
        d.output_strides[i] = output.stride(i);
    }
    d.input = input.data_ptr();
    d.weight = weight.data_ptr();
    d.output = output.data_ptr();
    return d;
}

}  // namespace neuron
