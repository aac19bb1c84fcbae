"""Kernel source rewriting for conditionals on loop indices (and for
`and` / `or` between mask predicates, _MaskBoolOps).

A traced loop body runs once with a symbolic index, so `if i < n:` cannot
be decided in Python. The kernel's source is rewritten (once per function)
so that every `if` goes through `__nki_if__`: a concrete test behaves as in
Python; a test on loop indices and program ids (a conjunction of affine
comparisons) records a conditional block around the body, traced once.
An `if` with an `else` on such a test unrolls the loop instead (the
negation of a conjunction is not one condition). Functions with closures or
without retrievable source are left as they are (their `if`s on loop
indices unroll the loop)."""

import ast
import contextlib
import inspect
import textwrap

from ._ir import Affine, Concretize, IExpr, NkiError, Pred, active, expr_text, user_loc, _esc

_cache = {}


_NEG = {"lt": "ge", "ge": "lt", "le": "gt", "gt": "le", "eq": "ne", "ne": "eq"}


@contextlib.contextmanager
def _nki_if(test, mode):
    """mode 0: `if` without else; 1: the then-branch of an if/else; 2: its
    else-branch; 3: an if that must not become a block (unrolls)."""
    tr = active()
    if isinstance(test, Affine) and not test.is_const():
        test = test != 0
    if tr is None or not isinstance(test, Pred):
        yield (not bool(test)) if mode == 2 else bool(test)
        return
    if any(e.s for e, _ in test.terms):
        raise NkiError("nki: an `if` on an arange/mgrid index expression; use mask= instead")
    vars_ = [v for e, _ in test.terms for v in e.a.t]
    terms = test.terms
    if mode == 3 or len(terms) > 4 or (mode in (1, 2) and len(terms) != 1):
        raise Concretize(vars_)  # the negation of a conjunction is not one condition: unroll
    if mode == 2:
        terms = [(terms[0][0], _NEG[terms[0][1]])]
    tr.lines.append(
        "G "
        + str(len(terms))
        + " "
        + " ".join(expr_text(IExpr.of(e), 0, c) for e, c in terms)
        + " "
        + _esc(user_loc())
    )
    try:
        yield True
    finally:
        tr.lines.append("E")


def _stored(nodes):
    return {
        n.id
        for b in nodes
        for n in ast.walk(b)
        if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)
    }


class _IfToWith(ast.NodeTransformer):
    """`if t: body` -> `with __nki_if__(t, unrollable) as c: if c: body`.
    An if whose body rebinds a name the rest of the function reads (e.g.
    `t = f(t)` inside, `t` used after) must not become a conditional block
    (the name would point at a tile the skipped iterations never wrote):
    like an `else`, it unrolls instead."""

    def __init__(self, fdef):
        self.fdef = fdef

    def visit_If(self, node):
        inside = set(map(id, (n for b in node.body + node.orelse for n in ast.walk(b))))
        end = getattr(node, "end_lineno", node.lineno)
        outside = [
            n for n in ast.walk(self.fdef) if isinstance(n, ast.Name) and id(n) not in inside
        ]
        escapes = False
        for name in _stored(node.body + node.orelse):
            stores = [n.lineno for n in outside if n.id == name and isinstance(n.ctx, ast.Store)]
            for ld in (
                n.lineno
                for n in outside
                if n.id == name and isinstance(n.ctx, ast.Load) and n.lineno > end
            ):
                if not any(
                    end < st <= ld for st in stores
                ):  # read after the if, not re-bound first
                    escapes = True
        self.generic_visit(node)
        self.n = getattr(self, "n", 0) + 1

        def block(test, mode, body):
            call = ast.Call(
                func=ast.Name(id="__nki_if__", ctx=ast.Load()),
                args=[test, ast.Constant(value=mode)],
                keywords=[],
            )
            inner = ast.If(test=ast.Name(id="__nki_cond__", ctx=ast.Load()), body=body, orelse=[])
            w = ast.With(
                items=[
                    ast.withitem(
                        context_expr=call,
                        optional_vars=ast.Name(id="__nki_cond__", ctx=ast.Store()),
                    )
                ],
                body=[inner],
            )
            ast.copy_location(inner, node)
            return ast.copy_location(w, node)

        if escapes:
            w = block(node.test, 3, node.body)
            w.body[0].orelse = node.orelse
            return w
        if not node.orelse:
            return block(node.test, 0, node.body)
        tmp = f"__nki_test_{self.n}__"
        assign = ast.copy_location(
            ast.Assign(targets=[ast.Name(id=tmp, ctx=ast.Store())], value=node.test), node
        )
        return [
            assign,
            block(ast.Name(id=tmp, ctx=ast.Load()), 1, node.body),
            block(ast.Name(id=tmp, ctx=ast.Load()), 2, node.orelse),
        ]

    def visit_FunctionDef(self, node):  # nested defs keep their own ifs (they are not kernels)
        if node is self.fdef:
            self.generic_visit(node)
        return node


class _MaskBoolOps(ast.NodeTransformer):
    """`mask=(a and b)` -> `mask=(a & b)` (`or` -> `|`): Python's `and` would
    ask a predicate for its truth value; AWS's tracer reads it as the
    conjunction (legacy kernels write masks that way)."""

    @staticmethod
    def is_mask_boolop(n):
        return isinstance(n, ast.keyword) and n.arg == "mask" and isinstance(n.value, ast.BoolOp)

    def _fold(self, v):
        if not isinstance(v, ast.BoolOp):
            return v
        op = ast.BitAnd() if isinstance(v.op, ast.And) else ast.BitOr()
        vals = [self._fold(x) for x in v.values]
        out = vals[0]
        for x in vals[1:]:
            out = ast.copy_location(ast.BinOp(left=out, op=op, right=x), v)
        return out

    def visit_keyword(self, node):
        self.generic_visit(node)
        if node.arg == "mask":
            node.value = self._fold(node.value)
        return node


def rewritten(fn):
    r = _cache.get(fn)
    if r is not None:
        return r
    r = fn
    try:
        if not fn.__code__.co_freevars and "__nki_if__" not in fn.__code__.co_names:
            src = textwrap.dedent(inspect.getsource(fn))
            tree = ast.parse(src)
            fdef = tree.body[0]
            has_if = any(isinstance(n, ast.If) for n in ast.walk(fdef))
            has_mask = any(_MaskBoolOps.is_mask_boolop(n) for n in ast.walk(fdef))
            if isinstance(fdef, ast.FunctionDef) and (has_if or has_mask):
                fdef.decorator_list = []
                if has_mask:
                    _MaskBoolOps().visit(fdef)
                if has_if:
                    _IfToWith(fdef).visit(fdef)
                outer = ast.FunctionDef(
                    name="__nki_outer__",
                    args=ast.arguments(
                        posonlyargs=[],
                        args=[ast.arg(arg="__nki_if__")],
                        vararg=None,
                        kwonlyargs=[],
                        kw_defaults=[],
                        kwarg=None,
                        defaults=[],
                    ),
                    body=[fdef, ast.Return(value=ast.Name(id=fdef.name, ctx=ast.Load()))],
                    decorator_list=[],
                    returns=None,
                    type_params=[],
                )
                mod = ast.Module(body=[outer], type_ignores=[])
                ast.fix_missing_locations(mod)
                ast.increment_lineno(mod, fn.__code__.co_firstlineno - 1)
                ns = {}
                exec(compile(mod, fn.__code__.co_filename, "exec"), fn.__globals__, ns)
                r = ns["__nki_outer__"](_nki_if)
                r.__defaults__ = fn.__defaults__
                r.__kwdefaults__ = fn.__kwdefaults__
    except (OSError, TypeError, SyntaxError, IndexError):
        r = fn
    _cache[fn] = r
    return r
