"""sort, topk, cumsum/cumprod and histc -> extern steps calling libtrn's
eager kernels (trn/sort.h, trn/reduce.h, trn/histc.h through
trn/graph_extern.h): no host step.

A MoE router under torch.compile is topk (the experts of each token),
argsort (the token permutation), the per-expert counts (histc on the expert
ids in Hugging Face's grouped-experts path) and cumsum (the experts' offsets
for torch._grouped_mm). The graph compiler has no sort or scan schedule, so
these ran as host steps: the graph split around them and the values made a
round trip through the caller. Each is now a step of the compiled program
that queues the eager op's own kernel on the run's stream, its context the
kernel's descriptor (sizes and strides, all static), its input read through
its view, its results contiguous nodes planned like any other: the bits are
eager's and the per-expert counts, being data, never reach the host.

Owner: these lowerings. What they cannot take (0-d or empty inputs, a
dtype the kernels do not sort or scan, a cumsum dtype reached by an inexact
cast, topk of bool, which eager rejects, a histc whose range comes from the
data (min == max) or is not finite and ordered) stays a host step.
"""

from __future__ import annotations

import math

import torch

from .lower_core import TRN_DTYPE, Unsupported, Val, _val, aten, contiguous_strides, meta, register

# trn_scan_op (trn/reduce.h)
_CUMSUM, _CUMPROD = range(2)

_INT = (torch.bool, torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64)
# Casts a scan's input may take in the graph: exact, so the cast gives the
# values eager's self.to(dtype) gives.
_EXACT = {
    torch.int64: _INT,
    torch.float32: (torch.float16, torch.bfloat16),
    torch.float64: (torch.float16, torch.bfloat16, torch.float32),
}


def _input(L, x) -> Val:
    v = _val(L, x)
    if not isinstance(v, Val) or not v.sizes or any(int(s) == 0 for s in v.sizes):
        raise Unsupported("sort/scan: 0-d, empty or non-device input")
    if v.dtype not in TRN_DTYPE:
        raise Unsupported("sort/scan dtype")
    if L.bases[v.base].kind in ("const", "iota"):
        v = L.materialize(v)
    return v


def _sort(L, node, x, dim, descending, k, topk, sorted_=True):
    v = _input(L, x)
    nd = len(v.sizes)
    dim = dim + nd if dim < 0 else dim
    if not 0 <= dim < nd:
        raise Unsupported("sort dim")
    if topk and v.dtype == torch.bool:
        raise Unsupported("topk of bool (eager raises)")
    if k is None:  # a sort: the whole dim
        k = int(v.sizes[dim])
    m = meta(node)
    out_sizes = tuple(int(s) for s in m[0].shape)
    st = contiguous_strides(out_sizes)
    call = L.g.sort_call(
        L.node_of(v),
        TRN_DTYPE[v.dtype],
        topk,
        [int(s) for s in v.sizes],
        [int(s) for s in v.strides],
        list(st),
        list(st),
        dim,
        bool(descending),
        int(k),
        bool(sorted_),
    )
    vals = L.g.extern_result(call, TRN_DTYPE[v.dtype], list(out_sizes), list(st))
    idx = L.g.extern_result(call, TRN_DTYPE[torch.int64], list(out_sizes), list(st))
    return (
        L.new_base(vals, "node", out_sizes, st, v.dtype),
        L.new_base(idx, "node", out_sizes, st, torch.int64),
    )


@register(aten.sort.default)
def _sort_default(L, node, x, dim=-1, descending=False):
    return _sort(L, node, x, dim, descending, None, False)


@register(aten.sort.stable)
def _sort_stable(L, node, x, *, stable=None, dim=-1, descending=False):
    # Every libtrn sort is stable (trn/sort.h): stable=False gives the same.
    return _sort(L, node, x, dim, descending, None, False)


@register(aten.topk.default)
def _topk(L, node, x, k, dim=-1, largest=True, sorted=True):
    return _sort(L, node, x, dim, largest, k, True, sorted)


def _scan(L, node, op, x, dim, dtype=None):
    v = _input(L, x)
    out = meta(node).dtype
    if out != v.dtype:
        if v.dtype not in _EXACT.get(out, ()):
            raise Unsupported("scan: inexact cast")
        nid = L.g.cast(L.node_of(v), TRN_DTYPE[out])
        layout = contiguous_strides(v.sizes)
        v = L.new_base(nid, "node", v.sizes, layout, out)
    if out == torch.bool or out not in TRN_DTYPE:
        raise Unsupported("scan dtype")
    nd = len(v.sizes)
    dim = dim + nd if dim < 0 else dim
    sizes = [int(s) for s in v.sizes]
    st = contiguous_strides(sizes)
    call = L.g.scan_call(
        L.node_of(v), TRN_DTYPE[out], op, sizes, [int(s) for s in v.strides], list(st), dim
    )
    nid = L.g.extern_result(call, TRN_DTYPE[out], sizes, list(st))
    return L.new_base(nid, "node", sizes, st, out)


@register(aten.cumsum.default)
def _cumsum(L, node, x, dim, *, dtype=None):
    return _scan(L, node, _CUMSUM, x, dim, dtype)


@register(aten.cumprod.default)
def _cumprod(L, node, x, dim, *, dtype=None):
    return _scan(L, node, _CUMPROD, x, dim, dtype)


@register(aten.histc.default)
def _histc(L, node, x, bins=100, min=0, max=0):
    v = _val(L, x)
    if not isinstance(v, Val) or v.dtype not in TRN_DTYPE or int(bins) < 1:
        raise Unsupported("histc input")
    from torch._subclasses.fake_tensor import unset_fake_temporarily

    with unset_fake_temporarily():  # the range in the input's dtype, as eager takes it
        lo, hi = (
            torch.tensor(float(s), dtype=torch.float64).to(v.dtype).item() for s in (min, max)
        )
    if not (math.isfinite(lo) and math.isfinite(hi) and lo < hi):
        raise Unsupported("histc range from the data, or not finite and ordered")
    n = math.prod(int(s) for s in v.sizes)
    if n == 0:
        raise Unsupported("histc of an empty input")
    if L.bases[v.base].kind in ("const", "iota") or not _contiguous(v):
        v = L.materialize(v)  # the kernel reads n contiguous elements
    call = L.g.histc_call(L.node_of(v), TRN_DTYPE[v.dtype], n, int(bins), float(lo), float(hi))
    nid = L.g.extern_result(call, TRN_DTYPE[v.dtype], [int(bins)], [1])
    return L.new_base(nid, "node", (int(bins),), (1,), v.dtype)


def _contiguous(v: Val) -> bool:
    return all(n == 1 or s == c for n, s, c in zip(v.sizes, v.strides, contiguous_strides(v.sizes)))
