"""torch._grouped_mm, torch._scaled_mm and torch._scaled_grouped_mm on neuron
(libtrn grouped_mm.c / scaled_mm.c) against PyTorch CPU's implementations
and a float64 reference: every layout, empty groups, transposed operands,
gradients, scales, bias, and proof that nothing fell back to the CPU."""

import pytest
import torch

import torch_neuronx

DEV = "neuron"
TOL = {torch.float32: dict(rtol=1e-4, atol=1e-4), torch.bfloat16: dict(rtol=1.6e-2, atol=1e-2)}


@pytest.fixture(autouse=True)
def _clear():
    torch_neuronx.clear_op_tracking()
    torch.manual_seed(0)


def _no_fallback():
    assert torch_neuronx.get_fallback_ops() == []


def _ref64(a, b, offs, layout):
    """float64 grouped product, one group at a time."""
    a, b = a.double(), b.double()
    if layout == "3d3d":
        return a @ b
    ends = offs.tolist()
    starts = [0] + ends[:-1]
    if layout == "2d3d":
        out = torch.zeros(a.shape[0], b.shape[-1], dtype=torch.float64)
        for g, (s, e) in enumerate(zip(starts, ends)):
            out[s:e] = a[s:e] @ b[g]
    elif layout == "3d2d":
        out = torch.zeros(a.shape[1], b.shape[-1], dtype=torch.float64)
        for g, (s, e) in enumerate(zip(starts, ends)):
            out[:, s:e] = a[g] @ b[:, s:e]
    else:  # 2d2d
        out = torch.zeros(len(ends), a.shape[0], b.shape[-1], dtype=torch.float64)
        for g, (s, e) in enumerate(zip(starts, ends)):
            out[g] = a[:, s:e] @ b[s:e]
    return out


def _operands(layout, dtype, counts, m=24, n=40, k=32):
    G = len(counts)
    offs = torch.tensor(counts, dtype=torch.int32).cumsum(0).to(torch.int32)
    total = int(offs[-1])
    if layout == "2d3d":
        a, b = torch.randn(total, k), torch.randn(G, k, n)
    elif layout == "3d3d":
        a, b, offs = torch.randn(G, m, k), torch.randn(G, k, n), None
    elif layout == "3d2d":
        a, b = torch.randn(G, m, k), torch.randn(k, total)
    else:
        a, b = torch.randn(m, total), torch.randn(total, n)
    return a.to(dtype), b.to(dtype), offs


LAYOUTS = ["2d3d", "3d3d", "3d2d", "2d2d"]
# Totals are multiples of 8: PyTorch CPU wants 16-byte strides (neuron does not).
COUNTS = [[5, 0, 17, 2], [64, 3, 1030, 7], [0, 0, 8, 0]]


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("counts", COUNTS, ids=["small", "pieces", "empties"])
def test_grouped_mm_vs_cpu_and_f64(dtype, layout, counts):
    a, b, offs = _operands(layout, dtype, counts)
    want = torch._grouped_mm(a, b, offs)
    got = torch._grouped_mm(a.to(DEV), b.to(DEV), None if offs is None else offs.to(DEV)).cpu()
    assert got.dtype == dtype and got.shape == want.shape
    ref = _ref64(a, b, offs, layout)
    torch.testing.assert_close(got.double(), ref, **TOL[dtype])
    torch.testing.assert_close(got, want, **TOL[dtype])
    _no_fallback()


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
def test_grouped_mm_transposed_weights(dtype):
    # MoE weights stored (G, n, k) and used as w.transpose(-2, -1).
    x = torch.randn(50, 32).to(dtype)
    w = torch.randn(4, 24, 32).to(dtype)
    offs = torch.tensor([10, 10, 33, 50], dtype=torch.int32)
    want = torch._grouped_mm(x, w.transpose(-2, -1), offs)
    got = torch._grouped_mm(x.to(DEV), w.to(DEV).transpose(-2, -1), offs.to(DEV)).cpu()
    torch.testing.assert_close(got, want, **TOL[dtype])
    _no_fallback()


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
@pytest.mark.parametrize("layout", LAYOUTS)
def test_grouped_mm_backward(dtype, layout):
    a, b, offs = _operands(layout, dtype, [6, 0, 11, 7])
    weight = torch.randn(torch._grouped_mm(a, b, offs).shape).to(dtype)
    grads = []
    for dev in ("cpu", DEV):
        ad = a.to(dev).detach().requires_grad_()
        bd = b.to(dev).detach().requires_grad_()
        od = None if offs is None else offs.to(dev)
        y = torch._grouped_mm(ad, bd, od)
        (y.float() * weight.to(dev).float()).sum().backward()
        grads.append((ad.grad.cpu(), bd.grad.cpu()))
    tol = dict(rtol=1e-4, atol=1e-4) if dtype == torch.float32 else TOL[dtype]
    torch.testing.assert_close(grads[1][0], grads[0][0], **tol)
    torch.testing.assert_close(grads[1][1], grads[0][1], **tol)
    _no_fallback()


def test_grouped_mm_changing_counts_need_no_sync():
    x = torch.randn(64, 16).to(DEV)
    w = torch.randn(3, 16, 8).to(DEV)
    for counts in ([64, 0, 0], [1, 2, 61], [20, 20, 24]):
        offs = torch.tensor(counts, dtype=torch.int32).cumsum(0).to(torch.int32)
        got = torch._grouped_mm(x, w, offs.to(DEV)).cpu()
        torch.testing.assert_close(
            got.double(), _ref64(x.cpu(), w.cpu(), offs, "2d3d"), rtol=1e-5, atol=1e-5
        )
    _no_fallback()


def test_grouped_mm_errors():
    x = torch.randn(8, 4, device=DEV)
    w = torch.randn(2, 4, 3, device=DEV)
    with pytest.raises(RuntimeError, match="int32"):
        torch._grouped_mm(x, w, torch.tensor([4, 8], device=DEV))
    with pytest.raises(RuntimeError, match="output dtype must match"):
        torch._grouped_mm(
            x, w, torch.tensor([4, 8], dtype=torch.int32, device=DEV), out_dtype=torch.bfloat16
        )
    with pytest.raises(RuntimeError, match="Bias not supported"):
        torch._grouped_mm(
            x,
            w,
            torch.tensor([4, 8], dtype=torch.int32, device=DEV),
            bias=torch.zeros(2, 3, device=DEV),
        )


# ---- _scaled_mm -----------------------------------------------------------------


def _fp8_pair(m, k, n, da=torch.float8_e4m3fn, db=torch.float8_e4m3fn):
    a = (torch.randn(m, k) * 4).to(da)
    b = (torch.randn(n, k) * 4).to(db).t()  # column-major, as cuBLAS wants
    return a, b


@pytest.mark.parametrize("out_dtype", [torch.bfloat16, torch.float32], ids=str)
@pytest.mark.parametrize("scaling", ["tensorwise", "rowwise"])
@pytest.mark.parametrize("with_bias", [False, True])
@pytest.mark.parametrize("fast", [False, True])
def test_scaled_mm_vs_cpu_and_f64(out_dtype, scaling, with_bias, fast):
    m, k, n = 33, 64, 48
    a, b = _fp8_pair(m, k, n)
    if scaling == "tensorwise":
        sa, sb = torch.tensor(0.37), torch.tensor(1.9)
    else:
        sa, sb = torch.rand(m, 1) + 0.5, torch.rand(1, n) + 0.5
    bias = (torch.randn(n) * 3).to(out_dtype) if with_bias else None
    want = torch._scaled_mm(a, b, sa, sb, bias=bias, out_dtype=out_dtype, use_fast_accum=fast)
    got = torch._scaled_mm(
        a.to(DEV),
        b.to(DEV),
        sa.to(DEV),
        sb.to(DEV),
        bias=None if bias is None else bias.to(DEV),
        out_dtype=out_dtype,
        use_fast_accum=fast,
    ).cpu()
    assert got.dtype == out_dtype
    ref = (a.double() @ b.double()) * sa.double() * sb.double()
    if bias is not None:
        ref = ref + bias.double()
    tol = TOL[out_dtype] if out_dtype == torch.bfloat16 else dict(rtol=1e-5, atol=1e-4)
    torch.testing.assert_close(got.double(), ref, **tol)
    torch.testing.assert_close(got, want, **tol)
    _no_fallback()


@pytest.mark.parametrize(
    "da,db",
    [
        (torch.float8_e4m3fn, torch.float8_e5m2),
        (torch.float8_e5m2, torch.float8_e4m3fn),
        (torch.float8_e4m3fnuz, torch.float8_e4m3fnuz),
        (torch.float8_e5m2fnuz, torch.float8_e5m2fnuz),
    ],
    ids=str,
)
def test_scaled_mm_formats_and_fp8_output(da, db):
    a, b = _fp8_pair(16, 32, 24, da, db)
    s = torch.tensor(0.25)
    got = torch._scaled_mm(
        a.to(DEV), b.to(DEV), s.to(DEV), s.to(DEV), out_dtype=torch.float32
    ).cpu()
    ref = (a.double() @ b.double()) * 0.0625
    torch.testing.assert_close(got.double(), ref, rtol=1e-6, atol=1e-6)
    if da == db:  # float8 output (the OpInfo samples' default)
        want = torch._scaled_mm(a, b, s, s)
        got8 = torch._scaled_mm(a.to(DEV), b.to(DEV), s.to(DEV), s.to(DEV)).cpu()
        assert got8.dtype == da
        assert torch.equal(got8.view(torch.uint8), want.view(torch.uint8))
    _no_fallback()


def test_scaled_grouped_mm_vs_f64():
    # PyTorch CPU has no _scaled_grouped_mm: float64 reference only.
    counts = [7, 0, 20, 5]
    G, k, n = len(counts), 32, 16
    offs = torch.tensor(counts).cumsum(0).to(torch.int32)
    m = int(offs[-1])
    a = (torch.randn(m, k) * 3).to(torch.float8_e4m3fn)
    b = (torch.randn(G, n, k) * 3).to(torch.float8_e4m3fn).transpose(-2, -1)
    sa, sb = torch.rand(m) + 0.5, torch.rand(G, n) + 0.5
    got = torch._scaled_grouped_mm(
        a.to(DEV), b.to(DEV), sa.to(DEV), sb.to(DEV), offs=offs.to(DEV), out_dtype=torch.float32
    ).cpu()
    ref = _ref64(a.double(), b.double(), offs, "2d3d")
    gid = torch.repeat_interleave(torch.arange(G), torch.tensor(counts))
    ref = ref * sa.double()[:, None] * sb.double()[gid]
    torch.testing.assert_close(got.double(), ref, rtol=1e-5, atol=1e-4)
    _no_fallback()
