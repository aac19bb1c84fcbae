"""View ops -> new views (sizes, strides, offset) of the same base: view,
reshape, expand, permute, t, transpose, squeeze/unsqueeze, slice, select,
split, unbind, as_strided. They cost nothing until something needs the
memory; a reshape that is no view materialises a copy.
"""

from __future__ import annotations

from .lower_core import Val, _val, aten, meta, register


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
    return Val(
        v.base,
        tuple(v.sizes[d] for d in dims),
        tuple(v.strides[d] for d in dims),
        v.offset,
        v.dtype,
    )


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
