"""OpInfo names of the native random fills (libtrn/src/kernels/random/random.c,
torch_neuronx/csrc/aten/random.cpp). Compared without values: see
VALUE_FREE in exclusions.py."""

OPS = {"uniform", "exponential", "cauchy", "geometric", "log_normal"}
