"""torch._grouped_mm -> an extern step calling libtrn's grouped-mm kernel
(trn/grouped_mm.h, trn/graph_extern.h): no host step.

The step's context is the product's descriptor (layout, sizes, strides, all
static); offs is an argument buffer the kernel reads when it runs, so a MoE
layer whose per-expert counts change every step runs the same compiled
program (no recompile, no host synchronisation). A and B are read through
their views' strides (transposed views need no copy), the result is a
contiguous node planned like any other; rows past offs[-1] are left
unwritten, as eager leaves them.

Owner: the ``_grouped_mm`` lowering. What it cannot take (bias, another
output dtype, a dtype the kernel does not compute in, empty operands) stays
a host step.
"""

from __future__ import annotations

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
