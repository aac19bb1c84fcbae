"""bfloat16 relu, threshold_backward, add / sub, mul, div and the activations
silu / sigmoid / tanh / exp with their backward, computed on the 16-bit data
(libtrn/src/kernels/pointwise/ew_bf16.c): bit for bit the staged float path
(widen to float32, the float op, round with trn_float_to_bf16), NaN payloads
and denormal sums included, at every CPU level the build holds; and the same
values as PyTorch CPU."""

import os
import subprocess
import sys

import pytest
import torch

import torch_neuronx

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# Run in a subprocess per CPU level. The reference is the float path on
# neuron itself: bfloat16 -> float32 copy (exact), the float32 op, float32 ->
# bfloat16 copy (copy.c's trn_float_to_bf16, the staged path's rounding).
CHECK = r"""
import torch, torch_neuronx

def bits(t):
    return t.cpu().view(torch.int16)

def same(got, ref, what):
    g, r = bits(got), bits(ref)
    bad = (g != r).nonzero()
    assert bad.numel() == 0, (what, bad[:5].flatten().tolist(), g[bad[:5]].tolist(), r[bad[:5]].tolist())

def f2b(t):
    return t.to(torch.bfloat16)

def same_but_nan_pairs(got, ref, p, q, what):
    # A product or quotient of two NaNs is a NaN of either operand: x86 takes
    # the instruction's first operand's, and the compiler orders the operands
    # of a commutative op as it likes (the float path has no fixed choice).
    both = (p.isnan() & q.isnan()).cpu()
    assert got.cpu()[both].isnan().all(), what
    same(got.cpu()[~both], ref.cpu()[~both], what)

gen = torch.Generator().manual_seed(0)
every = torch.arange(-32768, 32768, dtype=torch.int32).to(torch.int16).view(torch.bfloat16)
x = every.to("neuron")
other = every[torch.randperm(65536, generator=gen)].to("neuron")
grad = (torch.randn(65536, generator=gen) * 3).bfloat16()
grad[::97] = float("nan")
grad = grad.to("neuron")

same(torch.relu(x), f2b(torch.relu(x.float())), "relu")
y = x.clone()
y.relu_()
same(y, f2b(torch.relu(x.float())), "relu_")
for t in (0.0, 0.1, -1.3, float("inf")):
    for g, o in ((grad, x), (x, grad), (other, x)):
        ref = f2b(torch.ops.aten.threshold_backward(g.float(), o.float(), t))
        same(torch.ops.aten.threshold_backward(g, o, t), ref, ("threshold_backward", t))
for alpha in (1, -1, 2, 0.5):
    ref_add = f2b(torch.add(x.float(), other.float(), alpha=alpha))
    ref_sub = f2b(torch.sub(x.float(), other.float(), alpha=alpha))
    if alpha in (1, -1):  # the one-rounding form; others keep ATen's 16-bit rounding of alpha*b
        same(torch.add(x, other, alpha=alpha), ref_add, ("add", alpha))
        same(torch.sub(x, other, alpha=alpha), ref_sub, ("sub", alpha))
    else:
        torch.add(x, other, alpha=alpha)
        torch.sub(x, other, alpha=alpha)
# mul / div and the activations: every bfloat16 against a permutation (NaN,
# inf, denormals, signed zeros), and against a gradient; odd lengths.
F = torch.nn.functional
A = torch.ops.aten
for p, q in ((x, other), (grad, x), (x[:70001], other[:70001]), (x[5:22], grad[:17])):
    same_but_nan_pairs(p * q, f2b(p.float() * q.float()), p, q, "mul")
    same_but_nan_pairs(p / q, f2b(p.float() / q.float()), p, q, "div")
    same(A.silu_backward(p, q), f2b(A.silu_backward(p.float(), q.float())), "silu_backward")
    same(A.sigmoid_backward(p, q), f2b(A.sigmoid_backward(p.float(), q.float())), "sigmoid_backward")
    same(A.tanh_backward(p, q), f2b(A.tanh_backward(p.float(), q.float())), "tanh_backward")
    for name, f in (("silu", F.silu), ("sigmoid", torch.sigmoid), ("tanh", torch.tanh), ("exp", torch.exp)):
        same(f(p), f2b(f(p.float())), name)
# Products of tiny values: denormal results inside groups of 16.
for n in (70001, 17):
    a = torch.randint(-14000, 14000, (n,), generator=gen).to(torch.int16).view(torch.bfloat16)
    b = torch.randint(-14000, 14000, (n,), generator=gen).to(torch.int16).view(torch.bfloat16)
    a, b = a.to("neuron"), b.to("neuron")
    same(a * b, f2b(a.float() * b.float()), ("denormal mul", n))
# Sums of tiny values: some groups of 16 hold a nonzero denormal result
# (vcvtneps2bf16 would flush it), odd lengths leave scalar tails.
for n in (70001, 17, 5):
    a = torch.randint(-200, 200, (n,), generator=gen).to(torch.int16).view(torch.bfloat16)
    b = torch.randint(-200, 200, (n,), generator=gen).to(torch.int16).view(torch.bfloat16)
    a, b = a.to("neuron"), b.to("neuron")
    same(a + b, f2b(a.float() + b.float()), ("denormal add", n))
    same(a - b, f2b(a.float() - b.float()), ("denormal sub", n))
# ResNet's shapes, in-place add, and layouts left to the staged path.
a = torch.randn(32, 64, 8, 8, generator=gen).bfloat16().to("neuron")
b = torch.randn(32, 64, 8, 8, generator=gen).bfloat16().to("neuron")
s = a.clone()
s.add_(b)
same(s, f2b(a.float() + b.float()), "add_")
same(a.transpose(2, 3) + b, f2b(a.float().transpose(2, 3) + b.float()), "strided add")
same(a[..., ::2].relu(), f2b(a.float()[..., ::2].relu()), "strided relu")
same(a + b.float(), (a.float() + b.float()), "mixed add")
print("ok", torch_neuronx.cpu_capability())
"""


def _levels():
    return list(torch_neuronx.cpu_capabilities())


@pytest.mark.parametrize("level", _levels())
def test_bits_equal_float_path(level):
    env = dict(os.environ, TORCH_NEURONX_CPU_CAPABILITY=level)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [ROOT, os.environ.get("PYTHONPATH")]))
    r = subprocess.run(
        [sys.executable, "-c", CHECK], env=env, capture_output=True, text=True, timeout=600
    )
    assert r.returncode == 0, r.stderr[-3000:]
    if r.stdout.split()[-1] != level:  # refused on this CPU: the baseline ran
        pytest.skip(f"{level} does not run here")


@pytest.mark.parametrize("shape", [(32, 32, 16, 16), (32, 128, 4, 4), (1000,)])
def test_values_equal_cpu(shape):
    gen = torch.Generator().manual_seed(1)
    a = torch.randn(shape, generator=gen).bfloat16()
    b = torch.randn(shape, generator=gen).bfloat16()
    a.view(-1)[::31] = float("nan")
    na, nb = a.to("neuron"), b.to("neuron")
    for got, ref in (
        (torch.relu(na), torch.relu(a)),
        (na + nb, a + b),
        (na - nb, a - b),
        (na * nb, a * b),
        (
            torch.ops.aten.threshold_backward(nb, na, 0.0),
            torch.ops.aten.threshold_backward(b, a, 0.0),
        ),
    ):
        torch.testing.assert_close(got.cpu(), ref, rtol=0, atol=0, equal_nan=True)
    # exp-based activations: CPU's exp may differ by a float ulp before rounding.
    for got, ref in (
        (torch.nn.functional.silu(na), torch.nn.functional.silu(a)),
        (torch.ops.aten.silu_backward(nb, na), torch.ops.aten.silu_backward(b, a)),
        (torch.tanh(na), torch.tanh(a)),
    ):
        torch.testing.assert_close(got.cpu(), ref, equal_nan=True)
