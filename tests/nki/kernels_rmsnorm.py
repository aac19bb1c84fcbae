"""An NKI RMSNorm kernel, written here, as a custom op with
register_autograd (the backward in torch ops), and a small model with the
kernel between aten ops: what tests/nki/test_nki_compile.py compiles (also
in a child process, for the warm start)."""

import torch
import nki
import nki.isa as nisa
import nki.language as nl
from torch_neuronx import nki_op


@nki.jit
def rmsnorm_kernel(x, w, eps):
    """y = x * rsqrt(mean(x^2, -1) + eps) * w, 128 rows per tile."""
    out = nl.ndarray(x.shape, x.dtype, buffer=nl.shared_hbm)
    F = x.shape[1]
    wt = nl.ndarray((128, F), nl.float32, buffer=nl.sbuf)
    nisa.dma_copy(dst=wt, src=w.reshape((1, F)).broadcast_to((128, F)))
    for i in nl.affine_range(x.shape[0] // 128):
        t = nl.ndarray((128, F), nl.float32, buffer=nl.sbuf)
        nisa.dma_copy(dst=t, src=x[nl.ds(i * 128, 128), :])
        sq = nl.ndarray((128, F), nl.float32, buffer=nl.sbuf)
        ss = nl.ndarray((128, 1), nl.float32, buffer=nl.sbuf)
        nisa.activation(dst=sq, op=nl.square, data=t, reduce_op=nl.add, reduce_res=ss)
        r = nl.ndarray((128, 1), nl.float32, buffer=nl.sbuf)
        nisa.tensor_scalar(
            dst=r, data=ss, op0=nl.multiply, operand0=1.0 / F, op1=nl.add, operand1=eps
        )
        nisa.activation(dst=r, op=nl.rsqrt, data=r)
        nisa.scalar_tensor_tensor(
            dst=t, data=t, op0=nl.multiply, operand0=r, op1=nl.multiply, operand1=wt
        )
        nisa.dma_copy(dst=out[nl.ds(i * 128, 128), :], src=t)
    return out


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
