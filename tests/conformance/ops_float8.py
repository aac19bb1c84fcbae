"""OpInfo names of the native float8 matrix product (libtrn
src/kernels/blas/scaled_mm.c; torch_neuronx/csrc/aten/scaled_mm.cpp), in
the float8 dtypes OpInfo gives it. The float8 conversions, fill, view,
eq/ne, abs and amax have no float8 OpInfo samples; tests/test_fp8_dtypes.py
checks them exhaustively against PyTorch CPU."""

import torch

OPS = {"torch._scaled_mm"}
SAMPLE_DTYPES = {
    "torch._scaled_mm": [
        torch.float8_e4m3fn,
        torch.float8_e5m2,
        torch.float8_e4m3fnuz,
        torch.float8_e5m2fnuz,
    ]
}
