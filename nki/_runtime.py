"""Kernel calls: signature -> traced, checked, compiled program (libtrn,
through torch_neuronx._C), cached per signature in memory and on disk;
runs on the host (NumPy arrays, CPU tensors, nki.simulate,
NKI_SIMULATOR=1) or queued on the neuron device's stream (neuron tensors).

Owns: Kernel (what @nki.jit returns), simulate, the legacy decorators'
behaviour, argument conversion and the per-signature cache."""

import functools
import os
import re
import time

import numpy as np

from . import _dtypes as dt
from ._ir import AP, ARG, OUT, Concretize, NkiError, Tracer, active
from ._rewrite import rewritten

stats = {
    "calls": 0,
    "traces": 0,
    "compiles": 0,
    "disk_hits": 0,
    "memory_hits": 0,
    "compile_seconds": 0.0,
    "trace_seconds": 0.0,
}


def _torch():
    try:
        import torch

        return torch
    except ImportError:  # pragma: no cover
        return None


def _is_tensor(x):
    if isinstance(x, np.ndarray):
        return True
    torch = _torch()
    return torch is not None and isinstance(x, torch.Tensor)


def _freeze(v):
    if isinstance(v, (list, tuple)):
        return (type(v).__name__,) + tuple(_freeze(x) for x in v)
    if isinstance(v, dict):
        return ("dict",) + tuple(sorted((k, _freeze(x)) for k, x in v.items()))
    if isinstance(v, (int, float, str, bool, type(None), bytes)):
        return (type(v).__name__, v)
    if isinstance(v, np.generic):
        return ("np", v.dtype.str, v.item())
    return (type(v).__name__, repr(v))


def _target():
    t = os.environ.get("NEURON_PLATFORM_TARGET_OVERRIDE", "").lower()
    return {"trn1": 2, "gen2": 2, "inf2": 2, "trn2": 3, "gen3": 3, "trn3": 4, "gen4": 4}.get(t, 3)


def _tensor_sig(x):
    """(shape, NKI dtype, element strides) of an array or tensor."""
    if isinstance(x, np.ndarray):
        d = dt.to_dtype(x.dtype)
        st = tuple(s // x.itemsize for s in x.strides)
        return tuple(x.shape), d, st
    d = dt.to_dtype(x.dtype)
    return tuple(x.shape), d, tuple(x.stride())


def _simulating():
    v = os.environ.get("NKI_SIMULATOR", "")
    return v not in ("", "0", "false", "False")


class _Entry:
    __slots__ = (
        "prog",
        "sources",
        "outs",
        "ret",
        "text",
        "device_consts",
        "n_instr",
        "name",
        "covered",
    )


class Kernel:
    """A traced-on-first-call NKI kernel (what @nki.jit returns)."""

    def __init__(self, fn, grid=(), legacy=False, mode=None, cache=None, force_host=False, **opts):
        self.fn = fn
        self.grid = tuple(grid)
        self.legacy = legacy
        self.mode = mode
        self.force_host = force_host
        self.opts = opts
        self._cache = {} if cache is None else cache
        self.benchmark_result = None
        functools.update_wrapper(self, fn, updated=())

    def __getitem__(self, grid):
        if not isinstance(grid, tuple):
            grid = (grid,)
        g = []
        for x in grid:
            if hasattr(x, "__index__"):
                g.append(int(x))
            else:
                raise NkiError(
                    "nki: a launch grid is made of integers (nl.nc / spmd_dim are not supported)"
                )
        if not g or any(x < 1 for x in g) or len(g) > 4:
            raise NkiError(f"nki: bad launch grid {grid}")
        return Kernel(self.fn, g, self.legacy, self.mode, self._cache, self.force_host, **self.opts)

    def __repr__(self):
        return f"<nki kernel {getattr(self.fn, '__name__', '?')}{list(self.grid) if self.grid else ''}>"

    def __call__(self, *args, **kwargs):
        if active() is not None:  # a sub-kernel called while tracing: inlined
            return rewritten(self.fn)(*args, **kwargs)
        return call(
            self, args, kwargs, host=self.force_host or _simulating() or self.mode == "simulation"
        )

    # -- compile-only entry points (torch fake implementations, tests)
    def trace(self, *args, **kwargs):
        """The traced program's text and output specs, without compiling."""
        key, tensors = _signature(self, args, kwargs)
        return _trace(self, args, kwargs, tensors)

    def specialize(self, *args, **kwargs):
        """Trace + check + compile for these arguments (no run)."""
        return _entry(self, args, kwargs)


def _signature(k, args, kwargs):
    parts, tensors = [], []
    torch = _torch()
    kinds = (np.ndarray, torch.Tensor) if torch is not None else np.ndarray
    for i, a in enumerate(args):
        if isinstance(a, kinds):
            tensors.append(("a", i))
            parts.append(("t",) + _tensor_sig(a))
        else:
            parts.append(("c", _freeze(a)))
    for n in sorted(kwargs):
        a = kwargs[n]
        if isinstance(a, kinds):
            tensors.append(("k", n))
            parts.append(("t", n) + _tensor_sig(a))
        else:
            parts.append(("c", n, _freeze(a)))
    return (k.grid, _target(), tuple(parts)), tensors


def _get(args, kwargs, where):
    return args[where[1]] if where[0] == "a" else kwargs[where[1]]


def _trace(k, args, kwargs, tensors):
    unroll = set()
    t0 = time.perf_counter()
    name = getattr(k.fn, "__name__", "kernel")
    unroll_all = False
    for _attempt in range(64):
        tr = Tracer(name, k.grid or (1,), _target(), frozenset(unroll), k.legacy)
        tr.unroll_all = unroll_all
        with tr:
            a2, k2 = list(args), dict(kwargs)
            sources = []  # per ARG/OUT tensor id: ("in", where) | ("const", array) | ("out", j)
            for w in tensors:
                x = _get(args, kwargs, w)
                shape, d, st = _tensor_sig(x)
                t = tr.new_tensor(ARG, d, list(shape), strides=list(st))
                t.name = str(w[1])
                if w[0] == "a":
                    a2[w[1]] = AP(t)
                else:
                    k2[w[1]] = AP(t)
            try:
                ret = rewritten(k.fn)(*a2, **k2)
                if k.legacy:
                    ret = _onchip_returns(ret, tr)
            except Concretize as c:
                new = {tr.loop_keys[v] for v in c.vars if v in tr.loop_keys} - unroll
                if not new:
                    raise NkiError(
                        f"nki kernel '{name}': a program id or loop index was used as a Python value "
                        "(if/int()/range bound); use masks, nl.ds or iota instead"
                    ) from None
                unroll |= new
                continue
            except (IndexError, KeyError, TypeError) as err:
                # Python state built across a symbolic loop (a list of tiles
                # appended in one loop, indexed in another): retrace with
                # every loop unrolled, NKI 0.6's own specialization
                if unroll_all or isinstance(err, NkiError):
                    raise
                unroll_all = True
                continue
        break
    else:  # pragma: no cover
        raise NkiError(f"nki kernel '{name}': too many loops needed unrolling")
    stats["traces"] += 1
    stats["trace_seconds"] += time.perf_counter() - t0
    consts = dict(tr.constants)
    inputs = {}
    j = 0
    outs = []
    for t in tr.tensors:
        if t.kind == ARG:
            if t.id in consts:
                sources.append(("const", consts[t.id]))
            else:
                sources.append(("in", tensors[len(inputs)]))
                inputs[t.id] = tensors[len(inputs)]
        elif t.kind == OUT:
            sources.append(("out", j))
            outs.append((tuple(t.shape), t.dtype))
            j += 1
    out_index = {}
    j = 0
    for t in tr.tensors:
        if t.kind == OUT:
            out_index[t.id] = j
            j += 1

    def spec(r):
        if r is None:
            return None
        if isinstance(r, AP):
            if not r._is_whole():
                raise NkiError(
                    f"nki kernel '{name}': return whole HBM tensors (nl.ndarray(..., buffer=nl.shared_hbm))"
                )
            if r.tensor.kind == OUT:
                return ("out", out_index[r.tensor.id])
            if r.tensor.id in inputs:
                return ("in", inputs[r.tensor.id])
            raise NkiError(
                f"nki kernel '{name}': only HBM tensors can be returned (got an {r.buffer!r} tile)"
            )
        if isinstance(r, (tuple, list)):
            return (type(r).__name__, [spec(x) for x in r])
        if isinstance(r, dict):
            return ("dict", {kk: spec(v) for kk, v in r.items()})
        raise NkiError(f"nki kernel '{name}': cannot return {type(r).__name__}")

    return tr, sources, outs, spec(ret)


def _onchip_returns(r, tr):
    """Legacy kernels may return SBUF/PSUM tiles (AWS's simulator hands them
    back as arrays): each becomes a new output, copied at the kernel's end."""
    from . import _ops
    from ._ir import OUT as _OUT
    from ._ir import PSUM, SBUF, VIEW

    if isinstance(r, AP):
        t = r.tensor
        while t.kind == VIEW:
            t = tr.tensors[t.base]
        if t.kind not in (SBUF, PSUM):
            return r
        out = AP(tr.new_tensor(_OUT, r.dtype, list(r.shape)))
        src = _ops.copy(None, r, mode=2, name="return") if t.kind == PSUM else r
        _ops.copy(out, src, mode=1, name="return")
        return out
    if isinstance(r, (tuple, list)):
        return type(r)(_onchip_returns(x, tr) for x in r)
    if isinstance(r, dict):
        return {n: _onchip_returns(v, tr) for n, v in r.items()}
    return r


def _compile(text, name):
    from torch_neuronx import _C
    from torch_neuronx._compile.config import (
        _include_dir,
        cache_dir,
        cache_lock_timeout,
        cache_max_bytes,
        debug_dir,
    )

    t0 = time.perf_counter()
    try:
        cache = cache_dir()
        # The graph compiler's cache rules: the per-key lock's wait and the size bound.
        bound = cache_max_bytes() if cache else 0
        prog = _C._nki_compile(
            text, _include_dir(), cache, debug_dir(), f"nki_{name}", cache_lock_timeout(), bound
        )
    except ValueError as e:
        raise NkiError(str(e)) from None
    if prog.from_cache:
        stats["disk_hits"] += 1
    else:
        stats["compiles"] += 1
    stats["compile_seconds"] += time.perf_counter() - t0
    return prog


def _entry(k, args, kwargs):
    key, tensors = _signature(k, args, kwargs)
    key = (id(k.fn),) + key
    e = k._cache.get(key)
    if e is not None:
        stats["memory_hits"] += 1
        return e, tensors
    tr, sources, outs, ret = _trace(k, args, kwargs, tensors)
    e = _Entry()
    e.name = tr.name
    e.text = tr.text()
    e.n_instr = tr.n_instr
    e.prog = _compile(e.text, tr.name)
    e.sources, e.outs, e.ret, e.device_consts = sources, outs, ret, {}
    # outputs the kernel writes entirely and never reads: their poison fill
    # could never be seen (libtrn's cover.c), so they start uninitialised
    e.covered = tuple(
        e.prog.output_covered(slot)
        for j in range(len(outs))
        for slot, src in enumerate(sources)
        if src == ("out", j)
    )
    k._cache[key] = e
    return e, tensors


def _poison_value(d):
    return float("nan") if d.is_float else 4


def _build(ret, ins, outs):
    if ret is None:
        return None
    tag = ret[0]
    if tag == "out":
        return outs[ret[1]]
    if tag == "in":
        return ins[ret[1]]
    if tag == "dict":
        return {k: _build(v, ins, outs) for k, v in ret[1].items()}
    items = [_build(x, ins, outs) for x in ret[1]]
    return tuple(items) if tag == "tuple" else items


def call(k, args, kwargs, host=False):
    stats["calls"] += 1
    torch = _torch()
    device = None
    if torch is not None:
        for x in (*args, *kwargs.values()) if kwargs else args:
            if isinstance(x, torch.Tensor) and x.device.type == "neuron":
                device = x.device
                break
    dev = device is not None
    if dev and host:
        return _call_via_host(k, args, kwargs)
    # NumPy arrays the compiled code cannot address directly: copies
    args = list(args)
    for i, a in enumerate(args):
        if isinstance(a, np.ndarray) and any(s < 0 or s % a.itemsize for s in a.strides):
            args[i] = np.ascontiguousarray(a)
    e, tensors = _entry(k, args, kwargs)
    insmap = {w: args[w[1]] if w[0] == "a" else kwargs[w[1]] for w in tensors}
    if dev:
        outs = [
            torch.empty(s, dtype=d.torch, device=device)
            if cov
            else torch.full(s, _poison_value(d), dtype=d.torch, device=device)
            for (s, d), cov in zip(e.outs, e.covered)
        ]
        bound = []
        for src in e.sources:
            if src[0] == "in":
                bound.append(insmap[src[1]])
            elif src[0] == "out":
                bound.append(outs[src[1]])
            else:
                c = e.device_consts.get((id(src[1]), str(device)))
                if c is None:
                    c = (src[1] if isinstance(src[1], torch.Tensor) else dt.torch_view(src[1])).to(
                        device
                    )
                    e.device_consts[(id(src[1]), str(device))] = c
                bound.append(c)
        e.prog.launch(bound)
    else:
        use_torch = torch is not None and any(isinstance(x, torch.Tensor) for x in insmap.values())
        outs = []
        for (s, d), cov in zip(e.outs, e.covered):
            if use_torch or d.np_name is None:
                outs.append(
                    torch.empty(s, dtype=d.torch)
                    if cov
                    else torch.full(s, _poison_value(d), dtype=d.torch)
                )
            else:
                outs.append(np.empty(s, d.numpy) if cov else np.full(s, _poison_value(d), d.numpy))
        addrs = []
        for src in e.sources:
            x = insmap[src[1]] if src[0] == "in" else outs[src[1]] if src[0] == "out" else src[1]
            addrs.append(x.ctypes.data if isinstance(x, np.ndarray) else x.data_ptr())
        try:
            e.prog.run_host(addrs)
        except ValueError as err:
            # an index tile's row out of range: NumPy's IndexError, as AWS's
            # simulator raises it
            m = re.search(r"index -?\d+ is out of bounds for axis 0 with size \d+", str(err))
            if m is None:
                raise
            raise IndexError(m.group(0)) from err
        if not use_torch:
            outs = [o.float().numpy() if not isinstance(o, np.ndarray) else o for o in outs]
    ins = {w: insmap[w] for w in tensors}
    return _build(e.ret, ins, outs)


def _call_via_host(k, args, kwargs):
    """NKI_SIMULATOR=1 with neuron tensors: run on CPU copies, write back."""
    torch = _torch()

    def cpu(x):
        return x.cpu() if isinstance(x, torch.Tensor) and x.device.type == "neuron" else x

    a2 = [cpu(a) for a in args]
    k2 = {n: cpu(v) for n, v in kwargs.items()}
    r = call(k, a2, k2, host=False)
    for orig, c in list(zip(args, a2)) + [(kwargs[n], k2[n]) for n in kwargs]:
        if orig is not c and isinstance(orig, torch.Tensor):
            orig.copy_(c)
    device = next(
        x.device
        for x in list(args) + list(kwargs.values())
        if isinstance(x, torch.Tensor) and x.device.type == "neuron"
    )

    def back(x):
        if isinstance(x, torch.Tensor):
            return x.to(device)
        if isinstance(x, (list, tuple)):
            return type(x)(back(y) for y in x)
        if isinstance(x, dict):
            return {n: back(v) for n, v in x.items()}
        return x

    return back(r)


def jit(fn=None, mode=None, legacy=False, **opts):
    """@nki.jit / @nki.jit(...) / nki.jit(fn, ...)."""
    if "platform_target" in opts and not legacy:
        raise NkiError(
            "nki.jit: platform_target= is not accepted (set NEURON_PLATFORM_TARGET_OVERRIDE)"
        )
    if fn is None:
        return lambda f: jit(f, mode=mode, legacy=legacy, **opts)
    if isinstance(fn, Kernel):
        return fn
    return Kernel(fn, legacy=legacy, mode=mode, **opts)


def simulate(kernel):
    """nki.simulate(kernel)(*args): runs on the host with NumPy arrays or CPU
    tensors and returns the same kind."""
    k = kernel if isinstance(kernel, Kernel) else Kernel(kernel)

    def run(*args, **kwargs):
        return call(k, args, kwargs, host=True)

    return run
