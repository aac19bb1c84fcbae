"""MoE and float8 matrix products: neuron (libtrn grouped_mm.c / scaled_mm.c)
vs PyTorch CPU, side by side in one run.

Rows: torch._grouped_mm (MoE forward shape, bf16 and fp32) vs CPU's
_grouped_mm and vs a Python loop of mm on neuron; torch._scaled_mm fp8
(rowwise) vs a bf16 mm on neuron and vs CPU's _scaled_mm; MXFP8 _scaled_mm
(e8m0 block scales; CPU has no MX path) vs bf16 mm and rowwise on neuron; one training
step of a small MoE transformer (tests/test_moe_model.py) vs CPU, eager
and compiled.
Ratios are speed-ups (CPU time / neuron time, or loop / grouped): higher is
better; the sides of a row are timed in alternated rounds (fastest round).
Target (the issue's, never a test's): >= 1.2x PyTorch CPU.

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
import alternate  # noqa: E402
from alternate import alternated  # noqa: E402


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


def bench_grouped(tokens, dim, hidden, experts):
    print(f"_grouped_mm: {tokens} tokens x {dim} -> {hidden}, {experts} experts")
    for dtype in (torch.bfloat16, torch.float32):
        offs = counts(tokens, experts, 0)
        x = torch.randn(tokens, dim).to(dtype)
        w = torch.randn(experts, hidden, dim).to(dtype).transpose(-2, -1)
        xd, wd, od = x.to("neuron"), w.to("neuron"), offs.to("neuron")
        bounds = [0] + offs.tolist()

        def loop():
            for g in range(experts):
                torch.mm(xd[bounds[g] : bounds[g + 1]], wd[g])

        t = alternated(
            {
                "ours": (lambda: torch._grouped_mm(xd, wd, od), "neuron"),
                "cpu": (lambda: torch._grouped_mm(x, w, offs), "cpu"),
                "loop": (loop, "neuron"),
            }
        )
        row(f"{str(dtype)[6:]} neuron vs CPU _grouped_mm", t["ours"], t["cpu"], "CPU")
        row(f"{str(dtype)[6:]} neuron vs loop of mm (neuron)", t["ours"], t["loop"], "loop")


def bench_scaled(m, k, n):
    print(f"_scaled_mm fp8 e4m3fn rowwise: {m} x {k} x {n} -> bf16")
    a = torch.randn(m, k).to(torch.float8_e4m3fn)
    b = torch.randn(n, k).to(torch.float8_e4m3fn).t()
    sa, sb = torch.rand(m, 1) + 0.5, torch.rand(1, n) + 0.5
    ad, bd, sad, sbd = (t.to("neuron") for t in (a, b, sa, sb))
    a16, b16 = ad.to(torch.bfloat16), bd.to(torch.bfloat16)
    t = alternated(
        {
            "ours": (
                lambda: torch._scaled_mm(ad, bd, sad, sbd, out_dtype=torch.bfloat16),
                "neuron",
            ),
            "cpu": (lambda: torch._scaled_mm(a, b, sa, sb, out_dtype=torch.bfloat16), "cpu"),
            "bf16": (lambda: torch.mm(a16, b16), "neuron"),
        }
    )
    row("neuron vs CPU _scaled_mm", t["ours"], t["cpu"], "CPU")
    row("neuron fp8 _scaled_mm vs neuron bf16 mm", t["ours"], t["bf16"], "bf16 mm")


def bench_scaled_mx(m, k, n):
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
    a16, b16 = ad.to(torch.bfloat16), bd.to(torch.bfloat16)
    r1, r2 = (torch.ones(m, 1).to("neuron"), torch.ones(1, n).to("neuron"))
    t = alternated(
        {
            "ours": (
                lambda: torch._scaled_mm(ad, bd, sad, sbd, out_dtype=torch.bfloat16),
                "neuron",
            ),
            "bf16": (lambda: torch.mm(a16, b16), "neuron"),
            "rowwise": (
                lambda: torch._scaled_mm(ad, bd, r1, r2, out_dtype=torch.bfloat16),
                "neuron",
            ),
        }
    )
    row("neuron MX _scaled_mm vs neuron bf16 mm", t["ours"], t["bf16"], "bf16 mm")
    row("neuron MX _scaled_mm vs neuron rowwise _scaled_mm", t["ours"], t["rowwise"], "rowwise")


def bench_train(expert_dtype):
    # The neuron step eager and under torch.compile(backend="neuron") (its
    # grouped products and the router's topk/argsort/cumsum are extern
    # steps), CPU eager as the reference (PyTorch's meta for _grouped_mm
    # takes only bfloat16, so CPU Inductor would not take float32 experts).
    print(f"MoE transformer training step (experts in {str(expert_dtype)[6:]}, batch 8 x 64)")
    fns = {}
    how = ("eager", "compiled") if expert_dtype == torch.bfloat16 else ("eager",)
    for dev, compiled in [("cpu", False)] + [("neuron", h == "compiled") for h in how]:
        torch.manual_seed(0)
        model = MoETransformer(expert_dtype, dim=128, heads=4, hidden=256, experts=8, layers=2).to(
            dev
        )
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
        fwd = torch.compile(model, backend="neuron") if compiled else model
        g = torch.Generator().manual_seed(0)

        def step(fwd=fwd, opt=opt, dev=dev, g=g):
            # new tokens each step: the per-expert counts change (no recompile)
            idx = torch.randint(0, 64, (8, 64), generator=g).to(dev)
            tgt = torch.randint(0, 64, (8, 64), generator=g).to(dev)
            loss = fwd(idx, tgt)
            opt.zero_grad()
            loss.backward()
            opt.step()

        fns[f"{dev}-{'compiled' if compiled else 'eager'}"] = (step, dev)
    t = alternated(fns)
    for h in how:
        row(f"neuron {h} vs CPU eager train step", t[f"neuron-{h}"], t["cpu-eager"], "CPU")


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--quick", action="store_true")
    args = p.parse_args()
    alternate.ROUNDS = 3 if args.quick else 5
    torch.manual_seed(0)
    bench_grouped(4096, 512, 1024, 8)
    bench_scaled(1024, 1024, 1024)
    bench_scaled_mx(1024, 1024, 1024)
    bench_train(torch.float32)
    bench_train(torch.bfloat16)


if __name__ == "__main__":
    main()
