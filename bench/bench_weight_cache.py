"""Few-row F.linear with libtrn's packed-weight cache vs without, and CPU.

Weights cycle (enough of them for --mib MiB, as a decode step's weights do
not stay in cache); each row is us per call in process CPU time, min /
median over rounds, the three sides alternated round by round in one
process. "uncached" uses inference-mode copies of the same weights (no
version counter: never cached), so both neuron sides run the same build:

    OMP_NUM_THREADS=1 TORCH_NEURONX_NUM_THREADS=1 \\
        .venv/bin/python bench/bench_weight_cache.py [--rounds 5]
"""

import argparse
import os
import statistics
import time

import torch
import torch.nn.functional as F

import torch_neuronx  # noqa: F401
from torch_neuronx import _C

SHAPES = [
    (1, 256, 256),
    (1, 256, 544),
    (1, 544, 256),
    (1, 1024, 1024),
    (1, 256, 8192),
    (4, 256, 544),
    (1, 256, 50257),
]


def _time(x, ws, reps):
    t0 = time.process_time()
    for _ in range(reps):
        for w in ws:
            y = F.linear(x, w)
    if y.device.type != "cpu":
        torch_neuronx.synchronize()
    return (time.process_time() - t0) / (reps * len(ws)) * 1e6


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--mib", type=int, default=64)
    args = ap.parse_args()
    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", torch.get_num_threads())))
    torch.manual_seed(0)
    print("m x k -> n | cached | uncached | CPU  (us per call, min / median)")
    for m, k, n in SHAPES:
        count = max(2, min(40, (args.mib << 20) // (4 * k * n)))
        reps = max(1, 2000 // (count * max(1, k * n // 65536)))
        cpu = [torch.randn(n, k) for _ in range(count)]
        dev = [w.to("neuron") for w in cpu]
        with torch.inference_mode():
            plain = [w.clone() for w in dev]
        xc = torch.randn(m, k)
        xd = xc.to("neuron")
        with torch.no_grad():
            _time(xd, dev, 2)  # record, then pack
            with torch.inference_mode():
                _time(xd.clone(), plain, 1)
            _time(xc, cpu, 1)
            res = {"cached": [], "uncached": [], "cpu": []}
            for _ in range(args.rounds):
                res["cached"].append(_time(xd, dev, reps))
                with torch.inference_mode():
                    res["uncached"].append(_time(xd.clone(), plain, reps))
                res["cpu"].append(_time(xc, cpu, reps))
        cells = " | ".join(f"{min(v):.1f} / {statistics.median(v):.1f}" for v in res.values())
        print(f"{m} x {k} -> {n} ({count} weights) | {cells}", flush=True)
    print("cache:", _C._weight_cache_stats())


if __name__ == "__main__":
    main()
