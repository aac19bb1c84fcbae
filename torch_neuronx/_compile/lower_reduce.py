"""Reductions -> libtrn reduce nodes (trn_graph_reduce_op over a dim mask):
sum, prod, amax/amin, any/all, mean, var and var_mean.
"""

from __future__ import annotations

import math

import torch

from .lower_core import (
    TRN_DTYPE,
    TRN_GRAPH_MAX,
    TRN_GRAPH_MIN,
    TRN_GRAPH_PROD,
    TRN_GRAPH_SUM,
    Unsupported,
    Val,
    _val,
    aten,
    contiguous_strides,
    ew,
    meta,
    register,
)


def _dims(v: Val, dims):
    n = len(v.sizes)
    if dims is None or (isinstance(dims, (list, tuple)) and len(dims) == 0):
        return list(range(n))
    if isinstance(dims, int):
        dims = [dims]
    return sorted({d % max(n, 1) for d in dims}) if n else []


def reduce(L, node, op, x, dims, keepdim, out_dtype=None):
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
    nz = L.g.pointwise(
        ew("NE"),
        TRN_DTYPE[v.dtype],
        TRN_DTYPE[torch.bool],
        [L.node_of(v), L.const(0, v.dtype).base],
        [],
    )
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


@register(aten.max.default, aten.min.default)
def _max_min_all(L, node, x):
    """torch.max(x) / torch.min(x): amax/amin over every dim (NaN wins the
    same way); float8 training's amax (torchao) is one. An empty input runs
    eagerly, which raises PyTorch's error."""
    v = _val(L, x)
    if any(int(s) == 0 for s in v.sizes):
        raise Unsupported("max/min of an empty tensor")
    op = TRN_GRAPH_MAX if node.target is aten.max.default else TRN_GRAPH_MIN
    return reduce(L, node, op, x, None, False)


def _scale(L, node_meta_shape, v: Val, factor, dtype):
    """v * factor as a new (fusable) node of v's shape."""
    nid = L.g.pointwise(
        ew("MUL"),
        TRN_DTYPE[dtype],
        TRN_DTYPE[dtype],
        [L.node_of(v), L.const(factor, dtype).base],
        [],
    )
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
    diff = L.g.pointwise(
        ew("SUB"),
        TRN_DTYPE[dt],
        TRN_DTYPE[dt],
        [L.node_of(v), L.node_of(L.broadcast(mean, v.sizes))],
        [1.0],
    )
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
