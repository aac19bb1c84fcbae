"""Where a generate() token's process time goes, neuron vs PyTorch CPU, by library.

Runs greedy generate() (tests/model_zoo.py "small", batch 1) a fixed number of
times per side in a child process under `perf record` (attached after the
warm-up, detached when the calls end, so both sides are sampled over the same
work) and prints microseconds per token by category: CPython, PyTorch's
Python binding, ATen / c10, the products' kernels (MKL's gemv / gemm on CPU,
libtrn's weight-cache kernels and oneDNN's JIT code on neuron; with
TORCH_NEURONX_WEIGHT_CACHE_SIZE=0 libtrn's products count as libtrn), the
rest of libtrn, the adapter (`_C`), pthread mutexes, the rest of libc, the
kernel and other. The Python each side
runs is the same (one generate() makes the same Python calls on both), so the
CPython row measures the run's noise: compare the other rows with it in mind.
Needs `perf` (`kernel.perf_event_paranoid` <= 1 or root). One thread a side:

    OMP_NUM_THREADS=1 TORCH_NEURONX_NUM_THREADS=1 \\
        .venv/bin/python bench/bench_generate_split.py [--models llama,gpt2] [--calls 20]
"""

import argparse
import collections
import os
import signal
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
TOKENS = 32

CATEGORIES = (
    "python",
    "torch_python",
    "aten/c10",
    "products",
    "libtrn",
    "_C",
    "mutex",
    "libc",
    "kernel",
    "other",
)


def child(device, model, calls):
    sys.path.insert(0, os.path.join(HERE, "..", "tests"))
    sys.path.insert(0, HERE)
    import torch

    import model_zoo as zoo
    import torch_neuronx  # noqa: F401
    from bench_models import make_generate

    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1")))
    torch.manual_seed(0)
    m = zoo.MODELS[model]("small").eval().to(device)
    ids = torch.randint(0, zoo.VOCAB, (1, 8), generator=torch.Generator().manual_seed(0))
    run = make_generate(m, device, ids, TOKENS)
    for _ in range(3):
        run()
    print("READY", flush=True)
    sys.stdin.readline()  # the parent's perf is attached
    t = time.process_time()
    for _ in range(calls):
        run()
    print(f"DONE {(time.process_time() - t) / calls / TOKENS * 1e6:.1f}", flush=True)
    sys.stdin.readline()


def category(dso, sym):
    if any(k in sym for k in ("gemv", "sgemm", "wc_panels", "tile_mm", "brgemm")) or dso.startswith(
        "[JIT]"
    ):
        return "products"  # oneDNN's JIT code is only its product kernels here
    if "python3" in dso:
        return "python"
    if "torch_python" in dso:
        return "torch_python"
    if dso.startswith(("libtorch_cpu", "libc10")):
        return "aten/c10"
    if dso.startswith("libtrn"):
        return "libtrn"
    if dso.startswith("_C."):
        return "_C"
    if "pthread_mutex" in sym:
        return "mutex"
    if dso.startswith("libc."):
        return "libc"
    if "kernel" in dso:
        return "kernel"
    return "other"


def sample(device, model, calls, freq):
    data = tempfile.mktemp(prefix="gen_split_", suffix=".data")
    p = subprocess.Popen(
        [sys.executable, __file__, "--child", device, model, str(calls)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    while p.stdout.readline().strip() != "READY":
        pass
    perf = subprocess.Popen(
        ["perf", "record", "-F", str(freq), "-p", str(p.pid), "-o", data],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    time.sleep(0.5)  # perf attached
    p.stdin.write("\n")
    p.stdin.flush()
    line = p.stdout.readline()
    while not line.startswith("DONE"):
        line = p.stdout.readline()
    perf.send_signal(signal.SIGINT)
    perf.wait()
    p.stdin.write("\n")
    p.stdin.flush()
    p.wait()
    report = subprocess.run(
        ["perf", "report", "-i", data, "--sort", "dso,sym", "-F", "sample,dso,sym", "--stdio"],
        capture_output=True,
        text=True,
        env={**os.environ, "DEBUGINFOD_URLS": ""},
    ).stdout
    os.unlink(data)
    counts = collections.Counter()
    for row in report.splitlines():
        parts = row.split(None, 2)
        if row.startswith("#") or len(parts) < 3 or not parts[0].isdigit():
            continue
        counts[category(parts[1], parts[2])] += int(parts[0])
    us_per_sample = 1e6 / freq / (calls * TOKENS)
    return {k: v * us_per_sample for k, v in counts.items()}, float(line.split()[1])


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default="llama,gpt2")
    ap.add_argument("--calls", type=int, default=20, help="generate() calls sampled per side")
    ap.add_argument("--freq", type=int, default=5000, help="perf samples per second")
    ap.add_argument("--child", nargs=3, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        child(args.child[0], args.child[1], int(args.child[2]))
        return
    print(f"load {os.getloadavg()[0]:.1f}; us per token by category (perf samples)")
    for model in args.models.split(","):
        sides = {d: sample(d, model, args.calls, args.freq) for d in ("neuron", "cpu")}
        print(
            f"{model}: process time per token neuron {sides['neuron'][1]:.0f} us, "
            f"cpu {sides['cpu'][1]:.0f} us"
        )
        print(f"  {'category':14s} {'neuron':>8s} {'cpu':>8s} {'diff':>8s}")
        for c in CATEGORIES:
            n, k = sides["neuron"][0].get(c, 0.0), sides["cpu"][0].get(c, 0.0)
            print(f"  {c:14s} {n:8.0f} {k:8.0f} {n - k:+8.0f}")
        n, k = sum(sides["neuron"][0].values()), sum(sides["cpu"][0].values())
        print(f"  {'sampled':14s} {n:8.0f} {k:8.0f} {n - k:+8.0f}")


if __name__ == "__main__":
    main()
