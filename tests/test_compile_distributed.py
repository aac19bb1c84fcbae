"""Distributed programs compiled with backend="neuron" (issue 21 item 3):
functional collectives inside compiled graphs (asynchronous start / wait
steps, reordered for overlap), DDP over a compiled model, FSDP2 with compiled
blocks, and SimpleFSDP-style data parallelism with tensor parallelism and
activation checkpointing, all compiled, at 2 and 4 ranks against CPU
references and eager runs. The ranks run tests/_compile_dist_workers.py."""

import pytest
import torch

from _dist_harness import check_ranks


@pytest.fixture(autouse=True)
def _cache(tmp_path, monkeypatch):
    # A cold cache directory per test (the ranks share it): each test lowers
    # its graphs, whatever ran before.
    monkeypatch.setenv("TORCH_NEURONX_NEFF_CACHE_DIR", str(tmp_path / "cache"))
    return tmp_path / "cache"


def _run(fn, world, timeout=240, args="", env=None):
    return check_ranks(fn, world, env, timeout=timeout, args=args, module="_compile_dist_workers")


@pytest.mark.parametrize("world", [2, 4])
def test_ddp_compiled(world):
    _run("ddp_compiled", world)


def test_ddp_compiled_autograd_python_reducer():
    """The gradient allreduces inside the compiled backward graph."""
    _run("ddp_python_reducer", 2)


@pytest.mark.parametrize("world", [2, 4])
def test_fsdp2_compiled_blocks(world):
    _run("fsdp2_compiled", world)


@pytest.mark.parametrize("world,transport", [(2, "auto"), (4, "auto"), (2, "gloo")])
def test_functional_collectives_in_graph(world, transport):
    _run("functional_collectives", world, env={"TORCH_NEURONX_DIST_TRANSPORT": transport})


def test_functional_collectives_warm_start():
    """A second job on the same cache directory loads the graph, its
    collective steps included, from the warm cache: same results."""
    _run("functional_collectives", 2)
    _run("functional_collectives", 2, args="warm")


def test_ranks_sharing_a_cold_cache_lower_the_first_graph_once():
    """Both ranks start on one cold cache directory and the first graph holds
    collectives: one rank lowers and compiles it under the warm entry's lock
    (finished before the lock is released: nothing under it waits for the
    other rank), the other loads its entry; no deadlock, same results."""
    import json

    outs = _run("functional_collectives", 2, timeout=180)
    ms = [
        json.loads(line.split(":", 1)[1])
        for rc, text in outs.values()
        for line in text.splitlines()
        if line.startswith("functional collectives graph:")
    ]
    assert len(ms) == 2, outs
    assert sum(m["collectives"] for m in ms) == 6, ms  # lowered once, by one rank
    assert sum(m["warm_graphs"] for m in ms) == 1, ms
    assert sum(m["warm_lock_waits"] for m in ms) <= 1, ms


@pytest.mark.parametrize("world,meshes", [(2, "2x1,1x2"), (4, "2x2")])
def test_simple_fsdp_tensor_parallel_checkpointed(world, meshes):
    _run("simple_fsdp_tp", world, timeout=300, args=meshes)


def _graph(build):
    """An FX graph built by build(graph, x) (collective nodes are not run)."""
    g = torch.fx.Graph()
    x = g.placeholder("x")
    g.output(build(g, x))
    return g


def test_reorder_overlaps_starts_and_waits():
    """Starts move up to just after their inputs (in issue order), waits down
    to just before their first user; nothing crosses an in-place write."""
    from torch_neuronx._compile.lower_collective import _reorder

    fn, aten = torch.ops._c10d_functional, torch.ops.aten
    nodes = {}

    def build(g, x):
        call = g.call_function
        nodes["s1"] = s1 = call(fn.all_reduce.default, (x, "sum", "0"))
        nodes["w1"] = w1 = call(fn.wait_tensor.default, (s1,))
        nodes["mm"] = mm = call(aten.mm.default, (x, x))
        nodes["s2"] = s2 = call(fn.all_gather_into_tensor.default, (x, 2, "0"))
        nodes["w2"] = w2 = call(fn.wait_tensor.default, (s2,))
        nodes["use1"] = u1 = call(aten.add.Tensor, (w1, mm))
        nodes["relu"] = r = call(aten.relu.default, (mm,))
        nodes["copy"] = cp = call(aten.copy_.default, (x, r))
        nodes["use2"] = u2 = call(aten.sum.default, (w2,))
        return (u1, u2, cp)

    g = _graph(build)
    _reorder(g, nodes["s1"])
    name = {n: k for k, n in nodes.items()}
    order = [name.get(n, n.op) for n in g.nodes]
    # s2 follows s1 (its input x is ready); w1 sinks to just before use1; w2
    # stops before the in-place copy_ (the gather may still read x).
    want = ["placeholder", "s1", "s2", "mm", "w1", "use1", "relu", "w2", "copy", "use2", "output"]
    assert order == want, order
    g.lint()


def test_reorder_leaves_in_place_collectives():
    from torch_neuronx._compile.lower_collective import _reorder

    fn, aten = torch.ops._c10d_functional, torch.ops.aten

    def build(g, x):
        call = g.call_function
        s = call(fn.all_reduce_.default, (x, "sum", "0"))
        w = call(fn.wait_tensor.default, (s,))
        mm = call(aten.mm.default, (x, x))
        return (call(aten.add.Tensor, (w, mm)),)

    g = _graph(build)
    before = [n.name for n in g.nodes]
    _reorder(g, next(n for n in g.nodes if n.op == "call_function"))
    assert [n.name for n in g.nodes] == before


@pytest.mark.parametrize("selective", [False, True])
def test_checkpoint_compiled_single_device(selective):
    """torch.utils.checkpoint inside the compiled region on one device (the
    partitioner recomputes the region in the backward), and selective
    checkpointing (a policy saving the matmuls): gradients equal the eager
    run's and the CPU's."""
    import functools

    from torch.utils.checkpoint import (
        CheckpointPolicy,
        checkpoint,
        create_selective_checkpoint_contexts,
    )

    from torch_neuronx._compile.metrics import get_dynamo_metrics, reset_dynamo_metrics

    def policy(ctx, op, *args, **kwargs):
        if op in (torch.ops.aten.mm.default, torch.ops.aten.addmm.default):
            return CheckpointPolicy.MUST_SAVE
        return CheckpointPolicy.PREFER_RECOMPUTE

    torch.manual_seed(0)
    fc1, fc2 = torch.nn.Linear(8, 16), torch.nn.Linear(16, 8)

    def block(x):
        return fc2(torch.nn.functional.gelu(fc1(x))).tanh()

    def f(x):
        kw = {}
        if selective:
            kw["context_fn"] = functools.partial(create_selective_checkpoint_contexts, policy)
        return checkpoint(block, x, use_reentrant=False, **kw).sum()

    x = torch.randn(4, 8)
    f(x).backward()
    cpu_grads = [p.grad.clone() for p in (*fc1.parameters(), *fc2.parameters())]
    fc1.to("neuron"), fc2.to("neuron")

    def grads(fn):
        for p in (*fc1.parameters(), *fc2.parameters()):
            p.grad = None
        fn(x.to("neuron")).backward()
        return [p.grad.cpu() for p in (*fc1.parameters(), *fc2.parameters())]

    torch._dynamo.reset()
    reset_dynamo_metrics()
    eager = grads(f)
    compiled = grads(torch.compile(f, backend="neuron", fullgraph=True))
    m = get_dynamo_metrics()
    assert m["fallback_graphs"] == 0 and m["graphs"] == 2, m  # forward and backward
    for e, c, r in zip(eager, compiled, cpu_grads):
        torch.testing.assert_close(c, e, rtol=1e-6, atol=1e-6)
        torch.testing.assert_close(c, r, rtol=1e-5, atol=1e-5)


def test_reorder_off_keeps_program_order(monkeypatch):
    from torch_neuronx._compile.lower_collective import _reorder

    monkeypatch.setenv("TORCH_NEURONX_COLLECTIVE_PREFETCH", "0")
    fn, aten = torch.ops._c10d_functional, torch.ops.aten

    def build(g, x):
        s = g.call_function(fn.all_reduce.default, (x, "sum", "0"))
        w = g.call_function(fn.wait_tensor.default, (s,))
        mm = g.call_function(aten.mm.default, (x, x))
        return (g.call_function(aten.add.Tensor, (w, mm)),)

    g = _graph(build)
    before = list(g.nodes)
    _reorder(g, before[1])
    assert list(g.nodes) == before


@pytest.mark.parametrize("depth", [1, 2, 8])
def test_reorder_prefetch_depth(monkeypatch, depth):
    """A start moves at most `depth` collectives ahead of the program's order
    (TORCH_NEURONX_COLLECTIVE_PREFETCH): SimpleFSDP's per-layer gathers of a
    deep model do not all start (and hold every full parameter) at once."""
    from torch_neuronx._compile.lower_collective import _reorder

    monkeypatch.setenv("TORCH_NEURONX_COLLECTIVE_PREFETCH", str(depth))
    fn, aten = torch.ops._c10d_functional, torch.ops.aten
    starts, waits = [], []

    def build(g, x):
        h = x
        for _ in range(4):  # a layer: gather its weight, use it
            starts.append(g.call_function(fn.all_gather_into_tensor.default, (x, 2, "0")))
            waits.append(g.call_function(fn.wait_tensor.default, (starts[-1],)))
            h = g.call_function(aten.mm.default, (h, waits[-1]))
        return (h,)

    g = _graph(build)
    _reorder(g, starts[0])
    g.lint()
    pos = {n: i for i, n in enumerate(g.nodes)}
    for k in range(1, 4):
        if k >= depth:  # issued after the wait of the start `depth` earlier
            assert pos[starts[k]] > pos[waits[k - depth]], (k, [n.name for n in g.nodes])
        else:  # issued right behind the previous start
            assert pos[starts[k]] == pos[starts[k - 1]] + 1, (k, [n.name for n in g.nodes])
    nodes = list(g.nodes)
    for k in range(4):  # each wait before its layer's matmul, only starts between
        between = nodes[pos[waits[k]] + 1 : pos[next(iter(waits[k].users))]]
        assert all(n in starts for n in between), (k, [n.name for n in g.nodes])
