"""OpInfo names of the membership op: isin (libtrn/src/kernels/sort/isin.c,
torch_neuronx/csrc/aten/isin.cpp). HF generate() calls it every token."""

OPS = {"isin"}
