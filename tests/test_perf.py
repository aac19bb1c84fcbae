"""Paths added for speed: parallel reductions/softmax/gather/cat on big
inputs, the small-GEMM C loop, and shape/dtype/errors from PyTorch's C++
structured meta functions. Compares neuron to CPU; never times anything."""

import os
import subprocess
import sys

import pytest
import torch

import torch_neuronx
from _thread_counts import outputs_at_thread_counts

DEV = "neuron"


def _close(got, want, **kw):
    assert got.device.type == DEV
    torch.testing.assert_close(got.cpu(), want, **kw)


@pytest.fixture(autouse=True)
def _no_fallback():
    torch_neuronx.clear_op_tracking()
    yield
    assert torch_neuronx.get_fallback_ops() == []


@pytest.mark.parametrize(
    "shape,dim",
    [
        (((1 << 20) + 37,), None),
        ((512, 1030), 0),
        ((512, 1030), 1),
        ((3, 300, 257), (0, 2)),
        ((300, 3, 257), 1),
    ],
    ids=["full", "dim0", "dim1", "dims02", "mid"],
)
def test_big_reductions(shape, dim):
    x = torch.randn(shape)
    xn = x.to(DEV)
    args = () if dim is None else (dim,)
    _close(xn.sum(*args), x.sum(*args), rtol=1e-4, atol=1e-3)
    _close(xn.mean(*args), x.mean(*args), rtol=1e-4, atol=1e-5)
    _close(xn.amax(*args), x.amax(*args))
    _close(xn.amin(*args), x.amin(*args))
    if dim is not None and isinstance(dim, int):
        v, i = xn.max(dim)
        cv, ci = x.max(dim)
        _close(v, cv)
        _close(i, ci)
        _close(xn.argmin(dim), x.argmin(dim))
        _close(xn.var(dim), x.var(dim), rtol=1e-4, atol=1e-5)


def test_big_reduction_nan_and_int():
    x = torch.randn(1 << 19)
    x[123457] = float("nan")
    xn = x.to(DEV)
    assert torch.isnan(xn.amax().cpu())
    assert torch.isnan(xn.sum().cpu())
    i = torch.randint(-1000, 1000, (1 << 19,))
    _close(i.to(DEV).sum(), i.sum())
    b = torch.zeros(1 << 19, dtype=torch.bool)
    b[-1] = True
    _close(b.to(DEV).any(), b.any())
    _close(torch.ones(600, 300).to(DEV).bfloat16().sum(0), torch.ones(600, 300).bfloat16().sum(0))


def test_full_sum_same_bits_for_any_thread_count():
    code = (
        "import torch, torch_neuronx; torch.manual_seed(0); "
        "x = torch.randn(3 << 20).to('neuron'); "
        "print(repr(x.sum().item()), repr(x.abs().amax().item()), "
        "repr(x.view(3072, 1024).sum(0).sum().item()))"
    )
    outs = outputs_at_thread_counts(code)
    assert len(outs) == 1, outs


@pytest.mark.parametrize("shape,dim", [((600, 1000), -1), ((600, 1000), 0), ((4, 200, 300), 1)])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_big_softmax(shape, dim, dtype):
    x = torch.randn(shape).to(dtype)
    xn = x.to(DEV)
    tol = {} if dtype == torch.float32 else dict(rtol=2e-2, atol=1e-3)
    _close(torch.softmax(xn, dim), torch.softmax(x, dim), **tol)
    _close(torch.log_softmax(xn, dim), torch.log_softmax(x, dim), **tol)
    # in place through out= aliasing the input
    y = xn.clone()
    torch._softmax(y, dim, False, out=y)
    _close(y, torch.softmax(x, dim), **tol)


def test_big_cumsum():
    x = torch.randn(400, 700)
    for d in (0, 1):
        _close(x.to(DEV).cumsum(d), x.cumsum(d), rtol=1e-4, atol=1e-3)
        y = x.to(DEV)
        y.cumsum_(d)
        _close(y, x.cumsum(d), rtol=1e-4, atol=1e-3)
        _close(x.to(DEV).t().cumsum(d), x.t().cumsum(d), rtol=1e-4, atol=1e-3)
    i = torch.randint(-5, 5, (300, 900))
    _close(i.to(DEV).cumsum(1), i.cumsum(1))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
@pytest.mark.parametrize("m,k,n", [(2, 2, 2), (1, 7, 3), (5, 1, 9), (17, 30, 33), (3, 300, 20)])
def test_small_gemm(dtype, m, k, n):
    a, b, c = torch.randn(m, k), torch.randn(k, n), torch.randn(m, n)
    a, b, c = a.to(dtype), b.to(dtype), c.to(dtype)
    tol = dict(rtol=1e-4, atol=1e-4) if dtype == torch.float32 else dict(rtol=2e-2, atol=2e-2)
    an, bn, cn = a.to(DEV), b.to(DEV), c.to(DEV)
    _close(an @ bn, (a.float() @ b.float()).to(dtype), **tol)
    _close(
        torch.addmm(cn, an, bn, beta=0.5, alpha=2.0),
        torch.addmm(c.float(), a.float(), b.float(), beta=0.5, alpha=2.0).to(dtype),
        **tol,
    )
    _close(
        an.t().contiguous().t() @ bn.t().contiguous().t(), (a.float() @ b.float()).to(dtype), **tol
    )
    # beta = 0 ignores NaN in the output
    out = torch.full((m, n), float("nan"), dtype=dtype, device=DEV)
    torch.mm(an, bn, out=out)
    _close(out, (a.float() @ b.float()).to(dtype), **tol)
    ab = torch.randn(3, m, k).to(dtype)
    bb = torch.randn(3, k, n).to(dtype)
    _close(torch.bmm(ab.to(DEV), bb.to(DEV)), torch.bmm(ab.float(), bb.float()).to(dtype), **tol)


def test_meta_errors_match_cpu():
    a = torch.ones(2, 3, device=DEV)
    with pytest.raises(RuntimeError, match="cannot be multiplied"):
        torch.mm(a, a)
    with pytest.raises(RuntimeError, match="Expected out tensor to have dtype"):
        torch.mm(a, a.t(), out=torch.empty(2, 2, dtype=torch.float64, device=DEV))
    with pytest.raises(RuntimeError, match="dtype"):
        torch.amax(a, 0, out=torch.empty(3, dtype=torch.int64, device=DEV))
    with pytest.raises(IndexError):
        a.sum(5)
    with pytest.raises(RuntimeError):
        torch.cat([a, torch.ones(3, 3, device=DEV)], 1)
    with pytest.raises(RuntimeError):
        torch.bmm(torch.ones(2, 3, 4, device=DEV), torch.ones(2, 5, 4, device=DEV))
    # out= resized and written
    out = torch.empty(0, device=DEV)
    torch.sum(a, 1, out=out)
    _close(out, torch.full((2,), 3.0))
    v, i = torch.empty(0, device=DEV), torch.empty(0, dtype=torch.long, device=DEV)
    torch.max(a, 1, out=(v, i))
    assert v.shape == (2,) and i.shape == (2,)
    c = torch.empty(0, dtype=torch.float64, device=DEV)
    torch.cat([a, a.int()], 0, out=c)
    _close(c, torch.ones(4, 3, dtype=torch.float64))


@pytest.mark.parametrize("dtype", [torch.float32, torch.int64, torch.bfloat16])
def test_big_index_ops(dtype):
    x = torch.randn(700, 300).to(dtype)
    xn = x.to(DEV)
    idx = torch.randint(0, 700, (900,))
    _close(xn.index_select(0, idx.to(DEV)), x.index_select(0, idx))
    idx1 = torch.randint(0, 300, (700, 400))
    _close(torch.gather(xn, 1, idx1.to(DEV)), torch.gather(x, 1, idx1))
    _close(torch.cat([xn, xn[:, :100], xn[:, 5:]], 1), torch.cat([x, x[:, :100], x[:, 5:]], 1))
    _close(torch.cat([xn, xn.t().contiguous().t()], 0), torch.cat([x, x], 0))


def test_big_gather_bad_index_raises():
    x = torch.randn(700, 300).to(DEV)
    idx = torch.randint(0, 700, (900,))
    idx[850] = 700
    with pytest.raises(IndexError, match="index out of range in self"):
        x.index_select(0, idx.to(DEV))
    idx1 = torch.randint(0, 300, (700, 400))
    idx1[650, 3] = -400
    with pytest.raises(RuntimeError, match="index -400 is out of bounds for dimension 1"):
        torch.gather(x, 1, idx1.to(DEV))
    _close(x.index_select(0, torch.tensor([1, 2], device=DEV)), x.cpu()[1:3])
