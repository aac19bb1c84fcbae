"""Collective bandwidth and latency, neuron (device tensors) vs Gloo (CPU
tensors), side by side: all_reduce, all_gather, reduce_scatter, all_to_all bus
bandwidth from 4 KiB to 256 MiB for 2 and 4 ranks, 8-byte all_reduce latency
and a DDP training step. Bus bandwidth follows nccl-tests.

    python bench/bench_collectives.py [--max-mib 256] [--worlds 2,4]
    python bench/bench_collectives.py --ddp-rounds 5 --worlds 2   # DDP step only

--ddp-rounds N skips the bandwidth sweep and runs the latency and DDP step
N times per backend, alternating which backend goes first, and prints each
round's ratio and their median (one run swings with the machine's load).

--agreement (also part of the full run) times the cross-rank agreement of the
Gloo transport (TORCH_NEURONX_DIST_TRANSPORT=gloo): before each collective
every rank all-gathers one 512-byte record (process_group.cpp gloo_agree).
Its own cost is measured directly, as the same all_gather of a 512-byte CPU
record on a Gloo group of the same ranks, next to the neuron collectives that
include it (all_reduce and broadcast, 8 bytes and 4 MiB), the two timed
alternately (medians, so the machine's load drifts over both alike), and
printed as the fraction of each collective's time it takes and the
collective's slowdown (with / without = t / (t - record)). The shared-memory
transport has no such exchange: its agreement rides in the descriptor every
collective already exchanges; bench/c/comm_agree.c (trn_bench_comm_agree)
times those collectives with and without it.
"""

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import time

OPS = ["all_reduce", "all_gather", "reduce_scatter", "all_to_all"]


def _bus_factor(op, n):
    return 2 * (n - 1) / n if op == "all_reduce" else (n - 1) / n


def _rank_main(backend, max_bytes, out):
    import torch
    import torch.distributed as dist

    dist.init_process_group(backend)
    rank, n = dist.get_rank(), dist.get_world_size()
    dev = torch.device("neuron", rank) if backend == "neuron" else torch.device("cpu")
    res = {"bw": {}, "lat_us": None, "ddp_ms": None}

    def timeit(fn, iters, cpu=False):
        fn()
        dist.barrier() if backend == "gloo" else torch.neuron.synchronize()
        times = []
        c0 = time.process_time()
        for _ in range(iters):
            t0 = time.perf_counter()
            fn()
            times.append(time.perf_counter() - t0)
        # CPU seconds per call of this process (all its threads): what the
        # step costs, independent of other load on the machine.
        t = torch.tensor([statistics.median(times), (time.process_time() - c0) / iters])
        t = t.to(dev)
        dist.all_reduce(t, op=dist.ReduceOp.MAX)
        t = t.cpu()
        return (float(t[0]), float(t[1])) if cpu else float(t[0])

    size = 4096
    while size <= max_bytes:
        elems = size // 4
        elems -= elems % n
        x = torch.ones(elems, device=dev)
        y = torch.empty(elems, device=dev)
        part = torch.ones(elems // n, device=dev)
        iters = max(3, min(20, (64 << 20) // size))
        for op in OPS:
            if op == "all_reduce":
                fn = lambda: dist.all_reduce(x)  # noqa: E731
            elif op == "all_gather":
                fn = lambda: dist.all_gather_into_tensor(y, part)  # noqa: E731
            elif op == "reduce_scatter":
                fn = lambda: dist.reduce_scatter_tensor(part, x)  # noqa: E731
            else:
                fn = lambda: dist.all_to_all_single(y, x)  # noqa: E731
            sec = timeit(fn, iters)
            res["bw"].setdefault(op, {})[size] = size / sec / 1e9 * _bus_factor(op, n)
        size *= 4
    tiny = torch.ones(2, device=dev)
    res["lat_us"] = timeit(lambda: dist.all_reduce(tiny), 200) * 1e6
    # Broadcast also agrees on its root and dtype across ranks (in the
    # descriptor every collective exchanges): its small-message latency shows
    # what that costs.
    res["bcast_lat_us"] = timeit(lambda: dist.broadcast(tiny, 0), 200) * 1e6

    from torch.nn.parallel import DistributedDataParallel as DDP

    torch.manual_seed(0)
    model = torch.nn.Sequential(*[torch.nn.Linear(512, 512) for _ in range(4)]).to(dev)
    ddp = DDP(model)
    opt = torch.optim.SGD(ddp.parameters(), lr=1e-3)
    xb = torch.randn(32, 512, device=dev)

    def step():
        opt.zero_grad()
        ddp(xb).sum().backward()
        opt.step()
        if backend == "neuron":
            torch.neuron.synchronize()

    wall, cpu = timeit(step, 30, cpu=True)
    res["ddp_ms"], res["ddp_cpu_ms"] = wall * 1e3, cpu * 1e3
    if rank == 0:
        with open(out, "w") as f:
            json.dump(res, f)
    dist.destroy_process_group()


AGREE_SIZES = {"8 B": 8, "4 MiB": 4 << 20}


def _agree_main(out):
    """Rank body of --agreement: neuron over the Gloo transport."""
    import torch
    import torch.distributed as dist

    dist.init_process_group("neuron")
    rank, n = dist.get_rank(), dist.get_world_size()
    dev = torch.device("neuron", rank)
    cpu_group = dist.new_group(backend="gloo")  # the same ranks, plain Gloo
    # The record exchange of gloo_agree, alone: one 512-byte uint8 tensor per
    # rank, all-gathered into a list of n.
    rec = torch.zeros(512, dtype=torch.uint8)
    recs = [torch.empty(512, dtype=torch.uint8) for _ in range(n)]

    def timed(fn):
        dist.barrier(group=cpu_group)
        t0 = time.perf_counter()
        fn()
        return time.perf_counter() - t0

    def record():
        dist.all_gather(recs, rec, group=cpu_group)

    def interleaved_us(fn, iters):
        """Medians (us) of the record alone and of fn, timed alternately so
        the machine's load drifts over both alike; the maximum over ranks."""
        for _ in range(3):
            record()
            fn()
        r, c = [], []
        for _ in range(iters):
            r.append(timed(record))
            c.append(timed(fn))
        t = torch.tensor([statistics.median(r), statistics.median(c)])
        dist.all_reduce(t, op=dist.ReduceOp.MAX, group=cpu_group)
        return float(t[0]) * 1e6, float(t[1]) * 1e6

    res = {}
    for label, nbytes in AGREE_SIZES.items():
        x = torch.ones(max(2, nbytes // 4), device=dev)
        iters = 100 if nbytes < 65536 else 20
        res[f"all_reduce {label}"] = interleaved_us(lambda: dist.all_reduce(x), iters)
        res[f"broadcast {label}"] = interleaved_us(lambda: dist.broadcast(x, 0), iters)
    if rank == 0:
        with open(out, "w") as f:
            json.dump(res, f)
    dist.destroy_process_group()


def _agreement(worlds, out):
    for world in worlds:
        r = _run(
            "agree", world, 0, f"{out}.agree.{world}", {"TORCH_NEURONX_DIST_TRANSPORT": "gloo"}
        )
        print(f"\n== {world} ranks, Gloo transport: the agreement (512-byte record all_gather) ==")
        print(
            f"{'collective':>20} {'with check':>11} {'record':>10} {'check share':>12} "
            f"{'with/without':>13}"
        )
        for name, (rec, t) in r.items():
            ratio = f"{t / (t - rec):12.2f}x" if t > rec else f"{'n/a':>13}"
            print(f"{name:>20} {t:>8.0f} us {rec:>7.0f} us {rec / t:>11.0%} {ratio}")


def _run(backend, world, max_bytes, out, extra_env=None):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    procs = []
    for r in range(world):
        env = dict(
            os.environ,
            RANK=str(r),
            WORLD_SIZE=str(world),
            LOCAL_RANK=str(r),
            LOCAL_WORLD_SIZE=str(world),
            MASTER_ADDR="127.0.0.1",
            MASTER_PORT=str(port),
            OMP_NUM_THREADS="1",
            TORCH_NEURONX_NUM_THREADS="1",
            **(extra_env or {}),
        )
        procs.append(
            subprocess.Popen(
                [
                    sys.executable,
                    __file__,
                    "--rank-backend",
                    backend,
                    "--max-mib",
                    str(max_bytes >> 20),
                    "--out",
                    out,
                ],
                env=env,
            )
        )
    for p in procs:
        if p.wait(timeout=1800) != 0:
            raise SystemExit(f"{backend} world {world} failed")
    with open(out) as f:
        return json.load(f)


def _ddp_rounds(worlds, rounds, out):
    for world in worlds:
        wall, cpu, lat, blat = [], [], [], []
        for r in range(rounds):
            order = ("neuron", "gloo") if r % 2 == 0 else ("gloo", "neuron")
            res = {b: _run(b, world, 0, f"{out}.{b}.{world}") for b in order}
            n, g = res["neuron"], res["gloo"]
            wall.append(g["ddp_ms"] / n["ddp_ms"])
            cpu.append(g["ddp_cpu_ms"] / n["ddp_cpu_ms"])
            lat.append(n["lat_us"] / g["lat_us"])
            blat.append(n["bcast_lat_us"] / g["bcast_lat_us"])
            print(
                f"{world} ranks, round {r}: DDP step neuron {n['ddp_ms']:.2f} ms, gloo-cpu "
                f"{g['ddp_ms']:.2f} ms (speedup {wall[-1]:.2f}x; CPU per step {cpu[-1]:.2f}x "
                f"less); latency {n['lat_us']:.0f} vs {g['lat_us']:.0f} us, broadcast "
                f"{n['bcast_lat_us']:.0f} vs {g['bcast_lat_us']:.0f} us",
                flush=True,
            )
        print(
            f"{world} ranks, median of {rounds}: DDP step speedup {statistics.median(wall):.2f}x "
            f"(min {min(wall):.2f}x), CPU per step {statistics.median(cpu):.2f}x less, "
            f"latency neuron/gloo {statistics.median(lat):.2f}, broadcast latency "
            f"neuron/gloo {statistics.median(blat):.2f}"
        )


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--max-mib", type=int, default=256)
    ap.add_argument("--worlds", default="2,4")
    ap.add_argument("--rank-backend")
    ap.add_argument("--out", default="/tmp/bench_collectives.json")
    ap.add_argument("--ddp-rounds", type=int, default=0)
    ap.add_argument("--agreement", action="store_true", help="only the agreement's cost")
    a = ap.parse_args()
    max_bytes = a.max_mib << 20
    worlds = [int(w) for w in a.worlds.split(",")]
    if a.rank_backend == "agree":
        _agree_main(a.out)
        return
    if a.rank_backend:
        _rank_main(a.rank_backend, max_bytes, a.out)
        return
    if a.agreement:
        _agreement(worlds, a.out)
        return
    if a.ddp_rounds:
        _ddp_rounds([int(w) for w in a.worlds.split(",")], a.ddp_rounds, a.out)
        return
    for world in [int(w) for w in a.worlds.split(",")]:
        res = {b: _run(b, world, max_bytes, f"{a.out}.{b}.{world}") for b in ("neuron", "gloo")}
        print(f"\n== {world} ranks: bus bandwidth GB/s (neuron | gloo-cpu | ratio) ==")
        print(f"{'size':>9} " + " ".join(f"{op:>26}" for op in OPS))
        for size in res["neuron"]["bw"]["all_reduce"]:
            cells = []
            for op in OPS:
                nb, gb = res["neuron"]["bw"][op][size], res["gloo"]["bw"][op][size]
                cells.append(f"{nb:8.2f} |{gb:6.2f} |{nb / gb:6.1f}x")
            print(f"{int(size) >> 10:>7}Ki " + " ".join(f"{c:>26}" for c in cells))
        nl, gl = res["neuron"]["lat_us"], res["gloo"]["lat_us"]
        print(
            f"8-byte all_reduce latency: neuron {nl:.1f} us, gloo {gl:.1f} us "
            f"(neuron/gloo {nl / gl:.2f})"
        )
        nb, gb = res["neuron"]["bcast_lat_us"], res["gloo"]["bcast_lat_us"]
        print(
            f"8-byte broadcast latency: neuron {nb:.1f} us, gloo {gb:.1f} us "
            f"(neuron/gloo {nb / gb:.2f})"
        )
        nd, gd = res["neuron"]["ddp_ms"], res["gloo"]["ddp_ms"]
        nc, gc = res["neuron"]["ddp_cpu_ms"], res["gloo"]["ddp_cpu_ms"]
        print(
            f"DDP step (4x Linear 512, batch 32): neuron {nd:.2f} ms, gloo-cpu {gd:.2f} ms "
            f"(speedup {gd / nd:.2f}x); CPU time per step per rank: neuron {nc:.2f} ms, "
            f"gloo-cpu {gc:.2f} ms ({gc / nc:.2f}x)"
        )
    _agreement(worlds, a.out)


if __name__ == "__main__":
    main()
