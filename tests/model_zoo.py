"""Small random-weight models for the real-model tests and bench/bench_models.py.

Each builder returns a fresh model on the CPU (same seed, same weights) and
``batch(n)`` returns a training batch for it. The configs are tiny so a few
training steps run in seconds on a loaded machine, but they keep every
architectural feature the issue asks about: GPT-2's tied ``wte`` / ``lm_head``
and GELU-new (``x**3``), Llama's GQA, RoPE, RMSNorm (``pow(2)``) and SwiGLU,
BERT's layer norms and tied MLM decoder, and a ResNet-style CNN with batch
norm, max pooling and residual blocks (built here: no torchvision).
"""

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # never reach the hub

import torch
import torch.nn as nn
import torch.nn.functional as F

VOCAB = 128


def gpt2(size: str = "tiny"):
    from transformers import GPT2Config, GPT2LMHeadModel

    d, layers = (64, 2) if size == "tiny" else (256, 4)
    cfg = GPT2Config(
        vocab_size=VOCAB,
        n_positions=128,
        n_embd=d,
        n_layer=layers,
        n_head=4,
        resid_pdrop=0.0,
        embd_pdrop=0.0,
        attn_pdrop=0.0,
        attn_implementation="sdpa",
    )
    return GPT2LMHeadModel(cfg)


def llama(size: str = "tiny"):
    from transformers import LlamaConfig, LlamaForCausalLM

    d, layers = (64, 2) if size == "tiny" else (256, 4)
    cfg = LlamaConfig(
        vocab_size=VOCAB,
        hidden_size=d,
        intermediate_size=2 * d + 32,
        num_hidden_layers=layers,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=128,
        attn_implementation="sdpa",
    )
    return LlamaForCausalLM(cfg)


def bert(size: str = "tiny"):
    from transformers import BertConfig, BertForMaskedLM

    d, layers = (64, 2) if size == "tiny" else (256, 4)
    cfg = BertConfig(
        vocab_size=VOCAB,
        hidden_size=d,
        num_hidden_layers=layers,
        num_attention_heads=4,
        intermediate_size=4 * d,
        max_position_embeddings=128,
        hidden_dropout_prob=0.0,
        attention_probs_dropout_prob=0.0,
        attn_implementation="sdpa",
    )
    return BertForMaskedLM(cfg)


class BasicBlock(nn.Module):
    def __init__(self, cin: int, cout: int, stride: int):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.down = None
        if stride != 1 or cin != cout:
            self.down = nn.Sequential(
                nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout)
            )

    def forward(self, x):
        y = F.relu(self.bn1(self.conv1(x)))
        y = self.bn2(self.conv2(y))
        return F.relu(y + (x if self.down is None else self.down(x)))


class ResNet(nn.Module):
    """ResNet-18's layout (stem, max pool, basic blocks, global average pool),
    narrower and shallower."""

    def __init__(self, width: int = 8, blocks=(1, 1), classes: int = 10):
        super().__init__()
        self.stem = nn.Sequential(
            nn.Conv2d(3, width, 3, 1, 1, bias=False),
            nn.BatchNorm2d(width),
            nn.ReLU(),
            nn.MaxPool2d(2),
        )
        layers, cin = [], width
        for i, n in enumerate(blocks):
            cout = width * 2**i
            for j in range(n):
                layers.append(BasicBlock(cin, cout, 2 if (j == 0 and i > 0) else 1))
                cin = cout
        self.layers = nn.Sequential(*layers)
        self.fc = nn.Linear(cin, classes)

    def forward(self, x):
        x = self.layers(self.stem(x))
        return self.fc(torch.flatten(F.adaptive_avg_pool2d(x, 1), 1))


def resnet(size: str = "tiny"):
    return ResNet(8, (1, 1)) if size == "tiny" else ResNet(32, (2, 2, 2))


def lm_batch(batch: int = 4, seq: int = 16, gen: torch.Generator | None = None):
    ids = torch.randint(0, VOCAB, (batch, seq), generator=gen)
    return {"input_ids": ids, "labels": ids}


def image_batch(batch: int = 8, hw: int = 16, gen: torch.Generator | None = None):
    x = torch.randn(batch, 3, hw, hw, generator=gen)
    return {"x": x, "y": torch.randint(0, 10, (batch,), generator=gen)}


MODELS = {"gpt2": gpt2, "llama": llama, "bert": bert, "resnet": resnet}


def loss_of(name: str, model, batch):
    """One forward pass's training loss."""
    if name == "resnet":
        return F.cross_entropy(model(batch["x"]), batch["y"])
    return model(**batch).loss


def to_device(batch, device):
    return {k: v.to(device) for k, v in batch.items()}
