"""Numeric semantics as on the NeuronCore: fp32 internal arithmetic with
round-to-nearest-even casts, fp32->int rounding to even with saturation,
fp8 formats, new memory poisoned (NaN / 4), PSUM first-write-overwrites
tracked per region."""

import numpy as np
import torch

import nki
import nki.isa as nisa
import nki.language as nl


@nki.jit
def _cast(a, dtype):
    out = nl.ndarray(a.shape, dtype, buffer=nl.shared_hbm)
    t = nl.ndarray(a.shape, dtype, buffer=nl.sbuf)
    nisa.tensor_copy(dst=t, src=nl.load(a))
    nl.store(out, t)
    return out


def test_casts_round_to_nearest_even_and_saturate():
    x = torch.tensor(
        [[0.5, 1.5, 2.5, -0.5, -1.5, 3e9, -3e9, float("nan"), 2.4999, 255.5, -7.5, 1e6]],
        dtype=torch.float32,
    )
    got = nki.simulate(_cast)(x, nl.int32)
    assert got.dtype == torch.int32
    assert got.tolist() == [[0, 2, 2, 0, -2, 2147483647, -2147483648, 0, 2, 256, -8, 1000000]]
    u8 = nki.simulate(_cast)(x, nl.uint8)
    assert u8.tolist() == [[0, 2, 2, 0, 0, 255, 0, 0, 2, 255, 0, 255]]
    i8 = nki.simulate(_cast)(x, nl.int8)
    assert i8.tolist() == [[0, 2, 2, 0, -2, 127, -128, 0, 2, 127, -8, 127]]


def test_bf16_fp16_fp8_round_to_nearest_even():
    x = torch.randn(4, 512) * 100
    x[0, :4] = torch.tensor([1.00390625, 1.01171875, -1.00390625, 65504.0])  # bf16 ties
    for dtype, tdt in (
        (nl.bfloat16, torch.bfloat16),
        (nl.float16, torch.float16),
        (nl.float8_e4m3fn, torch.float8_e4m3fn),
        (nl.float8_e5m2, torch.float8_e5m2),
    ):
        src = x.clamp(-400, 400) if tdt == torch.float8_e4m3fn else x
        got = nki.simulate(_cast)(src, dtype)
        assert got.dtype == tdt
        assert torch.equal(got.float(), src.to(tdt).float()), dtype


def test_bf16_arithmetic_is_fp32_then_rounded():
    @nki.jit
    def k(a, b):
        out = nl.ndarray(a.shape, nl.bfloat16, buffer=nl.shared_hbm)
        t = nl.ndarray(a.shape, nl.bfloat16, buffer=nl.sbuf)
        nisa.tensor_tensor(dst=t, data1=nl.load(a), data2=nl.load(b), op=nl.multiply)
        nl.store(out, t)
        return out

    a, b = torch.randn(128, 64).bfloat16(), torch.randn(128, 64).bfloat16()
    got = nki.simulate(k)(a, b)
    assert torch.equal(got, (a.float() * b.float()).bfloat16())


def test_new_memory_is_poisoned():
    @nki.jit
    def k(a):
        out = nl.ndarray((128, 8), nl.float32, buffer=nl.shared_hbm)
        iout = nl.ndarray((128, 8), nl.int32, buffer=nl.shared_hbm)
        t = nl.ndarray((128, 8), nl.float32, buffer=nl.sbuf)
        u = nl.ndarray((128, 8), nl.int32, buffer=nl.sbuf)
        nisa.tensor_copy(dst=t[:, 0:4], src=nl.load(a))  # half written
        nl.store(out, t)
        nl.store(iout, u)
        return out, iout

    a = np.ones((128, 4), np.float32)
    out, iout = k(a)
    assert (out[:, :4] == 1).all() and np.isnan(out[:, 4:]).all()
    assert (iout == 4).all()


def test_psum_first_write_tracked_per_region():
    @nki.jit
    def k(a, b):
        out = nl.ndarray((64, 512), nl.float32, buffer=nl.shared_hbm)
        ps = nl.ndarray((64, 512), nl.float32, buffer=nl.psum)
        at, bt = nl.load(a), nl.load(b)
        # overlapping regions: columns 0..255 twice, 128..383 once more
        nisa.nc_matmul(dst=ps[:, 0:256], stationary=at, moving=bt)
        nisa.nc_matmul(dst=ps[:, 0:256], stationary=at, moving=bt)
        nisa.nc_matmul(dst=ps[:, 128:384], stationary=at, moving=bt)
        o = nl.ndarray((64, 512), nl.float32, buffer=nl.sbuf)
        nisa.tensor_copy(dst=o, src=ps)
        nl.store(out, o)
        return out

    a = np.random.rand(128, 64).astype(np.float32)
    b = np.random.rand(128, 256).astype(np.float32)
    got = k(a, b)
    p = a.T @ b
    ref = np.full((64, 512), np.nan, np.float32)
    ref[:, 0:256] = 2 * p
    ref[:, 128:256] += p[:, 0:128]
    ref[:, 256:384] = p[:, 128:256]
    np.testing.assert_allclose(got[:, :384], ref[:, :384], rtol=1e-5)
    assert np.isnan(got[:, 384:]).all()


def _covered(k, *args):
    return k.specialize(*args)[0].covered


def test_output_poison_skipped_only_where_unobservable():
    # libtrn's cover.c: an output the kernel never reads and one
    # unconditional instruction writes entirely starts uninitialised; any
    # other keeps its NaN / 4 poison
    @nki.jit
    def whole(a):  # loop over row tiles, then columns: one store covers all
        out = nl.ndarray(a.shape, a.dtype, buffer=nl.shared_hbm)
        for i in nl.affine_range(a.shape[0] // 128):
            for j in nl.affine_range(2):
                t = nl.load(a[nl.ds(i * 128, 128), nl.ds(j * 32, 32)])
                nl.store(out[nl.ds(i * 128, 128), nl.ds(j * 32, 32)], t)
        return out

    @nki.jit
    def part(a):  # the last column is never written
        out = nl.ndarray(a.shape, a.dtype, buffer=nl.shared_hbm)
        nl.store(out[:, 0:63], nl.load(a[:, 0:63]))
        return out

    @nki.jit
    def overlap(a):  # 64 columns written as 0..47 and 16..63: not one bijection
        out = nl.ndarray(a.shape, a.dtype, buffer=nl.shared_hbm)
        for j in nl.affine_range(2):
            nl.store(out[:, nl.ds(j * 16, 48)], nl.load(a[:, nl.ds(j * 16, 48)]))
        return out

    @nki.jit
    def reads(a):  # reads the output (poison) before overwriting it
        out = nl.ndarray(a.shape, a.dtype, buffer=nl.shared_hbm)
        t = nl.load(out)
        nl.store(out, nl.load(a))
        u = nl.ndarray(a.shape, a.dtype, buffer=nl.sbuf)
        nisa.tensor_tensor(dst=u, data1=t, data2=nl.load(a), op=nl.add)
        o2 = nl.ndarray(a.shape, a.dtype, buffer=nl.shared_hbm)
        nl.store(o2, u)
        return out, o2

    @nki.jit
    def grid(a):  # SPMD instances, each its own row tile (program id)
        out = nl.ndarray(a.shape, a.dtype, buffer=nl.shared_hbm)
        i = nl.program_id(0)
        nl.store(out[nl.ds(i * 128, 128), :], nl.load(a[nl.ds(i * 128, 128), :]))
        return out

    a = np.random.rand(256, 64).astype(np.float32)
    ai = (np.arange(256 * 64, dtype=np.int32) % 7).reshape(256, 64)
    assert _covered(whole, a) == (True,)
    np.testing.assert_array_equal(whole(a), a)
    assert _covered(whole, ai) == (True,)
    np.testing.assert_array_equal(whole(ai), ai)
    assert _covered(part, a[:128]) == (False,)
    got = part(a[:128])
    np.testing.assert_array_equal(got[:, :63], a[:128, :63])
    assert np.isnan(got[:, 63]).all()
    assert (part(ai[:128])[:, 63] == 4).all()
    assert _covered(overlap, a[:128]) == (False,)
    np.testing.assert_array_equal(overlap(a[:128]), a[:128])
    assert _covered(reads, a[:128]) == (False, True)
    out, o2 = reads(a[:128])
    np.testing.assert_array_equal(out, a[:128])
    assert np.isnan(o2).all()
    assert _covered(grid[2], a) == (True,)
    np.testing.assert_array_equal(grid[2](a), a)
    assert _covered(grid[1], a) == (False,)  # one instance: rows 128.. never written
    assert np.isnan(grid[1](a)[128:]).all()
    # on the device too
    x = torch.from_numpy(a).to("neuron")
    assert torch.equal(whole(x).cpu(), torch.from_numpy(a))
    assert torch.isnan(part(x[:128]).cpu()[:, 63]).all()
