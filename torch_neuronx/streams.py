"""Streams and events of the neuron device.

``Stream`` and ``Event`` are ``torch.Stream`` / ``torch.Event`` bound to
``neuron``: every method (query, synchronize, wait_event, wait_stream,
record_event, elapsed_time) goes through the device guard into libtrn.
"""

from __future__ import annotations

from typing import Any

import torch

from . import _C
from ._device import _get_device_index, _lazy_init


def _stream_from_tuple(t) -> "Stream":
    stream_id, device_index, device_type = t
    return Stream(stream_id=stream_id, device_index=device_index, device_type=device_type)


class Stream(torch.Stream):
    """An in-order queue of work on one neuron device.

    ``Stream()`` takes the next stream of the device's pool (as CUDA does).
    """

    def __new__(cls, device: Any = None, priority: int = 0, **kwargs):
        if "stream_id" in kwargs:
            return super().__new__(cls, **kwargs)
        _lazy_init()
        index = _get_device_index(device)
        return super().__new__(cls, device=torch.device("neuron", index), priority=priority)

    def __repr__(self) -> str:
        return f"<torch_neuronx.Stream device=neuron:{self.device_index} id={self.stream_id}>"


class Event:
    """A marker in a stream: record, wait, query, synchronize, elapsed_time.

    Returns a ``torch.Event`` bound to a neuron device (torch.Event's
    elapsed_time accepts only exact torch.Event objects, so no subclass).
    """

    def __new__(
        cls,
        enable_timing: bool = False,
        blocking: bool = False,
        interprocess: bool = False,
        device: Any = None,
    ) -> torch.Event:
        if interprocess:
            raise NotImplementedError("neuron events cannot be shared between processes")
        _lazy_init()
        index = _get_device_index(device)
        return torch.Event(
            device=torch.device("neuron", index), enable_timing=enable_timing, blocking=blocking
        )


def current_stream(device: Any = None) -> Stream:
    _lazy_init()
    return _stream_from_tuple(_C._current_stream(_get_device_index(device)))


def default_stream(device: Any = None) -> Stream:
    _lazy_init()
    return _stream_from_tuple(_C._default_stream(_get_device_index(device)))


def set_stream(stream: torch.Stream | None) -> None:
    """Make ``stream`` the current stream of its device (None: no-op)."""
    if stream is None:
        return
    _lazy_init()
    _C._set_stream(stream.stream_id, stream.device_index)


class StreamContext:
    """Makes ``stream`` (and its device) current inside a ``with`` block."""

    def __init__(self, stream: torch.Stream | None):
        self.stream = stream
        self.src_prev = self.dst_prev = None
        self.prev_device = -1

    def __enter__(self):
        if self.stream is None:
            return self
        self.prev_device = _C._get_device()
        self.src_prev = current_stream(self.prev_device)
        if self.stream.device_index != self.prev_device:
            _C._set_device(self.stream.device_index)
            self.dst_prev = current_stream(self.stream.device_index)
        set_stream(self.stream)
        return self

    def __exit__(self, *exc):
        if self.stream is None:
            return False
        if self.dst_prev is not None:
            set_stream(self.dst_prev)
        set_stream(self.src_prev)
        _C._set_device(self.prev_device)
        return False


def stream(stream: torch.Stream | None) -> StreamContext:
    return StreamContext(stream)
