"""The SDPA forward inside a training step, neuron vs PyTorch CPU, and what
changes its time: each forward call of the step (a TorchDispatchMode, fusion
off) is timed by wall clock between two synchronizes, after one of these:

    none     nothing (as bench_ops_inmodel.py times it)
    warmin   q, k and v read by a reduction first (operands in cache)
    warmout  buffers of out / lse / kept-probability sizes written and freed
             first (the allocator hands them back warm)
    twice    the same call made once before (operands and outputs warm)

plus the process's minor page faults during the timed call. Two threads:

    TORCH_NEURONX_NUM_THREADS=2 chrt -f 1 .venv/bin/python \\
        bench/bench_sdpa_inmodel.py [--model bert] [--pre none,twice] [--rounds 5]
"""

import argparse
import collections
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests"))
sys.path.insert(0, os.path.dirname(__file__))

import torch  # noqa: E402
from torch.utils._python_dispatch import TorchDispatchMode  # noqa: E402

from bench_models import paired_steps  # noqa: E402
from torch_neuronx import eager_fusion  # noqa: E402


def minflt():
    with open("/proc/self/stat") as f:
        return int(f.read().split()[9])


class Probe(TorchDispatchMode):
    def __init__(self, dev, sync, pre, times, faults):
        super().__init__()
        self.dev, self.sync, self.pre, self.times, self.faults = dev, sync, pre, times, faults

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        name = func.overloadpacket.__name__
        if "scaled_dot_product" not in name or name.endswith("backward"):
            return func(*args, **kwargs)
        q, k, v = args[:3]
        B, H, L, Ev = q.shape[0], q.shape[1], q.shape[2], v.shape[3]
        if self.pre == "warmin":
            for t in (q, k, v):
                torch.ops.aten.sum(t)
        elif self.pre == "warmout":
            for n in (B * L * H * Ev, B * H * L * 64, B * H * L):
                torch.empty(n, device=self.dev).fill_(0.0)
        elif self.pre == "twice":
            func(*args, **kwargs)
        self.sync()
        f0, t0 = minflt(), time.perf_counter()
        out = func(*args, **kwargs)
        self.sync()
        self.times.append(time.perf_counter() - t0)
        self.faults.append(minflt() - f0)
        return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="bert")
    ap.add_argument("--pre", default="none,warmin,warmout,twice")
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args()
    torch.set_num_threads(2)
    eager_fusion.set_enabled(False)
    steps, sync = paired_steps(args.model)
    for dev in steps:
        steps[dev]()
        steps[dev]()
    times, faults = collections.defaultdict(list), collections.defaultdict(list)
    pres = args.pre.split(",")
    for _ in range(args.rounds):
        for pre in pres:
            for dev in ("neuron", "cpu"):
                with Probe(dev, sync[dev], pre, times[pre, dev], faults[pre, dev]):
                    steps[dev]()
                sync[dev]()
    print(f"{args.model}: SDPA forward in the step, us per call (min / median), minor faults")
    for pre in pres:
        row = []
        for dev in ("neuron", "cpu"):
            t = sorted(times[pre, dev])
            row.append(
                f"{dev} {t[0] * 1e6:6.1f} / {statistics.median(t) * 1e6:6.1f}"
                f" ({sum(faults[pre, dev])} faults)"
            )
        print(f"{pre:8} " + "   ".join(row) + f"   ({len(times[pre, 'neuron'])} calls)")


if __name__ == "__main__":
    main()
