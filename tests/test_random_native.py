"""Native random fills on neuron (libtrn random.c, csrc/aten/random.cpp):
no CPU fallback, the right distribution (moments, ranges, dtypes, strided
outputs), reproducible from the device generator, successive draws differ,
explicit generators, ATen's argument errors; log_normal_, cauchy_ and
geometric_ (quantiles and the moments that exist, independence of CPU's
generator, rng state round trips). The values are neuron's own
stream (like CUDA's), so they are compared to distributions, not to the CPU."""

import math

import pytest
import torch

import torch_neuronx

N = 100_000


def native(fn):
    torch_neuronx.clear_op_tracking()
    out = fn()
    torch.neuron.synchronize()
    assert torch_neuronx.get_fallback_ops() == []
    return out


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16, torch.float16])
def test_float_distributions(dtype):
    u = native(lambda: torch.empty(N, device="neuron", dtype=dtype).uniform_(-2, 4)).cpu().double()
    assert u.min() >= -2 and u.max() < 4
    assert abs(u.mean() - 1) < 0.05 and abs(u.var() - 3.0) < 0.1
    n = native(lambda: torch.empty(N, device="neuron", dtype=dtype).normal_(1.5, 2)).cpu().double()
    assert abs(n.mean() - 1.5) < 0.05 and abs(n.std() - 2) < 0.05
    e = native(lambda: torch.empty(N, device="neuron", dtype=dtype).exponential_(2)).cpu().double()
    assert e.min() >= 0 and abs(e.mean() - 0.5) < 0.02
    r = native(lambda: torch.randn(N, device="neuron", dtype=dtype))
    assert r.dtype == dtype and abs(r.cpu().double().std() - 1) < 0.05


@pytest.mark.parametrize(
    "dtype", [torch.int64, torch.int32, torch.uint8, torch.float32, torch.bool]
)
def test_discrete_distributions(dtype):
    b = native(lambda: torch.empty(N, device="neuron", dtype=dtype).bernoulli_(0.25)).cpu()
    assert set(b.unique().tolist()) <= {0, 1} and abs(b.double().mean() - 0.25) < 0.01
    if dtype == torch.bool:
        return
    k = native(lambda: torch.randint(3, 10, (N,), device="neuron", dtype=dtype)).cpu()
    assert k.dtype == dtype and k.min() == 3 and k.max() == 9
    counts = torch.bincount(k.long())[3:]
    assert (counts.double() / N - 1 / 7).abs().max() < 0.01
    r = native(lambda: torch.empty(N, device="neuron", dtype=dtype).random_(5)).cpu()
    assert r.min() == 0 and r.max() == 4
    d = native(lambda: torch.empty(N, device="neuron", dtype=dtype).random_()).cpu()
    assert d.min() >= 0 and d.double().max() > 100


def test_strided_output_and_reproducibility():
    base = torch.zeros(200, 300, device="neuron")
    view = base.t()[::2]  # non-contiguous
    torch.neuron.manual_seed(11)
    native(lambda: view.normal_())
    assert (base.t()[1::2] == 0).all().item()  # untouched rows stay zero
    torch.neuron.manual_seed(11)
    again = torch.zeros(150, 200, device="neuron").normal_()
    assert torch.equal(view.cpu(), again.cpu())
    a, b = torch.rand(50, device="neuron"), torch.rand(50, device="neuron")
    assert not torch.equal(a.cpu(), b.cpu())  # the generator advances


def test_generator_state_and_explicit_generator():
    state = torch.neuron.get_rng_state()
    a = torch.empty(64, device="neuron").exponential_().cpu()
    torch.neuron.set_rng_state(state)
    assert torch.equal(torch.empty(64, device="neuron").exponential_().cpu(), a)
    g = torch.Generator(device="neuron").manual_seed(3)
    x = torch.empty(64, device="neuron").uniform_(generator=g).cpu()
    g.manual_seed(3)
    assert torch.equal(torch.empty(64, device="neuron").uniform_(generator=g).cpu(), x)
    with pytest.raises(RuntimeError, match="neuron generator"):
        torch.empty(4, device="neuron").normal_(generator=torch.Generator())


def test_argument_errors():
    t = torch.empty(4, device="neuron")
    with pytest.raises(RuntimeError, match="normal expects std >= 0.0"):
        t.normal_(0, -1)
    with pytest.raises(RuntimeError, match="bernoulli_ expects p to be in"):
        t.bernoulli_(1.5)
    with pytest.raises(RuntimeError, match="exponential_ expects lambda > 0.0"):
        t.exponential_(0)
    with pytest.raises(RuntimeError, match="random_ expects 'from' to be less than 'to'"):
        t.random_(5, 2)
    with pytest.raises(RuntimeError, match="uniform_ expects to return"):
        t.uniform_(3, 1)


# --- log_normal_, cauchy_, geometric_ (ops8a)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16, torch.float16])
def test_log_normal_and_cauchy(dtype):
    x = native(lambda: torch.empty(N, device="neuron", dtype=dtype).log_normal_(0.5, 0.25))
    assert x.dtype == dtype
    lx = x.cpu().double().log()
    assert (x.cpu() > 0).all() and abs(lx.mean() - 0.5) < 0.01 and abs(lx.std() - 0.25) < 0.01
    c = native(lambda: torch.empty(N, device="neuron", dtype=dtype).cauchy_(1.0, 2.0))
    c = c.cpu().double()
    # Quartiles of Cauchy(median, scale) are median -+ scale.
    q = torch.quantile(c[:16384], torch.tensor([0.25, 0.5, 0.75], dtype=torch.float64))
    assert (q - torch.tensor([-1.0, 1.0, 3.0], dtype=torch.float64)).abs().max() < 0.15


@pytest.mark.parametrize(
    "dtype", [torch.int64, torch.int32, torch.uint8, torch.float32, torch.bfloat16, torch.float64]
)
def test_geometric(dtype):
    k = native(lambda: torch.empty(N, device="neuron", dtype=dtype).geometric_(0.25)).cpu()
    assert k.dtype == dtype and k.min() >= 1
    k = k.double()
    assert torch.equal(k, k.round())
    if dtype != torch.uint8:  # uint8 wraps the rare counts above 255, as ATen's cast
        assert abs(k.mean() - 4.0) < 0.06 and abs(k.var() - 12.0) < 0.6
    assert abs((k == 1).double().mean() - 0.25) < 0.01
    # ATen has no bool geometric_: CPU raises, and so does neuron.
    with pytest.raises(NotImplementedError, match="geometric_cpu"):
        torch.empty(64, device="neuron", dtype=torch.bool).geometric_(0.5)


def test_heavy_tail_seeding_state_and_strides():
    base = torch.zeros(60, 80, device="neuron")
    view = base.t()[::2]
    torch.manual_seed(5)
    native(lambda: view.log_normal_())
    assert (base.t()[1::2] == 0).all().item() and (view > 0).all().item()
    for op in (lambda t: t.log_normal_(), lambda t: t.cauchy_(), lambda t: t.geometric_(0.3)):
        torch.manual_seed(7)
        a = op(torch.empty(500, device="neuron")).cpu()
        torch.manual_seed(7)
        torch.rand(1000)  # CPU's generator moves; neuron's must not care
        b = op(torch.empty(500, device="neuron")).cpu()
        assert torch.equal(a, b)
        c = op(torch.empty(500, device="neuron")).cpu()
        assert not torch.equal(a, c)  # the device generator advanced
        state = torch.neuron.get_rng_state()
        d = op(torch.empty(500, device="neuron")).cpu()
        torch.neuron.set_rng_state(state)
        assert torch.equal(op(torch.empty(500, device="neuron")).cpu(), d)
    g = torch.Generator(device="neuron").manual_seed(3)
    x = torch.empty(64, device="neuron").cauchy_(generator=g).cpu()
    g.manual_seed(3)
    assert torch.equal(torch.empty(64, device="neuron").cauchy_(generator=g).cpu(), x)


def test_heavy_tail_argument_errors():
    t = torch.empty(4, device="neuron")
    with pytest.raises(RuntimeError, match="log_normal_ expects std > 0.0"):
        t.log_normal_(0, 0)
    with pytest.raises(RuntimeError, match="cauchy_ expects sigma > 0.0"):
        t.cauchy_(0, -1)
    with pytest.raises(RuntimeError, match="geometric_ expects p to be in"):
        t.geometric_(1.0)
    with pytest.raises(RuntimeError, match="Cauchy distribution is a continuous"):
        torch.empty(4, device="neuron", dtype=torch.int64).cauchy_()
    with pytest.raises(RuntimeError, match="log_normal_"):
        torch.empty(4, device="neuron", dtype=torch.int64).log_normal_()
    assert math.isfinite(native(lambda: torch.empty(0, device="neuron").cauchy_()).sum().item())
