"""MX (MXFP8) block scaling in torch._scaled_mm and torch._scaled_mm_v2 on
neuron (libtrn scaled_mm.c, aten/scaled_mm.cpp): float8 operands, one
float8_e8m0fnu scale per 32 K elements of each row of A and column of B, in
the swizzled layout PyTorch's CUDA path takes (SWIZZLE_32_4_4, torchao's
to_blocked). PyTorch CPU has no MX path: results are compared with a
float64 reference computed from the unswizzled scales. Requests CUDA
refuses raise here too."""

import pytest
import torch
from torch.nn.functional import ScalingType, SwizzleType

import torch_neuronx

DEV = "neuron"


@pytest.fixture(autouse=True)
def _clear():
    torch_neuronx.clear_op_tracking()
    torch.manual_seed(0)


def _no_fallback():
    assert torch_neuronx.get_fallback_ops() == []


def _swizzle(codes):
    """(rows, kb) uint8 scale codes -> the flat swizzled layout: padded to
    128 x 4 tiles, tiles row-major, element (r, c) of a tile at
    (r % 32) * 16 + (r // 32) * 4 + c. Written out index by index, apart
    from torchao's tensor reshapes (checked against them below)."""
    rows, kb = codes.shape
    rt, kt = -(-rows // 128), -(-kb // 4)
    out = torch.zeros(rt * kt * 512, dtype=torch.uint8)
    r = torch.arange(rows)[:, None]
    c = torch.arange(kb)[None, :]
    idx = ((r // 128) * kt + c // 4) * 512 + (r % 32) * 16 + ((r % 128) // 32) * 4 + c % 4
    out[idx.flatten()] = codes.flatten()
    return out.view(torch.float8_e8m0fnu)


def _scales(rows, kb, lo=110, hi=140):
    return torch.randint(lo, hi + 1, (rows, kb), dtype=torch.uint8)


def _ref64(a, b, ca, cb):
    """float64 sum over blocks of (block dot product) * 2^(ea + eb)."""
    m, k = a.shape
    n = b.shape[1]
    kb = ca.shape[1]
    a64, b64 = a.double(), b.double()
    out = torch.zeros(m, n, dtype=torch.float64)
    for blk in range(kb):
        sl = slice(blk * 32, min(k, blk * 32 + 32))
        part = a64[:, sl] @ b64[sl, :]
        ea, eb = ca[:, blk].double(), cb[:, blk].double()
        ea[ca[:, blk] == 0xFF] = float("nan")  # the e8m0 NaN code
        eb[cb[:, blk] == 0xFF] = float("nan")
        out += part * torch.exp2(ea - 127)[:, None] * torch.exp2(eb - 127)
    return out


def _operands(m, k, n, da, db, col_major=True):
    a = (torch.randn(m, k) * 8).to(da)
    if col_major:
        b = (torch.randn(n, k) * 8).to(db).t()
    else:
        b = (torch.randn(k, n) * 8).to(db)
    return a, b


def test_swizzle_matches_torchao_to_blocked():
    from torchao.prototype.mx_formats.utils import to_blocked

    for rows, kb in [(128, 4), (200, 3), (5, 9), (300, 12)]:
        codes = _scales(rows, kb, 0, 254)
        want = to_blocked(codes.view(torch.float8_e8m0fnu)).view(torch.uint8)
        assert torch.equal(_swizzle(codes).view(torch.uint8), want)


@pytest.mark.parametrize(
    "m,k,n", [(64, 128, 48), (200, 96, 130), (7, 80, 5), (129, 32, 257)], ids=str
)
@pytest.mark.parametrize("out_dtype", [torch.bfloat16, torch.float32], ids=str)
@pytest.mark.parametrize(
    "da,db",
    [
        (torch.float8_e4m3fn, torch.float8_e4m3fn),
        (torch.float8_e5m2, torch.float8_e4m3fn),
        (torch.float8_e4m3fn, torch.float8_e5m2),
    ],
    ids=str,
)
def test_mx_scaled_mm_vs_f64(m, k, n, out_dtype, da, db):
    a, b = _operands(m, k, n, da, db)
    kb = -(-k // 32)
    ca, cb = _scales(m, kb), _scales(n, kb)
    got = torch._scaled_mm(
        a.to(DEV), b.to(DEV), _swizzle(ca).to(DEV), _swizzle(cb).to(DEV), out_dtype=out_dtype
    ).cpu()
    assert got.dtype == out_dtype and got.shape == (m, n)
    ref = _ref64(a, b, ca, cb)
    # float32 sums of exact products: a few float32 ulps of the magnitude
    # of the terms; bfloat16 output: one rounding on top.
    scale = (a.double().abs() @ b.double().abs()).amax() * 2.0**13
    tol = (
        dict(rtol=8e-3, atol=float(scale) * 1e-6)
        if out_dtype == torch.bfloat16
        else dict(rtol=1e-5, atol=float(scale) * 1e-6)
    )
    torch.testing.assert_close(got.double(), ref, **tol)
    _no_fallback()


@pytest.mark.parametrize("with_bias", [False, True])
def test_mx_row_major_mat2_bias_and_out(with_bias):
    m, k, n = 40, 64, 24
    a, b = _operands(m, k, n, torch.float8_e4m3fn, torch.float8_e4m3fn, col_major=False)
    ca, cb = _scales(m, 2), _scales(n, 2)
    bias = torch.randn(n).to(torch.bfloat16) if with_bias else None
    ref = _ref64(a, b, ca, cb)
    if bias is not None:
        ref = ref + bias.double()
    got = torch._scaled_mm(
        a.to(DEV),
        b.to(DEV),
        _swizzle(ca).to(DEV),
        _swizzle(cb).to(DEV),
        bias=None if bias is None else bias.to(DEV),
        out_dtype=torch.float32,
    ).cpu()
    torch.testing.assert_close(got.double(), ref, rtol=1e-5, atol=1e-3)
    out = torch.empty(m, n, dtype=torch.float32, device=DEV)
    torch._scaled_mm(
        a.to(DEV),
        b.to(DEV),
        _swizzle(ca).to(DEV),
        _swizzle(cb).to(DEV),
        bias=None if bias is None else bias.to(DEV),
        out_dtype=torch.float32,
        out=out,
    )
    assert torch.equal(out.cpu(), got)
    _no_fallback()


def test_mx_extreme_scales_blockwise_path():
    # Scales whose scaled operands leave bfloat16's (and float32's) range:
    # A's blocks by 2^127, B's by 2^-125 - folded into the operands A would
    # overflow float32, block by block they give finite sums; 2^-127
    # (code 0) in one block, and a NaN scale (0xFF) in one block of one row.
    m, k, n = 16, 96, 8
    a, b = _operands(m, k, n, torch.float8_e4m3fn, torch.float8_e4m3fn)
    ca = torch.full((m, 3), 254, dtype=torch.uint8)
    cb = torch.full((n, 3), 2, dtype=torch.uint8)
    ca[3, 1] = 0
    cb[5, 2] = 20
    ca[9, 0] = 0xFF
    got = torch._scaled_mm(
        a.to(DEV), b.to(DEV), _swizzle(ca).to(DEV), _swizzle(cb).to(DEV), out_dtype=torch.float32
    ).cpu()
    nan_ref = _ref64(a, b, ca, cb)
    assert torch.isnan(got[9]).all() and torch.isnan(nan_ref[9]).all()
    keep = torch.ones(m, dtype=torch.bool)
    keep[9] = False
    assert torch.isfinite(got[keep]).all()
    torch.testing.assert_close(got[keep].double(), nan_ref[keep], rtol=1e-5, atol=1e-30)
    _no_fallback()


def test_mx_scaled_mm_v2():
    m, k, n = 72, 160, 40
    a, b = _operands(m, k, n, torch.float8_e4m3fn, torch.float8_e4m3fn)
    ca, cb = _scales(m, 5), _scales(n, 5)
    sa, sb = _swizzle(ca).to(DEV), _swizzle(cb).to(DEV)
    got = torch.nn.functional.scaled_mm(
        a.to(DEV),
        b.to(DEV),
        sa,
        ScalingType.BlockWise1x32,
        sb,
        ScalingType.BlockWise1x32,
        swizzle_a=SwizzleType.SWIZZLE_32_4_4,
        swizzle_b=SwizzleType.SWIZZLE_32_4_4,
        output_dtype=torch.float32,
    ).cpu()
    torch.testing.assert_close(got.double(), _ref64(a, b, ca, cb), rtol=1e-5, atol=1e-2)
    v1 = torch._scaled_mm(a.to(DEV), b.to(DEV), sa, sb, out_dtype=torch.float32).cpu()
    assert torch.equal(got, v1)
    _no_fallback()


@pytest.mark.parametrize("recipe", ["tensorwise", "rowwise"])
def test_scaled_mm_v2_tensorwise_rowwise_vs_cpu(recipe):
    m, k, n = 33, 64, 48
    a, b = _operands(m, k, n, torch.float8_e4m3fn, torch.float8_e4m3fn)
    if recipe == "tensorwise":
        sa, sb, r = torch.tensor([0.5]), torch.tensor([1.5]), ScalingType.TensorWise
    else:
        sa, sb, r = torch.rand(m, 1) + 0.5, torch.rand(1, n) + 0.5, ScalingType.RowWise

    def run(dev):
        return torch.nn.functional.scaled_mm(
            a.to(dev), b.to(dev), sa.to(dev), r, sb.to(dev), r, output_dtype=torch.bfloat16
        ).cpu()

    want = run("cpu")
    torch_neuronx.clear_op_tracking()
    got = run(DEV)
    torch.testing.assert_close(got, want, rtol=1.6e-2, atol=1e-2)
    _no_fallback()


def _call_v1(a, b, sa, sb, **kw):
    return torch._scaled_mm(a.to(DEV), b.to(DEV), sa.to(DEV), sb.to(DEV), **kw)


def test_mx_refusals():
    m, k, n = 32, 64, 16
    a, b = _operands(m, k, n, torch.float8_e4m3fn, torch.float8_e4m3fn)
    sa, sb = _swizzle(_scales(m, 2)), _swizzle(_scales(n, 2))
    with pytest.raises(ValueError, match="scale_a should have 512 elements"):
        _call_v1(a, b, sa[:256], sb, out_dtype=torch.bfloat16)
    with pytest.raises(ValueError, match="both scales in float8_e8m0fnu"):
        _call_v1(a, b, sa, torch.ones(1), out_dtype=torch.bfloat16)
    with pytest.raises(NotImplementedError, match="float8_e4m3fn or float8_e5m2"):
        _call_v1(a.float().to(torch.float8_e4m3fnuz), b, sa, sb, out_dtype=torch.bfloat16)
    with pytest.raises(ValueError, match="contiguous"):
        big = torch.stack([sa.view(torch.uint8), sa.view(torch.uint8)], 1).view(
            torch.float8_e8m0fnu
        )
        _call_v1(a, b, big.to(DEV)[:, 0], sb, out_dtype=torch.bfloat16)
    with pytest.raises(ValueError, match="SWIZZLE_32_4_4"):
        torch.nn.functional.scaled_mm(
            a.to(DEV),
            b.to(DEV),
            sa.to(DEV),
            ScalingType.BlockWise1x32,
            sb.to(DEV),
            ScalingType.BlockWise1x32,
            swizzle_a=SwizzleType.NO_SWIZZLE,
            swizzle_b=SwizzleType.NO_SWIZZLE,
            output_dtype=torch.bfloat16,
        )
    _no_fallback()
