"""OpInfo names of the native matrix-product and convolution ops
(libtrn/src/kernels/blas/matmul.c, conv.c; torch_neuronx/csrc/aten/blas.cpp,
aten/conv.cpp, aten/addr_out.cpp). matmul, linear and the conv functionals decompose into them.
Transposed convolution is not native (runs on the CPU, recorded as fallback)."""

OPS = {
    "mm",
    "bmm",
    "addmm",
    "baddbmm",
    "addbmm",
    "mv",
    "addmv",
    "dot",
    "vdot",
    # addr: the outer product composes native mul / add; addr.out is an
    # adapter that adds CPU's overlap checks (aten/addr_out.cpp).
    "addr",
    "matmul",
    "nn.functional.linear",
    "nn.functional.conv1d",
    "nn.functional.conv2d",
    "nn.functional.conv3d",
}
