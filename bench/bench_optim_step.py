"""The default (foreach) optimizer step alone: opt.step() over a model's
parameters on neuron with foreach chains on (aten/foreach_chain.cpp: the
step's _foreach_* ops held and run chunk-major in one task) and off (each
op its own pass over every list), against PyTorch CPU's default step (its
per-tensor loop). Process CPU time per step, sides interleaved in one
process (on, off, CPU, on, ...); run it with one thread each side:

    OMP_NUM_THREADS=1 TORCH_NEURONX_NUM_THREADS=1 \
        .venv/bin/python bench/bench_optim_step.py [--models gpt2,llama] [--rounds 7]

Prints min and median ms per step of each side and the ratios of the
medians (>1: neuron faster). Gradients are fixed random tensors (the step's
cost does not depend on their values); the neuron step ends with a
synchronize, so held work is counted.
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
import torch_neuronx  # noqa: E402
from torch_neuronx import _C  # noqa: E402

OPTIMIZERS = {
    "adamw": lambda ps: torch.optim.AdamW(ps),
    "adam": lambda ps: torch.optim.Adam(ps, lr=1e-3),
    "sgd": lambda ps: torch.optim.SGD(ps, lr=1e-2, momentum=0.9),
}


def setup(model, device, make_opt):
    params = [p for p in model.parameters()]
    gen = torch.Generator().manual_seed(1)
    for p in params:
        p.grad = torch.randn(p.shape, generator=gen).to(device)
    return make_opt(params)


def cpu_ms(fn, steps):
    t = time.process_time()
    for _ in range(steps):
        fn()
    return (time.process_time() - t) * 1e3 / steps


def bench(name, opt_name, rounds, steps):
    torch.manual_seed(0)
    cpu = zoo.MODELS[name]("small")
    on_m = copy.deepcopy(cpu).to("neuron")
    off_m = copy.deepcopy(cpu).to("neuron")
    make = OPTIMIZERS[opt_name]
    opt_cpu, opt_on, opt_off = setup(cpu, "cpu", make), setup(on_m, "neuron", make), None
    opt_off = setup(off_m, "neuron", make)
    nparam = sum(p.numel() for p in cpu.parameters())

    def run_on():
        opt_on.step()
        torch_neuronx.synchronize()

    def run_off():
        _C._foreach_chain_set_enabled(False)
        opt_off.step()
        torch_neuronx.synchronize()
        _C._foreach_chain_set_enabled(True)

    sides = {"on": run_on, "off": run_off, "cpu": opt_cpu.step}
    for fn in sides.values():  # warm-up: states allocated, caches warm
        cpu_ms(fn, 2)
    times = {k: [] for k in sides}
    for _ in range(rounds):
        for k, fn in sides.items():
            times[k].append(cpu_ms(fn, steps))
    med = {k: statistics.median(v) for k, v in times.items()}
    cells = "  ".join(f"{k} {min(v):6.2f}/{med[k]:6.2f}" for k, v in times.items())
    print(
        f"{name:6s} {opt_name:5s} {nparam / 1e6:4.1f}M params  ms min/median: {cells}  "
        f"cpu/on {med['cpu'] / med['on']:.2f}  cpu/off {med['cpu'] / med['off']:.2f}  "
        f"off/on {med['off'] / med['on']:.2f}",
        flush=True,
    )


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", default="gpt2,llama")
    ap.add_argument("--optimizers", default="adamw,adam,sgd")
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--steps", type=int, default=5, help="steps per sample")
    args = ap.parse_args()
    print(f"threads: CPU {torch.get_num_threads()}; load {os.getloadavg()[0]:.2f}")
    for name in args.models.split(","):
        for opt_name in args.optimizers.split(","):
            bench(name, opt_name, args.rounds, args.steps)


if __name__ == "__main__":
    main()
