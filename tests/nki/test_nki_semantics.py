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
