"""``--map-device cuda=neuron``: run a CUDA (or neuron, or CPU) script on
another device without editing it.

Owner: the mapping. A TorchFunctionMode rewrites every ``device=`` argument
and the device argument of ``Tensor.to`` / ``Module.to`` (which calls
``Tensor.to``), and turns ``Tensor.cuda()`` into ``.to(target)``; the
``torch.cuda`` (or ``torch.neuron``) surface a script probes is patched to the
target's: ``is_available``, ``device_count``, ``current_device``,
``set_device``, ``synchronize``, the memory counters and seeding; and
``torch.autocast`` / ``torch.amp.GradScaler`` get the target device type.
Limits (docs/evaluate.md): ``torch.device("cuda")`` objects are mapped where
they are used, not where they are made, so ``x.device == torch.device("cuda")``
comparisons still see the mapped device; CUDA-only APIs (streams, graphs,
NCCL) are not mapped.
"""

from __future__ import annotations

import contextlib
import sys

import torch
from torch.overrides import TorchFunctionMode

from .locations import is_user_file


def parse(spec: "str | None") -> dict[str, str]:
    out = {}
    for part in (spec or "").split(","):
        part = part.strip()
        if not part:
            continue
        src, sep, dst = part.partition("=")
        if not sep or not src or not dst:
            raise ValueError(f"--map-device expects SRC=DST (e.g. cuda=neuron), got {part!r}")
        out[src.strip()] = dst.strip()
    return out


_RANDOM_FACTORIES = {
    torch.randn,
    torch.rand,
    torch.randint,
    torch.randperm,
    torch.normal,
    torch.bernoulli,
    torch.multinomial,
}


class DeviceMap(TorchFunctionMode):
    def __init__(self, mapping: dict[str, str], draw: "dict[str, str] | None" = None):
        super().__init__()
        self.mapping = dict(mapping)
        # Device types whose random factories draw from another device's
        # generator (then move): the CPU reference run draws what the device
        # run draws.
        self.draw = dict(draw or {})

    def dev(self, d):
        if isinstance(d, torch.device):
            if d.type in self.mapping:
                dst = self.mapping[d.type]
                return torch.device(dst, d.index if dst != "cpu" else None)
            return d
        if isinstance(d, str):
            typ, _, idx = d.partition(":")
            if typ in self.mapping:
                dst = self.mapping[typ]
                return dst if dst == "cpu" or not idx else f"{dst}:{idx}"
            return d
        if isinstance(d, int) and "cuda" in self.mapping and not isinstance(d, bool):
            return d
        return d

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = dict(kwargs or {})
        if "device" in kwargs and kwargs["device"] is not None:
            orig = kwargs["device"]
            kwargs["device"] = self.dev(orig)
            src = torch.device(orig).type
            if (
                func in _RANDOM_FACTORIES
                and src in self.draw
                and torch.device(kwargs["device"]).type == "cpu"
            ):
                # Draw from the device's generator, as the device run does, so
                # the CPU reference starts from the same numbers.
                rg = kwargs.pop("requires_grad", False)
                out = func(*args, **dict(kwargs, device=self.draw[src])).to("cpu")
                return out.requires_grad_(rg) if rg else out
        if func is torch.Tensor.cuda and "cuda" in self.mapping:
            dst = self.mapping["cuda"]
            idx = args[1] if len(args) > 1 else kwargs.pop("device", None)
            kwargs.pop("device", None)
            target = (
                dst
                if idx is None or dst == "cpu"
                else f"{dst}:{int(getattr(idx, 'index', idx) or 0)}"
            )
            return args[0].to(target, **kwargs)
        if func is torch.Tensor.to and len(args) > 1 and isinstance(args[1], (str, torch.device)):
            args = (args[0], self.dev(args[1])) + tuple(args[2:])
        return func(*args, **kwargs)


class _Patches:
    """Replacements seen only by the user's code: PyTorch's own callers (Dynamo
    saving the CUDA RNG state when CUDA "is available", ...) get the original."""

    def __init__(self):
        self.saved = []

    def set(self, owner, attr, value):
        if not hasattr(owner, attr):
            return
        old = getattr(owner, attr)
        self.saved.append((owner, attr, old))
        if isinstance(value, type):
            setattr(owner, attr, value)
            return

        def for_user(*args, **kwargs):
            if is_user_file(sys._getframe(1).f_code.co_filename):
                return value(*args, **kwargs)
            return old(*args, **kwargs)

        setattr(owner, attr, for_user)

    def restore(self):
        for owner, attr, old in reversed(self.saved):
            setattr(owner, attr, old)
        self.saved.clear()


def _device_module(dst: str):
    if dst == "cpu":
        return None
    return getattr(torch, dst)


@contextlib.contextmanager
def mapped(mapping: dict[str, str], draw: "dict[str, str] | None" = None):
    """Everything above, for the duration of the block (nothing when empty)."""
    if not mapping:
        yield
        return
    p = _Patches()
    for src, dst in mapping.items():
        mod = getattr(torch, src, None)
        target = _device_module(dst)
        if mod is None or mod is target or src == "neuron":
            # torch.neuron keeps working in a CPU run: its seeding must stay
            # real (torch.manual_seed seeds the device generator through it).
            continue
        if target is None:  # -> cpu
            p.set(mod, "is_available", lambda: True)
            p.set(mod, "device_count", lambda: 1)
            p.set(mod, "current_device", lambda: 0)
            p.set(mod, "set_device", lambda d: None)
            p.set(mod, "synchronize", lambda device=None: None)
            for name in (
                "memory_allocated",
                "max_memory_allocated",
                "memory_reserved",
                "max_memory_reserved",
            ):
                p.set(mod, name, lambda device=None: 0)
            p.set(mod, "reset_peak_memory_stats", lambda device=None: None)
            p.set(mod, "empty_cache", lambda: None)
            p.set(mod, "manual_seed", lambda s: None)
            p.set(mod, "manual_seed_all", lambda s: None)
            p.set(mod, "is_bf16_supported", lambda *a, **k: True)
        else:
            for name in (
                "is_available",
                "device_count",
                "current_device",
                "set_device",
                "synchronize",
                "memory_allocated",
                "max_memory_allocated",
                "memory_reserved",
                "max_memory_reserved",
                "reset_peak_memory_stats",
                "empty_cache",
                "manual_seed",
                "manual_seed_all",
                "get_device_name",
                "memory_stats",
            ):
                if hasattr(target, name):
                    p.set(mod, name, getattr(target, name))
            p.set(mod, "is_bf16_supported", lambda *a, **k: True)
    autocast = torch.autocast

    class MappedAutocast(autocast):
        def __init__(self, device_type, *args, **kwargs):
            super().__init__(mapping.get(device_type, device_type), *args, **kwargs)

    p.set(torch, "autocast", MappedAutocast)
    p.set(torch.amp, "autocast", MappedAutocast)
    scaler = torch.amp.GradScaler

    class MappedScaler(scaler):
        def __init__(self, device="cuda", *args, **kwargs):
            super().__init__(mapping.get(device, device), *args, **kwargs)

    p.set(torch.amp, "GradScaler", MappedScaler)
    mode = DeviceMap(mapping, draw)
    try:
        with mode:
            yield
    finally:
        p.restore()
