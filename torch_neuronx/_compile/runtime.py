"""Running a compiled graph: buffers in, libtrn program steps, host steps.

Owner: CompiledGraph, the callable AOTAutograd gets back. It allocates the
exported buffers and the workspace (from the device's caching allocator, so
stream order makes reuse safe), hands their addresses to the C run, and at
each host step calls the eager op and passes its results back.
"""

from __future__ import annotations

import time

import torch
from torch._inductor.output_code import OutputCode
from torch.fx.node import map_arg

from .. import _C
from . import artifacts, metrics
from .lower_core import Lowered, Val, _PyConst, _PyHostResult, _PyInput, _PyItem
from .program import rebuild_program

_NEURON = "neuron"


class Host:
    """A host step as the runtime needs it: the op (by name, so it pickles),
    its arguments with FX nodes replaced by their lowered values, and where
    its results go."""

    def __init__(self, step, env):
        self.op = step.fn.name()  # "aten::add.Tensor"
        self.args = _plain(map_arg(step.args, lambda n: env[n]))
        self.kwargs = _plain(map_arg(step.kwargs, lambda n: env[n]))
        self.results = step.results
        self._fn = step.fn

    def __getstate__(self):
        return {k: v for k, v in self.__dict__.items() if k != "_fn"}

    def __setstate__(self, state):
        self.__dict__.update(state)
        self._fn = None

    @property
    def fn(self):
        if self._fn is None:
            if "::" not in self.op:  # a higher-order op (flex_attention)
                self._fn = getattr(torch.ops.higher_order, self.op)
                return self._fn
            ns, rest = self.op.split("::", 1)
            name, _, overload = rest.partition(".")
            self._fn = getattr(getattr(getattr(torch.ops, ns), name), overload or "default")
        return self._fn


def _plain(v):
    """FX's immutable containers as plain lists/tuples/dicts (they pickle)."""
    if isinstance(v, dict):
        return {k: _plain(x) for k, x in v.items()}
    if isinstance(v, tuple):
        return tuple(_plain(x) for x in v)
    if isinstance(v, list):
        return [_plain(x) for x in v]
    return v


class CompiledGraph(OutputCode):
    """What AOTAutograd gets back: an OutputCode, so AOTAutograd's cache
    entry can carry it to a warm process. It pickles as the builder tape and
    the run plan; ``post_compile`` (called when AOTAutograd loads the entry)
    rebuilds the program, which the libtrn disk cache serves without running
    the C compiler."""

    def __init__(self, lowered: Lowered, program, device: torch.device, name: str, cc=None):
        self.tape = lowered.graph.tape
        self.device = device
        self.name = name
        self.cc = cc  # config.CcSettings: how its C compiles (a warm rebuild compiles the same)
        self.input_nodes = [(nid, i) for nid, i in lowered.inputs if nid is not None]
        self.exports = [
            (nid, sizes, layout, dtype) for nid, (sizes, layout, dtype) in lowered.exports
        ]
        self.hosts = [Host(h, lowered.env) for h in lowered.hosts]
        self.outputs = lowered.outputs
        # Only the bases of values the run hands out (outputs, host step
        # arguments): every node's was most of what a warm entry unpickled.
        used = _bases_of([self.outputs, [(h.args, h.kwargs) for h in self.hosts]], set())
        self.bases = {b: lowered.bases[b] for b in sorted(used)}
        self._boxed_call = True
        self.program = None
        # The compile-thread job (jobs._CompileJob) until it attaches the program.
        self._job = None
        if program is not None:
            self._attach(program)

    def _attach(self, program) -> None:
        # self.program is set last: another thread may be calling this graph
        # and takes the ready path as soon as it is set.
        self.ws_size = program.workspace_size
        self._fast = self._plan_fast()
        if self._fast is not None:
            # No host steps: one C++ call picks the inputs from the arguments,
            # allocates, launches and assembles the outputs (views included).
            self._call = _C._CompiledCall(
                program,
                [i for _, i in self.input_nodes],
                [nid for nid, _ in self.input_nodes],
                [e[0] for e in self.exports],
                [list(e[1]) for e in self.exports],
                [list(e[2]) for e in self.exports],
                [e[3] for e in self.exports],
                self.ws_size,
                self.device.index or 0,
                self._fast,
            )
        self.program = program

    # ---- OutputCode: pickling for AOTAutograd's cache entry -----------------------
    _LIVE = ("program", "_call", "_fast", "ws_size", "_job")

    def __getstate__(self):
        return {k: v for k, v in self.__dict__.items() if k not in self._LIVE}

    def __setstate__(self, state):
        self.__dict__.update(state)
        self.program = None
        self._job = None

    def prepare_for_serialization(self) -> None:
        pass  # __getstate__ drops the live program

    def post_compile(self, example_inputs, constants, graph_kwargs) -> None:
        if self.program is None and self._job is None:
            program = rebuild_program(self.tape, self.name, self.device, getattr(self, "cc", None))
            self._attach(program)
            artifacts.record_program(program)

    def set_triton_bundle(self, triton_bundle) -> None:
        pass

    def _plan_fast(self):
        """Per output, where it comes from without the general lookup:
        ("ex", export index | "in", input index, view or None), ("arg", i),
        ("const", value) or None; None overall when the graph has host steps
        or an output needs the general path."""
        if self.hosts:
            return None
        slot = {nid: ("in", j) for j, (nid, _) in enumerate(self.input_nodes)}
        slot.update({e[0]: ("ex", j) for j, e in enumerate(self.exports)})
        plan = []
        for v in _flat(self.outputs):
            if v is None:
                plan.append(None)
            elif isinstance(v, Val):
                if v.base not in slot:
                    return None
                kind, j = slot[v.base]
                b = self.bases[v.base]
                whole = (
                    tuple(v.sizes) == tuple(b.sizes)
                    and v.offset == 0
                    and tuple(v.strides) == tuple(b.layout)
                )
                plan.append(
                    (kind, j, None if whole else (tuple(v.sizes), tuple(v.strides), v.offset))
                )
            elif isinstance(v, _PyInput):
                plan.append(("arg", v.index, None))
            elif isinstance(v, _PyConst):
                plan.append(("const", v.value, None))
            else:
                return None
        return plan

    # Tensor for a value, given the buffers of this call.
    def _tensor(self, v, bufs, args, host_out):
        if isinstance(v, Val):
            base = bufs.get(v.base)
            if base is None:
                b = self.bases[v.base]
                if b.kind != "const":
                    raise RuntimeError(f"{self.name}: buffer of node {v.base} is not available")
                return torch.full(v.sizes, b.const, dtype=v.dtype, device=self.device)
            b = self.bases[v.base]
            if (
                tuple(v.sizes) == tuple(base.shape)
                and v.offset == 0
                and tuple(v.strides) == tuple(base.stride())
            ):
                return base
            return base.as_strided(v.sizes, v.strides, base.storage_offset() + v.offset)
        if isinstance(v, _PyInput):
            return args[v.index]
        if isinstance(v, _PyConst):
            return v.value
        if isinstance(v, _PyHostResult):
            r = host_out[v.step]
            for i in v.path:
                r = r[i]
            return r
        if isinstance(v, _PyItem):
            return self._tensor(v.src, bufs, args, host_out)[v.index]
        if isinstance(v, (list, tuple)):
            return type(v)(self._tensor(x, bufs, args, host_out) for x in v)
        return v

    def __call__(self, args):
        if self.program is None:
            return self._first_call(args)
        if self._fast is not None:
            if type(args) is not list:
                args = list(args)
            return self._call(args)  # counts the launch; empties args (boxed convention)
        args = list(args)
        dev = self.device
        _C._counter_add("compiled_graph_launches", dev.index or 0, 1)
        bufs = {}
        nodes, tensors = [], []
        for nid, i in self.input_nodes:
            t = args[i]
            bufs[nid] = t
            nodes.append(nid)
            tensors.append(t)
        for nid, sizes, layout, dtype in self.exports:
            t = torch.empty_strided(sizes, layout, dtype=dtype, device=dev)
            bufs[nid] = t
            nodes.append(nid)
            tensors.append(t)
        ws = torch.empty(self.ws_size, dtype=torch.uint8, device=dev) if self.ws_size else None
        run = _C._CompiledRun(self.program, ws, dev.index or 0)
        host_out = {}
        try:
            if nodes:
                run.set_many(nodes, tensors)
            while True:
                h = run.cont()
                if h < 0:
                    break
                self._host(h, run, bufs, args, host_out)
        finally:
            run.finish()
        # An output may be an input as it came (a python value, or a tensor
        # the graph passes through: SimpleFSDP's saved shards): read the
        # outputs before the boxed convention drops the inputs.
        out = [
            self._tensor(v, bufs, args, host_out) if v is not None else None
            for v in _flat(self.outputs)
        ]
        args.clear()
        return out

    def _first_call(self, args):
        """No program yet: wait for the compile thread (or rebuild a warm
        graph's program). A compile that failed raises here, naming the
        graph; under fallback execution the graph runs eagerly instead."""
        job = self._job
        if job is not None:
            t = time.perf_counter()
            try:
                ready = job.finish()
            finally:
                # What the compile threads did not hide (the backend's share of
                # a cold start that falls outside Dynamo's call_user_compiler).
                metrics.add(compile_wait_seconds=time.perf_counter() - t)
            if ready is not self:
                return ready(args)
        else:
            self.post_compile(None, None, None)
        return self(args)

    def _host(self, h, run, bufs, args, host_out):
        step = self.hosts[h]
        call_args = [self._tensor(a, bufs, args, host_out) for a in step.args]
        call_kwargs = {k: self._tensor(a, bufs, args, host_out) for k, a in step.kwargs.items()}
        out = step.fn(*call_args, **call_kwargs)
        host_out[h] = out
        for nid, path, sizes, strides in step.results:
            if nid is None:
                continue
            t = out
            for i in path:
                t = t[i]
            if tuple(t.stride()) != strides and t.numel() > 1:
                # Declared with the FX value's strides: keep that layout.
                fixed = torch.empty_strided(sizes, strides, dtype=t.dtype, device=t.device)
                fixed.copy_(t)
                t = fixed
            bufs[nid] = t
            run.set(nid, t)


def _bases_of(v, acc: set) -> set:
    if isinstance(v, Val):
        acc.add(v.base)
    elif isinstance(v, _PyItem):
        _bases_of(v.src, acc)
    elif isinstance(v, dict):
        _bases_of(list(v.values()), acc)
    elif isinstance(v, (list, tuple)):
        for x in v:
            _bases_of(x, acc)
    return acc


def _flat(out):
    if isinstance(out, (list, tuple)):
        return list(out)
    return [out]
