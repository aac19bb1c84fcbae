"""OpInfo names of the native float8 matrix products (libtrn
src/kernels/blas/scaled_mm.c; torch_neuronx/csrc/aten/scaled_mm.cpp), in
the float8 dtypes OpInfo gives them (_scaled_mm_v2's samples: tensorwise
and rowwise; its MX recipe, which OpInfo does not sample, is
tests/test_scaled_mm_mx.py). The float8 conversions, fill, view,
eq/ne, abs and amax have no float8 OpInfo samples; tests/test_fp8_dtypes.py
checks them exhaustively against PyTorch CPU."""

import torch

_FP8 = [torch.float8_e4m3fn, torch.float8_e5m2, torch.float8_e4m3fnuz, torch.float8_e5m2fnuz]
OPS = {"torch._scaled_mm", "torch._scaled_mm_v2"}
SAMPLE_DTYPES = {"torch._scaled_mm": _FP8, "torch._scaled_mm_v2": _FP8}
