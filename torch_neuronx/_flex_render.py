"""Rendering FlexAttention's score_mod / mask_mod (and score_mod's joint
autograd graph) as C for libtrn's block-sparse kernel (trn/flex_attention.h).

Owner: ``render_mods``: ATen graphs of 0-dim tensors in, one C translation
unit out (``flex_score`` and, when score_mod's derivative is not 1,
``flex_grad``), built by libtrn's JIT (trn_flex_mods_compile). Each FX node
becomes one C statement in the node's dtype (16-bit results rounded as
PyTorch rounds); captured tensors are read through the kernel's buffer
table. Anything else raises ``RenderUnsupported`` (the caller then runs
PyTorch's dense reference). Used by torch_neuronx/_flex_attention.py.
"""

from __future__ import annotations

import math

import torch

prims = torch.ops.prims


class RenderUnsupported(Exception):
    """The graph holds something render_mods cannot express in C."""


# ---- rendering a score_mod / mask_mod / joint graph as C -------------------------
_CTYPE = {
    torch.float32: "float",
    torch.float64: "double",
    torch.bfloat16: "float",
    torch.float16: "float",
    torch.int64: "int64_t",
    torch.int32: "int32_t",
    torch.int16: "int16_t",
    torch.int8: "int8_t",
    torch.uint8: "uint8_t",
    torch.bool: "int",
}

_LOAD = {
    torch.float32: "((const float *)bf->data[{i}])[{o}]",
    torch.float64: "((const double *)bf->data[{i}])[{o}]",
    torch.bfloat16: "trn_bf16_to_float(((const uint16_t *)bf->data[{i}])[{o}])",
    torch.float16: "trn_half_to_float(((const uint16_t *)bf->data[{i}])[{o}])",
    torch.int64: "((const int64_t *)bf->data[{i}])[{o}]",
    torch.int32: "((const int32_t *)bf->data[{i}])[{o}]",
    torch.int16: "((const int16_t *)bf->data[{i}])[{o}]",
    torch.int8: "((const int8_t *)bf->data[{i}])[{o}]",
    torch.uint8: "((const uint8_t *)bf->data[{i}])[{o}]",
    torch.bool: "(int)((const uint8_t *)bf->data[{i}])[{o}]",
}

_UNARY_F = {
    "exp": "exp",
    "log": "log",
    "sqrt": "sqrt",
    "tanh": "tanh",
    "sin": "sin",
    "cos": "cos",
    "exp2": "exp2",
    "log2": "log2",
    "floor": "floor",
    "ceil": "ceil",
    "trunc": "trunc",
    "round": "nearbyint",
    "log1p": "log1p",
    "expm1": "expm1",
    "erf": "erf",
    "atan": "atan",
}

_BINARY = {"add": "+", "sub": "-", "mul": "*"}
_COMPARE = {"eq": "==", "ne": "!=", "lt": "<", "le": "<=", "gt": ">", "ge": ">="}
_LOGICAL = {"logical_and": "&&", "logical_or": "||", "logical_xor": "!="}
_BITWISE = {
    "bitwise_and": "&",
    "bitwise_or": "|",
    "bitwise_xor": "^",
    "__and__": "&",
    "__or__": "|",
}
_IDENTITY = {"clone", "alias", "lift_fresh_copy", "view", "reshape", "expand", "squeeze",
             "unsqueeze", "detach", "_unsafe_view", "contiguous"}  # fmt: skip


def _meta(node):
    v = node.meta.get("val")
    if v is None:
        v = node.meta.get("example_value")
    return v


def _is_float(dt) -> bool:
    return dt is not None and dt.is_floating_point


class _Renderer:
    """One C function from one FX graph of 0-dim tensors. The function's
    parameters are the graph's leading placeholders (scalars); the trailing
    ones are captured tensors read through ``bf`` from ``buf_base`` on."""

    def __init__(self, gm, fname, params, ret_ctype, buf_base, n_scalar):
        self.gm = gm
        self.fname = fname
        self.params = params  # C names of the leading placeholders
        self.ret_ctype = ret_ctype
        self.buf_base = buf_base
        self.n_scalar = n_scalar
        self.lines: list[str] = []
        self.env: dict = {}
        self.buffers: dict = {}  # node -> (buffer slot, meta tensor)
        self.n = 0

    def _f(self, dt) -> str:
        return "f" if dt in (torch.float32, torch.bfloat16, torch.float16) else ""

    def _fresh(self, ctype, expr) -> str:
        name = f"v{self.n}"
        self.n += 1
        self.lines.append(f"    const {ctype} {name} = {expr};")
        self.lines.append(f"    (void){name};")
        return name

    def _arg(self, a, want=None):
        """C expression of an argument: a node's value or a Python scalar."""
        if isinstance(a, torch.fx.Node):
            if a in self.buffers:
                raise RenderUnsupported(f"captured tensor {a.name} used as a value")
            return self.env[a]
        if isinstance(a, bool):
            return "1" if a else "0"
        if isinstance(a, int):
            return f"INT64_C({a})" if want is None or not _is_float(want) else repr(float(a))
        if isinstance(a, float):
            if math.isinf(a):
                return "INFINITY" if a > 0 else "-INFINITY"
            if math.isnan(a):
                return "NAN"
            return repr(a)
        raise RenderUnsupported(f"argument {a!r}")

    def _cast(self, expr, src_dt, dst_dt) -> str:
        """expr converted to dst's C type, rounded as torch rounds to dst."""
        ct = _CTYPE[dst_dt]
        if dst_dt is torch.bool:
            return f"(({expr}) != 0)"
        if dst_dt is torch.bfloat16:
            return f"trn_bf16_to_float(trn_float_to_bf16((float)({expr})))"
        if dst_dt is torch.float16:
            return f"trn_half_to_float(trn_float_to_half((float)({expr})))"
        return f"(({ct})({expr}))"

    def render(self) -> str:
        placeholders = [n for n in self.gm.graph.nodes if n.op == "placeholder"]
        for i, p in enumerate(placeholders):
            if i < self.n_scalar:
                self.env[p] = self.params[i]
            else:
                m = _meta(p)
                if not isinstance(m, torch.Tensor) or m.dim() > 4 or m.dtype not in _LOAD:
                    raise RenderUnsupported(f"captured value {p.name}")
                self.buffers[p] = (self.buf_base + i - self.n_scalar, m)
        ret = None
        for node in self.gm.graph.nodes:
            if node.op == "placeholder":
                continue
            if node.op == "output":
                ret = node.args[0]
                break
            if node.op == "get_attr":
                c = getattr(self.gm, node.target)
                if isinstance(c, torch.Tensor) and c.numel() == 1:
                    v = c.item()
                    self.env[node] = self._fresh(_CTYPE[c.dtype], self._arg(v, c.dtype))
                    continue
                raise RenderUnsupported(f"constant {node.target}")
            if node.op != "call_function":
                raise RenderUnsupported(f"node {node.op}")
            self.env[node] = self._node(node)
        return self._finish(ret)

    def _finish(self, ret) -> str:
        head = f"static inline {self.ret_ctype} {self.fname}({', '.join(self._sig())})"
        if isinstance(ret, (tuple, list)):
            ret = ret[0]
        if not isinstance(ret, torch.fx.Node):
            raise RenderUnsupported("graph output")
        m = _meta(ret)
        out = self.env[ret]
        if self.ret_ctype == "int":
            expr = f"({out}) != 0"
        else:
            expr = self._cast(out, m.dtype if m is not None else torch.float32, torch.float32)
        unused = " ".join(f"(void){p};" for p in ["bf", *self.params])
        body = "\n".join([f"    {unused}", *self.lines])
        return f"{head} {{\n{body}\n    return {expr};\n}}\n"

    def _sig(self):
        out = ["const trn_flex_buffers *bf"]
        for p in self.params:
            out.append(("float " if p in ("s", "g") else "int64_t ") + p)
        return out

    def _node(self, node):
        t = node.target
        m = _meta(node)
        if not isinstance(m, torch.Tensor) or m.dim() != 0 or m.dtype not in _CTYPE:
            raise RenderUnsupported(f"{t} does not give a scalar tensor")
        dt = m.dtype
        ct = _CTYPE[dt]
        name = t._opname if isinstance(t, torch._ops.OpOverload) else str(t)
        args, kw = node.args, node.kwargs
        if t is prims.convert_element_type.default or name in ("_to_copy", "to"):
            a = args[0]
            src = _meta(a).dtype if isinstance(a, torch.fx.Node) else None
            return self._fresh(ct, self._cast(self._arg(a), src, dt))
        if name in _IDENTITY:
            return self._fresh(ct, self._cast(self._arg(args[0]), None, dt))
        if name in ("scalar_tensor", "full", "zeros_like", "ones_like", "full_like", "new_zeros",
                    "new_ones", "zeros", "ones"):  # fmt: skip
            v = {"zeros_like": 0, "new_zeros": 0, "zeros": 0, "ones_like": 1, "new_ones": 1,
                 "ones": 1}.get(name)  # fmt: skip
            if v is None:
                v = args[0] if name == "scalar_tensor" else args[1]
            return self._fresh(ct, self._cast(self._arg(v, dt), None, dt))
        if name == "index":
            buf, idx = args
            if buf not in self.buffers:
                raise RenderUnsupported("index of a computed value")
            slot, bm = self.buffers[buf]
            if len(idx) != bm.dim() or any(i is None for i in idx):
                raise RenderUnsupported("partial index of a captured tensor")
            terms = []
            for d, i in enumerate(idx):
                iv = self._fresh("int64_t", f"(int64_t)({self._arg(i)})")
                # Negative indices count from the end, as in PyTorch (the
                # size is read at run time: one build serves every length).
                terms.append(
                    f"({iv} < 0 ? {iv} + bf->sizes[{slot}][{d}] : {iv}) * bf->strides[{slot}][{d}]"
                )
            off = " + ".join(terms) if terms else "0"
            return self._fresh(ct, self._cast(_LOAD[bm.dtype].format(i=slot, o=off), None, dt))
        if name == "select" and args[0] in self.buffers:
            raise RenderUnsupported("select of a captured tensor")
        if name in _BINARY:
            a, b = self._arg(args[0], dt), self._arg(args[1], dt)
            alpha = kw.get("alpha", args[2] if len(args) > 2 else None)
            if alpha is not None and alpha != 1:
                b = f"({b}) * {self._arg(alpha, dt)}"
            return self._fresh(ct, self._cast(f"({ct})({a}) {_BINARY[name]} ({ct})({b})", None, dt))
        if name == "rsub":
            a, b = self._arg(args[0], dt), self._arg(args[1], dt)
            return self._fresh(ct, self._cast(f"({ct})({b}) - ({ct})({a})", None, dt))
        if name == "div":
            a, b = self._arg(args[0], dt), self._arg(args[1], dt)
            mode = kw.get("rounding_mode")
            if mode is None:
                return self._fresh(ct, self._cast(f"({ct})({a}) / ({ct})({b})", None, dt))
            if _is_float(dt):
                f = "floor" if mode == "floor" else "trunc"
                return self._fresh(ct, f"{f}{self._f(dt)}(({ct})({a}) / ({ct})({b}))")
            if mode == "trunc":
                return self._fresh(ct, f"({ct})(({a}) / ({b}))")
            return self._fresh(ct, f"({ct})trn_flex_floordiv((int64_t)({a}), (int64_t)({b}))")
        if name == "floor_divide":
            a, b = self._arg(args[0], dt), self._arg(args[1], dt)
            if _is_float(dt):
                return self._fresh(ct, f"floor{self._f(dt)}(({ct})({a}) / ({ct})({b}))")
            return self._fresh(ct, f"({ct})trn_flex_floordiv((int64_t)({a}), (int64_t)({b}))")
        if name == "remainder":
            a, b = self._arg(args[0], dt), self._arg(args[1], dt)
            if _is_float(dt):
                return self._fresh(ct, f"({ct})trn_flex_fremainder((double)({a}), (double)({b}))")
            return self._fresh(ct, f"({ct})trn_flex_remainder((int64_t)({a}), (int64_t)({b}))")
        if name == "fmod":
            a, b = self._arg(args[0], dt), self._arg(args[1], dt)
            if _is_float(dt):
                return self._fresh(ct, f"fmod{self._f(dt)}(({ct})({a}), ({ct})({b}))")
            return self._fresh(ct, f"({ct})(({a}) % ({b}))")
        if name in _COMPARE:
            a0, a1 = args[0], args[1]
            # PyTorch's promotion (a Python number does not widen a tensor:
            # q_idx >= 0 compares int32, not double).
            pt = torch.result_type(
                _meta(a0) if isinstance(a0, torch.fx.Node) else a0,
                _meta(a1) if isinstance(a1, torch.fx.Node) else a1,
            )
            pc = _CTYPE.get(pt, "double")
            if pt in (torch.bfloat16, torch.float16):
                pc = "float"  # both sides are exact in float
            return self._fresh(
                "int", f"(({pc})({self._arg(a0)}) {_COMPARE[name]} ({pc})({self._arg(a1)}))"
            )
        if name in _LOGICAL:
            return self._fresh(
                "int",
                f"((({self._arg(args[0])}) != 0) {_LOGICAL[name]} (({self._arg(args[1])}) != 0))",
            )
        if name == "logical_not":
            return self._fresh("int", f"!({self._arg(args[0])})")
        if name in _BITWISE:
            return self._fresh(
                ct, f"({ct})(({self._arg(args[0])}) {_BITWISE[name]} ({self._arg(args[1])}))"
            )
        if name == "bitwise_not":
            if dt is torch.bool:
                return self._fresh("int", f"!({self._arg(args[0])})")
            return self._fresh(ct, f"({ct})(~({self._arg(args[0])}))")
        if name == "where":
            c, a, b = args
            return self._fresh(
                ct,
                f"({self._arg(c)}) ? {self._cast(self._arg(a, dt), None, dt)} : "
                f"{self._cast(self._arg(b, dt), None, dt)}",
            )
        if name == "neg":
            return self._fresh(ct, f"({ct})(-({self._arg(args[0])}))")
        if name == "abs":
            x = self._arg(args[0])
            if _is_float(dt):
                return self._fresh(ct, f"fabs{self._f(dt)}({x})")
            return self._fresh(ct, f"({ct})(({x}) < 0 ? -({x}) : ({x}))")
        if name in _UNARY_F and _is_float(dt):
            fn = _UNARY_F[name] + self._f(dt)
            return self._fresh(ct, self._cast(f"{fn}(({ct})({self._arg(args[0])}))", None, dt))
        if name in ("rsqrt", "reciprocal", "sigmoid") and _is_float(dt):
            x = f"({ct})({self._arg(args[0])})"
            f = self._f(dt)
            expr = {
                "rsqrt": f"1 / sqrt{f}({x})",
                "reciprocal": f"1 / {x}",
                "sigmoid": f"1 / (1 + exp{f}(-{x}))",
            }[name]
            return self._fresh(ct, self._cast(expr, None, dt))
        if name == "pow" and _is_float(dt):
            a, b = self._arg(args[0], dt), self._arg(args[1], dt)
            return self._fresh(
                ct, self._cast(f"pow{self._f(dt)}(({ct})({a}), ({ct})({b}))", None, dt)
            )
        if name in ("minimum", "maximum", "clamp_min", "clamp_max"):
            a, b = self._arg(args[0], dt), self._arg(args[1], dt)
            op = "<" if name in ("minimum", "clamp_max") else ">"
            return self._fresh(
                ct, f"(({ct})({a}) {op} ({ct})({b}) || ({a}) != ({a})) ? ({ct})({a}) : ({ct})({b})"
            )
        if name == "clamp":
            x = f"({ct})({self._arg(args[0], dt)})"
            lo = args[1] if len(args) > 1 else kw.get("min")
            hi = args[2] if len(args) > 2 else kw.get("max")
            v = self._fresh(ct, x)
            if lo is not None:
                v = self._fresh(
                    ct, f"{v} < ({ct})({self._arg(lo, dt)}) ? ({ct})({self._arg(lo, dt)}) : {v}"
                )
            if hi is not None:
                v = self._fresh(
                    ct, f"{v} > ({ct})({self._arg(hi, dt)}) ? ({ct})({self._arg(hi, dt)}) : {v}"
                )
            return v
        if name == "tanh_backward":
            g, y = self._arg(args[0], dt), self._arg(args[1], dt)
            return self._fresh(ct, self._cast(f"({g}) * (1 - ({y}) * ({y}))", None, dt))
        if name == "sigmoid_backward":
            g, y = self._arg(args[0], dt), self._arg(args[1], dt)
            return self._fresh(ct, self._cast(f"({g}) * ({y}) * (1 - ({y}))", None, dt))
        raise RenderUnsupported(f"op {t}")


_PRELUDE = """#include <math.h>
#include <stdint.h>

#include "trn/convert.h"
#include "trn/flex_attention.h"

int trn_flex_abi = 1;

static inline int64_t trn_flex_floordiv(int64_t a, int64_t b) {
    int64_t q = a / b;
    return (a % b != 0 && ((a < 0) != (b < 0))) ? q - 1 : q;
}
static inline int64_t trn_flex_remainder(int64_t a, int64_t b) {
    int64_t r = a % b;
    return (r != 0 && ((r < 0) != (b < 0))) ? r + b : r;
}
static inline double trn_flex_fremainder(double a, double b) {
    double r = fmod(a, b);
    return (r != 0 && ((r < 0) != (b < 0))) ? r + b : r;
}
"""

_SCORE_LOOP = """
void flex_score(const trn_flex_buffers *bf, int64_t b, int64_t h, int64_t i0, int64_t ni,
                int64_t j0, int64_t nj, float *st, int64_t ld, int masked) {
    for (int64_t j = 0; j < nj; j++) {
        float *r = st + j * ld;
        const int64_t kv = j0 + j;
        if (masked) {
            for (int64_t i = 0; i < ni; i++)
                r[i] = flex_mask_one(bf, b, h, i0 + i, kv) ? flex_score_one(bf, r[i], b, h, i0 + i, kv)
                                                            : -INFINITY;
        } else {
            for (int64_t i = 0; i < ni; i++) r[i] = flex_score_one(bf, r[i], b, h, i0 + i, kv);
        }
    }
}
"""

_GRAD_LOOP = """
void flex_grad(const trn_flex_buffers *bf, int64_t b, int64_t h, int64_t i0, int64_t ni,
               int64_t j0, int64_t nj, const float *st, float *dst, int64_t ld) {
    for (int64_t j = 0; j < nj; j++) {
        const float *r = st + j * ld;
        float *g = dst + j * ld;
        const int64_t kv = j0 + j;
        for (int64_t i = 0; i < ni; i++) g[i] = flex_grad_one(bf, r[i], b, h, i0 + i, kv, g[i]);
    }
}
"""


def _joint_is_identity(joint) -> bool:
    """Whether the joint graph returns the incoming gradient unchanged as
    the score's gradient (score_mod adds to the score or keeps it)."""
    ph = [n for n in joint.graph.nodes if n.op == "placeholder"]
    out = next(n for n in joint.graph.nodes if n.op == "output").args[0]
    first = out[0] if isinstance(out, (tuple, list)) else out
    return len(ph) > 5 and first is ph[5]


def render_mods(score_gm, mask_gm, joint_gm, n_score_bufs: int) -> str:
    """C source of flex_score (and flex_grad when joint_gm is given and not
    the identity) from ATen graphs of 0-dim tensors: score_gm(score, b, h,
    q, kv, *score_bufs), mask_gm(b, h, q, kv, *mask_bufs), joint_gm(score,
    b, h, q, kv, grad, *score_bufs) -> (grad_score, ...)."""
    parts = [_PRELUDE]
    parts.append(
        _Renderer(score_gm, "flex_score_one", ["s", "b", "h", "q", "kv"], "float", 0, 5).render()
    )
    if mask_gm is None:
        parts.append(
            "static inline int flex_mask_one(const trn_flex_buffers *bf, int64_t b, int64_t h, "
            "int64_t q, int64_t kv) {\n    (void)bf; (void)b; (void)h; (void)q; (void)kv;\n"
            "    return 1;\n}\n"
        )
    else:
        parts.append(
            _Renderer(
                mask_gm, "flex_mask_one", ["b", "h", "q", "kv"], "int", n_score_bufs, 4
            ).render()
        )
    parts.append(_SCORE_LOOP)
    if joint_gm is not None and not _joint_is_identity(joint_gm):
        parts.append(
            _Renderer(
                joint_gm, "flex_grad_one", ["s", "b", "h", "q", "kv", "g"], "float", 0, 6
            ).render()
        )
        parts.append(_GRAD_LOOP)
    return "\n".join(parts)
