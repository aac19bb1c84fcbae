"""A new input shape compiles its own static graph (TorchNeuron's rule).

Owner: the run-time specialisation of graphs that Dynamo made symbolic on
its own. With ``dynamic=None`` (the default), Dynamo marks a dimension
dynamic once it has seen it change and hands the backend a graph with
``SymInt`` sizes; TorchNeuron compiles one static graph per shape instead.
``backend.neuron_backend`` gives such a graph to ``PerShape``, which, at each
call, looks up the concrete sizes (tensor shapes and strides, the SymInt
arguments' values) and compiles the graph for them on first sight, through
the same static path as any other graph (in-memory, disk and warm caches
included). Explicit ``dynamic=True`` and ``mark_dynamic`` keep their clear
error: the user asked for something we do not compile.

As Dynamo does for recompiles: after ``torch._dynamo.config.recompile_limit``
shapes of one graph, a warning and eager execution of the graph;
``set_stance("fail_on_recompile")`` makes a new shape an error.
"""

from __future__ import annotations

import copy
import threading
import warnings

import torch

from . import metrics


def user_asked_dynamic(example_inputs) -> bool:
    """``dynamic=True`` (Dynamo then stops assuming static shapes while the
    backend runs) or ``torch._dynamo.mark_dynamic`` on an input."""
    if not torch._dynamo.config.assume_static_by_default:
        return True
    return any(
        getattr(x, "_dynamo_dynamic_indices", None)
        for x in example_inputs
        if isinstance(x, torch.Tensor)
    )


def is_symbolic(example_inputs) -> bool:
    def sym(v):
        return isinstance(v, (torch.SymInt, torch.SymFloat, torch.SymBool))

    for x in example_inputs:
        if sym(x):
            return True
        if isinstance(x, torch.Tensor) and (
            any(map(sym, x.shape)) or any(map(sym, x.stride())) or sym(x.storage_offset())
        ):
            return True
    return False


def bake_symbolic_inputs(gm: torch.fx.GraphModule, symbolic_inputs, args):
    """A copy of gm whose symbolic scalar inputs (the sizes Dynamo passes as
    SymInt arguments) are the values in ``args``, and the indices of the
    inputs it still takes: the graph Dynamo would have traced for these
    shapes, so it meets the same cache entries."""
    graph = copy.deepcopy(gm.graph)
    placeholders = [n for n in graph.nodes if n.op == "placeholder"]
    keep = []
    for i, node in enumerate(placeholders):
        if i < len(symbolic_inputs) and isinstance(
            symbolic_inputs[i], (torch.SymInt, torch.SymFloat, torch.SymBool)
        ):
            value = args[i]
            for user in list(node.users):
                user.args = torch.fx.node.map_arg(user.args, lambda a: value if a is node else a)
                user.kwargs = torch.fx.node.map_arg(
                    user.kwargs, lambda a: value if a is node else a
                )
            graph.erase_node(node)
        else:
            keep.append(i)
    return torch.fx.GraphModule(gm, graph), keep


def _signature(args) -> tuple:
    sig = []
    for a in args:
        if isinstance(a, torch.Tensor):
            sig.append(
                (tuple(a.shape), a.stride(), a.storage_offset(), a.dtype, a.device, a.requires_grad)
            )
        elif isinstance(a, (int, float, bool)):
            sig.append((type(a), a))
        else:
            sig.append(type(a))
    return tuple(sig)


class PerShape:
    """The callable Dynamo runs for a graph with symbolic sizes: one static
    compiled graph per concrete signature, made by ``compile_static(gm,
    args)`` on first sight."""

    def __init__(self, gm: torch.fx.GraphModule, compile_static):
        self.gm = gm
        self.compile_static = compile_static
        self.graphs: dict[tuple, object] = {}
        self.lock = threading.Lock()
        self.over_limit = False

    def _new_shape(self, sig, args):
        from torch._dynamo.eval_frame import _stance

        if _stance.stance == "fail_on_recompile":
            from torch._dynamo.exc import RecompileError

            raise RecompileError(
                "Detected recompile when torch.compile stance is 'fail_on_recompile' "
                f"(neuron: a new input shape {[s[0] for s in sig if isinstance(s, tuple)]})"
            )
        limit = torch._dynamo.config.recompile_limit
        if len(self.graphs) >= limit:
            if not self.over_limit:
                self.over_limit = True
                warnings.warn(
                    f"torch.compile(backend='neuron'): this graph met more than {limit} input shapes "
                    "(torch._dynamo.config.recompile_limit); new shapes run eagerly. Pad or bucket "
                    "shapes to fewer sizes (docs/compile.md)",
                    stacklevel=3,
                )
            return self.gm.forward
        # The graph's inputs as they are now: a static compile of the same
        # graph (its own fake tensors, no symbols).
        fn = self.compile_static(self.gm, list(args))
        self.graphs[sig] = fn
        metrics.add(shape_graphs=1)
        return fn

    def __call__(self, *args):
        sig = _signature(args)
        fn = self.graphs.get(sig)
        if fn is None:
            with self.lock:
                fn = self.graphs.get(sig) or self._new_shape(sig, args)
        return fn(*args)
