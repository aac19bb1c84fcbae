"""scaled_dot_product_attention per call as the models call it, neuron vs CPU.

The model zoo's attention shapes (batch 8 x 64 tokens, 4 heads of 64; BERT's
additive padding mask [B, 1, 1, L]; GPT-2 causal; Llama causal with 2 kv
heads) in the HF layout ([B, L, H, E] storage seen as [B, H, L, E], so the
gradients come back in that layout too). Each row alternates the two devices
7 times, 20 calls a round, and prints min / median ms per call and the ratio
of medians (> 1: neuron is faster). Process time by default (steadier than
wall time on a loaded machine at one thread); pass `wall` for two threads.

    TORCH_NEURONX_NUM_THREADS=1 .venv/bin/python bench/bench_attention_models.py 1 float32,bfloat16
    TORCH_NEURONX_NUM_THREADS=2 .venv/bin/python bench/bench_attention_models.py 2 float32 wall
"""

import statistics
import sys
import time

import torch
import torch.nn.functional as F

import torch_neuronx  # noqa: F401

torch.set_num_threads(int(sys.argv[1]) if len(sys.argv) > 1 else 1)
dtypes = sys.argv[2].split(",") if len(sys.argv) > 2 else ["float32"]
SHAPES = [
    ("bert", 8, 4, 4, 64, 64, False, "additive"),
    ("gpt2", 8, 4, 4, 64, 64, True, None),
    ("llama", 8, 4, 2, 64, 64, True, None),
]


def case(device, b, h, hk, L, e, causal, mask, dtype):
    g = torch.Generator().manual_seed(0)
    x = [torch.randn(b, L, n, e, generator=g) for n in (h, hk, hk)]
    m = None
    if mask:
        m = torch.zeros(b, 1, 1, L)
        m[:, :, :, L - L // 8 :] = torch.finfo(dtype).min
        m = m.to(dtype).to(device)
    q, k, v = (t.to(dtype).to(device).requires_grad_() for t in x)
    dout = torch.randn(b, L, h, e, generator=g).to(dtype).to(device).transpose(1, 2)
    kw = dict(attn_mask=m, is_causal=causal, enable_gqa=hk != h)

    def fwd():
        with torch.no_grad():
            F.scaled_dot_product_attention(
                q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), **kw
            )

    def fb():
        out = F.scaled_dot_product_attention(
            q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), **kw
        )
        torch.autograd.grad(out, (q, k, v), dout)

    return fwd, fb


def sync(dev):
    if dev == "neuron":
        torch.neuron.synchronize()


CLK = time.perf_counter if len(sys.argv) > 3 and sys.argv[3] == "wall" else time.process_time


def per_call(fn, dev, n=20):
    sync(dev)
    t0 = CLK()
    for _ in range(n):
        fn()
    sync(dev)
    return (CLK() - t0) / n * 1e3


for dt in dtypes:
    dtype = getattr(torch, dt)
    for name, *sh in SHAPES:
        fn = {d: case(d, *sh, dtype) for d in ("neuron", "cpu")}
        for i, lab in enumerate(("fwd", "fwd+bwd")):
            res = {"neuron": [], "cpu": []}
            for d in res:
                fn[d][i]()
            for _ in range(7):
                for d in res:
                    res[d].append(per_call(fn[d][i], d))
            n, c = res["neuron"], res["cpu"]
            print(
                f"{dt:8s} {name:6s} {lab:8s} neuron {min(n):.3f}/{statistics.median(n):.3f}  cpu {min(c):.3f}/{statistics.median(c):.3f}  cpu/neuron(med) {statistics.median(c) / statistics.median(n):.2f}",
                flush=True,
            )
