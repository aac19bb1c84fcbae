"""Worker functions of tests/test_compile_distributed.py, one process per
rank (run by tests/_dist_harness.py): distributed programs compiled with
backend="neuron" (DDP, FSDP2, SimpleFSDP-style + tensor parallel with
activation checkpointing) against single-process CPU references and their
eager neuron runs."""

import json
import os
import sys
import traceback

import torch
import torch.distributed as dist

import torch_neuronx  # noqa: F401

STEPS = 3


def rank_world():
    return int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])


def main():
    fn = globals()[os.environ["DIST_FN"]]
    try:
        fn()
    except BaseException:
        traceback.print_exc()
        sys.stdout.flush()
        os._exit(1)
    sys.stdout.flush()
    os._exit(0)


def _setup():
    rank, world = rank_world()
    dist.init_process_group("neuron")
    dev = torch.device("neuron", rank)
    torch.neuron.set_device(dev)
    return rank, world, dev


class Block(torch.nn.Module):
    """Linear -> GELU -> Linear, weights from a fixed seed."""

    def __init__(self, seed=0):
        super().__init__()
        torch.manual_seed(seed)
        self.fc1, self.fc2 = torch.nn.Linear(8, 16), torch.nn.Linear(16, 8)

    def forward(self, x):
        return self.fc2(torch.nn.functional.gelu(self.fc1(x)))


class Net(torch.nn.Module):
    """Two blocks; ``ac`` runs each under torch.utils.checkpoint (recomputed
    in the backward, inside the compiled region)."""

    def __init__(self, seed=0, ac=False):
        super().__init__()
        self.blocks = torch.nn.ModuleList([Block(seed), Block(seed + 1)])
        self.ac = ac

    def forward(self, x):
        for b in self.blocks:
            if self.ac:
                x = torch.utils.checkpoint.checkpoint(b, x, use_reentrant=False)
            else:
                x = b(x)
        return x


def _model(seed=0, ac=False):
    return Net(seed, ac)


def _data(world, per_rank=4):
    g = torch.Generator().manual_seed(123)
    return [
        (
            torch.randn(world * per_rank, 8, generator=g),
            torch.randn(world * per_rank, 8, generator=g),
        )
        for _ in range(STEPS)
    ]


def _reference(data, lr=0.1):
    """Single-process CPU training on the full batches: losses, final params."""
    m = _model()
    opt = torch.optim.SGD(m.parameters(), lr=lr)
    losses = []
    for x, y in data:
        opt.zero_grad()
        loss = torch.nn.functional.mse_loss(m(x), y)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses, {k: v.detach() for k, v in m.state_dict().items()}


def _global_loss(local_loss, group=None):
    t = local_loss.detach().clone()
    dist.all_reduce(t, op=dist.ReduceOp.AVG, group=group)
    return t.item()


def _no_fallback():
    from torch_neuronx._compile.metrics import get_dynamo_metrics

    m = get_dynamo_metrics()
    assert m["fallback_graphs"] == 0, m
    return m


def _train(step_fn, data, stance_after=1):
    """Runs step_fn over the data; steps after the first must not recompile."""
    losses = []
    for i, (x, y) in enumerate(data):
        if i == stance_after:
            torch.compiler.set_stance("fail_on_recompile")
        losses.append(step_fn(x, y))
    torch.compiler.set_stance("default")
    return losses


def _check(losses, params, ref_losses, ref_params, tol=1e-5):
    """Against a CPU reference (tol 1e-5: another reduction order) or the
    eager neuron run (tol 1e-6: the collectives are bit-for-bit, the
    compiled GELU and SGD kernels differ from eager by an ulp at most)."""
    torch.testing.assert_close(torch.tensor(losses), torch.tensor(ref_losses), rtol=tol, atol=tol)
    for k, v in params.items():
        torch.testing.assert_close(v, ref_params[k], rtol=tol, atol=tol)


def ddp_compiled():
    """DDP over a compiled model: DDPOptimizer splits the graph at bucket
    boundaries; the reducer's allreduces overlap the backward graphs."""
    from torch.nn.parallel import DistributedDataParallel as DDP

    rank, world, dev = _setup()
    data = _data(world)
    ref_losses, ref_params = _reference(data)
    per = data[0][0].shape[0] // world

    # DDPOptimizer sizes its first bucket by this constant (1 MiB) and
    # requires it <= the bucket cap: lowered so a tiny model splits.
    dist._DEFAULT_FIRST_BUCKET_BYTES = 500

    def run(compiled):
        torch._dynamo.reset()
        m = DDP(_model().to(dev), bucket_cap_mb=0.0005)  # several buckets
        fwd = torch.compile(m, backend="neuron") if compiled else m
        opt = torch.optim.SGD(m.parameters(), lr=0.1)

        def step(x, y):
            opt.zero_grad()
            xs, ys = (
                x[rank * per : (rank + 1) * per].to(dev),
                y[rank * per : (rank + 1) * per].to(dev),
            )
            loss = torch.nn.functional.mse_loss(fwd(xs), ys)
            loss.backward()
            opt.step()
            return _global_loss(loss)

        losses = _train(step, data)
        return losses, {k: v.cpu() for k, v in m.module.state_dict().items()}

    eager = run(False)
    compiled = run(True)
    m = _no_fallback()
    assert m["graphs"] >= 2, m  # the DDP split: one graph per bucket, or more
    _check(*compiled, ref_losses, ref_params)
    _check(*compiled, eager[0], eager[1], tol=1e-6)
    print("rank", rank, "ddp ok", m)
    dist.destroy_process_group()


def fsdp2_compiled():
    """FSDP2 (fully_shard per block and at the root) with each block compiled:
    FSDP's all-gathers and reduce-scatters run in its hooks around the graphs."""
    from torch.distributed.fsdp import fully_shard

    rank, world, dev = _setup()
    data = _data(world)
    ref_losses, ref_params = _reference(data)
    per = data[0][0].shape[0] // world

    def run(compiled):
        torch._dynamo.reset()
        m = _model().to(dev)
        for blk in m.blocks:
            fully_shard(blk)
            if compiled:
                blk.compile(backend="neuron")
        fully_shard(m)
        opt = torch.optim.SGD(m.parameters(), lr=0.1)

        def step(x, y):
            opt.zero_grad()
            xs, ys = (
                x[rank * per : (rank + 1) * per].to(dev),
                y[rank * per : (rank + 1) * per].to(dev),
            )
            loss = torch.nn.functional.mse_loss(m(xs), ys)
            loss.backward()
            opt.step()
            return _global_loss(loss)

        losses = _train(step, data)
        return losses, {k: v.full_tensor().cpu() for k, v in m.state_dict().items()}

    eager = run(False)
    compiled = run(True)
    m = _no_fallback()
    _check(*compiled, ref_losses, ref_params)
    _check(*compiled, eager[0], eager[1], tol=1e-6)
    print("rank", rank, "fsdp2 ok", m)
    dist.destroy_process_group()


class _ReplicateCompute(torch.nn.Module):
    """SimpleFSDP's parametrization: a parameter is stored as a DTensor
    sharded over the data-parallel mesh dimension (Shard(0) there, its tensor
    parallel placement on the other); reading it all-gathers the dp dimension
    (a functional collective inside the compiled graph) and marks its
    gradient Partial(avg) over dp, which the backward turns into a
    reduce-scatter. With tensor parallelism the result is a DTensor on the
    tp mesh, as parallelize_module's layers expect."""

    def __init__(self, tp_mesh):
        super().__init__()
        self.tp_mesh = tp_mesh

    def forward(self, p):
        from torch.distributed.tensor import DTensor, Partial, Replicate

        tp = list(p.placements[1:])
        local = p.redistribute(p.device_mesh, [Replicate(), *tp]).to_local(
            grad_placements=[Partial("avg"), *tp]
        )
        if self.tp_mesh is None:
            return local
        return DTensor.from_local(local, self.tp_mesh, tp, run_check=False)


def _simple_fsdp(module, mesh, tp_mesh):
    """Shards every parameter of `module`'s leaf modules over mesh["dp"]:
    each module's class gets a property per parameter name that runs the
    parametrization on the stored shard (Dynamo traces properties; the
    stored DTensor stays the optimizer's parameter)."""
    from torch.distributed.tensor import DTensor, Replicate, Shard, distribute_tensor

    par = _ReplicateCompute(tp_mesh)
    for mod in list(module.modules()):
        names = [n for n, _ in mod.named_parameters(recurse=False)]
        if not names:
            continue
        for n in names:
            p = mod._parameters[n]
            full = p.full_tensor() if isinstance(p, DTensor) else p.data
            tp = list(p.placements) if isinstance(p, DTensor) else [Replicate()]
            mod._parameters[n] = torch.nn.Parameter(
                distribute_tensor(full.detach(), mesh, [Shard(0), *tp])
            )
        props = {n: property(lambda self, n=n: par(self._parameters[n])) for n in names}
        mod.__class__ = type(f"SimpleFSDP{type(mod).__name__}", (type(mod),), props)


def simple_fsdp_tp():
    """SimpleFSDP-style data parallelism (parameters all-gathered inside the
    compiled region, gradients reduce-scattered by its backward) with tensor
    parallelism (ColwiseParallel / RowwiseParallel) and activation
    checkpointing, all compiled. Meshes (dp, tp) per DIST_ARGS, e.g. "2x1,1x2"."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor.parallel import (
        ColwiseParallel,
        RowwiseParallel,
        parallelize_module,
    )

    rank, world, dev = _setup()
    shapes = [tuple(int(v) for v in s.split("x")) for s in os.environ["DIST_ARGS"].split(",")]
    for dp, tp in shapes:
        assert dp * tp == world
        mesh = init_device_mesh("neuron", (dp, tp), mesh_dim_names=("dp", "tp"))
        dp_rank = mesh["dp"].get_local_rank()
        data = _data(dp)
        ref_losses, ref_params = _reference(data)
        per = data[0][0].shape[0] // dp

        def run(compiled):
            torch._dynamo.reset()
            m = _model(ac=True).to(dev)
            tp_mesh = None
            if tp > 1:
                tp_mesh = mesh["tp"]
                for b in m.blocks:
                    parallelize_module(
                        b, tp_mesh, {"fc1": ColwiseParallel(), "fc2": RowwiseParallel()}
                    )
            _simple_fsdp(m, mesh, tp_mesh)
            fwd = torch.compile(m, backend="neuron", fullgraph=True) if compiled else m
            opt = torch.optim.SGD(m.parameters(), lr=0.1)

            def step(x, y):
                opt.zero_grad()
                sl = slice(dp_rank * per, (dp_rank + 1) * per)
                loss = torch.nn.functional.mse_loss(fwd(x[sl].to(dev)), y[sl].to(dev))
                loss.backward()
                opt.step()
                return _global_loss(loss)

            losses = _train(step, data)
            return losses, {k: v.full_tensor().cpu() for k, v in m.named_parameters()}

        eager = run(False)
        compiled = run(True)
        m = _no_fallback()
        _check(*compiled, ref_losses, ref_params)
        _check(*compiled, eager[0], eager[1], tol=1e-6)
        print("rank", rank, f"simple_fsdp dp={dp} tp={tp} ok", m)
    dist.destroy_process_group()


def functional_collectives():
    """Each functional collective inside one compiled graph, against the same
    function run eagerly (bit-for-bit: the same collective engine, the same
    reduction order), with independent work between start and wait."""
    import torch.distributed._functional_collectives as funcol
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import DTensor, Replicate, Shard
    from torch_neuronx._compile.metrics import get_dynamo_metrics

    rank, world, dev = _setup()
    g = dist.group.WORLD

    def f(x, w):
        y = x * 2 + 1
        a = funcol.all_reduce(y, "sum", g)
        z = torch.relu(w @ w.t())  # independent of the collectives
        b = funcol.all_gather_single(x, 0, g)
        c = funcol.reduce_scatter_single(b * 3, "avg", 0, g)
        d = funcol.all_to_all_single(x.reshape(-1), None, None, g)
        e = funcol.all_reduce_coalesced([x, y], "max", g)
        f_ = funcol.broadcast(y, 1, g)
        return a + 1, z, b.sum(0), c, d, e[0] - e[1], f_

    x = torch.arange(8.0 * world, device=dev).reshape(world * 2, 4) * (rank + 1) - 3
    w = torch.randn(4, 4, generator=torch.Generator().manual_seed(0)).to(dev)
    eager = f(x, w)
    cf = torch.compile(f, backend="neuron", fullgraph=True)
    for i in range(3):
        if i == 1:
            torch.compiler.set_stance("fail_on_recompile")
        out = cf(x + i, w)
        ref = f(x + i, w)
        for e, o in zip(ref, out):
            assert torch.equal(e.cpu(), o.cpu()), (e, o)
    torch.compiler.set_stance("default")
    for e, o in zip(eager, cf(x, w)):
        assert torch.equal(e.cpu(), o.cpu()), (e, o)
    m = _no_fallback()
    if os.environ.get("DIST_ARGS") == "warm":
        # A second process on the same cache directory: the graph (and its
        # collectives' host steps) comes from the warm entry, nothing lowered.
        assert m["warm_graphs"] == 1 and m["lowerings"] == 0, m
    else:
        # Ranks share a cold cache directory: one of them lowers the graph
        # (one lowering per collective, not one per call) while holding the
        # warm entry's lock, the others wait and load its entry.
        lowered = m["collectives"] == 6 and m["warm_graphs"] == 0
        loaded = m["collectives"] == 0 and m["warm_graphs"] == 1 and m["lowerings"] == 0
        assert lowered or loaded, m
    print("functional collectives graph:", json.dumps(m), flush=True)

    # DTensor redistribution inside a compiled graph: Shard(0) -> Shard(1)
    # (all-to-all), -> Replicate (all-gather), Partial -> Replicate.
    mesh = init_device_mesh("neuron", (world,))

    def redist(t):
        s1 = t.redistribute(mesh, [Shard(1)])
        r = s1.redistribute(mesh, [Replicate()])
        return s1.to_local() * 2, r.to_local() + 1

    full = torch.arange(world * 2 * world * 3.0).reshape(world * 2, world * 3)
    dt = DTensor.from_local(full[rank * 2 : (rank + 1) * 2].to(dev), mesh, [Shard(0)])
    want = redist(dt)
    got = torch.compile(redist, backend="neuron", fullgraph=True)(dt)
    for e, o in zip(want, got):
        assert torch.equal(e.cpu(), o.cpu()), (e, o)
    assert torch.equal(got[1].cpu(), full + 1)
    print("rank", rank, "functional collectives ok", get_dynamo_metrics())
    dist.destroy_process_group()


def ddp_python_reducer():
    """DDP with compiled autograd and DDP's Python reducer
    (optimize_ddp="python_reducer"): the gradient allreduces are functional
    collectives inside the compiled backward graph."""
    from torch.nn.parallel import DistributedDataParallel as DDP

    rank, world, dev = _setup()
    data = _data(world)
    ref_losses, ref_params = _reference(data)
    per = data[0][0].shape[0] // world
    torch._dynamo.config.optimize_ddp = "python_reducer"
    m = DDP(_model().to(dev))
    fwd = torch.compile(m, backend="neuron")
    opt = torch.optim.SGD(m.parameters(), lr=0.1)

    def step(x, y):
        opt.zero_grad()
        xs, ys = x[rank * per : (rank + 1) * per].to(dev), y[rank * per : (rank + 1) * per].to(dev)
        loss = torch.nn.functional.mse_loss(fwd(xs), ys)
        with torch._dynamo.compiled_autograd._enable(torch.compile(backend="neuron")):
            loss.backward()
        opt.step()
        return _global_loss(loss)

    losses = _train(step, data)
    params = {k: v.cpu() for k, v in m.module.state_dict().items()}
    m_ = _no_fallback()
    # The backward's only host steps are the allreduces (start and wait):
    # compiled autograd's new_empty_strided gradient buffers lower too.
    assert m_["collectives"] > 0 and m_["host_steps"] == 2 * m_["collectives"], m_
    _check(losses, params, ref_losses, ref_params)
    print("rank", rank, "ddp python reducer ok", m_)
    dist.destroy_process_group()


def bench_simple_fsdp():
    """Used by bench/bench_compile_dist.py (not a test): median step time of
    SimpleFSDP (+ tensor parallel) training, eager vs compiled with and
    without the collective reordering, the modes interleaved step by step so
    the machine's load hits them alike. DIST_ARGS: "DPxTP"."""
    import json
    import time

    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor.parallel import (
        ColwiseParallel,
        RowwiseParallel,
        parallelize_module,
    )

    import torch_neuronx._compile.lower_collective as lc

    rank, world, dev = _setup()
    dp, tp = (int(v) for v in os.environ["DIST_ARGS"].split("x"))
    mesh = init_device_mesh("neuron", (dp, tp), mesh_dim_names=("dp", "tp"))
    width, layers = int(os.environ.get("BENCH_WIDTH", "256")), 4
    x = torch.randn(32, width).to(dev)
    reorder = lc._reorder
    steps, times = {}, {}
    for mode in ("eager", "compiled, program order", "compiled, reordered"):
        lc._reorder = reorder if mode.endswith("reordered") else (lambda g, c: None)
        torch.manual_seed(0)
        m = torch.nn.Sequential(
            *(
                torch.nn.Sequential(
                    torch.nn.Linear(width, 2 * width),
                    torch.nn.GELU(),
                    torch.nn.Linear(2 * width, width),
                )
                for _ in range(layers)
            )
        ).to(dev)
        if tp > 1:
            for b in m:
                parallelize_module(b, mesh["tp"], {"0": ColwiseParallel(), "2": RowwiseParallel()})
        _simple_fsdp(m, mesh, mesh["tp"] if tp > 1 else None)
        fwd = m if mode == "eager" else torch.compile(m, backend="neuron", fullgraph=True)
        opt = torch.optim.SGD(m.parameters(), lr=0.01)

        def step(fwd=fwd, opt=opt):
            opt.zero_grad()
            fwd(x).square().mean().backward()
            opt.step()

        step()
        step()
        steps[mode], times[mode] = step, []
    lc._reorder = reorder
    torch.neuron.synchronize()
    dist.barrier()
    for _ in range(int(os.environ.get("BENCH_STEPS", "12"))):
        for mode, step in steps.items():
            t = time.perf_counter()
            step()
            torch.neuron.synchronize()
            times[mode].append(time.perf_counter() - t)
    med = {k: sorted(v)[len(v) // 2] * 1e3 for k, v in times.items()}
    print("BENCH", json.dumps({"rank": rank, "mesh": f"{dp}x{tp}", "ms": med}))
    dist.destroy_process_group()
