"""Fused scaled_dot_product_attention: neuron (libtrn) vs PyTorch CPU's flash
kernel, forward and forward+backward, side by side in one process.

Shapes: the model zoo's "small" configs as bench_models.py runs them
(batch 8 x 64 tokens, 4 heads of 64; Llama with 2 kv heads, causal) and long
sequences (L = 512 .. 2048, head dim 64). Each row prints best-of-rounds
milliseconds per call on both devices and the ratio CPU time / neuron time
(> 1: neuron is faster).

    .venv/bin/python bench/bench_attention.py [--dtype float32|bfloat16] [--min-time S] [--shapes small|long|all]

On a loaded machine, single-threaded rows compare the kernels more steadily:
    TORCH_NEURONX_NUM_THREADS=1 .venv/bin/python bench/bench_attention.py --threads 1
"""

import argparse
import os

import torch
import torch.nn.functional as F

import torch_neuronx  # noqa: F401

from bench_ops import timeit as best_time  # best per-call seconds over rounds

# name, batch, heads, kv heads, L, head dim, causal, mask
SMALL = [
    ("bert 8x4x64x64", 8, 4, 4, 64, 64, False, "additive"),
    ("gpt2 8x4x64x64 causal", 8, 4, 4, 64, 64, True, None),
    ("llama 8x4(2)x64x64 causal gqa", 8, 4, 2, 64, 64, True, None),
]
LONG = [
    ("L512 2x8x512x64", 2, 8, 8, 512, 64, False, None),
    ("L512 causal", 2, 8, 8, 512, 64, True, None),
    ("L1024 1x8x1024x64", 1, 8, 8, 1024, 64, False, None),
    ("L2048 1x4x2048x64 causal", 1, 4, 4, 2048, 64, True, None),
]


def case(device, b, h, hk, L, e, causal, mask, dtype):
    gen = torch.Generator().manual_seed(0)
    q = torch.randn(b, h, L, e, generator=gen, dtype=dtype)
    k = torch.randn(b, hk, L, e, generator=gen, dtype=dtype)
    v = torch.randn(b, hk, L, e, generator=gen, dtype=dtype)
    m = None
    if mask == "additive":  # BERT's extended padding mask [B, 1, 1, L]
        m = torch.zeros(b, 1, 1, L, dtype=dtype)
        m[:, :, :, L - L // 8 :] = torch.finfo(dtype).min
    q, k, v = (t.to(device).requires_grad_() for t in (q, k, v))
    m = m.to(device) if m is not None else None
    kw = dict(attn_mask=m, is_causal=causal, enable_gqa=hk != h)
    dout = torch.randn(b, h, L, e, generator=gen, dtype=dtype).to(device)

    def fwd():
        with torch.no_grad():
            F.scaled_dot_product_attention(q, k, v, **kw)

    def fwd_bwd():
        out = F.scaled_dot_product_attention(q, k, v, **kw)
        torch.autograd.grad(out, (q, k, v), dout)

    return fwd, fwd_bwd


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--dtype", default="float32")
    ap.add_argument("--min-time", type=float, default=0.3)
    ap.add_argument("--shapes", default="all", choices=["small", "long", "all"])
    ap.add_argument("--threads", type=int, default=0, help="torch CPU threads (0: default)")
    a = ap.parse_args()
    if a.threads:
        torch.set_num_threads(a.threads)
    dtype = getattr(torch, a.dtype)
    shapes = {"small": SMALL, "long": LONG, "all": SMALL + LONG}[a.shapes]
    print(
        f"threads: torch {torch.get_num_threads()}, neuron "
        f"{os.environ.get('TORCH_NEURONX_NUM_THREADS', 'default')}; dtype {a.dtype}"
    )
    print(f"{'shape':32s} {'pass':8s} {'neuron ms':>10s} {'cpu ms':>10s} {'cpu/neuron':>10s}")
    for name, b, h, hk, L, e, causal, mask in shapes:
        fn = {d: case(d, b, h, hk, L, e, causal, mask, dtype) for d in ("neuron", "cpu")}
        for i, label in enumerate(("fwd", "fwd+bwd")):
            # Interleaved rounds so both devices see the same load.
            tn, tc = float("inf"), float("inf")
            for _ in range(3):
                tn = min(tn, best_time(fn["neuron"][i], "neuron", a.min_time / 3))
                tc = min(tc, best_time(fn["cpu"][i], "cpu", a.min_time / 3))
            print(
                f"{name:32s} {label:8s} {tn * 1e3:10.3f} {tc * 1e3:10.3f} {tc / tn:10.2f}",
                flush=True,
            )


if __name__ == "__main__":
    main()
