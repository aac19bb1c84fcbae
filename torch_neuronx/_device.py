"""Device selection and runtime state for ``torch.neuron`` (like ``torch.cuda``)."""

from __future__ import annotations

from typing import Any

import torch

from . import _C

_DeviceLike = "torch.device | str | int | None"


def is_available() -> bool:
    """True when at least one neuron device is visible."""
    return _C._device_count() > 0


def device_count() -> int:
    """Visible NeuronCores (``NEURON_RT_VISIBLE_CORES`` / ``NEURON_RT_NUM_CORES``; default 2)."""
    return _C._device_count()


def _is_in_bad_fork() -> bool:
    return _C._is_in_bad_fork()


def is_initialized() -> bool:
    return _C._is_initialized() and not _C._is_in_bad_fork()


def _lazy_init() -> None:
    if _C._is_in_bad_fork():
        raise RuntimeError(
            "Cannot re-initialize NEURON in forked subprocess. To use NEURON with "
            "multiprocessing, you must use the 'spawn' start method"
        )
    _C._init()


def init() -> None:
    """Start the runtime now instead of on first use."""
    _lazy_init()


def _get_device_index(device: Any = None, optional: bool = True) -> int:
    """Index of a neuron device given as int, str, torch.device or None (current)."""
    if device is None:
        return _C._get_device()
    if isinstance(device, str):
        device = torch.device(device)
    if isinstance(device, torch.device):
        if device.type != "neuron":
            raise ValueError(f"expected a neuron device, got {device}")
        index = _C._get_device() if device.index is None else device.index
    elif isinstance(device, int):
        index = device
    else:
        raise TypeError(f"invalid device {device!r}")
    _C._check_device(index)
    return index


def current_device() -> int:
    return _C._get_device()


def set_device(device: Any) -> None:
    index = _get_device_index(device)
    _C._set_device(index)


class device:
    """Context manager that makes ``device`` current for its body."""

    def __init__(self, device: Any):
        self.idx = -1 if device is None else _get_device_index(device)
        self.prev_idx = -1

    def __enter__(self):
        if self.idx >= 0:
            self.prev_idx = _C._get_device()
            if self.prev_idx != self.idx:
                _C._set_device(self.idx)

    def __exit__(self, *exc):
        if self.idx >= 0 and self.prev_idx != self.idx:
            _C._set_device(self.prev_idx)
        return False


class device_of(device):
    """Context manager selecting the device of a tensor (no-op for CPU tensors)."""

    def __init__(self, obj: torch.Tensor):
        super().__init__(obj.get_device() if obj.device.type == "neuron" else None)


def synchronize(device: Any = None) -> None:
    """Wait for all work queued on every stream of the device."""
    _lazy_init()
    _C._synchronize(_get_device_index(device))


class _NeuronDeviceProperties:
    def __init__(self, props: dict):
        self.name: str = props["name"]
        self.total_memory: int = props["total_memory"]
        self.core_count: int = props["core_count"]

    def __repr__(self) -> str:
        return (
            f"_NeuronDeviceProperties(name='{self.name}', "
            f"total_memory={self.total_memory // (1024 * 1024)}MB, "
            f"core_count={self.core_count})"
        )


def get_device_properties(device: Any = None) -> _NeuronDeviceProperties:
    return _NeuronDeviceProperties(_C._get_device_properties(_get_device_index(device)))


def get_device_name(device: Any = None) -> str:
    return get_device_properties(device).name


def get_device_capability(device: Any = None) -> tuple[int, int]:
    _get_device_index(device)
    return (3, 0)  # NeuronCore-v3, the generation this software core models
