"""Elementwise ops -> libtrn pointwise nodes (trn_ew_op by name): the unary,
binary and predicate tables and the ops with parameters (add/sub alpha,
div rounding, gelu, leaky_relu, hardtanh, elu, softplus, where, clamp,
lerp, addcmul/addcdiv, their backwards).
"""

from __future__ import annotations

import torch

from .lower_core import _promote, _val, aten, meta, pointwise, register


UNARY = {
    aten.abs.default: "ABS",
    aten.neg.default: "NEG",
    aten.sign.default: "SIGN",
    aten.relu.default: "RELU",
    aten.floor.default: "FLOOR",
    aten.ceil.default: "CEIL",
    aten.round.default: "ROUND",
    aten.trunc.default: "TRUNC",
    aten.frac.default: "FRAC",
    aten.sqrt.default: "SQRT",
    aten.rsqrt.default: "RSQRT",
    aten.reciprocal.default: "RECIPROCAL",
    aten.bitwise_not.default: "BITWISE_NOT",
    aten.exp.default: "EXP",
    aten.exp2.default: "EXP2",
    aten.expm1.default: "EXPM1",
    aten.log.default: "LOG",
    aten.log2.default: "LOG2",
    aten.log10.default: "LOG10",
    aten.log1p.default: "LOG1P",
    aten.sin.default: "SIN",
    aten.cos.default: "COS",
    aten.tan.default: "TAN",
    aten.asin.default: "ASIN",
    aten.acos.default: "ACOS",
    aten.atan.default: "ATAN",
    aten.sinh.default: "SINH",
    aten.cosh.default: "COSH",
    aten.tanh.default: "TANH",
    aten.sigmoid.default: "SIGMOID",
    aten.erf.default: "ERF",
    aten.erfc.default: "ERFC",
    aten.erfinv.default: "ERFINV",
    aten.silu.default: "SILU",
    aten.mish.default: "MISH",
    aten.hardsigmoid.default: "HARDSIGMOID",
    aten.hardswish.default: "HARDSWISH",
}
PREDICATE_UNARY = {
    aten.logical_not.default: "LOGICAL_NOT",
    aten.isnan.default: "ISNAN",
    aten.isinf.default: "ISINF",
    aten.isposinf.default: "ISPOSINF",
    aten.isneginf.default: "ISNEGINF",
}
BINARY = {
    aten.mul.Tensor: "MUL",
    aten.mul.Scalar: "MUL",
    aten.div.Tensor: "DIV",
    aten.div.Scalar: "DIV",
    aten.remainder.Tensor: "REMAINDER",
    aten.remainder.Scalar: "REMAINDER",
    aten.fmod.Tensor: "FMOD",
    aten.fmod.Scalar: "FMOD",
    aten.maximum.default: "MAXIMUM",
    aten.minimum.default: "MINIMUM",
    aten.fmax.default: "FMAX",
    aten.fmin.default: "FMIN",
    aten.pow.Tensor_Scalar: "POW",
    aten.pow.Tensor_Tensor: "POW",
    aten.pow.Scalar: "POW",
    aten.atan2.default: "ATAN2",
    aten.bitwise_and.Tensor: "BITWISE_AND",
    aten.bitwise_and.Scalar: "BITWISE_AND",
    aten.bitwise_or.Tensor: "BITWISE_OR",
    aten.bitwise_or.Scalar: "BITWISE_OR",
    aten.bitwise_xor.Tensor: "BITWISE_XOR",
    aten.bitwise_xor.Scalar: "BITWISE_XOR",
    aten.copysign.Tensor: "COPYSIGN",
    aten.hypot.default: "HYPOT",
    aten.sigmoid_backward.default: "SIGMOID_BACKWARD",
    aten.tanh_backward.default: "TANH_BACKWARD",
    aten.silu_backward.default: "SILU_BACKWARD",
    aten.hardsigmoid_backward.default: "HARDSIGMOID_BACKWARD",
    aten.hardswish_backward.default: "HARDSWISH_BACKWARD",
    aten.mish_backward.default: "MISH_BACKWARD",
}
PREDICATE_BINARY = {
    aten.eq.Tensor: "EQ",
    aten.eq.Scalar: "EQ",
    aten.ne.Tensor: "NE",
    aten.ne.Scalar: "NE",
    aten.lt.Tensor: "LT",
    aten.lt.Scalar: "LT",
    aten.le.Tensor: "LE",
    aten.le.Scalar: "LE",
    aten.gt.Tensor: "GT",
    aten.gt.Scalar: "GT",
    aten.ge.Tensor: "GE",
    aten.ge.Scalar: "GE",
    aten.logical_and.default: "LOGICAL_AND",
    aten.logical_or.default: "LOGICAL_OR",
    aten.logical_xor.default: "LOGICAL_XOR",
}


def _unary(op):
    return lambda L, node, x, *a, **k: pointwise(L, node, op, [_val(L, x)])


def _pred_unary(op):
    return lambda L, node, x: pointwise(L, node, op, [_val(L, x)], compute=meta(x).dtype)


def _binary(op):
    return lambda L, node, a, b: pointwise(L, node, op, [_val(L, a), _val(L, b)])


def _pred_binary(op):
    return lambda L, node, a, b: pointwise(
        L, node, op, [_val(L, a), _val(L, b)], compute=_promote(node)
    )


for _t, _op in UNARY.items():
    register(_t)(_unary(_op))
for _t, _op in PREDICATE_UNARY.items():
    register(_t)(_pred_unary(_op))
for _t, _op in BINARY.items():
    register(_t)(_binary(_op))
for _t, _op in PREDICATE_BINARY.items():
    register(_t)(_pred_binary(_op))


@register(aten.bitwise_not.default)
def _bitwise_not(L, node, x):
    # On bool, ~ is logical not (the int64 compute family would give ~1 = -2).
    if meta(x).dtype == torch.bool:
        return pointwise(L, node, "LOGICAL_NOT", [_val(L, x)], compute=torch.bool)
    return pointwise(L, node, "BITWISE_NOT", [_val(L, x)])


@register(aten.add.Tensor, aten.add.Scalar)
def _add(L, node, a, b, alpha=1):
    return pointwise(L, node, "ADD", [_val(L, a), _val(L, b)], params=(alpha,))


@register(aten.sub.Tensor, aten.sub.Scalar)
def _sub(L, node, a, b, alpha=1):
    return pointwise(L, node, "SUB", [_val(L, a), _val(L, b)], params=(alpha,))


@register(aten.rsub.Scalar, aten.rsub.Tensor)
def _rsub(L, node, a, b, alpha=1):
    return pointwise(L, node, "SUB", [_val(L, b), _val(L, a)], params=(alpha,))


@register(aten.div.Tensor_mode, aten.div.Scalar_mode)
def _div_mode(L, node, a, b, rounding_mode=None):
    op = {None: "DIV", "trunc": "DIV_TRUNC", "floor": "DIV_FLOOR"}[rounding_mode]
    return pointwise(L, node, op, [_val(L, a), _val(L, b)])


@register(aten.gelu.default)
def _gelu(L, node, x, approximate="none"):
    return pointwise(L, node, "GELU" if approximate == "none" else "GELU_TANH", [_val(L, x)])


@register(aten.gelu_backward.default)
def _gelu_bw(L, node, g, x, approximate="none"):
    op = "GELU_BACKWARD" if approximate == "none" else "GELU_TANH_BACKWARD"
    return pointwise(L, node, op, [_val(L, g), _val(L, x)])


@register(aten.threshold_backward.default)
def _thr_bw(L, node, g, x, threshold):
    return pointwise(L, node, "THRESHOLD_BACKWARD", [_val(L, g), _val(L, x)], params=(threshold,))


@register(aten.leaky_relu.default)
def _leaky(L, node, x, slope=0.01):
    return pointwise(L, node, "LEAKY_RELU", [_val(L, x)], params=(slope,))


@register(aten.leaky_relu_backward.default)
def _leaky_bw(L, node, g, x, slope, self_is_result):
    return pointwise(L, node, "LEAKY_RELU_BACKWARD", [_val(L, g), _val(L, x)], params=(slope,))


@register(aten.hardtanh.default)
def _hardtanh(L, node, x, lo=-1.0, hi=1.0):
    return pointwise(L, node, "HARDTANH", [_val(L, x)], params=(lo, hi))


@register(aten.hardtanh_backward.default)
def _hardtanh_bw(L, node, g, x, lo, hi):
    return pointwise(L, node, "HARDTANH_BACKWARD", [_val(L, g), _val(L, x)], params=(lo, hi))


@register(aten.elu.default)
def _elu(L, node, x, alpha=1.0, scale=1.0, input_scale=1.0):
    return pointwise(L, node, "ELU", [_val(L, x)], params=(alpha, scale, input_scale))


@register(aten.softplus.default)
def _softplus(L, node, x, beta=1.0, threshold=20.0):
    return pointwise(L, node, "SOFTPLUS", [_val(L, x)], params=(beta, threshold))


@register(aten.softplus_backward.default)
def _softplus_bw(L, node, g, x, beta, threshold):
    return pointwise(
        L, node, "SOFTPLUS_BACKWARD", [_val(L, g), _val(L, x)], params=(beta, threshold)
    )


@register(aten.where.self, aten.where.ScalarSelf, aten.where.ScalarOther, aten.where.Scalar)
def _where(L, node, c, a, b):
    return pointwise(L, node, "WHERE", [_val(L, c), _val(L, a), _val(L, b)])


@register(aten.clamp.default, aten.clamp.Tensor)
def _clamp(L, node, x, lo=None, hi=None):
    ins = [_val(L, x), 0 if lo is None else _val(L, lo), 0 if hi is None else _val(L, hi)]
    return pointwise(L, node, "CLAMP", ins, params=(lo is not None, hi is not None))


@register(aten.clamp_min.default)
def _clamp_min(L, node, x, lo):
    return pointwise(L, node, "CLAMP", [_val(L, x), _val(L, lo), 0], params=(1, 0))


@register(aten.clamp_max.default)
def _clamp_max(L, node, x, hi):
    return pointwise(L, node, "CLAMP", [_val(L, x), 0, _val(L, hi)], params=(0, 1))


@register(aten.lerp.Scalar, aten.lerp.Tensor)
def _lerp(L, node, s, e, w):
    return pointwise(L, node, "LERP", [_val(L, s), _val(L, e), _val(L, w)])


@register(aten.addcmul.default)
def _addcmul(L, node, x, a, b, value=1):
    return pointwise(L, node, "ADDCMUL", [_val(L, x), _val(L, a), _val(L, b)], params=(value,))


@register(aten.addcdiv.default)
def _addcdiv(L, node, x, a, b, value=1):
    return pointwise(L, node, "ADDCDIV", [_val(L, x), _val(L, a), _val(L, b)], params=(value,))
