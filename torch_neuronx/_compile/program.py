"""A compiled graph's program: rebuilt from its builder tape on a warm start,
and reported (metrics, counters, log) however it was made.

Owner: ``rebuild_program`` (what a warm graph's first call or AOTAutograd's
``post_compile`` runs) and ``_report_compile``. Used by runtime.py and
jobs.py; imports neither.
"""

from __future__ import annotations

import time

import torch

from .. import _C, _logging
from . import metrics
from .config import CcSettings, _include_dir, cache_dir, compile_program, debug_dir
from .tape import replay


def rebuild_program(tape, name: str, device: torch.device, cc: CcSettings | None = None):
    """A compiled graph's program from its builder tape (a warm start): the
    schedule and C source are made again, the shared object comes from the
    disk cache (compiled only if it is missing there)."""
    t0 = time.perf_counter()
    ddir = debug_dir()
    program = compile_program(
        replay(tape), _include_dir(), cache_dir(), ddir, name, cc or CcSettings()
    )
    if program.from_cache:
        metrics.add(cache_hits=1, disk_cache_hits=1)
    else:
        metrics.add(compiles=1, cc_seconds=program.compile_seconds)
    seconds = time.perf_counter() - t0
    metrics.add(
        graphs=1,
        kernels=program.kernel_count,
        extern_kernels=program.extern_count,
        compile_seconds=seconds,
    )
    _report_compile(name, program, seconds, device.index or 0)
    return program


def _report_compile(name: str, program, seconds: float, device: int) -> None:
    """The same event in TorchNeuron's metrics API (torch_neuronx.metrics:
    compiles, compile_ns, cache hits/misses per device) and in the log."""
    if program.from_cache:
        _C._counter_add("compile_cache_hits", device, 1)
    else:
        _C._counter_add("compile_cache_misses", device, 1)
        _C._counter_add("compiles", device, 1)
    _C._counter_add("compile_ns", device, int(seconds * 1e9))
    _logging.log(
        _logging.INFO,
        "compile",
        f"graph {name}: {program.kernel_count} kernels, "
        f"{'disk cache hit' if program.from_cache else 'compiled'} in {seconds * 1e3:.0f} ms",
    )
