"""What every lowering shares (lower.py's Lowerer and the lower_*.py families).

Owner: the value model (``Val``: a view of a builder node's *base*; ``Base``;
the python-only values of CPU tensors and host results), the libtrn ids a
lowering passes (``TRN_DTYPE``, the trn_graph_reduce_op / trn_conv_kind values,
``ew()`` for trn_ew_op, all read from the C headers through _C), layout
helpers (contiguous, dense, view strides), the lowering registry
(``register``, ``LOWERINGS``) and the helpers every family calls (``_val``,
``pointwise``). Imports no lowering module.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Callable

import torch

from .. import _C
from .._trn_constants import DTYPE_IDS, VALUES

aten = torch.ops.aten
prims = torch.ops.prims


# The trn_dtype of each torch dtype the compiler takes (the values are
# libtrn/include/trn/dtype.h's, looked up by name).
TRN_DTYPE = {
    d: DTYPE_IDS[str(d).removeprefix("torch.")]
    for d in (
        torch.bool,
        torch.uint8,
        torch.int8,
        torch.int16,
        torch.int32,
        torch.int64,
        torch.uint16,
        torch.uint32,
        torch.uint64,
        torch.float16,
        torch.bfloat16,
        torch.float32,
        torch.float64,
        # 8-bit floats: libtrn's graph takes copies and casts of them (to
        # them from float32/16/bfloat16/float64, from them to float32) and
        # refuses the rest, which then run as host steps.
        torch.float8_e4m3fn,
        torch.float8_e5m2,
        torch.float8_e4m3fnuz,
        torch.float8_e5m2fnuz,
        torch.float8_e8m0fnu,
    )
}
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
    inputs: list  # (builder node | None, placeholder index)
    exports: list  # (builder node, sizes, strides, dtype)
    hosts: list  # HostStep per host step number
    outputs: Any  # FX output structure with Val/py values
    env_py: dict  # placeholder index -> python-only values
    env: dict = field(default_factory=dict)
    stores: int = 0  # inputs written in place (trn_graph_store)


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
    if (
        isinstance(v, _PyConst)
        and isinstance(v.value, torch.Tensor)
        and v.value.dim() == 0
        and v.value.device.type == "cpu"
        and v.value.dtype in TRN_DTYPE
        and not v.value.requires_grad
    ):
        from torch._subclasses.fake_tensor import unset_fake_temporarily

        with unset_fake_temporarily():  # lowering runs under AOTAutograd's fake mode
            return v.value.item()
    return None


# ---- lowerings ------------------------------------------------------------------------
LOWERINGS: dict[Any, Callable] = {}


def register(*targets):
    def deco(fn):
        for t in targets:
            LOWERINGS[t] = fn
        return fn

    return deco


def _val(L, a, dtype=None):
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


def pointwise(L, node, op: str, inputs, compute=None, params=(), out_dtype=None, m=None):
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
