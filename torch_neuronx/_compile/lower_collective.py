"""Functional collectives (``_c10d_functional``, what DTensor redistribution,
SimpleFSDP and tensor parallelism put in a graph) -> asynchronous start and
wait host steps.

A collective's start is a host step that queues the op on the ``neuron``
process group (its worker thread runs it; the call returns at once) and
declares the op's output buffer; ``wait_tensor`` is a host step that blocks
until the result is in device memory. Between the two the program goes on
launching the kernels that do not depend on the result, so communication
overlaps them. The compiler's steps follow the FX node order, and Dynamo
puts each wait right after its start, so before the first collective is
lowered the rest of the graph is reordered for overlap: each start moves up
to just after its inputs are computed (starts keep their relative order: every
rank issues the same collectives in the same order), but at most
TORCH_NEURONX_COLLECTIVE_PREFETCH collectives ahead of the program's order;
each wait moves down to just before its first user.

A wait never moves past a node that writes memory in place (a ``copy_`` into
a graph input, an in-place collective): the collective may still be reading
its input there. In-place collectives (``all_reduce_``, ``broadcast_``) are
left where they are, with their waits: their users do not depend on the wait
in the graph.

Owner: the collective lowerings and the overlap reordering (``_reorder``).
lower.py imports this module; the Lowerer's host steps do the running
(runtime.py calls the eager op, which resolves the group by name).
"""

from __future__ import annotations

import operator
import os

import torch

from . import metrics
from .lower_core import UnsupportedOpError, meta, register

_fn = torch.ops._c10d_functional

# Out-of-place collectives: they return fresh buffers that only their waits
# read, so their waits may move.
_STARTS = tuple(
    getattr(_fn, name).default
    for name in (
        "all_reduce",
        "all_reduce_coalesced",
        "all_gather_into_tensor",
        "all_gather_into_tensor_coalesced",
        "reduce_scatter_tensor",
        "reduce_scatter_tensor_coalesced",
        "all_to_all_single",
        "broadcast",
    )
)
_IN_PLACE = (
    _fn.all_reduce_.default,
    _fn.all_reduce_coalesced_.default,
    _fn.broadcast_.default,
)
_WAIT = _fn.wait_tensor.default
_EXTRA = tuple(
    op.default
    for op in (getattr(getattr(torch.ops, "_dtensor", None), "shard_dim_alltoall", None),)
    if op is not None
)


def prefetch_depth() -> int:
    """TORCH_NEURONX_COLLECTIVE_PREFETCH: how many collectives ahead of the
    program's order a collective may start (default 2); 0 keeps the
    program's order (no reordering: each wait right after its start)."""
    v = os.environ.get("TORCH_NEURONX_COLLECTIVE_PREFETCH", "").strip()
    try:
        return max(0, int(v)) if v else 2
    except ValueError:
        raise ValueError(
            f"TORCH_NEURONX_COLLECTIVE_PREFETCH={v!r}: expected a whole number of collectives"
        ) from None


def _tensors(m):
    if isinstance(m, torch.Tensor):
        return [m]
    return [t for t in m if isinstance(t, torch.Tensor)] if isinstance(m, (list, tuple)) else []


def _is_start(n: torch.fx.Node) -> bool:
    return n.op == "call_function" and n.target in _STARTS


def _writes(n: torch.fx.Node) -> bool:
    """Whether the node writes memory in place (a mutable schema)."""
    t = n.target
    return n.op == "call_function" and isinstance(t, torch._ops.OpOverload) and t._schema.is_mutable


def _start_of(w: torch.fx.Node):
    """The out-of-place start whose result the wait w waits for, or None
    (getitem of a coalesced start's list included)."""
    src = w.args[0] if w.args else None
    if not isinstance(src, torch.fx.Node):
        return None
    if src.op == "call_function" and src.target is operator.getitem:
        src = src.args[0]
    return src if isinstance(src, torch.fx.Node) and _is_start(src) else None


def _reorder(graph: torch.fx.Graph, cur: torch.fx.Node) -> None:
    """Moves the starts after ``cur`` up and the waits after it down (see the
    module doc). Only nodes after ``cur`` move, and ``cur`` is the node the
    Lowerer is lowering: its walk reads each node's successor after lowering
    it, so it sees the new order."""
    depth = prefetch_depth()
    if depth == 0:
        return
    nodes = list(graph.nodes)
    first = nodes.index(cur) + 1
    rest = nodes[first:]
    if not any(_is_start(n) for n in rest) and not any(n.target is _WAIT for n in rest):
        return
    # Starts up: just after the latest of their inputs, the previous start,
    # cur, and the wait of the start `depth` collectives earlier in program
    # order (each collective is issued at most `depth` collectives ahead of
    # where the program issued it: SimpleFSDP's gathers of a deep model
    # would otherwise all start, and hold every full parameter, at once).
    # The position is tracked through the moves with a list.
    order = nodes[:first]
    anchor = cur
    issued = [cur]  # starts in program order (cur first)
    gates: dict = {}  # wait -> the starts that must stay behind it
    for n in rest:
        if _is_start(n):
            deps = set(n.all_input_nodes)
            if len(issued) >= depth:
                back = issued[-depth]
                wait = next((u for u in back.users if u.target is _WAIT), None)
                gate = wait if wait is not None and wait in order else back
                deps.add(gate)
                gates.setdefault(gate, set()).add(n)
            at = max(
                [order.index(anchor)] + [order.index(d) for d in deps if d in order],
            )
            # Never above a node that writes memory: the start reads inputs
            # as they are when it is queued.
            for i in range(at + 1, len(order)):
                if _writes(order[i]):
                    at = i
            order.insert(at + 1, n)
            anchor = n
            issued.append(n)
        else:
            order.append(n)
    # Waits down: just before the first user, the first in-place writer or
    # the first start held behind this wait, whichever comes first.
    for w in [n for n in order if n.op == "call_function" and n.target is _WAIT]:
        if _start_of(w) is None:
            continue
        i = order.index(w)
        j = i + 1
        users = set(w.users) | gates.get(w, set())
        while j < len(order) and order[j] not in users and not _writes(order[j]):
            if order[j].op == "output":
                break
            j += 1
        if j - 1 > i:
            order.pop(i)
            order.insert(j - 1, w)
    # Apply: re-link every node after cur in the new order.
    prev = cur
    for n in order[first:]:
        if prev.next is not n:
            prev.append(n)
        prev = n


def _lower_collective(L, node, *args, **kwargs):
    for t in _tensors(meta(node)):
        # The start's result is written by the group's thread until the wait:
        # the runtime must hand it on as it is (a declared layout it does not
        # have would be fixed by a copy, reading it too early).
        if not t.is_contiguous():
            raise UnsupportedOpError(
                f"neuron compiler: {node.target} (FX node '{node.name}') has a non-contiguous "
                f"result {tuple(t.shape)} / {tuple(t.stride())}"
            )
    if not getattr(L, "_collectives_reordered", False):
        L._collectives_reordered = True
        _reorder(L.gm.graph, node)
    metrics.add(collectives=1)
    return L.host_step(node)


def _lower_wait(L, node, *args, **kwargs):
    return L.host_step(node)


register(*_STARTS, *_IN_PLACE, *_EXTRA)(_lower_collective)
register(_WAIT)(_lower_wait)
