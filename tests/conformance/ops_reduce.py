"""OpInfo names of the native reduction, scan and softmax ops
(libtrn/src/kernels/reduce/reduce.c, scan.c, softmax.c; torch_neuronx/csrc/aten/reduce.cpp)."""
OPS = {
    "sum", "mean", "prod", "amax", "amin", "max", "min", "argmax", "argmin",
    "var", "std", "var_mean", "std_mean", "linalg.vector_norm", "norm", "logsumexp",
    "any", "all", "count_nonzero", "cumsum", "cumprod", "softmax", "log_softmax",
    "_softmax_backward_data", "nn.functional.softmin",
}
