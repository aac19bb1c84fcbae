"""Random numbers on neuron: per-device generators, seeding, state."""
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
