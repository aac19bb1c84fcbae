"""torch._grouped_mm under torch.compile(backend="neuron") is an extern step
of the compiled program calling libtrn's grouped-mm kernel
(torch_neuronx/_compile/lower_grouped_mm.py), not a host step: a MoE expert
step (forward and backward: the 2d x 3d and 2d x 2d layouts) compiles with
no host step, runs bit-identical to eager, and its per-expert counts change
every step without a recompile (offs is data); the 3d x 3d layout, an
empty group and transposed operands too, against a float64 reference."""

import pytest
import torch
import torch._dynamo
import torch.nn.functional as F

import torch_neuronx  # noqa: F401

E, T, D, H = 4, 96, 32, 48


# A cache of its own: a warm load would skip the lowering under test.
pytestmark = pytest.mark.usefixtures("fresh_compile_cache")


def _experts(xs, w1, w2, offs, g):
    h = F.silu(torch._grouped_mm(xs, w1, offs))
    y = torch._grouped_mm(h, w2, offs)
    (y.float() * g).sum().backward()
    return y.detach()


def _routing(gen):
    """Tokens sorted by expert and the cumulative counts (new every step)."""
    ids = torch.randint(0, E, (T,), generator=gen)
    counts = torch.bincount(ids, minlength=E)
    return ids.argsort(stable=True), counts.cumsum(0).to(torch.int32)


def test_moe_expert_step_no_host_step_bit_identical_no_recompile():
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(T, D, generator=gen).bfloat16()
    w1 = torch.randn(E, D, H, generator=gen).bfloat16() * D**-0.5
    w2 = torch.randn(E, H, D, generator=gen).bfloat16() * H**-0.5
    g = torch.randn(T, D, generator=gen)
    params = {}
    for name in ("compiled", "eager"):
        params[name] = [w.to("neuron").requires_grad_() for w in (w1, w2)]
    f = torch.compile(_experts, backend="neuron")
    with torch._dynamo.config.patch(error_on_recompile=True):
        for _ in range(3):
            order, offs = _routing(gen)
            xs = x.index_select(0, order).to("neuron").requires_grad_()
            xe = xs.detach().clone().requires_grad_()
            o, gd = offs.to("neuron"), g.to("neuron")
            y = f(xs, *params["compiled"], o, gd)
            ye = _experts(xe, *params["eager"], o, gd)
            assert torch.equal(y.cpu(), ye.cpu())
            assert torch.equal(xs.grad.cpu(), xe.grad.cpu())
    for p, q in zip(params["compiled"], params["eager"]):
        assert torch.equal(p.grad.cpu(), q.grad.cpu())  # 2d x 2d weight gradients
    m = torch.neuron.get_dynamo_metrics()
    # forward: two products; backward: two per product (data and weights)
    assert (
        m["lowerings"] >= 1
        and m["host_steps"] == 0
        and m["extern_kernels"] == 6
        and m["fallback_graphs"] == 0
    ), m


def test_layouts_and_transposed_operands_against_float64():
    gen = torch.Generator().manual_seed(1)
    a3 = torch.randn(E, 16, D, generator=gen).bfloat16()
    b3 = torch.randn(E, H, D, generator=gen).bfloat16()  # used transposed
    a2 = torch.randn(D, 40, generator=gen).bfloat16()  # (40, D) transposed
    offs = torch.tensor([0, 10, 10, 40], dtype=torch.int32)  # an empty group

    def fn(a3, b3, a2, offs):
        y33 = torch._grouped_mm(a3, b3.transpose(-2, -1))  # 3d x 3d, no offs
        y23 = torch._grouped_mm(a2.t(), b3.transpose(-2, -1), offs)  # 2d x 3d
        return y33, y23

    dev = [t.to("neuron") for t in (a3, b3, a2, offs)]
    got = torch.compile(fn, backend="neuron", fullgraph=True)(*dev)
    want = fn(*dev)
    m = torch.neuron.get_dynamo_metrics()
    assert m["lowerings"] >= 1 and m["host_steps"] == 0 and m["extern_kernels"] == 2, m
    for g_, w_ in zip(got, want):
        assert torch.equal(g_.cpu(), w_.cpu())
    ref33 = a3.double() @ b3.double().transpose(-2, -1)
    torch.testing.assert_close(got[0].cpu().double(), ref33, rtol=2e-2, atol=2e-2)
    ref23 = torch.empty(40, H, dtype=torch.float64)
    lo = 0
    for e, hi in enumerate(offs.tolist()):
        ref23[lo:hi] = a2.t()[lo:hi].double() @ b3[e].double().t()
        lo = hi
    torch.testing.assert_close(got[1].cpu().double(), ref23, rtol=2e-2, atol=2e-2)


def _scaled_experts(a, b, sa, sb, offs):
    return (
        torch._scaled_grouped_mm(
            a, b.transpose(-2, -1), sa, sb, offs=offs, out_dtype=torch.bfloat16
        ),
    )


def test_scaled_grouped_mm_extern_bit_identical_no_recompile():
    """_scaled_grouped_mm (float8, rowwise scales): an extern step calling
    trn_scaled_grouped_mm_launch, eager's bits on every row a group owns,
    per-expert counts changing without a recompile."""
    gen = torch.Generator().manual_seed(2)
    b = (torch.randn(E, H, D, generator=gen) * 2).to(torch.float8_e4m3fn)  # (E, n, k)
    sb = torch.rand(E, H, generator=gen) + 0.5
    f = torch.compile(_scaled_experts, backend="neuron")
    with torch._dynamo.config.patch(error_on_recompile=True):
        for step in range(3):
            ids = torch.randint(0, E, (T,), generator=gen)
            ids[ids == step] = (step + 1) % E  # an empty group, a different one each step
            offs = torch.bincount(ids, minlength=E).cumsum(0).to(torch.int32)
            a = (torch.randn(T, D, generator=gen) * 2).to(torch.float8_e4m3fn)
            sa = torch.rand(T, generator=gen) + 0.5
            args = [t.to("neuron") for t in (a, b, sa, sb, offs)]
            (got,), (want,) = f(*args), _scaled_experts(*args)
            assert torch.equal(got.cpu(), want.cpu())
    m = torch.neuron.get_dynamo_metrics()
    assert m["host_steps"] == 0 and m["extern_kernels"] == 1 and m["fallback_graphs"] == 0, m


def test_scaled_grouped_mm_3d_3d_against_float64():
    # PyTorch's meta for _scaled_grouped_mm (what compile traces with) takes
    # e4m3fn operands and a bfloat16 output only, as CUDA.
    gen = torch.Generator().manual_seed(3)
    a = (torch.randn(E, 16, D, generator=gen) * 2).to(torch.float8_e4m3fn)
    b = (torch.randn(E, H, D, generator=gen) * 2).to(torch.float8_e4m3fn)
    sa, sb = torch.rand(E, 16, generator=gen) + 0.5, torch.rand(E, H, generator=gen) + 0.5

    def fn(a, b, sa, sb):
        return torch._scaled_grouped_mm(a, b.transpose(-2, -1), sa, sb, out_dtype=torch.bfloat16)

    args = [t.to("neuron") for t in (a, b, sa, sb)]
    got = torch.compile(fn, backend="neuron")(*args)
    assert torch.equal(got.cpu(), fn(*args).cpu())
    ref = (
        (a.double() @ b.double().transpose(-2, -1)) * sa.double()[..., None] * sb.double()[:, None]
    )
    torch.testing.assert_close(got.cpu().double(), ref, rtol=8e-3, atol=1e-3)  # one bf16 rounding
    assert torch.neuron.get_dynamo_metrics()["host_steps"] == 0
