"""FX (core ATen, after AOTAutograd) -> calls to libtrn's graph builder.

Owner: this module only *translates*. Each FX node becomes builder nodes
(pointwise ops by the trn/scalar.h op enum, reductions, views, extern
matmul/conv), or, for ops the compiler has no lowering for but the eager
device runs natively, a host step that calls the eager op between compiled
kernels. Fusion, memory planning and code generation are libtrn's.

A value is a ``Val``: a view (sizes, strides, offset, in elements) of a *base*
builder node, so view ops cost nothing; the compiler materialises a base only
when something views it.
"""
from __future__ import annotations

import math
import operator
from dataclasses import dataclass, field
from typing import Any, Callable

import torch
from torch.fx.node import map_arg

from .. import _C
from .._trn_constants import DTYPE_IDS, VALUES
from .tape import RecordingGraph

aten = torch.ops.aten
prims = torch.ops.prims

# The trn_dtype of each torch dtype the compiler takes (the values are
# libtrn/include/trn/dtype.h's, looked up by name).
TRN_DTYPE = {d: DTYPE_IDS[str(d).removeprefix("torch.")] for d in (
    torch.bool, torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64, torch.uint16, torch.uint32,
    torch.uint64, torch.float16, torch.bfloat16, torch.float32, torch.float64)}
# trn_graph_reduce_op and trn_conv_kind (libtrn/include/trn/compiler.h).
TRN_GRAPH_SUM = VALUES["TRN_GRAPH_SUM"]
TRN_GRAPH_PROD = VALUES["TRN_GRAPH_PROD"]
TRN_GRAPH_MAX = VALUES["TRN_GRAPH_MAX"]
TRN_GRAPH_MIN = VALUES["TRN_GRAPH_MIN"]
TRN_CONV_FORWARD = VALUES["TRN_CONV_FORWARD"]
TRN_CONV_BACKWARD_DATA = VALUES["TRN_CONV_BACKWARD_DATA"]
TRN_CONV_BACKWARD_WEIGHTS = VALUES["TRN_CONV_BACKWARD_WEIGHTS"]

_EW: dict[str, int] | None = None


def ew(name: str) -> int:
    global _EW
    if _EW is None:
        _EW = dict(_C._ew_op_ids())
    return _EW[name]


class Unsupported(Exception):
    """This node has no lowering (it may still run as a host step)."""


class UnsupportedOpError(RuntimeError):
    """The graph holds an op that neither the compiler nor the device can run."""


@dataclass
class Val:
    base: int
    sizes: tuple
    strides: tuple
    offset: int
    dtype: torch.dtype


@dataclass
class Base:
    kind: str  # "input", "host", "node", "const", "iota" (const: (start, step))
    sizes: tuple
    layout: tuple
    dtype: torch.dtype
    const: Any = None


def contiguous_strides(sizes) -> tuple:
    out, s = [], 1
    for n in reversed(sizes):
        out.append(s)
        s *= max(int(n), 1)
    return tuple(reversed(out))


def is_dense(sizes, strides) -> bool:
    dims = sorted((s, n) for n, s in zip(sizes, strides) if n > 1)
    expect = 1
    for s, n in dims:
        if s != expect:
            return False
        expect *= n
    return True


def same_layout(sizes, a, b) -> bool:
    return all(x == y for n, x, y in zip(sizes, a, b) if n > 1)


def meta(node) -> Any:
    return node.meta.get("val") if isinstance(node, torch.fx.Node) else None


def view_strides(sizes, strides, new_sizes):
    """Strides of a reshape of (sizes, strides) as a view, or None (ATen's
    computeStride rule, written out)."""
    numel = math.prod(sizes)
    if numel == 0 or math.prod(new_sizes) != numel:
        return contiguous_strides(new_sizes) if numel == math.prod(new_sizes) else None
    new_strides = [0] * len(new_sizes)
    view_d = len(new_sizes) - 1
    chunk_base = strides[-1] if strides else 1
    tensor_numel, view_numel = 1, 1
    for d in range(len(sizes) - 1, -1, -1):
        tensor_numel *= sizes[d]
        if d == 0 or (sizes[d - 1] != 1 and strides[d - 1] != tensor_numel * chunk_base):
            while view_d >= 0 and (view_numel < tensor_numel or new_sizes[view_d] == 1):
                new_strides[view_d] = view_numel * chunk_base
                view_numel *= new_sizes[view_d]
                view_d -= 1
            if view_numel != tensor_numel:
                return None
            if d > 0:
                chunk_base = strides[d - 1]
                tensor_numel, view_numel = 1, 1
    if view_d != -1:
        return None
    return tuple(new_strides)


@dataclass
class HostStep:
    node: torch.fx.Node
    fn: Callable
    args: Any
    kwargs: Any
    results: list  # per result: (builder node or None, index path)


@dataclass
class Lowered:
    graph: Any
    bases: dict
    inputs: list          # (builder node | None, placeholder index)
    exports: list         # (builder node, sizes, strides, dtype)
    hosts: list           # HostStep per host step number
    outputs: Any          # FX output structure with Val/py values
    env_py: dict          # placeholder index -> python-only values
    env: dict = field(default_factory=dict)
    stores: int = 0       # inputs written in place (trn_graph_store)


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
                self.view_cache[key] = self.g.iota(TRN_DTYPE[b.dtype], list(v.sizes), list(v.strides), v.offset,
                                                   start, step)
            return self.view_cache[key]
        if b.kind == "const":
            if tuple(v.sizes) == b.sizes:
                return v.base
            key = ("c", v.base, tuple(v.sizes))
            if key not in self.view_cache:
                self.view_cache[key] = self.const(b.const, b.dtype, v.sizes).base
            return self.view_cache[key]
        if tuple(v.sizes) == b.sizes and v.offset == 0 and same_layout(v.sizes, v.strides, b.layout):
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
        if strides is not None and is_dense(v.sizes, strides) and not same_layout(v.sizes, strides, layout):
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
                if isinstance(m, torch.Tensor) and m.device.type == "neuron" and m.dtype in TRN_DTYPE:
                    nid = self.g.input(TRN_DTYPE[m.dtype], list(m.shape), [int(s) for s in m.stride()])
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
                if isinstance(c, torch.Tensor) and c.numel() == 0 and c.dtype in TRN_DTYPE and \
                        isinstance(m, torch.Tensor) and m.device.type == "neuron":
                    self.env[node] = self.const(0, c.dtype, tuple(c.shape))  # no values to carry
                else:
                    self.env[node] = _PyConst(c)
            else:
                raise UnsupportedOpError(f"neuron compiler: FX node kind {node.op} ({node.name}) is not supported")
        return Lowered(self.g, self.bases, self.inputs, list(self.exported.items()), self.hosts, output, env_py,
                       self.env, len(self.stored))

    def lower_node(self, node: torch.fx.Node):
        if node.target is operator.getitem:
            src = self.env[node.args[0]]
            if isinstance(src, (list, tuple)):
                return src[node.args[1]]
            return _PyItem(src, node.args[1])
        if node.target in (aten.lift_fresh_copy.default, aten.clone.default) and \
                _scalar_const(self.env.get(node.args[0])) is not None:
            return self.env[node.args[0]]  # a functional graph never writes it: no copy needed
        fn = LOWERINGS.get(node.target)
        args_ok = all(not isinstance(self.env.get(a), _PyValue) or _scalar_const(self.env.get(a)) is not None
                      for a in node.all_input_nodes)
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
                nid = self.g.host_result(step, TRN_DTYPE[t.dtype], list(t.shape), [int(s) for s in t.stride()])
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
                if isinstance(m, torch.Tensor) and tuple(v.sizes) == tuple(m.shape) and \
                        not same_layout(v.sizes, v.strides, tuple(m.stride())) and is_dense(m.shape, m.stride()):
                    self.cur = a
                    v = self.materialize(v, tuple(int(s) for s in m.stride()))
                self.export(v.base)
            return v
        return map_arg(out, fix)


# ---- python-only values (CPU tensors, host results that are not device tensors) --
class _PyValue:
    pass


@dataclass
class _PyInput(_PyValue):
    index: int


@dataclass
class _PyConst(_PyValue):
    value: Any


@dataclass
class _PyHostResult(_PyValue):
    step: int
    path: tuple


@dataclass
class _PyItem(_PyValue):
    src: Any
    index: int


def _scalar_const(v):
    """The value of a graph constant that is a 0-d CPU tensor (torch.tensor(1.0)
    in model code), which ops take like a Python scalar; else None."""
    if isinstance(v, _PyConst) and isinstance(v.value, torch.Tensor) and v.value.dim() == 0 and \
            v.value.device.type == "cpu" and v.value.dtype in TRN_DTYPE and not v.value.requires_grad:
        from torch._subclasses.fake_tensor import unset_fake_temporarily
        with unset_fake_temporarily():  # lowering runs under AOTAutograd's fake mode
            return v.value.item()
    return None


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


_DEVICE_KEYS = ("PrivateUse1", "CompositeExplicitAutograd", "CompositeExplicitAutogradNonFunctional",
                "CompositeImplicitAutograd")


def _runs_on_device(target, node, env) -> bool:
    """Whether running the op eagerly stays off the CPU fallback: it has a
    neuron kernel (or a composite one, made of ops that have), or it only
    touches host (CPU) values, like the optimizer's step counter."""
    if not isinstance(target, torch._ops.OpOverload):
        return False
    if not any(t.device.type == "neuron" for t in _tensors(meta(node))) and all(
            not isinstance(env.get(a), Val) for a in node.all_input_nodes):
        return True
    name = target.name()
    return any(torch._C._dispatch_has_kernel_for_dispatch_key(name, k) for k in _DEVICE_KEYS)


def _unsupported_message(node) -> str:
    trace = node.meta.get("stack_trace") or ""
    line = trace.strip().splitlines()[-2:] if trace else []
    where = (" at " + " | ".join(s.strip() for s in line)) if line else ""
    return (f"neuron compiler: op {node.target} (FX node '{node.name}') cannot be lowered and has no "
            f"neuron kernel{where}. Set options={{'fallback_execution': True}} or "
            f"TORCH_NEURONX_DISABLE_FALLBACK_EXECUTION=0 to run this graph eagerly.")


# ---- lowerings ------------------------------------------------------------------------
LOWERINGS: dict[Any, Callable] = {}


def register(*targets):
    def deco(fn):
        for t in targets:
            LOWERINGS[t] = fn
        return fn
    return deco


def _val(L: Lowerer, a, dtype=None):
    """An FX argument as a Val or a python scalar."""
    if isinstance(a, torch.fx.Node):
        v = L.env[a]
        if not isinstance(v, Val):
            s = _scalar_const(v)
            if s is None:
                raise Unsupported("non-device input")
            return s
        return v
    if isinstance(a, (bool, int, float)):
        return a
    raise Unsupported(f"argument {a!r}")


def _compute_dtype(out_meta, *xs):
    return out_meta.dtype


def pointwise(L: Lowerer, node, op: str, inputs, compute=None, params=(), out_dtype=None, m=None):
    m = meta(node) if m is None else m
    out_dtype = out_dtype or m.dtype
    compute = compute or out_dtype
    if compute not in TRN_DTYPE or out_dtype not in TRN_DTYPE:
        raise Unsupported("dtype")
    sizes = tuple(int(s) for s in m.shape)
    ids = []
    for x in inputs:
        if isinstance(x, Val):
            ids.append(L.node_of(L.broadcast(x, sizes)))
        else:
            ids.append(L.const(x, compute).base)
    nid = L.g.pointwise(ew(op), TRN_DTYPE[compute], TRN_DTYPE[out_dtype], ids, list(params))
    return L.finish_node(nid, m, out_dtype)


def _promote(node):
    """Compute dtype of a comparison: PyTorch's type promotion of its inputs."""
    xs = [meta(a) if isinstance(a, torch.fx.Node) else a for a in node.args[:2]]
    return torch.result_type(*xs) if len(xs) == 2 else xs[0].dtype


UNARY = {
    aten.abs.default: "ABS", aten.neg.default: "NEG", aten.sign.default: "SIGN", aten.relu.default: "RELU",
    aten.floor.default: "FLOOR", aten.ceil.default: "CEIL", aten.round.default: "ROUND",
    aten.trunc.default: "TRUNC", aten.frac.default: "FRAC", aten.sqrt.default: "SQRT",
    aten.rsqrt.default: "RSQRT", aten.reciprocal.default: "RECIPROCAL",
    aten.bitwise_not.default: "BITWISE_NOT", aten.exp.default: "EXP", aten.exp2.default: "EXP2",
    aten.expm1.default: "EXPM1", aten.log.default: "LOG", aten.log2.default: "LOG2",
    aten.log10.default: "LOG10", aten.log1p.default: "LOG1P", aten.sin.default: "SIN",
    aten.cos.default: "COS", aten.tan.default: "TAN", aten.asin.default: "ASIN", aten.acos.default: "ACOS",
    aten.atan.default: "ATAN", aten.sinh.default: "SINH", aten.cosh.default: "COSH",
    aten.tanh.default: "TANH", aten.sigmoid.default: "SIGMOID", aten.erf.default: "ERF",
    aten.erfc.default: "ERFC", aten.erfinv.default: "ERFINV", aten.silu.default: "SILU",
    aten.mish.default: "MISH", aten.hardsigmoid.default: "HARDSIGMOID", aten.hardswish.default: "HARDSWISH",
}
PREDICATE_UNARY = {
    aten.logical_not.default: "LOGICAL_NOT", aten.isnan.default: "ISNAN", aten.isinf.default: "ISINF",
    aten.isposinf.default: "ISPOSINF", aten.isneginf.default: "ISNEGINF",
}
BINARY = {
    aten.mul.Tensor: "MUL", aten.mul.Scalar: "MUL", aten.div.Tensor: "DIV", aten.div.Scalar: "DIV",
    aten.remainder.Tensor: "REMAINDER", aten.remainder.Scalar: "REMAINDER", aten.fmod.Tensor: "FMOD",
    aten.fmod.Scalar: "FMOD", aten.maximum.default: "MAXIMUM", aten.minimum.default: "MINIMUM",
    aten.fmax.default: "FMAX", aten.fmin.default: "FMIN", aten.pow.Tensor_Scalar: "POW",
    aten.pow.Tensor_Tensor: "POW", aten.pow.Scalar: "POW", aten.atan2.default: "ATAN2",
    aten.bitwise_and.Tensor: "BITWISE_AND", aten.bitwise_and.Scalar: "BITWISE_AND",
    aten.bitwise_or.Tensor: "BITWISE_OR", aten.bitwise_or.Scalar: "BITWISE_OR",
    aten.bitwise_xor.Tensor: "BITWISE_XOR", aten.bitwise_xor.Scalar: "BITWISE_XOR",
    aten.copysign.Tensor: "COPYSIGN", aten.hypot.default: "HYPOT",
    aten.sigmoid_backward.default: "SIGMOID_BACKWARD", aten.tanh_backward.default: "TANH_BACKWARD",
    aten.silu_backward.default: "SILU_BACKWARD", aten.hardsigmoid_backward.default: "HARDSIGMOID_BACKWARD",
    aten.hardswish_backward.default: "HARDSWISH_BACKWARD", aten.mish_backward.default: "MISH_BACKWARD",
}
PREDICATE_BINARY = {
    aten.eq.Tensor: "EQ", aten.eq.Scalar: "EQ", aten.ne.Tensor: "NE", aten.ne.Scalar: "NE",
    aten.lt.Tensor: "LT", aten.lt.Scalar: "LT", aten.le.Tensor: "LE", aten.le.Scalar: "LE",
    aten.gt.Tensor: "GT", aten.gt.Scalar: "GT", aten.ge.Tensor: "GE", aten.ge.Scalar: "GE",
    aten.logical_and.default: "LOGICAL_AND", aten.logical_or.default: "LOGICAL_OR",
    aten.logical_xor.default: "LOGICAL_XOR",
}


def _unary(op):
    return lambda L, node, x, *a, **k: pointwise(L, node, op, [_val(L, x)])


def _pred_unary(op):
    return lambda L, node, x: pointwise(L, node, op, [_val(L, x)], compute=meta(x).dtype)


def _binary(op):
    return lambda L, node, a, b: pointwise(L, node, op, [_val(L, a), _val(L, b)])


def _pred_binary(op):
    return lambda L, node, a, b: pointwise(L, node, op, [_val(L, a), _val(L, b)], compute=_promote(node))


for _t, _op in UNARY.items():
    register(_t)(_unary(_op))
for _t, _op in PREDICATE_UNARY.items():
    register(_t)(_pred_unary(_op))
for _t, _op in BINARY.items():
    register(_t)(_binary(_op))
for _t, _op in PREDICATE_BINARY.items():
    register(_t)(_pred_binary(_op))


@register(aten.bitwise_not.default)
def _bitwise_not(L, node, x):
    # On bool, ~ is logical not (the int64 compute family would give ~1 = -2).
    if meta(x).dtype == torch.bool:
        return pointwise(L, node, "LOGICAL_NOT", [_val(L, x)], compute=torch.bool)
    return pointwise(L, node, "BITWISE_NOT", [_val(L, x)])


@register(aten.add.Tensor, aten.add.Scalar)
def _add(L, node, a, b, alpha=1):
    return pointwise(L, node, "ADD", [_val(L, a), _val(L, b)], params=(alpha,))


@register(aten.sub.Tensor, aten.sub.Scalar)
def _sub(L, node, a, b, alpha=1):
    return pointwise(L, node, "SUB", [_val(L, a), _val(L, b)], params=(alpha,))


@register(aten.rsub.Scalar, aten.rsub.Tensor)
def _rsub(L, node, a, b, alpha=1):
    return pointwise(L, node, "SUB", [_val(L, b), _val(L, a)], params=(alpha,))


@register(aten.div.Tensor_mode, aten.div.Scalar_mode)
def _div_mode(L, node, a, b, rounding_mode=None):
    op = {None: "DIV", "trunc": "DIV_TRUNC", "floor": "DIV_FLOOR"}[rounding_mode]
    return pointwise(L, node, op, [_val(L, a), _val(L, b)])


@register(aten.gelu.default)
def _gelu(L, node, x, approximate="none"):
    return pointwise(L, node, "GELU" if approximate == "none" else "GELU_TANH", [_val(L, x)])


@register(aten.gelu_backward.default)
def _gelu_bw(L, node, g, x, approximate="none"):
    op = "GELU_BACKWARD" if approximate == "none" else "GELU_TANH_BACKWARD"
    return pointwise(L, node, op, [_val(L, g), _val(L, x)])


@register(aten.threshold_backward.default)
def _thr_bw(L, node, g, x, threshold):
    return pointwise(L, node, "THRESHOLD_BACKWARD", [_val(L, g), _val(L, x)], params=(threshold,))


@register(aten.leaky_relu.default)
def _leaky(L, node, x, slope=0.01):
    return pointwise(L, node, "LEAKY_RELU", [_val(L, x)], params=(slope,))


@register(aten.leaky_relu_backward.default)
def _leaky_bw(L, node, g, x, slope, self_is_result):
    return pointwise(L, node, "LEAKY_RELU_BACKWARD", [_val(L, g), _val(L, x)], params=(slope,))


@register(aten.hardtanh.default)
def _hardtanh(L, node, x, lo=-1.0, hi=1.0):
    return pointwise(L, node, "HARDTANH", [_val(L, x)], params=(lo, hi))


@register(aten.hardtanh_backward.default)
def _hardtanh_bw(L, node, g, x, lo, hi):
    return pointwise(L, node, "HARDTANH_BACKWARD", [_val(L, g), _val(L, x)], params=(lo, hi))


@register(aten.elu.default)
def _elu(L, node, x, alpha=1.0, scale=1.0, input_scale=1.0):
    return pointwise(L, node, "ELU", [_val(L, x)], params=(alpha, scale, input_scale))


@register(aten.softplus.default)
def _softplus(L, node, x, beta=1.0, threshold=20.0):
    return pointwise(L, node, "SOFTPLUS", [_val(L, x)], params=(beta, threshold))


@register(aten.softplus_backward.default)
def _softplus_bw(L, node, g, x, beta, threshold):
    return pointwise(L, node, "SOFTPLUS_BACKWARD", [_val(L, g), _val(L, x)], params=(beta, threshold))


@register(aten.where.self, aten.where.ScalarSelf, aten.where.ScalarOther, aten.where.Scalar)
def _where(L, node, c, a, b):
    return pointwise(L, node, "WHERE", [_val(L, c), _val(L, a), _val(L, b)])


@register(aten.clamp.default, aten.clamp.Tensor)
def _clamp(L, node, x, lo=None, hi=None):
    m = meta(node)
    ins = [_val(L, x), 0 if lo is None else _val(L, lo), 0 if hi is None else _val(L, hi)]
    return pointwise(L, node, "CLAMP", ins, params=(lo is not None, hi is not None))


@register(aten.clamp_min.default)
def _clamp_min(L, node, x, lo):
    return pointwise(L, node, "CLAMP", [_val(L, x), _val(L, lo), 0], params=(1, 0))


@register(aten.clamp_max.default)
def _clamp_max(L, node, x, hi):
    return pointwise(L, node, "CLAMP", [_val(L, x), 0, _val(L, hi)], params=(0, 1))


@register(aten.lerp.Scalar, aten.lerp.Tensor)
def _lerp(L, node, s, e, w):
    return pointwise(L, node, "LERP", [_val(L, s), _val(L, e), _val(L, w)])


@register(aten.addcmul.default)
def _addcmul(L, node, x, a, b, value=1):
    return pointwise(L, node, "ADDCMUL", [_val(L, x), _val(L, a), _val(L, b)], params=(value,))


@register(aten.addcdiv.default)
def _addcdiv(L, node, x, a, b, value=1):
    return pointwise(L, node, "ADDCDIV", [_val(L, x), _val(L, a), _val(L, b)], params=(value,))


# ---- casts and copies -------------------------------------------------------------------
def _copy_to(L, node, v: Val):
    m = meta(node)
    v = L.broadcast(v, m.shape)
    nid = L.g.cast(L.node_of(v), TRN_DTYPE[m.dtype])
    return L.finish_node(nid, m)


@register(aten._to_copy.default, aten.clone.default, aten.lift_fresh_copy.default)
def _to_copy(L, node, x, **kw):
    m = meta(node)
    if m.dtype not in TRN_DTYPE:
        raise Unsupported("dtype")
    return _copy_to(L, node, _val(L, x))


@register(aten.copy.default)
def _copy(L, node, dst, src, non_blocking=False):
    return _copy_to(L, node, _val(L, src))


@register(aten.copy_.default)
def _copy_inplace(L, node, dst, src, non_blocking=False):
    """copy_ into a graph input: libtrn writes the input's buffer in place
    (its schedule checks nothing reads the old values afterwards)."""
    d = L.env.get(dst) if isinstance(dst, torch.fx.Node) else None
    if not L.in_place or not isinstance(d, Val) or dst.op != "placeholder":
        raise Unsupported("copy_ into a non-input")
    b = L.bases[d.base]
    if b.kind != "input" or d.base in L.stored or tuple(d.sizes) != b.sizes or d.offset != 0 \
            or not is_dense(b.sizes, b.layout):
        raise Unsupported("copy_ into a strided input")
    v = L.broadcast(_val(L, src) if isinstance(src, torch.fx.Node) else src, d.sizes) \
        if isinstance(src, torch.fx.Node) else L.const(src, d.dtype, d.sizes)
    L.g.store(d.base, L.node_of(v))
    L.stored.add(d.base)
    return d


@register(aten.alias.default, aten.detach.default)
def _alias(L, node, x):
    return _val(L, x)


# ---- creation ------------------------------------------------------------------------------
def _filled(L, node, value):
    m = meta(node)
    if m.dtype not in TRN_DTYPE:
        raise Unsupported("dtype")
    v = L.const(value, m.dtype, tuple(m.shape))
    return v


@register(aten.full.default)
def _full(L, node, size, value, **kw):
    return _filled(L, node, value)


@register(aten.full_like.default)
def _full_like(L, node, x, value, **kw):
    return _filled(L, node, value)


@register(aten.zeros_like.default, aten.zeros.default, aten.new_zeros.default, aten.empty_like.default,
          aten.empty.memory_format, aten.new_empty.default, aten.empty_strided.default)
def _zeros(L, node, *a, **kw):
    return _filled(L, node, 0)


@register(aten.ones_like.default, aten.ones.default, aten.new_ones.default)
def _ones(L, node, *a, **kw):
    return _filled(L, node, 1)


@register(aten.new_full.default)
def _new_full(L, node, x, size, value, **kw):
    return _filled(L, node, value)


@register(aten.scalar_tensor.default)
def _scalar_tensor(L, node, value, **kw):
    return _filled(L, node, value)


@register(aten.fill.Scalar)
def _fill(L, node, x, value):
    return _filled(L, node, value)


# ---- views ----------------------------------------------------------------------------------
@register(aten.view.default, aten._unsafe_view.default, aten.reshape.default)
def _view(L, node, x, size):
    return L.reshape(_val(L, x), meta(node).shape)


@register(aten.expand.default)
def _expand(L, node, x, size, implicit=False):
    return L.broadcast(_val(L, x), meta(node).shape)


@register(aten.permute.default)
def _permute(L, node, x, dims):
    v = _val(L, x)
    n = len(v.sizes)
    dims = [d % n for d in dims]
    return Val(v.base, tuple(v.sizes[d] for d in dims), tuple(v.strides[d] for d in dims), v.offset, v.dtype)


@register(aten.t.default)
def _t(L, node, x):
    v = _val(L, x)
    if len(v.sizes) < 2:
        return v
    return Val(v.base, v.sizes[::-1], v.strides[::-1], v.offset, v.dtype)


@register(aten.transpose.int)
def _transpose(L, node, x, d0, d1):
    v = _val(L, x)
    n = max(len(v.sizes), 1)
    d0, d1 = d0 % n, d1 % n
    s, st = list(v.sizes), list(v.strides)
    s[d0], s[d1] = s[d1], s[d0]
    st[d0], st[d1] = st[d1], st[d0]
    return Val(v.base, tuple(s), tuple(st), v.offset, v.dtype)


@register(aten.squeeze.dim, aten.squeeze.dims, aten.squeeze.default, aten.unsqueeze.default)
def _squeeze(L, node, x, *a):
    v = _val(L, x)
    m = meta(node)
    return L.reshape(v, m.shape)


@register(aten.slice.Tensor)
def _slice(L, node, x, dim=0, start=None, end=None, step=1):
    v = _val(L, x)
    n = v.sizes[dim]
    start, end, _ = slice(start, end, step).indices(n) if step > 0 else (0, 0, 1)
    length = max(0, (end - start + step - 1) // step)
    s, st = list(v.sizes), list(v.strides)
    off = v.offset + (start * st[dim] if length > 0 else 0)
    s[dim] = length
    st[dim] = st[dim] * step
    return Val(v.base, tuple(s), tuple(st), off, v.dtype)


@register(aten.select.int)
def _select(L, node, x, dim, index):
    v = _val(L, x)
    dim = dim % len(v.sizes)
    index = index % v.sizes[dim]
    s, st = list(v.sizes), list(v.strides)
    off = v.offset + index * st[dim]
    del s[dim], st[dim]
    return Val(v.base, tuple(s), tuple(st), off, v.dtype)


@register(aten.split.Tensor, aten.split_with_sizes.default)
def _split(L, node, x, sizes, dim=0):
    v = _val(L, x)
    dim = dim % len(v.sizes)
    if isinstance(sizes, int):
        n = v.sizes[dim]
        sizes = [min(sizes, n - i) for i in range(0, n, sizes)] or [0]
    out, start = [], 0
    for sz in sizes:
        s, st = list(v.sizes), list(v.strides)
        s[dim] = sz
        out.append(Val(v.base, tuple(s), tuple(st), v.offset + start * st[dim], v.dtype))
        start += sz
    return out


@register(aten.unbind.int)
def _unbind(L, node, x, dim=0):
    v = _val(L, x)
    dim = dim % len(v.sizes)
    out = []
    for i in range(v.sizes[dim]):
        s, st = list(v.sizes), list(v.strides)
        off = v.offset + i * st[dim]
        del s[dim], st[dim]
        out.append(Val(v.base, tuple(s), tuple(st), off, v.dtype))
    return out


@register(aten.as_strided.default)
def _as_strided(L, node, x, size, stride, storage_offset=None):
    v = _val(L, x)
    b = L.bases[v.base]
    if b.kind == "const":
        return L.const(b.const, v.dtype, tuple(size))
    off = v.offset if storage_offset is None else int(storage_offset) - _base_storage_offset(L, x)
    return Val(v.base, tuple(int(s) for s in size), tuple(int(s) for s in stride), off, v.dtype)


def _base_storage_offset(L, x):
    # as_strided offsets count from the storage start; our base buffers start
    # at the storage offset their FX value had (0 for computed values).
    v = L.env[x]
    m = meta(x)
    return int(m.storage_offset()) - v.offset


# ---- reductions ---------------------------------------------------------------------------------
def _dims(v: Val, dims):
    n = len(v.sizes)
    if dims is None or (isinstance(dims, (list, tuple)) and len(dims) == 0):
        return list(range(n))
    if isinstance(dims, int):
        dims = [dims]
    return sorted({d % max(n, 1) for d in dims}) if n else []


def reduce(L: Lowerer, node, op, x, dims, keepdim, out_dtype=None):
    v = _val(L, x)
    m = meta(node)
    out_dtype = out_dtype or m.dtype
    dims = _dims(v, dims)
    if not v.sizes:  # 0-d: the value itself
        nid = L.g.cast(L.node_of(v), TRN_DTYPE[out_dtype])
        return L.new_base(nid, "node", (), (), out_dtype)
    mask = 0
    for d in dims:
        mask |= 1 << d
    src = L.node_of(v)
    if v.dtype != out_dtype:  # sum(bool) -> int64, sum(x, dtype=...): convert first
        src = L.g.cast(src, TRN_DTYPE[out_dtype])
    nid = L.g.reduce(op, src, TRN_DTYPE[out_dtype], mask)
    ksizes = tuple(1 if i in dims else s for i, s in enumerate(v.sizes))
    r = L.new_base(nid, "node", ksizes, contiguous_strides(ksizes), out_dtype)
    if keepdim:
        return r
    return L.reshape(r, tuple(int(s) for s in m.shape))


def _any_all(L, node, x, dims, keepdim, op):
    """any/all: (x != 0) as int64, max/min over dims, back to bool."""
    v = _val(L, x)
    nz = L.g.pointwise(ew("NE"), TRN_DTYPE[v.dtype], TRN_DTYPE[torch.bool], [L.node_of(v), L.const(0, v.dtype).base], [])
    nz = L.g.cast(nz, TRN_DTYPE[torch.int64])
    iv = L.new_base(nz, "node", v.sizes, contiguous_strides(v.sizes), torch.int64)
    d = _dims(v, dims)
    if not v.sizes or not d:
        r = iv
    else:
        nid = L.g.reduce(op, nz, TRN_DTYPE[torch.int64], sum(1 << i for i in d))
        ks = tuple(1 if i in d else s for i, s in enumerate(v.sizes))
        r = L.new_base(nid, "node", ks, contiguous_strides(ks), torch.int64)
    b = L.g.cast(L.node_of(r), TRN_DTYPE[torch.bool])
    r = L.new_base(b, "node", r.sizes, contiguous_strides(r.sizes), torch.bool)
    return L.reshape(r, tuple(int(s) for s in meta(node).shape))


@register(aten.any.dim, aten.any.dims, aten.any.default)
def _any(L, node, x, dim=None, keepdim=False):
    return _any_all(L, node, x, dim, keepdim, TRN_GRAPH_MAX)


@register(aten.all.dim, aten.all.dims, aten.all.default)
def _all(L, node, x, dim=None, keepdim=False):
    return _any_all(L, node, x, dim, keepdim, TRN_GRAPH_MIN)


@register(aten.sum.dim_IntList)
def _sum(L, node, x, dims, keepdim=False, dtype=None):
    return reduce(L, node, TRN_GRAPH_SUM, x, dims, keepdim)


@register(aten.sum.default)
def _sum_all(L, node, x, dtype=None):
    return reduce(L, node, TRN_GRAPH_SUM, x, None, False)


@register(aten.prod.dim_int)
def _prod(L, node, x, dim, keepdim=False, dtype=None):
    return reduce(L, node, TRN_GRAPH_PROD, x, [dim], keepdim)


@register(aten.amax.default)
def _amax(L, node, x, dims=(), keepdim=False):
    return reduce(L, node, TRN_GRAPH_MAX, x, dims, keepdim)


@register(aten.amin.default)
def _amin(L, node, x, dims=(), keepdim=False):
    return reduce(L, node, TRN_GRAPH_MIN, x, dims, keepdim)


def _scale(L, node_meta_shape, v: Val, factor, dtype):
    """v * factor as a new (fusable) node of v's shape."""
    nid = L.g.pointwise(ew("MUL"), TRN_DTYPE[dtype], TRN_DTYPE[dtype], [L.node_of(v), L.const(factor, dtype).base], [])
    return L.new_base(nid, "node", v.sizes, contiguous_strides(v.sizes), dtype)


@register(aten.mean.dim, aten.mean.default)
def _mean(L, node, x, dims=None, keepdim=False, dtype=None):
    m = meta(node)
    if not m.dtype.is_floating_point:
        raise Unsupported("integer mean")
    v = _val(L, x)
    d = _dims(v, dims)
    n = math.prod(v.sizes[i] for i in d) if v.sizes else 1
    s = reduce(L, node, TRN_GRAPH_SUM, x, d, True, m.dtype)
    s = _scale(L, None, s, 1.0 / n if n else float("nan"), m.dtype)
    return s if keepdim else L.reshape(s, tuple(int(q) for q in m.shape))


def _var(L, node, x, dims, correction, keepdim, out_meta):
    v = _val(L, x)
    dt = out_meta.dtype
    d = _dims(v, dims)
    n = math.prod(v.sizes[i] for i in d) if v.sizes else 1
    s = reduce(L, node, TRN_GRAPH_SUM, x, d, True, dt)
    mean = _scale(L, None, s, 1.0 / n if n else float("nan"), dt)
    diff = L.g.pointwise(ew("SUB"), TRN_DTYPE[dt], TRN_DTYPE[dt],
                         [L.node_of(v), L.node_of(L.broadcast(mean, v.sizes))], [1.0])
    sq = L.g.pointwise(ew("MUL"), TRN_DTYPE[dt], TRN_DTYPE[dt], [diff, diff], [])
    mask = sum(1 << i for i in d)
    ss = L.g.reduce(TRN_GRAPH_SUM, sq, TRN_DTYPE[dt], mask)
    ksizes = mean.sizes
    ssv = L.new_base(ss, "node", ksizes, contiguous_strides(ksizes), dt)
    c = 1 if correction is None else correction
    var = _scale(L, None, ssv, 1.0 / max(n - c, 0) if n - c > 0 else float("inf"), dt)
    return var, mean


@register(aten.var.correction)
def _var_c(L, node, x, dims=None, correction=None, keepdim=False):
    m = meta(node)
    var, _ = _var(L, node, x, dims, correction, True, m)
    return var if keepdim else L.reshape(var, tuple(m.shape))


@register(aten.var_mean.correction)
def _var_mean(L, node, x, dims=None, correction=None, keepdim=False):
    m = meta(node)[0]
    var, mean = _var(L, node, x, dims, correction, True, m)
    if keepdim:
        return [var, mean]
    return [L.reshape(var, tuple(m.shape)), L.reshape(mean, tuple(m.shape))]


# ---- extern calls --------------------------------------------------------------------------------
def _as3(L, v: Val) -> int:
    if len(v.sizes) == 2:
        v = Val(v.base, (1,) + tuple(v.sizes), (0,) + tuple(v.strides), v.offset, v.dtype)
    b = L.bases[v.base]
    if b.kind == "const":
        raise Unsupported("matmul of a constant")
    return L.node_of(v) if tuple(v.sizes) != b.sizes or v.offset or not same_layout(v.sizes, v.strides, b.layout) \
        else v.base


def _matmul(L, node, a, b, alpha=1.0):
    va, vb = _val(L, a), _val(L, b)
    if va.dtype != vb.dtype or va.dtype not in (torch.float32, torch.float16, torch.bfloat16):
        raise Unsupported("matmul dtype")
    nid = L.g.matmul(_as3(L, va), _as3(L, vb), float(alpha))
    bsz = va.sizes[0] if len(va.sizes) == 3 else 1
    sizes = (bsz, va.sizes[-2], vb.sizes[-1])
    r = L.new_base(nid, "node", sizes, contiguous_strides(sizes), va.dtype)
    if len(va.sizes) == 2:
        r = Val(r.base, sizes[1:], contiguous_strides(sizes[1:]), 0, r.dtype)
    return r


@register(aten.mm.default, aten.bmm.default)
def _mm(L, node, a, b):
    return _matmul(L, node, a, b)


@register(aten.addmm.default)
def _addmm(L, node, bias, a, b, beta=1, alpha=1):
    prod = _matmul(L, node, a, b, alpha)
    if beta == 0:
        return prod
    return pointwise(L, node, "ADD", [prod, _val(L, bias)], params=(beta,))


@register(aten.convolution.default)
def _conv(L, node, x, w, bias, stride, padding, dilation, transposed, output_padding, groups):
    if transposed:
        raise Unsupported("transposed convolution")
    vx, vw = _val(L, x), _val(L, w)
    if vx.dtype not in (torch.float32, torch.float16, torch.bfloat16):
        raise Unsupported("conv dtype")
    sp = len(vw.sizes) - 2
    vb = _val(L, bias) if bias is not None else None
    m = meta(node)
    nid = L.g.conv(TRN_CONV_FORWARD, L.node_of(vx), L.node_of(vw), L.node_of(vb) if vb else -1,
                   _expand_list(stride, sp), _expand_list(padding, sp), _expand_list(dilation, sp),
                   int(groups), list(m.shape))
    return L.finish_node(nid, m)


def _expand_list(v, n):
    v = list(v)
    return v * n if len(v) == 1 else v


@register(aten.convolution_backward.default)
def _conv_bw(L, node, go, x, w, bias_sizes, stride, padding, dilation, transposed, output_padding, groups,
             output_mask):
    if transposed:
        raise Unsupported("transposed convolution")
    vg, vx, vw = _val(L, go), _val(L, x), _val(L, w)
    if vx.dtype not in (torch.float32, torch.float16, torch.bfloat16):
        raise Unsupported("conv dtype")
    sp = len(vw.sizes) - 2
    args = (_expand_list(stride, sp), _expand_list(padding, sp), _expand_list(dilation, sp), int(groups))
    ms = meta(node)
    out = [None, None, None]
    if output_mask[0]:
        nid = L.g.conv(TRN_CONV_BACKWARD_DATA, L.node_of(vg), L.node_of(vw), -1, *args, list(vx.sizes))
        out[0] = L.finish_node(nid, ms[0])
    if output_mask[1]:
        nid = L.g.conv(TRN_CONV_BACKWARD_WEIGHTS, L.node_of(vx), L.node_of(vg), -1, *args, list(vw.sizes))
        out[1] = L.finish_node(nid, ms[1])
    if output_mask[2]:
        dims = [0] + list(range(2, len(vg.sizes)))
        mask = sum(1 << d for d in dims)
        nid = L.g.reduce(TRN_GRAPH_SUM, L.node_of(vg), TRN_DTYPE[vg.dtype], mask)
        ks = tuple(1 if i in dims else s for i, s in enumerate(vg.sizes))
        r = L.new_base(nid, "node", ks, contiguous_strides(ks), vg.dtype)
        out[2] = L.reshape(r, tuple(ms[2].shape))
    return out


# ---- foreach ops (the optimizer step): one pointwise op per list element ------------------
def _foreach(op, kind):
    """kind: 'scalar' (list, scalar), 'list' (list, list), 'unary', 'tensor'
    (list, 0-d tensor), 'cmul' (list, list, list, value), 'spow' (scalar, list)."""
    def low(L, node, *args, **kw):
        ms = meta(node)
        out = []
        for i, m in enumerate(ms):
            if kind == "unary":
                ins, params = [_val(L, args[0][i])], ()
            elif kind == "scalar":
                ins, params = [_val(L, args[0][i]), args[1]], (kw.get("alpha", 1),)
            elif kind == "list":
                ins, params = [_val(L, args[0][i]), _val(L, args[1][i])], (kw.get("alpha", args[2] if len(args) > 2 else 1),)
            elif kind == "tensor":
                ins, params = [_val(L, args[0][i]), _val(L, args[1])], (kw.get("alpha", 1),)
            elif kind == "spow":
                ins, params = [args[0], _val(L, args[1][i])], ()
            else:  # cmul / cdiv with a scalar value
                value = args[3] if len(args) > 3 else kw.get("value", 1)
                if not isinstance(value, (int, float)):
                    raise Unsupported("tensor value")
                ins, params = [_val(L, args[0][i]), _val(L, args[1][i]), _val(L, args[2][i])], (value,)
            if op in ("ADD", "SUB"):
                params = params or (1,)
            out.append(pointwise(L, node, op, ins, params=params, m=m))
        return out
    return low


_F = aten
for _t, _op, _k in [
    (_F._foreach_add.Scalar, "ADD", "scalar"), (_F._foreach_add.List, "ADD", "list"),
    (_F._foreach_add.Tensor, "ADD", "tensor"), (_F._foreach_sub.Scalar, "SUB", "scalar"),
    (_F._foreach_sub.List, "SUB", "list"), (_F._foreach_mul.Scalar, "MUL", "scalar"),
    (_F._foreach_mul.List, "MUL", "list"), (_F._foreach_mul.Tensor, "MUL", "tensor"),
    (_F._foreach_div.Scalar, "DIV", "scalar"), (_F._foreach_div.List, "DIV", "list"),
    (_F._foreach_div.Tensor, "DIV", "tensor"), (_F._foreach_maximum.List, "MAXIMUM", "list"),
    (_F._foreach_minimum.List, "MINIMUM", "list"), (_F._foreach_pow.ScalarAndTensor, "POW", "spow"),
    (_F._foreach_pow.Scalar, "POW", "scalar"), (_F._foreach_pow.List, "POW", "list"),
    (_F._foreach_sqrt.default, "SQRT", "unary"), (_F._foreach_neg.default, "NEG", "unary"),
    (_F._foreach_reciprocal.default, "RECIPROCAL", "unary"), (_F._foreach_abs.default, "ABS", "unary"),
    (_F._foreach_exp.default, "EXP", "unary"), (_F._foreach_sign.default, "SIGN", "unary"),
    (_F._foreach_addcmul.Scalar, "ADDCMUL", "cmul"), (_F._foreach_addcdiv.Scalar, "ADDCDIV", "cmul"),
    (_F._foreach_lerp.Scalar, "LERP", "lerp"),
]:
    if _k == "lerp":
        LOWERINGS[_t] = (lambda L, node, a, b, w: [
            pointwise(L, node, "LERP", [_val(L, x), _val(L, y), w], m=m)
            for x, y, m in zip(a, b, meta(node))])
    else:
        LOWERINGS[_t] = _foreach(_op, _k)

from . import lower_index  # noqa: E402,F401  (registers the index-op lowerings)
