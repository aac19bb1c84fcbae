"""OpInfo names of the native upsampling ops (libtrn/src/kernels/upsample.c,
torch_neuronx/csrc/NeuronUpsample.cpp): upsample_nearest{1,2,3}d,
_upsample_nearest_exact{1,2,3}d, upsample_linear1d, upsample_bilinear2d and
upsample_trilinear3d with their backwards. F.interpolate's bicubic and area
variants use other kernels (see exclusions.py)."""
OPS = {"nn.functional.interpolate", "nn.functional.upsample_nearest",
       "nn.functional.upsample_bilinear"}
