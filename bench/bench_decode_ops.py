"""Per-op host cost of a decode step's op mix: neuron vs PyTorch CPU eager.

The ops and shapes are those of one greedy `generate()` token of the Llama
and GPT-2 "small" configs of tests/model_zoo.py (hidden 256, 4 heads of 64,
a KV cache of `--kv` positions, batch 1), the ~25 most frequent by the
profiler's call count. Each row times back-to-back calls in process CPU time
(`time.process_time`, which the machine's other load does not inflate the way
it does wall time), neuron and CPU alternated round by round, and prints the
min and median microseconds per call and the ratio of the medians (neuron /
CPU, lower is better). Run it with one thread on each side, as
docs/performance.md measures:

    OMP_NUM_THREADS=1 TORCH_NEURONX_NUM_THREADS=1 \\
        .venv/bin/python bench/bench_decode_ops.py [--kv 20] [--rounds 5] [ops...]

Adaptive Eager stays as configured (`TORCH_NEURONX_EAGER_FUSION=0` to time
the unfused path): a loop of one op builds a group until something flushes it.
"""

import argparse
import time

import torch
import torch.nn.functional as F

import torch_neuronx  # noqa: F401


def cases(dev, kv):
    g = torch.Generator().manual_seed(0)

    def rnd(*shape):
        return torch.randn(*shape, generator=g).to(dev)

    h, w, g544 = rnd(1, 1, 256), rnd(256), rnd(1, 1, 544)
    q, kc, cos = rnd(1, 4, 1, 64), rnd(1, 4, kv, 64), rnd(1, 1, 64)
    ids = torch.randint(0, 128, (1, kv), generator=g).to(dev)
    emb, mask = rnd(128, 256), torch.ones(1, kv, dtype=torch.bool, device=dev)
    w256, w544, wdown, x544 = rnd(256, 256), rnd(544, 256), rnd(256, 544), rnd(1, 1, 544)
    c1w, c1b, lnw = rnd(256, 768), rnd(768), rnd(256)
    return {
        "linear 256->256": lambda: F.linear(h, w256),
        "linear 256->544": lambda: F.linear(h, w544),
        "linear 544->256": lambda: F.linear(x544, wdown),
        "addmm 256->768": lambda: torch.addmm(c1b, h.view(1, 256), c1w),
        "layer_norm": lambda: F.layer_norm(h, (256,), lnw, lnw),
        "gelu tanh": lambda: F.gelu(h, approximate="tanh"),
        "sdpa": lambda: F.scaled_dot_product_attention(q, kc, kc),
        "mul": lambda: h * w,
        "mul scalar": lambda: h * 0.5,
        "add": lambda: h + h,
        "pow": lambda: h.pow(2),
        "mean": lambda: h.mean(-1, keepdim=True),
        "rsqrt": lambda: torch.rsqrt(h),
        "neg": lambda: -q,
        "silu": lambda: F.silu(g544),
        "slice": lambda: q[..., :32],
        "transpose": lambda: q.transpose(1, 2),
        "view": lambda: h.view(1, 1, 4, 64),
        "unsqueeze": lambda: cos.unsqueeze(1),
        "cat rotate": lambda: torch.cat((q[..., 32:], q[..., :32]), dim=-1),
        "cat kv": lambda: torch.cat((kc, q), dim=-2),
        "arange": lambda: torch.arange(kv, device=dev),
        "embedding": lambda: F.embedding(ids[:, -1:], emb),
        "to bf16": lambda: h.to(torch.bfloat16),
        "where": lambda: torch.where(mask, ids, 0),
        "argmax": lambda: h[:, -1, :].argmax(-1),
        "clone": lambda: h.clone(),
        "any().item()": lambda: mask.any().item(),
        "empty": lambda: torch.empty(1, 256, device=dev),
    }


def per_call_us(fn, calls):
    t = time.process_time()
    for _ in range(calls):
        fn()
    return (time.process_time() - t) / calls * 1e6


def time_pair(dev_fn, cpu_fn, rounds, calls, warmup):
    """us per call of each side, rounds alternated after `warmup` calls of
    both: (neuron's sorted, CPU's sorted). bench_lone_op.py uses it too."""
    for _ in range(warmup):
        dev_fn()
        cpu_fn()
    torch.neuron.synchronize()
    n, c = [], []
    for _ in range(rounds):
        n.append(per_call_us(dev_fn, calls))
        torch.neuron.synchronize()
        c.append(per_call_us(cpu_fn, calls))
    return sorted(n), sorted(c)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--kv", type=int, default=20, help="KV cache length (sdpa, cat kv)")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--calls", type=int, default=1000, help="calls per round")
    ap.add_argument("ops", nargs="*", help="only these rows")
    args = ap.parse_args()
    dev, cpu = cases("neuron", args.kv), cases("cpu", args.kv)
    print(
        f"threads: torch {torch.get_num_threads()}; KV cache {args.kv}; us per call, process CPU time"
    )
    print(f"{'op':16s} {'neuron min/med':>16s} {'cpu min/med':>16s}  neuron/cpu")
    for name in dev:
        if args.ops and name not in args.ops:
            continue
        n, c = time_pair(dev[name], cpu[name], args.rounds, args.calls, warmup=50)
        mid = args.rounds // 2
        print(
            f"{name:16s} {n[0]:7.2f}/{n[mid]:7.2f} {c[0]:7.2f}/{c[mid]:7.2f}  {n[mid] / c[mid]:.2f}"
        )


if __name__ == "__main__":
    main()
