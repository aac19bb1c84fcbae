"""Device memory queries for ``torch.neuron`` (mirrors ``torch.cuda.memory``).

The numbers come from libtrn's caching allocator through the same
``c10::DeviceAllocator`` that serves ``torch.accelerator.memory_*``. The
capacity is the emulated HBM size (``TORCH_NEURONX_HBM_SIZE``).
"""

from __future__ import annotations

from typing import Any

import torch

from . import _C
from ._device import _get_device_index


def memory_stats(device: Any = None) -> dict[str, Any]:
    """CUDA-style flat dict: ``allocated_bytes.all.current``, ``num_ooms``, ..."""
    index = _get_device_index(device)
    if not _C._is_initialized():
        return {}
    return torch.accelerator.memory_stats(index)


def memory_allocated(device: Any = None) -> int:
    return _raw(device)["allocated_bytes"]


def max_memory_allocated(device: Any = None) -> int:
    return _raw(device)["allocated_bytes_peak"]


def memory_reserved(device: Any = None) -> int:
    return _raw(device)["reserved_bytes"]


def max_memory_reserved(device: Any = None) -> int:
    return _raw(device)["reserved_bytes_peak"]


def reset_peak_memory_stats(device: Any = None) -> None:
    torch.accelerator.reset_peak_memory_stats(_get_device_index(device))


def reset_accumulated_memory_stats(device: Any = None) -> None:
    torch.accelerator.reset_accumulated_memory_stats(_get_device_index(device))


def empty_cache() -> None:
    """Release cached, unused blocks of every device back to the host."""
    torch.accelerator.empty_cache()


def mem_get_info(device: Any = None) -> tuple[int, int]:
    """(free, total) bytes of the device's emulated HBM."""
    stats = _raw(device)
    return stats["capacity"] - stats["reserved_bytes"], stats["capacity"]


def _raw(device: Any) -> dict[str, int]:
    return _C._memory_stats(_get_device_index(device))


def _fmt(n: int) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.2f} {unit}" if unit != "B" else f"{n} B"
        n /= 1024
    return f"{n} B"


def memory_summary(device: Any = None, abbreviated: bool = False) -> str:
    """A readable table of the allocator's state for one device."""
    index = _get_device_index(device)
    s = _C._memory_stats(index)
    rows = [
        ("Allocated memory", _fmt(s["allocated_bytes"]), _fmt(s["allocated_bytes_peak"])),
        ("Requested memory", _fmt(s["requested_bytes"]), _fmt(s["requested_bytes_peak"])),
        ("Reserved memory", _fmt(s["reserved_bytes"]), _fmt(s["reserved_bytes_peak"])),
        ("Active blocks", str(s["active_blocks"]), str(s["active_blocks_peak"])),
        ("Segments", str(s["segments"]), str(s["segments_peak"])),
    ]
    lines = [
        f"neuron:{index} memory summary (capacity {_fmt(s['capacity'])})",
        f"{'':24}{'current':>16}{'peak':>16}",
    ]
    lines += [f"{name:24}{cur:>16}{peak:>16}" for name, cur, peak in rows]
    if not abbreviated:
        lines.append(
            f"allocs {s['num_allocs']}, frees {s['num_frees']}, "
            f"cache flushes {s['num_alloc_retries']}, OOMs {s['num_ooms']}"
        )
    return "\n".join(lines)


# ---- limits, snapshots and memory history (torch.cuda.memory's API) ---------


def set_per_process_memory_fraction(fraction: float, device: Any = None) -> None:
    """Cap this process's reserved memory on ``device`` at ``fraction`` of its
    capacity. The allocator enforces it: a request past the cap empties the
    cache, then raises ``torch.OutOfMemoryError``."""
    if not isinstance(fraction, (int, float)) or isinstance(fraction, bool):
        raise TypeError(f"fraction must be a float, got {type(fraction).__name__}")
    if not 0.0 <= fraction <= 1.0:
        raise ValueError(f"fraction must be in [0, 1], got {fraction}")
    index = _get_device_index(device)
    capacity = _raw(index)["capacity"]
    _C._set_memory_limit(index, 0 if fraction >= 1.0 else int(capacity * fraction))


def get_per_process_memory_fraction(device: Any = None) -> float:
    index = _get_device_index(device)
    return _C._memory_limit(index) / _raw(index)["capacity"]


def _record_memory_history(
    enabled: "str | None | bool" = "all",
    context: "str | None" = "all",
    stacks: str = "python",
    max_entries: int = 0,
    device: Any = None,
    **_ignored: Any,
) -> None:
    """Start (or with ``enabled=None``/``False`` stop) recording allocator
    events with the Python stack of each allocation, as
    ``torch.cuda.memory._record_memory_history`` does. ``stacks="all"`` adds
    C++ frames. ``max_entries`` bounds the event ring (0: unbounded)."""
    if stacks not in ("python", "all"):
        raise ValueError(f"stacks must be 'python' or 'all', got {stacks!r}")
    on = enabled not in (None, False)
    if on and enabled not in (True, "all", "state"):
        raise ValueError(f"enabled must be None, 'state' or 'all', got {enabled!r}")
    _C._record_memory_history(on, int(max_entries), stacks == "all")


def _snapshot(device: Any = None) -> dict[str, Any]:
    """Segments, blocks (with allocation stacks) and the event history of
    every device, in the layout torch.cuda.memory._snapshot() returns."""
    return _C._memory_snapshot()


def _dump_snapshot(filename: str = "dump_snapshot.pickle") -> None:
    """Pickle ``_snapshot()`` to ``filename``; open it at
    https://pytorch.org/memory_viz or with ``torch.cuda._memory_viz``."""
    import pickle

    with open(filename, "wb") as f:
        pickle.dump(_snapshot(), f)


def memory_snapshot(mempool_id: Any = None) -> list[dict[str, Any]]:
    """The segments of every device (``_snapshot()["segments"]``)."""
    return _snapshot()["segments"]
