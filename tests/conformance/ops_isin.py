"""OpInfo names of the membership op: isin (libtrn/src/kernels/sort/isin.c,
torch_neuronx/csrc/NeuronIsin.cpp). HF generate() calls it every token."""
OPS = {"isin"}
