"""Dynamo's DeviceInterface for ``neuron`` (streams, events, device queries).

Registered for "neuron" and "neuron:i" as soon as torch._dynamo is imported,
before any compile: Dynamo caches its handlers on first use.
"""

from __future__ import annotations

import torch
from torch._dynamo.device_interface import DeviceInterface, register_interface_for_device

from .. import neuron as _neuron
from .. import streams as _streams


class _NeuronWorker:
    @staticmethod
    def set_device(device: int) -> None:
        _neuron.set_device(device)

    @staticmethod
    def current_device() -> int:
        return _neuron.current_device()

    @staticmethod
    def get_device_properties(device=None):
        return _neuron.get_device_properties(device)


class NeuronInterface(DeviceInterface):
    device = _neuron.device
    Event = torch.Event
    Stream = _streams.Stream
    Worker = _NeuronWorker

    @staticmethod
    def current_device() -> int:
        return _neuron.current_device()

    @staticmethod
    def set_device(device) -> None:
        _neuron.set_device(device)

    @staticmethod
    def maybe_exchange_device(device: int) -> int:
        prev = _neuron.current_device()
        if device != prev:
            _neuron.set_device(device)
        return prev

    @staticmethod
    def exchange_device(device: int) -> int:
        return NeuronInterface.maybe_exchange_device(device)

    @staticmethod
    def device_count() -> int:
        return _neuron.device_count()

    @staticmethod
    def is_available() -> bool:
        return _neuron.is_available()

    @staticmethod
    def stream(stream):
        return _streams.stream(stream)

    @staticmethod
    def current_stream():
        return _streams.current_stream()

    @staticmethod
    def set_stream(stream) -> None:
        _streams.set_stream(stream)

    @staticmethod
    def _set_stream_by_id(stream_id: int, device_index: int, device_type: int) -> None:
        _streams.set_stream(
            torch.Stream(stream_id=stream_id, device_index=device_index, device_type=device_type)
        )

    @staticmethod
    def get_raw_stream(device_index: int) -> int:
        return _streams.current_stream(device_index).stream_id

    @staticmethod
    def synchronize(device=None) -> None:
        _neuron.synchronize(device)

    @staticmethod
    def get_compute_capability(device=None) -> str:
        return "neuron"

    @staticmethod
    def is_bf16_supported(including_emulation: bool = False) -> bool:
        return True

    @staticmethod
    def memory_allocated(device=None) -> int:
        return _neuron.memory_allocated(device)


def register() -> None:
    register_interface_for_device("neuron", NeuronInterface)
    for i in range(max(_neuron.device_count(), 1)):
        register_interface_for_device(f"neuron:{i}", NeuronInterface)
