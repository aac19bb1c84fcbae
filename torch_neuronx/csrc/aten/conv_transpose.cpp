// aten/conv_transpose.cpp - transposed convolution (conv_transpose1d/2d/3d,
// nn.ConvTranspose*) on neuron, forward and backward, run by libtrn's
// oneDNN-backed convolution kernels (trn/conv.h).
//
// A transposed convolution is the data gradient of the convolution with the
// same weight, stride, padding, dilation and groups whose output has the
// transposed convolution's input size: that is how oneDNN's deconvolution
// is defined and computed. So, with the forward convolution C(x, W):
//   forward      y  = C's backward-data with grad_output = x   (+ bias)
//   grad input   dx = C(dy, W)                     (a forward convolution)
//   grad weight  dW = C's backward-weights with input = dy, grad_output = x
//   grad bias    db = sum of dy over every dim but channels
// The weight keeps PyTorch's transposed layout (c_in, c_out / groups, k...),
// which is exactly C's (c_out, c_in / groups, k...) for C's roles.
// output_padding only grows y; C maps y's size back to x's when
// output_padding < stride. PyTorch also allows output_padding < dilation:
// then C's output is a little larger than x, and x is zero-padded at the end
// (the padding only ever meets zeros, so the results are unchanged).
#include "aten/conv_transpose.h"

#include <ATen/ATen.h>

#include <string>

#include "runtime/device.h"
#include "observe/op_tracking.h"

namespace neuron {

using at::IntArrayRef;
using at::Tensor;

namespace {

trn_stream *stream_of(const Tensor &t) { return current_trn_stream(t.device().index()); }

}  // namespace

bool conv_transpose_native(const Tensor &input) {
    auto d = native_dtype(input.scalar_type());
    return d && trn_conv_supports(*d) && input.dim() >= 3 && input.dim() <= 5 && input.size(1) > 0;
}

namespace {

// C's output size for the transposed op's output size `y`: x's size, or
// more when output_padding >= stride (PyTorch allows it below the
// dilation); the extra positions only ever meet zeros.
std::vector<int64_t> c_output_sizes(const Tensor &x, IntArrayRef y_sizes, const Tensor &weight,
                                    IntArrayRef stride, IntArrayRef padding, IntArrayRef dilation) {
    std::vector<int64_t> s(x.sizes().begin(), x.sizes().end());
    for (int64_t i = 2; i < x.dim(); ++i) {
        const size_t k = static_cast<size_t>(i - 2);
        const int64_t ext = dilation[k] * (weight.size(i) - 1) + 1;
        s[static_cast<size_t>(i)] =
            (y_sizes[static_cast<size_t>(i)] + 2 * padding[k] - ext) / stride[k] + 1;
    }
    return s;
}

// x zero-padded at the end of each spatial dim up to `sizes` (x itself when
// no dim grows).
Tensor pad_to(const Tensor &x, const std::vector<int64_t> &sizes) {
    if (x.sizes().equals(sizes)) return x;
    Tensor big = at::zeros(sizes, x.options());
    Tensor view = big;
    for (int64_t i = 2; i < x.dim(); ++i) view = view.narrow(i, 0, x.size(i));
    view.copy_(x);
    return big;
}

}  // namespace

void check_output_padding(IntArrayRef stride, IntArrayRef dilation, IntArrayRef output_padding) {
    const size_t sp = output_padding.size();
    bool ok = true;
    for (size_t i = 0; i < sp; ++i)
        ok = ok && (output_padding[i] < stride[i] || output_padding[i] < dilation[i]);
    if (ok) return;
    static const char *const names2[] = {"height", "width"};
    static const char *const names3[] = {"depth", "height", "width"};
    const char *const *names = sp == 3 ? names3 : names2;
    const size_t n = sp == 3 ? 3 : 2, skip = n - sp;  // 1-d: height is the unit dim
    auto value = [&](IntArrayRef v, size_t k, int64_t unit) {
        return k < skip ? unit : v[k - skip];
    };
    std::string msg = "output padding must be smaller than either stride or dilation, but got";
    for (size_t k = 0; k < n; ++k)
        msg += std::string(" output_padding_") + names[k] + ": " +
               std::to_string(value(output_padding, k, 0));
    for (size_t k = 0; k < n; ++k)
        msg += std::string(" stride_") + names[k] + ": " + std::to_string(value(stride, k, 1));
    for (size_t k = 0; k < n; ++k)
        msg += std::string(" dilation_") + names[k] + ": " + std::to_string(value(dilation, k, 1));
    TORCH_CHECK(false, msg);
}

Tensor conv_transpose_forward(const Tensor &input, const Tensor &weight, const Tensor &bias,
                              IntArrayRef stride, IntArrayRef padding, IntArrayRef dilation,
                              IntArrayRef output_padding, int64_t groups) {
    check_output_padding(stride, dilation, output_padding);
    // 16-bit with a bias: the convolution and the bias add both in float32,
    // rounded once at the end, as CPU (the kernel itself rounds on store).
    if (bias.defined() && input.element_size() == 2)
        return conv_transpose_forward(input.to(at::kFloat), weight.to(at::kFloat),
                                      bias.to(at::kFloat), stride, padding, dilation,
                                      output_padding, groups)
            .to(input.scalar_type());
    const int64_t sp = input.dim() - 2;
    std::vector<int64_t> sizes{input.size(0), weight.size(1) * groups};
    for (int64_t i = 0; i < sp; ++i)
        sizes.push_back((input.size(2 + i) - 1) * stride[i] - 2 * padding[i] +
                        dilation[i] * (weight.size(2 + i) - 1) + output_padding[i] + 1);
    for (int64_t i = 0; i < sp; ++i)
        TORCH_CHECK(sizes[2 + i] > 0, "Given input size per channel: ", input.sizes().slice(2),
                    ", calculated output size is too small");
    Tensor output = at::empty(sizes, input.options().memory_format(input.suggest_memory_format()));
    if (output.numel() != 0) {
        const Tensor x =
            pad_to(input, c_output_sizes(input, sizes, weight, stride, padding, dilation));
        trn_conv_desc d = make_desc(output, weight, x, stride, padding, dilation, groups,
                                    "transposed convolution");
        TRN_CHECK(trn_conv_backward_data_launch(stream_of(input), &d));
    }
    if (bias.defined()) {
        std::vector<int64_t> shape(static_cast<size_t>(output.dim()), 1);
        shape[1] = bias.size(0);
        output.add_(bias.reshape(shape));
    }
    return output;
}

std::tuple<Tensor, Tensor, Tensor>
conv_transpose_backward(const Tensor &grad_output, const Tensor &input, const Tensor &weight,
                        IntArrayRef stride, IntArrayRef padding, IntArrayRef dilation,
                        int64_t groups, std::array<bool, 3> mask) {
    Tensor grad_input, grad_weight, grad_bias;
    const Tensor dy = grad_output;
    const auto big = c_output_sizes(input, dy.sizes(), weight, stride, padding, dilation);
    const bool padded = !input.sizes().equals(big);
    if (mask[0]) {
        grad_input = padded ? at::empty(big, input.options()) : at::empty_like(input);
        if (grad_input.numel() != 0) {
            trn_conv_desc d = make_desc(dy, weight, grad_input, stride, padding, dilation, groups,
                                        "transposed convolution");
            TRN_CHECK(trn_conv_forward_launch(stream_of(input), &d));
        }
        if (padded) {
            for (int64_t i = 2; i < input.dim(); ++i)
                grad_input = grad_input.narrow(i, 0, input.size(i));
            grad_input = grad_input.contiguous(input.suggest_memory_format());
        }
    }
    if (mask[1]) {
        grad_weight = at::empty_like(weight);
        const Tensor x = pad_to(input, big);
        trn_conv_desc d = make_desc(dy, grad_weight, x, stride, padding, dilation, groups,
                                    "transposed convolution");
        TRN_CHECK(trn_conv_backward_weights_launch(stream_of(input), &d));
    }
    if (mask[2]) {
        std::vector<int64_t> dims{0};
        for (int64_t i = 2; i < dy.dim(); ++i) dims.push_back(i);
        grad_bias = dy.sum(dims);
    }
    return {grad_input, grad_weight, grad_bias};
}

}  // namespace neuron
