"""Index ops (embedding, index_select, gather, advanced indexing, index_put,
scatter, the embedding backward) -> libtrn gather/scatter nodes.

Owner: the geometry only: which result dim walks which source dim, which
source dim each index selects, and how an index tensor is laid over the
result (a broadcast view). libtrn renders them as bounds-checked loops in
the generated C (trn_graph_gather / trn_graph_scatter); an index out of
range fails the run with the op's PyTorch error, raised when the graph's
run ends. A boolean mask whose selected elements each take their own value
(x[mask] = values, masked_scatter) gathers at each element's rank, a prefix
count of the mask (log2(n) passes of clamped gathers). Anything else (more
indices) raises Unsupported and runs as an eager host step.
"""

from __future__ import annotations

import math

import torch

from .._trn_constants import VALUES
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
    ew,
    meta,
    register,
)

# trn_graph_index_error (libtrn/include/trn/compiler.h)
TRN_INDEX_ERROR_BOUNDS = VALUES["TRN_INDEX_ERROR_BOUNDS"]
TRN_INDEX_ERROR_SELF = VALUES["TRN_INDEX_ERROR_SELF"]
TRN_INDEX_ERROR_GATHER = VALUES["TRN_INDEX_ERROR_GATHER"]
TRN_INDEX_ERROR_COUNT = VALUES["TRN_INDEX_ERROR_COUNT"]
TRN_INDEX_ERROR_SOURCE = VALUES["TRN_INDEX_ERROR_SOURCE"]


def _index_int64(L, v: Val) -> Val:
    if v.dtype == torch.int64:
        return v
    if v.dtype not in (torch.int32, torch.int16, torch.int8, torch.uint8):
        raise Unsupported(f"index dtype {v.dtype}")
    nid = L.g.cast(L.node_of(v), TRN_DTYPE[torch.int64])
    return L.new_base(nid, "node", v.sizes, _contig(v.sizes), torch.int64)


def _contig(sizes):
    out, s = [], 1
    for n in reversed(sizes):
        out.append(s)
        s *= max(int(n), 1)
    return tuple(reversed(out))


def _place(L, v: Val, out_sizes, dims) -> int:
    """Index `v` laid over a result of `out_sizes`: v's dim i runs along
    result dim dims[i] (size 1 broadcasts), the other result dims repeat it."""
    v = _index_int64(L, v)
    strides = [0] * len(out_sizes)
    for i, d in enumerate(dims):
        if v.sizes[i] == out_sizes[d]:
            strides[d] = v.strides[i] if out_sizes[d] > 1 else 0
        elif v.sizes[i] != 1:
            raise Unsupported("index does not broadcast")
    return L.node_of(Val(v.base, tuple(out_sizes), tuple(strides), v.offset, torch.int64))


def _in_memory(L, v: Val) -> int:
    """A node for v that the compiler reads from memory (not a literal)."""
    if L.bases[v.base].kind == "const":
        v = L.materialize(v)
    return L.node_of(v)


def _src(L, x) -> Val:
    v = _val(L, x)
    if not isinstance(v, Val) or not v.sizes:
        raise Unsupported("0-d or scalar source")
    return v


def _out(node):
    return tuple(int(s) for s in meta(node).shape)


@register(aten.embedding.default)
def _embedding(L, node, weight, indices, padding_idx=-1, scale_grad_by_freq=False, sparse=False):
    w, i = _src(L, weight), _val(L, indices)
    if len(w.sizes) != 2 or not isinstance(i, Val):
        raise Unsupported("embedding of a non-2-d weight")
    out = _out(node)
    k = len(i.sizes)
    idx = _place(L, i, out, list(range(k)))
    nid = L.g.gather(_in_memory(L, w), [idx], [0], [-1] * k + [1], 0, TRN_INDEX_ERROR_SELF)
    return L.finish_node(nid, meta(node))


@register(aten.index_select.default)
def _index_select(L, node, x, dim, index):
    v, i = _src(L, x), _val(L, index)
    if not isinstance(i, Val) or len(i.sizes) > 1:
        raise Unsupported("index_select index")
    out = _out(node)
    dim %= len(v.sizes)
    idx = _place(L, i, out, [dim] if i.sizes else [])
    nid = L.g.gather(
        _in_memory(L, v),
        [idx],
        [dim],
        [-1 if j == dim else j for j in range(len(out))],
        0,
        TRN_INDEX_ERROR_SELF,
    )
    return L.finish_node(nid, meta(node))


@register(aten.gather.default)
def _gather(L, node, x, dim, index, sparse_grad=False):
    v, i = _src(L, x), _val(L, index)
    if not isinstance(i, Val) or len(i.sizes) != len(v.sizes):
        raise Unsupported("gather of a 0-d tensor")
    out = _out(node)
    dim %= len(v.sizes)
    idx = _place(L, i, out, list(range(len(out))))
    nid = L.g.gather(
        _in_memory(L, v),
        [idx],
        [dim],
        [-1 if j == dim else j for j in range(len(out))],
        0,
        TRN_INDEX_ERROR_GATHER,
    )
    return L.finish_node(nid, meta(node))


def _advanced(L, v: Val, indices, max_idx):
    """Geometry of x[indices] (PyTorch's advanced indexing): the result's
    sizes, per result dim the x dim it walks (-1: an index dim), the x dims
    the indices select, and each index laid over the result."""
    sel = [(d, _val(L, a)) for d, a in enumerate(indices) if a is not None]
    if (
        not sel
        or len(sel) > max_idx
        or any(not isinstance(i, Val) or i.dtype == torch.bool for _, i in sel)
    ):
        raise Unsupported("index form")
    dims = [d for d, _ in sel]
    bshape = tuple(torch.broadcast_shapes(*[torch.Size(i.sizes) for _, i in sel]))
    rest = [d for d in range(len(v.sizes)) if d not in dims]
    if dims == list(range(dims[0], dims[-1] + 1)):  # adjacent: the index dims replace them in place
        before = [d for d in rest if d < dims[0]]
        after = [d for d in rest if d > dims[-1]]
    else:  # PyTorch puts the index dims first
        before, after = [], rest
    walk = before + [-1] * len(bshape) + after
    out = tuple(bshape[j - len(before)] if d < 0 else v.sizes[d] for j, d in enumerate(walk))
    start = len(before)
    place = []
    for _, i in sel:
        pad = len(bshape) - len(i.sizes)
        ib = Val(
            i.base, (1,) * pad + tuple(i.sizes), (0,) * pad + tuple(i.strides), i.offset, i.dtype
        )
        place.append(_place(L, ib, out, list(range(start, start + len(bshape)))))
    return out, walk, dims, place


@register(aten.index.Tensor)
def _index(L, node, x, indices):
    v = _src(L, x)
    out, walk, dims, place = _advanced(L, v, indices, 2)
    if out != _out(node):
        raise Unsupported("index shape")
    nid = L.g.gather(_in_memory(L, v), place, dims, walk, 1, TRN_INDEX_ERROR_BOUNDS)
    return L.finish_node(nid, meta(node))


@register(aten.index_put.default)
def _index_put(L, node, x, indices, values, accumulate=False):
    v = _src(L, x)
    if any(
        isinstance(a, torch.fx.Node) and meta(a) is not None and meta(a).dtype == torch.bool
        for a in indices
    ):
        return _masked_put(L, node, v, indices, values, accumulate)
    out, walk, dims, place = _advanced(L, v, indices, 1)
    vals = _val(L, values)
    if not isinstance(vals, Val) or vals.dtype != v.dtype:
        raise Unsupported("index_put values")
    src = _in_memory(L, L.broadcast(vals, out))
    nid = L.g.scatter(
        L.node_of(v),
        place[0],
        src,
        dims[0],
        walk,
        FOLD["sum"] if accumulate else 0,
        1,
        TRN_INDEX_ERROR_BOUNDS,
    )
    return L.finish_node(nid, meta(node))


def _masked_put(L, node, v: Val, indices, values, accumulate):
    """x[mask] = values (index_put with one boolean index) when every selected
    element gets the same value wherever it is (values of size 1 along the
    selection): where(mask, values, x), or x + values there (accumulate). A
    mask position is written at most once, so this is eager's result."""
    sel = [(d, a) for d, a in enumerate(indices) if a is not None]
    if len(sel) != 1:
        raise Unsupported("boolean mask with other indices")
    d, mask = sel[0][0], _val(L, sel[0][1])
    vals = _val(L, values)
    if (
        not isinstance(mask, Val)
        or not isinstance(vals, Val)
        or vals.dtype != v.dtype
        or not mask.sizes
    ):
        raise Unsupported("masked index_put form")
    if accumulate and v.dtype == torch.bool:
        raise Unsupported("accumulating bool index_put")
    k, xs = len(mask.sizes), tuple(v.sizes)
    if tuple(mask.sizes) != xs[d : d + k]:
        raise Unsupported("mask shape")  # eager raises its IndexError
    pre, post = xs[:d], xs[d + k :]
    vs, vst = tuple(vals.sizes), tuple(vals.strides)
    if len(vs) > len(pre) + 1 + len(post):
        raise Unsupported("values of more dims than the selection")
    if len(vs) > len(post) and vs[len(vs) - len(post) - 1] != 1:
        return _masked_put_each(L, node, v, d, mask, vals, accumulate)
    # values laid over x: right-aligned to pre + (selection,) + post, 0 along the mask
    if len(vs) > len(post):
        n_pre = len(vs) - len(post) - 1
        lead, lead_st, tail, tail_st = vs[:n_pre], vst[:n_pre], vs[n_pre + 1 :], vst[n_pre + 1 :]
    else:
        pad = len(post) - len(vs)
        lead, lead_st, tail, tail_st = (), (), (1,) * pad + vs, (0,) * pad + vst
    pad = len(pre) - len(lead)
    vsz = (1,) * pad + lead + (1,) * k + tail
    vstr = (0,) * pad + lead_st + (0,) * k + tail_st
    val = L.broadcast(Val(vals.base, vsz, vstr, vals.offset, vals.dtype), xs)
    mk = Val(
        mask.base,
        xs,
        (0,) * len(pre) + tuple(mask.strides) + (0,) * len(post),
        mask.offset,
        torch.bool,
    )
    dt = v.dtype
    new = L.node_of(val)
    if accumulate:
        new = _pw(L, "ADD", dt, dt, [L.node_of(v), new], (1,))
    nid = _pw(L, "WHERE", dt, dt, [L.node_of(mk), new, L.node_of(v)])
    return L.finish_node(nid, meta(node))


def _prefix_count(L, mask: Val) -> Val:
    """The inclusive count of true elements up to each element of the mask,
    row-major over its dims: (numel,) int64. Hillis-Steele: log2(numel)
    passes, pass s adding the count s elements back (a clamped gather of the
    previous pass, in memory); each pass is one parallel loop."""
    i64 = torch.int64
    n = math.prod(mask.sizes)
    cnt = L.g.cast(L.node_of(mask), TRN_DTYPE[i64])
    p = L.reshape(L.new_base(cnt, "node", mask.sizes, _contig(mask.sizes), i64), (n,))
    coord = _iota(L, i64, (n,), [1])
    shift = 1
    while shift < n:
        back = L.g.gather(
            _in_memory(L, p), [_clamped(L, coord, shift, n)], [0], [-1], 0, TRN_INDEX_ERROR_BOUNDS
        )
        inside = _pw(L, "GE", i64, torch.bool, [coord, L.const(shift, i64).base])
        back = _pw(L, "WHERE", i64, i64, [inside, back, L.const(0, i64).base])
        nid = _pw(L, "ADD", i64, i64, [L.node_of(p), back], (1,))
        p = L.new_base(nid, "node", (n,), (1,), i64)
        shift *= 2
    return p


def _selected_rank(L, xs, mk: int, prefix: Val, pstrides, ok_op: str, limit: int):
    """(sel, idx) over the result's sizes xs for the k-th selected element
    taking value k: sel is the mask where the count passes ok_op(count,
    limit) and False everywhere when it fails; idx is the element's rank
    (prefix count minus one, `pstrides` laying the prefix over xs) where
    sel, 0 elsewhere, and -1 - count everywhere when the count fails, so a
    gather from the values fails the run with the count (styles COUNT,
    SOURCE) and the result keeps x's values."""
    i64, b = torch.int64, torch.bool
    c = L.const
    last = prefix.sizes[0] - 1
    total = L.g.gather(
        _in_memory(L, prefix),
        [_iota(L, i64, xs, [0] * len(xs), last)],
        [0],
        [-1] * len(xs),
        0,
        TRN_INDEX_ERROR_BOUNDS,
    )
    ok = _pw(L, ok_op, i64, b, [total, c(limit, i64).base])
    sel = _pw(L, "LOGICAL_AND", b, b, [mk, ok])
    rank = _pw(
        L,
        "SUB",
        i64,
        i64,
        [L.node_of(Val(prefix.base, xs, pstrides, 0, i64)), c(1, i64).base],
        (1,),
    )
    bad = _pw(L, "SUB", i64, i64, [c(-1, i64).base, total], (1,))
    idx = _pw(
        L, "WHERE", i64, i64, [sel, rank, _pw(L, "WHERE", i64, i64, [ok, c(0, i64).base, bad])]
    )
    return sel, idx


def _masked_put_each(L, node, v: Val, d, mask: Val, vals: Val, accumulate):
    """x[mask] = values with one value per selected element: the k-th
    selected element (row-major over the mask) takes values[..., k, ...].
    The count must be the values' size along the selection, as eager checks
    (its shape-mismatch error, style COUNT)."""
    xs, k = tuple(v.sizes), len(mask.sizes)
    pre, post = xs[:d], xs[d + k :]
    src_sizes = pre + (int(vals.sizes[len(vals.sizes) - len(post) - 1]),) + post
    n = src_sizes[d]
    if n == 0 or 0 in mask.sizes:
        raise Unsupported("no values")
    src = _in_memory(L, L.broadcast(vals, src_sizes))
    mk = L.node_of(
        Val(
            mask.base,
            xs,
            (0,) * len(pre) + tuple(mask.strides) + (0,) * len(post),
            mask.offset,
            torch.bool,
        )
    )
    pstrides = (0,) * len(pre) + _contig(mask.sizes) + (0,) * len(post)
    sel, idx = _selected_rank(L, xs, mk, _prefix_count(L, mask), pstrides, "EQ", n)
    walk = [j if j < d else -1 if j < d + k else j - k + 1 for j in range(len(xs))]
    new = L.g.gather(src, [idx], [d], walk, 0, TRN_INDEX_ERROR_COUNT)
    dt = v.dtype
    if accumulate:
        new = _pw(L, "ADD", dt, dt, [L.node_of(v), new], (1,))
    nid = _pw(L, "WHERE", dt, dt, [sel, new, L.node_of(v)])
    return L.finish_node(nid, meta(node))


@register(aten.masked_scatter.default)
def _masked_scatter(L, node, x, mask, source):
    """The k-th element where the mask (broadcast to the result) is set,
    row-major, takes source.flatten()[k]; eager fails when the source has
    fewer elements than the mask's count (style SOURCE)."""
    v, mval, s = _src(L, x), _val(L, mask), _val(L, source)
    xs = _out(node)
    if (
        not isinstance(mval, Val)
        or not isinstance(s, Val)
        or s.dtype != v.dtype
        or mval.dtype != torch.bool
    ):
        raise Unsupported("masked_scatter form")
    numel, src_numel = math.prod(xs), math.prod(s.sizes)
    if numel == 0 or src_numel == 0:
        raise Unsupported("masked_scatter of no elements")
    mk = L.broadcast(mval, xs)
    src = _in_memory(L, L.reshape(s, (src_numel,)))
    sel, idx = _selected_rank(
        L, xs, L.node_of(mk), _prefix_count(L, mk), _contig(xs), "LE", src_numel
    )
    new = L.g.gather(src, [idx], [0], [-1] * len(xs), 0, TRN_INDEX_ERROR_SOURCE)
    nid = _pw(L, "WHERE", v.dtype, v.dtype, [sel, new, L.node_of(L.broadcast(v, xs))])
    return L.finish_node(nid, meta(node))


def _scatter_geometry(L, v: Val, dim, index, src):
    """(dim, index node laid over its own sizes, src node over the index's
    extent, walk, the index's sizes) of a scatter of `src` (a node or a number) into v."""
    i = _val(L, index)
    if not isinstance(i, Val) or len(i.sizes) != len(v.sizes):
        raise Unsupported("scatter of a 0-d tensor")
    dim %= len(v.sizes)
    isz = tuple(i.sizes)
    if isinstance(src, torch.fx.Node):
        s = _val(L, src)
        if not isinstance(s, Val) or s.dtype != v.dtype:
            raise Unsupported("scatter source")
        s = Val(s.base, isz, s.strides, s.offset, s.dtype)  # src is read over the index's extent
    else:
        s = L.const(src, v.dtype, isz)
    idx = _place(L, i, isz, list(range(len(isz))))
    walk = [-1 if j == dim else j for j in range(len(isz))]
    return dim, idx, _in_memory(L, s), walk, isz


def _scatter(L, node, x, dim, index, src, mode):
    """mode: 0 writes, 1 + trn_graph_reduce_op folds (1: add)."""
    v = _src(L, x)
    dim, idx, s, walk, _ = _scatter_geometry(L, v, dim, index, src)
    nid = L.g.scatter(L.node_of(v), idx, s, dim, walk, mode, 0, TRN_INDEX_ERROR_GATHER)
    return L.finish_node(nid, meta(node))


@register(aten.scatter.src, aten.scatter.value)
def _scatter_plain(L, node, x, dim, index, src):
    return _scatter(L, node, x, dim, index, src, 0)


@register(aten.scatter_add.default)
def _scatter_add(L, node, x, dim, index, src):
    return _scatter(L, node, x, dim, index, src, FOLD["sum"])


# trn_graph_scatter's accumulate: 1 + trn_graph_reduce_op (0: a plain write)
FOLD = {
    "sum": 1 + TRN_GRAPH_SUM,
    "prod": 1 + TRN_GRAPH_PROD,
    "amax": 1 + TRN_GRAPH_MAX,
    "amin": 1 + TRN_GRAPH_MIN,
    "mean": 1 + TRN_GRAPH_SUM,
    "add": 1 + TRN_GRAPH_SUM,
    "multiply": 1 + TRN_GRAPH_PROD,
}


@register(aten.scatter.reduce, aten.scatter.value_reduce)
def _scatter_legacy_reduce(L, node, x, dim, index, src, reduce):
    if reduce not in ("add", "multiply"):
        raise Unsupported(f"scatter reduce={reduce!r}")
    return _scatter(L, node, x, dim, index, src, FOLD[reduce])


def _identity(reduce, dt):
    """What ATen starts a position from when include_self=False."""
    if reduce in ("sum", "mean"):
        return 0
    if reduce == "prod":
        return 1
    if dt.is_floating_point:
        return -math.inf if reduce == "amax" else math.inf
    info = torch.iinfo(dt)
    return info.min if reduce == "amax" else info.max


@register(aten.scatter_reduce.two)
def _scatter_reduce(L, node, x, dim, index, src, reduce, include_self=True):
    """ATen's scatter_reduce: without include_self the scattered positions
    start from the reduction's identity (a plain scatter first); mean is the
    sum divided by the count of values folded in (floor division for
    integers), positions with none keeping self."""
    v = _src(L, x)
    if reduce not in ("sum", "prod", "amax", "amin", "mean") or v.dtype == torch.bool:
        raise Unsupported(f"scatter_reduce {reduce} of {v.dtype}")
    dt = v.dtype
    d, idx, s, walk, isz = _scatter_geometry(L, v, dim, index, src)
    base = L.node_of(v)
    if not include_self:
        init = L.const(_identity(reduce, dt), dt, isz)
        base = L.g.scatter(base, idx, _in_memory(L, init), d, walk, 0, 0, TRN_INDEX_ERROR_GATHER)
    nid = L.g.scatter(base, idx, s, d, walk, FOLD[reduce], 0, TRN_INDEX_ERROR_GATHER)
    if reduce == "mean":
        xs = tuple(v.sizes)
        ones = _in_memory(L, L.const(1, dt, isz))
        cnt = L.g.scatter(
            L.const(1 if include_self else 0, dt, xs).base,
            idx,
            ones,
            d,
            walk,
            FOLD["sum"],
            0,
            TRN_INDEX_ERROR_GATHER,
        )
        if not include_self:  # positions nothing went to divide by 1
            zero = _pw(L, "EQ", dt, torch.bool, [cnt, L.const(0, dt).base])
            cnt = _pw(L, "WHERE", dt, dt, [zero, L.const(1, dt).base, cnt])
        nid = _pw(L, "DIV" if dt.is_floating_point else "DIV_FLOOR", dt, dt, [nid, cnt])
    return L.finish_node(nid, meta(node))


@register(aten.embedding_dense_backward.default)
def _embedding_backward(L, node, grad, indices, num_weights, padding_idx, scale_grad_by_freq):
    """zeros(num_weights, D).index_put_([indices], grad, accumulate=True),
    rows at padding_idx skipped, summed in float32 for 16-bit grads (as
    PyTorch's decomposition does)."""
    if scale_grad_by_freq:
        raise Unsupported("scale_grad_by_freq")
    g, i = _val(L, grad), _val(L, indices)
    if not isinstance(g, Val) or not isinstance(i, Val):
        raise Unsupported("embedding backward inputs")
    m = meta(node)
    acc = torch.float32 if g.dtype in (torch.float16, torch.bfloat16) else g.dtype
    k = len(i.sizes)
    it = tuple(g.sizes)
    idx_val = _index_int64(L, i)
    gv = L.node_of(g)
    if padding_idx >= 0:
        keep = L.g.pointwise(
            ew("NE"),
            TRN_DTYPE[torch.int64],
            TRN_DTYPE[torch.bool],
            [_place(L, idx_val, it, list(range(k))), L.const(padding_idx, torch.int64).base],
            [],
        )
        gv = L.g.pointwise(
            ew("WHERE"), TRN_DTYPE[acc], TRN_DTYPE[acc], [keep, gv, L.const(0, acc).base], []
        )
    elif acc != g.dtype:
        gv = L.g.cast(gv, TRN_DTYPE[acc])
    gv = L.new_base(gv, "node", it, _contig(it), acc) if gv != L.node_of(g) else g
    src = _in_memory(L, gv) if L.bases[gv.base].kind == "const" else L.node_of(gv)
    zeros = L.const(0, acc, tuple(int(s) for s in m.shape)).base
    walk = [-1] * k + list(range(1, len(m.shape)))
    nid = L.g.scatter(
        zeros,
        _place(L, idx_val, it, list(range(k))),
        src,
        0,
        walk,
        FOLD["sum"],
        0,
        TRN_INDEX_ERROR_SELF,
    )
    if acc != m.dtype:
        nid = L.g.cast(nid, TRN_DTYPE[m.dtype])
    return L.finish_node(nid, m)


# ---- index-valued tensors and the ops that select by coordinate ------------------------------
def _iota(L, dtype, sizes, coef, start=0, step=1) -> int:
    return L.g.iota(TRN_DTYPE[dtype], list(sizes), list(coef), 0, float(start), float(step))


@register(aten.arange.start_step, aten.arange.start, aten.arange.default)
def _arange(L, node, *args, **kw):
    m = meta(node)
    if m.dtype not in TRN_DTYPE or m.dtype == torch.bool or len(m.shape) != 1:
        raise Unsupported("arange dtype")
    nums = [a for a in args if isinstance(a, (int, float))]
    if len(nums) == 1:
        start, step = 0, 1
    else:
        start, step = nums[0], nums[2] if len(nums) > 2 else 1
    n = int(m.shape[0])
    nid = L.g.iota(TRN_DTYPE[m.dtype], [n], [1], 0, float(start), float(step))
    return L.new_base(nid, "iota", (n,), (1,), m.dtype, (float(start), float(step)))


def _pw(L, op, dtype, out, ins, params=()):
    return L.g.pointwise(ew(op), TRN_DTYPE[dtype], TRN_DTYPE[out], ins, list(params))


def _clamped(L, coord: int, shift: int, size: int) -> int:
    """coord - shift clamped into [0, size): an index that is always valid
    (the value it reads is selected away where it is out of the piece)."""
    i64 = torch.int64
    c = L.const
    x = _pw(L, "SUB", i64, i64, [coord, c(shift, i64).base], (1,)) if shift else coord
    return _pw(L, "CLAMP", i64, i64, [x, c(0, i64).base, c(size - 1, i64).base], (1, 1))


def _piece(L, v: Val, dtype) -> int:
    if v.dtype != dtype:
        nid = L.g.cast(L.node_of(v), TRN_DTYPE[dtype])
        v = L.new_base(nid, "node", v.sizes, _contig(v.sizes), dtype)
    return _in_memory(L, v)


@register(aten.cat.default)
def _cat(L, node, tensors, dim=0):
    """Each result element gathers from the piece its coordinate falls in:
    one fused loop, every piece read at a clamped (valid) position."""
    m = meta(node)
    out = _out(node)
    if not out or m.dtype not in TRN_DTYPE:
        raise Unsupported("cat of 0-d")
    d = dim % len(out)
    vals = [_val(L, t) for t in tensors]
    if any(not isinstance(v, Val) for v in vals):
        raise Unsupported("cat of host values")
    # PyTorch skips legacy empty (0,) pieces; zero-width pieces add nothing.
    pieces = [
        v
        for v in vals
        if not (len(v.sizes) == 1 and v.sizes[0] == 0 and len(out) != 1) and v.sizes[d] > 0
    ]
    if len(pieces) == 1:
        nid = L.g.cast(L.node_of(pieces[0]), TRN_DTYPE[m.dtype])
        return L.finish_node(nid, m)
    if not pieces or any(len(v.sizes) != len(out) for v in pieces):
        raise Unsupported("cat form")
    # Every element reads every piece of its cat (at a clamped position): more
    # than 4 pieces are cut into cats of up to 4 (in memory), then joined.
    while len(pieces) > 4:
        joined = []
        for k in range(0, len(pieces), 4):
            group = pieces[k : k + 4]
            if len(group) == 1:
                joined.append(group[0])
                continue
            nid, sizes = _cat_nodes(L, group, d, m.dtype)
            joined.append(L.new_base(nid, "node", sizes, _contig(sizes), m.dtype))
        pieces = joined
    nid, _ = _cat_nodes(L, pieces, d, m.dtype)
    return L.finish_node(nid, m)


def _cat_nodes(L, pieces, d, dtype):
    """The cat of 2-4 pieces along d: (node, its sizes)."""
    out = list(pieces[0].sizes)
    out[d] = sum(v.sizes[d] for v in pieces)
    out = tuple(out)
    coef = [1 if j == d else 0 for j in range(len(out))]
    coord = _iota(L, torch.int64, out, coef)
    walk = [-1 if j == d else j for j in range(len(out))]
    ends, start = [], 0
    for v in pieces:
        start += v.sizes[d]
        ends.append(start)
    value = None
    for k in reversed(range(len(pieces))):
        v = pieces[k]
        begin = ends[k] - v.sizes[d]
        g = L.g.gather(
            _piece(L, v, dtype),
            [_clamped(L, coord, begin, v.sizes[d])],
            [d],
            walk,
            0,
            TRN_INDEX_ERROR_BOUNDS,
        )
        if value is None:
            value = g
        else:
            inside = _pw(
                L, "LT", torch.int64, torch.bool, [coord, L.const(ends[k], torch.int64).base]
            )
            value = _pw(L, "WHERE", dtype, dtype, [inside, g, value])
    return value, out


@register(aten.constant_pad_nd.default)
def _constant_pad(L, node, x, pad, value=0):
    """where(inside, x at the clamped coordinate, value), no cropping. A gather
    takes two index dims, so a pad of more dims is a chain of pads of two
    (each inner result in memory)."""
    v = _src(L, x)
    m = meta(node)
    n = len(_out(node))
    pads = [(n - 1 - i // 2, pad[i], pad[i + 1]) for i in range(0, len(pad), 2)]
    pads = [(d, lo, hi) for d, lo, hi in pads if lo or hi]
    if not pads or any(lo < 0 or hi < 0 for _, lo, hi in pads) or 0 in v.sizes:
        raise Unsupported("pad form")
    while len(pads) > 2:
        nid, sizes = _pad_two(L, v, pads[:2], value, m.dtype)
        v = L.new_base(nid, "node", sizes, _contig(sizes), m.dtype)
        pads = pads[2:]
    nid, _ = _pad_two(L, v, pads, value, m.dtype)
    return L.finish_node(nid, m)


def _pad_two(L, v: Val, pads, value, dtype):
    """v padded in at most two dims: (node, its sizes)."""
    out = list(v.sizes)
    for d, lo, hi in pads:
        out[d] += lo + hi
    out = tuple(out)
    n = len(out)
    i64, b = torch.int64, torch.bool
    idx, dims, inside = [], [], None
    for d, lo, hi in pads:
        coord = _iota(L, i64, out, [1 if j == d else 0 for j in range(n)])
        idx.append(_clamped(L, coord, lo, v.sizes[d]))
        dims.append(d)
        ge = _pw(L, "GE", i64, b, [coord, L.const(lo, i64).base])
        lt = _pw(L, "LT", i64, b, [coord, L.const(lo + v.sizes[d], i64).base])
        ok = _pw(L, "LOGICAL_AND", b, b, [ge, lt])
        inside = ok if inside is None else _pw(L, "LOGICAL_AND", b, b, [inside, ok])
    walk = [-1 if j in dims else j for j in range(n)]
    g = L.g.gather(_in_memory(L, v), idx, dims, walk, 0, TRN_INDEX_ERROR_BOUNDS)
    fill = L.const(value, dtype).base
    return _pw(L, "WHERE", dtype, dtype, [inside, g, fill]), out


@register(aten.slice_scatter.default)
def _slice_scatter(L, node, x, src, dim=0, start=None, end=None, step=1):
    """where(coordinate in the slice, src at the clamped coordinate, x): the
    backward of a slice, fused with its neighbours. With a step, the slice's
    coordinates are those at a multiple of it from the start, and src's
    position is the floor quotient."""
    v, s = _src(L, x), _val(L, src)
    if not isinstance(s, Val) or step < 1 or s.dtype != v.dtype:
        raise Unsupported("slice_scatter form")
    m = meta(node)
    out = _out(node)
    d = dim % len(out)
    begin, stop, _ = slice(start, end, step).indices(out[d])
    n = len(range(begin, stop, step))
    if n == 0 or 0 in s.sizes:
        nid = L.g.cast(L.node_of(v), TRN_DTYPE[m.dtype])
        return L.finish_node(nid, m)
    i64, b = torch.int64, torch.bool
    c = L.const
    coord = _iota(L, i64, out, [1 if j == d else 0 for j in range(len(out))])
    walk = [-1 if j == d else j for j in range(len(out))]
    last = begin + (n - 1) * step
    ge = _pw(L, "GE", i64, b, [coord, c(begin, i64).base])
    le = _pw(L, "LE", i64, b, [coord, c(last, i64).base])
    inside = _pw(L, "LOGICAL_AND", b, b, [ge, le])
    if step == 1:
        pos = _clamped(L, coord, begin, n)
    else:
        rel = _pw(L, "SUB", i64, i64, [coord, c(begin, i64).base], (1,))
        q = _pw(L, "DIV_FLOOR", i64, i64, [rel, c(step, i64).base])
        pos = _pw(L, "CLAMP", i64, i64, [q, c(0, i64).base, c(n - 1, i64).base], (1, 1))
        on = _pw(
            L,
            "EQ",
            i64,
            b,
            [_pw(L, "REMAINDER", i64, i64, [rel, c(step, i64).base]), c(0, i64).base],
        )
        inside = _pw(L, "LOGICAL_AND", b, b, [inside, on])
    g = L.g.gather(_in_memory(L, s), [pos], [d], walk, 0, TRN_INDEX_ERROR_BOUNDS)
    nid = _pw(L, "WHERE", m.dtype, m.dtype, [inside, g, L.node_of(v)])
    return L.finish_node(nid, m)
