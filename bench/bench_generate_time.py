"""Greedy generate() in process CPU time: neuron vs PyTorch CPU, one process.

bench_models.py --generate times wall clock, which the machine's other load
inflates unevenly; this times each generate() call in process CPU time
(`time.process_time`), neuron and CPU alternated call by call after warm-ups
and the background compiles, and prints ms per token (min / median) and
neuron ÷ CPU tokens per CPU-second (by medians). Run it with one thread on
each side and several processes (builds) alternated, as docs/performance.md
measures:

    OMP_NUM_THREADS=1 TORCH_NEURONX_NUM_THREADS=1 \\
        .venv/bin/python bench/bench_generate_time.py [--models gpt2,llama] \\
        [--dtype float32|bfloat16] [--tokens 32] [--calls 5]
"""

import argparse
import copy
import os
import sys
import time

import torch

import torch_neuronx

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests"))
import model_zoo as zoo  # noqa: E402
from bench_models import make_generate  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default="gpt2,llama")
    ap.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"])
    ap.add_argument("--size", default="small")
    ap.add_argument("--tokens", type=int, default=32)
    ap.add_argument("--calls", type=int, default=5, help="timed calls per side")
    args = ap.parse_args()
    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", torch.get_num_threads())))
    dtype = getattr(torch, args.dtype)
    print(f"load {os.getloadavg()[0]:.1f}, {torch.get_num_threads()} thread(s), {args.dtype}")
    for name in args.models.split(","):
        torch.manual_seed(0)
        cpu = zoo.MODELS[name](args.size).eval().to(dtype)
        dev = copy.deepcopy(cpu).to("neuron")
        ids = torch.randint(0, zoo.VOCAB, (1, 8), generator=torch.Generator().manual_seed(0))
        runs = {
            "neuron": make_generate(dev, "neuron", ids, args.tokens),
            "cpu": make_generate(cpu, "cpu", ids, args.tokens),
        }
        for run in runs.values():
            for _ in range(3):
                run()
        torch_neuronx.eager_fusion.wait_for_compiles()
        ms = {k: [] for k in runs}
        for _ in range(args.calls):
            for key, run in runs.items():
                t = time.process_time()
                run()
                ms[key].append((time.process_time() - t) * 1e3 / args.tokens)
        med = {k: sorted(v)[len(v) // 2] for k, v in ms.items()}
        cells = "  ".join(f"{k} {min(v):.3f} / {med[k]:.3f}" for k, v in ms.items())
        print(
            f"{name:6s} ms/token (min / median): {cells}   neuron/cpu tokens/s "
            f"{med['cpu'] / med['neuron']:.2f}",
            flush=True,
        )


if __name__ == "__main__":
    main()
