"""Random numbers on neuron: per-device generators, seeding, state."""

import pytest
import torch


def test_manual_seed_makes_neuron_random_reproducible():
    torch.manual_seed(123)
    a = torch.randn(100, device="neuron").cpu()
    torch.manual_seed(123)
    b = torch.randn(100, device="neuron").cpu()
    assert torch.equal(a, b)
    torch.neuron.manual_seed(5)
    c = torch.rand(10, device="neuron").cpu()
    torch.neuron.manual_seed(5)
    assert torch.equal(c, torch.rand(10, device="neuron").cpu())
    assert torch.neuron.initial_seed() == 5


def test_neuron_generator_is_independent_of_cpu():
    torch.manual_seed(0)
    torch.neuron.manual_seed(0)
    cpu_first = torch.randn(5)
    torch.manual_seed(0)
    torch.neuron.manual_seed(0)
    torch.randn(1000, device="neuron")  # must not advance the CPU generator
    assert torch.equal(torch.randn(5), cpu_first)


def test_rng_state_roundtrip():
    state = torch.neuron.get_rng_state()
    assert state.dtype == torch.uint8 and state.device.type == "cpu"
    a = torch.randn(10, device="neuron").cpu()
    torch.neuron.set_rng_state(state)
    assert torch.equal(torch.randn(10, device="neuron").cpu(), a)
    states = torch.neuron.get_rng_state_all()
    assert len(states) == torch.neuron.device_count()
    torch.neuron.set_rng_state_all(states)


def test_explicit_generators_and_devices():
    g = torch.Generator(device="neuron")
    assert g.device == torch.device("neuron:0")
    g.manual_seed(7)
    a = torch.randn(6, device="neuron", generator=g).cpu()
    g.manual_seed(7)
    assert torch.equal(torch.randn(6, device="neuron", generator=g).cpu(), a)
    torch.neuron.manual_seed_all(3)
    x0 = torch.randn(4, device="neuron:0").cpu()
    x1 = torch.randn(4, device="neuron:1").cpu()
    assert torch.equal(x0, x1)  # same seed, independent per-device streams
    d = torch.empty(1000, device="neuron").uniform_(2.0, 3.0)
    assert 2.0 <= d.min().item() and d.max().item() <= 3.0
    drop = torch.nn.functional.dropout(torch.ones(1000, device="neuron"), 0.5)
    assert 0 < (drop == 0).sum().item() < 1000


def _state(seed, offset):
    return torch.tensor([seed, offset], dtype=torch.int64).view(torch.uint8)


def _offset():
    return int(torch.neuron.get_rng_state()[8:].view(torch.int64))


def test_rng_state_is_seed_and_offset():
    # CUDA's layout, which DTensor's RNG tracker reads and writes: 8 bytes of
    # seed, 8 of offset; manual_seed restarts the offset, each op advances it
    # by its element count rounded up to a multiple of 4.
    torch.manual_seed(123)
    state = torch.neuron.get_rng_state()
    assert state.numel() == 16 and torch.equal(state, _state(123, 0))
    torch.rand(10, device="neuron")
    assert _offset() == 12
    torch.nn.functional.dropout(torch.ones(3, 5, device="neuron"), 0.5)
    assert _offset() == 28
    assert torch.neuron.initial_seed() == 123
    g = torch.Generator(device="neuron").manual_seed(4)
    torch.randn(8, device="neuron", generator=g)
    assert torch.equal(g.get_state(), _state(4, 8)) and _offset() == 28
    with pytest.raises(RuntimeError, match="wrong size"):
        torch.neuron.set_rng_state(torch.zeros(5056, dtype=torch.uint8))


@pytest.mark.parametrize(
    "op",
    [
        lambda n: torch.rand(n, device="neuron"),
        lambda n: torch.randn(n, device="neuron", dtype=torch.float64),
        lambda n: torch.empty(n, device="neuron").bernoulli_(0.3),
        lambda n: torch.randint(0, 1000, (n,), device="neuron"),
        lambda n: torch.nn.functional.dropout(torch.ones(n, device="neuron"), 0.4),
    ],
)
def test_offset_selects_the_counters(op):
    # Element i of a fill at offset o is counter o + i: starting at o + k
    # gives the tail of the fill from o (how a DTensor shard gets its part).
    torch.neuron.set_rng_state(_state(77, 8))
    whole = op(64).cpu()
    after = op(64).cpu()
    torch.neuron.set_rng_state(_state(77, 8 + 20))
    assert torch.equal(op(44).cpu(), whole[20:])
    assert _offset() == 8 + 64  # 20 + 44 counters: the same position as after `whole`
    assert torch.equal(op(64).cpu(), after)
    assert not torch.equal(after, whole)


def test_fallback_random_ops_follow_the_state():
    # An op without a native kernel draws from a CPU generator seeded from
    # the neuron generator's (seed, offset): reproducible, and it advances.
    import torch_neuronx

    rates = torch.full((200,), 3.0, device="neuron")
    torch_neuronx.clear_op_tracking()
    torch.manual_seed(9)
    a = torch.poisson(rates).cpu()
    assert "aten::poisson" in torch_neuronx.get_fallback_ops()
    assert _offset() == 4
    b = torch.poisson(rates).cpu()
    torch.manual_seed(9)
    assert torch.equal(torch.poisson(rates).cpu(), a)
    assert not torch.equal(a, b)
    assert abs(a.mean().item() - 3.0) < 0.5
