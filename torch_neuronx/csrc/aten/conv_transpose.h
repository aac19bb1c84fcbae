// aten/conv_transpose.h - transposed convolution on neuron (aten/conv_transpose.cpp),
// called by aten/conv.cpp's convolution_overrideable /
// convolution_backward_overrideable when `transposed` is set.
#pragma once

#include <ATen/core/Tensor.h>

#include "trn/conv.h"

#include <array>
#include <optional>
#include <tuple>

namespace neuron {

// libtrn's descriptor of the convolution `input` * `weight` -> `output`
// (aten/conv.cpp; the transposed op runs this convolution in swapped roles).
// `what` names the op in the error for an unsupported rank.
trn_conv_desc make_desc(const at::Tensor &input, const at::Tensor &weight, const at::Tensor &output,
                        at::IntArrayRef stride, at::IntArrayRef padding, at::IntArrayRef dilation,
                        int64_t groups, const char *what);

// Whether the transposed convolution runs natively (the dtype; 1-3 spatial
// dims); otherwise the caller runs PyTorch's CPU implementation.
bool conv_transpose_native(const at::Tensor &input);

// CPU's check (slow_conv_transpose2d/3d): in every spatial dim,
// output_padding < stride or output_padding < dilation; its message (a 1-d
// op reads as 2-d with a unit height).
void check_output_padding(at::IntArrayRef stride, at::IntArrayRef dilation,
                          at::IntArrayRef output_padding);

at::Tensor conv_transpose_forward(const at::Tensor &input, const at::Tensor &weight,
                                  const at::Tensor &bias, at::IntArrayRef stride,
                                  at::IntArrayRef padding, at::IntArrayRef dilation,
                                  at::IntArrayRef output_padding, int64_t groups);

std::tuple<at::Tensor, at::Tensor, at::Tensor>
conv_transpose_backward(const at::Tensor &grad_output, const at::Tensor &input,
                        const at::Tensor &weight, at::IntArrayRef stride, at::IntArrayRef padding,
                        at::IntArrayRef dilation, int64_t groups, std::array<bool, 3> mask);

}  // namespace neuron
