"""MoE and float8 matrix products: neuron (libtrn grouped_mm.c / scaled_mm.c)
vs PyTorch CPU, side by side in one run.

Rows: torch._grouped_mm (MoE forward shape, bf16 and fp32) vs CPU's
_grouped_mm and vs a Python loop of mm on neuron; torch._scaled_mm fp8
(rowwise) vs a bf16 mm on neuron and vs CPU's _scaled_mm; MXFP8 _scaled_mm
(e8m0 block scales; CPU has no MX path) vs bf16 mm and rowwise on neuron; one training
step of a small MoE transformer (tests/test_moe_model.py) vs CPU.
Ratios are speed-ups (CPU time / neuron time, or loop / grouped): higher is
better. Target (the issue's, never a test's): >= 1.2x PyTorch CPU.

Run: make bench   (or .venv/bin/python bench/bench_moe.py [--quick])
"""

import argparse
import pathlib
import sys

import torch

import torch_neuronx  # noqa: F401

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent / "tests"))
from test_moe_model import MoETransformer  # noqa: E402

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from bench_ops import timeit  # noqa: E402  (the same timer as the op table)


def row(name, ours, theirs, what):
    print(
        f"  {name:46}{ours * 1e3:10.3f} ms{theirs * 1e3:10.3f} ms  {theirs / ours:6.2f}x  vs {what}",
        flush=True,
    )


def counts(tokens, experts, seed):
    g = torch.Generator().manual_seed(seed)
    c = torch.multinomial(torch.ones(experts), tokens, replacement=True, generator=g).bincount(
        minlength=experts
    )
    return c.cumsum(0).to(torch.int32)


def bench_grouped(min_time, tokens, dim, hidden, experts):
    print(f"_grouped_mm: {tokens} tokens x {dim} -> {hidden}, {experts} experts")
    for dtype in (torch.bfloat16, torch.float32):
        offs = counts(tokens, experts, 0)
        x = torch.randn(tokens, dim).to(dtype)
        w = torch.randn(experts, hidden, dim).to(dtype).transpose(-2, -1)
        xd, wd, od = x.to("neuron"), w.to("neuron"), offs.to("neuron")
        ours = timeit(lambda: torch._grouped_mm(xd, wd, od), "neuron", min_time)
        cpu = timeit(lambda: torch._grouped_mm(x, w, offs), "cpu", min_time)
        row(f"{str(dtype)[6:]} neuron vs CPU _grouped_mm", ours, cpu, "CPU")
        bounds = [0] + offs.tolist()

        def loop():
            for g in range(experts):
                torch.mm(xd[bounds[g] : bounds[g + 1]], wd[g])

        row(
            f"{str(dtype)[6:]} neuron vs loop of mm (neuron)",
            ours,
            timeit(loop, "neuron", min_time),
            "loop",
        )


def bench_scaled(min_time, m, k, n):
    print(f"_scaled_mm fp8 e4m3fn rowwise: {m} x {k} x {n} -> bf16")
    a = torch.randn(m, k).to(torch.float8_e4m3fn)
    b = torch.randn(n, k).to(torch.float8_e4m3fn).t()
    sa, sb = torch.rand(m, 1) + 0.5, torch.rand(1, n) + 0.5
    ad, bd, sad, sbd = (t.to("neuron") for t in (a, b, sa, sb))
    ours = timeit(
        lambda: torch._scaled_mm(ad, bd, sad, sbd, out_dtype=torch.bfloat16), "neuron", min_time
    )
    cpu = timeit(lambda: torch._scaled_mm(a, b, sa, sb, out_dtype=torch.bfloat16), "cpu", min_time)
    row("neuron vs CPU _scaled_mm", ours, cpu, "CPU")
    a16, b16 = ad.to(torch.bfloat16), bd.to(torch.bfloat16)
    bf16 = timeit(lambda: torch.mm(a16, b16), "neuron", min_time)
    row("neuron fp8 _scaled_mm vs neuron bf16 mm", ours, bf16, "bf16 mm")


def bench_scaled_mx(min_time, m, k, n):
    # PyTorch CPU has no MX path: the comparison is neuron's bf16 mm of the
    # same shape (and neuron's rowwise fp8 _scaled_mm, for the MX overhead).
    print(f"_scaled_mm MXFP8 e4m3fn, e8m0 scales per 32 (swizzled): {m} x {k} x {n} -> bf16")
    from torchao.prototype.mx_formats.utils import to_blocked

    kb = (k + 31) // 32
    a = torch.randn(m, k).to(torch.float8_e4m3fn)
    b = torch.randn(n, k).to(torch.float8_e4m3fn).t()
    sa = to_blocked(torch.randint(120, 135, (m, kb), dtype=torch.uint8).view(torch.float8_e8m0fnu))
    sb = to_blocked(torch.randint(120, 135, (n, kb), dtype=torch.uint8).view(torch.float8_e8m0fnu))
    ad, bd, sad, sbd = (t.to("neuron") for t in (a, b, sa, sb))
    ours = timeit(
        lambda: torch._scaled_mm(ad, bd, sad, sbd, out_dtype=torch.bfloat16), "neuron", min_time
    )
    a16, b16 = ad.to(torch.bfloat16), bd.to(torch.bfloat16)
    bf16 = timeit(lambda: torch.mm(a16, b16), "neuron", min_time)
    row("neuron MX _scaled_mm vs neuron bf16 mm", ours, bf16, "bf16 mm")
    r1, r2 = (torch.ones(m, 1).to("neuron"), torch.ones(1, n).to("neuron"))
    rowwise = timeit(
        lambda: torch._scaled_mm(ad, bd, r1, r2, out_dtype=torch.bfloat16), "neuron", min_time
    )
    row("neuron MX _scaled_mm vs neuron rowwise _scaled_mm", ours, rowwise, "rowwise")


def bench_train(min_time, expert_dtype):
    print(f"MoE transformer training step (experts in {str(expert_dtype)[6:]}, batch 8 x 64)")
    times = {}
    for dev in ("neuron", "cpu"):
        torch.manual_seed(0)
        model = MoETransformer(expert_dtype, dim=128, heads=4, hidden=256, experts=8, layers=2).to(
            dev
        )
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
        idx = torch.randint(0, 64, (8, 64)).to(dev)
        tgt = torch.randint(0, 64, (8, 64)).to(dev)

        def step():
            loss = model(idx, tgt)
            opt.zero_grad()
            loss.backward()
            opt.step()

        times[dev] = timeit(step, dev, min_time)
    row("neuron vs CPU train step", times["neuron"], times["cpu"], "CPU")


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--quick", action="store_true")
    args = p.parse_args()
    t = 0.2 if args.quick else 1.0
    torch.manual_seed(0)
    bench_grouped(t, 4096, 512, 1024, 8)
    bench_scaled(t, 1024, 1024, 1024)
    bench_scaled_mx(t, 1024, 1024, 1024)
    bench_train(t, torch.float32)
    bench_train(t, torch.bfloat16)


if __name__ == "__main__":
    main()
