"""torch.compile(backend="neuron") vs Inductor (CPU) vs eager, per model:
training step (forward, backward, AdamW) and inference forward; cold compile
time (empty caches) and warm start (Dynamo reset, disk caches kept).

usage: python bench/bench_compile.py [model ...]   (default: mlp cnn llama gpt2 bert)

Warm start is measured in the same process (imports done, Dynamo reset, in-memory
caches cleared, disk caches kept). "backend adds" is the warm start's time inside
the backend (Dynamo's call_user_compiler, summed over graphs): the total minus
Dynamo's own tracing. "Backend" on a cold start is the same sum plus a backward
compiled lazily at its first call (Inductor's) and the time our graphs' first
calls waited for their C compiles on the compile threads: the compiler's own
time, without the Dynamo tracing both backends pay. At the end a table gives
neuron/Inductor ratios.

Before either compiler's cold start, each model and mode is traced once by Dynamo
alone (backend "eager", CPU): Dynamo's one-time costs for a model's source files
(bytecode and source analysis) would otherwise fall on whichever backend runs
first (measured: neuron's GPT-2 inference cold start 15-25 % longer first than
second).

Each timed first call starts with the process's existing objects frozen out of
Python's garbage collector (gc.freeze): the bench's long process holds every
earlier model and both compilers' caches, and one full collection over them took
0.6-1.2 s by GPT-2's turn, landing in whichever phase triggered it. Frozen, a
first call collects only what it creates, as in a fresh process.
"""

import gc
import os
import shutil
import sys
import tempfile
import time

import torch
import torch._dynamo

import torch_neuronx  # noqa: F401

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests"))
import compile_models as cm  # noqa: E402


def sync(dev):
    if dev == "neuron":
        torch.neuron.synchronize()


def setup(name, dev, backend, train):
    _, step, batch = cm.make_step(name, dev, train, backend)
    return step, batch


def first_call(name, dev, backend, train):
    from torch._dynamo.utils import compilation_time_metrics

    step, batch = setup(name, dev, backend, train)
    compilation_time_metrics.clear()
    torch.neuron.reset_dynamo_metrics()
    gc.collect()
    gc.freeze()
    try:
        t = time.perf_counter()
        step(*batch)
        step(*batch)  # the optimizer graph compiles at the second call's step
        sync(dev)
        total = time.perf_counter() - t
    finally:
        gc.unfreeze()
    backend_s = sum(compilation_time_metrics.get("OutputGraph.call_user_compiler", []))
    # A backward compiled lazily at its first call is outside call_user_compiler.
    backend_s += sum(compilation_time_metrics.get("backward._backward_impl", []))
    # Our C compiles run on compile threads; what they did not hide, graphs'
    # first calls waited for (Inductor waits for its own inside its compile).
    backend_s += torch.neuron.get_dynamo_metrics()["compile_wait_seconds"]
    return total, backend_s, step, batch


def run_time(step, batch, dev, iters):
    """Best of five rounds, each at least `iters` steps and ~0.1 s (a round of
    ten sub-millisecond steps is a few ms: one scheduler hiccup skews it)."""
    step(*batch)
    sync(dev)
    t = time.perf_counter()
    step(*batch)
    sync(dev)
    n = max(iters, int(0.1 / max(time.perf_counter() - t, 1e-6)))
    best = float("inf")
    for _ in range(5):
        t = time.perf_counter()
        for _ in range(n):
            step(*batch)
        sync(dev)
        best = min(best, (time.perf_counter() - t) / n)
    return best


CONFIGS = [
    ("neuron compiled", "neuron", "neuron"),
    ("inductor cpu", "cpu", "inductor"),
    ("cpu eager", "cpu", None),
    ("neuron eager", "neuron", None),
]


SUMMARY = []


def bench(name, iters=10):
    print(f"== {name}", flush=True)
    for train in (True, False):
        what = "train step" if train else "inference"
        times, colds, cold_be, warms, adds = {}, {}, {}, {}, {}
        torch._dynamo.reset()
        first_call(name, "cpu", "eager", train)
        for label, dev, backend in CONFIGS:
            torch._dynamo.reset()
            if backend:
                colds[label], cold_be[label], step, batch = first_call(name, dev, backend, train)
                torch._dynamo.reset()
                from torch_neuronx._compile import jobs

                jobs._memory_cache.clear()
                warms[label], adds[label], step, batch = first_call(name, dev, backend, train)
            else:
                step, batch = setup(name, dev, None, train)
            times[label] = run_time(step, batch, dev, iters)
        base = times["inductor cpu"]
        for label in times:
            extra = ""
            if label in colds:
                extra = (
                    f"  cold compile {colds[label]:.2f} s (backend {cold_be[label]:.2f} s)  "
                    f"warm start {warms[label]:.2f} s "
                    f"(backend adds {adds[label]:.3f} s)"
                )
            print(
                f"  {what:10s} {label:16s} {times[label] * 1e3:9.3f} ms  "
                f"speed vs inductor {base / times[label]:5.2f}x{extra}",
                flush=True,
            )
        n, i = "neuron compiled", "inductor cpu"
        SUMMARY.append(
            (
                name,
                what,
                base / times[n],
                colds[n] / colds[i],
                cold_be[n] / cold_be[i],
                warms[n] / warms[i],
                adds[n],
                adds[i],
            )
        )


def print_summary():
    print(
        "\n| model | mode | run time: speed vs Inductor | cold compile: neuron/Inductor | "
        "cold, backend only: neuron/Inductor | warm start: neuron/Inductor | warm: backend adds (neuron / Inductor) |"
    )
    print("|---|---|---|---|---|---|---|")
    for name, what, speed, cold, cold_be, warm, add_n, add_i in SUMMARY:
        print(
            f"| {name} | {what} | {speed:.2f}x | {cold:.3f} | {cold_be:.3f} | {warm:.2f} | "
            f"{add_n:.3f} s / {add_i:.3f} s |"
        )


def main():
    names = sys.argv[1:] or ["mlp", "cnn", "llama", "gpt2", "bert"]
    # Cold means empty caches: private cache dirs for both compilers.
    tmp = tempfile.mkdtemp(prefix="bench-compile-")
    os.environ["TORCH_NEURONX_NEFF_CACHE_DIR"] = os.path.join(tmp, "neuron")
    os.environ["TORCHINDUCTOR_CACHE_DIR"] = os.path.join(tmp, "inductor")
    try:
        for n in names:
            bench(n)
        print_summary()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
