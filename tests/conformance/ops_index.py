"""Indexing and data-movement ops native on neuron (torch_neuronx/csrc/aten/index.cpp,
libtrn/src/kernels/{gather,scatter,mask,cat,slice_backward}.c): OpInfo names, all variants.
slice / narrow are views; their gradients run the native slice_backward."""

OPS = {
    "cat",
    "stack",
    "hstack",
    "vstack",
    "index_select",
    "gather",
    "take_along_dim",
    "scatter",
    "scatter_add",
    "scatter_reduce",
    "index_add",
    "index_copy",
    "__getitem__",
    "index_put",
    "masked_fill",
    "masked_select",
    "nonzero",
    "argwhere",
    "nn.functional.embedding",
    "slice",
    "narrow",
}
