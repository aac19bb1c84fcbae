"""The _foreach_* ops of the optimizer step -> one pointwise node per list
element (add, sub, mul, div, maximum, minimum, pow, sqrt, neg, reciprocal,
abs, exp, sign, addcmul, addcdiv, lerp).
"""

from __future__ import annotations

from .lower_core import LOWERINGS, Unsupported, _val, aten, meta, pointwise


def _foreach(op, kind):
    """kind: 'scalar' (list, scalar), 'list' (list, list), 'unary', 'tensor'
    (list, 0-d tensor), 'cmul' (list, list, list, value), 'spow' (scalar, list)."""

    def low(L, node, *args, **kw):
        ms = meta(node)
        out = []
        for i, m in enumerate(ms):
            if kind == "unary":
                ins, params = [_val(L, args[0][i])], ()
            elif kind == "scalar":
                ins, params = [_val(L, args[0][i]), args[1]], (kw.get("alpha", 1),)
            elif kind == "list":
                ins, params = (
                    [_val(L, args[0][i]), _val(L, args[1][i])],
                    (kw.get("alpha", args[2] if len(args) > 2 else 1),),
                )
            elif kind == "tensor":
                ins, params = [_val(L, args[0][i]), _val(L, args[1])], (kw.get("alpha", 1),)
            elif kind == "spow":
                ins, params = [args[0], _val(L, args[1][i])], ()
            else:  # cmul / cdiv with a scalar value
                value = args[3] if len(args) > 3 else kw.get("value", 1)
                if not isinstance(value, (int, float)):
                    raise Unsupported("tensor value")
                ins, params = (
                    [_val(L, args[0][i]), _val(L, args[1][i]), _val(L, args[2][i])],
                    (value,),
                )
            if op in ("ADD", "SUB"):
                params = params or (1,)
            out.append(pointwise(L, node, op, ins, params=params, m=m))
        return out

    return low


_F = aten
for _t, _op, _k in [
    (_F._foreach_add.Scalar, "ADD", "scalar"),
    (_F._foreach_add.List, "ADD", "list"),
    (_F._foreach_add.Tensor, "ADD", "tensor"),
    (_F._foreach_sub.Scalar, "SUB", "scalar"),
    (_F._foreach_sub.List, "SUB", "list"),
    (_F._foreach_mul.Scalar, "MUL", "scalar"),
    (_F._foreach_mul.List, "MUL", "list"),
    (_F._foreach_mul.Tensor, "MUL", "tensor"),
    (_F._foreach_div.Scalar, "DIV", "scalar"),
    (_F._foreach_div.List, "DIV", "list"),
    (_F._foreach_div.Tensor, "DIV", "tensor"),
    (_F._foreach_maximum.List, "MAXIMUM", "list"),
    (_F._foreach_minimum.List, "MINIMUM", "list"),
    (_F._foreach_pow.ScalarAndTensor, "POW", "spow"),
    (_F._foreach_pow.Scalar, "POW", "scalar"),
    (_F._foreach_pow.List, "POW", "list"),
    (_F._foreach_sqrt.default, "SQRT", "unary"),
    (_F._foreach_neg.default, "NEG", "unary"),
    (_F._foreach_reciprocal.default, "RECIPROCAL", "unary"),
    (_F._foreach_abs.default, "ABS", "unary"),
    (_F._foreach_exp.default, "EXP", "unary"),
    (_F._foreach_sign.default, "SIGN", "unary"),
    (_F._foreach_addcmul.Scalar, "ADDCMUL", "cmul"),
    (_F._foreach_addcdiv.Scalar, "ADDCDIV", "cmul"),
    (_F._foreach_lerp.Scalar, "LERP", "lerp"),
]:
    if _k == "lerp":
        LOWERINGS[_t] = lambda L, node, a, b, w: [
            pointwise(L, node, "LERP", [_val(L, x), _val(L, y), w], m=m)
            for x, y, m in zip(a, b, meta(node))
        ]
    else:
        LOWERINGS[_t] = _foreach(_op, _k)
