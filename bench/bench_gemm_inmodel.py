"""Every GEMM of a training step timed inside the step, neuron vs PyTorch CPU.

bench_gemm_shapes.py times each distinct GEMM of a step alone, repeated on
the same operands (warm caches, plans, packed weights). This tool times the
same calls where the model makes them: a TorchDispatchMode around one AdamW
step (bench_models.make_step) synchronizes the device before and after each
mm/addmm/bmm/baddbmm and adds the process CPU time in between to that
call's key. So a call pays what it pays in the model: operands cold in
cache after the ops before it, a fresh output, the stream hand-off, thread
wake-up. Steps alternate the devices; per call key the minimum over steps
is kept. The same calls are then replayed in isolation (each repeated, as
bench_gemm_shapes.py does) and in model order (the step's GEMM sequence
back to back on fresh operands), so the three columns split the in-model
cost into the kernel's own, the sequence's and the rest of the model's.

Compare with one thread each side and process CPU time (the machine is
shared):

    OMP_NUM_THREADS=1 TORCH_NEURONX_NUM_THREADS=1 \\
        .venv/bin/python bench/bench_gemm_inmodel.py --model llama [--autocast]
"""

import argparse
import collections
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests"))
sys.path.insert(0, os.path.dirname(__file__))

import torch  # noqa: E402
from torch.utils._python_dispatch import TorchDispatchMode  # noqa: E402

import torch_neuronx  # noqa: E402,F401
from bench_gemm_shapes import OPS, operand  # noqa: E402
from bench_models import paired_steps  # noqa: E402


def key_of(func, args, kwargs):
    tens = tuple((tuple(a.shape), tuple(a.stride())) for a in args if isinstance(a, torch.Tensor))
    dtype = next(a.dtype for a in args if isinstance(a, torch.Tensor))
    scal = tuple(kwargs.get(k, 1) for k in ("beta", "alpha"))
    return (OPS[func], tens, scal, dtype)


class InModel(TorchDispatchMode):
    """Per GEMM key: summed process CPU time of its calls in one step; also
    the step's call sequence."""

    def __init__(self, sync, clock):
        super().__init__()
        self.sync = sync
        self.clock = clock
        self.time = collections.Counter()
        self.order = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func not in OPS:
            return func(*args, **kwargs)
        key = key_of(func, args, kwargs)
        self.sync()
        c0 = self.clock()
        out = func(*args, **kwargs)
        self.sync()
        self.time[key] += self.clock() - c0
        self.order.append(key)
        return out


def macs_of(key):
    """Multiply-adds of one call: batch x m x k x n from A's and B's shapes."""
    op, tens, _, _ = key
    a, b = (tens[1], tens[2]) if op in ("addmm", "baddbmm") else (tens[0], tens[1])
    a, b = a[0], b[0]
    batch = a[0] if len(a) == 3 else 1
    return batch * a[-2] * a[-1] * b[-1]


def make_fn(key, dev, gen):
    op, tens, (beta, alpha), dtype = key
    ts = [operand(s, st, dev, gen, dtype) for s, st in tens]
    f = getattr(torch, op)
    kw = {"beta": beta, "alpha": alpha} if op in ("addmm", "baddbmm") else {}
    return lambda: f(*ts, **kw)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="llama")
    ap.add_argument("--steps", type=int, default=4, help="measured steps per device")
    ap.add_argument("--reps", type=int, default=5, help="isolated repeats per call")
    ap.add_argument("--autocast", action="store_true", help="bf16 autocast")
    ap.add_argument(
        "--wall",
        action="store_true",
        help="wall clock instead of process CPU time (two threads: a call's time, not its work)",
    )
    args = ap.parse_args()
    clock = time.perf_counter if args.wall else time.process_time
    steps, sync = paired_steps(args.model, args.autocast)
    for dev in steps:  # warm-up: plans, allocator, compiles
        steps[dev]()
        steps[dev]()
    inmodel = {dev: {} for dev in steps}
    step_cpu = {dev: float("inf") for dev in steps}
    order = None
    for _ in range(args.steps):
        for dev in ("neuron", "cpu"):
            sync[dev]()
            c0 = clock()
            steps[dev]()  # plain step: whole-step time
            sync[dev]()
            step_cpu[dev] = min(step_cpu[dev], clock() - c0)
            mode = InModel(sync[dev], clock)
            with mode:
                steps[dev]()
            for k, t in mode.time.items():
                inmodel[dev][k] = min(inmodel[dev].get(k, float("inf")), t)
            order = mode.order
    counts = collections.Counter(order)
    # Isolated: each call repeated on its own operands. Sequence: the step's
    # GEMMs in model order, each on its own fresh operands, timed per call.
    iso = {dev: {} for dev in steps}
    seq = {dev: collections.Counter() for dev in steps}
    for dev in ("neuron", "cpu"):
        g = torch.Generator().manual_seed(1)
        fns = {k: make_fn(k, dev, g) for k in counts}
        for k, fn in fns.items():
            fn()
            sync[dev]()
            c0 = clock()
            for _ in range(args.reps):
                fn()
            sync[dev]()
            iso[dev][k] = (clock() - c0) / args.reps * counts[k]
        best = None
        for _ in range(3):
            run = collections.Counter()
            for k in order:
                sync[dev]()
                c0 = clock()
                fns[k]()
                sync[dev]()
                run[k] += clock() - c0
            if best is None or sum(run.values()) < sum(best.values()):
                best = run
        seq[dev] = best
    rows = sorted(counts, key=lambda k: -inmodel["neuron"][k])
    print(
        f"{args.model}{' bf16 autocast' if args.autocast else ' f32'}: {len(order)} GEMM calls, "
        f"{torch.get_num_threads()} threads; {'wall' if args.wall else 'process CPU'} ms per step (all calls of a key), "
        f"min of {args.steps} steps"
    )
    print(
        f"{'op':6s} {'operands (shape/stride)':52s} {'n':>3s} "
        f"{'in-model neu/cpu':>17s} {'isolated neu/cpu':>17s} {'sequence neu/cpu':>17s}"
    )
    tot = collections.Counter()
    for k in rows:
        op, tens, _, _ = k
        desc = " ".join(f"{'x'.join(map(str, s))}/{','.join(map(str, st))}" for s, st in tens)
        cols = []
        for name, tab in (("in", inmodel), ("iso", iso), ("seq", seq)):
            n, c = tab["neuron"][k], tab["cpu"][k]
            tot[name + "n"] += n
            tot[name + "c"] += c
            cols.append(f"{n * 1e3:7.2f} {c * 1e3:7.2f}  ")
        print(f"{op:6s} {desc:52s} {counts[k]:3d} " + " ".join(cols))
    print("total (ms)" + " " * 52, end="")
    for name in ("in", "iso", "seq"):
        n, c = tot[name + "n"], tot[name + "c"]
        print(f"{n * 1e3:7.1f} {c * 1e3:7.1f} ({n / c:4.2f}x)", end=" ")
    print()
    macs = sum(macs_of(k) * n for k, n in counts.items())
    print(
        f"{macs / 1e9:.2f} G multiply-adds per step: in-model rate neuron "
        f"{macs / tot['inn'] / 1e9:.1f}, cpu {macs / tot['inc'] / 1e9:.1f} G/s per {'second' if args.wall else 'CPU-second'}"
    )
    print(
        f"whole step {'wall' if args.wall else 'CPU'} time: neuron {step_cpu['neuron'] * 1e3:.1f} ms, "
        f"cpu {step_cpu['cpu'] * 1e3:.1f} ms ({step_cpu['neuron'] / step_cpu['cpu']:.2f}x)"
    )


if __name__ == "__main__":
    main()
