"""A training step's kernels with Adaptive Eager on, against fusion off and PyTorch CPU.

bench_ops_inmodel.py times each op with fusion off (its per-op syncs would end
every group). This one leaves the step alone: the neuron step
(bench_models.make_step) runs under torch.profiler's PrivateUse1 activity, with
fusion on and off alternated step by step in one process, and each kernel's
device time (from its launch to its end, inline on the calling thread) is
summed per step: a fused group is one kernel, keyed by its ops and end reason
(the trace's detail), everything else by its op (`trn::mm`, a replayed or lone
`trn::mul`, the foreach chain under the op that flushed it). Per key the
minimum over the steps is kept, so one slow step under load does not count.
It also prints one steady step's groups (ops, end reason, fused or not, count)
and the pattern cache, and with `--cpu` PyTorch CPU's per-op times (wall clock,
bench_ops_inmodel's dispatch mode: each op timed alone, no sync needed).

    TORCH_NEURONX_NUM_THREADS=2 .venv/bin/python bench/bench_fusion_inmodel.py \\
        --model gpt2 --threads 2 [--steps 6] [--cpu] [--top 40]

The device times exclude host work (recording, keying, Python); a fused
group's kernel includes its program's set-up. Wall times at two threads need a
quiet machine (bench_ops_inmodel.py's docstring says why); `chrt -f 1` helps.
"""

import argparse
import collections
import json
import os
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests"))
sys.path.insert(0, os.path.dirname(__file__))

import torch  # noqa: E402
from torch.profiler import ProfilerActivity, profile  # noqa: E402

from bench_models import paired_steps  # noqa: E402
from bench_ops_inmodel import InModel  # noqa: E402
from torch_neuronx import eager_fusion  # noqa: E402


def short(ops):
    return ",".join(o.replace("aten::", "") for o in ops)


def kernel_ms(step):
    """Device ms per kernel key in one profiled step, and calls per key."""
    with profile(activities=[ProfilerActivity.PrivateUse1]) as prof:
        step()
    fd, path = tempfile.mkstemp(suffix=".json")
    os.close(fd)
    try:
        prof.export_chrome_trace(path)
        with open(path) as f:
            events = json.load(f)["traceEvents"]
    finally:
        os.unlink(path)
    ms, calls = collections.Counter(), collections.Counter()
    for e in events:
        if e.get("cat") != "kernel" or not e.get("name", "").startswith("trn::"):
            continue
        key = e["name"]
        detail = e.get("args", {}).get("input shapes", "")
        if key.startswith("trn::fused[") and detail.startswith("end="):
            end, _, ops = detail.partition(" ops=")
            key = f"fused {short(ops.split(','))} ({end})"
        ms[key] += e["dur"] / 1e3
        calls[key] += 1
    return ms, calls


def census(step):
    """One step's groups of two or more ops: (ops, end, fused) -> count."""
    eager_fusion.clear_recent_groups()
    step()
    c = collections.Counter()
    for g in eager_fusion.recent_groups():
        c[(short(g["ops"]), g["end"], g["fused"])] += 1
    return c


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="gpt2")
    ap.add_argument("--autocast", action="store_true", help="bf16 autocast")
    ap.add_argument("--steps", type=int, default=6, help="profiled steps per side")
    ap.add_argument("--warmup", type=int, default=8, help="steps after the compiles finish")
    ap.add_argument("--threads", type=int, default=1, help="CPU threads")
    ap.add_argument("--cpu", action="store_true", help="also PyTorch CPU's per-op times")
    ap.add_argument("--top", type=int, default=40)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    steps, sync = paired_steps(args.model, args.autocast)
    dev = steps["neuron"]
    eager_fusion.set_enabled(True)
    for _ in range(3):
        dev()
    eager_fusion.wait_for_compiles()
    for _ in range(args.warmup):  # the adaptive trials
        dev()
    groups = census(dev)
    best = {True: {}, False: {}}
    ncalls = {True: {}, False: {}}
    for _ in range(args.steps):
        for on in (True, False):
            eager_fusion.set_enabled(on)
            ms, calls = kernel_ms(dev)
            for k, v in ms.items():
                if v < best[on].get(k, float("inf")):
                    best[on][k] = v
                ncalls[on][k] = calls[k]
    eager_fusion.set_enabled(True)
    cpu = {}
    if args.cpu:
        clock = time.perf_counter if args.threads > 1 else time.process_time
        for _ in range(2):
            steps["cpu"]()
        for _ in range(args.steps):
            mode = InModel(sync["cpu"], clock)
            with mode:
                steps["cpu"]()
            for (name, _dt), t in mode.time.items():
                cpu[name] = min(cpu.get(name, float("inf")), t * 1e3)

    tag = f"{args.model} {'bf16 autocast' if args.autocast else 'f32'}, {args.threads} thread(s)"
    print(f"{tag}, load {os.getloadavg()[0]:.1f}; pattern cache {eager_fusion.stats()}")
    print("groups of one steady step (count, end, fused, ops):")
    for (ops, end, fused), n in sorted(groups.items(), key=lambda kv: -kv[1]):
        print(f"  {n:3d}  {end:10s} {'fused' if fused else 'replayed':9s} {ops}")
    print(f"\ndevice ms per step by kernel (min over {args.steps} steps), fusion on vs off")
    keys = set(best[True]) | set(best[False])
    rows = sorted(keys, key=lambda k: -max(best[True].get(k, 0), best[False].get(k, 0)))
    w = max([40] + [len(k) + 2 for k in rows[: args.top]])
    head = f"{'kernel':{w}}{'on ms':>9}{'calls':>6}{'off ms':>9}{'calls':>6}"
    print(head + (f"{'cpu op ms':>11}" if cpu else ""))
    for k in rows[: args.top]:
        line = (
            f"{k:{w}}{best[True].get(k, 0):9.3f}{ncalls[True].get(k, 0):6d}"
            f"{best[False].get(k, 0):9.3f}{ncalls[False].get(k, 0):6d}"
        )
        op = k[5:] if k.startswith("trn::") else None
        if cpu and op in cpu:
            line += f"{cpu[op]:11.3f}"
        print(line)
    on, off = sum(best[True].values()), sum(best[False].values())
    print(
        f"{'all kernels':{w}}{on:9.3f}{'':6}{off:9.3f}"
        + (f"{'':6}{sum(cpu.values()):11.3f}" if cpu else "")
    )


if __name__ == "__main__":
    main()
