"""FX (core ATen, after AOTAutograd) -> calls to libtrn's graph builder.

The lowering only *translates*. Each FX node becomes builder nodes
(pointwise ops by the trn/scalar.h op enum, reductions, views, extern
matmul/conv), or, for ops the compiler has no lowering for but the eager
device runs natively, a host step that calls the eager op between compiled
kernels. Fusion, memory planning and code generation are libtrn's.

A value is a ``Val``: a view (sizes, strides, offset, in elements) of a *base*
builder node, so view ops cost nothing; the compiler materialises a base only
when something views it.

Owner: the ``Lowerer`` (the one entry: walks the FX graph, keeps the values,
makes host steps and outputs). What each op lowers to is in one module per
family, which registers it on import: lower_pointwise (elementwise),
lower_copy (casts, copies, creation), lower_views, lower_reduce,
lower_matmul (matmul, convolution), lower_foreach (the optimizer step),
lower_index (gather / scatter), lower_collective (functional
collectives: asynchronous start / wait host steps); lower_core holds what
they share.
"""

from __future__ import annotations

import math
import operator
from typing import Any

import torch
from torch.fx.node import map_arg

# Each family registers its lowerings on import, in this order.
from . import (  # noqa: F401
    lower_pointwise,
    lower_copy,
    lower_views,
    lower_reduce,
    lower_matmul,
    lower_foreach,
    lower_index,
    lower_collective,
    lower_attention,
    lower_grouped_mm,
    lower_sort_scan,
    lower_scaled_mm,
)
from .lower_core import (
    LOWERINGS,
    TRN_DTYPE,
    Base,
    HostStep,
    Lowered,
    Unsupported,
    UnsupportedOpError,
    Val,
    _PyConst,
    _PyHostResult,
    _PyInput,
    _PyItem,
    _PyValue,
    _scalar_const,
    aten,
    contiguous_strides,
    is_dense,
    meta,
    same_layout,
    view_strides,
)
from .tape import RecordingGraph


class Lowerer:
    def __init__(self, gm: torch.fx.GraphModule, device_index: int = 0, in_place: bool = True):
        self.gm = gm
        # copy_ into a graph input (a mutation AOTAutograd kept in the graph)
        # becomes a libtrn store; off, it runs as an eager host step.
        self.in_place = in_place
        self.stored: set[int] = set()
        # Recorded, so a warm start can rebuild the graph without lowering.
        self.g = RecordingGraph()
        self.bases: dict[int, Base] = {}
        self.env: dict[torch.fx.Node, Any] = {}
        self.inputs: list = []
        self.exported: dict[int, tuple] = {}
        self.hosts: list[HostStep] = []
        self.view_cache: dict = {}
        self.device_index = device_index
        self.cur: torch.fx.Node | None = None

    # ---- bases and values ------------------------------------------------------
    def _label(self, nid: int) -> None:
        if self.cur is not None:
            self.g.set_label(nid, self.cur.name)

    def new_base(self, nid: int, kind: str, sizes, layout, dtype, const=None) -> Val:
        sizes = tuple(int(s) for s in sizes)
        self.bases[nid] = Base(kind, sizes, tuple(layout), dtype, const)
        self._label(nid)
        return Val(nid, sizes, tuple(layout), 0, dtype)

    def const(self, value, dtype, sizes=()) -> Val:
        if dtype.is_floating_point:
            f, i = float(value), 0
        else:
            f, i = 0.0, int(value)
        nid = self.g.const(TRN_DTYPE[dtype], f, i, list(sizes))
        return self.new_base(nid, "const", sizes, contiguous_strides(sizes), dtype, value)

    def node_of(self, v: Val) -> int:
        """A builder node whose value is exactly v (a view node if needed)."""
        b = self.bases[v.base]
        if b.kind == "iota":  # any view of an iota is an iota: no memory
            if tuple(v.sizes) == b.sizes and v.offset == 0 and tuple(v.strides) == b.layout:
                return v.base
            key = ("i", v.base, tuple(v.sizes), tuple(v.strides), v.offset)
            if key not in self.view_cache:
                start, step = b.const
                self.view_cache[key] = self.g.iota(
                    TRN_DTYPE[b.dtype], list(v.sizes), list(v.strides), v.offset, start, step
                )
            return self.view_cache[key]
        if b.kind == "const":
            if tuple(v.sizes) == b.sizes:
                return v.base
            key = ("c", v.base, tuple(v.sizes))
            if key not in self.view_cache:
                self.view_cache[key] = self.const(b.const, b.dtype, v.sizes).base
            return self.view_cache[key]
        if (
            tuple(v.sizes) == b.sizes
            and v.offset == 0
            and same_layout(v.sizes, v.strides, b.layout)
        ):
            return v.base
        key = (v.base, tuple(v.sizes), tuple(v.strides), v.offset)
        if key not in self.view_cache:
            self.view_cache[key] = self.g.view(v.base, list(v.sizes), list(v.strides), v.offset)
        return self.view_cache[key]

    def broadcast(self, v: Val, sizes) -> Val:
        sizes = tuple(int(s) for s in sizes)
        if tuple(v.sizes) == sizes:
            return v
        pad = len(sizes) - len(v.sizes)
        if pad < 0:
            raise Unsupported("broadcast to fewer dims")
        vs = (1,) * pad + tuple(v.sizes)
        vst = (0,) * pad + tuple(v.strides)
        strides = []
        for n, s, want in zip(vs, vst, sizes):
            if n == want:
                strides.append(s)
            elif n == 1:
                strides.append(0)
            else:
                raise Unsupported(f"cannot broadcast {v.sizes} to {sizes}")
        return Val(v.base, sizes, tuple(strides), v.offset, v.dtype)

    def materialize(self, v: Val, strides=None) -> Val:
        """A fresh base holding v's values (a copy kernel, usually fused)."""
        nid = self.g.cast(self.node_of(v), TRN_DTYPE[v.dtype])
        layout = contiguous_strides(v.sizes)
        if (
            strides is not None
            and is_dense(v.sizes, strides)
            and not same_layout(v.sizes, strides, layout)
        ):
            self.g.set_layout(nid, list(strides))
            layout = tuple(strides)
        return self.new_base(nid, "node", v.sizes, layout, v.dtype)

    def reshape(self, v: Val, sizes) -> Val:
        sizes = tuple(int(s) for s in sizes)
        if -1 in sizes:
            known = math.prod(s for s in sizes if s != -1)
            sizes = tuple(math.prod(v.sizes) // max(known, 1) if s == -1 else s for s in sizes)
        st = view_strides(tuple(v.sizes), tuple(v.strides), sizes)
        if st is None:
            v = self.materialize(v)
            st = contiguous_strides(sizes)
        return Val(v.base, sizes, st, v.offset, v.dtype)

    def finish_node(self, nid: int, node_meta, dtype=None) -> Val:
        """Registers a computed builder node for the current FX node's value,
        with the FX value's strides as its memory layout when they are dense."""
        sizes = tuple(int(s) for s in node_meta.shape)
        layout = contiguous_strides(sizes)
        st = tuple(int(s) for s in node_meta.stride())
        if is_dense(sizes, st) and not same_layout(sizes, st, layout):
            self.g.set_layout(nid, list(st))
            layout = st
        return self.new_base(nid, "node", sizes, layout, dtype or node_meta.dtype)

    def export(self, base: int) -> None:
        b = self.bases[base]
        if b.kind in ("input", "host") or base in self.exported:
            return
        self.g.export(base, list(b.layout))
        self.exported[base] = (b.sizes, b.layout, b.dtype)

    # ---- lowering entry ------------------------------------------------------------
    def run(self) -> Lowered:
        placeholder_index = 0
        env_py = {}
        output = None
        for node in self.gm.graph.nodes:
            self.cur = node
            if node.op == "placeholder":
                m = meta(node)
                if (
                    isinstance(m, torch.Tensor)
                    and m.device.type == "neuron"
                    and m.dtype in TRN_DTYPE
                ):
                    nid = self.g.input(
                        TRN_DTYPE[m.dtype], list(m.shape), [int(s) for s in m.stride()]
                    )
                    v = self.new_base(nid, "input", m.shape, m.stride(), m.dtype)
                    self.inputs.append((nid, placeholder_index))
                    self.env[node] = v
                else:
                    self.inputs.append((None, placeholder_index))
                    self.env[node] = _PyInput(placeholder_index)
                    env_py[placeholder_index] = True
                placeholder_index += 1
            elif node.op == "call_function":
                self.env[node] = self.lower_node(node)
            elif node.op == "output":
                output = self.lower_outputs(node.args[0])
            elif node.op == "get_attr":
                c = getattr(self.gm, node.target)
                m = meta(node)
                if (
                    isinstance(c, torch.Tensor)
                    and c.numel() == 0
                    and c.dtype in TRN_DTYPE
                    and isinstance(m, torch.Tensor)
                    and m.device.type == "neuron"
                ):
                    self.env[node] = self.const(0, c.dtype, tuple(c.shape))  # no values to carry
                else:
                    self.env[node] = _PyConst(c)
            else:
                raise UnsupportedOpError(
                    f"neuron compiler: FX node kind {node.op} ({node.name}) is not supported"
                )
        return Lowered(
            self.g,
            self.bases,
            self.inputs,
            list(self.exported.items()),
            self.hosts,
            output,
            env_py,
            self.env,
            len(self.stored),
        )

    def lower_node(self, node: torch.fx.Node):
        if node.target is operator.getitem:
            src = self.env[node.args[0]]
            if isinstance(src, (list, tuple)):
                return src[node.args[1]]
            return _PyItem(src, node.args[1])
        if (
            node.target in (aten.lift_fresh_copy.default, aten.clone.default)
            and _scalar_const(self.env.get(node.args[0])) is not None
        ):
            return self.env[node.args[0]]  # a functional graph never writes it: no copy needed
        fn = LOWERINGS.get(node.target)
        args_ok = all(
            not isinstance(self.env.get(a), _PyValue) or _scalar_const(self.env.get(a)) is not None
            for a in node.all_input_nodes
        )
        m = meta(node)
        outs_ok = all(t.device.type == "neuron" for t in _tensors(m))
        if fn is not None and args_ok and outs_ok:
            try:
                return fn(self, node, *node.args, **node.kwargs)
            except Unsupported:
                pass
            except NotImplementedError:
                pass  # the builder rejected a dtype: run the op eagerly
        return self.host_step(node)

    # ---- host steps ------------------------------------------------------------------
    def host_step(self, node: torch.fx.Node):
        target = node.target
        if not _runs_on_device(target, node, self.env):
            raise UnsupportedOpError(_unsupported_message(node))
        if lower_attention.runs_on_device(target):
            lower_attention.prepare(self.gm, node)

        # Every tensor argument must be caller-visible at run time.
        def visible(a):
            v = self.env[a]
            if isinstance(v, Val):
                self.export(v.base)
            elif isinstance(v, (list, tuple)):
                for x in v:
                    if isinstance(x, Val):
                        self.export(x.base)
            return a

        map_arg((node.args, node.kwargs), visible)
        bases = sorted({v.base for v in _vals(self.env, node)})
        step = self.g.host_call(bases)
        m = meta(node)
        results = []

        def declare(t, path):
            if isinstance(t, torch.Tensor) and t.device.type == "neuron" and t.dtype in TRN_DTYPE:
                nid = self.g.host_result(
                    step, TRN_DTYPE[t.dtype], list(t.shape), [int(s) for s in t.stride()]
                )
                results.append((nid, path, tuple(t.shape), tuple(int(s) for s in t.stride())))
                return self.new_base(nid, "host", t.shape, t.stride(), t.dtype)
            results.append((None, path, None, None))
            return _PyHostResult(step, path)

        if isinstance(m, (list, tuple)):
            value = [declare(t, (i,)) for i, t in enumerate(m)]
        else:
            value = declare(m, ())
        self.hosts.append(HostStep(node, target, node.args, node.kwargs, results))
        assert len(self.hosts) - 1 == step
        return value

    def lower_outputs(self, out):
        def fix(a):
            v = self.env[a]
            m = meta(a)
            if isinstance(v, Val):
                if (
                    isinstance(m, torch.Tensor)
                    and tuple(v.sizes) == tuple(m.shape)
                    and not same_layout(v.sizes, v.strides, tuple(m.stride()))
                    and is_dense(m.shape, m.stride())
                ):
                    self.cur = a
                    v = self.materialize(v, tuple(int(s) for s in m.stride()))
                elif (
                    isinstance(m, torch.Tensor)
                    and isinstance(a, torch.fx.Node)
                    and a.op == "call_function"
                    and tuple(v.sizes) == tuple(m.shape)
                    and not same_layout(v.sizes, v.strides, tuple(m.stride()))
                    and _runs_on_device(a.target, a, self.env)
                ):
                    # A non-dense FX layout (a column of a bigger buffer, saved
                    # for the backward, which reads it with those strides):
                    # generated code writes dense buffers only, so the op
                    # runs as a host step, whose result keeps the FX layout.
                    self.cur = a
                    return self.host_step(a)
                self.export(v.base)
            return v

        return map_arg(out, fix)


def _tensors(m):
    if isinstance(m, torch.Tensor):
        return [m]
    if isinstance(m, (list, tuple)):
        return [t for t in m if isinstance(t, torch.Tensor)]
    return []


def _vals(env, node):
    out = []
    for a in node.all_input_nodes:
        v = env[a]
        if isinstance(v, Val):
            out.append(v)
        elif isinstance(v, (list, tuple)):
            out.extend(x for x in v if isinstance(x, Val))
    return out


_DEVICE_KEYS = (
    "PrivateUse1",
    "CompositeExplicitAutograd",
    "CompositeExplicitAutogradNonFunctional",
    "CompositeImplicitAutograd",
)


def _runs_on_device(target, node, env) -> bool:
    """Whether running the op eagerly stays off the CPU fallback: it has a
    neuron kernel (or a composite one, made of ops that have), or it only
    touches host (CPU) values, like the optimizer's step counter."""
    if lower_attention.runs_on_device(target):
        return True
    if not isinstance(target, torch._ops.OpOverload):
        return False
    if not any(t.device.type == "neuron" for t in _tensors(meta(node))) and all(
        not isinstance(env.get(a), Val) for a in node.all_input_nodes
    ):
        return True
    name = target.name()
    return any(torch._C._dispatch_has_kernel_for_dispatch_key(name, k) for k in _DEVICE_KEYS)


def _unsupported_message(node) -> str:
    trace = node.meta.get("stack_trace") or ""
    line = trace.strip().splitlines()[-2:] if trace else []
    where = (" at " + " | ".join(s.strip() for s in line)) if line else ""
    return (
        f"neuron compiler: op {node.target} (FX node '{node.name}') cannot be lowered and has no "
        f"neuron kernel{where}. Set options={{'fallback_execution': True}} or "
        f"TORCH_NEURONX_DISABLE_FALLBACK_EXECUTION=0 to run this graph eagerly."
    )
