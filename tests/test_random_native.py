"""Native random fills on neuron (libtrn random.c, csrc/NeuronRandom.cpp):
no CPU fallback, the right distribution (moments, ranges, dtypes, strided
outputs), reproducible from the device generator, successive draws differ,
explicit generators, ATen's argument errors. The values are neuron's own
stream (like CUDA's), so they are compared to distributions, not to the CPU."""
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


@pytest.mark.parametrize("dtype", [torch.int64, torch.int32, torch.uint8, torch.float32, torch.bool])
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
