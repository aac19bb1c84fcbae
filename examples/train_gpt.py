"""Trains a small GPT-style language model (tied input/output embeddings,
pre-norm transformer blocks, causal attention through
F.scaled_dot_product_attention, GELU-tanh MLP) on neuron for a few AdamW
steps, then prints the fallback report: which ops ran on the CPU instead of
natively (the goal is none). Run by `make demo` after the quickstart.

No downloads: the "corpus" is a repeating synthetic sequence the model
learns to continue, so the loss visibly falls.
"""

import collections
import math

import torch
import torch.nn as nn
import torch.nn.functional as F

import torch_neuronx


class Block(nn.Module):
    def __init__(self, d: int, heads: int):
        super().__init__()
        self.heads = heads
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.qkv, self.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
        self.mlp = nn.Sequential(
            nn.Linear(d, 4 * d), nn.GELU(approximate="tanh"), nn.Linear(4 * d, d)
        )

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(d, dim=-1)
        q, k, v = (z.view(b, t, self.heads, d // self.heads).transpose(1, 2) for z in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(y.transpose(1, 2).reshape(b, t, d))
        return x + self.mlp(self.ln2(x))


class TinyGPT(nn.Module):
    def __init__(
        self, vocab: int = 64, d: int = 64, layers: int = 2, heads: int = 4, ctx: int = 32
    ):
        super().__init__()
        self.tok = nn.Embedding(vocab, d)
        self.pos = nn.Embedding(ctx, d)
        self.blocks = nn.ModuleList(Block(d, heads) for _ in range(layers))
        self.ln = nn.LayerNorm(d)
        self.head = nn.Linear(d, vocab, bias=False)
        self.head.weight = self.tok.weight  # tied weights
        nn.init.normal_(self.tok.weight, std=0.02)  # GPT-2's init: small logits at step 0

    def forward(self, ids):
        x = self.tok(ids) + self.pos(torch.arange(ids.shape[1], device=ids.device))
        for blk in self.blocks:
            x = blk(x)
        return self.head(self.ln(x))


def main() -> None:
    torch.manual_seed(0)
    vocab, ctx = 64, 32
    model = TinyGPT(vocab=vocab, ctx=ctx).to("neuron")
    # Until .to() keeps Parameter identity everywhere (issue 7), re-tie.
    model.head.weight = model.tok.weight
    assert model.head.weight is model.tok.weight, "tied weights came apart"
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
    pattern = torch.arange(ctx + 1) * 7 % vocab  # a sequence worth learning
    data = torch.stack([pattern.roll(-s) for s in range(16)]).to("neuron")
    torch_neuronx.clear_op_tracking()
    for step in range(30):
        logits = model(data[:, :-1])
        loss = F.cross_entropy(logits.reshape(-1, vocab), data[:, 1:].reshape(-1))
        opt.zero_grad()
        loss.backward()
        opt.step()
        if step % 5 == 0 or step == 29:
            print(f"step {step:2d}: loss {loss.item():.3f} (chance {math.log(vocab):.3f})")
    torch.neuron.synchronize()
    fallback = collections.Counter(torch_neuronx.get_fallback_ops())
    print(f"native neuron op invocations: {len(torch_neuronx.get_executed_ops())}")
    print(
        f"CPU fallback: {sum(fallback.values())} invocations of {len(fallback)} ops"
        + ("" if fallback else " (empty: every op ran natively)")
    )
    for op, n in fallback.most_common():
        print(f"  {op:40s} {n}")


if __name__ == "__main__":
    main()
