"""Small models for the compile tests and bench/bench_compile.py: each builds
deterministically (seeded) and returns (model, make_batch, loss_fn)."""

import os

import torch
import torch.nn as nn
import torch.nn.functional as F

os.environ.setdefault("HF_HUB_OFFLINE", "1")


def mlp():
    torch.manual_seed(0)
    m = nn.Sequential(
        nn.Linear(32, 64),
        nn.GELU(),
        nn.LayerNorm(64),
        nn.Linear(64, 64),
        nn.ReLU(),
        nn.Linear(64, 10),
    )
    g = torch.Generator().manual_seed(1)
    batch = (torch.randn(32, 32, generator=g), torch.randint(0, 10, (32,), generator=g))
    return m, batch, lambda m, x, y: F.cross_entropy(m(x), y)


class _CNN(nn.Module):
    def __init__(self):
        super().__init__()
        self.c1 = nn.Conv2d(3, 8, 3, padding=1)
        self.b1 = nn.BatchNorm2d(8)
        self.c2 = nn.Conv2d(8, 16, 3, stride=2, padding=1)
        self.b2 = nn.BatchNorm2d(16)
        self.fc = nn.Linear(16, 10)

    def forward(self, x):
        x = F.relu(self.b1(self.c1(x)))
        x = F.relu(self.b2(self.c2(x)))
        return self.fc(x.mean(dim=(2, 3)))


def cnn():
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(1)
    batch = (torch.randn(8, 3, 16, 16, generator=g), torch.randint(0, 10, (8,), generator=g))
    return _CNN(), batch, lambda m, x, y: F.cross_entropy(m(x), y)


def _lm_batch(vocab, seq=16, bsz=2):
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(0, vocab, (bsz, seq), generator=g)
    return (ids,)


# Transformer depth: one layer in CI (Dynamo traces every layer again; the
# ops are the same), two for the benchmark and OPENNEURON_FULL_TESTS=1.
def _layers(layers):
    return layers if layers is not None else 2


def gpt2(layers=None):
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(0)
    cfg = GPT2Config(
        vocab_size=128,
        n_positions=32,
        n_embd=32,
        n_layer=_layers(layers),
        n_head=2,
        resid_pdrop=0.0,
        embd_pdrop=0.0,
        attn_pdrop=0.0,
    )
    m = GPT2LMHeadModel(cfg)
    return m, _lm_batch(128), lambda m, ids: m(input_ids=ids, labels=ids).loss


def llama(layers=None):
    # Grouped-query attention (2 heads share 1 key/value head), RoPE, RMSNorm.
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    cfg = LlamaConfig(
        vocab_size=128,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=_layers(layers),
        num_attention_heads=2,
        num_key_value_heads=1,
        max_position_embeddings=32,
    )
    m = LlamaForCausalLM(cfg)
    return m, _lm_batch(128), lambda m, ids: m(input_ids=ids, labels=ids).loss


def bert(layers=None):
    from transformers import BertConfig, BertForMaskedLM

    torch.manual_seed(0)
    cfg = BertConfig(
        vocab_size=128,
        hidden_size=32,
        num_hidden_layers=_layers(layers),
        num_attention_heads=2,
        intermediate_size=64,
        max_position_embeddings=32,
        hidden_dropout_prob=0.0,
        attention_probs_dropout_prob=0.0,
    )
    m = BertForMaskedLM(cfg)
    return m, _lm_batch(128), lambda m, ids: m(input_ids=ids, labels=ids).loss


MODELS = {"mlp": mlp, "cnn": cnn, "gpt2": gpt2, "llama": llama, "bert": bert}


def build(name, layers=None):
    if name in ("gpt2", "llama", "bert"):
        return MODELS[name](layers)
    return MODELS[name]()


def make_step(name, device, train_mode=True, compile_backend=None, layers=None):
    """The model `name` on `device` and the function the tests and benches
    compile: an AdamW training step (forward, backward, optimizer) or a
    no-grad inference forward, each returning the detached loss."""
    model, batch, loss_fn = build(name, layers)
    model = model.to(device).train(train_mode)
    batch = tuple(t.to(device) for t in batch)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)

    if train_mode:

        def step(*b):
            opt.zero_grad(set_to_none=True)
            loss = loss_fn(model, *b)
            loss.backward()
            opt.step()
            return loss.detach()
    else:

        def step(*b):
            with torch.no_grad():
                return loss_fn(model, *b).detach()

    if compile_backend:
        step = torch.compile(step, backend=compile_backend)
    return model, step, batch


def train(name, device, compile_backend=None, steps=3, layers=None):
    """`steps` AdamW training steps (forward, backward, optimizer): the
    losses and the final parameters (on the CPU, by name)."""
    model, step, batch = make_step(name, device, True, compile_backend, layers)
    losses = [float(step(*batch)) for _ in range(steps)]
    return losses, {k: p.detach().cpu() for k, p in model.named_parameters()}


def train_losses(name, device, compile_backend=None, steps=3, layers=None):
    return train(name, device, compile_backend, steps, layers)[0]
