"""Every ATen op of a training step timed inside the step, neuron vs PyTorch CPU.

A TorchDispatchMode around one AdamW step (bench_models.make_step; fusion off, so
each op runs its own kernel) synchronizes the device before and after each op and
adds the process CPU time in between to the op's key (name, dtype), so an op pays
what it pays in the model (host path, kernel, cold operands). Steps alternate the
devices; per key the minimum over steps is kept. Prints the ops sorted by how much
more time neuron spends on them than the CPU (the losers first) and the sums.
The mode's own Python cost is outside the timed windows. One thread each side:

    OMP_NUM_THREADS=1 TORCH_NEURONX_NUM_THREADS=1 \\
        .venv/bin/python bench/bench_ops_inmodel.py --model llama [--autocast] [--top 25]

`--threads 2` (with TORCH_NEURONX_NUM_THREADS=2 in the environment: libtrn's pool
size is read once, at its first use) times each op by wall clock instead: process
time would add both threads and the workers' spin. Wall times need a quiet machine:
on a loaded one libtrn's pool worker yields its core while it spins (parallel.c) and
rarely gets it back in time, so neuron runs its kernels on one thread, while
PyTorch's OpenMP workers keep spinning and take their share.
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

from bench_models import paired_steps  # noqa: E402
from torch_neuronx import eager_fusion  # noqa: E402


SPLIT = set()  # op names (--split) whose rows are split by operand shapes


def shapes_of(args, kwargs):
    """Each tensor operand's shape (with its strides when not contiguous) and
    the keyword dtype, so one op's calls split into the cases the model makes."""
    parts = []
    for a in args:
        if isinstance(a, torch.Tensor):
            s = "x".join(map(str, a.shape)) or "scalar"
            if not a.is_contiguous():
                s += "/s" + ",".join(map(str, a.stride()))
            parts.append(s)
    if isinstance(kwargs.get("dtype"), torch.dtype):
        parts.append("->" + str(kwargs["dtype"]).replace("torch.", ""))
    return " ".join(parts)


def key_of(func, args, kwargs=None):
    """(name, dtype); the devices' SDPA variants under one name. The optimizer
    differs by design (foreach lists on neuron, per-tensor ops on the CPU), so
    its ops do not pair up: their sums are comparable, not their rows. Ops
    named in SPLIT get their operand shapes appended to the name."""
    first = args[0] if args and isinstance(args[0], (list, tuple)) and args[0] else None
    t = (
        first[0]
        if first is not None
        else next((a for a in args if isinstance(a, torch.Tensor)), None)
    )
    dtype = str(t.dtype).replace("torch.", "") if isinstance(t, torch.Tensor) else "-"
    name = str(func.overloadpacket.__name__)
    if "scaled_dot_product" in name:
        name = "sdpa_backward" if name.endswith("backward") else "sdpa"
    if name in SPLIT or "all" in SPLIT:
        name += " " + shapes_of(args, kwargs or {})
    return (name, dtype)


class InModel(TorchDispatchMode):
    """Per op key: summed process CPU time and calls in one step."""

    def __init__(self, sync, clock=time.process_time):
        super().__init__()
        self.sync = sync
        self.clock = clock
        self.time = collections.Counter()
        self.calls = collections.Counter()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        key = key_of(func, args, kwargs)
        self.sync()
        c0 = self.clock()
        out = func(*args, **kwargs)
        self.sync()
        self.time[key] += self.clock() - c0
        self.calls[key] += 1
        return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="llama")
    ap.add_argument("--steps", type=int, default=4, help="measured steps per device")
    ap.add_argument("--autocast", action="store_true", help="bf16 autocast")
    ap.add_argument("--top", type=int, default=25)
    ap.add_argument(
        "--split", default="", help="comma-separated op names to split by shapes ('all': every op)"
    )
    ap.add_argument("--threads", type=int, default=1, help="CPU threads; > 1 times by wall clock")
    args = ap.parse_args()
    SPLIT.update(filter(None, args.split.split(",")))
    torch.set_num_threads(args.threads)
    clock = time.perf_counter if args.threads > 1 else time.process_time
    eager_fusion.set_enabled(False)
    steps, sync = paired_steps(args.model, args.autocast)
    for dev in steps:
        steps[dev]()
        steps[dev]()
    best = {dev: {} for dev in steps}
    calls = {}
    for _ in range(args.steps):
        for dev in ("neuron", "cpu"):
            mode = InModel(sync[dev], clock)
            with mode:
                steps[dev]()
            sync[dev]()
            for k, t in mode.time.items():
                best[dev][k] = min(best[dev].get(k, float("inf")), t)
                calls[k] = mode.calls[k]
    keys = set(best["neuron"]) | set(best["cpu"])
    rows = []
    for k in keys:
        n, c = best["neuron"].get(k, 0.0) * 1e3, best["cpu"].get(k, 0.0) * 1e3
        rows.append((n - c, k, n, c))
    rows.sort(reverse=True)
    tag = f"{args.model} {'bf16 autocast' if args.autocast else 'f32'}, {args.threads} thread(s)"
    print(f"{tag}: per-step ms in ops (min over {args.steps} steps), neuron - CPU, losers first")
    w = max([34] + [len(k[0]) + 2 for k in keys])
    print(f"{'op':{w}}{'dtype':10}{'calls':>6}{'neuron ms':>11}{'cpu ms':>9}{'cpu/neuron':>12}")
    for d, (op, dt), n, c in rows[: args.top]:
        r = c / n if n > 0 else float("nan")
        print(f"{op:{w}}{dt:10}{calls[(op, dt)]:6d}{n:11.3f}{c:9.3f}{r:12.2f}")
    tn = sum(r[2] for r in rows)
    tc = sum(r[3] for r in rows)
    print(f"{'all ops':{w + 16}}{tn:11.3f}{tc:9.3f}{tc / tn:12.2f}")


if __name__ == "__main__":
    main()
