"""Reductions: neuron (libtrn) vs PyTorch CPU, interleaved rounds, ratio of bests.

The bench_ops.py reduction rows plus the training-sized shapes (bias
gradients: sum over dim 0 of [rows, cols] in float32 and bfloat16; sum/mean
over the last dim of [N, 256..1024]). Each round times neuron then CPU, so
both see the same machine load; the best of the rounds is kept per side.
Each timed batch starts after a short sleep, so neither side pays for the
other's idle threads still spinning.

Run: .venv/bin/python bench/bench_reductions.py [--rounds N] [--only SUBSTR]
"""

import argparse
import time

import torch

import torch_neuronx  # noqa: F401


def best_time(fn, sync, reps):
    # Let the other side's threads (libtrn's pool, CPU's OpenMP team) stop
    # spinning first: on 2 cores a spinning thread halves the timed side.
    time.sleep(0.03)
    t0 = time.perf_counter()
    for _ in range(reps):
        fn()
    sync()
    return (time.perf_counter() - t0) / reps


def cases():
    big = [
        ("sum, 16M float32", (16 * 2**20,), torch.float32, lambda a: a.sum()),
        ("sum dim 0, 4096x4096", (4096, 4096), torch.float32, lambda a: a.sum(0)),
        ("sum dim 1, 4096x4096", (4096, 4096), torch.float32, lambda a: a.sum(1)),
        ("amax dim 1, 4096x4096", (4096, 4096), torch.float32, lambda a: a.amax(1)),
    ]
    train = []
    for dt, dn in ((torch.float32, "f32"), (torch.bfloat16, "bf16")):
        for r, c in ((512, 256), (512, 768), (2048, 768), (4096, 1024), (4096, 256), (1024, 1000)):
            train.append((f"sum dim 0, {r}x{c} {dn}", (r, c), dt, lambda a: a.sum(0)))
    for n, c in ((4096, 256), (4096, 768), (8192, 1024)):
        train.append((f"sum dim -1, {n}x{c} f32", (n, c), torch.float32, lambda a: a.sum(-1)))
        train.append((f"mean dim -1, {n}x{c} f32", (n, c), torch.float32, lambda a: a.mean(-1)))
    return big + train


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--only", default="")
    ap.add_argument("--min-time", type=float, default=0.03, help="seconds per timed batch")
    ap.add_argument(
        "--threads", type=int, default=0, help="CPU threads (also set TORCH_NEURONX_NUM_THREADS)"
    )
    args = ap.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    print(f"{'case':36}{'neuron GB/s':>12}{'cpu GB/s':>10}{'ratio':>8}")
    for name, shape, dt, fn in cases():
        if args.only and args.only not in name:
            continue
        x = torch.randn(shape).to(dt)
        xs = {"cpu": x, "neuron": x.to("neuron")}
        syncs = {"cpu": lambda: None, "neuron": torch.neuron.synchronize}
        reps = {}
        for d in ("neuron", "cpu"):  # warm up, pick reps for ~min_time per batch
            f = lambda d=d: fn(xs[d])  # noqa: E731
            t = best_time(f, syncs[d], 1)
            t = best_time(f, syncs[d], 1)
            reps[d] = max(1, int(args.min_time / max(t, 1e-7)))
        best = {"cpu": float("inf"), "neuron": float("inf")}
        for _ in range(args.rounds):
            for d in ("neuron", "cpu"):
                f = lambda d=d: fn(xs[d])  # noqa: E731
                best[d] = min(best[d], best_time(f, syncs[d], reps[d]))
        nbytes = x.numel() * x.element_size()
        gn, gc = nbytes / best["neuron"] / 1e9, nbytes / best["cpu"] / 1e9
        print(f"{name:36}{gn:12.2f}{gc:10.2f}{gn / gc:8.2f}x", flush=True)


if __name__ == "__main__":
    main()
