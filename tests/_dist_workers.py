"""Worker functions run by tests/_dist_harness.py, one process per rank.
Each initialises one process group and runs many checks with it (process
start-up dominates the cost on this machine)."""

import datetime
import os
import sys
import traceback

import torch
import torch.distributed as dist

import torch_neuronx  # noqa: F401


def rank_world():
    return int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])


def _exit(code):
    # os._exit skips atexit; libtrn needs none (its stats page is a memfd
    # the kernel frees with the process).
    sys.stdout.flush()
    os._exit(code)


def main():
    fn = globals()[os.environ["DIST_FN"]]
    try:
        fn()
    except BaseException:
        traceback.print_exc()
        _exit(1)
    _exit(0)


def smoke():
    rank, world = rank_world()
    init = os.environ.get("DIST_INIT")
    if init:
        dist.init_process_group("neuron", init_method=init, rank=rank, world_size=world)
    else:
        dist.init_process_group("neuron")
    t = torch.full((5,), float(rank + 1), device="neuron")
    dist.all_reduce(t)
    assert t.cpu().tolist() == [world * (world + 1) / 2] * 5, t
    print("transport", dist.group.WORLD._get_backend(torch.device("neuron")).transport)
    dist.destroy_process_group()


def _expect_error(fn, *words):
    try:
        fn()
    except Exception as e:  # noqa: BLE001
        msg = str(e)
        assert all(w in msg for w in words), f"error {msg!r} lacks {words}"
        return
    raise AssertionError(f"no error raised (expected one mentioning {words})")


def _gloo():
    return os.environ.get("TORCH_NEURONX_DIST_TRANSPORT") == "gloo"


def collectives():
    """Every collective, dtype and ReduceOp against values computed here."""
    import torch.distributed._functional_collectives as funcol

    rank, world = rank_world()
    dist.init_process_group(
        "neuron",
        init_method=os.environ.get("DIST_INIT") or None,
        timeout=datetime.timedelta(seconds=60),
    )
    dev = torch.device("neuron", rank % torch.neuron.device_count())
    torch.neuron.set_device(dev)

    def val(r, n=6, dtype=torch.float32):
        x = torch.arange(n, dtype=torch.float64) % 5 + r + 1
        return x.to(dtype)

    # Every dtype, SUM, against the sum of every rank's value.
    for dtype in [
        torch.float32,
        torch.float64,
        torch.float16,
        torch.bfloat16,
        torch.int8,
        torch.uint8,
        torch.int16,
        torch.int32,
        torch.int64,
        torch.complex64,
    ]:
        if dtype == torch.int16 and _gloo():
            _expect_error(lambda: dist.all_reduce(val(0, dtype=dtype).to(dev)), "Gloo")
            t = val(rank, dtype=dtype).to(dev)
            dist.broadcast(t, 0)  # data movement still works
            assert torch.equal(t.cpu(), val(0, dtype=dtype))
            continue
        t = val(rank, dtype=dtype).to(dev)
        dist.all_reduce(t)
        want = sum(
            val(r, dtype=dtype).to(torch.float64 if not dtype.is_complex else dtype)
            for r in range(world)
        ).to(dtype)
        assert torch.equal(t.cpu(), want), (dtype, t.cpu(), want)
    b = torch.tensor([rank % 2 == 0, True, False], device=dev)
    dist.all_reduce(b, op=dist.ReduceOp.PRODUCT)
    assert b.cpu().tolist() == [world == 1, True, False]

    # Every ReduceOp.
    f = val(rank).to(dev)
    ref = torch.stack([val(r) for r in range(world)])
    for op, want in [
        (dist.ReduceOp.SUM, ref.sum(0)),
        (dist.ReduceOp.PRODUCT, ref.prod(0)),
        (dist.ReduceOp.MIN, ref.min(0).values),
        (dist.ReduceOp.MAX, ref.max(0).values),
        (dist.ReduceOp.AVG, ref.sum(0) / world),
        (dist._make_nccl_premul_sum(0.5), ref.sum(0) * 0.5),
    ]:
        t = f.clone()
        dist.all_reduce(t, op=op)
        torch.testing.assert_close(t.cpu(), want)
    i = torch.tensor([rank + 1, 6, 12], dtype=torch.int32, device=dev)
    iref = torch.stack([torch.tensor([r + 1, 6, 12], dtype=torch.int32) for r in range(world)])
    for op, fold in [
        (dist.ReduceOp.BAND, lambda a, b: a & b),
        (dist.ReduceOp.BOR, lambda a, b: a | b),
        (dist.ReduceOp.BXOR, lambda a, b: a ^ b),
    ]:
        t = i.clone()
        dist.all_reduce(t, op=op)
        want = iref[0]
        for r in range(1, world):
            want = fold(want, iref[r])
        assert torch.equal(t.cpu(), want), (op, t, want)
    _expect_error(lambda: dist.all_reduce(f.clone(), op=dist.ReduceOp.BAND), "BAND")
    _expect_error(lambda: dist.all_reduce(i.clone(), op=dist.ReduceOp.AVG), "AVG")

    # Large (several slots) allreduce, async with future.
    big = torch.full((3 << 20,), float(rank), device=dev)
    work = dist.all_reduce(big, async_op=True)
    fut = work.get_future()
    work.wait()
    assert work.is_completed()
    res = fut.wait()[0]
    assert res.device == dev and float(res[-1].cpu()) == sum(range(world))
    # More large messages (the single-copy path where the host allows it):
    # reduce-scatter, in-place all-gather, uneven all-to-all, broadcast.
    n = 1 << 16
    inp = (torch.arange(world * n, dtype=torch.float32) % 1000) * (rank + 1)
    out = torch.empty(n, device=dev)
    dist.reduce_scatter_tensor(out, inp.to(dev))
    tri = world * (world + 1) / 2
    assert torch.equal(out.cpu(), (torch.arange(rank * n, (rank + 1) * n) % 1000).float() * tri)
    ag = torch.zeros(world * n, device=dev)
    ag[rank * n : (rank + 1) * n] = float(rank + 1)
    dist.all_gather_into_tensor(ag, ag[rank * n : (rank + 1) * n])
    assert torch.equal(ag.cpu(), torch.arange(world).repeat_interleave(n).float() + 1)
    rows = [(rank + j) * 1000 + 1 for j in range(world)]
    x = torch.cat([torch.full((rows[j], 8), float(rank * 10 + j)) for j in range(world)]).to(dev)
    out_rows = [(r + rank) * 1000 + 1 for r in range(world)]
    y = torch.empty(sum(out_rows), 8, device=dev)
    dist.all_to_all_single(y, x, out_rows, rows)
    assert torch.equal(
        y.cpu(),
        torch.cat([torch.full((out_rows[r], 8), float(r * 10 + rank)) for r in range(world)]),
    )
    bc = torch.full((n,), float(rank), device=dev)
    dist.broadcast(bc, src=world - 1)
    assert torch.equal(bc.cpu(), torch.full((n,), float(world - 1)))

    # Coalesced.
    ts = [val(rank).to(dev), val(rank, 3).to(dev)]
    dist.all_reduce_coalesced(ts)
    torch.testing.assert_close(ts[1].cpu(), sum(val(r, 3) for r in range(world)))

    # Broadcast, reduce.
    t = val(rank).to(dev)
    dist.broadcast(t, src=world - 1)
    assert torch.equal(t.cpu(), val(world - 1))
    t = val(rank).to(dev)
    dist.reduce(t, dst=1, op=dist.ReduceOp.MAX)
    if rank == 1:
        assert torch.equal(t.cpu(), ref.max(0).values)

    # All-gather: list, into tensor, coalesced; non-contiguous input.
    src = torch.arange(12.0).reshape(3, 4)[:, 1:3] + rank  # strided
    outs = [torch.empty(3, 2, device=dev) for _ in range(world)]
    dist.all_gather(outs, src.to(dev).t().t())
    nc = src.to(dev)[:, :]  # contiguous copy
    outs2 = [torch.empty(2, 3, device=dev) for _ in range(world)]
    dist.all_gather(outs2, nc.t())  # non-contiguous input
    for r in range(world):
        want = torch.arange(12.0).reshape(3, 4)[:, 1:3] + r
        assert torch.equal(outs[r].cpu(), want) and torch.equal(outs2[r].cpu(), want.t())
    flat = torch.empty(world * 6, device=dev)
    dist.all_gather_into_tensor(flat, val(rank).to(dev))
    assert torch.equal(flat.cpu(), torch.cat([val(r) for r in range(world)]))
    bad_outs = [torch.empty(2, 3, device=dev).t() for _ in range(world)]
    _expect_error(lambda: dist.all_gather(bad_outs, src.to(dev)), "contiguous")
    ins = [val(rank, 2).to(dev), val(rank, 5).to(dev)]
    outl = [
        [torch.empty(2, device=dev) for _ in range(world)],
        [torch.empty(5, device=dev) for _ in range(world)],
    ]
    dist.all_gather_coalesced(outl, ins)
    assert torch.equal(outl[1][world - 1].cpu(), val(world - 1, 5))

    # Reduce-scatter: list, tensor, coalesced through funcol.
    out = torch.empty(6, device=dev)
    dist.reduce_scatter(out, [val(rank + j).to(dev) for j in range(world)])
    torch.testing.assert_close(out.cpu(), sum(val(r + rank) for r in range(world)))
    inp = torch.cat([val(rank + j) for j in range(world)]).to(dev)
    out = torch.empty(6, device=dev)
    dist.reduce_scatter_tensor(out, inp, op=dist.ReduceOp.AVG)
    torch.testing.assert_close(out.cpu(), sum(val(r + rank) for r in range(world)) / world)

    # All-to-all: list and single with uneven splits.
    ins = [torch.full((j + 1,), float(rank * 10 + j), device=dev) for j in range(world)]
    outs = [torch.empty(rank + 1, device=dev) for _ in range(world)]
    dist.all_to_all(outs, ins)
    for r in range(world):
        assert torch.equal(outs[r].cpu(), torch.full((rank + 1,), float(r * 10 + rank)))
    in_splits = [(rank + j) % 3 for j in range(world)]
    out_splits = [(r + rank) % 3 for r in range(world)]
    x = torch.cat([torch.full(((rank + j) % 3, 2), float(rank * 10 + j)) for j in range(world)]).to(
        dev
    )
    y = torch.empty(sum(out_splits), 2, device=dev)
    dist.all_to_all_single(y, x, out_splits, in_splits)
    want = torch.cat([torch.full(((r + rank) % 3, 2), float(r * 10 + rank)) for r in range(world)])
    assert torch.equal(y.cpu(), want)

    # Gather, scatter.
    g = [torch.empty(6, device=dev) for _ in range(world)] if rank == 0 else None
    dist.gather(val(rank).to(dev), g, dst=0)
    if rank == 0:
        assert all(torch.equal(g[r].cpu(), val(r)) for r in range(world))
    s = torch.empty(6, device=dev)
    dist.scatter(s, [val(10 + r).to(dev) for r in range(world)] if rank == 1 else None, src=1)
    assert torch.equal(s.cpu(), val(10 + rank))
    dist.barrier()

    # Send / recv ring, recv from any source.
    nxt, prv = (rank + 1) % world, (rank - 1) % world
    sreq = dist.isend(torch.full((1 << 19,), float(rank), device=dev), nxt)
    r = torch.empty(1 << 19, device=dev)
    dist.recv(r, prv)
    sreq.wait()
    assert float(r[7].cpu()) == prv
    if rank == 0:
        got = set()
        for _ in range(world - 1):
            t = torch.empty(1, device=dev)
            src_rank = dist.recv(t)
            got.add((src_rank, float(t.cpu())))
        assert got == {(q, float(q)) for q in range(1, world)}, got
    else:
        dist.send(torch.tensor([float(rank)], device=dev), 0)

    # Functional collectives on neuron tensors.
    group = dist.group.WORLD
    t = val(rank).to(dev)
    torch.testing.assert_close(funcol.all_reduce(t, "sum", group).cpu(), ref.sum(0))
    ag = funcol.all_gather_tensor(t, 0, group)
    assert torch.equal(ag.cpu(), torch.cat([val(r) for r in range(world)]))
    rs = funcol.reduce_scatter_tensor(torch.cat([t] * world), "sum", 0, group)
    torch.testing.assert_close(rs.cpu(), ref.sum(0))
    a2a = funcol.all_to_all_single(torch.arange(world * 2.0, device=dev) + rank, None, None, group)
    assert a2a.shape == (world * 2,)

    # Zero-size tensors.
    z = torch.empty(0, device=dev)
    dist.all_reduce(z)
    zo = [torch.empty(0, device=dev) for _ in range(world)]
    dist.all_gather(zo, z)
    dist.broadcast(z, 0)

    # Mismatched shapes across ranks: the same clear error everywhere, and
    # the group still works afterwards. (Gloo reports mismatches itself, by
    # failing the connection: checked on the shared-memory transport only.)
    if _gloo():
        _expect_error(lambda: dist.all_reduce(torch.ones(2)), "cpu")
        dist.destroy_process_group()
        return
    _expect_error(lambda: dist.all_reduce(torch.ones(4 + rank, device=dev)), "differ")
    m = [torch.empty(2 + rank, device=dev) for _ in range(world)]
    _expect_error(lambda: dist.all_gather(m, torch.ones(2 + rank, device=dev)), "differ")
    t = torch.ones(3, device=dev)
    dist.all_reduce(t)
    assert float(t[0].cpu()) == world

    # CPU tensors are refused with a pointer to the mixed backend string.
    _expect_error(lambda: dist.all_reduce(torch.ones(2)), "cpu")
    dist.destroy_process_group()


def _next_master_port():
    os.environ["MASTER_PORT"] = str(int(os.environ["MASTER_PORT"]) + 1)


def mixed_and_reinit():
    """'cpu:gloo,neuron:neuron', default backend, device mesh, re-init."""
    rank, world = rank_world()
    dist.init_process_group("cpu:gloo,neuron:neuron")
    c = torch.ones(2) * rank
    n = torch.ones(2, device="neuron") * rank
    dist.all_reduce(c)
    dist.all_reduce(n)
    assert c.tolist() == n.cpu().tolist() == [sum(range(world))] * 2
    objs = [None] * world
    dist.all_gather_object(objs, {"rank": rank})
    assert [o["rank"] for o in objs] == list(range(world))
    dist.destroy_process_group()
    # Backend inferred from the accelerator; then a device mesh. Each re-init
    # rendezvous on a new port: on the old one a fast rank can reach rank 0's
    # previous TCPStore before rank 0 has torn it down, read that group's
    # stale keys and lose the connection when it closes (PyTorch's own
    # re-init race, whatever the backend).
    _next_master_port()
    dist.init_process_group()
    t = torch.ones(1, device="neuron")
    dist.all_reduce(t)
    assert float(t.cpu()) == world
    dist.destroy_process_group()
    _next_master_port()
    from torch.distributed.device_mesh import init_device_mesh

    mesh = init_device_mesh("neuron", (world,))
    t = torch.ones(1, device="neuron")
    dist.all_reduce(t, group=mesh.get_group())
    assert float(t.cpu()) == world
    dist.destroy_process_group()


def stall():
    """Rank 1 never joins; rank 0 must fail within the timeout."""
    import time

    rank, world = rank_world()
    dist.init_process_group("neuron", timeout=datetime.timedelta(seconds=3))
    t = torch.ones(4, device="neuron")
    dist.all_reduce(t)
    if rank == 1:
        time.sleep(5)
        return
    start = time.monotonic()
    _expect_error(lambda: dist.all_reduce(t), "allreduce", "timed out", "1")
    assert time.monotonic() - start < 6
    print("stall detected in", time.monotonic() - start)


def killed():
    """Rank 1 dies mid-run; rank 0 fails fast naming it, then re-inits alone."""
    import time

    rank, world = rank_world()
    dist.init_process_group("neuron", timeout=datetime.timedelta(seconds=120))
    t = torch.ones(4, device="neuron")
    dist.all_reduce(t)
    if rank == 1:
        os._exit(3)
    start = time.monotonic()
    _expect_error(lambda: dist.all_reduce(t), "rank 1", "exited")
    assert time.monotonic() - start < 30
    dist.destroy_process_group()
    print("death detected in", time.monotonic() - start)


def _mlp(seed=0, unused=False):
    torch.manual_seed(seed)
    m = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4))
    if unused:

        class WithUnused(torch.nn.Module):
            def __init__(self, body):
                super().__init__()
                self.body, self.extra = body, torch.nn.Linear(4, 4)  # extra: never used

            def forward(self, x):
                return self.body(x)

        return WithUnused(m)
    return m


def _data(world, steps=3, per_rank=4):
    g = torch.Generator().manual_seed(123)
    return [
        (
            torch.randn(world * per_rank, 8, generator=g),
            torch.randn(world * per_rank, 4, generator=g),
        )
        for _ in range(steps)
    ]


def _reference(data, lr=0.1):
    """Single-process CPU training on the full batches: losses, final params."""
    m = _mlp()
    opt = torch.optim.SGD(m.parameters(), lr=lr)
    losses = []
    for x, y in data:
        opt.zero_grad()
        loss = torch.nn.functional.mse_loss(m(x), y)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses, {k: v.detach() for k, v in m.state_dict().items()}


class _MlpBlock(torch.nn.Module):
    """LayerNorm -> Linear -> ReLU -> Linear (then dropout p_drop): the
    transformer-style block of the TP/SP tests, weights from seed 3."""

    def __init__(self, p_drop=0.0):
        super().__init__()
        torch.manual_seed(3)
        self.p_drop = p_drop
        self.norm = torch.nn.LayerNorm(8)
        self.fc1, self.fc2 = torch.nn.Linear(8, 16), torch.nn.Linear(16, 8)

    def forward(self, x):
        y = self.fc2(torch.relu(self.fc1(self.norm(x))))
        return torch.nn.functional.dropout(y, self.p_drop) if self.p_drop else y


def _global_loss(local_loss):
    t = local_loss.detach().clone()
    dist.all_reduce(t, op=dist.ReduceOp.AVG)
    return t.item()


def parallel():
    """DDP (buckets, no_sync, unused params, bf16 hook), FSDP2 and DTensor /
    tensor parallelism against single-process CPU references."""
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
    from torch.nn.parallel import DistributedDataParallel as DDP

    rank, world = rank_world()
    dist.init_process_group("neuron")
    dev = torch.device("neuron", rank)
    torch.neuron.set_device(dev)
    data = _data(world)
    ref_losses, ref_params = _reference(data)
    per = data[0][0].shape[0] // world
    shard = lambda t: t[rank * per : (rank + 1) * per].to(dev)  # noqa: E731

    def run_ddp(tol, **kw):
        hook = kw.pop("hook", None)
        unused = kw.get("find_unused_parameters", False)
        m = DDP(_mlp(unused=unused).to(dev), bucket_cap_mb=0.0005, **kw)
        if hook:
            m.register_comm_hook(None, hook)
        opt = torch.optim.SGD(m.parameters(), lr=0.1)
        losses = []
        for x, y in data:
            opt.zero_grad()
            loss = torch.nn.functional.mse_loss(m(shard(x)), shard(y))
            loss.backward()
            opt.step()
            losses.append(_global_loss(loss))
        torch.testing.assert_close(
            torch.tensor(losses), torch.tensor(ref_losses), rtol=tol, atol=tol
        )
        for k, v in m.module.state_dict().items():
            k = k.removeprefix("body.")
            if k in ref_params:
                torch.testing.assert_close(v.cpu(), ref_params[k], rtol=tol, atol=tol)

    run_ddp(1e-5)
    run_ddp(1e-5, find_unused_parameters=True)

    # DDP refuses bf16_compress_hook by name unless CUDA/XPU: a wrapper with
    # another name runs the very same hook (its future carries neuron tensors).
    def bf16_hook(state, bucket):
        return default_hooks.bf16_compress_hook(state, bucket)

    run_ddp(2e-2, hook=bf16_hook)

    # no_sync: two half-batches accumulate locally, one allreduce.
    m = DDP(_mlp().to(dev))
    opt = torch.optim.SGD(m.parameters(), lr=0.1)
    for x, y in data:
        opt.zero_grad()
        xs, ys = shard(x), shard(y)
        h = per // 2
        with m.no_sync():
            (torch.nn.functional.mse_loss(m(xs[:h]), ys[:h]) / 2).backward()
        (torch.nn.functional.mse_loss(m(xs[h:]), ys[h:]) / 2).backward()
        opt.step()
    for k, v in m.module.state_dict().items():
        torch.testing.assert_close(v.cpu(), ref_params[k], rtol=1e-5, atol=1e-5)

    # FSDP2, both reshard settings, then a bf16-compute mixed precision policy.
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

    for reshard, mp, tol in [
        (True, None, 1e-5),
        (False, None, 1e-5),
        (True, MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32), 5e-2),
    ]:
        m = _mlp().to(dev)
        kw = {"reshard_after_forward": reshard}
        if mp is not None:
            kw["mp_policy"] = mp
        fully_shard(m[0], **kw)
        fully_shard(m[2], **kw)
        fully_shard(m, **kw)
        opt = torch.optim.SGD(m.parameters(), lr=0.1)
        losses = []
        for x, y in data:
            opt.zero_grad()
            loss = torch.nn.functional.mse_loss(m(shard(x)).float(), shard(y))
            loss.backward()
            opt.step()
            losses.append(_global_loss(loss))
        torch.testing.assert_close(
            torch.tensor(losses), torch.tensor(ref_losses), rtol=tol, atol=tol
        )
        for k, v in m.state_dict().items():
            torch.testing.assert_close(v.full_tensor().cpu(), ref_params[k], rtol=tol, atol=tol)

    # DTensor: distribute, redistribute Shard <-> Replicate <-> Partial.
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import Partial, Replicate, Shard, distribute_tensor

    mesh = init_device_mesh("neuron", (world,))
    full = torch.arange(world * 6.0).reshape(world * 2, 3)
    d = distribute_tensor(full.to(dev), mesh, [Shard(0)])
    assert torch.equal(d.to_local().cpu(), full[rank * 2 : (rank + 1) * 2])
    assert torch.equal(d.redistribute(mesh, [Replicate()]).to_local().cpu(), full)
    assert torch.equal(d.redistribute(mesh, [Shard(1)]).full_tensor().cpu(), full)
    from torch.distributed.tensor import DTensor

    p = DTensor.from_local(torch.ones(2, 3, device=dev) * (rank + 1), mesh, [Partial()])
    assert torch.equal(
        p.redistribute(mesh, [Replicate()]).to_local().cpu(),
        torch.full((2, 3), float(world * (world + 1) // 2)),
    )
    s = p.redistribute(mesh, [Shard(0)])
    assert s.to_local().shape[0] == 2 // world or world > 2

    # Tensor parallelism: Colwise -> Rowwise MLP against the CPU module.
    from torch.distributed.tensor.parallel import (
        ColwiseParallel,
        RowwiseParallel,
        parallelize_module,
    )

    ref = _mlp()
    tp = parallelize_module(_mlp().to(dev), mesh, {"0": ColwiseParallel(), "2": RowwiseParallel()})
    x = data[0][0][:4]
    out = tp(x.to(dev))
    out = out.full_tensor() if isinstance(out, DTensor) else out
    torch.testing.assert_close(out.cpu(), ref(x), rtol=1e-5, atol=1e-5)
    out.sum().backward()
    ref(x).sum().backward()
    g = tp[0].weight.grad.full_tensor().cpu()
    torch.testing.assert_close(g, ref[0].weight.grad, rtol=1e-5, atol=1e-5)

    # Sequence parallelism on a transformer-style block: LayerNorm over a
    # sequence shard, all-gather into Colwise, reduce-scatter out of Rowwise.
    from torch.distributed.tensor.parallel import SequenceParallel

    ref_block = _MlpBlock()
    sp = parallelize_module(
        _MlpBlock().to(dev),
        mesh,
        {
            "norm": SequenceParallel(),
            "fc1": ColwiseParallel(input_layouts=Shard(1)),
            "fc2": RowwiseParallel(output_layouts=Shard(1)),
        },
    )
    seq = torch.randn(2, 2 * world, 8, generator=torch.Generator().manual_seed(9))
    out = sp(seq[:, rank * 2 : (rank + 1) * 2].to(dev))
    out = out.to_local() if isinstance(out, DTensor) else out
    torch.testing.assert_close(
        out.cpu(), ref_block(seq)[:, rank * 2 : (rank + 1) * 2].detach(), rtol=1e-5, atol=1e-5
    )

    # 2-D mesh (world 4): FSDP over "dp" x tensor parallelism over "tp".
    if world == 4:
        mesh2 = init_device_mesh("neuron", (2, 2), mesh_dim_names=("dp", "tp"))
        m = parallelize_module(
            _mlp().to(dev), mesh2["tp"], {"0": ColwiseParallel(), "2": RowwiseParallel()}
        )
        fully_shard(m, mesh=mesh2["dp"])
        opt = torch.optim.SGD(m.parameters(), lr=0.1)
        dp = mesh2["dp"].get_local_rank()
        half = data[0][0].shape[0] // 2
        for step, (x, y) in enumerate(data):
            opt.zero_grad()
            xs, ys = x[dp * half : (dp + 1) * half], y[dp * half : (dp + 1) * half]
            out = m(xs.to(dev))
            out = out.full_tensor() if isinstance(out, DTensor) else out
            loss = torch.nn.functional.mse_loss(out, ys.to(dev))
            loss.backward()
            opt.step()
            t = loss.detach().clone()
            dist.all_reduce(t, op=dist.ReduceOp.AVG, group=mesh2["dp"].get_group())
            torch.testing.assert_close(
                t.cpu(), torch.tensor(ref_losses[step]), rtol=1e-5, atol=1e-5
            )
        for k, v in m.state_dict().items():
            torch.testing.assert_close(v.full_tensor().cpu(), ref_params[k], rtol=1e-5, atol=1e-5)
    dist.destroy_process_group()


def pipeline_and_dcp():
    """Pipelining (GPipe, 1F1B) over send/recv, and DCP save (sharded over
    this world) for a later load with another world size."""
    from torch.distributed.pipelining import PipelineStage, ScheduleGPipe, Schedule1F1B

    rank, world = rank_world()
    dist.init_process_group("neuron")
    dev = torch.device("neuron", rank)
    torch.neuron.set_device(dev)
    torch.manual_seed(0)
    layers = [torch.nn.Linear(8, 8) for _ in range(world)]
    ref = torch.nn.Sequential(*layers)
    x = torch.randn(8, 8, generator=torch.Generator().manual_seed(5))
    y = torch.randn(8, 8, generator=torch.Generator().manual_seed(6))
    ref_loss = torch.nn.functional.mse_loss(ref(x), y)
    ref_loss.backward()

    def loss_fn(out, target):
        return torch.nn.functional.mse_loss(out, target)

    for sched_cls in (ScheduleGPipe, Schedule1F1B):
        stage_mod = torch.nn.Sequential(torch.nn.Linear(8, 8))
        stage_mod[0].load_state_dict(layers[rank].state_dict())
        stage_mod = stage_mod.to(dev)
        stage = PipelineStage(stage_mod, rank, world, dev)
        # 4 microbatches of 2 rows; the schedule divides gradients by 4, so
        # they equal the full batch's; the mean microbatch loss is its loss.
        sched = sched_cls(stage, n_microbatches=4, loss_fn=loss_fn)
        losses = []
        if rank == 0:
            sched.step(x.to(dev))
        elif rank == world - 1:
            sched.step(target=y.to(dev), losses=losses)
            total = sum(float(l.detach().cpu()) for l in losses) / 4
            torch.testing.assert_close(torch.tensor(total), ref_loss.detach(), rtol=1e-5, atol=1e-6)
        else:
            sched.step()
        torch.testing.assert_close(
            stage_mod[0].weight.grad.cpu(), layers[rank].weight.grad, rtol=1e-4, atol=1e-6
        )

    # DCP: save a Shard(0) DTensor state dict; the test loads it in one process.
    import torch.distributed.checkpoint as dcp
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import Shard, distribute_tensor

    mesh = init_device_mesh("neuron", (world,))
    full = torch.arange(world * 12.0).reshape(world * 3, 4)
    sd = {"w": distribute_tensor(full.to(dev), mesh, [Shard(0)])}
    dcp.save(sd, checkpoint_id=os.environ["DIST_ARGS"])
    dist.barrier()
    dist.destroy_process_group()


def observe_collectives():
    """Collectives as the profiler, the metrics API and the DEBUG log see
    them: rank r writes its Chrome trace to DIST_ARGS/trace-<r>.json; the test
    reads it and the log lines."""
    import torch_neuronx.metrics as metrics
    from torch.profiler import ProfilerActivity, profile

    rank, world = rank_world()
    torch.neuron.set_device(rank)  # as a torchrun script does
    dist.init_process_group("neuron")
    dev = torch.device("neuron", rank)
    t = torch.ones(1024, device=dev)
    parts = torch.empty(world * 256, device=dev)
    dist.all_reduce(t)  # outside the profiler: counted, not traced
    before = metrics.get_counter_value("collectives", device=rank)
    bytes_before = metrics.get_counter_value("collective_bytes", device=rank)
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.PrivateUse1]) as prof:
        dist.all_reduce(t)
        dist.all_gather_into_tensor(parts, t[:256])
        if rank == 0:
            dist.send(t[:16], 1)
        elif rank == 1:
            buf = torch.empty(16, device=dev)
            dist.recv(buf, 0)
        dist.barrier()
    prof.export_chrome_trace(os.path.join(os.environ["DIST_ARGS"], f"trace-{rank}.json"))
    p2p = 1 if rank < 2 else 0
    assert metrics.get_counter_value("collectives", device=rank) - before == 3 + p2p
    got = metrics.get_counter_value("collective_bytes", device=rank) - bytes_before
    assert got == 4096 + world * 1024 + p2p * 64, got
    assert "collectives" in metrics.get_counter_names()
    print("counters ok", flush=True)
    dist.destroy_process_group()


def subgroups():
    """new_group and split_group give working neuron sub-groups (their own
    shared regions) used in between collectives of the world group."""
    rank, world = rank_world()
    dev = torch.device("neuron", rank)
    torch.neuron.set_device(rank)
    dist.init_process_group("neuron", device_id=dev)  # split_group needs the bound device
    half = world // 2
    lo, hi = list(range(half)), list(range(half, world))
    g_lo, g_hi = dist.new_group(lo), dist.new_group(hi)
    mine, members = (g_lo, lo) if rank < half else (g_hi, hi)
    t = torch.full((3,), float(rank + 1), device=dev)
    dist.all_reduce(t, group=mine)
    assert t.cpu().tolist() == [float(sum(r + 1 for r in members))] * 3, t
    w = torch.ones(2, device=dev)
    dist.all_reduce(w)  # the world group still works in between
    assert w.cpu().tolist() == [float(world)] * 2
    parts = [torch.empty(1, device=dev) for _ in members]
    dist.all_gather(parts, torch.tensor([float(rank)], device=dev), group=mine)
    assert [float(p) for p in parts] == [float(r) for r in members]
    # split_group: each half gets its own backend (Backend::split, a new
    # shared region); its collectives stay within the half.
    split = dist.split_group(split_ranks=[lo, hi])
    assert split is not None and split.size() == len(members), split
    assert dist.get_rank(split) == members.index(rank)
    assert dist.get_process_group_ranks(split) == members
    s = torch.full((4,), float(10 * (rank + 1)), device=dev)
    dist.all_reduce(s, group=split)
    assert s.cpu().tolist() == [float(sum(10 * (r + 1) for r in members))] * 4, s
    b = torch.full((2,), float(rank), device=dev)
    dist.broadcast(b, src=members[-1], group=split)  # a global rank, as c10d takes it
    assert b.cpu().tolist() == [float(members[-1])] * 2, b
    w = torch.full((2,), 2.0, device=dev)
    dist.all_reduce(w)  # the world group still works after the split
    assert w.cpu().tolist() == [2.0 * world] * 2, w
    dist.destroy_process_group()


def _state_offset():
    return int(torch.neuron.get_rng_state()[8:].view(torch.int64))


def dtensor_random():
    """DTensor random ops through DTensor's offset-based RNG tracker: each
    result equals the single-device reference drawn on this rank's device
    from the same seed (replicas identical, Shard(0) shards the parts of the
    one global tensor), the generator's offset moves as it would for the
    whole tensor, and dropout in a TP / SP transformer block matches the
    single-device block."""
    import torch.nn.functional as F
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import DTensor, Replicate, Shard, distribute_tensor
    import torch.distributed.tensor as dt

    rank, world = rank_world()
    dist.init_process_group("neuron")
    dev = torch.device("neuron", rank)
    torch.neuron.set_device(dev)
    mesh = init_device_mesh("neuron", (world,))
    shape = (4 * world, 6)  # local shards of 24 elements: offsets stay multiples of 4

    ops = {
        "uniform_": lambda t: t.uniform_(-1, 2),
        "normal_": lambda t: t.normal_(0.5, 2),
        "bernoulli_": lambda t: t.bernoulli_(0.3),
        "dropout": lambda t: F.dropout(t, 0.5),
        "rand_like": lambda t: torch.rand_like(t),
    }
    for name, op in ops.items():
        torch.manual_seed(5)
        ref = op(torch.ones(shape, device=dev)).cpu()
        after = op(torch.ones(shape, device=dev)).cpu()  # the op that follows
        ref_offset = _state_offset()
        for placements in ([Replicate()], [Shard(0)]):
            torch.manual_seed(5)
            d = op(distribute_tensor(torch.ones(shape, device=dev), mesh, placements))
            assert isinstance(d, DTensor) and d.placements == tuple(placements), (name, d)
            full = d.full_tensor().cpu()
            assert torch.equal(full, ref), (name, placements, full, ref)
            if placements == [Replicate()]:
                assert torch.equal(d.to_local().cpu(), ref), name
            nxt = op(distribute_tensor(torch.ones(shape, device=dev), mesh, placements))
            assert torch.equal(nxt.full_tensor().cpu(), after), (name, placements)
            assert _state_offset() == ref_offset, (name, placements)

    # Factories: torch.distributed.tensor.rand / randn on Shard(0).
    for factory, plain in ((dt.rand, torch.rand), (dt.randn, torch.randn)):
        torch.manual_seed(9)
        ref = plain(shape, device=dev).cpu()
        torch.manual_seed(9)
        d = factory(shape, device_mesh=mesh, placements=[Shard(0)])
        assert torch.equal(d.full_tensor().cpu(), ref), factory

    # Shard(1) is not contiguous in the global tensor: as on CUDA, each shard
    # gets its own counters (shard k from offset k * local numel), distinct
    # from the others and the same on every run.
    torch.manual_seed(5)
    d = distribute_tensor(torch.ones(shape[1], 4 * world, device=dev), mesh, [Shard(1)]).uniform_()
    parts = d.redistribute(mesh, [Replicate()]).to_local().cpu().chunk(world, dim=1)
    torch.manual_seed(5)
    whole = torch.rand(shape[1] * 4 * world, device=dev).cpu()
    for k, part in enumerate(parts):
        n = part.numel()
        assert torch.equal(part.contiguous().flatten(), whole[k * n : (k + 1) * n]), k

    # Dropout in a transformer-style MLP block under tensor parallelism
    # (Colwise -> Rowwise, Replicate output) and sequence parallelism
    # (Shard(1) output, batch 1): same masks as the single-device block.
    from torch.distributed.tensor.parallel import (
        ColwiseParallel,
        RowwiseParallel,
        SequenceParallel,
        parallelize_module,
    )

    seq = torch.randn(1, 2 * world, 8, generator=torch.Generator().manual_seed(9))
    ref_block = _MlpBlock(p_drop=0.25).to(dev)
    torch.manual_seed(11)
    ref = ref_block(seq.to(dev))
    ref.sum().backward()
    ref_out = ref.detach().cpu()
    assert (ref_out == 0).any() and (ref_out != 0).any()
    plans = {
        "tp": (
            {"fc1": ColwiseParallel(), "fc2": RowwiseParallel(use_local_output=False)},
            lambda: seq.to(dev),
            lambda out: out.to_local(),
        ),
        "sp": (
            {
                "norm": SequenceParallel(),
                "fc1": ColwiseParallel(input_layouts=Shard(1)),
                "fc2": RowwiseParallel(output_layouts=Shard(1), use_local_output=False),
            },
            lambda: seq[:, rank * 2 : (rank + 1) * 2].to(dev),
            lambda out: out.full_tensor(),
        ),
    }
    for name, (plan, inp, whole_of) in plans.items():
        block = parallelize_module(_MlpBlock(p_drop=0.25).to(dev), mesh, plan)
        torch.manual_seed(11)
        out = block(inp())
        assert isinstance(out, DTensor), name
        torch.testing.assert_close(whole_of(out).cpu(), ref_out, rtol=1e-5, atol=1e-6)
        # Every rank dropped the same elements as the reference.
        assert torch.equal((whole_of(out).cpu() == 0), (ref_out == 0)), name
        out.sum().backward()
        g = block.fc2.weight.grad
        g = g.full_tensor() if isinstance(g, DTensor) else g
        torch.testing.assert_close(g.cpu(), ref_block.fc2.weight.grad.cpu(), rtol=1e-5, atol=1e-5)
    dist.destroy_process_group()


def _region_leftovers():
    """This process's mappings and descriptors of a shared collective region
    (the memfd is named trn_c10d)."""
    with open("/proc/self/maps") as f:
        maps = [line.strip() for line in f if "trn_c10d" in line]
    fds = []
    for fd in os.listdir("/proc/self/fd"):
        try:
            if "trn_c10d" in os.readlink(f"/proc/self/fd/{fd}"):
                fds.append(fd)
        except OSError:
            pass
    return maps, fds


def _env_tcp_store(rank, world):
    """The TCP store at MASTER_ADDR:MASTER_PORT, hosted by rank 0."""
    return dist.TCPStore(
        os.environ["MASTER_ADDR"],
        int(os.environ["MASTER_PORT"]),
        world,
        rank == 0,
        timeout=datetime.timedelta(seconds=30),
    )


def reinit_cycles():
    """destroy_process_group() then init_process_group(), DIST_ARGS times, on
    one store that outlives every group (as torchrun's agent store does, and
    as under torchrun itself when TORCHELASTIC_RUN_ID is set): each cycle
    must get a working group on the expected transport, a world group and a
    sub-group, and leave no region mapped or open once destroyed."""
    import time

    rank, world = rank_world()
    cycles = int(os.environ.get("DIST_ARGS") or 50)
    under_torchrun = "TORCHELASTIC_RUN_ID" in os.environ
    store = None
    if not under_torchrun:
        store = _env_tcp_store(rank, world)
    want = "gloo" if _gloo() else "shm"
    dev = torch.device("neuron", rank % torch.neuron.device_count())
    torch.neuron.set_device(dev)
    start = time.monotonic()
    for i in range(cycles):
        kw = {} if store is None else {"store": store, "rank": rank, "world_size": world}
        dist.init_process_group("neuron", timeout=datetime.timedelta(seconds=10), **kw)
        backend = dist.group.WORLD._get_backend(dev)
        assert backend.transport == want, (i, backend.transport)
        t = torch.full((3,), float(rank + i), device=dev)
        dist.all_reduce(t)
        assert t.cpu().tolist() == [float(sum(r + i for r in range(world)))] * 3, (i, t)
        sub = dist.new_group(list(range(world - 1, -1, -1)) if i % 2 else list(range(world)))
        s = torch.full((2,), float(rank), device=dev)
        dist.broadcast(s, src=world - 1, group=sub)
        assert s.cpu().tolist() == [float(world - 1)] * 2, (i, s)
        dist.destroy_process_group()
        maps, fds = _region_leftovers()
        assert not maps and not fds, (i, maps, fds)
    print(f"{cycles} destroy/init cycles in {time.monotonic() - start:.2f} s", flush=True)
    if store is not None:
        # Rank 0 hosts the store: it stays until every rank is done with it.
        store.add("reinit/finished", 1)
        deadline = time.monotonic() + 30
        while rank == 0 and store.add("reinit/finished", 0) < world:
            assert time.monotonic() < deadline, "peers never finished"
            time.sleep(0.01)


def diverge():
    """Ranks that diverge fail together instead of silently: different roots
    or dtypes, an argument error on one rank only (the ranks must stay in
    step afterwards), and send / isend once the group is aborted. DIST_ARGS
    may name some of the parts: roots,dtypes,args,abort."""
    rank, world = rank_world()
    parts = set((os.environ.get("DIST_ARGS") or "roots,dtypes,args,abort").split(","))
    dist.init_process_group("neuron", timeout=datetime.timedelta(seconds=30))
    dev = torch.device("neuron", rank % torch.neuron.device_count())
    torch.neuron.set_device(dev)

    def in_step(v=1.0):
        t = torch.full((3,), v * (rank + 1), device=dev)
        dist.all_reduce(t)
        assert t.cpu().tolist() == [v * world * (world + 1) / 2] * 3, t

    # Each rank its own root: before, every rank "succeeded".
    t = torch.full((4,), float(rank), device=dev)
    other = 1 if rank == 0 else 0
    if "roots" in parts:
        _diverge_roots(rank, world, dev, in_step, t, other)
    if "dtypes" in parts:
        _diverge_dtypes(rank, world, dev, in_step)
    if "args" in parts:
        _diverge_args(rank, world, dev, in_step)
    if "abort" in parts:
        _diverge_abort(rank, world, dev, t)
    print("diverge ok", flush=True)


def _diverge_roots(rank, world, dev, in_step, t, other):
    _expect_error(
        lambda: dist.broadcast(t, src=rank),
        "broadcast",
        f"rank {rank} passed root {rank}, rank {other} passed root {other}",
    )
    in_step()
    root = 1 if rank == 1 else 0
    s = torch.empty(3, device=dev)
    _expect_error(
        lambda: dist.scatter(
            s, [torch.ones(3, device=dev)] * world if rank == root else None, src=root
        ),
        "scatter",
        "different roots",
    )
    in_step()
    g = [torch.empty(3, device=dev) for _ in range(world)] if rank == root else None
    _expect_error(
        lambda: dist.gather(torch.ones(3, device=dev), g, dst=root), "gather", "different roots"
    )
    in_step()


def _diverge_dtypes(rank, world, dev, in_step):
    # Same bytes, different dtypes.
    dt = torch.int32 if rank == 1 else torch.float32
    out = torch.empty(world * 4, dtype=dt, device=dev)
    _expect_error(
        lambda: dist.all_gather_into_tensor(out, torch.ones(4, dtype=dt, device=dev)),
        "dtypes differ",
        "int32",
        "float32",
    )
    in_step()
    b = torch.zeros(4, dtype=dt, device=dev)
    _expect_error(lambda: dist.broadcast(b, src=0), "dtypes differ")
    in_step()


def _diverge_args(rank, world, dev, in_step):
    # An argument error on rank 1 only (a non-contiguous output): every rank
    # fails that call, and the next all_reduce pairs with the next one (it
    # used to pair rank 0's failed-elsewhere call with rank 1's next).
    x = torch.full((4, 4), 5.0, device=dev)
    bad = x.t() if rank == 1 else x
    if rank == 1:
        _expect_error(lambda: dist.all_reduce(bad), "contiguous")
    else:
        _expect_error(lambda: dist.all_reduce(bad), "rank 1 could not make the call", "contiguous")
    in_step(2.0)
    # A reduce op the dtype lacks, on rank 0 only.
    i = torch.ones(2, device=dev)
    op = dist.ReduceOp.BAND if rank == 0 else dist.ReduceOp.SUM
    _expect_error(lambda: dist.all_reduce(i, op=op), "ReduceOp.BAND needs an integer")
    in_step(3.0)
    # Asynchronous: the error reaches wait() on the ranks that queued it.
    if rank == 1:
        _expect_error(lambda: dist.all_reduce(bad, async_op=True), "contiguous")
    else:
        w = dist.all_reduce(bad, async_op=True)
        _expect_error(w.wait, "rank 1 could not make the call")
    in_step(4.0)


def _diverge_abort(rank, world, dev, t):
    # Send / isend once the group is aborted: rank 1 aborts it; rank 0 sees
    # that in its next collective; then no send may succeed on either rank.
    if rank == 1:
        dist.group.WORLD.abort()
    else:
        _expect_error(lambda: dist.all_reduce(t), "abort")
    if rank < 2:
        peer = 1 - rank
        one = torch.ones(4, device=dev)
        why = "shut down" if rank == 1 else "aborted"
        _expect_error(lambda: dist.send(one, peer), why)
        _expect_error(lambda: dist.isend(one, peer).wait(), why)


class _SlowStore(dist.Store):
    """A rank's view of the TCP store that waits before every call: a rank
    0 that leaves the rendezvous early has exited, and its store with it,
    before this rank's next read."""

    def __init__(self, inner, delay: float):
        super().__init__()
        self.inner, self.delay = inner, delay

    def _wait(self):
        import time

        time.sleep(self.delay)

    def set(self, key, value):
        self._wait()
        self.inner.set(key, value)

    def get(self, key):
        self._wait()
        return self.inner.get(key)

    def add(self, key, n):
        self._wait()
        return self.inner.add(key, n)

    def delete_key(self, key):
        self._wait()
        return self.inner.delete_key(key)

    def wait(self, keys, timeout=None):
        self._wait()
        if timeout is None:
            return self.inner.wait(keys)
        return self.inner.wait(keys, timeout)


def init_then_exit():
    """Rank 0 hosts the store and exits the moment init_process_group
    returns, as accelerate's notebook_launcher environment check does; rank
    1 reads the store slowly. Rank 1's group must still come up: no rank
    may leave the group's construction while a peer still uses the store."""
    rank, world = rank_world()
    store = _env_tcp_store(rank, world)
    if rank != 0:
        store = _SlowStore(store, 0.2)
    dist.init_process_group(
        "neuron", store=store, rank=rank, world_size=world, timeout=datetime.timedelta(seconds=30)
    )
    if rank == 0:
        _exit(0)
    backend = dist.group.WORLD._get_backend(torch.device("neuron"))
    print(f"rank {rank} joined over {backend.transport}", flush=True)
