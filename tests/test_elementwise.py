"""Elementwise ops beyond the OpInfo samples: layouts, promotion, scalars,
in-place / out=, integer division by zero, float64 policy, large tensors
(split across threads), and that none of it falls back to the CPU."""

import pytest
import torch

import torch_neuronx


def no_fallback():
    return torch_neuronx.get_fallback_ops() == []


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_unary_float_ops_non_contiguous(dtype):
    x = torch.randn(64, 33, dtype=torch.float32).to(dtype)
    xt = x.t()  # non-contiguous
    dx = xt.to("neuron")
    for fn in [
        torch.exp,
        torch.log1p,
        torch.tanh,
        torch.sigmoid,
        torch.sin,
        torch.erf,
        torch.nn.functional.gelu,
        torch.nn.functional.silu,
        torch.abs,
        torch.neg,
    ]:
        arg = xt.abs() if fn is torch.log1p else xt
        darg = dx.abs() if fn is torch.log1p else dx
        torch.testing.assert_close(fn(darg).cpu(), fn(arg))
    assert no_fallback(), torch_neuronx.get_fallback_ops()


def test_broadcast_promotion_and_scalars():
    a = torch.arange(12, dtype=torch.int32).reshape(3, 4)
    b = torch.linspace(-1, 1, 4)
    da, db = a.to("neuron"), b.to("neuron")
    torch_neuronx.clear_op_tracking()
    r = da * db + 2.5
    assert r.dtype == torch.float32
    torch.testing.assert_close(r.cpu(), a * b + 2.5)
    assert (da + 1).dtype == torch.int32
    assert (da / 2).dtype == torch.float32
    torch.testing.assert_close((da // -5).cpu(), a // -5)
    torch.testing.assert_close((da % -5).cpu(), a % -5)
    torch.testing.assert_close(torch.where(da > 5, da, -da).cpu(), torch.where(a > 5, a, -a))
    assert no_fallback(), torch_neuronx.get_fallback_ops()


def test_inplace_and_out():
    x = torch.randn(5, 6)
    dx = x.to("neuron")
    dx.mul_(3).add_(1, alpha=2).clamp_(-1, 1)
    torch.testing.assert_close(dx.cpu(), x.mul(3).add(1, alpha=2).clamp(-1, 1))
    out = torch.empty(0, device="neuron")
    torch.exp(dx, out=out)  # resized by PyTorch's rules
    assert out.shape == (5, 6)
    torch.testing.assert_close(out.cpu(), x.mul(3).add(1, alpha=2).clamp(-1, 1).exp())
    col = dx[:, 1]  # a strided view written in place
    col.mul_(0)
    assert dx.cpu()[:, 1].abs().sum() == 0


def test_zero_size_and_zero_dim():
    e = torch.empty(0, 3, device="neuron")
    assert torch.exp(e).shape == (0, 3)
    s = torch.tensor(2.0, device="neuron")
    assert (s * 3).item() == 6.0
    assert torch.pow(s, 10).item() == 1024.0


def test_integer_division_by_zero_raises():
    a = torch.tensor([1, 2], device="neuron")
    b = torch.tensor([1, 0], device="neuron")
    with pytest.raises(RuntimeError, match="ZeroDivisionError"):
        torch.div(a, b, rounding_mode="floor")
    # The device still works afterwards.
    assert torch.div(a, a, rounding_mode="trunc").tolist() == [1, 1]
    # Float division by zero is IEEE, as on CPU.
    assert torch.isinf(torch.tensor([1.0], device="neuron") / 0).item()


def test_large_tensor_split_across_threads():
    x = torch.randn(3_000_001)
    dx = x.to("neuron")
    torch.testing.assert_close((dx * 2 + 1).cpu(), x * 2 + 1)
    torch.testing.assert_close(torch.exp(dx).cpu(), torch.exp(x))


def test_unsupported_dtype_falls_back_correctly():
    z = torch.randn(4, dtype=torch.complex64)
    dz = z.to("neuron")
    torch.testing.assert_close((dz * dz).cpu(), z * z)
    assert (
        "aten::mul.Tensor" in torch_neuronx.get_fallback_ops()
        or "aten::mul" in torch_neuronx.get_fallback_ops()
    )


FLOAT64_CHECK = """
import warnings, torch, torch_neuronx
x = torch.tensor([1.0 + 1e-12, 2.0], dtype=torch.float64)
with warnings.catch_warnings(record=True) as w:
    warnings.simplefilter("always")
    y = (x.to("neuron") * 3).cpu()
    (x.to("neuron") + 1).cpu()
print(y.dtype, repr(y[0].item()), sum("float64" in str(m.message) for m in w))
"""


def test_float64_computed_in_float32_by_default(python):
    r = python(FLOAT64_CHECK)
    assert r.returncode == 0, r.stderr
    dtype, value, warnings = r.stdout.split()
    assert dtype == "torch.float64"
    assert float(value) == 3.0  # float32 precision: the 1e-12 is gone
    assert int(warnings) == 1  # warned once


def test_float64_native_with_env(python):
    r = python(FLOAT64_CHECK, env={"TORCH_NEURONX_NATIVE_FLOAT64": "1"})
    assert r.returncode == 0, r.stderr
    dtype, value, warnings = r.stdout.split()
    assert float(value) == 3.0 * (1.0 + 1e-12)
    assert int(warnings) == 0


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_add_sub_alpha_16bit_bitwise_cpu(dtype):
    # ATen's CPU add rounds alpha to the 16-bit type and computes a + alpha * b
    # fused in its vector body but rounds alpha * b first in each inner run's
    # scalar tail (and everywhere when the inner dim is strided). Sizes cover
    # short runs, tails, the thread split (>= 32768) and broadcast rows.
    gen = torch.Generator().manual_seed(0)
    cases = []
    for n in (5, 100, 1000, 1047, 70001):  # 1000 % 64 >= 32: tails are len % 32
        cases.append((torch.randn(n, generator=gen), torch.randn(n, generator=gen)))
    cases.append(
        (torch.randn(37, 300, generator=gen), torch.randn(300, generator=gen))
    )  # b broadcast rows
    cases.append(
        (torch.randn(300, generator=gen), torch.randn(37, 300, generator=gen))
    )  # a broadcast rows
    cases.append(
        (torch.randn(200, 3, generator=gen), torch.randn(200, 3, generator=gen)[:, :1])
    )  # strided
    base = torch.randn(90, 70, generator=gen)
    cases.append((base.t(), torch.randn(70, 90, generator=gen)))  # non-contiguous inner dim
    for a, b in cases:
        a, b = a.to(dtype), b.to(dtype)
        for alpha in (2.7, -0.3, 1.0, -1.0):  # +-1: no re-rounding, one path
            for op in (torch.add, torch.sub):
                want = op(a, b, alpha=alpha)
                got = op(a.to("neuron"), b.to("neuron"), alpha=alpha).cpu()
                assert torch.equal(got.view(torch.int16), want.view(torch.int16)), (
                    op,
                    a.shape,
                    b.shape,
                )
            if a.shape == b.shape and a.is_contiguous():  # the list kernel: same split
                want = torch._foreach_add([a, b], [b, a], alpha=alpha)
                got = torch._foreach_add(
                    [a.to("neuron"), b.to("neuron")], [b.to("neuron"), a.to("neuron")], alpha=alpha
                )
                for w, g in zip(want, got):
                    assert torch.equal(g.cpu().view(torch.int16), w.view(torch.int16))
            # scalar operand, in place
            want = a.clone().add_(0.3, alpha=alpha)
            got = a.to("neuron").add_(0.3, alpha=alpha).cpu()
            assert torch.equal(got.view(torch.int16), want.view(torch.int16))


def test_bfloat16_neg_sign_flip_matches_float_path():
    """bfloat16 neg with contiguous rows flips the sign bit (and quiets a NaN)
    without staging through float: over every bit pattern it gives the bits
    of the staged float path (taken here through a strided output, and what
    fused groups compute), which is CPU's -x except for signalling NaNs."""
    x = torch.arange(-32768, 32768, dtype=torch.int32).to(torch.int16).view(torch.bfloat16)
    xn = x.to("neuron")
    fast = (-xn).cpu().view(torch.int16)
    staged = torch.empty(2 * x.numel(), dtype=torch.bfloat16, device="neuron")
    torch.neg(xn, out=staged[::2])
    assert torch.equal(fast, staged[::2].cpu().view(torch.int16))
    half = xn.view(256, 256)[:, 128:]  # a RoPE half: rows of 128, row stride 256
    assert torch.equal((-half).cpu().view(torch.int16), fast.view(256, 256)[:, 128:])
    cpu = (-x).view(torch.int16)
    signalling = ((x.view(torch.int16) & 0x7FFF) > 0x7F80) & ((x.view(torch.int16) & 0x40) == 0)
    assert torch.equal(fast[~signalling], cpu[~signalling])
    assert no_fallback()


PACKED_ROWS_CHECK = """
import torch, torch_neuronx
dtype = getattr(torch, "DTYPE")
torch.set_num_threads(THREADS)
g = torch.Generator().manual_seed(0)
q = torch.randn(8, 64, 4, 64, generator=g, dtype=dtype).transpose(1, 2)
cos = torch.randn(1, 1, 64, 64, generator=g, dtype=dtype)
odd = torch.randn(301, 3, 7, generator=g, dtype=dtype)  # rows of 5, 2107 of them
# 9999 rows of 7: two threads split the range inside a row
wide = torch.randn(9999, 13, generator=g, dtype=dtype)
long = wide[:, 3:10]
qn, cn, on = q.to("neuron"), cos.to("neuron"), odd.to("neuron")


def same(got, want):
    assert got.dtype == want.dtype and got.shape == want.shape
    assert torch.equal(got.cpu(), want), (got.cpu() - want).abs().max()


same(-qn[..., 32:], -q[..., 32:])
same(qn * cn, q * cos)
same(qn[..., 32:] * cn[0, 0, 0, :32], q[..., 32:] * cos[0, 0, 0, :32])  # one row for all rows
same(qn[..., 32:] + cn[..., :32], q[..., 32:] + cos[..., :32])
same(qn[..., :32] - qn[..., 32:], q[..., :32] - q[..., 32:])
same(qn[..., 32:] > 0.1, q[..., 32:] > 0.1)
same(-on[..., 1:6], -odd[..., 1:6])
same(on[:, 1:, 2:] * on[:, :2, :5], odd[:, 1:, 2:] * odd[:, :2, :5])
ln = wide.to("neuron")[:, 3:10]
same(-ln, -long)
same(ln * ln.flip(0), long * long.flip(0))
# strided output rows (out=), and in place on a strided slice
buf_n = torch.zeros(8, 4, 64, 64, dtype=dtype, device="neuron")
buf = torch.zeros(8, 4, 64, 64, dtype=dtype)
torch.neg(qn[..., 32:], out=buf_n[..., :32])
torch.neg(q[..., 32:], out=buf[..., :32])
same(buf_n, buf)
ip_n, ip = qn.clone(), q.clone()
ip_n[..., 32:].mul_(ip_n[..., :32])
ip[..., 32:].mul_(ip[..., :32])
same(ip_n, ip)
# transcendental ops keep their bits however the rows are grouped
x, y = qn[..., 16:48], qn[..., :32]
assert torch.equal(torch.atan2(x, y).cpu(), torch.atan2(x.contiguous(), y.contiguous()).cpu())
gelu = torch.nn.functional.gelu
assert torch.equal(gelu(x).cpu(), gelu(x.contiguous()).cpu())
assert torch_neuronx.get_fallback_ops() == [], torch_neuronx.get_fallback_ops()
print("ok")
"""


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("threads", ["1", "2"])
def test_short_strided_rows_packed(python, dtype, threads):
    """Short rows of strided operands (a RoPE half of a transposed [.., 64])
    run in groups packed back to back (elementwise.c, `packed`): every layout
    of that path gives CPU's result bit for bit - strided and contiguous
    inputs mixed, a strided output, in place, a bool output, odd row lengths
    and group remainders, two threads splitting the range mid-group. float64
    natively (the packed path takes float32 and native float64 rows)."""
    code = PACKED_ROWS_CHECK.replace("DTYPE", dtype).replace("THREADS", threads)
    r = python(code, env={"TORCH_NEURONX_NATIVE_FLOAT64": "1"})
    assert r.returncode == 0 and r.stdout.strip() == "ok", r.stderr
