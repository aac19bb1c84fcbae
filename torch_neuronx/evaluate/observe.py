"""The eager observer: a TorchDispatchMode that watches every op on neuron
tensors while the user's steps run.

Owner: per-op measurement in eager mode. For each op on a neuron tensor it
records the time spent in the op, whether it ran on the CPU fallback (the
device's ``cpu_fallbacks`` counter moved), the calling ``nn.Module`` path
(``torch.utils.module_tracker``, forward and backward) and, for findings,
the user's source line. It also collects the TorchNeuron-fidelity facts that
only the op stream shows: float64 results, int64 results outside int32 range,
sparse/nested results, convolutions on channels_last inputs. Strict mode
(strict.py) raises on the same checks through ``check_outputs``.
"""

from __future__ import annotations

import time
from collections import defaultdict

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils.module_tracker import ModuleTracker

from .. import _C
from .locations import user_frame

INT32_MIN, INT32_MAX = -(1 << 31), (1 << 31) - 1
_MAX_SHAPES = 6


def _tensors(args, kwargs):
    for a in list(args) + list((kwargs or {}).values()):
        if isinstance(a, torch.Tensor):
            yield a
        elif isinstance(a, (list, tuple)):
            for b in a:
                if isinstance(b, torch.Tensor):
                    yield b


def on_neuron(args, kwargs) -> bool:
    """The op reads a neuron tensor or creates one (``device=`` neuron)."""
    dev = kwargs.get("device") if kwargs else None
    if dev is not None and torch.device(dev).type == "neuron":
        return True
    return any(t.device.type == "neuron" for t in _tensors(args, kwargs))


def outputs_of(out):
    if isinstance(out, torch.Tensor):
        return [out]
    if isinstance(out, (list, tuple)):
        return [o for o in out if isinstance(o, torch.Tensor)]
    return []


def signature(args, kwargs) -> str:
    parts = []
    for t in _tensors(args, kwargs):
        parts.append(f"{str(t.dtype).replace('torch.', '')}{list(t.shape)}")
    return ", ".join(parts)


def module_path(tracker: ModuleTracker) -> str:
    names = [p for p in tracker.parents if p != "Global"]
    if not names:
        return "<top level>"
    return max(names, key=lambda n: (n.count("."), len(n)))


def op_name(func) -> str:
    return f"{func.namespace}::{func._schema.name.split('::')[-1]}"


def int64_out_of_range(t: torch.Tensor) -> "tuple[int, int] | None":
    if t.dtype != torch.int64 or t.numel() == 0 or t.device.type != "neuron":
        return None
    lo, hi = int(t.min().item()), int(t.max().item())
    if lo < INT32_MIN or hi > INT32_MAX:
        return lo, hi
    return None


class Fidelity:
    """TorchNeuron-fidelity facts seen in the op stream, one entry per site."""

    def __init__(self):
        self.float64: dict[tuple, dict] = {}
        self.int64: dict[tuple, dict] = {}
        self.layouts: dict[tuple, dict] = {}
        self.channels_last: dict[tuple, dict] = {}

    def check(self, func, args, kwargs, outs, module: str, where_fn, strict=None):
        name = None
        if (
            func is torch.ops.aten.convolution.default
            and args
            and isinstance(args[0], torch.Tensor)
        ):
            x = args[0]
            if (
                x.dim() == 4
                and not x.is_contiguous()
                and x.is_contiguous(memory_format=torch.channels_last)
            ):
                name = op_name(func)
                site = (name, where_fn())
                e = self.channels_last.setdefault(
                    site,
                    {
                        "op": name,
                        "location": site[1],
                        "module": module,
                        "count": 0,
                        "shape": list(x.shape),
                    },
                )
                e["count"] += 1
                if strict is not None:
                    strict.channels_last(name, site[1])
        for t in outs:
            if t.device.type != "neuron":
                continue
            if t.layout != torch.strided or t.is_nested:
                name = name or op_name(func)
                site = (name, where_fn())
                kind = "nested" if t.is_nested else "sparse"
                e = self.layouts.setdefault(
                    site,
                    {"op": name, "location": site[1], "module": module, "kind": kind, "count": 0},
                )
                e["count"] += 1
                continue
            if t.dtype == torch.float64:
                name = name or op_name(func)
                site = (name, where_fn())
                e = self.float64.setdefault(
                    site,
                    {"op": name, "location": site[1], "module": module, "count": 0, "shapes": []},
                )
                e["count"] += 1
                if len(e["shapes"]) < _MAX_SHAPES and list(t.shape) not in e["shapes"]:
                    e["shapes"].append(list(t.shape))
                if strict is not None:
                    strict.float64(name, site[1])
            elif t.dtype == torch.int64 and not func.is_view:
                r = int64_out_of_range(t)
                if r is not None:
                    name = name or op_name(func)
                    site = (name, where_fn())
                    e = self.int64.setdefault(
                        site,
                        {
                            "op": name,
                            "location": site[1],
                            "module": module,
                            "count": 0,
                            "min": r[0],
                            "max": r[1],
                            "shape": list(t.shape),
                        },
                    )
                    e["count"] += 1
                    e["min"], e["max"] = min(e["min"], r[0]), max(e["max"], r[1])
                    if strict is not None:
                        strict.int64(name, site[1], r)


class EagerObserver(TorchDispatchMode):
    """Measures each op on a neuron tensor (see the module docstring).
    ``active`` turns the measuring off (the ops still pass through)."""

    @classmethod
    def ignore_compile_internals(cls) -> bool:
        return True

    def __init__(self, tracker: ModuleTracker, strict=None):
        super().__init__()
        self.tracker = tracker
        self.strict = strict
        self.active = True
        self.fidelity = Fidelity()
        self.op_time = defaultdict(float)  # op -> seconds
        self.op_count = defaultdict(int)
        self.module_time = defaultdict(float)  # module path -> seconds (ops it ran directly)
        self.total_time = 0.0
        self.fallbacks: dict[tuple, dict] = {}  # (op, module, location) -> record
        self.ops_seen = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if not on_neuron(args, kwargs):
            return func(*args, **kwargs)
        if self.strict is not None:
            self.strict.device_op(kwargs, lambda: user_frame(3))
        if not self.active:
            return func(*args, **kwargs)
        c0 = _C._counters(-2)["cpu_fallbacks"]
        t0 = time.perf_counter()
        out = func(*args, **kwargs)
        dt = time.perf_counter() - t0
        fell_back = _C._counters(-2)["cpu_fallbacks"] > c0
        name = op_name(func)
        mod = module_path(self.tracker)
        self.ops_seen += 1
        self.op_time[name] += dt
        self.op_count[name] += 1
        self.module_time[mod] += dt
        self.total_time += dt
        if fell_back:
            where = user_frame(2)
            key = (name, mod, where)
            rec = self.fallbacks.get(key)
            if rec is None:
                rec = self.fallbacks[key] = {
                    "op": name,
                    "module": mod,
                    "location": where,
                    "backward": bool(self.tracker.is_bw),
                    "count": 0,
                    "seconds": 0.0,
                    "signatures": [],
                }
            rec["count"] += 1
            rec["seconds"] += dt
            sig = signature(args, kwargs)
            if len(rec["signatures"]) < _MAX_SHAPES and sig not in rec["signatures"]:
                rec["signatures"].append(sig)
        self.fidelity.check(
            func, args, kwargs, outputs_of(out), mod, lambda: user_frame(3), self.strict
        )
        return out
