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
- devices as on a Trn2 (strict_devices.py): ``device_count()`` by the
  logical core configuration (``NEURON_LOGICAL_NC_CONFIG``,
  ``NEURON_RT_VISIBLE_CORES``, ``NEURON_RT_NUM_CORES``; one chip by default),
  one visible core per distributed rank (under a launcher, and after
  ``init_process_group``), so a rank that selects or touches another device
  index raises;
- the process-group errors TorchNeuron documents: ``init_process_group``
  after the program used the device, with more than one visible core, or
  with a backend Trainium lacks (nccl, mpi, ucc); ``barrier`` on a group
  other than the default one; ``all_to_all_single`` split sizes other than
  None or all ones;
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


class NeuronStrictNotImplementedError(NeuronStrictError, NotImplementedError):
    """Where TorchNeuron raises NotImplementedError (process-group calls it
    lacks): code that catches that catches this too."""


_NOT_IMPLEMENTED = ("send_recv", "pg_barrier", "pg_alltoall")


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
        from . import strict_devices

        self.raise_errors = raise_errors
        self._warned: set = set()
        self.devices = strict_devices.model().restart()

    def _fail(self, msg: str, key: str):
        text, src = LIMITS[key]
        cls = NeuronStrictNotImplementedError if key in _NOT_IMPLEMENTED else NeuronStrictError
        raise cls(f"TORCH_NEURONX_STRICT: {msg}. TorchNeuron: {text} ({src})")

    def device_op(self, kwargs, where_fn):
        """Before an op on the device: the first use is remembered (for
        init_process_group), and a ``device=`` the process cannot see fails."""
        m = self.devices
        if m.first_use is None:
            m.first_use = where_fn() or "?"
        dev = kwargs.get("device")
        if dev is None:
            return
        import torch

        d = torch.device(dev)
        if d.type == "neuron":
            self.device_index(d.index, where_fn)

    def device_index(self, index, where_fn):
        msg = self.devices.check_index(index)
        if msg is None or not self.raise_errors:
            return
        where = where_fn()
        if where is None:
            return  # PyTorch's or OpenNeuron's own use (an exit hook), not the program's
        key = "device_config" if self.devices.error is not None else "device_index"
        self._fail(f"{msg}, at {where}", key)

    def process_group(self, backend, where):
        failure = self.devices.check_process_group(backend)
        if failure is not None and self.raise_errors:
            self._fail(f"{failure[1]}, at {where or '?'}", failure[0])

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

    from . import apis, strict_devices

    strict_devices.configure()  # (before the runtime reads its device count)

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
            if on_neuron(args, kwargs):
                self.strict.device_op(kwargs, lambda: user_frame(3))
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
