"""Shadow numerics: a TorchDispatchMode that re-runs each device op on the
CPU with the same inputs (copied before the device op runs, so in-place ops
see the same values) and once more in float64, and records the device's
error against both, by op and by module.

Owner: the error metric and the divergence rule. Error of a result ``y``
against a reference ``r``: ``max|y - r| / max(max|r|, tiny)`` over floating
outputs (inf when non-finite values differ). An op *diverges* when its error
against the CPU exceeds the dtype's tolerance AND its error against float64
exceeds ``10 x`` the CPU's own error against float64 (so ill-conditioned ops,
where the CPU is just as far from float64, are not blamed on the device).
Ops that draw random numbers are not compared (the device's generator is not
the CPU's).
"""
from __future__ import annotations

import math
from collections import defaultdict

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_map

from .locations import user_frame
from .observe import module_path, on_neuron, op_name, outputs_of

TOLERANCE = {torch.float32: 1e-3, torch.float64: 1e-3, torch.float16: 1e-2, torch.bfloat16: 2e-2}
_SKIP_OPS = {"aten::empty", "aten::empty_strided", "aten::empty_like", "aten::new_empty",
             "aten::new_empty_strided", "aten::set_", "aten::resize_", "aten::_local_scalar_dense"}


def rel_error(y: torch.Tensor, r: torch.Tensor) -> float:
    """``max|y - r| / max|r|`` (both converted to float64); inf when their
    non-finite values differ."""
    if y.shape != r.shape or y.numel() == 0:
        return 0.0
    y = y.detach().to(torch.float64)
    r = r.detach().to(torch.float64)
    d = float((y - r).abs().max())
    if math.isfinite(d):
        return d / max(float(r.abs().max()), 1e-30)
    fy, fr = torch.isfinite(y), torch.isfinite(r)
    if not torch.equal(fy, fr) or not torch.equal(y[~fr], r[~fr]):
        return float("inf")
    y, r = y[fr], r[fr]
    if y.numel() == 0:
        return 0.0
    return float((y - r).abs().max()) / max(float(r.abs().max()), 1e-30)


def _to_cpu(x, dtype64=False):
    if isinstance(x, torch.Tensor):
        c = x.detach().to("cpu", copy=True)
        if dtype64 and c.is_floating_point():
            c = c.to(torch.float64)
        return c
    if isinstance(x, torch.device) and x.type == "neuron":
        return torch.device("cpu")
    return x


def _to_f64(c):
    if isinstance(c, torch.Tensor):
        return c.to(torch.float64) if c.is_floating_point() else c.clone()
    return c


def _kw_cpu(kwargs, dtype64):
    out = {}
    for k, v in kwargs.items():
        if k == "device" and v is not None:
            out[k] = torch.device("cpu")
        elif k == "dtype" and dtype64 and v in (torch.float32, torch.float16, torch.bfloat16):
            out[k] = torch.float64
        else:
            out[k] = tree_map(lambda a: _to_cpu(a, dtype64), v)
    return out


class ShadowNumerics(TorchDispatchMode):
    @classmethod
    def ignore_compile_internals(cls) -> bool:
        return True

    def __init__(self, tracker):
        super().__init__()
        self.tracker = tracker
        self.by_op = defaultdict(lambda: {"count": 0, "max_error_cpu": 0.0, "max_error_f64": 0.0,
                                          "max_cpu_error_f64": 0.0})
        self.by_module = defaultdict(lambda: {"ops": 0, "max_error_cpu": 0.0, "max_error_f64": 0.0})
        self.first_divergence = None
        self.divergences: dict[tuple, dict] = {}
        self.compared = 0
        self.skipped = 0
        self.random_ops: dict[str, int] = defaultdict(int)
        self.index = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if not on_neuron(args, kwargs):
            return func(*args, **kwargs)
        name = op_name(func)
        if name in _SKIP_OPS or torch.Tag.nondeterministic_seeded in func.tags or func.is_view:
            self.skipped += 1
            if torch.Tag.nondeterministic_seeded in func.tags and \
                    any(isinstance(a, torch.Tensor) for a in args):
                # (dropout, normal_, ...: the CPU reference run draws factory
                # randoms like randn from the device generator, not these.)
                self.random_ops[name] += 1
            return func(*args, **kwargs)
        cpu_args = tree_map(_to_cpu, args)
        cpu_kwargs = _kw_cpu(kwargs, False)
        # float64 copies from the CPU copies (one device read per input).
        f64_args = tree_map(_to_f64, cpu_args)
        f64_kwargs = _kw_cpu(cpu_kwargs, True)
        out = func(*args, **kwargs)
        try:
            ref = func(*cpu_args, **cpu_kwargs)
            ref64 = func(*f64_args, **f64_kwargs)
        except Exception:  # noqa: BLE001 - an op the CPU cannot run with these inputs: not compared
            self.skipped += 1
            return out
        self.index += 1
        self._compare(func, name, args, out, ref, ref64, cpu_args, f64_args)
        return out

    def _compare(self, func, name, args, out, ref, ref64, cpu_args, f64_args):
        outs, refs, refs64 = outputs_of(out), outputs_of(ref), outputs_of(ref64)
        if not outs and func._schema.is_mutable:
            # In-place / out= ops whose results are their mutated arguments.
            outs = [a for a in args if isinstance(a, torch.Tensor)][:1]
            refs = [a for a in cpu_args if isinstance(a, torch.Tensor)][:1]
            refs64 = [a for a in f64_args if isinstance(a, torch.Tensor)][:1]
        e_cpu = e_64 = c_64 = 0.0
        tol = None
        for y, r, r64 in zip(outs, refs, refs64):
            if not (y.is_floating_point() and r.is_floating_point()):
                continue
            yc = y.detach().to("cpu", torch.float64)
            rc = r.to(torch.float64)
            e_cpu = max(e_cpu, rel_error(yc, rc))
            e_64 = max(e_64, rel_error(yc, r64))
            c_64 = max(c_64, rel_error(rc, r64))
            t = TOLERANCE.get(y.dtype, 1e-3)
            tol = t if tol is None else max(tol, t)
        if tol is None:
            return
        self.compared += 1
        mod = module_path(self.tracker)
        o = self.by_op[name]
        o["count"] += 1
        o["max_error_cpu"] = max(o["max_error_cpu"], e_cpu)
        o["max_error_f64"] = max(o["max_error_f64"], e_64)
        o["max_cpu_error_f64"] = max(o["max_cpu_error_f64"], c_64)
        m = self.by_module[mod]
        m["ops"] += 1
        m["max_error_cpu"] = max(m["max_error_cpu"], e_cpu)
        m["max_error_f64"] = max(m["max_error_f64"], e_64)
        if e_cpu > tol and e_64 > max(tol, 10 * c_64):
            where = user_frame(2)
            key = (name, mod, where)
            d = self.divergences.get(key)
            if d is None:
                d = self.divergences[key] = {"op": name, "module": mod, "location": where,
                                             "backward": bool(self.tracker.is_bw), "count": 0,
                                             "error_cpu": e_cpu, "error_f64": e_64, "cpu_error_f64": c_64,
                                             "tolerance": tol, "op_index": self.index}
            d["count"] += 1
            d["error_cpu"] = max(d["error_cpu"], e_cpu)
            if self.first_divergence is None:
                self.first_divergence = d
