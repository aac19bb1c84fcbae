"""Row-broadcast elementwise operands and grouped log_softmax rows (session 27, lmk3).

- A binary op whose operand is broadcast along the row (inner stride 0, RMSNorm's
  x * rsqrt(mean) with [.., 1]) runs unstaged: the result must be the staged path's,
  i.e. bit for bit PyTorch CPU's for float32 add / sub / mul / div and the other ops.
- log_softmax over rows takes the row sums' logarithms in groups (scalar.h's double
  log instead of libm's): the float results must match a float64 reference as closely
  as PyTorch CPU's do, and row sums in every binade give the correctly rounded log.
"""

import pytest
import torch

import torch_neuronx  # noqa: F401

SHAPES = [
    ((8, 64, 256), (8, 64, 1)),
    ((3, 5, 7), (3, 5, 1)),
    ((2, 3, 512), (2, 3, 1)),
    ((2, 3, 513), (2, 3, 1)),  # longer than a block: staged
    ((4, 600), (4, 1)),
    ((8, 64, 256), (1, 64, 1)),
    ((8, 1, 256), (8, 64, 1)),  # both operands broadcast somewhere
    ((6, 2), (6, 1)),
    ((257, 509), (257, 1)),  # > 2 pieces at two threads, cut inside rows
]

OPS = {
    "mul": torch.mul,
    "add": torch.add,
    "sub": torch.sub,
    "div": torch.div,
    "rmul": lambda x, y: y * x,  # the broadcast operand first
    "rsub": lambda x, y: y - x,
    "maximum": torch.maximum,
    "where": lambda x, y: torch.where(x > 0, x, y),
}


@pytest.mark.parametrize("shapes", SHAPES, ids=lambda s: f"{s[0]}x{s[1]}")
@pytest.mark.parametrize("name", sorted(OPS))
def test_row_broadcast_float32_matches_cpu(shapes, name):
    g = torch.Generator().manual_seed(1)
    a = torch.randn(shapes[0], generator=g) * 10
    b = torch.randn(shapes[1], generator=g) * 10
    b[b.abs() < 1e-3] = 1.0
    fn = OPS[name]
    want = fn(a, b)
    got = fn(a.to("neuron"), b.to("neuron")).cpu()
    assert torch.equal(got, want)


@pytest.mark.parametrize("dtype", [torch.int64, torch.bfloat16, torch.float16])
def test_row_broadcast_other_dtypes_match_cpu(dtype):
    g = torch.Generator().manual_seed(2)
    a = (torch.randn(8, 16, 96, generator=g) * 10).to(dtype)
    b = (torch.randn(8, 16, 1, generator=g) * 10).to(dtype)
    for fn in (torch.mul, torch.add, torch.sub):
        assert torch.equal(fn(a.to("neuron"), b.to("neuron")).cpu(), fn(a, b))


def test_row_broadcast_in_place_and_special_values():
    x = torch.randn(16, 256)
    y = torch.randn(16, 1)
    y[3] = float("nan")
    y[5] = float("inf")
    y[7] = -0.0
    xn, yn = x.to("neuron"), y.to("neuron")
    want = x * y
    xn.mul_(yn)
    assert torch.equal(xn.cpu().isnan(), want.isnan())
    assert torch.equal(torch.nan_to_num(xn.cpu()), torch.nan_to_num(want))


@pytest.mark.parametrize("cols", [1, 3, 16, 128, 1000, 4096, 4097])
@pytest.mark.parametrize("rows", [1, 15, 17, 512])
def test_log_softmax_rows_vs_float64(rows, cols):
    g = torch.Generator().manual_seed(rows * 10007 + cols)
    x = torch.randn(rows, cols, generator=g) * 4
    ref = torch.log_softmax(x.double(), 1)
    got = torch.log_softmax(x.to("neuron"), 1).cpu().double()
    cpu = torch.log_softmax(x, 1).double()
    err, cpu_err = (got - ref).abs().max().item(), (cpu - ref).abs().max().item()
    ulp = torch.finfo(torch.float32).eps * max(1.0, ref.abs().max().item())
    assert err <= cpu_err + ulp


def test_log_softmax_row_sums_in_every_binade():
    # One row per sum s = 1 + k (k equal entries at the max, the rest -inf
    # contributes 0): the log of sums from 1 to 4096, each rounded once.
    ks = torch.arange(0, 4096)
    x = torch.full((ks.numel(), 4096), float("-inf"))
    mask = torch.arange(4096)[None, :] <= ks[:, None]
    x[mask] = 0.0
    got = torch.log_softmax(x.to("neuron"), 1).cpu()
    want = (-torch.log((ks + 1).double())).float()
    assert torch.equal(got[:, 0], want)


def test_log_softmax_special_rows_match_cpu():
    x = torch.randn(6, 64)
    x[0, 3] = float("nan")
    x[1, :] = float("-inf")
    x[2, 5] = float("inf")
    x[3, 7] = float("-inf")
    want = torch.log_softmax(x, 1)
    got = torch.log_softmax(x.to("neuron"), 1).cpu()
    assert torch.equal(got.isnan(), want.isnan())
    fin = ~want.isnan()
    torch.testing.assert_close(got[fin], want[fin], rtol=1e-6, atol=1e-6)
