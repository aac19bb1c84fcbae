"""randperm, multinomial and the tensor-parameter forms of normal and
bernoulli_ on neuron (libtrn sample.c, csrc/aten/sample.cpp), natively,
as property tests (neuron's random stream is its own, like CUDA's):
permutations are valid, draws follow the weights, seeds reproduce,
get_rng_state / set_rng_state round-trip, explicit generators, every random
op used in training runs without fallback, and ATen's errors."""

import pytest
import torch

import torch_neuronx


def _native(fn):
    torch_neuronx.clear_op_tracking()
    out = fn()
    torch.neuron.synchronize()
    assert torch_neuronx.get_fallback_ops() == [], torch_neuronx.get_fallback_ops()
    return out


@pytest.mark.parametrize("dtype", [torch.int64, torch.int32, torch.float32, torch.float16])
def test_randperm_is_a_permutation(dtype):
    n = 2000 if dtype == torch.float16 else 50_000
    p = _native(lambda: torch.randperm(n, device="neuron", dtype=dtype)).cpu()
    assert p.dtype == dtype and torch.equal(p.long().sort().values, torch.arange(n))
    assert (p.long() == torch.arange(n)).sum() < 10  # shuffled
    assert _native(lambda: torch.randperm(0, device="neuron")).numel() == 0


def test_randperm_uniform_positions():
    # Each of 3! orders appears about equally often over 6000 draws.
    torch.manual_seed(0)
    perms = torch.stack([torch.randperm(3, device="neuron") for _ in range(6000)]).cpu()
    counts = {}
    for p in perms.tolist():
        counts[tuple(p)] = counts.get(tuple(p), 0) + 1
    assert len(counts) == 6 and all(abs(c - 1000) < 150 for c in counts.values())


def test_multinomial_distribution():
    w = torch.tensor([[1.0, 0.0, 2.0, 5.0], [0.0, 0.0, 3.0, 0.0]], device="neuron")
    s = _native(lambda: torch.multinomial(w, 40_000, replacement=True)).cpu()
    assert s.shape == (2, 40_000) and s.dtype == torch.int64
    assert (s[1] == 2).all() and not (s[0] == 1).any()
    freq = torch.bincount(s[0], minlength=4).double() / 40_000
    assert (freq - torch.tensor([1, 0, 2, 5]) / 8).abs().max() < 0.02
    for dtype in (torch.float16, torch.bfloat16, torch.float64):
        _native(lambda: torch.multinomial(w[0].to(dtype), 3))
    # Without replacement: distinct, zero weights only when nothing else is
    # left, the heaviest category drawn first about 5/8 of the time.
    firsts = torch.stack([torch.multinomial(w[0], 3) for _ in range(1000)]).cpu()
    assert (firsts != 1).all()
    assert (firsts.sort(1).values == torch.tensor([0, 2, 3])).all()
    assert abs((firsts[:, 0] == 3).double().mean() - 5 / 8) < 0.06
    assert (
        _native(lambda: torch.multinomial(torch.tensor([1.0, 0, 0], device="neuron"), 2)).cpu()[0]
        == 0
    )


def test_tensor_parameter_normal_and_bernoulli():
    mean = torch.tensor([0.0, 10.0, -5.0], device="neuron").repeat(20_000)
    std = torch.tensor([1.0, 2.0, 0.0], device="neuron").repeat(20_000)
    n = _native(lambda: torch.normal(mean, std)).cpu().view(-1, 3)
    assert (n.mean(0) - torch.tensor([0.0, 10.0, -5.0])).abs().max() < 0.05
    assert (n.std(0) - torch.tensor([1.0, 2.0, 0.0])).abs().max() < 0.05
    m = _native(lambda: torch.normal(mean, 3.0)).cpu().view(-1, 3)
    assert (m.std(0) - 3).abs().max() < 0.1
    f = _native(lambda: torch.normal(2.0, std)).cpu().view(-1, 3)
    assert (f.mean(0) - 2).abs().max() < 0.05
    p = torch.tensor([0.0, 0.3, 1.0], device="neuron").repeat(20_000)
    b = _native(lambda: torch.bernoulli(p)).cpu().view(-1, 3)
    assert b[:, 0].sum() == 0 and (b[:, 2] == 1).all() and abs(b[:, 1].mean() - 0.3) < 0.02
    z = torch.zeros(5, 60_000, dtype=torch.int64, device="neuron")
    _native(lambda: z.bernoulli_(torch.full((60_000,), 0.5, device="neuron")))
    assert abs(z.double().mean().item() - 0.5) < 0.01


def _draw_all():
    """One value of each random op training uses, from the default generator."""
    p = torch.tensor([0.2, 0.3, 0.5], device="neuron")
    x = torch.ones(64, device="neuron")
    return [
        torch.rand(8, device="neuron"),
        torch.randn(8, device="neuron"),
        torch.randint(0, 100, (8,), device="neuron"),
        torch.randperm(8, device="neuron"),
        torch.multinomial(p, 2),
        torch.normal(x, x),
        torch.bernoulli(p.expand(8, 3)),
        torch.empty(8, device="neuron").exponential_(),
        torch.nn.functional.dropout(x, 0.5),
    ]


def test_every_random_op_reproducible_and_stateful():
    torch.manual_seed(123)
    a = [t.cpu() for t in _native(_draw_all)]
    state = torch.neuron.get_rng_state()
    b = [t.cpu() for t in _draw_all()]
    torch.manual_seed(123)
    assert all(torch.equal(u, v) for u, v in zip(a, [t.cpu() for t in _draw_all()]))
    torch.neuron.set_rng_state(state)
    assert all(torch.equal(u, v) for u, v in zip(b, [t.cpu() for t in _draw_all()]))
    assert not all(torch.equal(u, v) for u, v in zip(a, b))  # the generator advanced
    g = torch.Generator(device="neuron").manual_seed(5)
    r1 = torch.randperm(100, device="neuron", generator=g).cpu()
    m1 = torch.multinomial(torch.ones(100, device="neuron"), 5, generator=g).cpu()
    g.manual_seed(5)
    assert torch.equal(torch.randperm(100, device="neuron", generator=g).cpu(), r1)
    assert torch.equal(
        torch.multinomial(torch.ones(100, device="neuron"), 5, generator=g).cpu(), m1
    )


def test_devices_are_independent():
    if torch.neuron.device_count() < 2:
        # One device: its stream must not depend on the CPU generator.
        torch.neuron.manual_seed(9)
        a = torch.randperm(50, device="neuron").cpu()
        torch.neuron.manual_seed(9)
        torch.rand(100)  # the CPU generator moves; neuron's does not
        assert torch.equal(torch.randperm(50, device="neuron").cpu(), a)
        return
    torch.neuron.manual_seed_all(9)
    a = torch.randperm(50, device="neuron:0").cpu()
    torch.neuron.manual_seed_all(9)
    torch.randperm(50, device="neuron:1")  # device 1 draws do not move device 0
    assert torch.equal(torch.randperm(50, device="neuron:0").cpu(), a)


def test_argument_errors():
    w = torch.tensor([1.0, -1.0], device="neuron")
    with pytest.raises(RuntimeError, match="probability tensor contains either `inf`, `nan`"):
        torch.multinomial(w, 1)
    with pytest.raises(RuntimeError, match="sum of probabilities <= 0"):
        torch.multinomial(torch.zeros(2, device="neuron"), 1, True)
    with pytest.raises(RuntimeError, match="cannot sample n_sample > prob_dist.size"):
        torch.multinomial(torch.ones(2, device="neuron"), 3)
    with pytest.raises(RuntimeError, match="prob_dist must be 1 or 2 dim"):
        torch.multinomial(torch.ones(2, 2, 2, device="neuron"), 1)
    with pytest.raises(RuntimeError, match="n cannot be greater than 2049 for Half"):
        torch.randperm(3000, dtype=torch.float16, device="neuron")
    with pytest.raises(RuntimeError, match="normal expects all elements of std >= 0.0"):
        torch.normal(torch.zeros(2, device="neuron"), torch.tensor([1.0, -1.0], device="neuron"))
    with pytest.raises(RuntimeError, match="Expected p_in >= 0 && p_in <= 1"):
        torch.empty(2, device="neuron").bernoulli_(torch.tensor([0.5, 2.0], device="neuron"))
