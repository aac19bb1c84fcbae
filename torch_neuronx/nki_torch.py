"""NKI kernels as PyTorch operators (TorchNeuron's `nki_op` and `wrap_nki`).

``@nki_op("ns::name", mutates_args=...)`` turns a function that calls
@nki.jit kernels into a ``torch.library`` custom op. Its fake (meta)
implementation is the same function run on fake tensors: a kernel called
with fake tensors is only traced (never compiled or run) and returns fake
outputs of the traced shapes, so shape propagation costs one trace per
signature. ``register_autograd`` works as on any custom op. Under
``torch.compile(backend="neuron")`` the op's kernel calls are extern steps of
the compiled program (torch_neuronx/_compile/lower_nki.py), not host steps.

``wrap_nki(kernel)[grid](*args)`` calls a kernel through one generic custom
op (``openneuron_nki::call``) so the call is a single operator node."""

import itertools

import torch

import nki
from nki import _runtime

__all__ = ["nki_op", "wrap_nki", "nki"]


def _is_fake(x):
    if not isinstance(x, torch.Tensor):
        return False
    try:
        from torch._subclasses.fake_tensor import FakeTensor

        if isinstance(x, FakeTensor):
            return True
    except ImportError:  # pragma: no cover
        pass
    return x.device.type == "meta"


def _fake_call(k, args, kwargs):
    """A kernel called on fake tensors: trace for the output shapes."""
    key, tensors = _runtime._signature(k, args, kwargs)
    _tr, _sources, outs, ret = _runtime._trace(k, args, kwargs, tensors)
    dev = next(x.device for x in list(args) + list(kwargs.values()) if isinstance(x, torch.Tensor))
    fouts = [torch.empty(s, dtype=d.torch, device=dev) for s, d in outs]
    ins = {w: _runtime._get(args, kwargs, w) for w in tensors}
    return _runtime._build(ret, ins, fouts)


_orig_call = _runtime.call


def _call(k, args, kwargs, host=False):
    if any(_is_fake(x) for x in list(args) + list(kwargs.values())):
        return _fake_call(k, args, kwargs)
    return _orig_call(k, args, kwargs, host)


_runtime.call = _call


def nki_op(name, fn=None, *, mutates_args=(), device_types=None, schema=None):
    """Registers `fn` (typed: (x: torch.Tensor, ...) -> torch.Tensor) as the
    custom op `name`; fake implementation: `fn` itself on fake tensors."""

    def wrap(f):
        op = torch.library.custom_op(
            name, mutates_args=mutates_args, device_types=device_types, schema=schema
        )(f)
        op.register_fake(f)
        from ._compile import lower_nki

        lower_nki.register(op, f)
        return op

    return wrap if fn is None else wrap(fn)


# ---------------------------------------------------------------- wrap_nki
_calls = {}
_handles = {}
_ids = itertools.count(1)


@torch.library.custom_op("openneuron_nki::call", mutates_args=("args",))
def _nki_call(handle: int, args: list[torch.Tensor]) -> list[torch.Tensor]:
    k, consts, layout = _calls[handle]
    r = _invoke(k, consts, layout, args)
    return [x.clone() if any(x is a for a in args) else x for x in _flat(r)]


@_nki_call.register_fake
def _(handle: int, args: list[torch.Tensor]) -> list[torch.Tensor]:
    k, consts, layout = _calls[handle]
    return [
        x if not any(x is a for a in args) else torch.empty_like(x)
        for x in _flat(_invoke(k, consts, layout, args))
    ]


def _flat(r):
    if r is None:
        return []
    if isinstance(r, torch.Tensor):
        return [r]
    out = []
    for x in r.values() if isinstance(r, dict) else r:
        out.extend(_flat(x))
    return out


def _invoke(k, consts, layout, tensors):
    args = [tensors[v] if kind == "t" else v for kind, v in layout["args"]]
    kwargs = {n: tensors[v] if kind == "t" else v for n, (kind, v) in layout["kwargs"].items()}
    return k(*args, **kwargs)


class _Wrapped:
    def __init__(self, kernel, grid=()):
        self.kernel = kernel if isinstance(kernel, _runtime.Kernel) else nki.jit(kernel)
        self.grid = grid

    def __getitem__(self, grid):
        return _Wrapped(self.kernel, grid if isinstance(grid, tuple) else (grid,))

    def __call__(self, *args, **kwargs):
        k = self.kernel[self.grid] if self.grid else self.kernel
        tensors, layout = [], {"args": [], "kwargs": {}}
        for a in args:
            if isinstance(a, torch.Tensor):
                layout["args"].append(("t", len(tensors)))
                tensors.append(a)
            else:
                layout["args"].append(("c", a))
        for n, a in kwargs.items():
            if isinstance(a, torch.Tensor):
                layout["kwargs"][n] = ("t", len(tensors))
                tensors.append(a)
            else:
                layout["kwargs"][n] = ("c", a)
        # one handle per (kernel, grid, constants): a compiled graph that
        # captured the call keeps a stable constant
        sig = (id(k.fn), k.grid, repr(layout))
        h = _handles.get(sig)
        if h is None:
            h = _handles[sig] = next(_ids)
            _calls[h] = (k, None, layout)
        outs = _nki_call(h, tensors)
        return outs[0] if len(outs) == 1 else tuple(outs) if outs else None


def wrap_nki(kernel):
    """wrap_nki(kernel)[grid](*args): the kernel call as one custom-op node."""
    return _Wrapped(kernel)
