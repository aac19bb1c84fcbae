"""Transformer non-GEMM ops at tests/model_zoo.py "small" shapes (batch 8 x 64 tokens, width 256):
neuron vs PyTorch CPU eager, process CPU time, sides alternated in one process.

Each case runs forward (and backward where marked) `reps` times per sample; per round one sample
per side (neuron, CPU, neuron, ...). Prints min / median us per call of each side and CPU ÷ neuron
of the medians (> 1: neuron faster). Run with one thread each side:

    OMP_NUM_THREADS=1 TORCH_NEURONX_NUM_THREADS=1 .venv/bin/python bench/bench_lm_ops.py [-k name]
"""

import argparse
import statistics
import time

import torch
import torch.nn.functional as F

import torch_neuronx  # noqa: F401
from torch_neuronx import eager_fusion

B, T, D, H = 8, 64, 256, 4


def _rms(x, w):
    v = x.float().pow(2).mean(-1, keepdim=True)
    return w * (x.float() * torch.rsqrt(v + 1e-6)).to(x.dtype)


def _rope(q, cos, sin):
    h = q.shape[-1] // 2
    rot = torch.cat((-q[..., h:], q[..., :h]), dim=-1)
    return q * cos + rot * sin


def cases():
    """name -> (make(device) -> inputs, fn(*inputs), backward?)"""
    bf = torch.bfloat16
    g = torch.Generator().manual_seed(0)

    def rn(*s, dtype=torch.float32, grad=True):
        t = torch.randn(*s, generator=g).to(dtype)
        return t.requires_grad_(grad)

    c = {}
    for dt, tag in ((torch.float32, "f32"), (bf, "bf16")):
        c[f"softmax_64_{tag}"] = (
            lambda dt=dt: [rn(B, H, T, T, dtype=dt)],
            lambda x: x.softmax(-1),
            True,
        )
        c[f"layer_norm_{tag}"] = (
            lambda dt=dt: [rn(B * T, D, dtype=dt), rn(D, dtype=dt), rn(D, dtype=dt)],
            lambda x, w, b: F.layer_norm(x, (D,), w, b),
            True,
        )
        c[f"gelu_erf_{tag}"] = (lambda dt=dt: [rn(B * T, 4 * D, dtype=dt)], F.gelu, True)
        c[f"gelu_tanh_{tag}"] = (
            lambda dt=dt: [rn(B * T, 4 * D, dtype=dt)],
            lambda x: F.gelu(x, approximate="tanh"),
            True,
        )
        c[f"silu_{tag}"] = (lambda dt=dt: [rn(B * T, 2 * D + 32, dtype=dt)], F.silu, True)
        c[f"rms_hf_{tag}"] = (lambda dt=dt: [rn(B, T, D, dtype=dt), rn(D, dtype=dt)], _rms, True)
        c[f"sdpa_causal_{tag}"] = (
            lambda dt=dt: [rn(B, H, T, D // H, dtype=dt) for _ in range(3)],
            lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True),
            True,
        )
    c["softmax_1024x512"] = (lambda: [rn(1024, 512, grad=False)], lambda x: x.softmax(-1), False)
    c["cross_entropy_512x128"] = (
        lambda: [rn(B * T, 128), torch.randint(0, 128, (B * T,), generator=g)],
        lambda x, y: F.cross_entropy(x, y),
        True,
    )
    c["sum0_512x256"] = (lambda: [rn(B * T, D, grad=False)], lambda x: x.sum(0), False)
    c["mul_bcast_rows"] = (
        lambda: [rn(B, T, D, grad=False), rn(B, T, 1, grad=False)],
        torch.mul,
        False,
    )
    c["sum0_512x768"] = (lambda: [rn(B * T, 3 * D, grad=False)], lambda x: x.sum(0), False)
    # Llama's RoPE half: slice_backward of a cat-backward view [8, 4, 64, 32] of [.., 64]
    c["slice_backward_rope"] = (
        lambda: [rn(B, H, T, 2 * (D // H), grad=False)],
        lambda w: torch.ops.aten.slice_backward(w[..., : D // H], list(w.shape), -1, 0, D // H, 1),
        False,
    )
    # GPT-2's HF cache append: cat([empty, k], -2) of k = x.view(B, T, H, d).transpose(1, 2)
    c["cat_kv_view"] = (
        lambda: [rn(B, T, D, grad=False), rn(B, H, 0, D // H, grad=False)],
        lambda x, e: torch.cat([e, x.view(B, T, H, D // H).transpose(1, 2)], -2),
        False,
    )
    c["mul_same_544"] = (
        lambda: [rn(B * T, 2 * D + 32, grad=False), rn(B * T, 2 * D + 32, grad=False)],
        torch.mul,
        False,
    )
    c["mul_w_bcast"] = (lambda: [rn(B, T, D, grad=False), rn(D, grad=False)], torch.mul, False)
    c["rope_f32"] = (
        lambda: [
            rn(B, H, T, D // H),
            rn(B, 1, T, D // H, grad=False),
            rn(B, 1, T, D // H, grad=False),
        ],
        _rope,
        True,
    )
    return c


def run_case(fn, inputs, bwd):
    out = fn(*inputs)
    if bwd:
        out.backward(torch.ones_like(out))
    return out


def main():
    p = argparse.ArgumentParser()
    p.add_argument("-k", default="", help="substring filter on case names")
    p.add_argument("--rounds", type=int, default=7)
    p.add_argument("--reps", type=int, default=20)
    a = p.parse_args()
    torch.set_num_threads(1)
    eager_fusion.set_enabled(False)
    print(f"{'case':24}{'neuron min/med us':>20}{'cpu min/med us':>20}{'cpu/neuron':>12}")
    for name, (make, fn, bwd) in cases().items():
        if a.k and a.k not in name:
            continue
        base = make()
        ins = {}
        for dev in ("neuron", "cpu"):
            ins[dev] = [
                t.detach().to(dev).requires_grad_(t.requires_grad)
                if t.is_floating_point()
                else t.to(dev)
                for t in base
            ]
        times = {"neuron": [], "cpu": []}
        for dev in ("neuron", "cpu"):
            for _ in range(3):
                run_case(fn, ins[dev], bwd)
        torch.neuron.synchronize()
        for _ in range(a.rounds):
            for dev in ("neuron", "cpu"):
                t0 = time.process_time()
                for _ in range(a.reps):
                    run_case(fn, ins[dev], bwd)
                if dev == "neuron":
                    torch.neuron.synchronize()
                times[dev].append((time.process_time() - t0) / a.reps * 1e6)
        n, c = times["neuron"], times["cpu"]
        ratio = statistics.median(c) / statistics.median(n)
        print(
            f"{name:24}{min(n):9.1f}/{statistics.median(n):9.1f}"
            f"{min(c):11.1f}/{statistics.median(c):8.1f}{ratio:12.2f}",
            flush=True,
        )


if __name__ == "__main__":
    main()
