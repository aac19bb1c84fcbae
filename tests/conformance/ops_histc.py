"""OpInfo names of the histogram op: histc (libtrn/src/kernels/reduce/histc.c,
torch_neuronx/csrc/aten/histc.cpp). Hugging Face's grouped-experts MoE path
calls it on expert ids every step."""

OPS = {"histc"}
