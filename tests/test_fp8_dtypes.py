"""float8 dtypes on neuron (libtrn copy kernel + trn/convert.h): every
conversion bit-identical to PyTorch CPU's - all 256 codes of each format to
every dtype, a dense float32 sweep (ties, subnormals, overflow, inf/NaN) and
the other float sources into each format - plus creation, fill, view,
eq/ne, abs and amax/amin running natively (nothing in get_fallback_ops())."""

import pytest
import torch

import torch_neuronx

DEV = "neuron"
FP8 = [
    torch.float8_e4m3fn,
    torch.float8_e5m2,
    torch.float8_e4m3fnuz,
    torch.float8_e5m2fnuz,
    torch.float8_e8m0fnu,
]
WIDE = [
    torch.float32,
    torch.float64,
    torch.float16,
    torch.bfloat16,
    torch.complex64,
    torch.uint16,
    torch.complex128,
    torch.int64,
    torch.int32,
    torch.int16,
    torch.int8,
    torch.uint8,
    torch.bool,
]


@pytest.fixture(autouse=True)
def _clear():
    torch_neuronx.clear_op_tracking()


def _no_fallback():
    assert torch_neuronx.get_fallback_ops() == []


def _bits(t):
    """Raw bytes of a CPU tensor, for bit-for-bit comparison (NaN patterns)."""
    t = t.contiguous()
    if t.is_complex():
        t = torch.view_as_real(t)
    return t.view(torch.uint8)


def _codes(dtype):
    return torch.arange(256, dtype=torch.int32).to(torch.uint8).view(dtype)


def _f32_sweep():
    """float32 bit patterns: a stride over all of them, every exponent the
    8-bit formats reach with mantissas around each rounding boundary, all
    float32 subnormals' low range, inf and NaNs; both signs."""
    parts = [torch.arange(0, 2**32, 65521, dtype=torch.int64)]
    e = torch.arange(90, 162, dtype=torch.int64)
    low = torch.arange(-3, 4, dtype=torch.int64)
    for sh in (19, 20, 21, 22):
        m = torch.arange(0, 2**23, 2**sh, dtype=torch.int64)
        parts.append(
            (
                (e[:, None, None] << 23)
                | (m[None, :, None] + low[None, None, :]).clamp(0, 2**23 - 1)
            ).flatten()
        )
    parts.append(torch.arange(0, 2**16, dtype=torch.int64))
    parts.append(
        torch.tensor(
            [0x7F800000, 0x7F800001, 0x7FC00000, 0x7FFFFFFF, 0x7F7FFFFF, 0x00800000, 0x007FFFFF]
        )
    )
    u = torch.cat(parts)
    u = torch.cat([u, u | 0x80000000])
    return torch.where(u >= 2**31, u - 2**32, u).to(torch.int32).view(torch.float32)


@pytest.mark.parametrize("src", FP8, ids=str)
@pytest.mark.parametrize("dst", WIDE + FP8, ids=str)
def test_all_codes_to_every_dtype(src, dst):
    codes = _codes(src)
    want = codes.to(dst)
    got = codes.to(DEV).to(dst).cpu()
    assert torch.equal(_bits(got), _bits(want)), (src, dst)
    _no_fallback()


@pytest.mark.parametrize("dst", FP8, ids=str)
def test_float32_sweep_into_fp8(dst):
    x = _f32_sweep()
    got = x.to(DEV).to(dst).cpu()
    assert torch.equal(got.view(torch.uint8), x.to(dst).view(torch.uint8))
    _no_fallback()


@pytest.mark.parametrize(
    "src",
    [
        torch.float64,
        torch.float16,
        torch.bfloat16,
        torch.complex64,
        torch.int64,
        torch.int32,
        torch.uint8,
        torch.bool,
    ],
    ids=str,
)
@pytest.mark.parametrize("dst", FP8, ids=str)
def test_other_sources_into_fp8(src, dst):
    x = _f32_sweep()
    if src == torch.float64:
        # Values between float32 neighbours: PyTorch rounds to float32 first.
        x = x.double()
        x = torch.cat([x, x * (1 + 2**-30), x * (1 - 2**-30)])
    elif src.is_floating_point or src.is_complex:
        x = x.to(src)
    else:
        x = torch.cat([torch.arange(-300, 300), torch.tensor([2**20 + 1, -(2**31) + 5])])
        x = x.to(src)
    got = x.to(DEV).to(dst).cpu()
    assert torch.equal(got.view(torch.uint8), x.to(dst).view(torch.uint8))
    _no_fallback()


@pytest.mark.parametrize("dtype", FP8, ids=str)
def test_copy_both_ways_view_and_strided(dtype):
    codes = _codes(dtype).reshape(16, 16)
    d = codes.to(DEV)
    assert d.dtype == dtype and d.device.type == DEV
    assert torch.equal(d.cpu().view(torch.uint8), codes.view(torch.uint8))
    # A transposed view converts element by element.
    assert torch.equal(d.t().float().cpu().view(torch.int32), codes.t().float().view(torch.int32))
    assert torch.equal(d.view(torch.uint8).cpu(), codes.view(torch.uint8))
    assert torch.equal(
        d.view(torch.uint8).view(dtype).cpu().view(torch.uint8), codes.view(torch.uint8)
    )
    back = torch.empty(16, 16, dtype=dtype)
    back.copy_(d)
    assert torch.equal(back.view(torch.uint8), codes.view(torch.uint8))
    _no_fallback()


@pytest.mark.parametrize("dtype", FP8, ids=str)
def test_creation_and_fill(dtype):
    for value in (0.0, 1.0, 0.3, -2.5, 1000.0, 1e6, float("inf"), float("nan")):
        try:
            want = torch.full((5, 3), value, dtype=dtype)
        except RuntimeError as e:  # the value overflows the format: the same error
            with pytest.raises(RuntimeError, match="overflow"):
                torch.full((5, 3), value, dtype=dtype, device=DEV)
            assert "overflow" in str(e)
            continue
        got = torch.full((5, 3), value, dtype=dtype, device=DEV)
        assert torch.equal(got.cpu().view(torch.uint8), want.view(torch.uint8)), value
        t = torch.empty(4, dtype=dtype, device=DEV).fill_(value)
        assert torch.equal(
            t.cpu().view(torch.uint8), torch.empty(4, dtype=dtype).fill_(value).view(torch.uint8)
        )
    for make in (torch.zeros, torch.ones):
        assert torch.equal(
            make(7, dtype=dtype, device=DEV).cpu().view(torch.uint8),
            make(7, dtype=dtype).view(torch.uint8),
        )
    z = torch.ones(6, dtype=dtype, device=DEV).zero_()
    assert torch.equal(z.cpu().view(torch.uint8), torch.zeros(6, dtype=dtype).view(torch.uint8))
    _no_fallback()


@pytest.mark.parametrize("dtype", FP8, ids=str)
def test_eq_ne(dtype):
    a = _codes(dtype)
    b = a.view(torch.uint8).flip(0).view(dtype)
    for op in (torch.eq, torch.ne):
        assert torch.equal(op(a.to(DEV), b.to(DEV)).cpu(), op(a, b))
        assert torch.equal(op(a.to(DEV), a.to(DEV)).cpu(), op(a, a))  # NaN != NaN
    _no_fallback()


@pytest.mark.parametrize("dtype", FP8[:4], ids=str)
def test_abs(dtype):
    a = _codes(dtype)
    assert torch.equal(a.to(DEV).abs().cpu().view(torch.uint8), a.abs().view(torch.uint8))
    out = torch.empty(256, dtype=dtype, device=DEV)
    torch.abs(a.to(DEV), out=out)
    assert torch.equal(out.cpu().view(torch.uint8), a.abs().view(torch.uint8))
    _no_fallback()


@pytest.mark.parametrize("dtype", FP8, ids=str)
def test_amax_amin(dtype):
    # PyTorch CPU has no float8 amax: the reference is float32's, narrowed
    # (exact: the extreme of 8-bit values is an 8-bit value).
    g = torch.Generator().manual_seed(0)
    x = (
        (torch.randn(33, 17, generator=g) * 8).abs().to(dtype)
        if dtype == torch.float8_e8m0fnu
        else (torch.randn(33, 17, generator=g) * 8).to(dtype)
    )
    d = x.to(DEV)
    for fn in (torch.amax, torch.amin):
        for dim in ((), (0,), (1,), (0, 1)):
            want = fn(x.float(), dim=dim).to(dtype)
            got = fn(d, dim=dim)
            assert got.dtype == dtype
            assert torch.equal(got.cpu().view(torch.uint8), want.view(torch.uint8)), (fn, dim)
    if dtype != torch.float8_e8m0fnu:  # the amax of abs, as float8 scaling computes it
        assert torch.equal(d.abs().amax().cpu().float(), x.float().abs().amax())
    _no_fallback()
