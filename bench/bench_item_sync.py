"""Which `.item()` calls of a training step cost time on neuron, and why.

`profile_models.py` shows `aten::_local_scalar_dense` at ~100 calls and a few
ms of self time per GPT-2 step on neuron (~1 us per call on CPU). This prints
(1) each call's time under torch.profiler, smallest and largest, with its
parent op (AdamW's step counters are CPU tensors: `_get_value(step)`), and
(2) without the profiler, wall time of forward + backward, `opt.step()` and
the loss's `.item()` per step, fusion on and off (a child process each), so
where the held work runs shows:

    .venv/bin/python bench/bench_item_sync.py [--model gpt2] [--steps 6]
"""

import argparse
import collections
import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))


def build(model_name):
    sys.path.insert(0, os.path.join(HERE, "..", "tests"))
    import torch

    import model_zoo as zoo
    import torch_neuronx  # noqa: F401

    torch.manual_seed(0)
    model = zoo.MODELS[model_name]("small").to("neuron")
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    batch = zoo.to_device(zoo.lm_batch(gen=torch.Generator().manual_seed(0)), "neuron")

    def forward_backward():
        opt.zero_grad()
        loss = zoo.loss_of(model_name, model, batch)
        loss.backward()
        return loss

    return forward_backward, opt


def profiled(model_name):
    from torch.profiler import ProfilerActivity, profile

    forward_backward, opt = build(model_name)
    for _ in range(3):
        forward_backward()
        opt.step()
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        loss = forward_backward()
        opt.step()
        loss.item()
    calls = [e for e in prof.events() if e.name == "aten::_local_scalar_dense"]
    times = sorted(e.cpu_time_total for e in calls)
    print(f"profiler: {len(calls)} _local_scalar_dense calls, {sum(times) / 1e3:.2f} ms in all")
    print("  smallest (us):", ", ".join(f"{t:.2f}" for t in times[:3]))
    print("  largest (us): ", ", ".join(f"{t:.2f}" for t in times[-3:]))
    parents = collections.Counter()
    for e in calls:
        p = e.cpu_parent
        while p is not None and p.name in ("aten::item", "aten::_local_scalar_dense"):
            p = p.cpu_parent
        parents[p.name if p is not None else "(top level: the loss)"] += 1
    for name, n in parents.most_common():
        print(f"  {n:4d} under {name}")


def timed(model_name, steps):
    forward_backward, opt = build(model_name)
    rows = []
    for i in range(steps + 3):
        t0 = time.perf_counter()
        loss = forward_backward()
        t1 = time.perf_counter()
        opt.step()
        t2 = time.perf_counter()
        loss.item()
        t3 = time.perf_counter()
        if i >= 3:
            rows.append((t1 - t0, t2 - t1, t3 - t2))
    med = [sorted(col)[len(col) // 2] * 1e3 for col in zip(*rows)]
    fusion = os.environ.get("TORCH_NEURONX_EAGER_FUSION", "1")
    print(
        f"fusion {fusion}: median ms per step: forward+backward {med[0]:.1f}, "
        f"opt.step() {med[1]:.2f}, loss.item() {med[2]:.2f}"
    )


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="gpt2")
    ap.add_argument("--steps", type=int, default=6)
    ap.add_argument("--mode", choices=["profiled", "timed"], help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.mode == "profiled":
        profiled(args.model)
        return
    if args.mode == "timed":
        timed(args.model, args.steps)
        return
    print(f"load {os.getloadavg()[0]:.1f}, {args.model}")
    base = [sys.executable, __file__, "--model", args.model, "--steps", str(args.steps)]
    runs = [("profiled", "1"), ("timed", "1"), ("timed", "0")]
    for mode, fusion in runs:
        env = {**os.environ, "TORCH_NEURONX_EAGER_FUSION": fusion}
        out = subprocess.run(base + ["--mode", mode], env=env, capture_output=True, text=True)
        keep = ("profiler", "  ", "fusion")
        print("\n".join(line for line in out.stdout.splitlines() if line.startswith(keep)))


if __name__ == "__main__":
    main()
