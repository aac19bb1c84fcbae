"""Compile metrics: what get_dynamo_metrics() reports (TorchNeuron's API)."""

from __future__ import annotations

import threading

_lock = threading.Lock()
_FIELDS = (
    "graphs",
    "compiles",
    "cache_hits",
    "memory_cache_hits",
    "disk_cache_hits",
    "compile_seconds",
    "cc_seconds",
    "fallback_graphs",
    "host_steps",
    "kernels",
    "lowerings",
    "warm_graphs",
    "warm_rejected",
    "warm_unsaved",
    "warm_lock_waits",
    "warm_lock_seconds",
    "compile_wait_seconds",
    "shape_graphs",
    "collectives",
    "extern_kernels",
)
_metrics = dict.fromkeys(_FIELDS, 0)
_settlers: list = []  # jobs.py's finish_pending, once it is loaded (on_settle)


def add(**kw) -> None:
    with _lock:
        for k, v in kw.items():
            _metrics[k] += v


def on_settle(fn) -> None:
    """``fn()`` runs at every settle(): jobs.py registers its finish_pending
    when it loads (this module imports nothing of the package)."""
    _settlers.append(fn)


def settle() -> None:
    """Finishes the graphs still compiling on the compile threads (their
    counts are added when they finish); a failed one raises at its own call."""
    for fn in list(_settlers):
        fn()


def get_dynamo_metrics() -> dict:
    """Counters since the last reset: graphs lowered, ``compiles`` (C compiler
    runs), ``cache_hits`` (graphs that compiled nothing: in memory or on disk),
    ``compile_seconds`` (backend time, lowering included), ``cc_seconds`` (C
    compiler only), ``fallback_graphs`` (graphs run eagerly), ``host_steps``
    (eager ops inside compiled graphs), ``kernels`` (generated), ``lowerings``
    (FX graphs lowered), ``warm_graphs`` (Dynamo graphs loaded from the warm
    cache: no AOTAutograd trace, no lowering), ``warm_rejected`` (entries that
    failed verification), ``warm_unsaved`` (graphs that could not be
    cached), ``warm_lock_waits`` / ``warm_lock_seconds`` (graphs whose warm
    entry another process sharing the cache directory was making, and the
    time spent waiting for it, see _compile/shared.py), ``compile_wait_seconds`` (time graphs' first calls waited for
    the compile threads: the part of the C compiles nothing overlapped) and
    ``shape_graphs`` (static graphs compiled for a new input shape of a graph
    Dynamo made dynamic on its own, see _compile/shapes.py) and
    ``collectives`` (functional collectives lowered into compiled graphs as
    asynchronous start / wait steps, see _compile/lower_collective.py) and
    ``extern_kernels`` (extern steps in the graphs compiled or loaded, like
    ``kernels``: kernel calls the program makes itself, no host step - NKI
    kernels, _compile/lower_nki.py, and torch._grouped_mm,
    _compile/lower_grouped_mm.py)."""
    settle()
    with _lock:
        return dict(_metrics)


def reset_dynamo_metrics() -> None:
    settle()
    with _lock:
        for k in _metrics:
            _metrics[k] = 0
