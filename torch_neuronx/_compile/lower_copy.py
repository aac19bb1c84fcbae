"""Casts, copies and creation -> libtrn cast / store / const nodes: _to_copy,
clone, copy, copy_ (an in-place store into a graph input), alias/detach, and
full/zeros/ones/fill/scalar_tensor (constants: no memory).
"""

from __future__ import annotations

import torch

from .lower_core import TRN_DTYPE, Unsupported, Val, _val, aten, is_dense, meta, register


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
    if (
        b.kind != "input"
        or d.base in L.stored
        or tuple(d.sizes) != b.sizes
        or d.offset != 0
        or not is_dense(b.sizes, b.layout)
    ):
        raise Unsupported("copy_ into a strided input")
    v = (
        L.broadcast(_val(L, src) if isinstance(src, torch.fx.Node) else src, d.sizes)
        if isinstance(src, torch.fx.Node)
        else L.const(src, d.dtype, d.sizes)
    )
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


@register(
    aten.zeros_like.default,
    aten.zeros.default,
    aten.new_zeros.default,
    aten.empty_like.default,
    aten.empty.memory_format,
    aten.new_empty.default,
    aten.empty_strided.default,
    aten.new_empty_strided.default,
)
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
