"""Reductions, scans and softmax on neuron (libtrn reduce/scan/softmax
kernels) against PyTorch CPU: dims, keepdim, dtype=, dtypes, non-contiguous
inputs, empty tensors (identity or PyTorch's error), out= variants, and proof
that nothing fell back to the CPU."""

import pytest
import torch

import torch_neuronx


def _sample(dtype, shape=(6, 7, 5), seed=0):
    g = torch.Generator().manual_seed(seed)
    if dtype == torch.bool:
        return torch.randint(0, 2, shape, generator=g).bool()
    if dtype.is_floating_point:
        return torch.randn(shape, generator=g, dtype=torch.float64).to(dtype)
    lo = 0 if dtype == torch.uint8 else -5
    return torch.randint(lo, 6, shape, generator=g).to(dtype)


def _check(fn, x, *, rtol=None, atol=None):
    """fn on CPU vs on neuron (inputs moved as they are, views included)."""
    expected = fn(x)
    d = x.to("neuron")
    torch_neuronx.clear_op_tracking()
    got = fn(d)
    assert torch_neuronx.get_fallback_ops() == []
    exp = expected if isinstance(expected, tuple) else (expected,)
    out = got if isinstance(got, tuple) else (got,)
    for e, o in zip(exp, out):
        assert o.device.type == "neuron"
        assert o.dtype == e.dtype and o.shape == e.shape
        torch.testing.assert_close(o.cpu(), e, rtol=rtol, atol=atol, equal_nan=True)


def _on(x, transform):
    return lambda t: transform(t)


FLOATS = [torch.float32, torch.bfloat16, torch.float16, torch.float64]
ALL = FLOATS + [torch.int64, torch.int32, torch.uint8, torch.bool]
DIMS = [None, 0, -1, 1, (0, 2), (0, 1, 2)]


def _dimkw(dim):
    return {} if dim is None else {"dim": dim}


@pytest.mark.parametrize("dtype", ALL, ids=str)
@pytest.mark.parametrize("dim", DIMS, ids=str)
@pytest.mark.parametrize("keepdim", [False, True])
def test_sum_prod(dtype, dim, keepdim):
    x = _sample(dtype)
    if dim is None:
        _check(lambda t: t.sum(), x)
        _check(lambda t: t.prod(), x, rtol=1e-2, atol=1e-2)
        return
    _check(lambda t: t.sum(dim, keepdim=keepdim), x)
    if isinstance(dim, int):
        # PyTorch CPU multiplies halves in half precision (rounding each
        # step); neuron accumulates in float32, so allow one more ulp.
        tol = {"rtol": 3e-3, "atol": 1e-3} if dtype == torch.float16 else {}
        _check(lambda t: t.prod(dim, keepdim=keepdim), x, **tol)


@pytest.mark.parametrize("dtype", FLOATS, ids=str)
@pytest.mark.parametrize("dim", DIMS, ids=str)
def test_mean_var_std(dtype, dim):
    x = _sample(dtype)
    kw = _dimkw(dim)
    _check(lambda t: t.mean(**kw), x)
    _check(lambda t: t.var(**kw), x)
    _check(lambda t: t.std(**kw, correction=0, keepdim=True), x)
    _check(lambda t: torch.var_mean(t, **kw, correction=2), x)
    _check(lambda t: torch.std_mean(t, **kw), x)


@pytest.mark.parametrize("dtype", ALL, ids=str)
def test_extremes_and_indices(dtype):
    x = _sample(dtype)
    for dim in [0, 1, -1]:
        _check(lambda t: t.amax(dim), x)
        _check(lambda t: t.amin((0, dim) if dim != 0 else 0, keepdim=True), x)
        _check(lambda t: t.max(dim), x)
        _check(lambda t: t.min(dim, keepdim=True), x)
        if dtype != torch.bool:
            _check(lambda t: t.argmax(dim), x)
            _check(lambda t: t.argmin(dim, keepdim=True), x)
    _check(lambda t: t.max(), x)
    _check(lambda t: t.min(), x)
    if dtype != torch.bool:
        _check(lambda t: t.argmax(), x)
        _check(lambda t: t.argmin(), x)


def test_nan_rules_and_ties():
    x = torch.tensor(
        [[1.0, 5.0, 5.0, float("nan"), 2.0, float("nan")], [3.0, 3.0, -1.0, -1.0, 0.0, 3.0]]
    )
    for f in [
        lambda t: t.max(1),
        lambda t: t.min(1),
        lambda t: t.argmax(1),
        lambda t: t.argmin(1),
        lambda t: t.amax(1),
        lambda t: t.amin(0),
        lambda t: t.max(),
        lambda t: t.sum(1),
        lambda t: t.logsumexp(1),
        lambda t: t.softmax(1),
    ]:
        _check(f, x)


@pytest.mark.parametrize("dtype", FLOATS, ids=str)
@pytest.mark.parametrize("n", [5, 33, 100, 256, 300, 2048, 3000])
def test_max_min_rows_nan_and_signed_zero(dtype, n):
    """amax / amin / inf-norm over contiguous rows (256 or more) take a select loop that
    has no NaN test and redo a block that holds a NaN: a NaN in any lane,
    block or the tail still wins; rows of signed zeros and infinities keep
    their values. (The sign of a -0/+0 tie is the lane order's, on main as
    here, and is not CPU's: not compared.)"""
    x = _sample(dtype, (n + 3, n)).clone()
    for r in range(n):
        x[r, r] = float("nan")  # one NaN per row, at every position
    x[n, :] = 0.0
    x[n, ::3] = -0.0  # a row of signed zeros, no NaN
    x[n + 1, -1] = float("inf")
    x[n + 2, n // 2] = float("-inf")
    for f in [
        lambda t: t.amax(1),
        lambda t: t.amin(1),
        lambda t: t.abs().amax(1),
        lambda t: torch.linalg.vector_norm(t, float("inf"), dim=1),
    ]:
        _check(f, x)


@pytest.mark.parametrize("dtype", ALL, ids=str)
def test_any_all_count(dtype):
    x = _sample(dtype)
    for kw in [{}, {"dim": 1}, {"dim": (0, 2)}, {"dim": 0, "keepdim": True}]:
        _check(lambda t: t.any(**kw), x)
        _check(lambda t: t.all(**kw), x)
    _check(lambda t: torch.count_nonzero(t), x)
    _check(lambda t: torch.count_nonzero(t, dim=(0, 2)), x)


@pytest.mark.parametrize("dtype", FLOATS, ids=str)
@pytest.mark.parametrize("ord", [2, 1, 0, 3.5, float("inf"), float("-inf")])
def test_norms(dtype, ord):
    x = _sample(dtype)
    _check(lambda t: torch.linalg.vector_norm(t, ord), x)
    _check(lambda t: torch.linalg.vector_norm(t, ord, dim=(0, 2), keepdim=True), x)
    _check(lambda t: torch.norm(t, p=ord, dim=1), x)


@pytest.mark.parametrize("dtype", FLOATS + [torch.int64], ids=str)
def test_logsumexp(dtype):
    x = _sample(dtype) * 10 if dtype.is_floating_point else _sample(dtype)
    _check(lambda t: t.logsumexp(1), x)
    _check(lambda t: t.logsumexp((0, 2), keepdim=True), x)
    inf = torch.tensor([[float("-inf"), float("-inf")], [float("inf"), 1.0]])
    _check(lambda t: t.logsumexp(1), inf)


@pytest.mark.parametrize(
    "dtype",
    [
        torch.float32,
        torch.bfloat16,
        torch.float64,
        torch.int64,
        torch.int32,
        torch.uint8,
        torch.bool,
    ],
    ids=str,
)
def test_cumsum_cumprod(dtype):
    x = _sample(dtype, (9, 12, 10))
    for dim in [0, 1, -1]:
        _check(lambda t: t.cumsum(dim), x)
        _check(lambda t: t.cumprod(dim), x if dtype.is_floating_point else x.clamp(-2, 2))
    _check(lambda t: t.cumsum(1, dtype=torch.float64), x)


def test_cumsum_inplace_and_out():
    x = _sample(torch.float32, (5, 6))
    _check(lambda t: t.clone().cumsum_(0), x)
    _check(lambda t: torch.cumsum(t, 1, out=torch.empty(0, device=t.device)), x)


@pytest.mark.parametrize("dtype", FLOATS, ids=str)
@pytest.mark.parametrize("dim", [0, 1, -1])
def test_softmax_forward_backward(dtype, dim):
    x = _sample(dtype, (6, 40, 9)) * 4
    # Half results near 0 differ by an ulp of the row's max (PyTorch's
    # vectorized CPU kernel rounds differently): absolute tolerance.
    tol = {"rtol": 1.6e-2, "atol": 4e-2} if dtype in (torch.float16, torch.bfloat16) else {}
    _check(lambda t: torch.softmax(t, dim), x, **tol)
    _check(lambda t: torch.log_softmax(t, dim), x, **tol)
    g = _sample(dtype, (6, 40, 9), seed=1)
    y = torch.softmax(x, dim)
    ly = torch.log_softmax(x, dim)
    gd, yd, lyd = g.to("neuron"), y.to("neuron"), ly.to("neuron")
    torch_neuronx.clear_op_tracking()
    got = torch.ops.aten._softmax_backward_data(gd, yd, dim, dtype)
    lgot = torch.ops.aten._log_softmax_backward_data(gd, lyd, dim, dtype)
    assert torch_neuronx.get_fallback_ops() == []
    torch.testing.assert_close(
        got.cpu(), torch.ops.aten._softmax_backward_data(g, y, dim, dtype), **tol
    )
    torch.testing.assert_close(
        lgot.cpu(), torch.ops.aten._log_softmax_backward_data(g, ly, dim, dtype), **tol
    )


def test_softmax_half_to_float_and_dtype_arg():
    x = _sample(torch.bfloat16, (4, 33))
    # half_to_float is not implemented on CPU: compare with float32 input.
    got = torch.ops.aten._softmax(x.half().to("neuron"), 1, True)
    assert got.dtype == torch.float32
    torch.testing.assert_close(got.cpu(), torch.softmax(x.half().float(), 1))
    _check(lambda t: torch.softmax(t, 1, dtype=torch.float32), x)
    _check(lambda t: torch.log_softmax(t, 0, dtype=torch.float64), x)


def test_softmax_autograd_matches_cpu():
    x = _sample(torch.float32, (5, 17))
    xc = x.clone().requires_grad_()
    xd = x.to("neuron").requires_grad_()
    g = _sample(torch.float32, (5, 17), seed=3)
    (torch.log_softmax(xc, 1) * 1).backward(g)
    torch.log_softmax(xd, 1).backward(g.to("neuron"))
    torch.testing.assert_close(xd.grad.cpu(), xc.grad)


def test_log_softmax_split_rows_do_not_depend_on_threads():
    # A language model's loss shape ([512, 128], 64K elements) runs in two
    # pieces from two threads on (softmax.c's 32K grain): every row's result,
    # forward and backward (and a row group cut short by a piece end), is
    # the same at 1, 2 and 3 threads.
    from _thread_counts import outputs_at_thread_counts

    code = (
        "import torch, torch_neuronx\n"
        "g = torch.Generator().manual_seed(0)\n"
        "x, gy = (torch.randn(517, 128, generator=g).to('neuron') for _ in range(2))\n"
        "y = torch.ops.aten._log_softmax(x, 1, False)\n"
        "gx = torch.ops.aten._log_softmax_backward_data(gy, y, 1, torch.float32)\n"
        "s = torch.softmax(x, 1)\n"
        "print([t.cpu().numpy().tobytes().hex() for t in (y, gx, s)])\n"
    )
    assert len(outputs_at_thread_counts(code)) == 1


def test_large_sum_matches_cpu():
    x = torch.randn(1_000_000, generator=torch.Generator().manual_seed(0)) + 0.5
    _check(lambda t: t.sum(), x, rtol=1e-6, atol=1e-3)
    _check(lambda t: t.mean(), x, rtol=1e-6, atol=1e-6)
    m = torch.randn(1000, 1000, generator=torch.Generator().manual_seed(1))
    _check(lambda t: t.sum(0), m, rtol=1e-5, atol=1e-4)
    _check(lambda t: t.sum(1), m, rtol=1e-5, atol=1e-4)


# Shapes of libtrn's register column loop (sum/mean over dim 0 of float32
# and bfloat16, 64-column strips, 2048-column chunks, rows in blocks of the
# cascade's step): bias-gradient sizes, a width crossing a chunk, rows
# crossing the cascade's flushes, a padded (strided) row.
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
@pytest.mark.parametrize(
    "shape", [(512, 768), (33, 4160), (4097, 256), (300, 2048 + 64), (1, 64)], ids=str
)
def test_column_sums_match_cpu_bits_and_float64(dtype, shape):
    g = torch.Generator().manual_seed(shape[0] * 7 + shape[1])
    x = (torch.randn(shape, generator=g) * (1 + 100 * (torch.rand(shape, generator=g) < 0.1))).to(
        dtype
    )
    ref = x.double().sum(0)
    views = [x, torch.cat([x, x[:, :3]], 1)[:, : shape[1]]]  # contiguous, rows padded
    for v in views:
        for op in ("sum", "mean"):
            want = getattr(v, op)(0)
            torch_neuronx.clear_op_tracking()
            got = getattr(v.to("neuron"), op)(0).cpu()
            assert torch_neuronx.get_fallback_ops() == []
            # Same cascade as CPU's column sum: the same bits.
            assert torch.equal(got, want), (op, v.stride())
        got = v.to("neuron").sum(0).cpu().double()
        cpu_err = (v.sum(0).double() - ref).abs().max().item()
        assert (got - ref).abs().max().item() <= cpu_err


# Row sums end each leaf of 32 lanes with a pairwise tree, in vector
# registers for float and double sums: lengths around the lanes, a leaf
# with a tail, two leaves; against CPU and float64.
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16], ids=str)
@pytest.mark.parametrize("n", [1, 31, 32, 33, 256, 1000, 2049, 4096])
def test_row_sums_lane_tree(dtype, n):
    g = torch.Generator().manual_seed(n)
    x = (torch.randn(64, n, generator=g, dtype=torch.float64) * 100 + 1).to(dtype)
    ref = x.double().sum(-1)
    for op in ("sum", "mean"):
        tol = 1e-2 if dtype == torch.bfloat16 else 1e-5
        _check(lambda t: getattr(t, op)(-1), x, rtol=tol, atol=tol * ref.abs().max().item())
    got = x.to("neuron").sum(-1).cpu().double()
    cpu_err = (x.sum(-1).double() - ref).abs().max().item()
    if dtype == torch.float32:  # both accumulate in float32: errors of the same size
        assert (got - ref).abs().max().item() <= 4 * cpu_err + 1e-6 * ref.abs().max().item()
    var = x.to("neuron").var(-1).cpu() if n > 1 else None
    if var is not None:
        torch.testing.assert_close(
            var, x.var(-1), rtol=1e-2 if dtype == torch.bfloat16 else 1e-5, atol=1e-3
        )


def test_dtype_argument_and_promotion():
    x = _sample(torch.int32)
    _check(lambda t: t.sum(1), x)  # int32 -> int64
    _check(lambda t: t.sum(1, dtype=torch.float32), x)
    _check(lambda t: t.prod(0, dtype=torch.float64), x)
    _check(lambda t: t.mean(1, dtype=torch.float32), x)
    _check(lambda t: t.to(torch.bool).sum(), x)
    _check(lambda t: torch.linalg.vector_norm(t, dtype=torch.float64), _sample(torch.float32))
    _check(lambda t: t.sum(dtype=torch.float64), _sample(torch.bfloat16))
    with pytest.raises(RuntimeError, match="mean"):
        x.to("neuron").mean()


@pytest.mark.parametrize("view", ["transpose", "slice", "expand"])
def test_non_contiguous(view):
    base = _sample(torch.float32, (8, 10, 6))
    tr = {
        "transpose": lambda t: t.transpose(0, 2),
        "slice": lambda t: t[1::2, :, ::3],
        "expand": lambda t: t[:, :1].expand(8, 5, 6),
    }[view]
    for f in [
        lambda t: tr(t).sum(0),
        lambda t: tr(t).sum((1, 2)),
        lambda t: tr(t).sum(),
        lambda t: tr(t).amax(-1),
        lambda t: tr(t).max(1),
        lambda t: tr(t).argmax(),
        lambda t: tr(t).var(0),
        lambda t: tr(t).cumsum(1),
        lambda t: tr(t).softmax(0),
        lambda t: tr(t).logsumexp(2),
        lambda t: tr(t).norm(dim=1),
    ]:
        _check(f, base)


def test_out_variants():
    x = _sample(torch.float32)

    def outs(t):
        o = torch.empty(0, device=t.device)
        i = torch.empty(0, dtype=torch.long, device=t.device)
        v = torch.empty(0, device=t.device)
        torch.sum(t, 1, out=o)
        r1 = o.clone()
        torch.max(t, 0, out=(v, i))
        torch.mean(t, (0, 1), out=o)
        r2 = o.clone()
        a = torch.empty(0, dtype=torch.bool, device=t.device)
        torch.any(t, 1, out=a)
        n = torch.empty(0, device=t.device)
        torch.linalg.vector_norm(t, 2, dim=0, out=n)
        lse = torch.empty(0, device=t.device)
        torch.logsumexp(t, 2, out=lse)
        am = torch.empty(0, device=t.device)
        torch.amax(t, 2, out=am)
        s64 = torch.empty(0, dtype=torch.float64, device=t.device)
        torch.sum(t, 0, out=s64)
        return r1, v, i, r2, a, n, lse, am, s64

    _check(outs, x)


def test_empty_tensors():
    e = torch.empty(0, 4)
    _check(lambda t: t.sum(0), e)
    _check(lambda t: t.sum(), e)
    _check(lambda t: t.prod(0), e)
    _check(lambda t: t.mean(0), e)
    _check(lambda t: t.var(0), e)
    _check(lambda t: t.logsumexp(0), e)
    _check(lambda t: t.any(0), e)
    _check(lambda t: t.all(0), e)
    _check(lambda t: torch.count_nonzero(t, 0), e)
    _check(lambda t: torch.linalg.vector_norm(t, dim=0), e)
    _check(lambda t: t.amax(1), e)  # empty output, nonempty reduction
    _check(lambda t: t.cumsum(0), e)
    _check(lambda t: t.softmax(0), e)
    d = e.to("neuron")
    for f, msg in [
        (lambda t: t.amax(0), "amax"),
        (lambda t: t.max(), "max"),
        (lambda t: t.argmax(0), "argmax"),
        (lambda t: t.max(0), "max"),
        (lambda t: torch.linalg.vector_norm(t, float("inf")), "norm"),
    ]:
        with pytest.raises((RuntimeError, IndexError), match=msg):
            f(d)
    with pytest.raises(IndexError):
        _sample(torch.float32).to("neuron").sum(5)


def test_zero_dim_and_size_one():
    s = torch.tensor(3.5)
    for f in [
        lambda t: t.sum(),
        lambda t: t.mean(),
        lambda t: t.amax(),
        lambda t: t.max(),
        lambda t: t.argmax(),
        lambda t: t.cumsum(0),
        lambda t: t.softmax(0),
        lambda t: t.max(0),
        lambda t: t.var(correction=0),
    ]:
        _check(f, s)
    _check(lambda t: t.sum(1), torch.ones(3, 1, 4))


def test_complex_falls_back():
    x = torch.randn(3, 4, dtype=torch.complex64)
    d = x.to("neuron")
    torch_neuronx.clear_op_tracking()
    got = d.sum(1)
    assert "aten::sum" in torch_neuronx.get_fallback_ops()
    torch.testing.assert_close(got.cpu(), x.sum(1))
