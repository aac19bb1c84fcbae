"""Eager kernels at each CPU level this build holds (libtrn's per-level
kernels, docs/compile.md "Per-ISA kernels"), side by side.

The level is fixed when libtrn loads, so each level runs in its own process
(TORCH_NEURONX_CPU_CAPABILITY); the processes alternate, ROUNDS times, and
each reports the best per-call time of every op. Printed: the min and median
over rounds per level, and the ratio of the first level's (the baseline)
median to each other level's (> 1: faster than the baseline).

Run: .venv/bin/python bench/bench_cpu_levels.py [--rounds N] [--levels avx2,avx512]
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

N = 1 << 22  # 4 Mi elements: 16 MiB in float32


def _cases():
    import torch
    import torch.nn.functional as F

    d = "neuron"
    torch.manual_seed(0)
    a = torch.randn(N, device=d)
    b = torch.randn(N, device=d)
    ab, bb = a.bfloat16(), b.bfloat16()
    m = torch.randn(4096, 1024, device=d)
    w = torch.randn(1024, device=d)
    return {
        "add f32": lambda: a + b,
        "mul bf16": lambda: ab * bb,
        "exp f32": lambda: a.exp(),
        "gelu f32": lambda: F.gelu(a),
        "sigmoid bf16": lambda: ab.sigmoid(),
        "sum f32": lambda: a.sum(),
        "amax rows f32": lambda: m.amax(dim=1),
        "softmax rows f32": lambda: m.softmax(dim=1),
        "layer_norm f32": lambda: F.layer_norm(m, (1024,), w, w),
        "cumsum rows f32": lambda: m.cumsum(dim=1),
    }


def _worker(level, min_time):
    import torch

    import torch_neuronx

    assert torch_neuronx.cpu_capability() == level, torch_neuronx.cpu_capability()
    assert not torch_neuronx.eager_fusion.is_enabled()
    out = {}
    for name, fn in _cases().items():
        fn()
        torch.neuron.synchronize()
        best, spent, reps = float("inf"), 0.0, 1
        while spent < min_time:
            t0 = time.perf_counter()
            for _ in range(reps):
                fn()
            torch.neuron.synchronize()
            dt = time.perf_counter() - t0
            spent += dt
            best = min(best, dt / reps)
            if dt < 0.05:
                reps *= 2
        out[name] = best
    print(json.dumps(out))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--levels", default=None, help="comma list (default: every level built)")
    ap.add_argument("--min-time", type=float, default=0.3)
    ap.add_argument("--worker", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        return _worker(args.worker, args.min_time)
    if args.levels:
        levels = args.levels.split(",")
    else:
        import torch_neuronx

        levels = torch_neuronx.cpu_capabilities()
    times = {lv: [] for lv in levels}
    for r in range(args.rounds):
        for lv in levels:
            # Eager fusion off: fused elementwise groups run generated code
            # (-march=native), not the level's kernels.
            env = dict(os.environ, TORCH_NEURONX_CPU_CAPABILITY=lv, TORCH_NEURONX_EAGER_FUSION="0")
            cmd = [sys.executable, __file__, "--worker", lv, "--min-time", str(args.min_time)]
            res = subprocess.run(cmd, env=env, capture_output=True, text=True, check=True)
            times[lv].append(json.loads(res.stdout.strip().splitlines()[-1]))
    base = levels[0]
    head = "".join(f"{lv + ' min/med us':>24}" for lv in levels)
    ratios = "".join(f"{base + '/' + lv:>14}" for lv in levels[1:])
    print(f"{'op':20}{head}{ratios}")
    for name in times[base][0]:
        cells, med = "", {}
        for lv in levels:
            vals = [t[name] * 1e6 for t in times[lv]]
            med[lv] = statistics.median(vals)
            cells += f"{min(vals):12.1f}{med[lv]:12.1f}"
        print(f"{name:20}{cells}" + "".join(f"{med[base] / med[lv]:13.2f}x" for lv in levels[1:]))


if __name__ == "__main__":
    main()
