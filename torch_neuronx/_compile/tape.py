"""A libtrn graph builder that remembers its calls, so a warm start can
rebuild the same graph without lowering the FX graph again.

Owner: RecordingGraph (what the Lowerer builds into), Tape and replay().
The tape is the exact list of builder calls with plain arguments (ints,
floats, lists, strings; an NKI kernel call by its program text, compiled
again by the replay: a disk-cache hit); replaying it on a fresh builder gives node ids
identical to the recorded ones, because the builder numbers nodes in call
order.
"""

from __future__ import annotations

import marshal

from .. import _C

# Builder calls that change the graph (everything but compile/node_count).
_RECORDED = (
    "input",
    "const",
    "pointwise",
    "cast",
    "view",
    "reduce",
    "matmul",
    "conv",
    "iota",
    "gather",
    "scatter",
    "host_call",
    "host_result",
    "nki_call",
    "grouped_mm_call",
    "scaled_grouped_mm_call",
    "scaled_mm_call",
    "sort_call",
    "scan_call",
    "histc_call",
    "extern_result",
    "export",
    "store",
    "set_layout",
    "set_label",
)


class Tape:
    """The builder calls, one marshal record (bytes) per call. Kept as
    tuples and lists, a training graph's tape was thousands of GC-tracked
    objects, most of what a warm start unpickled for our graphs: they
    brought CPython's full collections sooner, and one that fell inside the
    backend cost a warm start 0.5-0.8 s in a process holding millions of
    objects (bench_compile's GPT-2 training after four other models). Bytes
    are not tracked, and replay decodes one call at a time, so its
    temporaries die young."""

    __slots__ = ("records",)

    def __init__(self, records=None):
        self.records: list[bytes] = records if records is not None else []

    def append(self, name: str, args: tuple) -> None:
        self.records.append(marshal.dumps((name, args)))

    def __iter__(self):
        for r in self.records:
            yield marshal.loads(r)

    def __len__(self) -> int:
        return len(self.records)

    def __reduce__(self):
        return Tape, (self.records,)


class RecordingGraph:
    def __init__(self):
        self.g = _C._CompilerGraph()
        self.tape = Tape()

    def nki_call(self, prog, text: str, name: str, args, n_results: int) -> int:
        """An NKI kernel call as an extern step (lower_nki.py). Recorded by
        its program text, which a replay compiles again (a cache hit)."""
        call = self.g.nki_call(prog, args, n_results)
        self.tape.append("nki_call", (text, name, list(args), n_results))
        return call

    def __getattr__(self, name):
        fn = getattr(self.g, name)
        if name not in _RECORDED:
            return fn

        def call(*args):
            out = fn(*args)
            # Recorded after the call: a rejected call (an exception) is not
            # part of the graph. Encoded now: a caller may reuse its lists.
            self.tape.append(name, args)
            return out

        return call


def replay(tape) -> "_C._CompilerGraph":
    g = _C._CompilerGraph()
    for name, args in tape:
        if name not in _RECORDED:
            raise ValueError(f"neuron warm cache: unknown builder call {name!r} in a cached graph")
        if name == "nki_call":
            from .lower_nki import program_for

            text, kname, nodes, n_results = args
            g.nki_call(program_for(text, kname), nodes, n_results)
            continue
        getattr(g, name)(*args)
    return g
