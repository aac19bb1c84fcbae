"""float16 products and convolutions per call: neuron vs PyTorch CPU, alternated.

Each case runs on neuron and on the CPU in turns (one call each, the order
swapped every round) so both see the same load; it prints min and median
milliseconds per call and the ratio of the medians (CPU / neuron, > 1: neuron
faster). With --f32 each case also runs in float32 on neuron (the staged
float16 path's floor: its product alone).

    PYTHONPATH=. python bench/bench_f16.py [--rounds 20] [--cases mm,conv] [--f32]

Under SCHED_FIFO (chrt) one process running both sides is unreliable: the
side that just ran leaves spinning threads (PyTorch's OpenMP team, libtrn's
pool) that a FIFO thread of the other side cannot preempt, and CPU float16
calls measured 10x slower in one run than in the next. `--side cpu` or
`--side neuron` times one side only, one line per case; run the sides (and a
baseline build through PYTHONPATH) as separate processes, alternated.
"""

import argparse
import os
import statistics
import time

import torch
import torch.nn.functional as F

import torch_neuronx  # noqa: F401


def mm_case(m, k, n, ta=False, tb=False):
    def make(dev, dt):
        g = torch.Generator().manual_seed(0)
        a = torch.randn((k, m) if ta else (m, k), generator=g).to(dt).to(dev)
        b = torch.randn((n, k) if tb else (k, n), generator=g).to(dt).to(dev)
        a = a.t() if ta else a
        b = b.t() if tb else b
        return lambda: torch.mm(a, b)

    return make


def linear_case(m, k, n):
    def make(dev, dt):
        g = torch.Generator().manual_seed(0)
        x = torch.randn(m, k, generator=g).to(dt).to(dev)
        w = torch.randn(n, k, generator=g).to(dt).to(dev)
        b = torch.randn(n, generator=g).to(dt).to(dev)
        return lambda: F.linear(x, w, b)

    return make


def bmm_case(b, m, k, n):
    def make(dev, dt):
        g = torch.Generator().manual_seed(0)
        x = torch.randn(b, m, k, generator=g).to(dt).to(dev)
        y = torch.randn(b, k, n, generator=g).to(dt).to(dev)
        return lambda: torch.bmm(x, y)

    return make


def conv_case(n, c, hw, o, backward):
    def make(dev, dt):
        g = torch.Generator().manual_seed(0)
        x = torch.randn(n, c, hw, hw, generator=g).to(dt).to(dev).requires_grad_(backward)
        w = torch.randn(o, c, 3, 3, generator=g).mul(0.1).to(dt).to(dev).requires_grad_(backward)
        if not backward:
            return lambda: F.conv2d(x, w, padding=1)
        y = F.conv2d(x, w, padding=1)
        gy = torch.randn(y.shape, generator=g).to(dt).to(dev)

        def run():
            return torch.autograd.grad(y, (x, w), gy, retain_graph=True)

        return run

    return make


def sdpa_case(b, h, s, d):
    def make(dev, dt):
        g = torch.Generator().manual_seed(0)
        q, k, v = (torch.randn(b, h, s, d, generator=g).to(dt).to(dev) for _ in range(3))
        return lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True)

    return make


CASES = {
    "mm2048": mm_case(2048, 2048, 2048),
    "mm512x256x1024": mm_case(512, 256, 1024),
    "mm512x256x1024nt": mm_case(512, 256, 1024, tb=True),
    "mm512x256x1024tn": mm_case(512, 256, 1024, ta=True),
    "linear512x256x1024": linear_case(512, 256, 1024),
    "linear512x1024x256": linear_case(512, 1024, 256),
    "bmm32x64x64x64": bmm_case(32, 64, 64, 64),
    "bmm8x256x64x256": bmm_case(8, 256, 64, 256),
    "conv8x64x32x32": conv_case(8, 64, 32, 64, False),
    "conv8x64x32x32bwd": conv_case(8, 64, 32, 64, True),
    "conv32x16x32x32": conv_case(32, 16, 32, 16, False),
    "conv32x16x32x32bwd": conv_case(32, 16, 32, 16, True),
    "sdpa8x4x64x64": sdpa_case(8, 4, 64, 64),
}


def sync(dev):
    if dev == "neuron":
        torch.neuron.synchronize()


def timed(fn, dev):
    t = time.perf_counter()
    fn()
    sync(dev)
    return (time.perf_counter() - t) * 1e3


def side_only(args):
    dev = args.side
    for name in args.cases.split(","):
        fn = CASES[name](dev, torch.float16)
        for _ in range(2):
            timed(fn, dev)
        ms = sorted(timed(fn, dev) for _ in range(args.rounds))
        print(f"{name:22s} {dev:7s} {ms[0]:8.3f} {statistics.median(ms):8.3f}", flush=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=20)
    ap.add_argument("--cases", default=",".join(CASES))
    ap.add_argument("--f32", action="store_true", help="also time neuron float32")
    ap.add_argument("--side", choices=("cpu", "neuron"), help="time one side only")
    args = ap.parse_args()
    if args.side:
        side_only(args)
        return
    print(
        f"float16 per call, ms min/median over {args.rounds} alternated rounds; "
        f"torch threads {torch.get_num_threads()}, load {os.getloadavg()[0]:.1f}"
    )
    head = f"{'case':22s} {'neuron':>15s} {'cpu':>15s} {'ratio':>6s}"
    if args.f32:
        head += f" {'neuron f32':>15s}"
    print(head, flush=True)
    for name in args.cases.split(","):
        sides = [("neuron", torch.float16), ("cpu", torch.float16)]
        if args.f32:
            sides.append(("neuron", torch.float32))
        fns = [CASES[name](dev, dt) for dev, dt in sides]
        for (dev, _), fn in zip(sides, fns):
            for _ in range(2):
                timed(fn, dev)
        ms = [[] for _ in sides]
        for r in range(args.rounds):
            order = range(len(sides)) if r % 2 == 0 else reversed(range(len(sides)))
            for i in order:
                ms[i].append(timed(fns[i], sides[i][0]))
        med = [statistics.median(v) for v in ms]

        def cell(v, m):
            return f"{min(v):7.3f}/{m:7.3f}"

        line = f"{name:22s} {cell(ms[0], med[0]):>15s} {cell(ms[1], med[1]):>15s} {med[1] / med[0]:6.2f}"
        if args.f32:
            line += f" {cell(ms[2], med[2]):>15s}"
        print(line, flush=True)
    print(f"load after: {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
