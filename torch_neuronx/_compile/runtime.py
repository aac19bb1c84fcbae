"""Running a compiled graph: buffers in, libtrn program steps, host steps.

Owner: CompiledGraph, the callable AOTAutograd gets back. It allocates the
exported buffers and the workspace (from the device's caching allocator, so
stream order makes reuse safe), hands their addresses to the C run, and at
each host step calls the eager op and passes its results back.
"""
from __future__ import annotations

import torch
from torch.fx.node import map_arg

from .. import _C
from .lower import Lowered, Val, _PyConst, _PyHostResult, _PyInput, _PyItem

_NEURON = "neuron"


class CompiledGraph:
    def __init__(self, lowered: Lowered, program, device: torch.device, name: str):
        self.program = program
        self.device = device
        self.name = name
        self.bases = lowered.bases
        self.ws_size = program.workspace_size
        self.input_nodes = [(nid, i) for nid, i in lowered.inputs if nid is not None]
        self.exports = [(nid, sizes, layout, dtype) for nid, (sizes, layout, dtype) in lowered.exports]
        self.hosts = lowered.hosts
        self.outputs = lowered.outputs
        self.env = lowered.env
        self._boxed_call = True
        self._fast = self._plan_fast()
        if self._fast is not None:
            # No host steps: one C++ call allocates, launches and returns.
            self._in_idx = [i for _, i in self.input_nodes]
            self._call = _C._CompiledCall(
                program, [nid for nid, _ in self.input_nodes], [e[0] for e in self.exports],
                [list(e[1]) for e in self.exports], [list(e[2]) for e in self.exports],
                [e[3] for e in self.exports], self.ws_size, device.index or 0)

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
                whole = tuple(v.sizes) == tuple(b.sizes) and v.offset == 0 and tuple(v.strides) == tuple(b.layout)
                plan.append((kind, j, None if whole else (tuple(v.sizes), tuple(v.strides), v.offset)))
            elif isinstance(v, _PyInput):
                plan.append(("arg", v.index, None))
            elif isinstance(v, _PyConst):
                plan.append(("const", v.value, None))
            else:
                return None
        return plan

    def _call_fast(self, args):
        ins = [args[i] for i in self._in_idx]
        ex = self._call(ins)
        out = []
        for p in self._fast:
            if p is None:
                out.append(None)
                continue
            kind, j, view = p
            if kind == "ex":
                t = ex[j]
            elif kind == "in":
                t = ins[j]
            elif kind == "arg":
                out.append(args[j])
                continue
            else:
                out.append(j)
                continue
            if view is not None:
                t = t.as_strided(view[0], view[1], t.storage_offset() + view[2])
            out.append(t)
        args.clear()  # boxed calling convention: drop inputs early
        return out

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
            if tuple(v.sizes) == tuple(base.shape) and v.offset == 0 and tuple(v.strides) == tuple(base.stride()):
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
        args = list(args)
        dev = self.device
        _C._counter_add("compiled_graph_launches", dev.index or 0, 1)
        if self._fast is not None:
            return self._call_fast(args)
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
        args.clear()  # boxed calling convention: drop inputs early
        return list(self._tensor(v, bufs, None, host_out) if v is not None else None
                    for v in _flat(self.outputs))

    def _host(self, h, run, bufs, args, host_out):
        step = self.hosts[h]
        env = self.env

        def arg(a):
            return self._tensor(env[a], bufs, args, host_out)
        call_args = map_arg(step.args, arg)
        call_kwargs = map_arg(step.kwargs, arg)
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


def _flat(out):
    if isinstance(out, (list, tuple)):
        return list(out)
    return [out]
