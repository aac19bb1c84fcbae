"""bfloat16 and the float8 formats as NumPy dtypes (ml_dtypes, as in AWS's
nki): arrays built with NKI dtypes go into nki.simulate, legacy simulation
and kernel constants, and come back in the kernel's dtype. Conversions are
exact and have one definition: a kernel's cast and ``to_array`` (float32,
then round to nearest even) give the same bits."""

import numpy as np
import pytest
import torch

import neuronxcc.nki as lnki
import neuronxcc.nki.language as lnl
import nki
import nki.isa as nisa
import nki.language as nl
from nki import _dtypes as dt

NARROW = (nl.bfloat16, nl.float8_e4m3, nl.float8_e4m3fn, nl.float8_e5m2)


@nki.jit
def _cast(a, dtype):
    # a (128, F) -> dtype, through SBUF in 512-column tiles
    out = nl.ndarray(a.shape, dtype, buffer=nl.shared_hbm)
    for j in nl.affine_range(a.shape[1] // 512):
        t = nl.ndarray((128, 512), dtype, buffer=nl.sbuf)
        nisa.tensor_copy(dst=t, src=nl.load(a[:, nl.ds(j * 512, 512)]))
        nl.store(out[:, nl.ds(j * 512, 512)], t)
    return out


def _bits(a):
    return np.ascontiguousarray(a).view(np.uint16 if a.dtype.itemsize == 2 else np.uint8)


def test_nki_dtypes_are_numpy_dtypes():
    for d in NARROW:
        a = np.ones((2, 3), dtype=d)
        assert a.dtype == np.dtype(str(d)) and a.dtype.itemsize == d.itemsize
        assert dt.to_dtype(a.dtype) is d
        assert (
            lnl.bfloat16 == nl.bfloat16 and np.zeros(4, dtype=lnl.float8_e5m2).dtype.itemsize == 1
        )
    b = np.array([1.0, 2.5, -3.0]).astype(nl.bfloat16)
    assert b.astype(np.float32).tolist() == [1.0, 2.5, -3.0]


def test_float32_to_narrow_casts_match_to_array_bit_for_bit():
    # a dense sweep of float32 bit patterns (every sign, exponent, rounding
    # case, subnormals, inf, NaN), cast by the generated code and by to_array
    rng = np.random.default_rng(0)
    u = np.concatenate(
        [
            np.arange(0, 2**32, 4099, dtype=np.uint64).astype(np.uint32),
            rng.integers(0, 2**32, 128 * 512, dtype=np.uint64).astype(np.uint32),
        ]
    )
    u = u[: len(u) // (128 * 512) * 128 * 512]
    x = u.view(np.float32).reshape(128, -1)
    for d in NARROW:
        got = nki.simulate(_cast)(x, d)
        assert got.dtype == np.dtype(str(d))
        np.testing.assert_array_equal(_bits(got), _bits(dt.to_array(x, d)), err_msg=str(d))
    # PyTorch's conversions agree where it has the format (NaN bit patterns
    # aside: PyTorch's are its own)
    xt, ok = torch.from_numpy(x), ~np.isnan(x)
    np.testing.assert_array_equal(
        _bits(dt.to_array(x, nl.bfloat16))[ok], xt.bfloat16().view(torch.uint16).numpy()[ok]
    )
    np.testing.assert_array_equal(
        _bits(dt.to_array(x, nl.float8_e5m2))[ok],
        xt.to(torch.float8_e5m2).view(torch.uint8).numpy()[ok],
    )


def test_narrow_to_float32_is_exact_for_every_code():
    # every bf16 code and every code of each float8 format, widened by the
    # generated code and by NumPy (ml_dtypes): the same value, NaN for NaN
    for d, n in (
        (nl.bfloat16, 65536),
        (nl.float8_e4m3, 256),
        (nl.float8_e4m3fn, 256),
        (nl.float8_e5m2, 256),
    ):
        codes = np.arange(n, dtype=np.uint16 if n > 256 else np.uint8)
        a = np.resize(codes, (128, 512)).view(str(d))
        got = nki.simulate(_cast)(a, nl.float32)
        want = a.astype(np.float32)
        assert np.array_equal(np.isnan(got), np.isnan(want)), d
        ok = ~np.isnan(want)
        np.testing.assert_array_equal(got[ok], want[ok], err_msg=str(d))


def test_narrow_arrays_through_kernels_both_generations():
    @nki.jit
    def add(a, b):
        out = nl.ndarray(a.shape, a.dtype, buffer=nl.shared_hbm)
        t = nl.ndarray(a.shape, a.dtype, buffer=nl.sbuf)
        nisa.tensor_tensor(dst=t, data1=nl.load(a), data2=nl.load(b), op=nl.add)
        nl.store(out, t)
        return out

    @lnki.jit
    def ladd(a, b):
        out = lnl.ndarray(a.shape, dtype=a.dtype, buffer=lnl.shared_hbm)
        lnl.store(out, lnl.add(lnl.load(a), lnl.load(b), dtype=a.dtype))
        return out

    rng = np.random.default_rng(1)
    x = rng.standard_normal((128, 64)).astype(np.float32)
    y = rng.standard_normal((128, 64)).astype(np.float32)
    for d in NARROW:
        a, b = dt.to_array(x, d), dt.to_array(y, d)
        want = dt.to_array(a.astype(np.float32) + b.astype(np.float32), d)
        for got in (nki.simulate(add)(a, b), lnki.simulate_kernel(ladd, a, b)):
            assert got.dtype == a.dtype
            np.testing.assert_array_equal(_bits(got), _bits(want), err_msg=str(d))


def test_narrow_constants_and_static_cast_on_device():
    c = np.linspace(-3, 3, 128 * 32).reshape(128, 32)  # float64: rounded via float32

    @nki.jit
    def plus_const(a):
        k = nl.shared_constant(c, dtype=nl.bfloat16)
        out = nl.ndarray(a.shape, nl.float32, buffer=nl.shared_hbm)
        t = nl.ndarray(a.shape, nl.float32, buffer=nl.sbuf)
        nisa.tensor_tensor(dst=t, data1=nl.load(a), data2=nl.load(k), op=nl.add)
        nl.store(out, t)
        return out

    cb = dt.to_array(c, nl.bfloat16)
    assert _bits(cb).tolist() == _bits(lnl.static_cast(c, nl.bfloat16)).tolist()
    np.testing.assert_array_equal(
        _bits(cb), torch.from_numpy(c).float().bfloat16().view(torch.uint16).numpy()
    )
    x = torch.randn(128, 32)
    want = x + torch.from_numpy(cb.astype(np.float32))
    assert torch.equal(plus_const(x.to("neuron")).cpu(), want)
    assert torch.equal(nki.simulate(plus_const)(x), want)
    # a bfloat16 array as a CPU tensor on the same bytes
    v = dt.torch_view(cb)
    assert v.dtype == torch.bfloat16 and torch.equal(
        v.float(), torch.from_numpy(cb.astype(np.float32))
    )
    with pytest.raises(TypeError, match="PyTorch has no float8_e4m3"):
        dt.torch_view(np.zeros(4, dtype=nl.float8_e4m3))
