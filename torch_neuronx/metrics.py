"""``torch_neuronx.metrics``: the device's counters and metrics (TorchNeuron's
metrics API).

Counters are kept by libtrn per device and are always on (one atomic add):
``kernel_launches``, ``cpu_fallbacks``, ``copies``, ``bytes_host_to_device``,
``bytes_device_to_host``, ``bytes_device_to_device``, ``compiles``,
``compile_ns``, ``compile_cache_hits``, ``compile_cache_misses``,
``compiled_graph_launches``, ``collectives``, ``collective_bytes``,
``out_of_memory_errors``, plus named counters other components add
(``counter_add``). Metrics are named samples (``metric_record``) summarised as
count / sum / min / max; recording them can be switched off
(``set_enabled(False)`` or ``TORCH_NEURONX_METRICS_ENABLED=0``).
``TORCH_NEURONX_METRICS_DIR`` writes ``report()`` as CSV there at exit.
"""

from __future__ import annotations

import atexit
import os
from typing import Any

from . import _C

_enabled = os.environ.get("TORCH_NEURONX_METRICS_ENABLED", "1").lower() not in (
    "0",
    "false",
    "off",
    "no",
)

# Fixed counters: the per-device figures libtrn keeps.
_COMPILE_COUNTERS = (
    "compiles",
    "compile_ns",
    "compile_cache_hits",
    "compile_cache_misses",
    "compiled_graph_launches",
)


def is_enabled() -> bool:
    return _enabled


def set_enabled(enabled: bool) -> None:
    global _enabled
    _enabled = bool(enabled)


def _named() -> dict[str, tuple[bool, int, float, float, float]]:
    return {
        name: (is_counter, count, total, lo, hi)
        for name, is_counter, count, total, lo, hi in _C._metrics()
    }


def _settle() -> None:
    """Graphs still compiling on torch.compile's compile threads are finished
    first, so the compile counters are complete when read or cleared."""
    from ._compile.metrics import settle

    settle()


def get_counter_names() -> list[str]:
    named = [n for n, v in _named().items() if v[0]]
    return list(_C._counters()) + named


def get_counter_value(name: str, device: "int | None" = None) -> int:
    """A counter's value on one device, or over all devices (``device=None``)."""
    _settle()
    fixed = _C._counters(-2 if device is None else int(device))
    if name in fixed:
        return int(fixed[name])
    named = _named()
    if name in named and named[name][0]:
        return int(named[name][2])
    raise KeyError(f"unknown neuron counter {name!r}; known: {get_counter_names()}")


def counter_add(name: str, delta: int = 1, device: "int | None" = None) -> None:
    """Add to a fixed counter (``device`` given) or to a named counter."""
    if name in _C._counters():
        _C._counter_add(name, -1 if device is None else int(device), int(delta))
    else:
        _C._named_counter_add(name, int(delta))


def get_metric_names() -> list[str]:
    return [n for n, v in _named().items() if not v[0]]


def get_metric_data(name: str) -> dict[str, float]:
    """``{"count", "sum", "min", "max", "mean"}`` of a metric."""
    v = _named().get(name)
    if v is None or v[0]:
        raise KeyError(f"unknown neuron metric {name!r}; known: {get_metric_names()}")
    _, count, total, lo, hi = v
    return {
        "count": count,
        "sum": total,
        "min": lo,
        "max": hi,
        "mean": total / count if count else 0.0,
    }


def metric_record(name: str, value: float) -> None:
    if _enabled:
        _C._metric_record(name, float(value))


def get_compilation_metrics() -> dict[str, int]:
    """Compile and cache counters, summed over devices."""
    _settle()
    counters = _C._counters()
    return {k: int(counters[k]) for k in _COMPILE_COUNTERS}


def clear_counters() -> None:
    _settle()
    _C._metrics_reset()


clear_metrics = clear_counters
clear_all = clear_counters


def _rows(names: "list[str] | None" = None) -> list[tuple[str, str, str]]:
    _settle()
    rows = [(name, "counter", str(v)) for name, v in _C._counters().items()]
    for name, (is_counter, count, total, lo, hi) in _named().items():
        if is_counter:
            rows.append((name, "counter", str(int(total))))
        else:
            mean = total / count if count else 0.0
            rows.append(
                (name, "metric", f"count={count} sum={total:g} min={lo:g} max={hi:g} mean={mean:g}")
            )
    return [r for r in rows if names is None or r[0] in names]


def report(device: "int | None" = None) -> str:
    """A readable table of every counter and metric."""
    rows = _rows()
    if device is not None:
        per = _C._counters(int(device))
        rows = [(n, k, str(per[n]) if n in per else v) for n, k, v in rows]
    width = max(len(r[0]) for r in rows)
    return "\n".join(f"{n:<{width}}  {v}" for n, _, v in rows)


def report_filtered(names: list[str]) -> str:
    rows = _rows(list(names))
    return "\n".join(f"{n}  {v}" for n, _, v in rows)


def _write_csv(directory: str) -> None:
    try:
        os.makedirs(directory, exist_ok=True)
        path = os.path.join(directory, f"neuron_metrics_{os.getpid()}.csv")
        with open(path, "w") as f:
            f.write("name,kind,value\n")
            for n, k, v in _rows():
                f.write(f"{n},{k},\"{v}\"\n")
    except OSError:
        pass


if os.environ.get("TORCH_NEURONX_METRICS_DIR"):
    atexit.register(_write_csv, os.environ["TORCH_NEURONX_METRICS_DIR"])


def _all() -> dict[str, Any]:
    _settle()
    return {"counters": _C._counters(), "metrics": _named()}
