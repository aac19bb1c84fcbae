"""Every hardware rule libtrn checks, raising with the kernel's name, the
instruction and the kernel source line."""

import inspect

import numpy as np
import pytest

import nki
import nki.isa as nisa
import nki.language as nl

A = np.zeros((256, 1024), np.float32)


def _line(fn, text):
    src, first = inspect.getsourcelines(fn)
    return first + next(i for i, s in enumerate(src) if text in s)


def check(kernel, marker, what, *args):
    with pytest.raises(nki.NkiError) as e:
        kernel(*(args or (A,)))
    msg = str(e.value)
    assert f"nki kernel '{kernel.__name__}'" in msg, msg
    assert f"test_nki_checks.py:{_line(kernel.fn, marker)}" in msg, msg
    assert what in msg, msg
    return msg


def test_partition_dim_limit():
    @nki.jit
    def part(a):
        t = nl.ndarray((128, 64), nl.float32, buffer=nl.sbuf)
        nisa.dma_copy(dst=t, src=a[0:129, 0:64])  # MARK

    with pytest.raises(nki.NkiError, match="out-of-bounds|partitions"):
        part(A)

    @nki.jit
    def alloc(a):
        nl.ndarray((256, 4), nl.float32, buffer=nl.sbuf)  # MARK

    check(alloc, "# MARK", "256 partitions")


def test_matmul_limits():
    @nki.jit
    def moving(a):
        s = nl.load(a[0:128, 0:128])
        m = nl.load(a[0:128, 0:1024])
        ps = nl.ndarray((128, 1024), nl.float32, buffer=nl.psum)
        nisa.nc_matmul(dst=ps, stationary=s, moving=m)  # MARK

    check(moving, "# MARK", "moving free size 1024 exceeds 512")

    @nki.jit
    def stationary(a):
        s = nl.load(a[0:128, 0:256])
        m = nl.load(a[0:128, 0:256])
        ps = nl.ndarray((256, 256), nl.float32, buffer=nl.psum)
        nisa.nc_matmul(dst=ps[0:128], stationary=s, moving=m)  # MARK

    with pytest.raises(nki.NkiError, match="stationary free size 256 exceeds 128|partitions"):
        stationary(A)

    @nki.jit
    def bank(a):
        s = nl.load(a[0:128, 0:128])
        m = nl.load(a[0:128, 0:256])
        ps = nl.ndarray((128, 1024), nl.float32, buffer=nl.psum)
        nisa.nc_matmul(dst=ps[:, 384:640], stationary=s, moving=m)  # MARK

    check(bank, "# MARK", "crosses a PSUM bank boundary")


def test_buffers_each_instruction_may_use():
    @nki.jit
    def mm_sbuf_dst(a):
        s = nl.load(a[0:128, 0:128])
        d = nl.ndarray((128, 128), nl.float32, buffer=nl.sbuf)
        nisa.nc_matmul(dst=d, stationary=s, moving=s)  # MARK

    check(mm_sbuf_dst, "# MARK", "the destination is in sbuf; this instruction takes it from: psum")

    @nki.jit
    def compute_on_hbm(a):
        d = nl.ndarray((128, 128), nl.float32, buffer=nl.sbuf)
        nisa.tensor_tensor(dst=d, data1=a[0:128, 0:128], data2=a[0:128, 0:128], op=nl.add)  # MARK

    check(compute_on_hbm, "# MARK", "an input is in hbm")

    @nki.jit
    def dma_from_psum(a):
        p = nl.ndarray((128, 128), nl.float32, buffer=nl.psum)
        nisa.memset(dst=p, value=0.0)
        nisa.dma_copy(dst=a[0:128, 0:128], src=p)  # MARK

    check(dma_from_psum, "# MARK", "the source is in psum")


def test_out_of_bounds_access_pattern():
    @nki.jit
    def oob(a):
        for i in nl.affine_range(3):
            t = nl.ndarray((128, 64), nl.float32, buffer=nl.sbuf)
            nisa.dma_copy(dst=t, src=a[nl.ds(i * 128, 128), 0:64])  # MARK

    check(oob, "# MARK", "out-of-bounds access")


def test_sbuf_and_psum_capacity():
    @nki.jit
    def sbuf_full(a):
        ts = [nl.ndarray((128, 16384), nl.float32, buffer=nl.sbuf) for _ in range(4)]  # MARK
        for t in ts:
            nisa.memset(dst=t, value=0.0)

    check(
        sbuf_full, "# MARK", "SBUF needs 262144 bytes per partition here; NeuronCore v3 has 229376"
    )

    @nki.jit
    def psum_full(a):
        ps = [nl.ndarray((128, 512), nl.float32, buffer=nl.psum) for _ in range(9)]  # MARK
        for p in ps:
            nisa.memset(dst=p, value=0.0)

    check(psum_full, "# MARK", "PSUM needs 9 banks here; there are 8")


def test_runtime_bounds_of_masked_access():
    import neuronxcc.nki as lnki
    import neuronxcc.nki.language as lnl

    @lnki.jit(mode="simulation")
    def masked(a):
        out = lnl.ndarray((128, 8), lnl.float32, buffer=lnl.shared_hbm)
        ip, jf = lnl.arange(128)[:, None], lnl.arange(8)[None, :]
        t = lnl.load(a[ip, jf], mask=(ip < 120))  # MARK: rows 100..119 do not exist
        lnl.store(out, t)
        return out

    with pytest.raises(ValueError, match="out-of-bounds access at run time"):
        masked(np.zeros((100, 8), np.float32))
