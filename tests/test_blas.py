"""Matrix products and convolution on neuron (libtrn matmul/conv kernels via
oneDNN) against PyTorch CPU: layouts, alpha/beta, broadcasting, dtypes,
gradients, and proof that nothing fell back to the CPU."""

import os
import subprocess
import sys

import pytest
import torch
import torch.nn.functional as F

import torch_neuronx
from _thread_counts import outputs_at_thread_counts

DEV = "neuron"


def _no_fallback():
    assert torch_neuronx.get_fallback_ops() == []


@pytest.fixture(autouse=True)
def _clear():
    torch_neuronx.clear_op_tracking()
    torch.manual_seed(0)


def _close(got, want, dtype=torch.float32):
    tol = {
        torch.float32: (1e-4, 1e-5),
        torch.bfloat16: (2e-2, 2e-2),
        torch.float16: (2e-3, 2e-3),
        torch.float64: (1e-10, 1e-10),
    }.get(dtype, (0, 0))
    torch.testing.assert_close(got.cpu(), want, rtol=tol[0], atol=tol[1], equal_nan=True)


@pytest.mark.parametrize("ta,tb", [(False, False), (True, False), (False, True), (True, True)])
def test_mm_transposed_views(ta, tb):
    a = torch.randn(37, 29) if not ta else torch.randn(29, 37).t()
    b = torch.randn(29, 41) if not tb else torch.randn(41, 29).t()
    got = torch.mm(
        a.to(DEV) if not ta else a.t().contiguous().to(DEV).t(),
        b.to(DEV) if not tb else b.t().contiguous().to(DEV).t(),
    )
    _close(got, a @ b)
    _no_fallback()


def test_mm_non_contiguous_slices_and_out():
    ad, bd = torch.randn(40, 60).to(DEV), torch.randn(60, 30).to(DEV)
    a, b = ad.cpu()[::2, ::3], bd.cpu()[::3, 1::2]
    out = torch.empty(20, 15, device=DEV)
    torch.mm(ad[::2, ::3], bd[::3, 1::2], out=out)
    _close(out, a @ b)
    _no_fallback()


def test_bmm_and_baddbmm():
    a, b, c = torch.randn(4, 5, 6), torch.randn(4, 6, 7), torch.randn(4, 5, 7)
    _close(torch.bmm(a.to(DEV), b.to(DEV)), torch.bmm(a, b))
    _close(
        torch.baddbmm(c.to(DEV), a.to(DEV), b.to(DEV), beta=0.5, alpha=2),
        torch.baddbmm(c, a, b, beta=0.5, alpha=2),
    )
    _close(
        torch.bmm(a.transpose(1, 2).contiguous().to(DEV).transpose(1, 2), b.to(DEV)),
        torch.bmm(a, b),
    )
    _no_fallback()


@pytest.mark.parametrize("beta,alpha", [(1, 1), (0.5, 2), (0, 1), (0, -3)])
def test_addmm_alpha_beta(beta, alpha):
    s, a, b = torch.randn(6, 8), torch.randn(6, 5), torch.randn(5, 8)
    if beta == 0:
        s[0, 0] = float("nan")  # must not propagate
    _close(
        torch.addmm(s.to(DEV), a.to(DEV), b.to(DEV), beta=beta, alpha=alpha),
        torch.addmm(s, a, b, beta=beta, alpha=alpha),
    )
    bias = torch.randn(8)  # broadcast self
    _close(
        torch.addmm(bias.to(DEV), a.to(DEV), b.to(DEV), beta=beta, alpha=alpha),
        torch.addmm(bias, a, b, beta=beta, alpha=alpha),
    )
    sd = s.to(DEV)
    sd.addmm_(a.to(DEV), b.to(DEV), beta=beta, alpha=alpha)
    _close(sd, s.clone().addmm_(a, b, beta=beta, alpha=alpha))
    _no_fallback()


@pytest.mark.parametrize("m,k,n", [(600, 64, 70), (200, 96, 260)])
def test_addmm_bias_row(m, k, n):
    # nn.Linear's addmm(bias, x, W^T): the bias row goes to the kernel (added
    # by oneDNN for float32 with alpha 1, pieces split by rows, then by
    # columns; broadcast into C first otherwise), not copied into out.
    x, w, bias = torch.randn(m, k), torch.randn(n, k), torch.randn(n)
    xd, wd, bd = x.to(DEV), w.to(DEV), bias.to(DEV)
    _close(torch.addmm(bd, xd, wd.t()), torch.addmm(bias, x, w.t()))
    _close(torch.addmm(bd, xd, wd.t(), alpha=0.5), torch.addmm(bias, x, w.t(), alpha=0.5))
    _close(torch.addmm(bd[::1], xd, wd.t(), beta=2), torch.addmm(bias, x, w.t(), beta=2))
    wide = torch.randn(2 * n)  # a strided row
    _close(torch.addmm(wide.to(DEV)[::2], xd, wd.t()), torch.addmm(wide[::2], x, w.t()))
    out = torch.full((m, n), float("nan"), device=DEV)  # out= is written, not read
    torch.addmm(bd, xd, wd.t(), out=out)
    _close(out, torch.addmm(bias, x, w.t()))
    store = torch.randn(m * n + n)  # self inside out's storage: copied, as before
    sd = store.to(DEV)
    got = torch.addmm(sd[:n], xd, wd.t(), out=sd[n:].view(m, n))
    _close(got, torch.addmm(store[:n], x, w.t()))
    xg, wg, bg = (t.clone().requires_grad_() for t in (xd, wd, bd))
    F.linear(xg, wg, bg).square().sum().backward()
    xc, wc, bc = (t.clone().requires_grad_() for t in (x, w, bias))
    F.linear(xc, wc, bc).square().sum().backward()
    for g, c in ((xg, xc), (wg, wc), (bg, bc)):
        torch.testing.assert_close(g.grad.cpu(), c.grad, rtol=1e-4, atol=1e-3)
    _no_fallback()


def test_addbmm_addmv_mv_dot():
    s, b1, b2 = torch.randn(5, 7), torch.randn(3, 5, 4), torch.randn(3, 4, 7)
    torch.testing.assert_close(
        torch.addbmm(s.to(DEV), b1.to(DEV), b2.to(DEV), beta=2, alpha=0.5).cpu(),
        torch.addbmm(s, b1, b2, beta=2, alpha=0.5),
        rtol=1e-4,
        atol=1e-4,
    )
    m, v, y = torch.randn(6, 9), torch.randn(9), torch.randn(6)
    _close(torch.mv(m.to(DEV), v.to(DEV)), torch.mv(m, v))
    _close(
        torch.mv(m.t().contiguous().to(DEV).t()[:, :6], v[:6].to(DEV)), torch.mv(m[:, :6], v[:6])
    )
    _close(
        torch.addmv(y.to(DEV), m.to(DEV), v.to(DEV), beta=0.5, alpha=2),
        torch.addmv(y, m, v, beta=0.5, alpha=2),
    )
    x = torch.randn(20)
    _close(torch.dot(x.to(DEV), x.to(DEV)), torch.dot(x, x))
    _close(torch.vdot(x.to(DEV)[::2], x.to(DEV)[1::2]), torch.vdot(x[::2], x[1::2]))
    _no_fallback()


@pytest.mark.parametrize(
    "sa,sb",
    [
        ((7,), (7,)),
        ((3, 7), (7,)),
        ((7,), (7, 4)),
        ((2, 3, 7), (7, 4)),
        ((2, 3, 7), (2, 7, 4)),
        ((2, 1, 3, 7), (5, 7, 4)),
        ((7,), (2, 7, 4)),
    ],
)
def test_matmul_broadcasting(sa, sb):
    a, b = torch.randn(sa), torch.randn(sb)
    _close(torch.matmul(a.to(DEV), b.to(DEV)), torch.matmul(a, b))
    _no_fallback()


def test_linear():
    x, w, bias = torch.randn(4, 5, 16), torch.randn(8, 16), torch.randn(8)
    _close(F.linear(x.to(DEV), w.to(DEV), bias.to(DEV)), F.linear(x, w, bias))
    _close(F.linear(x.to(DEV), w.to(DEV)), F.linear(x, w))
    _no_fallback()


@pytest.mark.parametrize("n,k", [(768, 256), (17, 33), (5, 300), (1, 7), (40, 16)])
def test_linear_few_rows_same_bits_as_contiguous_weight(n, k):
    # Up to 8 rows by nn.Linear's (transposed) weight, the float32 tiles
    # transpose the weight block by block in registers instead of packing it;
    # each element is still summed the same way (k in blocks of 32 terms,
    # each a multiply-add chain, added in order), so the bits equal the
    # product with the weight made contiguous (the tile path below 2^19
    # multiply-adds), and the values match CPU.
    x, w = torch.randn(8, k), torch.randn(n, k)
    x[0, 3] = float("inf")
    xd, wd = x.to(DEV), w.to(DEV)
    wt = wd.t().contiguous()
    for m in [m for m in range(1, 9) if m * n * k < 2**19]:
        got = F.linear(xd[:m], wd).cpu()
        assert torch.equal(got.nan_to_num(), torch.mm(xd[:m], wt).cpu().nan_to_num())
        _close(got, F.linear(x[:m], w))
    _no_fallback()


@pytest.mark.parametrize("n,k", [(2048, 300), (1029, 1024), (4100, 130)])
def test_linear_few_rows_past_tile_size_same_bits_as_weight_slices(n, k):
    # Past 2^19 multiply-adds, up to 8 rows by nn.Linear's weight still take
    # the register-transposed tiles (split over the pool by column strips;
    # until session 34 up to 4 rows, 5-8 ran oneDNN's other sums),
    # not oneDNN: each output column is summed as the tiles sum it (k blocks
    # of multiply-add chains, added in order), so it equals the product with a
    # slice of the weight's rows small enough for the tiles, bit for bit,
    # bias included.
    x, w, bias = torch.randn(8, k), torch.randn(n, k), torch.randn(n)
    x[1, 5] = float("inf")
    xd, wd, bd = x.to(DEV), w.to(DEV), bias.to(DEV)
    step = 16 * max(1, (2**19 // (8 * k)) // 16)
    for m in range(1, 9):
        assert m * n * k >= 2**19
        got, got_b = F.linear(xd[:m], wd).cpu(), F.linear(xd[:m], wd, bd).cpu()
        for j in range(0, n, step):
            part = F.linear(xd[:m], wd[j : j + step]).cpu()
            assert torch.equal(got[:, j : j + step].nan_to_num(), part.nan_to_num())
            part_b = F.linear(xd[:m], wd[j : j + step], bd[j : j + step]).cpu()
            assert torch.equal(got_b[:, j : j + step].nan_to_num(), part_b.nan_to_num())
        # Long chains: no worse than CPU against a float64 reference.
        ref = F.linear(x[:m].double(), w.double(), bias.double())
        fin = ref.isfinite()
        err = (got_b.double() - ref)[fin].abs().max()
        assert err <= 1.5 * (F.linear(x[:m], w, bias).double() - ref)[fin].abs().max() + 1e-30
        assert torch.equal(got_b.isfinite(), fin)
    _no_fallback()


def test_linear_few_rows_past_tile_size_same_bits_at_any_thread_count():
    code = (
        "import hashlib, torch, torch.nn.functional as F, torch_neuronx\n"
        "torch.manual_seed(0)\n"
        "x, w = torch.randn(3, 1024).to('neuron'), torch.randn(1040, 1024).to('neuron')\n"
        "for m in (1, 3):\n"
        "    y = F.linear(x[:m], w).cpu()\n"
        "    print(hashlib.sha256(y.numpy().tobytes()).hexdigest())\n"
    )
    assert len(outputs_at_thread_counts(code)) == 1


def test_kblocked_split_same_bits_at_any_thread_count():
    # A float32 product with k past one k block is cut over the pool into row
    # pieces of C even where C is wider than tall (512 x 1024 nn with a bias,
    # GPT-2's MLP; 256 x 768 tn, a weight gradient), into column pieces where
    # row pieces would be thin (96 x 3000); each element's k blocks do not
    # depend on the pieces, so the bits are those of one thread. At two
    # threads and more a row piece's C is summed in groups of 128 rows
    # where C is 768 wide or more (512 x 768 nn: 256 at one thread), kept
    # even-sized (300 x 4096: no thin last group, which takes another of
    # oneDNN's kernels).
    code = (
        "import hashlib, torch, torch_neuronx\n"
        "g = torch.Generator().manual_seed(0)\n"
        "h = hashlib.sha256()\n"
        "for m, n, k in ((512, 1024, 256), (256, 768, 512), (96, 3000, 300), (512, 768, 256),\n"
        "                (300, 4096, 384)):\n"
        "    x, w = torch.randn(m, k, generator=g), torch.randn(k, n, generator=g)\n"
        "    b, xt = torch.randn(n, generator=g), torch.randn(k, m, generator=g)\n"
        "    xd, wd, bd, xtd = (t.to('neuron') for t in (x, w, b, xt))\n"
        "    wtd = torch.randn(n, k, generator=g).to('neuron')\n"
        "    for y in (torch.addmm(bd, xd, wd), torch.mm(xtd.t(), wd), torch.mm(xd, wtd.t())):\n"
        "        h.update(y.cpu().numpy().tobytes())\n"
        "print(h.hexdigest())\n"
    )
    assert len(outputs_at_thread_counts(code)) == 1


def test_transposed_b_copy_same_bits_at_any_thread_count():
    # x @ W^T (nn.Linear's weight) past one k block runs on a row-major copy
    # of B, which the row pieces of a split product then read (Llama's
    # 544 x 256 and 256 x 544 weights, 768 x 256, 1024 x 256; 300 and 256
    # rows: uneven pieces and the copy's row floor). The bits are those of one
    # thread and of the same product on a contiguous B, with or without a
    # bias. Session 35 tried a copy per piece (not landed); this pins the
    # bits any such change must keep.
    code = (
        "import hashlib, torch, torch.nn.functional as F, torch_neuronx\n"
        "g = torch.Generator().manual_seed(0)\n"
        "h = hashlib.sha256()\n"
        "for m, n, k in ((512, 544, 256), (512, 256, 544), (300, 768, 256), (256, 128, 256),\n"
        "                (512, 1024, 256)):\n"
        "    x, w = torch.randn(m, k, generator=g), torch.randn(n, k, generator=g)\n"
        "    b = torch.randn(n, generator=g)\n"
        "    xd, wd, bd = x.to('neuron'), w.to('neuron'), b.to('neuron')\n"
        "    wtd = w.t().contiguous().to('neuron')\n"
        "    for y, ref in ((torch.mm(xd, wd.t()), torch.mm(xd, wtd)),\n"
        "                   (F.linear(xd, wd, bd), torch.addmm(bd, xd, wtd))):\n"
        "        y, ref = y.cpu(), ref.cpu()\n"
        "        assert torch.equal(y, ref), (m, n, k)\n"
        "        h.update(y.numpy().tobytes())\n"
        "print(h.hexdigest())\n"
    )
    assert len(outputs_at_thread_counts(code)) == 1


@pytest.mark.parametrize("m,n,k", [(300, 200, 300), (96, 3000, 300)])
@pytest.mark.parametrize("ta,tb", [(False, False), (False, True), (True, False)])
def test_kblocked_first_block_into_strided_nan_out(ta, tb, m, n, k):
    # A float32 product past one k block runs every k block as dnnl_sgemm:
    # the first with beta 0 (out='s NaNs are never read) or, with a bias row,
    # on C filled with the bias (beta 1), row by row at C's own row stride
    # (96 x 3000 splits into column pieces at two threads: a piece's rows are
    # narrower than C's); addmm's beta 1 on a full matrix adds C as it is.
    a = torch.randn(k, m).t() if ta else torch.randn(m, k)
    b = torch.randn(n, k).t() if tb else torch.randn(k, n)
    bias, full = torch.randn(n), torch.randn(m, n)
    a[3, 5] = float("inf")
    ad, bd = a.t().contiguous().to(DEV).t() if ta else a.to(DEV), b.to(DEV)
    if tb:
        bd = b.t().contiguous().to(DEV).t()
    for with_bias in (False, True):
        wide = torch.full((m, 2 * n), float("nan"), device=DEV)
        out = wide[:, :n]
        if with_bias:
            torch.addmm(bias.to(DEV), ad, bd, out=out)
            want = torch.addmm(bias, a, b)
        else:
            torch.mm(ad, bd, out=out)
            want = a @ b
        torch.testing.assert_close(out.cpu(), want, rtol=1e-4, atol=1e-4, equal_nan=True)
        assert torch.isnan(wide[:, n:].cpu()).all()
        contiguous = torch.full((m, n), float("nan"), device=DEV)
        torch.addmm(bias.to(DEV), ad, bd, out=contiguous) if with_bias else torch.mm(
            ad, bd, out=contiguous
        )
        assert torch.equal(out.cpu().nan_to_num(), contiguous.cpu().nan_to_num())
    got = torch.addmm(full.to(DEV), ad, bd).cpu()
    torch.testing.assert_close(got, torch.addmm(full, a, b), rtol=1e-4, atol=1e-4, equal_nan=True)
    _no_fallback()


@pytest.mark.parametrize("m,n,k", [(512, 256, 1024), (256, 1024, 300), (300, 257, 768)])
def test_linear_weight_copy_same_bits_as_contiguous_weight(m, n, k):
    # From 256 rows and k past one k block (128), a float32 product by a
    # transposed weight runs on a row-major copy of it (rows padded where n is
    # a multiple of 256); oneDNN sums both layouts the same way, so the bits
    # equal the product with the weight made contiguous, bias (addmm) included,
    # and the error against float64 is no worse than CPU's.
    x, w, bias = torch.randn(m, k), torch.randn(n, k), torch.randn(n)
    xd, wd, bd = x.to(DEV), w.to(DEV), bias.to(DEV)
    wt = wd.t().contiguous()
    got = F.linear(xd, wd).cpu()
    assert torch.equal(got, torch.mm(xd, wt).cpu())
    got_b = F.linear(xd, wd, bd).cpu()
    assert torch.equal(got_b, torch.addmm(bd, xd, wt).cpu())
    ref = F.linear(x.double(), w.double(), bias.double())
    cpu_err = (F.linear(x, w, bias).double() - ref).abs().max()
    assert (got_b.double() - ref).abs().max() <= 1.5 * cpu_err
    _no_fallback()


@pytest.mark.parametrize("k,n", [(64, 1000), (33, 1500), (256, 200), (7, 17), (300, 1)])
def test_mm_few_rows_same_bits_as_more_rows(k, n):
    # Up to 4 rows, the float32 tiles stream B row by row into accumulators
    # in L1 (a decode step's product); each element is still summed the same
    # way (k blocks of multiply-add chains), so a row's bits do not depend on how many rows the
    # product has (8 rows take the register tiles; all below 2^19 multiply-adds).
    x, w, bias = torch.randn(8, k), torch.randn(k, n), torch.randn(n)
    x[1, 2] = float("inf")
    xd, wd, bd = x.to(DEV), w.to(DEV), bias.to(DEV)
    full = torch.mm(xd, wd).cpu()
    full_bias = torch.addmm(bd, xd, wd).cpu()
    for m in range(1, 5):
        got = torch.mm(xd[:m], wd).cpu()
        assert torch.equal(got.nan_to_num(), full[:m].nan_to_num())
        assert torch.equal(
            torch.addmm(bd, xd[:m], wd).cpu().nan_to_num(), full_bias[:m].nan_to_num()
        )
        _close(got, x[:m] @ w)
    _no_fallback()


@pytest.mark.parametrize(
    "dtype", [torch.bfloat16, torch.float16, torch.float64, torch.int64, torch.int32, torch.uint8]
)
def test_dtypes(dtype):
    if dtype.is_floating_point:
        a, b, c = (
            torch.randn(9, 13).to(dtype),
            torch.randn(13, 6).to(dtype),
            torch.randn(9, 6).to(dtype),
        )
    else:
        a, b, c = (
            torch.randint(-5 if dtype != torch.uint8 else 0, 5, s).to(dtype)
            for s in [(9, 13), (13, 6), (9, 6)]
        )
    _close(torch.mm(a.to(DEV), b.to(DEV)), torch.mm(a, b), dtype)
    _close(
        torch.addmm(c.to(DEV), a.to(DEV), b.to(DEV), beta=2, alpha=3),
        torch.addmm(c, a, b, beta=2, alpha=3),
        dtype,
    )
    _close(torch.bmm(a[None].to(DEV), b[None].to(DEV)), torch.bmm(a[None], b[None]), dtype)
    _no_fallback()


def test_zero_size():
    a, b = torch.randn(0, 4), torch.randn(4, 3)
    assert torch.mm(a.to(DEV), b.to(DEV)).shape == (0, 3)
    a, b = torch.randn(3, 0), torch.randn(0, 4)
    _close(torch.mm(a.to(DEV), b.to(DEV)), torch.zeros(3, 4))
    s = torch.randn(3, 4)
    _close(torch.addmm(s.to(DEV), a.to(DEV), b.to(DEV), beta=2), torch.addmm(s, a, b, beta=2))
    _no_fallback()


def test_errors_match_cpu():
    a, b = torch.randn(2, 3), torch.randn(4, 5)
    with pytest.raises(RuntimeError, match="cannot be multiplied"):
        torch.mm(a.to(DEV), b.to(DEV))
    with pytest.raises(RuntimeError, match="dtype"):
        torch.mm(a.to(DEV), torch.randn(3, 2, dtype=torch.float64).to(DEV))
    with pytest.raises(RuntimeError):
        torch.bmm(a.to(DEV), a.to(DEV))
    with pytest.raises(RuntimeError, match="same dtype"):
        torch.dot(torch.ones(3, device=DEV), torch.ones(3, device=DEV, dtype=torch.float64))
    with pytest.raises(RuntimeError):
        F.conv2d(
            torch.randn(1, 2, 5, 5, device=DEV),
            torch.randn(3, 2, 3, 3, device=DEV, dtype=torch.float64),
        )


def _same_outcome(fn):
    """fn(device) on the CPU and on neuron: the same values, or the same error."""
    out = {}
    for d in ("cpu", DEV):
        try:
            out[d] = fn(d).cpu()
        except RuntimeError as e:
            out[d] = str(e).splitlines()[0]
    if isinstance(out["cpu"], str):
        assert out[DEV] == out["cpu"]
    else:
        _close(out[DEV], out["cpu"])


def test_inplace_add_forms_check_as_cpu():
    # addmm_, baddbmm_ and addmv_ run the structured meta function with self
    # as the output (PyTorch's in-place checks, not the op on meta tensors):
    # results and errors must be CPU's.
    a, b, v = torch.randn(3, 4), torch.randn(4, 5), torch.randn(4)
    a3, b3 = a.expand(2, 3, 4), b.expand(2, 4, 5)
    cases = [
        lambda d: torch.ones(3, 5, device=d).addmm_(a.to(d), b.to(d), beta=0.5, alpha=2),
        lambda d: torch.ones(1, 5, device=d).addmm_(a.to(d), b.to(d)),  # would broadcast
        lambda d: torch.ones(3, 6, device=d).addmm_(a.to(d), b.to(d)),
        lambda d: torch.ones(3, 5, device=d, dtype=torch.float64).addmm_(a.to(d), b.to(d)),
        lambda d: torch.ones(3, device=d).addmv_(a.to(d), v.to(d), beta=2),
        lambda d: torch.ones(1, device=d).addmv_(a.to(d), v.to(d)),
        lambda d: torch.ones(2, 3, 5, device=d).baddbmm_(a3.to(d), b3.to(d), alpha=0.5),
        lambda d: torch.ones(1, 3, 5, device=d).baddbmm_(a3.to(d), b3.to(d)),
        lambda d: torch.ones(3, 5, device=d).addbmm_(a3.to(d), b3.to(d)),
        lambda d: torch.ones(3, 5, device=d, dtype=torch.int64).addmm_(
            a.long().to(d), b.long().to(d)
        ),
    ]
    for fn in cases:
        _same_outcome(fn)
    _no_fallback()


CONV_CASES = [
    (F.conv1d, (2, 4, 17), (6, 2, 3), dict(stride=2, padding=1, dilation=2, groups=2)),
    (F.conv1d, (3, 3, 8), (5, 3, 1), dict()),
    (F.conv2d, (2, 3, 9, 8), (5, 3, 3, 2), dict(stride=(1, 2), padding=(1, 0))),
    (F.conv2d, (2, 8, 7, 7), (8, 1, 3, 3), dict(padding=2, dilation=2, groups=8)),  # depthwise
    (F.conv2d, (1, 4, 6, 6), (6, 2, 3, 3), dict(stride=2, groups=2)),
    (F.conv3d, (1, 2, 5, 4, 6), (3, 2, 2, 3, 2), dict(padding=1)),
    (
        F.conv3d,
        (2, 4, 4, 5, 5),
        (4, 2, 3, 1, 2),
        dict(stride=(2, 1, 1), dilation=(1, 1, 2), groups=2),
    ),
]


@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("fn,xs,ws,kw", CONV_CASES)
def test_conv_forward_and_gradients(fn, xs, ws, kw, bias):
    _check_conv(fn, xs, ws, kw, bias, 1e-5)


# Convolutions of >= 2 M multiply-adds run as pieces over libtrn's pool
# (oneDNN single-threaded per piece): along the batch, or along channels
# with an uneven last piece (24 output channels: 16 + 8; one image: output
# channels forward, input channels for the input gradient).
CONV_SPLIT_CASES = [
    (F.conv2d, (4, 16, 20, 20), (24, 16, 3, 3), dict(padding=1)),
    (F.conv2d, (1, 16, 40, 40), (40, 16, 3, 3), dict(padding=1)),
    (F.conv2d, (1, 40, 30, 30), (16, 40, 3, 3), dict()),
]


@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("fn,xs,ws,kw", CONV_SPLIT_CASES)
def test_conv_split_forward_and_gradients(fn, xs, ws, kw, bias):
    # Sums of 144-360 products: float32 rounding differs by ~1e-5 absolute.
    _check_conv(fn, xs, ws, kw, bias, 1e-4)


def test_conv_split_strided_operands():
    # Pieces address the caller's strides: channels-last input and gradient.
    x, w, b = torch.randn(4, 16, 20, 20), torch.randn(24, 16, 3, 3), torch.randn(24)
    xd = x.to(DEV).to(memory_format=torch.channels_last).requires_grad_()
    wd, bd = w.to(DEV).requires_grad_(), b.to(DEV).requires_grad_()
    xc, wc, bc = (t.clone().requires_grad_() for t in (x, w, b))
    y, yd = F.conv2d(xc, wc, bc, padding=1), F.conv2d(xd, wd, bd, padding=1)
    torch.testing.assert_close(yd.cpu(), y, rtol=1e-4, atol=1e-4)
    g = torch.randn_like(y)
    gd = torch.autograd.grad(yd, (xd, wd, bd), g.to(DEV).to(memory_format=torch.channels_last))
    for a, d in zip(torch.autograd.grad(y, (xc, wc, bc), g), gd):
        torch.testing.assert_close(d.cpu(), a, rtol=1e-4, atol=1e-4)
    _no_fallback()


# 2-d convolutions with channel counts that are multiples of 16 compute on
# nChw16c; libtrn moves bfloat16 NCHW operands whose planes are dense (any
# batch / channel strides) to and from it with its own transposes
# (conv_layout.h), other layouts (channels-last) and float32 through
# oneDNN's reorders. Both are copies
# into the same kernel: the two paths agree in every bit. Planes of 35
# pixels (two 16-pixel tiles and a tail) and of 1 pixel, a channel slice
# (batch stride of 48 channels), the 3-channel stem (blocked output only),
# and convolutions split into pieces.
LAYOUT_CASES = [
    ((3, 48, 7, 5), slice(8, 40), (16, 32, 3, 3), dict(padding=1)),
    ((2, 32, 1, 1), slice(0, 32), (32, 32, 1, 1), dict()),
    ((2, 16, 9, 9), slice(0, 16), (32, 16, 3, 3), dict(stride=2, padding=1)),
    ((4, 3, 8, 8), slice(0, 3), (16, 3, 3, 3), dict(padding=1)),
    # Large enough to run as pieces on the pool (with 2+ threads): along the
    # batch, and for one image along channels (40 = 16 + 16 + 8: the
    # 8-channel piece stays with oneDNN's layouts).
    ((4, 32, 20, 20), slice(0, 32), (48, 32, 3, 3), dict(padding=1)),
    ((1, 40, 24, 24), slice(0, 40), (32, 40, 3, 3), dict(padding=1)),
]


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("xs,cs,ws,kw", LAYOUT_CASES)
def test_conv_blocked_layout_moves_match_reorders(xs, cs, ws, kw, dtype):
    gen = torch.Generator().manual_seed(0)
    big = torch.randn(xs, generator=gen).to(dtype)
    w = torch.randn(ws, generator=gen).to(dtype)
    g = torch.randn(F.conv2d(big[:, cs].float(), w.float(), **kw).shape, generator=gen).to(dtype)
    outs = []
    for channels_last in (False, True):
        x = big.to(DEV)[:, cs]
        gd = g.to(DEV)
        if channels_last:
            x = x.contiguous(memory_format=torch.channels_last)
            gd = gd.contiguous(memory_format=torch.channels_last)
        x.requires_grad_()
        wd = w.to(DEV).requires_grad_()
        y = F.conv2d(x, wd, **kw)
        outs.append([t.cpu() for t in (y, *torch.autograd.grad(y, (x, wd), gd))])
    for a, b in zip(*outs):
        assert torch.equal(a, b)
    ref = F.conv2d(big[:, cs].double(), w.double(), **kw)
    tol = 1e-4 if dtype == torch.float32 else 5e-2
    torch.testing.assert_close(outs[0][0].double(), ref, rtol=tol, atol=tol)
    _no_fallback()


# convolution_backward with both gradients wanted is one libtrn launch
# (trn_conv_backward_launch): where both convolutions compute on nChw16c
# (bfloat16, channels a multiple of 16) the output gradient is moved there
# once for the two. Same kernels on the same bits: the gradients equal those
# of the input-gradient and weight-gradient launches run apart, for
# ResNet's shapes, an output gradient that is a channel slice (a longer
# batch stride) or channels-last (no shared move), one image (input-gradient
# pieces along channels) and convolutions large enough to run as pieces.
BACKWARD_CASES = [
    ((4, 32, 16, 16), (32, 32, 3, 3), dict(padding=1)),
    ((4, 32, 16, 16), (64, 32, 3, 3), dict(stride=2, padding=1)),
    ((4, 32, 16, 16), (64, 32, 1, 1), dict(stride=2)),
    ((3, 16, 7, 5), (48, 16, 3, 3), dict(padding=2, dilation=2)),
    ((1, 48, 9, 7), (32, 48, 3, 3), dict(padding=1)),
    ((6, 64, 20, 20), (48, 64, 3, 3), dict(padding=1)),
    ((4, 3, 8, 8), (16, 3, 3, 3), dict(padding=1)),
]


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("grad_layout", ["dense", "slice", "channels_last"])
@pytest.mark.parametrize("xs,ws,kw", BACKWARD_CASES)
def test_conv_backward_in_one_launch_matches_two(xs, ws, kw, grad_layout, dtype):
    gen = torch.Generator().manual_seed(1)
    x = torch.randn(xs, generator=gen).to(dtype)
    w = torch.randn(ws, generator=gen).to(dtype)
    ys = F.conv2d(x[:1].float(), w.float(), **kw).shape[1:]
    g = torch.randn((xs[0], ys[0] + 16, *ys[1:]), generator=gen).to(dtype)
    gd = g.to(DEV)
    gd = gd[:, 16:] if grad_layout == "slice" else gd[:, : ys[0]].contiguous()
    if grad_layout == "channels_last":
        gd = gd.contiguous(memory_format=torch.channels_last)
    xd, wd = x.to(DEV), w.to(DEV)
    geo = (kw.get("stride", 1),) * 2, (kw.get("padding", 0),) * 2, (kw.get("dilation", 1),) * 2
    args = (gd, xd, wd, [ws[0]], *geo, False, [0, 0], 1)
    both = torch.ops.aten.convolution_backward(*args, [True, True, True])
    gi = torch.ops.aten.convolution_backward(*args, [True, False, False])[0]
    gw, gb = torch.ops.aten.convolution_backward(*args, [False, True, True])[1:]
    for a, b in zip(both, (gi, gw, gb)):
        assert torch.equal(a.cpu(), b.cpu())
    ref = torch.ops.aten.convolution_backward(
        gd.cpu().double(), x.double(), w.double(), [ws[0]], *geo, False, [0, 0], 1, [True] * 3
    )
    tol = 1e-4 if dtype == torch.float32 else 5e-2
    for a, r in zip(both, ref):
        torch.testing.assert_close(a.cpu().double(), r, rtol=tol, atol=tol * r.abs().max().item())
    _no_fallback()


def conv_backward_hash_code(cases, layout, seed, dtype, input_grad):
    """A script printing the sha256 of each convolution_backward gradient of
    `cases` ((input, weight, kwargs, bias[, channels_last]) in `dtype`, the
    output gradient dense or a channel slice), for outputs_at_thread_counts."""
    return (
        "import hashlib, torch, torch_neuronx\n"
        f"cases, layout = {cases!r}, {layout!r}\n"
        f"gen = torch.Generator().manual_seed({seed})\n"
        "for xs, ws, kw, bias, *cl in cases:\n"
        f"    x = torch.randn(xs, generator=gen).{dtype}()\n"
        f"    w = torch.randn(ws, generator=gen).{dtype}()\n"
        "    y = torch.nn.functional.conv2d(x.float(), w.float(), **kw)\n"
        "    g = torch.randn((y.shape[0], y.shape[1] + 16, *y.shape[2:]), generator=gen)\n"
        f"    gd = g.{dtype}().to('neuron')\n"
        "    gd = gd[:, 16:] if layout == 'slice' else gd[:, :y.shape[1]].contiguous()\n"
        "    xd = x.to('neuron')\n"
        "    if cl and cl[0]:\n"
        "        xd = xd.to(memory_format=torch.channels_last)\n"
        "    s, p = kw.get('stride', 1), kw.get('padding', 0)\n"
        "    r = torch.ops.aten.convolution_backward(gd, xd, w.to('neuron'),\n"
        "        [ws[0]] if bias else None, [s, s], [p, p], [1, 1], False, [0, 0], 1,\n"
        f"        [{input_grad}, True, bias])\n"
        "    for t in r:\n"
        "        if t is not None:\n"
        "            print(hashlib.sha256(t.float().cpu().numpy().tobytes()).hexdigest())\n"
    )


WGRAD_BLOCK_CASES = [
    # (input, weight, kwargs, bias): float32 weight gradients reduced in batch
    # blocks (about 1024 terms each), spread over the pool by block.
    ((8, 32, 16, 16), (32, 32, 3, 3), dict(padding=1), False),  # ResNet stage 1: 2 blocks
    ((8, 3, 32, 32), (32, 3, 3, 3), dict(padding=1), False),  # stem: one image a block
    ((7, 16, 20, 20), (32, 16, 3, 3), dict(padding=1), True),  # short last block, bias
    ((8, 32, 16, 16), (64, 32, 3, 3), dict(stride=2, padding=1), False),
]


@pytest.mark.parametrize("grad_layout", ["dense", "slice"])
def test_conv_weight_gradient_blocks_same_bits_at_any_thread_count(grad_layout):
    # The blocks run on any thread, each into its own buffer, and are added
    # in block order: the one-thread bits at every pool size.
    code = conv_backward_hash_code(WGRAD_BLOCK_CASES, grad_layout, 3, "float", "False")
    assert len(outputs_at_thread_counts(code)) == 1
    # And the blocks' sums are a float32 weight gradient (float64 reference).
    gen = torch.Generator().manual_seed(3)
    for xs, ws, kw, bias in WGRAD_BLOCK_CASES:
        x, w = torch.randn(xs, generator=gen), torch.randn(ws, generator=gen)
        y = F.conv2d(x, w, **kw)
        g = torch.randn((y.shape[0], y.shape[1] + 16, *y.shape[2:]), generator=gen)
        gd = g.to(DEV)
        gd = gd[:, 16:] if grad_layout == "slice" else gd[:, : y.shape[1]].contiguous()
        gc = g[:, 16:] if grad_layout == "slice" else g[:, : y.shape[1]]
        geo = (kw.get("stride", 1),) * 2, (kw.get("padding", 0),) * 2, (1, 1)
        mask = [False, True, bias]
        b = [ws[0]] if bias else None
        got = torch.ops.aten.convolution_backward(
            gd, x.to(DEV), w.to(DEV), b, *geo, False, [0, 0], 1, mask
        )
        ref = torch.ops.aten.convolution_backward(
            gc.double(), x.double(), w.double(), b, *geo, False, [0, 0], 1, mask
        )
        for a, r in zip(got[1:], ref[1:]):
            if r is not None:
                torch.testing.assert_close(
                    a.cpu().double(), r, rtol=1e-4, atol=1e-4 * r.abs().max().item()
                )
    _no_fallback()


BF16_WGRAD_HALF_CASES = [
    # (input, weight, kwargs, bias, channels_last): native bfloat16 weight
    # gradients in two batch halves (float32 partial sums, rounded once).
    ((8, 32, 16, 16), (32, 32, 3, 3), dict(padding=1), False, False),  # ResNet stage 1
    ((5, 32, 24, 24), (32, 32, 3, 3), dict(padding=1), True, False),  # odd batch, bias
    ((16, 32, 16, 16), (64, 32, 3, 3), dict(stride=2, padding=1), False, True),
    ((32, 32, 16, 16), (64, 32, 1, 1), dict(stride=2), False, False),  # downsample
]


@pytest.mark.parametrize("grad_layout", ["dense", "slice"])
def test_bf16_conv_weight_gradient_halves_same_bits_and_error(grad_layout):
    # The halves are fixed by the shape: the same bits at every pool size.
    code = conv_backward_hash_code(BF16_WGRAD_HALF_CASES, grad_layout, 4, "bfloat16", "True")
    assert len(outputs_at_thread_counts(code)) == 1
    # Each gradient's error vs float64 at most PyTorch CPU's (both round once
    # to bfloat16 from float32 sums) plus a bfloat16 unit of slack.
    gen = torch.Generator().manual_seed(4)
    for xs, ws, kw, bias, cl in BF16_WGRAD_HALF_CASES:
        x = torch.randn(xs, generator=gen).bfloat16()
        w = torch.randn(ws, generator=gen).bfloat16()
        y = F.conv2d(x.float(), w.float(), **kw)
        g = torch.randn((y.shape[0], y.shape[1] + 16, *y.shape[2:]), generator=gen).bfloat16()
        gd = g.to(DEV)
        gd = gd[:, 16:] if grad_layout == "slice" else gd[:, : y.shape[1]].contiguous()
        gc = g[:, 16:] if grad_layout == "slice" else g[:, : y.shape[1]]
        xd = x.to(DEV)
        if cl:
            xd = xd.to(memory_format=torch.channels_last)
        geo = (kw.get("stride", 1),) * 2, (kw.get("padding", 0),) * 2, (1, 1)
        mask = [True, True, bias]
        b = [ws[0]] if bias else None
        got = torch.ops.aten.convolution_backward(
            gd, xd, w.to(DEV), b, *geo, False, [0, 0], 1, mask
        )
        cpu = torch.ops.aten.convolution_backward(gc, x, w, b, *geo, False, [0, 0], 1, mask)
        ref = torch.ops.aten.convolution_backward(
            gc.double(), x.double(), w.double(), b, *geo, False, [0, 0], 1, mask
        )
        for a, c, r in zip(got, cpu, ref):
            if r is None:
                continue
            assert a.dtype == torch.bfloat16
            scale = r.abs().max().item()
            err_dev = (a.cpu().double() - r).abs().max().item()
            err_cpu = (c.double() - r).abs().max().item()
            assert err_dev <= err_cpu + 2**-8 * scale, (xs, ws, err_dev, err_cpu, scale)
    _no_fallback()


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_conv_backward_one_launch_switch_keeps_bits(monkeypatch, dtype):
    """TORCH_NEURONX_CONV_BACKWARD_ONE_LAUNCH=0 (read per call) runs the two
    launches; autograd's gradients through two ResNet convolutions are the
    same bits either way."""
    gen = torch.Generator().manual_seed(2)
    x = torch.randn(4, 32, 8, 8, generator=gen).to(dtype)
    ws = [torch.randn(32, 32, 3, 3, generator=gen).to(dtype) for _ in range(2)]
    grads = []
    for flag in ("1", "0"):
        monkeypatch.setenv("TORCH_NEURONX_CONV_BACKWARD_ONE_LAUNCH", flag)
        leaves = [t.to(DEV).requires_grad_() for t in (x, *ws)]
        y = F.conv2d(F.relu(F.conv2d(leaves[0], leaves[1], padding=1)), leaves[2], padding=1)
        grads.append([g.cpu() for g in torch.autograd.grad(y.square().sum(), leaves)])
    for a, b in zip(*grads):
        assert torch.equal(a, b)
    _no_fallback()


def _check_conv(fn, xs, ws, kw, bias, atol):
    x, w = torch.randn(xs, requires_grad=True), torch.randn(ws, requires_grad=True)
    b = torch.randn(ws[0], requires_grad=True) if bias else None
    leaves = [t for t in (x, w, b) if t is not None]
    dev = [t.detach().to(DEV).requires_grad_() for t in leaves]
    y = fn(x, w, b, **kw)
    yd = fn(dev[0], dev[1], dev[2] if bias else None, **kw)
    torch.testing.assert_close(yd.cpu(), y, rtol=1e-4, atol=atol)
    g = torch.randn_like(y)
    gc = torch.autograd.grad(y, leaves, g)
    gd = torch.autograd.grad(yd, dev, g.to(DEV))
    for a, d in zip(gc, gd):
        torch.testing.assert_close(d.cpu(), a, rtol=1e-4, atol=1e-4)
    _no_fallback()


def test_conv_channels_last_and_bf16():
    x, w, b = torch.randn(2, 16, 10, 10), torch.randn(8, 16, 3, 3), torch.randn(8)
    xd = x.to(DEV).to(memory_format=torch.channels_last)
    y = F.conv2d(xd, w.to(DEV), b.to(DEV), padding=1)
    assert y.is_contiguous(memory_format=torch.channels_last)
    _close(y, F.conv2d(x, w, b, padding=1))
    xb, wb, bb = x.bfloat16(), w.bfloat16(), b.bfloat16()
    _close(
        F.conv2d(xb.to(DEV), wb.to(DEV), bb.to(DEV), padding=1),
        F.conv2d(xb, wb, bb, padding=1).float().bfloat16(),
        torch.bfloat16,
    )
    _no_fallback()


def test_conv_transposed_is_native():
    # Native since ops7a (tests/test_nn_layers.py has the full coverage);
    # float64 (no oneDNN f64 convolution) still runs on the CPU, correctly.
    x, w, b = torch.randn(2, 3, 5, 5), torch.randn(3, 4, 3, 3), torch.randn(4)
    got = F.conv_transpose2d(x.to(DEV), w.to(DEV), b.to(DEV), stride=2, output_padding=1)
    _close(got, F.conv_transpose2d(x, w, b, stride=2, output_padding=1))
    _no_fallback()
    xd, wd, bd = x.double(), w.double(), b.double()
    got = F.conv_transpose2d(xd.to(DEV), wd.to(DEV), bd.to(DEV), stride=2, output_padding=1)
    _close(got, F.conv_transpose2d(xd, wd, bd, stride=2, output_padding=1), torch.float64)
    assert torch_neuronx.get_fallback_ops() == ["aten::convolution_overrideable"]


def _cpu_has_avx512_bf16():
    try:
        with open("/proc/cpuinfo") as f:
            return any("avx512_bf16" in line.split() for line in f if line.startswith("flags"))
    except OSError:
        return False


@pytest.fixture(params=[True, False], ids=["bf16-native", "bf16-staged"])
def bf16_path(request):
    """Runs a test on each bfloat16 matmul path: native (where the CPU has
    AVX512-BF16; elsewhere both params take the staging path) and float32
    staging."""
    C = torch_neuronx._C
    C._set_matmul_bf16_native(request.param)
    try:
        yield request.param
    finally:
        torch.neuron.synchronize()
        C._set_matmul_bf16_native(None)


def test_bf16_native_follows_cpu_and_switch(bf16_path):
    assert torch_neuronx._C._matmul_bf16_native() == (bf16_path and _cpu_has_avx512_bf16())


@pytest.mark.parametrize("env", ["native", "float32", "auto", "bogus", None])
def test_bf16_default_path_follows_env(env):
    """TORCH_NEURONX_BF16_KERNELS picks the default path (a fresh process:
    it is read once); 'auto' and unknown values measure the core (True
    only where the CPU has AVX512-BF16), and a forced path is restored to
    that default by None."""
    code = (
        "import torch, torch_neuronx; C = torch_neuronx._C\n"
        "d = C._matmul_bf16_native(); C._set_matmul_bf16_native(False)\n"
        "assert not C._matmul_bf16_native(); C._set_matmul_bf16_native(None)\n"
        "assert C._matmul_bf16_native() == d; print(int(d))\n"
    )
    env_vars = {k: v for k, v in os.environ.items() if k != "TORCH_NEURONX_BF16_KERNELS"}
    if env is not None:
        env_vars["TORCH_NEURONX_BF16_KERNELS"] = env
    out = subprocess.run(
        [sys.executable, "-c", code], env=env_vars, capture_output=True, text=True, timeout=300
    )
    assert out.returncode == 0, out.stderr[-2000:]
    native = out.stdout.strip().splitlines()[-1] == "1"
    if not _cpu_has_avx512_bf16() or env == "float32":
        assert not native
    elif env == "native":
        assert native
    if env == "bogus":
        assert "TORCH_NEURONX_BF16_KERNELS='bogus'" in out.stderr


def _ints(*shape):
    # Small integers: every float32 partial sum of these products is exact,
    # so a correct kernel's bfloat16 result is one rounding of the exact
    # value, bit for bit, whatever its summation order.
    return torch.randint(-4, 5, shape).to(torch.bfloat16)


@pytest.mark.parametrize("ta,tb", [(False, False), (True, False), (False, True), (True, True)])
def test_bf16_mm_rounds_once(bf16_path, ta, tb):
    a = _ints(200, 96).t() if ta else _ints(96, 200)
    b = _ints(130, 200).t() if tb else _ints(200, 130)
    got = torch.mm(a.to(DEV), b.to(DEV))
    assert torch.equal(got.cpu(), (a.double() @ b.double()).to(torch.bfloat16))
    _no_fallback()


def test_bf16_addmm_linear_bmm_round_once(bf16_path):
    x, w, bias = _ints(8, 64, 96), _ints(160, 96), _ints(160)
    want = (x.double() @ w.double().t() + bias.double()).to(torch.bfloat16)
    assert torch.equal(F.linear(x.to(DEV), w.to(DEV), bias.to(DEV)).cpu(), want)
    c, m1, m2 = _ints(100, 70), _ints(100, 300), _ints(70, 300).t()
    got = torch.addmm(c.to(DEV), m1.to(DEV), m2.to(DEV), beta=2, alpha=0.5)
    want = (2 * c.double() + 0.5 * (m1.double() @ m2.double())).to(torch.bfloat16)
    assert torch.equal(got.cpu(), want)
    q, k = _ints(6, 64, 48), _ints(6, 80, 48)
    got = torch.bmm(q.to(DEV), k.to(DEV).transpose(1, 2))
    assert torch.equal(got.cpu(), (q.double() @ k.double().transpose(1, 2)).to(torch.bfloat16))
    s = _ints(6, 64, 80)
    got = torch.baddbmm(s.to(DEV), q.to(DEV), k.to(DEV).transpose(1, 2), beta=-1, alpha=2)
    want = (2 * (q.double() @ k.double().transpose(1, 2)) - s.double()).to(torch.bfloat16)
    assert torch.equal(got.cpu(), want)
    _no_fallback()


# bfloat16 convolutions follow the same switch (native where the CPU has
# AVX512-BF16, else float32 staging): forward, input, weight and bias
# gradients on small integers, bit for bit the exact value rounded once.
# Includes pieces over the pool (batch and channel splits), channels-last
# and a transposed convolution (its forward is conv.c's backward data).
BF16_CONV_CASES = [
    (F.conv2d, (2, 8, 9, 10), (12, 4, 3, 3), dict(stride=2, padding=1, groups=2), False),
    (F.conv2d, (4, 16, 20, 20), (24, 16, 3, 3), dict(padding=1), True),
    (F.conv2d, (1, 16, 40, 40), (40, 16, 3, 3), dict(padding=1), False),
    (F.conv1d, (3, 6, 17), (4, 6, 3), dict(dilation=2), False),
    (F.conv3d, (2, 4, 5, 4, 6), (6, 4, 2, 3, 2), dict(padding=1), False),
    (F.conv_transpose2d, (2, 8, 6, 7), (8, 6, 3, 3), dict(stride=2, output_padding=1), False),
]


@pytest.mark.parametrize("fn,xs,ws,kw,channels_last", BF16_CONV_CASES)
def test_bf16_conv_rounds_once(bf16_path, fn, xs, ws, kw, channels_last):
    x, w = _ints(*xs), _ints(*ws)
    b = _ints(ws[1] if fn is F.conv_transpose2d else ws[0])
    ref_in = [t.double().requires_grad_() for t in (x, w, b)]
    ref = fn(*ref_in, **kw)
    g = _ints(*ref.shape)
    ref_grads = torch.autograd.grad(ref, ref_in, g.double())
    xd = x.to(DEV)
    if channels_last:
        xd = xd.to(memory_format=torch.channels_last)
    dev_in = [t.requires_grad_() for t in (xd, w.to(DEV), b.to(DEV))]
    got = fn(*dev_in, **kw)
    got_grads = torch.autograd.grad(got, dev_in, g.to(DEV))
    for r, d in zip((ref,) + ref_grads, (got,) + got_grads):
        assert d.dtype == torch.bfloat16
        assert torch.equal(d.detach().cpu(), r.detach().to(torch.bfloat16))
    _no_fallback()


def test_bf16_matmul_matches_cpu(bf16_path):
    # Real-valued operands: within one bfloat16 rounding of PyTorch CPU's
    # (both sum in float32), including the gradients of a linear layer.
    x = torch.randn(64, 96).bfloat16().requires_grad_()
    w = torch.randn(192, 96).bfloat16().requires_grad_()
    xd = x.detach().to(DEV).requires_grad_()
    wd = w.detach().to(DEV).requires_grad_()
    F.linear(x, w).square().sum().backward()
    F.linear(xd, wd).square().sum().backward()
    torch.testing.assert_close(F.linear(xd, wd).cpu(), F.linear(x, w), rtol=8e-3, atol=1e-2)
    torch.testing.assert_close(xd.grad.cpu(), x.grad, rtol=2e-2, atol=5e-1)
    torch.testing.assert_close(wd.grad.cpu(), w.grad, rtol=2e-2, atol=5e-1)
    _no_fallback()


def test_missing_onednn_is_a_clear_error_never_zeros(python):
    """Issue 26 item 3: with oneDNN unloadable, a 256x256 mm and a Conv2d
    returned all zeros (the kernel's delayed error was taken by the copy as
    "copy not supported", which then copied the unwritten buffer). Now the
    error names the library and how to install it, and nothing falls back."""
    r = python(
        """
        import torch, torch_neuronx
        a = torch.randn(256, 256, device="neuron")
        conv = torch.nn.Conv2d(3, 8, 3).to("neuron")
        x = torch.randn(2, 3, 16, 16, device="neuron")
        for name, f in (("mm", lambda: a @ a), ("conv", lambda: conv(x))):
            try:
                y = f().cpu()
                print(name, "returned", float(y.abs().max()))
            except RuntimeError as e:
                print(name, type(e).__name__, "|", str(e).splitlines()[0])
        print("fallbacks", torch_neuronx.get_fallback_ops())
    """,
        env={"TORCH_NEURONX_DNNL_LIBRARY": "/nonexistent/libdnnl.so.2"},
    )
    assert r.returncode == 0, r.stderr[-2000:]
    lines = r.stdout.splitlines()
    for name in ("mm", "conv"):
        line = next(x for x in lines if x.startswith(name + " "))
        assert "returned" not in line and "NotImplementedError" not in line, line
        assert "cannot load oneDNN" in line and "apt-get install libdnnl2" in line, line
        assert "/nonexistent/libdnnl.so.2" in line, line
    assert "aten::_copy_from" not in r.stdout.splitlines()[-1], r.stdout


# float16: oneDNN 2.6 has no float16 matmul or convolution for the CPU, so
# libtrn runs the float32 kernels on float32 copies of the operands, each in
# its own dim order (transposed, broadcast, channels-last, sliced), and
# rounds the results once: on small integers the exact value rounded once,
# bit for bit (every partial sum is exact in float32).
def _ints16(*shape):
    return torch.randint(-4, 5, shape).to(torch.float16)


@pytest.mark.parametrize("ta,tb", [(False, False), (True, False), (False, True), (True, True)])
def test_f16_mm_rounds_once(ta, tb):
    a = _ints16(200, 96).t() if ta else _ints16(96, 200)
    b = _ints16(130, 200).t() if tb else _ints16(200, 130)
    got = torch.mm(a.to(DEV), b.to(DEV))
    assert torch.equal(got.cpu(), (a.double() @ b.double()).half())
    sa, sb = _ints16(96, 400)[:, ::2], _ints16(600, 131)[::3][:, 1:]  # strided views
    got = torch.mm(sa.to(DEV), sb.to(DEV))
    assert torch.equal(got.cpu(), (sa.double() @ sb.double()).half())
    _no_fallback()


def test_f16_addmm_linear_bmm_round_once():
    x, w, bias = _ints16(8, 64, 96), _ints16(160, 96), _ints16(160)
    want = (x.double() @ w.double().t() + bias.double()).half()
    assert torch.equal(F.linear(x.to(DEV), w.to(DEV), bias.to(DEV)).cpu(), want)
    c, m1, m2 = _ints16(100, 70), _ints16(100, 300), _ints16(70, 300).t()
    got = torch.addmm(c.to(DEV), m1.to(DEV), m2.to(DEV), beta=2, alpha=0.5)
    assert torch.equal(got.cpu(), (2 * c.double() + 0.5 * (m1.double() @ m2.double())).half())
    out = torch.full((100, 70), float("nan"), dtype=torch.float16, device=DEV)
    torch.mm(m1.to(DEV), m2.to(DEV), out=out)  # beta 0: C's NaNs are never read
    assert torch.equal(out.cpu(), (m1.double() @ m2.double()).half())
    q, k = _ints16(6, 64, 48), _ints16(6, 80, 48)
    got = torch.bmm(q.to(DEV), k.to(DEV).transpose(1, 2))
    assert torch.equal(got.cpu(), (q.double() @ k.double().transpose(1, 2)).half())
    s = _ints16(6, 64, 80)
    got = torch.baddbmm(s.to(DEV), q.to(DEV), k.to(DEV).transpose(1, 2), beta=-1, alpha=2)
    assert torch.equal(
        got.cpu(), (2 * (q.double() @ k.double().transpose(1, 2)) - s.double()).half()
    )
    wb = _ints16(48, 72)  # a broadcast operand: one copy for the whole batch
    got = torch.matmul(q.to(DEV), wb.to(DEV))
    assert torch.equal(got.cpu(), (q.double() @ wb.double()).half())
    _no_fallback()


@pytest.mark.parametrize("fn,xs,ws,kw,channels_last", BF16_CONV_CASES)
def test_f16_conv_rounds_once(fn, xs, ws, kw, channels_last):
    x, w = _ints16(*xs), _ints16(*ws)
    b = _ints16(ws[1] if fn is F.conv_transpose2d else ws[0])
    ref_in = [t.double().requires_grad_() for t in (x, w, b)]
    ref = fn(*ref_in, **kw)
    g = _ints16(*ref.shape)
    ref_grads = torch.autograd.grad(ref, ref_in, g.double())
    xd, wd = x.to(DEV), w.to(DEV)
    if channels_last:
        xd = xd.to(memory_format=torch.channels_last)
        wd = wd.to(memory_format=torch.channels_last)
    dev_in = [t.requires_grad_() for t in (xd, wd, b.to(DEV))]
    got = fn(*dev_in, **kw)
    got_grads = torch.autograd.grad(got, dev_in, g.to(DEV))
    for r, d in zip((ref,) + ref_grads, (got,) + got_grads):
        assert d.dtype == torch.float16
        assert torch.equal(d.detach().cpu(), r.detach().half())
    _no_fallback()


def test_f16_conv_sliced_input_rounds_once():
    # An input whose planes are not dense (a channel slice of a wider
    # tensor): the copy gathers it.
    x = _ints16(3, 24, 11, 12)[:, 4:20]
    w, b = _ints16(16, 16, 3, 3), _ints16(16)
    want = F.conv2d(x.double(), w.double(), b.double(), padding=1).half()
    got = F.conv2d(x.to(DEV), w.to(DEV), b.to(DEV), padding=1)
    assert torch.equal(got.cpu(), want)
    _no_fallback()


def _rel_err(got, ref):
    return ((got.double() - ref).norm() / ref.norm()).item()


@pytest.mark.parametrize("shape", [(512, 1024, 512), (64, 4096, 96), (1, 2048, 300)])
def test_f16_mm_error_vs_f64_no_worse_than_cpu(shape):
    # float32 sums rounded once: the error against float64 is the float16
    # rounding itself, as PyTorch CPU's (which sums in float32 too).
    m, k, n = shape
    a, b = torch.randn(m, k).half(), torch.randn(k, n).half()
    ref = a.double() @ b.double()
    got = torch.mm(a.to(DEV), b.to(DEV)).cpu()
    assert _rel_err(got, ref) <= 1.02 * _rel_err(torch.mm(a, b), ref)


def test_f16_conv_error_vs_f64_no_worse_than_cpu():
    x, w = torch.randn(4, 64, 16, 16).half(), (torch.randn(96, 64, 3, 3) * 0.1).half()
    ref_in = [t.double().requires_grad_() for t in (x, w)]
    ref = F.conv2d(*ref_in, padding=1)
    g = torch.randn(ref.shape).half()
    ref_grads = torch.autograd.grad(ref, ref_in, g.double())
    cpu_in = [t.clone().requires_grad_() for t in (x, w)]
    cpu = F.conv2d(*cpu_in, padding=1)
    cpu_grads = torch.autograd.grad(cpu, cpu_in, g)
    dev_in = [t.to(DEV).requires_grad_() for t in (x, w)]
    dev = F.conv2d(*dev_in, padding=1)
    dev_grads = torch.autograd.grad(dev, dev_in, g.to(DEV))
    for r, c, d in zip((ref,) + ref_grads, (cpu,) + cpu_grads, (dev,) + dev_grads):
        assert _rel_err(d.detach().cpu(), r) <= 1.02 * _rel_err(c.detach(), r) + 1e-7
