"""Eager kernels: neuron (libtrn) vs PyTorch CPU eager, side by side in one run.

Every row times the same op on the same machine in the same process and prints
the ratio. For throughput rows (GB/s, GFLOP/s) ratio = neuron / CPU, higher is
better; for overhead rows (us/op) ratio = neuron / CPU, lower is better.
Targets (the benchmark's, never a test's): >= 1.0x CPU for large elementwise,
reductions, GEMM and conv; >= 85% of DRAM bandwidth for large elementwise;
tiny-op overhead <= 1.5x CPU's.

Run: make bench   (or .venv/bin/python bench/bench_ops.py [--quick])
"""

import argparse
import time
import warnings

import torch
import torch.nn.functional as F

import torch_neuronx  # noqa: F401

SYNC = {"neuron": torch.neuron.synchronize, "cpu": lambda: None}
ROWS = []  # (section, name, neuron value, cpu value, unit, higher_is_better)


def timeit(fn, device, min_time):
    """Best per-call seconds over rounds of back-to-back calls."""
    sync = SYNC[device]
    fn()
    sync()
    best, spent = float("inf"), 0.0
    reps = 1
    while spent < min_time:
        t0 = time.perf_counter()
        for _ in range(reps):
            fn()
        sync()
        dt = time.perf_counter() - t0
        spent += dt
        best = min(best, dt / reps)
        if dt < 0.05:
            reps *= 2
    return best


def row(section, name, neuron, cpu, unit, higher_is_better):
    ROWS.append((section, name, neuron, cpu, unit, higher_is_better))
    ratio = neuron / cpu
    print(f"  {name:38}{neuron:12.2f}{cpu:12.2f}  {unit:8}{ratio:7.2f}x", flush=True)


def header(title, unit):
    print(f"\n{title}\n  {'case':38}{'neuron':>12}{'cpu':>12}  {'unit':8}{'ratio':>8}")


def both(make, fn, min_time):
    """Times fn(*make(device)) on neuron and CPU."""
    args = {d: make(d) for d in ("neuron", "cpu")}
    return (
        timeit(lambda: fn(*args["neuron"]), "neuron", min_time),
        timeit(lambda: fn(*args["cpu"]), "cpu", min_time),
    )


def tiny_overhead(min_time):
    header("Host overhead per op on tiny tensors (4 elements)", "us/op")
    cases = [
        ("add", lambda d: (torch.ones(4, device=d), torch.ones(4, device=d)), torch.add),
        ("mul by python scalar", lambda d: (torch.ones(4, device=d),), lambda a: a * 2.0),
        ("exp", lambda d: (torch.ones(4, device=d),), torch.exp),
        ("relu_ (in place)", lambda d: (torch.ones(4, device=d),), torch.relu_),
        (
            "where",
            lambda d: (
                torch.ones(4, device=d) > 0,
                torch.ones(4, device=d),
                torch.zeros(4, device=d),
            ),
            torch.where,
        ),
        ("sum", lambda d: (torch.ones(4, device=d),), torch.sum),
        ("softmax", lambda d: (torch.ones(4, device=d),), lambda a: torch.softmax(a, 0)),
        ("mm 2x2", lambda d: (torch.ones(2, 2, device=d), torch.ones(2, 2, device=d)), torch.mm),
        (
            "index_select",
            lambda d: (torch.ones(4, device=d), torch.tensor([0, 2], device=d)),
            lambda a, i: a.index_select(0, i),
        ),
        (
            "cat",
            lambda d: (torch.ones(4, device=d), torch.ones(4, device=d)),
            lambda a, b: torch.cat([a, b]),
        ),
    ]
    for name, make, fn in cases:
        tn, tc = both(make, fn, min_time)
        row("overhead", name, tn * 1e6, tc * 1e6, "us/op", False)


def dram_bandwidth(min_time):
    """Copy bandwidth of the machine as PyTorch CPU's copy_ reaches it (all
    threads): the reference 'DRAM bandwidth' for elementwise rows."""
    n = 64 * 2**20 // 4 * 2  # 128 MiB per side: far beyond the caches
    a, b = torch.randn(n), torch.empty(n)
    t = timeit(lambda: b.copy_(a), "cpu", min_time)
    return 2 * n * 4 / t / 1e9


def large_elementwise(min_time, dram):
    header(
        f"Large elementwise, 16M float32 (64 MiB per tensor); DRAM copy "
        f"bandwidth measured now: {dram:.1f} GB/s",
        "GB/s",
    )
    n = 16 * 2**20
    cases = [
        ("add (a + b)", 3, lambda d: (torch.randn(n).to(d), torch.randn(n).to(d)), torch.add),
        ("mul (a * b)", 3, lambda d: (torch.randn(n).to(d), torch.randn(n).to(d)), torch.mul),
        ("gelu", 2, lambda d: (torch.randn(n).to(d),), F.gelu),
        ("exp", 2, lambda d: (torch.randn(n).to(d),), torch.exp),
        (
            "add_ in place (a += b)",
            3,
            lambda d: (torch.randn(n).to(d), torch.randn(n).to(d)),
            lambda a, b: a.add_(b),
        ),
        ("sigmoid bf16", 2, lambda d: (torch.randn(n).to(torch.bfloat16).to(d),), torch.sigmoid),
    ]
    for name, tensors, make, fn in cases:
        tn, tc = both(make, fn, min_time)
        nbytes = tensors * n * (2 if "bf16" in name else 4)
        gn, gc = nbytes / tn / 1e9, nbytes / tc / 1e9
        row("elementwise", name, gn, gc, "GB/s", True)
        print(f"  {'':38}{100 * gn / dram:11.0f}%{100 * gc / dram:11.0f}%  of DRAM copy bw")


def reductions(min_time):
    header("Reductions", "GB/s")
    cases = [
        ("sum, 16M float32", lambda d: (torch.randn(16 * 2**20).to(d),), torch.sum),
        ("sum dim 0, 4096x4096", lambda d: (torch.randn(4096, 4096).to(d),), lambda a: a.sum(0)),
        ("sum dim 1, 4096x4096", lambda d: (torch.randn(4096, 4096).to(d),), lambda a: a.sum(1)),
        (
            "softmax last dim, 4096x4096",
            lambda d: (torch.randn(4096, 4096).to(d),),
            lambda a: torch.softmax(a, -1),
        ),
        (
            "var_mean last dim, 8192x1024 (LN-sized)",
            lambda d: (torch.randn(8192, 1024).to(d),),
            lambda a: torch.var_mean(a, -1),
        ),
        ("amax dim 1, 4096x4096", lambda d: (torch.randn(4096, 4096).to(d),), lambda a: a.amax(1)),
    ]
    for name, make, fn in cases:
        tn, tc = both(make, fn, min_time)
        nbytes = 16 * 2**20 * 4 if "16M" in name or "4096x4096" in name else 8192 * 1024 * 4
        row("reduction", name, nbytes / tn / 1e9, nbytes / tc / 1e9, "GB/s", True)


def gemm(min_time):
    header("GEMM, float32 square", "GFLOP/s")
    for n in [128, 256, 512, 1024, 2048]:
        tn, tc = both(
            lambda d: (torch.randn(n, n).to(d), torch.randn(n, n).to(d)), torch.mm, min_time
        )
        flops = 2 * n**3
        row("gemm", f"mm {n}", flops / tn / 1e9, flops / tc / 1e9, "GFLOP/s", True)
    b, m, k, n = 16, 256, 256, 256
    tn, tc = both(
        lambda d: (torch.randn(b, m, k).to(d), torch.randn(b, k, n).to(d)), torch.bmm, min_time
    )
    flops = 2 * b * m * n * k
    row("gemm", "bmm 16x256x256x256", flops / tn / 1e9, flops / tc / 1e9, "GFLOP/s", True)


def conv(min_time):
    header("conv2d forward, ResNet-like shapes, float32", "GFLOP/s")
    shapes = [  # N, C, H, W, K, kernel, stride
        (8, 64, 56, 56, 64, 3, 1),
        (8, 128, 28, 28, 128, 3, 1),
        (8, 256, 14, 14, 256, 3, 1),
        (8, 64, 56, 56, 256, 1, 1),
    ]
    for nb, c, h, w, k, r, s in shapes:
        pad = r // 2
        tn, tc = both(
            lambda d: (torch.randn(nb, c, h, w).to(d), torch.randn(k, c, r, r).to(d)),
            lambda x, wt: F.conv2d(x, wt, stride=s, padding=pad),
            min_time,
        )
        ho, wo = (h + 2 * pad - r) // s + 1, (w + 2 * pad - r) // s + 1
        flops = 2 * nb * k * ho * wo * c * r * r
        row(
            "conv",
            f"{nb}x{c}x{h}x{w} -> {k}, {r}x{r}",
            flops / tn / 1e9,
            flops / tc / 1e9,
            "GFLOP/s",
            True,
        )


def summary():
    print("\nWorst ratios against the targets (>= 1.0x throughput, <= 1.5x overhead):")
    scored = []
    for section, name, n, c, unit, higher in ROWS:
        ratio = n / c
        # Normalise so that 1.0 means "exactly on target", lower is worse.
        score = ratio if higher else 1.5 / ratio
        scored.append((score, section, name, ratio))
    for score, section, name, ratio in sorted(scored)[:5]:
        print(f"  {section:12}{name:40}{ratio:7.2f}x  ({score:.2f} of target)")


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--quick", action="store_true", help="shorter timing (noisier)")
    args = p.parse_args()
    # Fallback warnings (ops without a native kernel yet) would interleave
    # with the table; get_fallback_ops() is the place to look for them.
    warnings.simplefilter("ignore", UserWarning)
    min_time = 0.2 if args.quick else 0.6
    torch.manual_seed(0)
    print(
        f"PyTorch {torch.__version__}, CPU threads {torch.get_num_threads()}, "
        f"neuron threads {torch_neuronx._C._num_threads()}"
    )
    tiny_overhead(min_time)
    large_elementwise(min_time, dram_bandwidth(min_time))
    reductions(min_time)
    gemm(min_time)
    conv(min_time)
    summary()


if __name__ == "__main__":
    main()
