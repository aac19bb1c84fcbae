"""Partition-loop fusion of the generated C (libtrn/src/nki/fuse.c):
consecutive instructions over the same partitions run as one loop over the
partition index. Fusion is exact: every kernel here runs fused and unfused
(NKI_FUSE=0) and the results must be bit-identical (NaN payloads, poison and
casts to narrow destination dtypes included), and equal NumPy where the math
is exact. Dependencies across partitions must keep instructions apart."""

import inspect

import numpy as np
import pytest
import torch

import neuronxcc.nki as lnki
import neuronxcc.nki.language as lnl
import nki
import nki.isa as nisa
import nki.language as nl
from kernels_norm import rmsnorm

rng = np.random.default_rng(21)


def r(*shape):
    return rng.standard_normal(shape).astype(np.float32)


def bits(a):
    if isinstance(a, torch.Tensor):
        a = a.detach().cpu().contiguous()
        return a.view(torch.int16 if a.element_size() == 2 else torch.int32).numpy()
    a = np.ascontiguousarray(a)  # bfloat16 outputs of NumPy runs are ml_dtypes arrays
    return a.view(np.int16 if a.itemsize == 2 else np.int32)


def run_both(monkeypatch, fn, *args, legacy=False, grid=None):
    """(fused outputs, fused source), (unfused outputs, unfused source): a
    fresh kernel per mode, so neither hits the other's cache."""
    out = []
    for fuse in ("1", "0"):
        monkeypatch.setenv("NKI_FUSE", fuse)
        k = (lnki.jit if legacy else nki.jit)(fn)
        if grid is not None:
            k = k[grid]
        src = k.specialize(*args)[0].prog.source
        res = k(*args)
        out.append((res if isinstance(res, tuple) else (res,), src))
    return out


def assert_identical(fused, unfused):
    assert len(fused) == len(unfused)
    for a, b in zip(fused, unfused):
        np.testing.assert_array_equal(bits(a), bits(b))


def layernorm(x, eps, out_dtype):
    out = nl.ndarray(x.shape, out_dtype, buffer=nl.shared_hbm)
    F = x.shape[1]
    for i in nl.affine_range(x.shape[0] // 128):
        t = nl.ndarray((128, F), nl.float32, buffer=nl.sbuf)
        nisa.dma_copy(dst=t, src=x[nl.ds(i * 128, 128), :])
        st = nl.ndarray((128, 6), nl.float32, buffer=nl.sbuf)
        nisa.bn_stats(dst=st, data=t)
        mv = nl.ndarray((128, 2), nl.float32, buffer=nl.sbuf)
        nisa.bn_aggr(dst=mv, data=st)
        rs = nl.ndarray((128, 1), nl.float32, buffer=nl.sbuf)
        nisa.tensor_scalar(dst=rs, data=mv[:, 1:2], op0=nl.add, operand0=eps)
        nisa.activation(dst=rs, op=nl.rsqrt, data=rs)
        y = nl.ndarray((128, F), out_dtype, buffer=nl.sbuf)
        nisa.tensor_scalar(
            dst=y, data=t, op0=nl.subtract, operand0=mv[:, 0:1], op1=nl.multiply, operand1=rs
        )
        nisa.dma_copy(dst=out[nl.ds(i * 128, 128), :], src=y)
    return out


@pytest.mark.parametrize("out_dtype", [nl.float32, nl.bfloat16])
def test_layernorm_fused_equals_unfused(monkeypatch, out_dtype):
    x = r(512, 200) * 3 + 1
    x[5, 7] = np.nan  # a NaN row stays NaN in both
    (f, fsrc), (u, usrc) = run_both(monkeypatch, layernorm, x, 1e-5, out_dtype)
    assert "fused: 7 instructions over 128 partitions" in fsrc
    assert "fused:" not in usrc
    # both copies forwarded (forward.c): stats and the normalization read
    # x's rows, the normalization writes out's rows
    assert fsrc.count(": forwarded */") == 2 and ": forwarded" not in usrc
    assert_identical(f, u)
    ref = (x - x.mean(1, keepdims=True)) / np.sqrt(x.var(1, keepdims=True) + 1e-5)
    got = np.asarray(f[0], np.float32)
    np.testing.assert_allclose(got, ref, rtol=1e-2 if out_dtype == nl.bfloat16 else 1e-5, atol=1e-2)


def softmax(x):
    out = nl.ndarray(x.shape, nl.float16, buffer=nl.shared_hbm)
    sums = nl.ndarray((x.shape[0], 1), nl.float32, buffer=nl.shared_hbm)
    F = x.shape[1]
    for i in nl.affine_range(x.shape[0] // 128):
        t = nl.ndarray((128, F), nl.float32, buffer=nl.sbuf)
        nisa.dma_copy(dst=t, src=x[nl.ds(i * 128, 128), :])
        m = nl.ndarray((128, 1), nl.float32, buffer=nl.sbuf)
        nisa.tensor_reduce(dst=m, op=nl.maximum, data=t, axis=1, negate=True)
        s = nl.ndarray((128, 1), nl.float32, buffer=nl.sbuf)
        nisa.activation(dst=t, op=nl.exp, data=t, bias=m, reduce_op=nl.add, reduce_res=s)
        rc = nl.ndarray((128, 1), nl.float32, buffer=nl.sbuf)
        nisa.reciprocal(dst=rc, data=s)
        y = nl.ndarray((128, F), nl.float16, buffer=nl.sbuf)
        nisa.tensor_scalar(dst=y, data=t, op0=nl.multiply, operand0=rc)
        nisa.dma_copy(dst=out[nl.ds(i * 128, 128), :], src=y)
        nisa.dma_copy(dst=sums[nl.ds(i * 128, 128), :], src=s)
    return out, sums


def test_softmax_fused_equals_unfused_with_hoisted_scalars(monkeypatch):
    x = r(256, 300) * 4
    (f, fsrc), (u, usrc) = run_both(monkeypatch, softmax, x)
    assert "fused: 7 instructions" in fsrc and "const float H2=" in fsrc
    assert "H2" not in usrc
    assert_identical(f, u)
    e = np.exp(x - x.max(1, keepdims=True))
    np.testing.assert_allclose(
        torch.as_tensor(f[0]).float().numpy(), e / e.sum(1, keepdims=True), rtol=2e-3, atol=1e-4
    )


def test_rmsnorm_bf16_fused_equals_unfused(monkeypatch):
    x = torch.randn(384, 96).to(torch.bfloat16)
    w = torch.randn(96).to(torch.bfloat16)
    (f, fsrc), (u, _) = run_both(monkeypatch, rmsnorm, x, w, 1e-6)
    assert "fused: 6 instructions" in fsrc
    assert_identical(f, u)
    xf, wf = x.float(), w.float()
    ref = xf * torch.rsqrt((xf * xf).mean(1, keepdim=True) + 1e-6) * wf
    torch.testing.assert_close(f[0].float(), ref, rtol=2e-2, atol=2e-2)


def inplace_rows(x, y):
    """out-parameter kernel: x <- (x + y) * 2 row tile by row tile; x and y
    may be one tensor (then the run time keeps everything unfused)"""
    for i in nl.affine_range(x.shape[0] // 128):
        a = nl.ndarray((128, x.shape[1]), nl.float32, buffer=nl.sbuf)
        nisa.dma_copy(dst=a, src=x[nl.ds(i * 128, 128), :])
        b = nl.ndarray((128, x.shape[1]), nl.float32, buffer=nl.sbuf)
        nisa.dma_copy(dst=b, src=y[nl.ds(i * 128, 128), :])
        nisa.tensor_tensor(dst=a, data1=a, data2=b, op=nl.add)
        nisa.tensor_scalar(dst=a, data=a, op0=nl.multiply, operand0=2.0)
        nisa.dma_copy(dst=x[nl.ds(i * 128, 128), :], src=a)


def test_hbm_written_group_runs_guarded_and_aliasing_arguments_stay_exact(monkeypatch):
    x0, y = r(256, 64), r(256, 64)
    monkeypatch.setenv("NKI_FUSE", "1")
    k = nki.jit(inplace_rows)
    x = torch.from_numpy(x0.copy())
    src = k.specialize(x, torch.from_numpy(y))[0].prog.source
    assert "if(!rt->serial){" in src and "fused: 5 instructions" in src
    k(x, torch.from_numpy(y))
    np.testing.assert_array_equal(x.numpy(), (x0 + y) * 2)
    # the same tensor as both arguments: rows read before they are written
    # either way; the overlap check picks the unfused copy
    x = torch.from_numpy(x0.copy())
    k(x, x)
    np.testing.assert_array_equal(x.numpy(), (x0 + x0) * 2)


def staged(x, y, widen, keep):
    """t stages x's rows (widened from bf16 when `widen`), u the result
    before its copy-out; `keep`: t is read again after the group (by a
    transpose, which is never fused), so its copy must stay"""
    out = nl.ndarray(x.shape, nl.float32, buffer=nl.shared_hbm)
    t = nl.ndarray((128, x.shape[1]), nl.float32 if widen else x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=x)
    u = nl.ndarray((128, x.shape[1]), nl.float32, buffer=nl.sbuf)
    nisa.tensor_tensor(dst=u, data1=t, data2=t, op=nl.multiply)
    nisa.tensor_scalar(dst=u, data=u, op0=nl.add, operand0=1.0)
    nisa.dma_copy(dst=out, src=u)
    if keep:
        v = nl.ndarray((128, 128), nl.float32, buffer=nl.psum)
        nisa.nc_transpose(dst=v, data=t[:, 0:128])
        w = nl.ndarray((128, 128), nl.float32, buffer=nl.sbuf)
        nisa.tensor_copy(dst=w, src=v)
        nisa.dma_copy(dst=y, src=w)
    return out


@pytest.mark.parametrize("widen,keep", [(False, False), (True, False), (False, True)])
def test_copy_forwarding_exact_and_only_where_unseen(monkeypatch, widen, keep):
    x = torch.randn(128, 160).to(torch.bfloat16 if widen else torch.float32)
    y = torch.zeros(128, 128)
    (f, fsrc), (u, usrc) = run_both(monkeypatch, staged, x, y, widen, keep)
    # u's copy-out always goes (no one else sees u; with `keep`, w's too);
    # t's copy-in only when nothing after the group reads t
    line = inspect.getsourcelines(staged)[1] + 6  # nisa.dma_copy(dst=t, src=x)
    assert (f"dma_copy at test_nki_fusion.py:{line}: forwarded */" in fsrc) == (not keep)
    assert fsrc.count(": forwarded */") == 2
    assert_identical(f, u)
    xf = x.float()
    assert torch.equal(torch.as_tensor(f[0]), xf * xf + 1)


def shifted(x):
    """row p of u reads row p + 1 of t, written by the previous instruction:
    a dependence across partitions, so the two are never fused together"""
    out = nl.ndarray((127, x.shape[1]), nl.float32, buffer=nl.shared_hbm)
    t = nl.ndarray((128, x.shape[1]), nl.float32, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=x)
    nisa.tensor_scalar(dst=t, data=t, op0=nl.add, operand0=1.0)
    u = nl.ndarray((127, x.shape[1]), nl.float32, buffer=nl.sbuf)
    nisa.tensor_scalar(dst=u, data=t[1:128, :], op0=nl.multiply, operand0=3.0)
    nisa.dma_copy(dst=out, src=u)
    return out


def test_cross_partition_dependence_is_not_fused(monkeypatch):
    x = r(128, 40)
    (f, fsrc), (u, _) = run_both(monkeypatch, shifted, x)
    # the first two fuse (128 partitions); the shifted read starts a new group
    assert "fused: 2 instructions over 128 partitions" in fsrc
    assert "fused: 2 instructions over 127 partitions" in fsrc
    assert_identical(f, u)
    np.testing.assert_array_equal(f[0], (x[1:] + 1) * 3)


def poison_read(x):
    """reads a tile's unwritten half: the poison (NaN) shows in both modes"""
    out = nl.ndarray((128, 64), nl.float32, buffer=nl.shared_hbm)
    t = nl.ndarray((128, 64), nl.float32, buffer=nl.sbuf)
    nisa.dma_copy(dst=t[:, 0:32], src=x)
    y = nl.ndarray((128, 64), nl.float32, buffer=nl.sbuf)
    nisa.tensor_scalar(dst=y, data=t, op0=nl.add, operand0=1.0)
    nisa.dma_copy(dst=out, src=y)
    return out


def test_poison_hoisted_before_the_group(monkeypatch):
    x = r(128, 32)
    (f, fsrc), (u, _) = run_both(monkeypatch, poison_read, x)
    assert "fused: 3 instructions" in fsrc
    assert_identical(f, u)
    np.testing.assert_array_equal(f[0][:, :32], x + 1)
    assert np.isnan(f[0][:, 32:]).all()


def legacy_masked(a, b):
    """legacy front end: result-returning calls, arange tiles and a mask (its
    run-time bounds checks keep the masked load unfused)"""
    out = lnl.ndarray(a.shape, dtype=a.dtype, buffer=lnl.shared_hbm)
    i_p = lnl.arange(128)[:, None]
    i_f = lnl.arange(a.shape[1])[None, :]
    for t in lnl.affine_range((a.shape[0] + 127) // 128):
        rows = t * 128 + i_p
        x = lnl.load(a[rows, i_f], mask=rows < a.shape[0])
        y = lnl.load(b[rows, i_f], mask=rows < a.shape[0])
        z = lnl.exp(lnl.multiply(lnl.add(x, y), 0.5))
        lnl.store(out[rows, i_f], value=z, mask=rows < a.shape[0])
    return out


def test_legacy_kernel_fused_equals_unfused(monkeypatch):
    a, b = r(300, 48), r(300, 48)
    (f, _), (u, _) = run_both(monkeypatch, legacy_masked, a, b, legacy=True)
    assert_identical(f, u)
    np.testing.assert_allclose(f[0], np.exp((a + b) * 0.5), rtol=2e-6)
