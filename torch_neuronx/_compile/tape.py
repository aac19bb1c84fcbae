"""A libtrn graph builder that remembers its calls, so a warm start can
rebuild the same graph without lowering the FX graph again.

Owner: RecordingGraph (what the Lowerer builds into) and replay(). The tape
is the exact list of builder calls with plain arguments (ints, floats,
lists, strings), which pickles; replaying it on a fresh builder gives node
ids identical to the recorded ones, because the builder numbers nodes in
call order.
"""
from __future__ import annotations

from .. import _C

# Builder calls that change the graph (everything but compile/node_count).
_RECORDED = ("input", "const", "pointwise", "cast", "view", "reduce", "matmul", "conv", "iota", "gather", "scatter", "host_call",
             "host_result", "export", "store", "set_layout", "set_label")


class RecordingGraph:
    def __init__(self):
        self.g = _C._CompilerGraph()
        self.tape: list[tuple] = []

    def __getattr__(self, name):
        fn = getattr(self.g, name)
        if name not in _RECORDED:
            return fn

        def call(*args):
            out = fn(*args)
            # Recorded after the call: a rejected call (an exception) is not
            # part of the graph. Lists are copied: a caller may reuse its own.
            self.tape.append((name, tuple(list(a) if isinstance(a, list) else a for a in args)))
            return out
        return call


def replay(tape) -> "_C._CompilerGraph":
    g = _C._CompilerGraph()
    for name, args in tape:
        if name not in _RECORDED:
            raise ValueError(f"neuron warm cache: unknown builder call {name!r} in a cached graph")
        getattr(g, name)(*args)
    return g
