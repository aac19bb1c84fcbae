"""A MoE transformer in TorchTitan's style (router top-k, token
permutation, experts through torch._grouped_mm, load-balancing loss)
trained on neuron and on CPU from one seed, eager and compiled: losses and
final parameters agree and nothing falls back to the CPU. Under
torch.compile the per-expert token counts change every step (offs is data)
without recompiling, and each _grouped_mm, like the router's topk, argsort
and cumsum, is an extern step of the compiled program (lower_grouped_mm.py,
lower_sort_scan.py), not an eager op."""

import copy

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import torch_neuronx

DEV = "neuron"


class MoE(nn.Module):
    """Top-k routed SwiGLU experts, weights (E, in, out) as TorchTitan's
    GroupedExperts; tokens sorted by expert, one _grouped_mm per weight."""

    def __init__(self, dim, hidden, experts, top_k, expert_dtype):
        super().__init__()
        self.experts, self.top_k, self.expert_dtype = experts, top_k, expert_dtype
        self.router = nn.Linear(dim, experts, bias=False)
        self.w1 = nn.Parameter(torch.randn(experts, dim, hidden) * dim**-0.5)
        self.w3 = nn.Parameter(torch.randn(experts, dim, hidden) * dim**-0.5)
        self.w2 = nn.Parameter(torch.randn(experts, hidden, dim) * hidden**-0.5)

    def forward(self, x):
        shape = x.shape
        x = x.reshape(-1, shape[-1])
        probs = self.router(x).softmax(-1)  # (T, E)
        top_p, top_e = probs.topk(self.top_k, dim=-1)  # (T, k)
        top_p = top_p / top_p.sum(-1, keepdim=True)
        flat_e = top_e.reshape(-1)  # (T*k)
        experts = torch.arange(self.experts, device=x.device)
        counts = (flat_e.unsqueeze(1) == experts).sum(0)  # tokens per expert
        order = flat_e.argsort(stable=True)
        token = order // self.top_k
        offs = counts.cumsum(0).to(torch.int32)
        # Experts in expert_dtype (bfloat16: mixed precision as TorchTitan's
        # recipes; PyTorch's meta for _grouped_mm, which torch.compile uses,
        # takes only bfloat16).
        dt = self.expert_dtype
        xs = x.index_select(0, token).to(dt)
        w1, w2, w3 = self.w1.to(dt), self.w2.to(dt), self.w3.to(dt)
        h = F.silu(torch._grouped_mm(xs, w1, offs)) * torch._grouped_mm(xs, w3, offs)
        out = torch._grouped_mm(h, w2, offs).to(x.dtype)
        out = out * top_p.reshape(-1).index_select(0, order).unsqueeze(1)
        y = torch.zeros_like(x).index_add(0, token, out)
        # Switch-style load balance: E * sum_e (fraction routed to e) * (mean prob of e).
        frac = counts.to(x.dtype) / flat_e.numel()
        aux = self.experts * (frac * probs.mean(0)).sum()
        return y.reshape(shape), aux


class Block(nn.Module):
    def __init__(self, dim, heads, hidden, experts, top_k, expert_dtype):
        super().__init__()
        self.heads = heads
        self.n1, self.n2 = nn.RMSNorm(dim), nn.RMSNorm(dim)
        self.qkv = nn.Linear(dim, 3 * dim, bias=False)
        self.proj = nn.Linear(dim, dim, bias=False)
        self.moe = MoE(dim, hidden, experts, top_k, expert_dtype)

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = self.qkv(self.n1(x)).view(b, t, 3, self.heads, d // self.heads).unbind(2)
        a = F.scaled_dot_product_attention(
            q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), is_causal=True
        )
        x = x + self.proj(a.transpose(1, 2).reshape(b, t, d))
        m, aux = self.moe(self.n2(x))
        return x + m, aux


class MoETransformer(nn.Module):
    def __init__(
        self, expert_dtype, vocab=64, dim=32, heads=4, hidden=48, experts=4, top_k=2, layers=2
    ):
        super().__init__()
        self.emb = nn.Embedding(vocab, dim)
        self.blocks = nn.ModuleList(
            Block(dim, heads, hidden, experts, top_k, expert_dtype) for _ in range(layers)
        )
        self.norm = nn.RMSNorm(dim)
        self.head = nn.Linear(dim, vocab, bias=False)

    def forward(self, idx, targets):
        x = self.emb(idx)
        aux = 0.0
        for blk in self.blocks:
            x, a = blk(x)
            aux = aux + a
        logits = self.head(self.norm(x))
        return F.cross_entropy(logits.flatten(0, 1), targets.flatten()) + 0.01 * aux


def _train(model, device, steps, compile_it):
    model = model.to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
    fwd = torch.compile(model, backend="neuron") if compile_it else model
    g = torch.Generator().manual_seed(1)
    losses = []
    for _ in range(steps):
        idx = torch.randint(0, 64, (2, 16), generator=g)
        tgt = torch.randint(0, 64, (2, 16), generator=g)
        loss = fwd(idx.to(device), tgt.to(device))
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses, {k: v.detach().cpu() for k, v in model.state_dict().items()}


@pytest.mark.parametrize(
    "compile_it,expert_dtype",
    [(False, torch.float32), (False, torch.bfloat16), (True, torch.bfloat16)],
    ids=["eager-f32", "eager-bf16", "compiled-bf16"],
)
def test_moe_transformer_trains_like_cpu(compile_it, expert_dtype):
    torch.manual_seed(0)
    base = MoETransformer(expert_dtype)
    torch_neuronx.clear_op_tracking()
    if compile_it:
        torch._dynamo.reset()
    cpu_losses, cpu_params = _train(copy.deepcopy(base), "cpu", 6, False)
    torch_neuronx.clear_op_tracking()
    torch.neuron.reset_dynamo_metrics()
    # A recompilation (offs or the counts guarded as shapes) raises.
    with torch._dynamo.config.patch(error_on_recompile=True) if compile_it else _null():
        dev_losses, dev_params = _train(copy.deepcopy(base), DEV, 6, compile_it)
    assert torch_neuronx.get_fallback_ops() == []
    if compile_it:
        # Compiled, each _grouped_mm is an extern step of the program calling
        # the kernel (no eager op runs): per layer 3 forward, 6 backward (data
        # and weights), whether the graphs were compiled or loaded warm; the
        # router's topk, argsort and cumsum are 3 more (lower_sort_scan.py),
        # so no op of the model is a host step.
        m = torch.neuron.get_dynamo_metrics()
        assert m["extern_kernels"] == 12 * len(base.blocks), m
        assert m["fallback_graphs"] == 0 and m["host_steps"] == 0, m
    else:
        executed = torch_neuronx.get_executed_ops()
        assert any("_grouped_mm" in op for op in executed), executed
    # bfloat16 experts: both sides sum in float32 and round once, but an
    # occasional one-ulp difference in a rounding moves later steps a little.
    tol = 1e-4 if expert_dtype == torch.float32 else 5e-3
    torch.testing.assert_close(
        torch.tensor(dev_losses), torch.tensor(cpu_losses), rtol=tol, atol=tol
    )
    for name, p in cpu_params.items():
        torch.testing.assert_close(dev_params[name], p, rtol=10 * tol, atol=tol, msg=name)


class _null:
    def __enter__(self):
        return self

    def __exit__(self, *a):
        return False
