"""torch._scaled_mm -> an extern step calling libtrn's scaled-mm kernel
(trn/scaled_mm.h, trn/graph_extern.h): no host step.

The step's context is the product's descriptor (dtypes, sizes, strides,
which scales); the operands, the scales and the bias are argument buffers
read through their views (a column-major mat2, as torchao passes it, needs
no copy), the result a contiguous node planned like any other. The same
kernel as eager, so the same bits: tensorwise and rowwise float32 scales
and MX (MXFP8: e8m0 scales per 32 in the swizzled layout), optional bias.

Owner: the ``_scaled_mm`` lowering. What eager would send to the CPU or
refuse (scale_result, other scale shapes or dtypes, an output dtype the
kernel does not write, MX requests eager rejects) stays a host step, where
the eager op raises or falls back as it does outside a graph.
"""

from __future__ import annotations

import math

import torch

from .lower_core import TRN_DTYPE, Unsupported, Val, _val, aten, contiguous_strides, meta, register

_F8 = (
    torch.float8_e4m3fn,
    torch.float8_e5m2,
    torch.float8_e4m3fnuz,
    torch.float8_e5m2fnuz,
)
_MX_F8 = (torch.float8_e4m3fn, torch.float8_e5m2)
_WIDE = (torch.float32, torch.bfloat16, torch.float16)


def _mx_bytes(rows: int, k: int) -> int:
    """trn_scaled_mm_mx_scale_bytes: 128-row x 4-block tiles."""
    blocks = -(-k // 32)
    return 128 * -(-rows // 128) * 4 * -(-blocks // 4)


def _arg(L, x) -> Val:
    v = _val(L, x)
    if not isinstance(v, Val):
        raise Unsupported("scaled_mm: non-device operand")
    if L.bases[v.base].kind in ("const", "iota"):
        v = L.materialize(v)
    return v


def _contiguous(v: Val) -> bool:
    return all(n == 1 or s == c for n, s, c in zip(v.sizes, v.strides, contiguous_strides(v.sizes)))


@register(aten._scaled_mm.default)
def _scaled_mm(
    L,
    node,
    a,
    b,
    scale_a,
    scale_b,
    bias=None,
    scale_result=None,
    out_dtype=None,
    use_fast_accum=False,
):
    if scale_result is not None:
        raise Unsupported("scaled_mm: scale_result")
    a, b = _arg(L, a), _arg(L, b)
    sa, sb = _arg(L, scale_a), _arg(L, scale_b)
    if len(a.sizes) != 2 or len(b.sizes) != 2 or a.sizes[1] != b.sizes[0]:
        raise Unsupported("scaled_mm shapes")
    if a.dtype not in _F8 or b.dtype not in _F8:
        raise Unsupported("scaled_mm operand dtypes")
    m, k, n = (int(x) for x in (a.sizes[0], a.sizes[1], b.sizes[1]))
    out = meta(node).dtype
    if not (out in _WIDE or out in (a.dtype, b.dtype)) or m * n == 0:
        raise Unsupported("scaled_mm output")
    mx = sa.dtype == torch.float8_e8m0fnu or sb.dtype == torch.float8_e8m0fnu
    if mx:
        # Exactly the MX calls eager computes (check_mx in aten/scaled_mm.cpp).
        if not (
            sa.dtype == sb.dtype == torch.float8_e8m0fnu
            and a.dtype in _MX_F8
            and b.dtype in _MX_F8
            and math.prod(sa.sizes) == _mx_bytes(m, k)
            and math.prod(sb.sizes) == _mx_bytes(n, k)
            and _contiguous(sa)
            and _contiguous(sb)
        ):
            raise Unsupported("scaled_mm: an MX call eager refuses")
        counts, strides = [0, 0], [0, 0]
    else:
        if sa.dtype != torch.float32 or sb.dtype != torch.float32:
            raise Unsupported("scaled_mm scale dtype")
        if math.prod(sa.sizes) == 1 and math.prod(sb.sizes) == 1:  # tensorwise
            counts, strides = [1, 1], [0, 0]
        elif (
            tuple(sa.sizes) == (m, 1)
            and tuple(sb.sizes) == (1, n)
            and _contiguous(sa)
            and _contiguous(sb)
        ):  # rowwise
            counts, strides = [m, n], [1, 1]
        else:
            raise Unsupported("scaled_mm scale shapes")
    args = [L.node_of(a), L.node_of(b), L.node_of(sa), L.node_of(sb)]
    bias_dt, bias_stride = 0, -1
    if bias is not None:
        bv = _arg(L, bias)
        if len(bv.sizes) != 1 or int(bv.sizes[0]) != n or bv.dtype not in _WIDE:
            raise Unsupported("scaled_mm bias")
        args.append(L.node_of(bv))
        bias_dt, bias_stride = TRN_DTYPE[bv.dtype], int(bv.strides[0])
    c_strides = contiguous_strides((m, n))
    call = L.g.scaled_mm_call(
        args,
        TRN_DTYPE[a.dtype],
        TRN_DTYPE[b.dtype],
        TRN_DTYPE[out],
        [m, n, k],
        [int(s) for s in a.strides],
        [int(s) for s in b.strides],
        list(c_strides),
        mx,
        counts,
        strides,
        bias_dt,
        bias_stride,
    )
    nid = L.g.extern_result(call, TRN_DTYPE[out], [m, n], list(c_strides))
    return L.new_base(nid, "node", (m, n), c_strides, out)
