"""Matrix products and convolution -> libtrn extern nodes (oneDNN / register
tiles): mm, bmm, addmm, convolution and convolution_backward
(trn_conv_kind).
"""

from __future__ import annotations

import torch

from .lower_core import (
    TRN_CONV_BACKWARD_DATA,
    TRN_CONV_BACKWARD_WEIGHTS,
    TRN_CONV_FORWARD,
    TRN_DTYPE,
    TRN_GRAPH_SUM,
    Unsupported,
    Val,
    _val,
    aten,
    contiguous_strides,
    meta,
    pointwise,
    register,
    same_layout,
)


def _as3(L, v: Val) -> int:
    if len(v.sizes) == 2:
        v = Val(v.base, (1,) + tuple(v.sizes), (0,) + tuple(v.strides), v.offset, v.dtype)
    b = L.bases[v.base]
    if b.kind == "const":
        raise Unsupported("matmul of a constant")
    return (
        L.node_of(v)
        if tuple(v.sizes) != b.sizes or v.offset or not same_layout(v.sizes, v.strides, b.layout)
        else v.base
    )


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
    nid = L.g.conv(
        TRN_CONV_FORWARD,
        L.node_of(vx),
        L.node_of(vw),
        L.node_of(vb) if vb else -1,
        _expand_list(stride, sp),
        _expand_list(padding, sp),
        _expand_list(dilation, sp),
        int(groups),
        list(m.shape),
    )
    return L.finish_node(nid, m)


def _expand_list(v, n):
    v = list(v)
    return v * n if len(v) == 1 else v


@register(aten.convolution_backward.default)
def _conv_bw(
    L,
    node,
    go,
    x,
    w,
    bias_sizes,
    stride,
    padding,
    dilation,
    transposed,
    output_padding,
    groups,
    output_mask,
):
    if transposed:
        raise Unsupported("transposed convolution")
    vg, vx, vw = _val(L, go), _val(L, x), _val(L, w)
    if vx.dtype not in (torch.float32, torch.float16, torch.bfloat16):
        raise Unsupported("conv dtype")
    sp = len(vw.sizes) - 2
    args = (
        _expand_list(stride, sp),
        _expand_list(padding, sp),
        _expand_list(dilation, sp),
        int(groups),
    )
    ms = meta(node)
    out = [None, None, None]
    if output_mask[0]:
        nid = L.g.conv(
            TRN_CONV_BACKWARD_DATA, L.node_of(vg), L.node_of(vw), -1, *args, list(vx.sizes)
        )
        out[0] = L.finish_node(nid, ms[0])
    if output_mask[1]:
        nid = L.g.conv(
            TRN_CONV_BACKWARD_WEIGHTS, L.node_of(vx), L.node_of(vg), -1, *args, list(vw.sizes)
        )
        out[1] = L.finish_node(nid, ms[1])
    if output_mask[2]:
        dims = [0] + list(range(2, len(vg.sizes)))
        mask = sum(1 << d for d in dims)
        nid = L.g.reduce(TRN_GRAPH_SUM, L.node_of(vg), TRN_DTYPE[vg.dtype], mask)
        ks = tuple(1 if i in dims else s for i, s in enumerate(vg.sizes))
        r = L.new_base(nid, "node", ks, contiguous_strides(ks), vg.dtype)
        out[2] = L.reshape(r, tuple(ms[2].shape))
    return out
