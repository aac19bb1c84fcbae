"""Trains a small transformer-ish block on neuron and reports which aten ops
ran through the CPU fallback, plus the neuron/CPU time of one training step.

    PYTHONPATH=. python examples/train_step.py [--steps N] [--time]
"""

import argparse
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

import torch_neuronx


class Block(nn.Module):
    def __init__(self, d=64, heads=4, vocab=100, manual_attn=False):
        super().__init__()
        self.heads = heads
        self.manual_attn = manual_attn
        self.emb = nn.Embedding(vocab, d)
        self.ln1 = nn.LayerNorm(d)
        self.qkv = nn.Linear(d, 3 * d)
        self.proj = nn.Linear(d, d)
        self.ln2 = nn.LayerNorm(d)
        self.fc1 = nn.Linear(d, 4 * d)
        self.act = nn.GELU()
        self.fc2 = nn.Linear(4 * d, d)
        self.drop = nn.Dropout(0.1)
        self.head = nn.Linear(d, vocab)

    def attn(self, x):
        b, t, d = x.shape
        q, k, v = self.qkv(x).chunk(3, dim=-1)
        q, k, v = (z.view(b, t, self.heads, d // self.heads).transpose(1, 2) for z in (q, k, v))
        if self.manual_attn:
            s = (q @ k.transpose(-2, -1)) / (d // self.heads) ** 0.5
            y = self.drop(torch.softmax(s, dim=-1)) @ v
        else:
            y = F.scaled_dot_product_attention(q, k, v, dropout_p=0.1 if self.training else 0.0)
        return self.proj(y.transpose(1, 2).reshape(b, t, d))

    def forward(self, idx):
        x = self.emb(idx)
        x = x + self.drop(self.attn(self.ln1(x)))
        x = x + self.drop(self.fc2(self.act(self.fc1(self.ln2(x)))))
        return self.head(x)


def make_opt(kind, params):
    if kind == "adamw":
        return torch.optim.AdamW(params, lr=1e-3)
    if kind == "adamw-loop":
        return torch.optim.AdamW(params, lr=1e-3, foreach=False)
    if kind == "sgd":
        return torch.optim.SGD(params, lr=1e-2, momentum=0.9)
    if kind == "sgd-loop":
        return torch.optim.SGD(params, lr=1e-2, momentum=0.9, foreach=False)
    raise ValueError(kind)


def run(device, steps, opt_kind, manual_attn, mlp_act=None, seed=0):
    torch.manual_seed(seed)
    model = Block(manual_attn=manual_attn)
    if mlp_act is not None:
        model.act = mlp_act
    model = model.to(device)
    opt = make_opt(opt_kind, model.parameters())
    loss_fn = nn.CrossEntropyLoss()
    g = torch.Generator().manual_seed(seed)
    idx = torch.randint(0, 100, (8, 32), generator=g).to(device)
    tgt = torch.randint(0, 100, (8, 32), generator=g).to(device)
    loss = None
    for _ in range(steps):
        opt.zero_grad()
        out = model(idx)
        loss = loss_fn(out.view(-1, out.shape[-1]), tgt.view(-1))
        loss.backward()
        opt.step()
    return loss


def sync(device):
    if device == "neuron":
        torch.neuron.synchronize()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=2)
    ap.add_argument("--time", action="store_true")
    args = ap.parse_args()
    fallbacks = set()
    for opt_kind in ("adamw", "adamw-loop", "sgd", "sgd-loop"):
        for manual in (False, True):
            torch_neuronx.clear_op_tracking()
            loss = run("neuron", args.steps, opt_kind, manual)
            sync("neuron")
            fb = torch_neuronx.get_fallback_ops()
            print(f"{opt_kind:11s} manual_attn={manual!s:5s} loss={loss.item():.4f} fallbacks={fb}")
            fallbacks.update(fb)
    for act in (
        nn.ReLU(),
        nn.SiLU(),
        nn.Tanh(),
        nn.Sigmoid(),
        nn.Hardtanh(),
        nn.LeakyReLU(),
        nn.ELU(),
        nn.Softplus(),
        nn.Mish(),
        nn.GELU(approximate="tanh"),
    ):
        torch_neuronx.clear_op_tracking()
        run("neuron", 1, "sgd", False, mlp_act=act)
        fb = torch_neuronx.get_fallback_ops()
        print(f"act {type(act).__name__:10s} fallbacks={fb}")
        fallbacks.update(fb)
    print("ALL FALLBACKS:", sorted(fallbacks))
    if args.time:
        torch.set_num_threads(torch.get_num_threads())
        for device in ("cpu", "neuron"):
            run(device, 2, "adamw", False)  # warm-up
            sync(device)
            t0 = time.perf_counter()
            run(device, 10, "adamw", False)
            sync(device)
            dt = (time.perf_counter() - t0) / 10
            print(f"{device}: {dt * 1e3:.2f} ms/step")


if __name__ == "__main__":
    main()
