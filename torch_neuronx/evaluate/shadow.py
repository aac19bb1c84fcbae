"""Shadow numerics: a TorchDispatchMode that re-runs each device op on the
CPU with the same inputs and in float64, and records the device's error
against both, by op and by module. The CPU run reads the device's tensors in
place (device memory is host memory: ``_C._host_views``) except the arguments
the op writes and any argument sharing memory with one, which are copied
before the device op runs, so in-place ops see the same values; an op whose
results are the arguments it writes (``_foreach_*_``) is compared on every
tensor it writes. The float64 re-run is made for every op
(``float64="all"``) or, by default, only for ops whose CPU error exceeds the
tolerance, where it decides the verdict; an in-place op then has none (its
CPU re-run overwrote the copies) and is judged on the CPU comparison alone.

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

from .. import _C
from .locations import user_frame
from .observe import module_path, on_neuron, op_name, outputs_of

TOLERANCE = {torch.float32: 1e-3, torch.float64: 1e-3, torch.float16: 1e-2, torch.bfloat16: 2e-2}
_SKIP_OPS = {
    "aten::empty",
    "aten::empty_strided",
    "aten::empty_like",
    "aten::new_empty",
    "aten::new_empty_strided",
    "aten::set_",
    "aten::resize_",
    "aten::_local_scalar_dense",
}


def rel_error(y: torch.Tensor, r: torch.Tensor) -> float:
    """``max|y - r| / max|r|`` (computed in the wider of the two dtypes, at
    least float32); inf when their non-finite values differ."""
    if y.shape != r.shape or y.numel() == 0:
        return 0.0
    dt = torch.float64 if torch.float64 in (y.dtype, r.dtype) else torch.float32
    y = y.detach().to(dt)
    r = r.detach().to(dt)
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


class _Plan:
    """What the shadow needs to know of an OpOverload, read from its schema
    once (the schema walk cost more per op than some small ops' CPU re-run)."""

    __slots__ = ("name", "skip", "seeded", "dropout", "mutable", "writes", "write_names")

    def __init__(self, func):
        schema = func._schema
        self.name = op_name(func)
        self.skip = self.name in _SKIP_OPS or func.is_view
        self.seeded = torch.Tag.nondeterministic_seeded in func.tags
        self.dropout = None  # (position, default) of an attention op's dropout_p
        self.mutable = schema.is_mutable
        # The arguments the op writes (``Tensor(a!)``, ``Tensor(a!)[]``, and
        # those a few aten kernels write unannounced, as native_batch_norm's
        # running statistics: the CPU fallback's list): by position and by
        # keyword (out= arguments are keyword-only). The CPU run must not
        # write through a view into the device's memory.
        self.writes, self.write_names = set(), set()
        for i, a in enumerate(schema.arguments):
            if a.name == "dropout_p":
                self.dropout = (i, a.default_value)
            if (a.alias_info is not None and a.alias_info.is_write) or _C._undeclared_write(
                schema.name, schema.overload_name, a.name
            ):
                self.writes.add(i)
                self.write_names.add(a.name)

    def written(self, args) -> list:
        """The tensors of the positional arguments the op writes."""
        found: list = []
        for i in sorted(self.writes):
            if i < len(args):
                _leaves(args[i], True, found)
        return [t for t, _ in found]

    def random(self, args, kwargs) -> bool:
        """Draws random numbers (an attention op only when its dropout_p > 0)."""
        if not self.seeded:
            return False
        if self.dropout is None:
            return True
        i, default = self.dropout
        return bool(kwargs.get("dropout_p", args[i] if i < len(args) else default))


def _leaves(v, written, found):
    if isinstance(v, torch.Tensor):
        found.append((v, written))
    elif isinstance(v, (list, tuple)):
        for x in v:
            _leaves(x, written, found)


def _rebuild(v, it):
    if isinstance(v, torch.Tensor):
        return next(it)
    if isinstance(v, (list, tuple)):
        return type(v)(_rebuild(x, it) for x in v)
    if isinstance(v, torch.device) and v.type == "neuron":
        return torch.device("cpu")
    return v


def _storage_key(t: torch.Tensor):
    return t.untyped_storage().data_ptr() if t.numel() else None


def host_values(tensors: list) -> list:
    """CPU tensors holding the values of ``tensors`` now: a neuron tensor's
    is a view of its memory (device memory is host memory; one device
    synchronize for all, no copy), a CPU tensor is itself. Read-only."""
    dev = [t for t in tensors if t.device.type == "neuron"]
    if not dev:
        return list(tensors)
    views = iter(_C._host_views(dev))
    return [next(views) if t.device.type == "neuron" else t for t in tensors]


def cpu_inputs(plan: _Plan, args, kwargs):
    """The CPU re-run's arguments, taken before the device op runs: the
    arguments the op writes (and any argument sharing memory with one) are
    copies, so both runs start from the same values; every other tensor is
    read in place (``host_values``): the device op does not write it."""
    found: list = []
    for i, a in enumerate(args):
        _leaves(a, i in plan.writes, found)
    for k, v in kwargs.items():
        _leaves(v, k in plan.write_names, found)
    vals = host_values([t.detach() for t, _ in found])
    written = {_storage_key(t) for t, w in found if w} - {None}
    cpu = [
        v.clone() if w or (written and _storage_key(t) in written) else v
        for (t, w), v in zip(found, vals)
    ]
    it = iter(cpu)
    cpu_args = tuple(_rebuild(a, it) for a in args)
    cpu_kwargs = {k: _rebuild(v, it) for k, v in kwargs.items()}
    return cpu_args, cpu_kwargs


class Scratch:
    """A reused buffer for the differences ``y - r``: a new tensor per
    comparison cost more (allocation, first-touch page faults) than the
    subtraction itself on large results. Results above ``KEEP`` elements get
    a buffer of their own, not kept (an LLM's logits would pin gigabytes)."""

    KEEP = 1 << 24

    def __init__(self):
        self.buf: dict = {}

    def like(self, y: torch.Tensor, dt) -> torch.Tensor:
        if y.numel() > self.KEEP:
            return torch.empty(y.shape, dtype=dt)
        b = self.buf.get(dt)
        if b is None or b.numel() < y.numel():
            b = self.buf[dt] = torch.empty(max(y.numel(), 1 << 16), dtype=dt)
        return b[: y.numel()].view(y.shape)


def errors(pairs, scratch: "Scratch | None" = None) -> list:
    """``rel_error`` of each (y, r) pair, the pairs read at once: per pair one
    subtraction and two single-pass min-max reductions (``max|x|`` is
    ``max(-min x, max x)``: no ``abs`` temporaries), and one read of every
    result. Pairs with non-finite values go through ``rel_error`` itself."""
    out = [0.0] * len(pairs)
    ks, parts, dts = [], [], set()
    f32, f64 = torch.float32, torch.float64
    for k, (y, r) in enumerate(pairs):
        if y.shape != r.shape or y.numel() == 0:
            continue
        dt = f64 if y.dtype is f64 or r.dtype is f64 else f32
        # (Only what needs it is converted or detached: this loop runs for
        # every result of every op, and most are float32 already.)
        if y.dtype is not dt or y.requires_grad:
            y = y.detach().to(dt)
        if r.dtype is not dt or r.requires_grad:
            r = r.detach().to(dt)
        d = y - r if scratch is None else torch.sub(y, r, out=scratch.like(y, dt))
        ks.append(k)
        dts.add(dt)
        parts += [*torch.aminmax(d), *torch.aminmax(r)]
    if not ks:
        return out
    if len(dts) > 1:
        parts = [p.to(f64) for p in parts]
    vals = torch.stack(parts).tolist()
    for j, k in enumerate(ks):
        lo, hi, r_lo, r_hi = vals[4 * j : 4 * j + 4]
        d = max(-lo, hi)
        if math.isfinite(d):
            out[k] = d / max(-r_lo, r_hi, 1e-30)
        else:
            out[k] = rel_error(*pairs[k])
    return out


class ShadowNumerics(TorchDispatchMode):
    """See the module docstring. ``float64="divergent"`` (the default) runs the
    float64 reference only for ops whose error vs the CPU exceeds the
    tolerance, where it decides the verdict; ``"all"`` for every op."""

    @classmethod
    def ignore_compile_internals(cls) -> bool:
        return True

    def __init__(self, tracker, float64: str = "divergent"):
        super().__init__()
        self.tracker = tracker
        self.float64_all = float64 == "all"
        self.by_op = defaultdict(
            lambda: {
                "count": 0,
                "max_error_cpu": 0.0,
                "max_error_f64": 0.0,
                "max_cpu_error_f64": 0.0,
            }
        )
        self.by_module = defaultdict(lambda: {"ops": 0, "max_error_cpu": 0.0, "max_error_f64": 0.0})
        self.first_divergence = None
        self.divergences: dict[tuple, dict] = {}
        self.compared = 0
        self.skipped = 0
        self.random_ops: dict[str, int] = defaultdict(int)
        self.index = 0
        self._plans: dict = {}
        self._scratch = Scratch()

    def __exit__(self, exc_type, exc_val, exc_tb):
        self._scratch = Scratch()  # (the report outlives the phase; its buffer need not)
        return super().__exit__(exc_type, exc_val, exc_tb)

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if not on_neuron(args, kwargs):
            return func(*args, **kwargs)
        plan = self._plans.get(func)
        if plan is None:
            plan = self._plans[func] = _Plan(func)
        name = plan.name
        if plan.skip or plan.random(args, kwargs):
            self.skipped += 1
            if plan.seeded and any(isinstance(a, torch.Tensor) for a in args):
                # (dropout, normal_, ...: the CPU reference run draws factory
                # randoms like randn from the device generator, not these.)
                self.random_ops[name] += 1
            return func(*args, **kwargs)
        mutable = plan.mutable
        cpu_args, cpu_kwargs = cpu_inputs(plan, args, kwargs)
        # The float64 inputs come from the CPU inputs: made now when every op
        # needs them, else only if the CPU comparison fails. An in-place op's
        # CPU run overwrites its copies, so in that mode it gets no float64
        # reference (its verdict is the CPU comparison alone): keeping a third
        # copy of every optimizer state tensor cost a quarter of the phase.
        f64_args = tree_map(_to_f64, cpu_args) if self.float64_all else None
        out = func(*args, **kwargs)
        try:
            ref = func(*cpu_args, **cpu_kwargs)
        except Exception:  # noqa: BLE001 - an op the CPU cannot run with these inputs: not compared
            self.skipped += 1
            return out
        self.index += 1

        def ref64():
            if f64_args is None and mutable:
                return None, None
            a = f64_args if f64_args is not None else tree_map(_to_f64, cpu_args)
            r = func(*a, **_kw_cpu(cpu_kwargs, True))
            return r, a

        try:
            self._compare(plan, name, args, out, ref, ref64, cpu_args)
        except Exception:  # noqa: BLE001 - the float64 re-run failed (an op without float64)
            pass
        return out

    def _compare(self, plan, name, args, out, ref, ref64, cpu_args):
        outs, refs = outputs_of(out), outputs_of(ref)
        pick = None
        if not outs and plan.mutable:
            # In-place ops that return nothing (the optimizers' _foreach_*_):
            # their results are the arguments they write, every tensor of them.
            outs, refs = plan.written(args), plan.written(cpu_args)
            pick = True
        floating = [
            (y, r) for y, r in zip(outs, refs) if y.is_floating_point() and r.is_floating_point()
        ]
        if not floating:
            return
        tol = max(TOLERANCE.get(y.dtype, 1e-3) for y, _ in floating)
        # The device's results read in place, after one synchronize.
        ys = host_values([y.detach() for y, _ in floating])
        pairs = [(yc, r) for yc, (_, r) in zip(ys, floating)]
        e_cpu = max(errors(pairs, self._scratch))
        e_64 = c_64 = None
        if self.float64_all or e_cpu > tol:
            r64, a64 = ref64()
        else:
            r64 = a64 = None
        if a64 is not None:
            refs64 = plan.written(a64) if pick else outputs_of(r64)
            refs64 = [x for x in refs64 if x.is_floating_point()]
            e_64 = c_64 = 0.0
            for (yc, r), x64 in zip(pairs, refs64):
                e_64 = max(e_64, rel_error(yc, x64))
                c_64 = max(c_64, rel_error(r, x64))
        self.compared += 1
        mod = module_path(self.tracker)
        o = self.by_op[name]
        o["count"] += 1
        o["max_error_cpu"] = max(o["max_error_cpu"], e_cpu)
        m = self.by_module[mod]
        m["ops"] += 1
        m["max_error_cpu"] = max(m["max_error_cpu"], e_cpu)
        if e_64 is not None:
            o["max_error_f64"] = max(o["max_error_f64"], e_64)
            o["max_cpu_error_f64"] = max(o["max_cpu_error_f64"], c_64)
            m["max_error_f64"] = max(m["max_error_f64"], e_64)
        if e_cpu > tol and (e_64 is None or e_64 > max(tol, 10 * c_64)):
            where = user_frame(2)
            key = (name, mod, where)
            d = self.divergences.get(key)
            if d is None:
                d = self.divergences[key] = {
                    "op": name,
                    "module": mod,
                    "location": where,
                    "backward": bool(self.tracker.is_bw),
                    "count": 0,
                    "error_cpu": e_cpu,
                    "error_f64": e_64,
                    "cpu_error_f64": c_64,
                    "tolerance": tol,
                    "op_index": self.index,
                }
            d["count"] += 1
            d["error_cpu"] = max(d["error_cpu"], e_cpu)
            if self.first_divergence is None:
                self.first_divergence = d
