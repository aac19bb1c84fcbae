"""OpInfo names of native transposed convolution (torch_neuronx/csrc/
aten/conv_transpose.cpp on libtrn's oneDNN convolution kernels): forward,
grad input, grad weight and grad bias of conv_transpose1d/2d/3d."""

OPS = {
    "nn.functional.conv_transpose1d",
    "nn.functional.conv_transpose2d",
    "nn.functional.conv_transpose3d",
}
