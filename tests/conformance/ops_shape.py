"""OpInfo names of the native creation/shape and sort/select ops
(libtrn/src/kernels/pointwise/fill.c, sort.c; flip/roll/pad through copy.c;
torch_neuronx/csrc/aten/shape.cpp). Composites that reduce to them:
full*, zeros*, ones*, new_*, repeat, tile, argsort, msort, fliplr/flipud,
nn.functional.pad (constant)."""

OPS = {
    "fill",
    "zero_",
    "arange",
    "linspace",
    "eye",
    "full",
    "full_like",
    "zeros",
    "ones",
    "zeros_like",
    "ones_like",
    "new_full",
    "new_zeros",
    "new_ones",
    "tril",
    "triu",
    "flip",
    "fliplr",
    "flipud",
    "roll",
    "repeat",
    "tile",
    "sort",
    "argsort",
    "msort",
    "topk",
    "unique",
    "unique_consecutive",
}
