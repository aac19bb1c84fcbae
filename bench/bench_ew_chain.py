"""A chain of dependent float32 elementwise ops, neuron vs PyTorch CPU, us per op.

Each op reads the previous ops' outputs, as a model's forward and backward do,
so its operands sit wherever the ops before left them: at two threads, in the
L2 of the core that wrote each part. A loop that repeats one op on the same
tensors hides what that costs (its split lands the same way every call); this
chain shows it. Fusion is off (every op its own kernel). Each side runs in its
own process (no OpenMP worker of the other runtime spinning on the second
core), the processes take turns of `--calls` chains over `--rounds` rounds,
and the ratio is the median of the per-round CPU / neuron (the VM's speed
phases cancel within a round). Run under `chrt -f 1` on a loaded machine:

    .venv/bin/python bench/bench_ew_chain.py [--threads 2] [--shapes 8x64x256,8x64x1024]
"""

import argparse
import os
import statistics
import subprocess
import sys
import time

OPS_PER_CHAIN = 8


def serve(device, shape):
    import torch

    import torch_neuronx
    from torch_neuronx import eager_fusion

    eager_fusion.set_enabled(False)
    torch.manual_seed(0)
    x = torch.randn(shape).to(device)
    s = torch.randn(shape).to(device)

    def sync():
        if device == "neuron":
            torch_neuronx.synchronize()

    def chain():
        a = x * s
        b = a + x
        c = b * s
        d = c - a
        e = d * b
        f = e + c
        g = f * a
        return g + d

    print("READY", flush=True)
    for line in sys.stdin:
        calls = int(line)
        for _ in range(3):
            chain()
        sync()
        t = time.perf_counter()
        for _ in range(calls):
            chain()
        sync()
        print(f"{(time.perf_counter() - t) / calls / OPS_PER_CHAIN * 1e6:.3f}", flush=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--shapes", default="8x64x256,8x64x1024")
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--calls", type=int, default=20)
    ap.add_argument("--serve", help=argparse.SUPPRESS)
    ap.add_argument("--shape", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.serve:
        serve(args.serve, tuple(int(v) for v in args.shape.split("x")))
        return
    t = str(args.threads)
    env = dict(os.environ, OMP_NUM_THREADS=t, TORCH_NEURONX_NUM_THREADS=t)
    print(f"{OPS_PER_CHAIN} dependent elementwise ops a chain, {t} threads, us per op min / median")
    for shape in args.shapes.split(","):
        procs = {}
        for dev in ("neuron", "cpu"):
            cmd = [sys.executable, __file__, "--serve", dev, "--shape", shape]
            procs[dev] = subprocess.Popen(
                cmd, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
            )
        for p in procs.values():
            while p.stdout.readline().strip() != "READY":
                if p.poll() is not None:
                    raise RuntimeError("a child failed to start")
        us = {dev: [] for dev in procs}
        for r in range(args.rounds):
            for dev in procs if r % 2 == 0 else list(procs)[::-1]:
                procs[dev].stdin.write(f"{args.calls}\n")
                procs[dev].stdin.flush()
                us[dev].append(float(procs[dev].stdout.readline()))
        for p in procs.values():
            p.stdin.close()
            p.wait()
        ratio = statistics.median(c / n for c, n in zip(us["cpu"], us["neuron"]))
        cells = "  ".join(f"{d} {min(v):7.1f} / {statistics.median(v):7.1f}" for d, v in us.items())
        print(f"{shape:12s} {cells}  cpu/neuron {ratio:.2f}", flush=True)
    print(f"load after: {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
