"""Adaptive Eager Execution on the issue's elementwise-heavy chain: GELU-tanh
written out in 8 eager ops on 16M float32 elements. Prints the median time of
PyTorch CPU eager, neuron unfused and neuron fused, and the ratios side by
side (one process, interleaved rounds: a noisy shared machine moves all
three alike).

    python bench/bench_eager_fusion.py [--n 16777216] [--rounds 7]
"""

import argparse
import statistics
import time

import torch

import torch_neuronx  # noqa: F401  (the neuron device)
from torch_neuronx import eager_fusion


def gelu_tanh_8(x):
    inner = x + 0.044715 * torch.pow(x, 3)
    t = torch.tanh(0.7978845608028654 * inner)
    return 0.5 * x * (1.0 + t)


def timed(fn, x, sync):
    t0 = time.perf_counter()
    y = fn(x)
    sync(y)
    return time.perf_counter() - t0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=16 * 1024 * 1024)
    ap.add_argument("--rounds", type=int, default=7)
    args = ap.parse_args()
    x_cpu = torch.randn(args.n)
    x = x_cpu.to("neuron")

    def neuron_sync(y):
        torch.neuron.synchronize()

    eager_fusion.set_enabled(True)
    # The fused kernel itself is measured: no adaptive timing runs in between.
    eager_fusion.set_adaptive(False)
    for _ in range(3):  # first sightings run unfused; the kernel compiles in the background
        gelu_tanh_8(x)
        torch.neuron.synchronize()
    assert eager_fusion.wait_for_compiles(600)
    gelu_tanh_8(x)
    torch.neuron.synchronize()
    assert eager_fusion.recent_groups()[-1]["fused"], eager_fusion.recent_groups()[-1]
    fused_out = gelu_tanh_8(x).cpu()
    eager_fusion.set_enabled(False)
    assert torch.equal(fused_out, gelu_tanh_8(x).cpu()), "fused and unfused results differ"

    cpu, unfused, fused = [], [], []
    for _ in range(args.rounds):
        cpu.append(timed(gelu_tanh_8, x_cpu, lambda y: None))
        eager_fusion.set_enabled(False)
        unfused.append(timed(gelu_tanh_8, x, neuron_sync))
        eager_fusion.set_enabled(True)
        fused.append(timed(gelu_tanh_8, x, neuron_sync))
    eager_fusion.set_enabled(False)
    c, u, f = (statistics.median(v) * 1e3 for v in (cpu, unfused, fused))
    print(f"GELU-tanh, 8 eager ops, {args.n} float32, torch threads {torch.get_num_threads()}")
    print(f"  PyTorch CPU eager : {c:8.2f} ms   1.00x")
    print(f"  neuron unfused    : {u:8.2f} ms   {c / u:5.2f}x CPU")
    print(f"  neuron fused      : {f:8.2f} ms   {c / f:5.2f}x CPU   {u / f:5.2f}x unfused")


if __name__ == "__main__":
    main()
