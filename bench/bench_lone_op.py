"""Host cost of one lone eager op on a decode-sized tensor: neuron vs PyTorch CPU.

Times back-to-back calls of `mul`, `add` and `view` on [1, 768] float32 (the
brief of lone34: what one eager op costs the host thread in `generate()`), in
process CPU time, neuron and CPU alternated round by round, min and median us
per call. Run each build as its own process and alternate them to compare
builds (PYTHONPATH picks the build):

    OMP_NUM_THREADS=1 TORCH_NEURONX_NUM_THREADS=1 chrt -f 1 \\
        .venv/bin/python bench/bench_lone_op.py [--rounds 7] [--calls 20000]
"""

import argparse

import torch

import torch_neuronx  # noqa: F401
from bench_decode_ops import time_pair


def cases(dev, hidden):
    g = torch.Generator().manual_seed(0)
    a = torch.randn(1, hidden, generator=g).to(dev)
    b = torch.randn(1, hidden, generator=g).to(dev)
    return {
        "mul": lambda: a * b,
        "add": lambda: a + b,
        "view": lambda: a.view(hidden),
    }


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--hidden", type=int, default=768)
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--calls", type=int, default=20000)
    ap.add_argument("--tag", default="", help="printed in front of every row")
    args = ap.parse_args()
    dev, cpu = cases("neuron", args.hidden), cases("cpu", args.hidden)
    for name in dev:
        n, c = time_pair(dev[name], cpu[name], args.rounds, args.calls, warmup=200)
        mid = args.rounds // 2
        print(
            f"{args.tag}{name:5s} neuron {n[0]:5.2f}/{n[mid]:5.2f}  cpu {c[0]:5.2f}/{c[mid]:5.2f}"
            f"  ratio(med) {n[mid] / c[mid]:.2f}",
            flush=True,
        )


if __name__ == "__main__":
    main()
