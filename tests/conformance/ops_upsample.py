"""OpInfo names of the native upsampling ops (libtrn/src/kernels/nn/upsample.c,
torch_neuronx/csrc/aten/upsample.cpp): upsample_nearest{1,2,3}d,
_upsample_nearest_exact{1,2,3}d, upsample_linear1d, upsample_bilinear2d,
upsample_bicubic2d (antialias=False) and upsample_trilinear3d with their
backwards. F.interpolate's area variant is adaptive pooling (see exclusions.py)."""

OPS = {
    "nn.functional.interpolate",
    "nn.functional.upsample_nearest",
    "nn.functional.upsample_bilinear",
}
