"""NKI kernel calls (``torch_neuronx.nki_op`` custom ops) as extern steps of
the compiled program.

An ``nki_op`` node is lowered by running the op's Python function once on
meta tensors with every ``@nki.jit`` kernel call recorded instead of run
(the kernel is traced and compiled for the arguments' exact shapes, dtypes
and strides, as an eager call would). Each call becomes an extern step
(libtrn/include/trn/graph_extern.h): the compiled program calls the kernel's
compiled entry on the run's stream, between its own kernels, with its
arguments read from the graph's buffers (inputs, the workspace, views of
them) and its outputs new nodes planned like any other. No host step.

What stays a host step (``Unsupported``): a function that does anything but
call kernels on its arguments and on earlier kernels' outputs (an aten op,
a tensor made inside it), a kernel that captured a constant tensor, a
kernel whose outputs are not bound after its arguments, a mutable schema,
an output dtype the compiler does not keep (fp8). A kernel writing one of
its arguments would break the op's own declaration (its schema says no
argument is mutated), so it is not looked for.

Owner: ``register`` (called by ``nki_torch.nki_op`` per op), ``lower_op``
and ``program_for`` (the compiled kernel of a program text: the tape's
``nki_call`` record replays through it at a warm start, a disk-cache hit).
"""

from __future__ import annotations

import threading

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from .lower_core import LOWERINGS, TRN_DTYPE, Unsupported, Val, contiguous_strides

_FNS: dict = {}  # OpOverload -> the op's Python function
_PROGRAMS: dict = {}  # NKI program text -> compiled program (_C._NkiProgram)
# The recorder of the lowering running on this thread (kernel calls on other
# threads run as usual).
_local = threading.local()


def register(op, fn) -> None:
    """Lowers custom op `op` (a torch.library CustomOpDef) by its function."""
    from nki import _runtime

    if not getattr(_runtime.call, "_neuron_recording", False):
        plain = _runtime.call

        def call(k, args, kwargs, host=False):
            rec = getattr(_local, "recorder", None)
            if rec is None:
                return plain(k, args, kwargs, host)
            return rec(k, args, kwargs, host)

        call._neuron_recording = True
        _runtime.call = call
    target = op._opoverload
    _FNS[target] = fn
    LOWERINGS[target] = lower_op


def program_for(text: str, name: str):
    """The compiled NKI program of a traced program text (memory, then the
    disk cache, then gcc: nki's own compile path)."""
    prog = _PROGRAMS.get(text)
    if prog is None:
        from nki import _runtime

        prog = _PROGRAMS[text] = _runtime._compile(text, name)
    return prog


class _Watch(TorchDispatchMode):
    """Refuses any aten op the function runs outside a recorded kernel call."""

    def __init__(self):
        super().__init__()
        self.inside = False

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if not self.inside:
            raise Unsupported(f"nki op: {func} runs between kernel calls")
        return func(*args, **(kwargs or {}))


class _Call:
    __slots__ = ("entry", "args", "outs")

    def __init__(self, entry, args, outs):
        self.entry = entry
        self.args = args  # per bound argument: ("val", Val) | ("out", call, j)
        self.outs = outs  # meta tensors


def _in_memory(L, v: Val) -> Val:
    """A value an extern call can read: consts and iotas have no memory."""
    if L.bases[v.base].kind in ("const", "iota"):
        return L.materialize(v)
    return v


def lower_op(L, node, *args, **kwargs):
    target = node.target
    fn = _FNS[target]
    if target._schema.is_mutable:
        raise Unsupported("nki op: mutates its arguments")
    from nki import _runtime

    known: dict[int, tuple] = {}  # id(meta tensor) -> ("val", Val) | ("out", call, j)
    keep = []  # the meta tensors, alive while ids are compared

    def to_meta(a):
        if isinstance(a, torch.fx.Node):
            v = L.env[a]
            if not isinstance(v, Val):
                raise Unsupported("nki op: an argument is not a device tensor")
            if any(s == 0 for s in v.sizes):
                raise Unsupported("nki op: an empty tensor argument")
            v = _in_memory(L, v)
            t = torch.empty_strided(v.sizes, v.strides, dtype=v.dtype, device="meta")
            known[id(t)] = ("val", v)
            keep.append(t)
            return t
        if isinstance(a, (list, tuple)):
            return type(a)(to_meta(x) for x in a)
        return a

    margs = [to_meta(a) for a in args]
    mkwargs = {k: to_meta(v) for k, v in kwargs.items()}
    calls: list[_Call] = []
    watch = _Watch()

    def record(k, kargs, kkwargs, host=False):
        if host:
            raise Unsupported("nki op: the kernel runs on the host (NKI_SIMULATOR)")
        watch.inside = True
        try:
            e, tensors = _runtime._entry(k, list(kargs), dict(kkwargs))
            bound = []
            seen_out = False
            for src in e.sources:
                if src[0] == "const":
                    raise Unsupported("nki op: the kernel captured a constant tensor")
                if src[0] == "out":
                    seen_out = True
                    continue
                if seen_out:
                    raise Unsupported("nki op: kernel outputs bound before arguments")
                x = _runtime._get(kargs, kkwargs, src[1])
                ref = known.get(id(x))
                if ref is None:
                    raise Unsupported("nki op: a kernel argument made inside the function")
                bound.append(ref)
            outs = []
            for j, (shape, d) in enumerate(e.outs):
                dt = d.torch
                if dt not in TRN_DTYPE or any(s == 0 for s in shape):
                    raise Unsupported(f"nki op: kernel output of dtype {dt} or empty")
                t = torch.empty(shape, dtype=dt, device="meta")
                known[id(t)] = ("out", len(calls), j)
                keep.append(t)
                outs.append(t)
            calls.append(_Call(e, bound, outs))
            _PROGRAMS.setdefault(e.text, e.prog)
            ins = {w: _runtime._get(kargs, kkwargs, w) for w in tensors}
            return _runtime._build(e.ret, ins, outs)
        finally:
            watch.inside = False

    _local.recorder = record
    try:
        with watch:
            result = fn(*margs, **mkwargs)
    except Unsupported:
        raise
    except Exception as err:  # noqa: BLE001 - the function needs real tensors: eager
        raise Unsupported(f"nki op: {type(err).__name__}: {err}") from None
    finally:
        _local.recorder = None

    def ref_of(t):
        r = known.get(id(t)) if isinstance(t, torch.Tensor) else None
        if r is None or r[0] != "out":
            raise Unsupported("nki op: returns something other than kernel outputs")
        return r

    returned = [ref_of(t) for t in result] if isinstance(result, (list, tuple)) else ref_of(result)

    # Emit, in call order: each call's arguments, the call, its results.
    made: list[list[Val]] = []
    for c in calls:
        nids = []
        for ref in c.args:
            v = ref[1] if ref[0] == "val" else made[ref[1]][ref[2]]
            nids.append(L.node_of(v))
        e = c.entry
        call = L.g.nki_call(e.prog, e.text, e.name, nids, len(c.outs))
        vals = []
        for t in c.outs:
            strides = contiguous_strides(tuple(t.shape))
            nid = L.g.extern_result(call, TRN_DTYPE[t.dtype], list(t.shape), list(strides))
            vals.append(L.new_base(nid, "node", tuple(t.shape), strides, t.dtype))
        made.append(vals)
    if isinstance(returned, list):
        return [made[r[1]][r[2]] for r in returned]
    return made[returned[1]][returned[2]]
