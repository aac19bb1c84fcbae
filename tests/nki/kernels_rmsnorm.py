"""An NKI RMSNorm kernel, written here, as a custom op with
register_autograd (the backward in torch ops), and a small model with the
kernel between aten ops: what tests/nki/test_nki_compile.py compiles (also
in a child process, for the warm start)."""

import torch
import nki
from kernels_norm import rmsnorm
from torch_neuronx import nki_op


rmsnorm_kernel = nki.jit(rmsnorm)


@nki_op("nkicompile::rmsnorm", mutates_args=())
def nki_rmsnorm(x: torch.Tensor, w: torch.Tensor, eps: float) -> torch.Tensor:
    return rmsnorm_kernel(x, w, eps)


def _setup(ctx, inputs, output):
    x, w, eps = inputs
    ctx.eps = eps
    ctx.save_for_backward(x, w)


def _backward(ctx, g):
    x, w = ctx.saved_tensors
    r = torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + ctx.eps)
    gw = g * w
    dx = r * gw - x * r.pow(3) * (gw * x).mean(-1, keepdim=True)
    return dx, (g * x * r).sum(0), None


nki_rmsnorm.register_autograd(_backward, setup_context=_setup)


class Net(torch.nn.Module):
    """linear -> NKI RMSNorm -> gelu -> linear: the kernel between aten ops."""

    def __init__(self, d=64):
        super().__init__()
        self.a = torch.nn.Linear(d, d)
        self.w = torch.nn.Parameter(1.0 + 0.1 * torch.randn(d))
        self.b = torch.nn.Linear(d, d)

    def forward(self, x, nki_norm=True):
        h = self.a(x)
        if nki_norm:
            h = nki_rmsnorm(h, self.w, 1e-6)
        else:
            h = torch.nn.functional.rms_norm(h, (h.shape[-1],), self.w, 1e-6)
        return self.b(torch.nn.functional.gelu(h))
