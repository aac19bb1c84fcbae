"""TorchAO float8 training (torchao.float8.convert_to_float8_training,
tensorwise and rowwise recipes) of a small transformer on neuron vs the
same on CPU from one seed: the float8 casts, amax scaling and
torch._scaled_mm run natively (nothing in get_fallback_ops()), and losses
and final parameters agree. torchao is pinned in requirements-dev.txt."""

import copy

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import torch_neuronx

torchao_float8 = pytest.importorskip("torchao.float8", reason="torchao (requirements-dev.txt)")

DEV = "neuron"


class Block(nn.Module):
    """Pre-norm attention + MLP; every projection an nn.Linear (what
    convert_to_float8_training swaps), dims multiples of 16 as it needs."""

    def __init__(self, dim=64, heads=4, hidden=128):
        super().__init__()
        self.heads = heads
        self.n1, self.n2 = nn.RMSNorm(dim), nn.RMSNorm(dim)
        self.qkv = nn.Linear(dim, 3 * dim, bias=False)
        self.proj = nn.Linear(dim, dim, bias=False)
        self.up = nn.Linear(dim, hidden, bias=False)
        self.down = nn.Linear(hidden, dim, bias=False)

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = self.qkv(self.n1(x)).view(b, t, 3, self.heads, d // self.heads).unbind(2)
        a = F.scaled_dot_product_attention(
            q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), is_causal=True
        )
        x = x + self.proj(a.transpose(1, 2).reshape(b, t, d))
        return x + self.down(F.gelu(self.up(self.n2(x))))


def _train(model, device, recipe, compile_it):
    model = model.to(device)
    cfg = torchao_float8.Float8LinearConfig.from_recipe_name(recipe)
    torchao_float8.convert_to_float8_training(model, config=cfg)
    fwd = torch.compile(model, backend="neuron") if compile_it else model
    # SGD: Adam would turn last-bit differences of tiny gradients into full steps.
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    g = torch.Generator().manual_seed(1)
    losses = []
    for _ in range(4):
        x = torch.randn(2, 16, 64, generator=g).to(device)
        loss = fwd(x).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses, {k: v.detach().cpu() for k, v in model.state_dict().items()}


@pytest.mark.parametrize("recipe", ["tensorwise", "rowwise"])
@pytest.mark.parametrize("compile_it", [False, True], ids=["eager", "compiled"])
def test_float8_training_like_cpu(recipe, compile_it):
    torch.manual_seed(0)
    base = nn.Sequential(Block(), Block())
    if compile_it:
        torch._dynamo.reset()
    cpu_losses, cpu_params = _train(copy.deepcopy(base), "cpu", recipe, False)
    torch_neuronx.clear_op_tracking()
    torch.neuron.reset_dynamo_metrics()
    dev_losses, dev_params = _train(copy.deepcopy(base), DEV, recipe, compile_it)
    assert torch_neuronx.get_fallback_ops() == []
    executed = torch_neuronx.get_executed_ops()
    if compile_it:
        # The float8 matmuls are extern steps of the compiled programs
        # (lower_scaled_mm.py), not eager _scaled_mm calls.
        m = torch.neuron.get_dynamo_metrics()
        assert m["extern_kernels"] > 0 and m["fallback_graphs"] == 0, m
        assert not any("_scaled_mm" in op for op in executed), executed
    else:
        assert any("_scaled_mm" in op for op in executed), executed
    # Tolerances: float32 sums in another order can move a value across a
    # float8 rounding boundary (a 6-25% step for that element), so a few
    # gradient elements differ by one float8 step; values otherwise agree.
    torch.testing.assert_close(
        torch.tensor(dev_losses), torch.tensor(cpu_losses), rtol=1e-3, atol=1e-5
    )
    for name, p in cpu_params.items():
        torch.testing.assert_close(
            dev_params[name], p, rtol=1e-2, atol=1e-3, msg=lambda m, name=name: f"{name}: {m}"
        )
