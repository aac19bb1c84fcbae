"""Whole-model training throughput and peak memory: neuron vs PyTorch CPU eager.

For each model of tests/model_zoo.py ("small" configs: a few layers of width
256, batch 8 x 64 tokens; ResNet 32 x 32 images) one AdamW training step
(forward, backward, optimizer) runs on neuron and on the CPU, interleaved
(neuron step, CPU step, ...) so both see the same machine load; the ratio
is what to read (>1: neuron is faster). Peak memory is the step's peak above
what was allocated before it (weights, grads and optimizer state are the
same on both): neuron's from its allocator statistics, the CPU's from the
profiler's allocation events.

Each model also gets a "bf16" row: the same step with forward and loss under
torch.autocast(<device>, bfloat16) on both devices (as the issue's models
run; weights, gradients and AdamW stay float32).

    .venv/bin/python bench/bench_models.py [--steps N] [--models gpt2,llama] [--no-autocast]
"""

import argparse
import copy
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests"))

import torch  # noqa: E402
from torch.profiler import ProfilerActivity, profile, record_function  # noqa: E402

import torch_neuronx  # noqa: E402,F401
import model_zoo as zoo  # noqa: E402


def make_step(name, model, device, batch, autocast=False):
    """One AdamW training step; with `autocast`, forward and loss under
    torch.autocast(device, bfloat16) (weights and optimizer stay float32)."""
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    batch = zoo.to_device(batch, device)

    def step():
        opt.zero_grad()
        with torch.autocast(device_type=device, dtype=torch.bfloat16, enabled=autocast):
            loss = zoo.loss_of(name, model, batch)
        loss.backward()
        opt.step()
        return loss.item()  # synchronizes, as a training loop that logs does

    return step


def cpu_peak_bytes(step) -> int:
    """Peak of live CPU allocations during one step, above the level at its start.

    Two steps are profiled and the second one is measured: the profiler
    drops the frees of blocks allocated before it started, and the first
    profiled step of a process also counted one-time allocations (GPT-2
    bf16: 41.2 MiB the first time, 28.9 MiB in every later or second step),
    which made the neuron/CPU memory ratios look better than they are."""
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        step()
        with record_function("measured_step"):
            step()
    events = prof.profiler.kineto_results.events()
    window = next(e for e in events if e.name() == "measured_step")
    mem = sorted(
        (e.start_ns(), e.nbytes())
        for e in events
        if e.name() == "[memory]" and str(e.device_type()) == "DeviceType.CPU"
    )
    live, start, peak = 0, None, 0
    for t, n in mem:
        if start is None and t >= window.start_ns():
            start = live
        live += n
        if start is not None and t <= window.end_ns():
            peak = max(peak, live - start)
    return peak


def neuron_peak_bytes(step) -> int:
    torch.neuron.synchronize()
    base = torch.neuron.memory_allocated()
    torch.neuron.reset_peak_memory_stats()
    step()
    torch.neuron.synchronize()
    return torch.neuron.max_memory_allocated() - base


def bench(name, steps, warmup, autocast=False):
    torch.manual_seed(0)
    cpu = zoo.MODELS[name]("small")
    dev = copy.deepcopy(cpu).to("neuron")
    gen = torch.Generator().manual_seed(0)
    batch = zoo.image_batch(32, 32, gen=gen) if name == "resnet" else zoo.lm_batch(8, 64, gen=gen)
    run_dev = make_step(name, dev, "neuron", batch, autocast)
    run_cpu = make_step(name, cpu, "cpu", batch, autocast)
    for _ in range(warmup):
        run_dev()
        run_cpu()
    # Adaptive Eager compiles fused groups in the background after their second
    # sighting; time the steady state, not steps that race those compiles.
    torch_neuronx.eager_fusion.wait_for_compiles()
    t_dev = t_cpu = 0.0
    for _ in range(steps):
        t = time.perf_counter()
        run_dev()
        t_dev += time.perf_counter() - t
        t = time.perf_counter()
        run_cpu()
        t_cpu += time.perf_counter() - t
    mem_dev = neuron_peak_bytes(run_dev)
    mem_cpu = cpu_peak_bytes(run_cpu)
    return steps / t_dev, steps / t_cpu, mem_dev, mem_cpu


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--models", default=",".join(zoo.MODELS))
    ap.add_argument(
        "--no-autocast", action="store_true", help="skip the bf16-autocast row of each model"
    )
    args = ap.parse_args()
    torch_neuronx.clear_op_tracking()
    print(f"training step (AdamW), {torch.get_num_threads()} CPU threads; ratio > 1: neuron faster")
    print(
        f"{'model':13s} {'neuron step/s':>14s} {'cpu step/s':>11s} {'ratio':>6s}   "
        f"{'neuron peak MiB':>15s} {'cpu peak MiB':>12s} {'ratio':>6s}"
    )
    rows = [
        (n, ac)
        for n in args.models.split(",")
        for ac in (False, True)
        if not (ac and args.no_autocast)
    ]
    for name, ac in rows:
        sd, sc, md, mc = bench(name, args.steps, args.warmup, ac)
        label = name + (" bf16" if ac else "")
        print(
            f"{label:13s} {sd:14.2f} {sc:11.2f} {sd / sc:6.2f}   "
            f"{md / 2**20:15.1f} {mc / 2**20:12.1f} {md / max(mc, 1):6.2f}",
            flush=True,
        )
    fallbacks = sorted(set(torch_neuronx.get_fallback_ops()))
    print("ops on the CPU fallback:", ", ".join(fallbacks) if fallbacks else "none")


if __name__ == "__main__":
    main()
