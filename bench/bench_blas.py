"""GFLOP/s of neuron (libtrn matmul/conv via oneDNN) vs PyTorch CPU, same run.
Usage: PYTHONPATH=. python bench/bench_blas.py"""

import time

import torch
import torch.nn.functional as F

import torch_neuronx  # noqa: F401


def timeit(fn, sync, min_time=1.0):
    fn()  # warm-up (plans, caches)
    sync()
    n, t0 = 0, time.perf_counter()
    while True:
        fn()
        n += 1
        sync()
        dt = time.perf_counter() - t0
        if dt >= min_time and n >= 3:
            return dt / n


def main():
    torch.manual_seed(0)
    cpu_sync = lambda: None
    dev_sync = torch.neuron.synchronize
    print(f"threads: torch {torch.get_num_threads()}")
    print(f"{'case':34s} {'cpu GF/s':>9s} {'neuron GF/s':>12s} {'ratio':>6s}")
    for n in [128, 512, 1024, 2048]:
        a, b = torch.randn(n, n), torch.randn(n, n)
        ad, bd = a.to("neuron"), b.to("neuron")
        flops = 2.0 * n**3
        tc = timeit(lambda: torch.mm(a, b), cpu_sync)
        tn = timeit(lambda: torch.mm(ad, bd), dev_sync)
        print(
            f"{'mm f32 %d^3' % n:34s} {flops / tc / 1e9:9.1f} {flops / tn / 1e9:12.1f} {tc / tn:6.2f}"
        )
    x, w = torch.randn(8, 64, 56, 56), torch.randn(64, 64, 3, 3)
    xd, wd = x.to("neuron"), w.to("neuron")
    flops = 2.0 * 8 * 64 * 56 * 56 * 64 * 9
    tc = timeit(lambda: F.conv2d(x, w, padding=1), cpu_sync)
    tn = timeit(lambda: F.conv2d(xd, wd, padding=1), dev_sync)
    print(
        f"{'conv2d fwd 8x64x56x56 k3 p1':34s} {flops / tc / 1e9:9.1f} {flops / tn / 1e9:12.1f} {tc / tn:6.2f}"
    )


if __name__ == "__main__":
    main()
