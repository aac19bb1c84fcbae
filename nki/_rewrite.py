"""Kernel source rewriting for conditionals on loop indices.

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


@contextlib.contextmanager
def _nki_if(test, has_else):
    tr = active()
    if isinstance(test, Affine) and not test.is_const():
        test = test != 0
    if tr is None or not isinstance(test, Pred):
        yield bool(test)
        return
    if any(e.s for e, _ in test.terms):
        raise NkiError("nki: an `if` on an arange/mgrid index expression; use mask= instead")
    vars_ = [v for e, _ in test.terms for v in e.a.t]
    if has_else or len(test.terms) > 4:
        raise Concretize(vars_)
    tr.lines.append("G " + str(len(test.terms)) + " " +
                    " ".join(expr_text(IExpr.of(e), 0, c) for e, c in test.terms) + " " + _esc(user_loc()))
    try:
        yield True
    finally:
        tr.lines.append("E")


def _stored(nodes):
    return {n.id for b in nodes for n in ast.walk(b) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}


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
        loads = {n.id for n in ast.walk(self.fdef) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)
                 and id(n) not in inside}
        escapes = bool(_stored(node.body + node.orelse) & loads)
        self.generic_visit(node)
        call = ast.Call(func=ast.Name(id="__nki_if__", ctx=ast.Load()),
                        args=[node.test, ast.Constant(value=bool(node.orelse) or escapes)], keywords=[])
        inner = ast.If(test=ast.Name(id="__nki_cond__", ctx=ast.Load()), body=node.body, orelse=node.orelse)
        w = ast.With(items=[ast.withitem(context_expr=call,
                                         optional_vars=ast.Name(id="__nki_cond__", ctx=ast.Store()))],
                     body=[inner])
        ast.copy_location(inner, node)
        return ast.copy_location(w, node)

    def visit_FunctionDef(self, node):  # nested defs keep their own ifs (they are not kernels)
        if node is self.fdef:
            self.generic_visit(node)
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
            if isinstance(fdef, ast.FunctionDef) and any(isinstance(n, ast.If) for n in ast.walk(fdef)):
                fdef.decorator_list = []
                _IfToWith(fdef).visit(fdef)
                outer = ast.FunctionDef(
                    name="__nki_outer__",
                    args=ast.arguments(posonlyargs=[], args=[ast.arg(arg="__nki_if__")], vararg=None,
                                       kwonlyargs=[], kw_defaults=[], kwarg=None, defaults=[]),
                    body=[fdef, ast.Return(value=ast.Name(id=fdef.name, ctx=ast.Load()))],
                    decorator_list=[], returns=None, type_params=[])
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
