"""Native creation/shape and sort/select ops (aten/shape.cpp; libtrn
fill.c, sort.c, copy.c) against PyTorch CPU, asserting nothing falls back."""

import pytest
import torch
import torch_neuronx

DTYPES = [torch.float32, torch.bfloat16, torch.int64, torch.int32, torch.bool, torch.uint8]
DEV = "neuron"


def make(shape, dtype, seed=0):
    g = torch.Generator().manual_seed(seed)
    if dtype == torch.bool:
        return torch.randint(0, 2, shape, generator=g).bool()
    if dtype.is_floating_point:
        return (torch.randn(shape, generator=g) * 10).round().to(dtype)  # many ties
    return torch.randint(0, 50, shape, generator=g).to(dtype)


@pytest.fixture(autouse=True)
def no_fallback():
    torch_neuronx.clear_op_tracking()
    yield
    assert torch_neuronx.get_fallback_ops() == []


def same(got, want):
    torch.testing.assert_close(got.cpu(), want, rtol=0, atol=0, equal_nan=True)


@pytest.mark.parametrize("dtype", DTYPES)
def test_fill_zero(dtype):
    for shape, t in [((5, 6), False), ((6, 5), True), ((0, 3), False), ((), False)]:
        x = make(shape, dtype).to(DEV)
        if t:
            x = x.t()
        x.fill_(1)
        same(x, torch.ones(x.shape, dtype=dtype))
        x.zero_()
        same(x, torch.zeros(x.shape, dtype=dtype))
        x.fill_(torch.tensor(3, device=DEV))  # 0-d neuron value, other dtype
        same(x, torch.full(x.shape, 3, dtype=dtype))
    same(torch.full((3, 4), 7, dtype=dtype, device=DEV), torch.full((3, 4), 7, dtype=dtype))
    e = torch.zeros(4, device=DEV, dtype=dtype).expand(3, 4)
    e.fill_(1)
    same(e, torch.ones(3, 4, dtype=dtype))


def test_creation():
    for dtype in [torch.float32, torch.float64, torch.int64, torch.int32, torch.uint8]:
        same(torch.arange(2, 40, 3, dtype=dtype, device=DEV), torch.arange(2, 40, 3, dtype=dtype))
        same(torch.eye(4, 6, dtype=dtype, device=DEV), torch.eye(4, 6, dtype=dtype))
        same(
            torch.linspace(0, 40, 5, dtype=dtype, device=DEV), torch.linspace(0, 40, 5, dtype=dtype)
        )
    # CPU rounds vector bases to float32 first: agree within an ulp.
    torch.testing.assert_close(
        torch.arange(-1.0, 1.0, 0.1, device=DEV).cpu(),
        torch.arange(-1.0, 1.0, 0.1),
        rtol=0,
        atol=1e-7,
    )
    same(torch.arange(0, device=DEV), torch.arange(0))
    same(torch.eye(3, dtype=torch.bool, device=DEV), torch.eye(3, dtype=torch.bool))
    got, want = torch.linspace(-3, 7, 1001, device=DEV), torch.linspace(-3, 7, 1001)
    torch.testing.assert_close(got.cpu(), want, rtol=0, atol=2e-6)  # CPU vectorizes the formula
    assert got[0].item() == -3 and got[-1].item() == 7
    same(torch.linspace(2, 5, 1, device=DEV), torch.linspace(2, 5, 1))
    out = torch.empty(10, device=DEV)[::2]
    torch.arange(5, out=out)
    same(out, torch.arange(5.0))
    with pytest.raises(RuntimeError):
        torch.arange(0, 10, -1, device=DEV)
    # The size and checks are computed natively (the meta kernel is a Python
    # reference): the same sizes, errors and out= resize as the CPU.
    for args in [(0, 9), (1.0, 2.0, 0.3), (5, -3, -2), (2**40, 2**40 + 7, 3), (0.0, 1.0, 0.1)]:
        same(torch.arange(*args, device=DEV), torch.arange(*args))
    for bad in [(0, 5, 0), (5, 0, 1), (0.0, float("inf"))]:
        with pytest.raises(RuntimeError, match="step must be nonzero|inconsistent|unsupported"):
            torch.arange(*bad, device=DEV)
    out = torch.empty(2, 3, device=DEV)
    with pytest.warns(UserWarning, match="resized"):
        torch.arange(4, out=out)
    same(out, torch.arange(4.0))


@pytest.mark.parametrize("dtype", DTYPES)
def test_tril_triu(dtype):
    x = make((3, 5, 7), dtype)
    for k in [-8, -2, 0, 1, 9]:
        for src in [x, x.transpose(1, 2)]:
            d = src.to(DEV)
            same(torch.tril(d, k), torch.tril(src, k))
            same(torch.triu(d, k), torch.triu(src, k))
            y = d.clone()
            y.triu_(k)
            same(y, torch.triu(src, k))
            nc = d.transpose(1, 2)  # in place on a non-contiguous view
            nc.tril_(k)
            same(nc, torch.tril(src.transpose(1, 2), k))
    same(torch.tril(torch.zeros(0, 4, device=DEV, dtype=dtype)), torch.zeros(0, 4, dtype=dtype))
    with pytest.raises(RuntimeError, match="at least 2 dimensions"):
        torch.tril(torch.zeros(3, device=DEV))


@pytest.mark.parametrize("dtype", DTYPES)
def test_flip_roll_pad_repeat(dtype):
    x = make((4, 5, 6), dtype)
    for src in [x, x.permute(2, 0, 1), x[:, ::2]]:
        d = src.to(DEV)
        for dims in [(0,), (1, 2), (0, 1, 2), (-1,)]:
            same(torch.flip(d, dims), torch.flip(src, dims))
        same(torch.roll(d, 3), torch.roll(src, 3))
        same(torch.roll(d, (1, -7), (0, 2)), torch.roll(src, (1, -7), (0, 2)))
        same(torch.roll(d, (2, 2), (1, 1)), torch.roll(src, (2, 2), (1, 1)))
        for pad in [(1, 2), (0, 1, 2, 0), (-1, 2, 1, -2), (1, 1, 1, 1, 1, 1)]:
            same(
                torch.nn.functional.pad(d, pad, value=1), torch.nn.functional.pad(src, pad, value=1)
            )
        same(d.repeat(2, 1, 3), src.repeat(2, 1, 3))
    z = torch.zeros(0, 3, dtype=dtype)
    same(torch.flip(z.to(DEV), (0,)), z)
    same(torch.roll(z.to(DEV), 1, 1), z)
    with pytest.raises(RuntimeError):
        torch.flip(x.to(DEV), (0, 0))


def check_sort(src, dim, descending):
    d = src.to(DEV)
    v, i = torch.sort(d, dim=dim, descending=descending, stable=True)
    wv, wi = torch.sort(src, dim=dim, descending=descending, stable=True)
    same(v, wv)
    same(i, wi)  # stable: ties in input order, exactly as CPU
    same(torch.argsort(d, dim=dim, descending=descending, stable=True), wi)


@pytest.mark.parametrize("dtype", DTYPES)
def test_sort(dtype):
    x = make((6, 300), dtype)
    for src in [x, x.t(), x[:, ::3]]:
        for dim in [0, 1, -1]:
            for desc in [False, True]:
                check_sort(src, dim, desc)
    check_sort(make((5000,), dtype), 0, False)
    check_sort(torch.zeros(0, 4, dtype=dtype), 0, True)
    check_sort(make((), dtype), 0, False)


def test_sort_nan_and_signed_zero():
    x = torch.tensor(
        [3.0, float("nan"), -0.0, 1.0, 0.0, float("-inf"), float("nan"), float("inf"), -0.0]
    )
    for dtype in [torch.float32, torch.float64, torch.bfloat16, torch.float16]:
        for desc in [False, True]:
            check_sort(x.to(dtype), 0, desc)
    v, i = torch.sort(x.to(DEV))  # stable=False sorts stably too
    same(i, torch.sort(x, stable=True)[1])


@pytest.mark.parametrize("dtype", DTYPES)
def test_topk(dtype):
    x = make((7, 400), dtype)
    if dtype == torch.bool:
        with pytest.raises(RuntimeError, match="does not support bool"):
            torch.topk(x.to(DEV), 2)
        return
    if dtype.is_floating_point:
        x[0, ::9] = float("nan")
    for src in [x, x.t()]:
        for dim in [0, 1]:
            n = src.shape[dim]
            for k in [0, 1, 5, n // 2, n]:
                for largest in [True, False]:
                    d = src.to(DEV)
                    v, i = torch.topk(d, k, dim=dim, largest=largest)
                    wv, _ = torch.topk(src, k, dim=dim, largest=largest)
                    same(v, wv)
                    same(torch.gather(src, dim, i.cpu()), wv)  # ties: any index of the value
                    v2, i2 = torch.topk(d, k, dim=dim, largest=largest, sorted=False)
                    same(torch.gather(src, dim, i2.cpu()), v2.cpu())
                    same(v2.cpu().sort(dim=dim)[0], wv.sort(dim=dim)[0])
    with pytest.raises(RuntimeError):
        torch.topk(x.to(DEV), 500)


@pytest.mark.parametrize("dtype", DTYPES)
def test_unique(dtype):
    x = make((9, 40), dtype)
    for src in [x, x.t(), torch.zeros(0, dtype=dtype)]:
        d = src.to(DEV)
        for inv in [False, True]:
            for cnt in [False, True]:
                for got, want in zip(
                    torch.unique(d, return_inverse=inv, return_counts=cnt),
                    torch.unique(src, return_inverse=inv, return_counts=cnt),
                ):
                    same(got, want)
                for got, want in zip(
                    torch.unique_consecutive(d, return_inverse=inv, return_counts=cnt),
                    torch.unique_consecutive(src, return_inverse=inv, return_counts=cnt),
                ):
                    same(got, want)


def test_unique_nan():
    x = torch.tensor([2.0, float("nan"), -0.0, 0.0, float("nan"), 2.0])
    for got, want in zip(
        torch.unique(x.to(DEV), return_inverse=True, return_counts=True),
        torch.unique(x, return_inverse=True, return_counts=True),
    ):
        same(got, want)
