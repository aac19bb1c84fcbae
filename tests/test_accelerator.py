"""torch.accelerator, the device-agnostic API, reaching neuron."""

import torch


def test_device_index_roundtrip():
    assert torch.accelerator.current_device_index() == 0
    torch.accelerator.set_device_index(1)
    try:
        assert torch.neuron.current_device() == 1
        assert torch.empty(1, device="neuron").device.index == 1
    finally:
        torch.accelerator.set_device_index(0)
    with torch.accelerator.device_index(1):
        assert torch.accelerator.current_device_index() == 1
    assert torch.accelerator.current_device_index() == 0


def test_streams_and_synchronize():
    s = torch.Stream(device="neuron")
    assert s.device_type == torch.device("neuron").type or s.device.type == "neuron"
    prev = torch.accelerator.current_stream()
    torch.accelerator.set_stream(s)
    try:
        assert torch.accelerator.current_stream() == s
        assert torch.neuron.current_stream() == s
        x = torch.ones(1000).to("neuron").clone()
    finally:
        torch.accelerator.set_stream(prev)
    torch.accelerator.synchronize()
    assert x.sum().item() == 1000.0
    e = torch.Event(device="neuron")
    e.record(s)
    e.synchronize()
    assert e.query()


def test_memory_api():
    x = torch.empty(2**20, dtype=torch.uint8, device="neuron")
    assert torch.accelerator.memory_allocated() >= 2**20
    assert torch.accelerator.max_memory_allocated() >= torch.accelerator.memory_allocated()
    assert torch.accelerator.memory_reserved() >= torch.accelerator.memory_allocated()
    stats = torch.accelerator.memory_stats()
    assert stats["allocation.all.current"] >= 1
    del x
    torch.accelerator.empty_cache()
    torch.accelerator.reset_peak_memory_stats()
    assert torch.accelerator.max_memory_allocated() == torch.accelerator.memory_allocated()
