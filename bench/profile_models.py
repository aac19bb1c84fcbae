"""Top ops (self time) of one training step of a model_zoo model, neuron vs CPU.

Runs the same AdamW step as bench/bench_models.py on both devices under
torch.profiler (CPU activity: on neuron an op's self time is its host-side
cost plus any wait it does for the stream) and prints the N ops with the
largest self time for each, side by side, so gaps show per op.

    .venv/bin/python bench/profile_models.py --model gpt2 [--steps 3] [--top 15]
"""

import argparse
import copy
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests"))
sys.path.insert(0, os.path.dirname(__file__))

import torch  # noqa: E402
from torch.profiler import ProfilerActivity, profile  # noqa: E402

import torch_neuronx  # noqa: E402,F401
import model_zoo as zoo  # noqa: E402
from bench_models import make_step  # noqa: E402


def top_ops(step, steps, top):
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        for _ in range(steps):
            step()
    rows = [(e.self_cpu_time_total / steps, e.count // steps, e.key) for e in prof.key_averages()]
    rows.sort(reverse=True)
    return rows[:top], sum(r[0] for r in rows)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="gpt2")
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--top", type=int, default=15)
    ap.add_argument("--autocast", action="store_true", help="bf16 autocast on both devices")
    ap.add_argument("--devices", default="neuron,cpu")
    args = ap.parse_args()
    torch.manual_seed(0)
    cpu = zoo.MODELS[args.model]("small")
    dev = copy.deepcopy(cpu).to("neuron")
    gen = torch.Generator().manual_seed(0)
    batch = (
        zoo.image_batch(32, 32, gen=gen) if args.model == "resnet" else zoo.lm_batch(8, 64, gen=gen)
    )
    models = {"neuron": dev, "cpu": cpu}
    steps = {
        d: make_step(args.model, models[d], d, batch, args.autocast)
        for d in args.devices.split(",")
    }
    for s in steps.values():
        s()
        s()
    res = {d: top_ops(s, args.steps, args.top) for d, s in steps.items()}
    print(
        f"{args.model}: per step self time (us), {args.steps} steps, "
        f"{torch.get_num_threads()} threads"
    )
    for d, (rows, total) in res.items():
        print(f"--- {d}: total self {total / 1e3:.1f} ms")
        for t, n, k in rows:
            print(f"{t:10.0f} {n:5d}  {k}")


if __name__ == "__main__":
    main()
