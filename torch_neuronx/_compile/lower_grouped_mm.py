"""torch._grouped_mm -> an extern step calling libtrn's grouped-mm kernel
(trn/grouped_mm.h, trn/graph_extern.h): no host step.

The step's context is the product's descriptor (layout, sizes, strides, all
static); offs is an argument buffer the kernel reads when it runs, so a MoE
layer whose per-expert counts change every step runs the same compiled
program (no recompile, no host synchronisation). A and B are read through
their views' strides (transposed views need no copy), the result is a
contiguous node planned like any other; rows past offs[-1] are left
unwritten, as eager leaves them.

``_scaled_grouped_mm`` (float8, rowwise scales, 2d x 3d and 3d x 3d) is an
extern step too, calling trn_scaled_grouped_mm_launch.

Owner: the ``_grouped_mm`` and ``_scaled_grouped_mm`` lowerings. What it cannot take (bias, another
output dtype, a dtype the kernel does not compute in, empty operands) stays
a host step.
"""

from __future__ import annotations

import math

import torch

from .lower_core import TRN_DTYPE, Unsupported, Val, _val, aten, contiguous_strides, meta, register

# trn_gmm_layout (trn/grouped_mm.h)
_2D_3D, _3D_3D, _3D_2D, _2D_2D = range(4)


def _strides3(v: Val) -> list:
    return [0, *v.strides] if len(v.sizes) == 2 else list(v.strides)


def _in_memory(L, v: Val) -> Val:
    if L.bases[v.base].kind in ("const", "iota"):
        return L.materialize(v)
    return v


@register(aten._grouped_mm.default)
def _grouped_mm(L, node, mat_a, mat_b, offs=None, bias=None, out_dtype=None):
    a, b = _val(L, mat_a), _val(L, mat_b)
    if not isinstance(a, Val) or not isinstance(b, Val) or bias is not None:
        raise Unsupported("grouped_mm: bias or non-device operands")
    if a.dtype != b.dtype or a.dtype not in (torch.float32, torch.bfloat16, torch.float16):
        raise Unsupported("grouped_mm dtype")
    if out_dtype is not None and out_dtype != a.dtype:
        raise Unsupported("grouped_mm out_dtype")
    o = None
    if offs is not None:
        o = _val(L, offs)
        if not isinstance(o, Val) or o.dtype != torch.int32 or len(o.sizes) != 1:
            raise Unsupported("grouped_mm offs")
    m = meta(node)
    out_sizes = tuple(int(s) for s in m.shape)
    if any(s == 0 for s in (*a.sizes, *b.sizes, *out_sizes)):
        raise Unsupported("grouped_mm of empty operands")
    a3, b3 = len(a.sizes) == 3, len(b.sizes) == 3
    if (o is None) != (a3 and b3):
        raise Unsupported("grouped_mm: offs with 3d x 3d, or none with a 2d operand")
    k = a.sizes[-1]
    if not a3 and b3:
        layout, gmnk = _2D_3D, [b.sizes[0], a.sizes[0], b.sizes[2], k]
    elif a3 and b3:
        layout, gmnk = _3D_3D, [a.sizes[0], a.sizes[1], b.sizes[2], k]
    elif a3:
        layout, gmnk = _3D_2D, [a.sizes[0], a.sizes[1], b.sizes[1], k]
    else:
        layout, gmnk = _2D_2D, [o.sizes[0], a.sizes[0], b.sizes[1], k]
    a, b = _in_memory(L, a), _in_memory(L, b)
    args = [L.node_of(a), L.node_of(b)]
    if o is not None:
        args.append(L.node_of(_in_memory(L, o)))
    c = Val(-1, out_sizes, contiguous_strides(out_sizes), 0, a.dtype)
    call = L.g.grouped_mm_call(
        args,
        TRN_DTYPE[a.dtype],
        layout,
        [int(x) for x in gmnk],
        _strides3(a),
        _strides3(b),
        _strides3(c),
    )
    nid = L.g.extern_result(call, TRN_DTYPE[a.dtype], list(out_sizes), list(c.strides))
    return L.new_base(nid, "node", out_sizes, c.strides, a.dtype)


_F8 = (torch.float8_e4m3fn, torch.float8_e5m2, torch.float8_e4m3fnuz, torch.float8_e5m2fnuz)


def _contiguous(v: Val) -> bool:
    return all(n == 1 or s == c for n, s, c in zip(v.sizes, v.strides, contiguous_strides(v.sizes)))


@register(aten._scaled_grouped_mm.default)
def _scaled_grouped_mm(
    L,
    node,
    mat_a,
    mat_b,
    scale_a,
    scale_b,
    offs=None,
    bias=None,
    scale_result=None,
    out_dtype=None,
    use_fast_accum=False,
):
    """torch._scaled_grouped_mm (2d x 3d with offs, 3d x 3d; rowwise float32
    scales) -> an extern step calling trn_scaled_grouped_mm_launch, the
    eager composition's operations in one task (same bits)."""
    if bias is not None or scale_result is not None:
        raise Unsupported("scaled_grouped_mm: bias or scale_result")
    a, b = _val(L, mat_a), _val(L, mat_b)
    sa, sb = _val(L, scale_a), _val(L, scale_b)
    if not all(isinstance(v, Val) for v in (a, b, sa, sb)):
        raise Unsupported("scaled_grouped_mm: non-device operands")
    if a.dtype not in _F8 or b.dtype not in _F8:
        raise Unsupported("scaled_grouped_mm operand dtypes")
    if sa.dtype != torch.float32 or sb.dtype != torch.float32:
        raise Unsupported("scaled_grouped_mm scale dtypes")
    out = meta(node).dtype
    if out not in (torch.float32, torch.bfloat16) or len(b.sizes) != 3:
        raise Unsupported("scaled_grouped_mm output or layout")
    G, k, n = (int(s) for s in b.sizes)
    if len(a.sizes) == 2 and offs is not None:
        o = _val(L, offs)
        if not isinstance(o, Val) or o.dtype != torch.int32 or tuple(o.sizes) != (G,):
            raise Unsupported("scaled_grouped_mm offs")
        layout, m, na = _2D_3D, int(a.sizes[0]), int(a.sizes[0])
    elif len(a.sizes) == 3 and offs is None and int(a.sizes[0]) == G:
        o, layout, m = None, _3D_3D, int(a.sizes[1])
        na = G * m
    else:
        raise Unsupported("scaled_grouped_mm layout")
    if int(a.sizes[-1]) != k or m * n * k == 0:
        raise Unsupported("scaled_grouped_mm sizes")
    if math.prod(sa.sizes) != na or math.prod(sb.sizes) != G * n:
        raise Unsupported("scaled_grouped_mm scale counts")  # eager raises its message
    a, b = _in_memory(L, a), _in_memory(L, b)
    sa, sb = (
        L.materialize(s) if L.bases[s.base].kind in ("const", "iota") or not _contiguous(s) else s
        for s in (sa, sb)
    )
    args = [L.node_of(a), L.node_of(b), L.node_of(sa), L.node_of(sb)]
    if o is not None:
        args.append(L.node_of(_in_memory(L, o)))
    out_sizes = tuple(int(s) for s in meta(node).shape)
    call = L.g.scaled_grouped_mm_call(
        args,
        TRN_DTYPE[a.dtype],
        TRN_DTYPE[b.dtype],
        TRN_DTYPE[out],
        layout,
        [G, m, n, k],
        _strides3(a),
        _strides3(b),
    )
    st = contiguous_strides(out_sizes)
    nid = L.g.extern_result(call, TRN_DTYPE[out], list(out_sizes), list(st))
    return L.new_base(nid, "node", out_sizes, st, out)
