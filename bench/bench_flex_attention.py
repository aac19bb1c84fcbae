"""FlexAttention and varlen_attn on neuron (libtrn flex_attention.c) vs
PyTorch CPU and vs dense SDPA, side by side in one run.

Rows (forward; "fwd+bwd" rows add the backward, which CPU's flex_attention
does not have):
  - flex_attention, compiled with backend="neuron", vs PyTorch CPU's
    flex_attention compiled by Inductor (its fused CPU kernel) and eager;
  - the same block-sparse mask on neuron vs dense SDPA with the equivalent
    boolean mask on neuron (what the block skipping buys);
  - a sliding-window mask with about half its blocks empty vs the same
    attention with no mask (target: >= 1.6x);
  - varlen_attn on packed sequences vs per-sequence SDPA on CPU.
Ratios are speed-ups (other time / neuron flex time): higher is better.
Targets (the issue's, never a test's): >= 1.2x PyTorch CPU.

Run: make bench   (or .venv/bin/python bench/bench_flex_attention.py [--quick])
"""

import argparse
import pathlib
import sys

import torch
import torch.nn.functional as F
from torch.nn.attention.flex_attention import create_block_mask, flex_attention

import torch_neuronx  # noqa: F401

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from bench_ops import timeit  # noqa: E402  (the same timer as the op table)


def row(name, ours, theirs, what):
    print(
        f"  {name:50}{ours * 1e3:10.3f} ms{theirs * 1e3:10.3f} ms  {theirs / ours:6.2f}x  vs {what}",
        flush=True,
    )


def masks(S, window):
    def causal(b, h, q, kv):
        return q >= kv

    def sliding(b, h, q, kv):
        return (q >= kv) & (q - kv <= window)

    def full(b, h, q, kv):
        return q >= 0

    return {"causal": causal, "sliding": sliding, "none": full}


def dense(name, S, window, dev):
    q = torch.arange(S, device=dev)[:, None]
    kv = torch.arange(S, device=dev)[None, :]
    if name == "causal":
        return q >= kv
    if name == "sliding":
        return (q >= kv) & (q - kv <= window)
    return None


def bench_flex(min_time, B, H, S, E, window, dtype):
    print(f"flex_attention {str(dtype)[6:]}: B={B} H={H} S={S} E={E} window={window}")
    torch.manual_seed(0)
    q, k, v = (torch.randn(B, H, S, E, dtype=dtype) for _ in range(3))
    qd, kd, vd = (t.to("neuron") for t in (q, k, v))
    # One function compiled for two devices, three masks and grad modes:
    # more recompiles than Dynamo's default limit (8) allows.
    torch._dynamo.config.recompile_limit = 64
    ours_fn = torch.compile(flex_attention, backend="neuron")
    cpu_fn = torch.compile(flex_attention)  # Inductor's CPU kernel
    times = {}
    for name, mm in masks(S, window).items():
        bm = create_block_mask(mm, None, None, S, S, device="neuron")
        bmc = create_block_mask(mm, None, None, S, S, device="cpu")
        ours = timeit(lambda: ours_fn(qd, kd, vd, block_mask=bm), "neuron", min_time)
        times[name] = ours
        cpu = timeit(lambda: cpu_fn(q, k, v, block_mask=bmc), "cpu", min_time)
        row(f"{name}: neuron compiled vs CPU compiled flex", ours, cpu, "CPU Inductor flex")
        with torch.no_grad():
            eager_cpu = timeit(lambda: flex_attention(q, k, v, block_mask=bmc), "cpu", min_time)
        row(f"{name}: neuron compiled vs CPU eager flex", ours, eager_cpu, "CPU eager flex")
        dm = dense(name, S, window, "neuron")
        sdpa = timeit(
            lambda: F.scaled_dot_product_attention(qd, kd, vd, attn_mask=dm), "neuron", min_time
        )
        row(f"{name}: neuron flex vs neuron dense SDPA", ours, sdpa, "dense SDPA, same mask")
        leaves = [t.clone().requires_grad_() for t in (qd, kd, vd)]

        def step():
            ours_fn(*leaves, block_mask=bm).sum().backward()

        both = timeit(step, "neuron", min_time)
        dl = [t.clone().requires_grad_() for t in (qd, kd, vd)]

        def dense_step():
            F.scaled_dot_product_attention(*dl, attn_mask=dm).sum().backward()

        row(
            f"{name}: fwd+bwd flex vs dense SDPA (neuron)",
            both,
            timeit(dense_step, "neuron", min_time),
            "dense SDPA fwd+bwd",
        )
    print(f"  sliding-window blocks skipped vs no mask: {times['none'] / times['sliding']:.2f}x")


def bench_varlen(min_time, lens, H, E, dtype):
    from torch.nn.attention.varlen import varlen_attn

    print(f"varlen_attn {str(dtype)[6:]}: {len(lens)} sequences, {sum(lens)} tokens, H={H} E={E}")
    torch.manual_seed(0)
    T = sum(lens)
    q, k, v = (torch.randn(T, H, E, dtype=dtype) for _ in range(3))
    cu = torch.tensor([0, *torch.tensor(lens).cumsum(0).tolist()], dtype=torch.int32)
    qd, kd, vd, cud = q.to("neuron"), k.to("neuron"), v.to("neuron"), cu.to("neuron")
    n = max(lens)
    ours = timeit(
        lambda: varlen_attn(qd, kd, vd, cud, cud, n, n, window_size=(-1, 0)), "neuron", min_time
    )
    bounds = cu.tolist()

    def per_seq():
        for a, b in zip(bounds[:-1], bounds[1:]):
            F.scaled_dot_product_attention(
                q[a:b].transpose(0, 1),
                k[a:b].transpose(0, 1),
                v[a:b].transpose(0, 1),
                is_causal=True,
            )

    row(
        "causal: neuron varlen vs CPU per-sequence SDPA",
        ours,
        timeit(per_seq, "cpu", min_time),
        "CPU SDPA loop",
    )


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    a = ap.parse_args()
    t = 0.2 if a.quick else 1.0
    S = 1024 if a.quick else 2048
    bench_flex(t, 1, 8, S, 64, S // 2 - 128, torch.float32)
    bench_flex(t, 1, 8, S, 64, S // 2 - 128, torch.bfloat16)
    bench_varlen(t, [300, 700, 128, 900], 8, 64, torch.float32)


if __name__ == "__main__":
    main()
