"""Adaptive Eager's cost and gain on whole training steps: process CPU time of
one step with fusion on (adaptive: each compiled pattern runs fused or
unfused, whichever it timed faster), fusion on with every compiled pattern
fused ("always"), fusion off, and PyTorch CPU eager, interleaved in one
process (on, always, off, CPU, on, ...), so every side sees the same load. Run it with one
thread each side (OMP_NUM_THREADS=1 TORCH_NEURONX_NUM_THREADS=1): on a shared,
loaded host process CPU time is what stays comparable, wall time is not.

For each model of tests/model_zoo.py ("small" configs) and float32 / bf16
autocast it prints the min and median CPU ms per step of each, the ratios
of the medians, and per adaptive step the fused groups and ops, the groups
replayed unfused (still compiling or being timed) and the groups declined
(their pattern timed faster unfused).

    OMP_NUM_THREADS=1 TORCH_NEURONX_NUM_THREADS=1 \
        .venv/bin/python bench/bench_fusion_models.py [--models gpt2,llama] [--rounds 7]
"""

import argparse
import copy
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests"))

import torch  # noqa: E402

import model_zoo as zoo  # noqa: E402
from bench_models import make_step  # noqa: E402  (the same AdamW step bench_models times)
from torch_neuronx import eager_fusion, metrics  # noqa: E402

COUNTERS = ("EagerFusedGroups", "EagerFusedOps", "EagerUnfusedGroups", "EagerDeclinedGroups")


def counters():
    names = set(metrics.get_counter_names())
    return {c: metrics.get_counter_value(c) if c in names else 0 for c in COUNTERS}


def cpu_ms(fn):
    t = time.process_time()
    fn()
    return (time.process_time() - t) * 1e3


def bench(name, autocast, rounds, warmup):
    torch.manual_seed(0)
    cpu = zoo.MODELS[name]("small")
    dev = copy.deepcopy(cpu).to("neuron")
    gen = torch.Generator().manual_seed(0)
    batch = zoo.image_batch(32, 32, gen=gen) if name == "resnet" else zoo.lm_batch(8, 64, gen=gen)
    run_dev = make_step(name, dev, "neuron", batch, autocast)
    run_cpu = make_step(name, cpu, "cpu", batch, autocast)
    for _ in range(warmup):
        eager_fusion.set_enabled(True)
        run_dev()
        eager_fusion.set_enabled(False)
        run_dev()
        run_cpu()
    eager_fusion.set_enabled(True)
    eager_fusion.wait_for_compiles()
    t = {"on": [], "always": [], "off": [], "cpu": []}
    per_step = None
    for _ in range(rounds):
        eager_fusion.set_enabled(True)
        c0 = counters()
        t["on"].append(cpu_ms(run_dev))
        c1 = counters()
        per_step = {k: c1[k] - c0[k] for k in COUNTERS}
        eager_fusion.set_adaptive(False)
        t["always"].append(cpu_ms(run_dev))
        eager_fusion.set_adaptive(True)
        eager_fusion.set_enabled(False)
        t["off"].append(cpu_ms(run_dev))
        t["cpu"].append(cpu_ms(run_cpu))
    eager_fusion.set_enabled(True)
    return t, per_step


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--models", default="gpt2,llama,bert,resnet")
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--no-autocast", action="store_true")
    args = ap.parse_args()
    print(
        f"CPU ms per training step (process time), {args.rounds} interleaved rounds, "
        f"torch threads {torch.get_num_threads()}, load {os.getloadavg()[0]:.1f}"
    )
    print(
        f"{'model':10s} {'on min/med':>15s} {'always min/med':>15s} {'off min/med':>15s} "
        f"{'cpu min/med':>15s} {'off/on':>6s} {'off/alw':>7s} {'cpu/on':>6s} {'cpu/off':>7s}"
        "  per step: fused groups/ops, replayed, declined"
    )
    for name in args.models.split(","):
        for autocast in (False,) if args.no_autocast else (False, True):
            t, c = bench(name, autocast, args.rounds, args.warmup)
            med = {k: statistics.median(v) for k, v in t.items()}
            cols = " ".join(
                f"{min(t[k]):7.1f}/{med[k]:7.1f}" for k in ("on", "always", "off", "cpu")
            )
            print(
                f"{name + (' bf16' if autocast else ' f32'):10s} {cols} "
                f"{med['off'] / med['on']:6.3f} {med['off'] / med['always']:7.3f} "
                f"{med['cpu'] / med['on']:6.3f} "
                f"{med['cpu'] / med['off']:7.3f}  {c['EagerFusedGroups']}/{c['EagerFusedOps']}, "
                f"{c['EagerUnfusedGroups']}, {c['EagerDeclinedGroups']}",
                flush=True,
            )
    print(f"load {os.getloadavg()[0]:.1f}; pattern cache {eager_fusion.stats()}")


if __name__ == "__main__":
    main()
