"""Strict mode (``TORCH_NEURONX_STRICT=1``, ``neuron-evaluate --strict``):
behave like real TorchNeuron where OpenNeuron is more permissive, so a program
that passes here in strict mode should pass on Trainium.

Owner: what strict mode raises or warns, and its installation. It covers
(docs/evaluate.md lists the same):
- an int64 result on the device outside int32 range raises ``NeuronStrictError``
  (TorchNeuron computes int64 as int32: the value would wrap);
- float64 results warn once per op and source line that they are computed as
  float32, and float64 is forced to float32 compute
  (``TORCH_NEURONX_NATIVE_FLOAT64`` is ignored);
- the APIs TorchNeuron documents as unsupported raise ``NeuronStrictError`` when
  called: ``torch.sparse``, ``torch.nested``, ``torch.func``,
  ``torch.distributions``, ``torch.fft``; point-to-point (``send``/``recv``,
  ``isend``/``irecv``) and ``monitored_barrier`` of ``torch.distributed``;
- convolutions on channels_last inputs raise;
- ``torch.compile(backend="neuron")``'s documented errors are already the
  default (``dynamic=True`` raises, unlowerable ops fail the compile); strict
  mode also turns any ``fallback_execution`` back off
  (``TORCH_NEURONX_DISABLE_FALLBACK_EXECUTION=1``).
The op checks run in a TorchDispatchMode that torch.compile ignores while it
compiles (compiled graphs are not checked op by op).
"""

from __future__ import annotations

import os
import warnings

from .limits import LIMITS


class NeuronStrictError(RuntimeError):
    """Strict mode: real TorchNeuron would fail (or compute differently) here."""


def enabled() -> bool:
    return os.environ.get("TORCH_NEURONX_STRICT", "0").strip().lower() not in (
        "",
        "0",
        "false",
        "no",
        "off",
    )


class StrictChecks:
    """Called by the observers' fidelity checks; ``raise_errors`` False only
    records (neuron-evaluate collects findings rather than stopping)."""

    def __init__(self, raise_errors: bool = True):
        self.raise_errors = raise_errors
        self._warned: set = set()

    def _fail(self, msg: str, key: str):
        text, src = LIMITS[key]
        raise NeuronStrictError(f"TORCH_NEURONX_STRICT: {msg}. TorchNeuron: {text} ({src})")

    def int64(self, op: str, where, rng):
        if self.raise_errors:
            self._fail(
                f"{op} at {where or '?'} produced int64 values in [{rng[0]}, {rng[1]}], outside int32 "
                f"range",
                "int64",
            )

    def float64(self, op: str, where):
        if (op, where) in self._warned:
            return
        self._warned.add((op, where))
        warnings.warn(
            f"TORCH_NEURONX_STRICT: {op} at {where or '?'} produces float64; TorchNeuron computes it "
            f"as float32 ({LIMITS['float64'][1]})",
            stacklevel=2,
        )

    def channels_last(self, op: str, where):
        if self.raise_errors:
            self._fail(f"{op} at {where or '?'} convolves a channels_last input", "channels_last")

    def api(self, key: str, name: str, where):
        if self.raise_errors:
            self._fail(f"{name} called at {where or '?'}", key)


_installed = None


def install() -> None:
    """Process-wide strict mode (torch_neuronx calls this at import when
    TORCH_NEURONX_STRICT=1). Idempotent."""
    global _installed
    if _installed is not None:
        return
    os.environ["TORCH_NEURONX_NATIVE_FLOAT64"] = "0"
    os.environ["TORCH_NEURONX_DISABLE_FALLBACK_EXECUTION"] = "1"
    from torch.utils.module_tracker import ModuleTracker

    from . import apis

    checks = StrictChecks(raise_errors=True)
    tracker = ModuleTracker()
    tracker.__enter__()
    mode = StrictMode(tracker, checks)
    mode.__enter__()
    apis.ApiWatch(checks).install()
    _installed = mode


def _strict_mode_class():
    from .locations import user_frame
    from .observe import EagerObserver, module_path, on_neuron, outputs_of

    class _StrictMode(EagerObserver):
        """Only the fidelity checks (no timing, no fallback records)."""

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            kwargs = kwargs or {}
            out = func(*args, **kwargs)
            if on_neuron(args, kwargs) or any(t.device.type == "neuron" for t in outputs_of(out)):
                self.fidelity.check(
                    func,
                    args,
                    kwargs,
                    outputs_of(out),
                    module_path(self.tracker),
                    lambda: user_frame(3),
                    self.strict,
                )
            return out

    return _StrictMode


def StrictMode(tracker, checks):  # noqa: N802 - a class made lazily (observe imports _C)
    return _strict_mode_class()(tracker, checks)
