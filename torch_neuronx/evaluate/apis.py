"""Calls to APIs TorchNeuron does not support, seen at the call.

Owner: the wrappers put around the public functions of ``torch.sparse``,
``torch.nested``, ``torch.func``, ``torch.fft``, ``torch.distributions``
(every ``Distribution`` construction) and ``torch.distributed``'s
point-to-point calls, ``init_process_group`` (its backend), ``barrier`` on a
group other than the default one and ``all_to_all_single`` with split sizes
TorchNeuron rejects; in strict mode also ``set_device`` / ``device_count``
(strict_devices.py: one visible core per rank). A call is
recorded only when the caller is the user's code (PyTorch's own internal
uses are not the program's), with the source line and the documented limit.
``uninstall()`` restores every attribute.
"""

from __future__ import annotations

import functools
import inspect
import sys

import torch

from .locations import fmt, is_user_file

_NAMESPACES = {
    "sparse": "torch.sparse",
    "nested": "torch.nested",
    "func": "torch.func",
    "fft": "torch.fft",
}
_P2P = ("send", "recv", "isend", "irecv", "batch_isend_irecv", "monitored_barrier")


def _caller():
    f = sys._getframe(2)
    if f is not None and is_user_file(f.f_code.co_filename):
        return fmt(f.f_code.co_filename, f.f_lineno)
    return None


_TORCHAO_ENTRIES = (
    ("torchao.float8", "convert_to_float8_training"),
    ("torchao.quantization", "quantize_"),
)


class ApiWatch:
    def __init__(self, strict=None):
        self.strict = strict
        self.calls: dict[tuple, dict] = {}
        self.process_groups: list[dict] = []
        self._saved: list[tuple] = []

    def record(self, key: str, name: str, where: str):
        e = self.calls.setdefault(
            (name, where), {"api": name, "kind": key, "location": where, "count": 0}
        )
        e["count"] += 1
        if self.strict is not None:
            self.strict.api(key, name, where)

    def _patch(self, owner, attr, new):
        self._saved.append((owner, attr, owner.__dict__.get(attr, getattr(owner, attr))))
        setattr(owner, attr, new)

    def _wrap(self, key: str, qual: str, fn):
        watch = self

        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            where = _caller()
            if where is not None:
                watch.record(key, qual, where)
            return fn(*args, **kwargs)

        return wrapper

    def install(self) -> "ApiWatch":
        import importlib
        import importlib.util

        # TorchAO: its entry points, called from the program's own code
        # (transformers imports torchao whenever it is installed, so its
        # presence in sys.modules says nothing).
        if importlib.util.find_spec("torchao") is not None:
            for modname, attr in _TORCHAO_ENTRIES:
                try:
                    mod = importlib.import_module(modname)
                except Exception:  # a broken optional install is not the program's finding
                    continue
                if hasattr(mod, attr):
                    self._patch(
                        mod, attr, self._wrap("torchao", f"{modname}.{attr}", getattr(mod, attr))
                    )
        for key, modname in _NAMESPACES.items():
            mod = importlib.import_module(modname)
            for attr in getattr(mod, "__all__", None) or [
                a for a in dir(mod) if not a.startswith("_")
            ]:
                fn = getattr(mod, attr, None)
                if callable(fn) and not inspect.isclass(fn) and not inspect.ismodule(fn):
                    self._patch(mod, attr, self._wrap(key, f"{modname}.{attr}", fn))
        # Tensor.to_sparse*/ torch.sparse_coo_tensor: the usual ways into sparse.
        for attr in ("sparse_coo_tensor", "sparse_csr_tensor"):
            if hasattr(torch, attr):
                self._patch(
                    torch, attr, self._wrap("sparse", f"torch.{attr}", getattr(torch, attr))
                )
        for attr in ("to_sparse", "to_sparse_csr", "to_sparse_coo"):
            if hasattr(torch.Tensor, attr):
                self._patch(
                    torch.Tensor,
                    attr,
                    self._wrap("sparse", f"Tensor.{attr}", getattr(torch.Tensor, attr)),
                )
        import torch.distributions as D

        init = D.Distribution.__init__
        watch = self

        @functools.wraps(init)
        def dist_init(obj, *args, **kwargs):
            f = sys._getframe(1)
            while (
                f is not None
                and f.f_code.co_name == "__init__"
                and not is_user_file(f.f_code.co_filename)
            ):
                f = f.f_back  # subclasses' __init__ chain up to ours
            if f is not None and is_user_file(f.f_code.co_filename):
                watch.record(
                    "distributions",
                    f"torch.distributions.{type(obj).__name__}",
                    fmt(f.f_code.co_filename, f.f_lineno),
                )
            return init(obj, *args, **kwargs)

        self._patch(D.Distribution, "__init__", dist_init)
        if torch.distributed.is_available():
            import torch.distributed as dist

            for attr in _P2P:
                if hasattr(dist, attr):
                    self._patch(
                        dist,
                        attr,
                        self._wrap("send_recv", f"torch.distributed.{attr}", getattr(dist, attr)),
                    )
            ipg = dist.init_process_group

            @functools.wraps(ipg)
            def init_pg(*args, **kwargs):
                where = _caller()
                backend = kwargs.get("backend", args[0] if args else None)
                watch.process_groups.append(
                    {"backend": None if backend is None else str(backend), "location": where}
                )
                if watch.strict is not None:
                    watch.strict.process_group(None if backend is None else str(backend), where)
                out = ipg(*args, **kwargs)
                if watch.strict is not None and (backend is None or "neuron" in str(backend)):
                    watch.strict.devices.joined_process_group()
                return out

            self._patch(dist, "init_process_group", init_pg)
            self._patch_collectives(dist)
        if self.strict is not None:
            self._patch_devices()
        return self

    def _patch_collectives(self, dist) -> None:
        from . import strict_devices as sd

        watch = self
        barrier, a2a = dist.barrier, dist.all_to_all_single

        @functools.wraps(barrier)
        def barrier_(*args, **kwargs):
            where = _caller()
            group = kwargs.get("group", args[0] if args else None)
            if where is not None and sd.barrier_unsupported(group):
                watch.record("pg_barrier", "torch.distributed.barrier(group=<subgroup>)", where)
            return barrier(*args, **kwargs)

        @functools.wraps(a2a)
        def a2a_(output, input, output_split_sizes=None, input_split_sizes=None, *args, **kwargs):
            where = _caller()
            group = kwargs.get("group", args[0] if args else None)
            if (
                where is not None
                and (sd.uneven_split(output_split_sizes) or sd.uneven_split(input_split_sizes))
                and sd.neuron_group(group)
            ):
                watch.record(
                    "pg_alltoall",
                    f"torch.distributed.all_to_all_single(split sizes "
                    f"{list(input_split_sizes or [])} / {list(output_split_sizes or [])})",
                    where,
                )
            return a2a(output, input, output_split_sizes, input_split_sizes, *args, **kwargs)

        self._patch(dist, "barrier", barrier_)
        self._patch(dist, "all_to_all_single", a2a_)

    def _patch_devices(self) -> None:
        """Strict mode: set_device of an index the process cannot see fails
        at the call, and device_count() is 1 once the rank joined a neuron
        process group (what TorchNeuron reports then)."""
        import torch_neuronx
        from torch_neuronx import neuron

        checks = self.strict
        set_device, count = neuron.set_device, neuron.device_count

        @functools.wraps(set_device)
        def set_device_(device):
            where = _caller()
            if isinstance(device, int):
                index = device
            else:
                d = torch.device(device) if isinstance(device, str) else device
                index = d.index if isinstance(d, torch.device) and d.type == "neuron" else None
            if index is not None:
                checks.device_index(index, lambda: where)
            return set_device(device)

        @functools.wraps(count)
        def device_count_():
            return 1 if checks.devices.distributed else count()

        for owner in (neuron, torch_neuronx):
            self._patch(owner, "set_device", set_device_)
            self._patch(owner, "device_count", device_count_)
        acc = getattr(torch, "accelerator", None)
        if acc is not None and hasattr(acc, "device_count"):
            acc_count = acc.device_count
            self._patch(
                acc,
                "device_count",
                functools.wraps(acc_count)(
                    lambda: 1 if checks.devices.distributed else acc_count()
                ),
            )

    def uninstall(self) -> None:
        for owner, attr, old in reversed(self._saved):
            setattr(owner, attr, old)
        self._saved.clear()

    def findings(self) -> list[dict]:
        out = list(self.calls.values())
        for pg in self.process_groups:
            if pg["backend"] not in (None, "neuron") and "neuron" not in (pg["backend"] or ""):
                out.append(
                    {
                        "api": f"init_process_group(backend={pg['backend']!r})",
                        "kind": "pg_backend",
                        "location": pg["location"],
                        "count": 1,
                    }
                )
        return out
