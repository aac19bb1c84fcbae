"""Two-thread wall of the GPT-2 float32 step's products, one device per process.

Each product family of the GPT-2 step (model_zoo "small": 512 tokens, width
256): forward addmm with a bias row (x W, Conv1D's weight is (in, out): nn),
input gradient dY W^T (nt), weight gradient X^T dY (tn). Each shape runs
`--calls` times back to back (optionally after a Python busy-wait of `--gap`
us before each call, the hand-off a step sees), `--rounds` times; prints per
shape the min and median over rounds of the per-call wall and process CPU
time. Run one process per device and thread count, alternated:

    TORCH_NEURONX_NUM_THREADS=2 python bench/bench_gemm_split.py --dev neuron
    python bench/bench_gemm_split.py --dev cpu --threads 2
"""

import argparse
import os
import subprocess
import resource
import statistics
import time

import torch

import torch_neuronx  # noqa: F401

# (family, m, n, k): C is m x n, k the reduction.
SHAPES = [
    ("nn+b", 512, 1024, 256),
    ("nn+b", 512, 256, 1024),
    ("nn+b", 512, 768, 256),
    ("nn+b", 512, 256, 256),
    ("nt", 512, 1024, 256),
    ("nt", 512, 256, 1024),
    ("nt", 512, 256, 768),
    ("nt", 512, 256, 256),
    ("tn", 1024, 256, 512),
    ("tn", 256, 1024, 512),
    ("tn", 256, 768, 512),
    ("tn", 256, 256, 512),
    ("nn", 512, 1024, 256),
    ("nn", 512, 768, 256),
]


def make(fam, m, n, k, dev, g, dtype):
    def r(*s):
        return torch.randn(*s, generator=g).to(dtype).to(dev)

    if fam == "nn+b":
        x, w, b = r(m, k), r(k, n), r(n)
        return lambda: torch.addmm(b, x, w)
    if fam == "nt":
        dy, w = r(m, k), r(n, k)  # B = w.t(): columns contiguous along k
        return lambda: torch.mm(dy, w.t())
    if fam == "nn":
        x, w = r(m, k), r(k, n)
        return lambda: torch.mm(x, w)
    x, dy = r(k, m), r(k, n)  # A = x.t()
    return lambda: torch.mm(x.t(), dy)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dev", default="neuron")
    ap.add_argument("--threads", type=int, default=0, help="torch threads (cpu side)")
    ap.add_argument("--calls", type=int, default=20)
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--gap", type=float, default=0.0, help="busy-wait us before each call")
    ap.add_argument("--fifo", action="store_true", help="SCHED_FIFO while timing (root, chrt)")
    ap.add_argument("--dtype", default="float32")
    ap.add_argument("--shapes", default="", help="fam:m:n:k,... instead of the GPT-2 set")
    ap.add_argument("--only", default="", help="comma list of shape indices")
    args = ap.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    dev = args.dev
    sync = (lambda: torch.neuron.synchronize()) if dev == "neuron" else (lambda: None)
    g = torch.Generator().manual_seed(1)
    shapes = SHAPES
    if args.shapes:
        shapes = [
            (f, int(m), int(n), int(k))
            for f, m, n, k in (x.split(":") for x in args.shapes.split(","))
        ]
    idx = [int(i) for i in args.only.split(",")] if args.only else range(len(shapes))
    dtype = getattr(torch, args.dtype)
    for i in idx:
        fam, m, n, k = shapes[i]
        fn = make(fam, m, n, k, dev, g, dtype)
        for _ in range(3):
            fn()
        sync()
        walls, cpus = [], []
        if args.fifo:  # every thread of the process, pool workers included
            subprocess.run(
                ["chrt", "-f", "-a", "-p", "10", str(os.getpid())],
                check=True,
                stdout=subprocess.DEVNULL,
            )
        f0 = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
        for _ in range(args.rounds):
            w = c = 0.0
            for _ in range(args.calls):
                if args.gap:
                    t = time.perf_counter() + args.gap * 1e-6
                    while time.perf_counter() < t:
                        pass
                t0, c0 = time.perf_counter(), time.process_time()
                fn()
                sync()
                w += time.perf_counter() - t0
                c += time.process_time() - c0
            walls.append(w / args.calls * 1e6)
            cpus.append(c / args.calls * 1e6)
        if args.fifo:
            subprocess.run(
                ["chrt", "-o", "-a", "-p", "0", str(os.getpid())],
                check=True,
                stdout=subprocess.DEVNULL,
            )
        gmacs = m * n * k / min(walls) / 1e3
        faults = (
            (resource.getrusage(resource.RUSAGE_SELF).ru_minflt - f0) / args.calls / args.rounds
        )
        print(
            f"{i:2d} {fam:4s} {m:4d}x{n:4d}x{k:4d} wall min {min(walls):7.0f} med "
            f"{statistics.median(walls):7.0f} us  cpu min {min(cpus):7.0f} med "
            f"{statistics.median(cpus):7.0f} us  {gmacs:5.1f} G/s wall  {faults:6.1f} faults/call",
            flush=True,
        )


if __name__ == "__main__":
    main()
