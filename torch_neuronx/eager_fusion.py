"""Adaptive Eager Execution (docs/adaptive-eager.md): eager elementwise ops
queued on a stream run as one fused kernel built by the graph compiler, with
the same bits as unfused execution.

On by default. Switches: ``TORCH_NEURONX_EAGER_FUSION=0`` (TorchNeuron's
internal ``TORCH_NEURONX_ENABLE_CONCATENATION`` is read when ours is unset) or
``set_enabled(False)``; ``torch.use_deterministic_algorithms(True)`` and any
nonzero ``torch.set_deterministic_debug_mode`` turn it off while set. The
recorder, caches and compile thread are C++ (csrc/aten/eager_group_*.cpp); this
module gives them torch.compile's compiler settings and reads their state
back for users and tests.
"""

from __future__ import annotations

import atexit

from . import _C

# Before the interpreter finalizes: the C++ compile thread must not take the
# GIL from then on (it asks _compile_settings below of Python).
atexit.register(_C._eager_fusion_python_exiting)


def _compile_settings() -> tuple:
    """What the C++ compile thread asks once, when the first fused group
    compiles: torch.compile(backend="neuron")'s headers, disk cache, -O level
    (as libtrn takes it), extra flags, lock timeout and cache bound."""
    from ._compile.config import (
        _include_dir,
        cache_dir,
        cache_lock_timeout,
        cache_max_bytes,
        cc_settings,
    )

    cc = cc_settings()
    cache = cache_dir()
    return (
        _include_dir(),
        cache,
        cc.opt_level + 1,
        cc.extra_flags,
        cache_lock_timeout(),
        cache_max_bytes() if cache else 0,
    )


def set_enabled(enabled: bool) -> None:
    """Switches fusion on or off for the process (an open group runs first)."""
    _C._eager_fusion_set_enabled(bool(enabled))


def is_enabled() -> bool:
    """Whether ops are being grouped now: switched on and not under
    deterministic algorithms."""
    return bool(_C._eager_fusion_active())


def set_adaptive(enabled: bool) -> None:
    """With ``True`` (the default) a compiled pattern first runs fused and
    unfused in turn, timed, and keeps the faster (same bits either way);
    ``False``: a compiled pattern always runs fused. Decided patterns keep
    their choice until ``clear_cache()``."""
    _C._eager_fusion_set_adaptive(1 if enabled else 0)


def is_adaptive() -> bool:
    return _C._eager_fusion_adaptive() == 1


def flush() -> None:
    """Runs the open group and any held foreach chain now (a synchronize does this too)."""
    _C._eager_fusion_flush()


def wait_for_compiles(timeout: float = 300.0) -> bool:
    """Waits until no fused group is compiling in the background; False on timeout."""
    return bool(_C._eager_fusion_wait(float(timeout)))


def stats() -> dict:
    """Pattern cache: ``patterns`` seen, ``ready`` (compiled), ``compiling``,
    ``failed``; of the ready ones ``chosen_fused`` and ``declined`` (timed
    slower fused than unfused, so run unfused); ``lone_starts``: op
    signatures that twice formed a group alone and now launch at once."""
    return dict(_C._eager_fusion_stats())


def recent_groups() -> list[dict]:
    """The last groups of two or more ops (oldest first): ops, end reason, fused or replayed."""
    return [
        {"n_ops": n, "end": end, "fused": fused, "ops": ops.split(",")}
        for n, end, fused, ops in _C._eager_fusion_log()
    ]


def clear_recent_groups() -> None:
    _C._eager_fusion_clear_log()


def clear_cache() -> None:
    """Forgets every compiled pattern in memory (the disk cache stays)."""
    _C._eager_fusion_clear_cache()
