"""Adaptive Eager Execution (docs/adaptive-eager.md): eager elementwise ops
queued on a stream run as one fused kernel built by the graph compiler, with
the same bits as unfused execution.

Switches: ``TORCH_NEURONX_EAGER_FUSION=1`` (TorchNeuron's internal
``TORCH_NEURONX_ENABLE_CONCATENATION`` is read when ours is unset) or
``set_enabled(True)``; ``torch.use_deterministic_algorithms(True)`` and any
nonzero ``torch.set_deterministic_debug_mode`` turn it off while set. The
recorder, caches and compile thread are C++ (csrc/aten/eager_group.cpp); this
module hands them the compiler settings torch.compile uses and reads them
back for users and tests.
"""

from __future__ import annotations

from . import _C

_configured = False


def _configure() -> None:
    """Gives the recorder the compile settings of torch.compile(backend="neuron")
    (headers, disk cache, -O level, extra flags), once."""
    global _configured
    if _configured:
        return
    from ._compile.config import (
        _include_dir,
        cache_dir,
        cache_lock_timeout,
        cache_max_bytes,
        cc_settings,
    )

    cc = cc_settings()
    cache = cache_dir()
    _C._eager_fusion_configure(
        _include_dir(),
        cache,
        cc.opt_level + 1,
        cc.extra_flags,
        cache_lock_timeout(),
        cache_max_bytes() if cache else 0,
    )
    _configured = True


def set_enabled(enabled: bool) -> None:
    """Switches fusion on or off for the process (an open group runs first)."""
    if enabled:
        _configure()
    _C._eager_fusion_set_enabled(bool(enabled))


def is_enabled() -> bool:
    """Whether ops are being grouped now: switched on and not under
    deterministic algorithms."""
    return bool(_C._eager_fusion_active())


def flush() -> None:
    """Runs the open group now (a synchronize does this too)."""
    _C._eager_fusion_flush()


def wait_for_compiles(timeout: float = 300.0) -> bool:
    """Waits until no fused group is compiling in the background; False on timeout."""
    return bool(_C._eager_fusion_wait(float(timeout)))


def stats() -> dict:
    """Pattern cache: ``patterns`` seen, ``ready`` (compiled), ``compiling``, ``failed``."""
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


def _init_from_env() -> None:
    """At import: configure when the environment switched fusion on."""
    if _C._eager_fusion_switched_on():
        _configure()
