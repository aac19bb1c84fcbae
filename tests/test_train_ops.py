"""Training-step ops on neuron against PyTorch CPU: activation backward
kernels, layer norm (forward/backward), nll_loss / nll_loss2d / cross
entropy, dropout (same seed -> same mask), mse_loss, and an end-to-end
training step of a small transformer block with no CPU fallback."""

import os
import subprocess
import sys

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import torch_neuronx
from _thread_counts import outputs_at_thread_counts

FLOATS = [torch.float32, torch.bfloat16, torch.float64]

# fill_/zero_ (ones_like, zeros_like, optimizer state init) are native on
# main since the shape merge (a782770); this branch predates it. Nothing
# else may fall back.
ALLOWED_FALLBACKS = {"aten::fill_", "aten::zero_"}


def _fallbacks():
    return [f for f in torch_neuronx.get_fallback_ops() if f not in ALLOWED_FALLBACKS]


def _rand(shape, dtype=torch.float32, seed=0, scale=2.0):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(shape, generator=g, dtype=torch.float64) * scale).to(dtype)


def _tol(dtype):
    if dtype == torch.bfloat16:
        return dict(rtol=2e-2, atol=2e-2)
    if dtype == torch.float16:
        return dict(rtol=2e-3, atol=2e-3)
    return dict(rtol=2e-5, atol=2e-5)  # float64 computes in float32 by default


def _grads(fn, inputs, device, grad_seed=1):
    """Runs fn on copies of inputs on device; returns (outputs, input grads)."""
    xs = [x.detach().to(device).requires_grad_(x.dtype.is_floating_point) for x in inputs]
    out = fn(*xs)
    g = _rand(out.shape, out.dtype, seed=grad_seed).to(device)
    out.backward(g)
    return out.detach().cpu(), [x.grad.cpu() if x.grad is not None else None for x in xs]


def _compare(fn, inputs, dtype, no_fallback=True, **tol):
    tol = tol or _tol(dtype)
    exp, exp_g = _grads(fn, inputs, "cpu")
    torch_neuronx.clear_op_tracking()
    got, got_g = _grads(fn, inputs, "neuron")
    if no_fallback:
        assert _fallbacks() == []
    torch.testing.assert_close(got, exp, **tol)
    for a, b in zip(got_g, exp_g):
        if b is not None:
            torch.testing.assert_close(a, b, **tol)


ACTIVATIONS = {
    "relu": F.relu,
    "gelu": F.gelu,
    "gelu_tanh": lambda x: F.gelu(x, approximate="tanh"),
    "silu": F.silu,
    "tanh": torch.tanh,
    "sigmoid": torch.sigmoid,
    "hardtanh": lambda x: F.hardtanh(x, -1.5, 2.0),
    "relu6": F.relu6,
    "leaky_relu": lambda x: F.leaky_relu(x, 0.2),
    "elu": F.elu,
    "selu": F.selu,
    "celu": lambda x: F.celu(x, 0.7),
    "softplus": lambda x: F.softplus(x, beta=2.0, threshold=5.0),
    "mish": F.mish,
    "hardsigmoid": F.hardsigmoid,
    "hardswish": F.hardswish,
}


@pytest.mark.parametrize("name", list(ACTIVATIONS), ids=str)
@pytest.mark.parametrize("dtype", FLOATS, ids=str)
def test_activation_backward(name, dtype):
    _compare(ACTIVATIONS[name], [_rand((7, 33), dtype)], dtype)


@pytest.mark.parametrize("name", ["relu", "gelu", "silu", "tanh", "sigmoid", "elu"])
def test_activation_backward_noncontiguous_and_empty(name):
    fn = ACTIVATIONS[name]
    _compare(lambda x: fn(x.t()[::2]), [_rand((9, 12))], torch.float32)
    _compare(fn, [torch.zeros(0, 4)], torch.float32)


def test_inplace_activation_backward():
    # relu_/elu_/leaky_relu_ save their result: the backward reads it.
    for fn in (
        lambda x: F.relu(x * 1.0, inplace=True),
        lambda x: F.elu(x * 1.0, inplace=True),
        lambda x: F.leaky_relu(x * 1.0, 0.1, inplace=True),
    ):
        _compare(fn, [_rand((5, 6))], torch.float32)


@pytest.mark.parametrize("dtype", FLOATS, ids=str)
@pytest.mark.parametrize("affine", ["both", "weight", "none"])
def test_layer_norm(dtype, affine):
    shape, norm = (4, 6, 40), (40,)
    w = _rand(norm, dtype, seed=2) if affine != "none" else None
    b = _rand(norm, dtype, seed=3) if affine == "both" else None
    inputs = [_rand(shape, dtype)] + [t for t in (w, b) if t is not None]

    def fn(x, *p):
        return F.layer_norm(x, norm, *p, eps=1e-5)

    tol = dict(rtol=3e-2, atol=5e-2) if dtype == torch.bfloat16 else dict(rtol=1e-4, atol=1e-4)
    _compare(fn, inputs, dtype, **tol)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=str)
def test_layer_norm_wide_rows(dtype):
    # Rows of whole vectors of partial sums plus a tail (1030 = 64 * 16 + 6),
    # values far from zero so that the variance pass matters.
    x = _rand((5, 1030), dtype) + 50
    w, b = _rand((1030,), dtype, seed=2), _rand((1030,), dtype, seed=3)
    _compare(
        lambda t, *p: F.layer_norm(t, (1030,), *p, eps=1e-5), [x, w, b], dtype, rtol=1e-4, atol=1e-4
    )


def test_layer_norm_stats_and_multidim():
    x = _rand((3, 5, 4, 6))
    w, b = _rand((4, 6), seed=1), _rand((4, 6), seed=2)
    for args in ((x, [4, 6], w, b, 1e-5), (x, [6], None, None, 1e-3)):
        exp = torch.native_layer_norm(*args)
        torch_neuronx.clear_op_tracking()
        got = torch.native_layer_norm(
            *[a.to("neuron") if isinstance(a, torch.Tensor) else a for a in args]
        )
        assert _fallbacks() == []
        for e, g in zip(exp, got):
            assert e.shape == g.shape and e.dtype == g.dtype
            torch.testing.assert_close(g.cpu(), e, rtol=1e-5, atol=1e-5)
    _compare(
        lambda t: F.layer_norm(t.transpose(0, 1), [6]), [x], torch.float32, rtol=1e-4, atol=1e-4
    )
    _compare(lambda t: F.layer_norm(t, [6]), [torch.zeros(0, 6)], torch.float32)


def test_layer_norm_backward_params_do_not_depend_on_threads():
    # dweight / dbias are summed per fixed block of rows, then over the blocks
    # in order: the same bits for any thread count (and dx, row by row), with
    # double sums close to a float64 reference computed on the CPU.
    code = (
        "import torch, torch_neuronx\n"
        "g = torch.Generator().manual_seed(0)\n"
        "x, dy = (torch.randn(1000, 300, generator=g, dtype=torch.float64) + 20 for _ in range(2))\n"
        "w, b = torch.randn(2, 300, generator=g, dtype=torch.float64)\n"
        "a = [t.to('neuron') for t in (x, w, b, dy)]\n"
        "y, m, r = torch.native_layer_norm(a[0], [300], a[1], a[2], 1e-5)\n"
        "o = torch.ops.aten.native_layer_norm_backward(a[3], a[0], [300], m, r, a[1], a[2],"
        " [True, True, True])\n"
        "e = torch.ops.aten.native_layer_norm_backward(dy, x, [300], m.cpu(), r.cpu(), w, b,"
        " [True, True, True])\n"
        "for gi, ei in zip(o, e): torch.testing.assert_close(gi.cpu(), ei, rtol=1e-12, atol=1e-12)\n"
        "print([t.cpu().numpy().tobytes().hex() for t in o])\n"
    )
    outs = outputs_at_thread_counts(code)
    assert len(outs) == 1


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_layer_norm_backward_dx_same_with_param_grads(dtype):
    # With dweight / dbias asked for, rows go four at a time through one
    # column loop (dx and the four rows' partials); dx must be the bits of the
    # dx-only backward (row by row), tail rows (517 = 8 blocks + 5) included,
    # and the parameter gradients no further from float64 than the CPU's.
    g = torch.Generator().manual_seed(3)
    x = (torch.randn(517, 256, generator=g) * 2 + 3).to(dtype)
    dy = torch.randn(517, 256, generator=g).to(dtype)
    w, b = (torch.randn(256, generator=g).to(dtype) for _ in range(2))
    xd, dyd, wd, bd = (t.to("neuron") for t in (x, dy, w, b))
    _, m, r = torch.native_layer_norm(xd, [256], wd, bd, 1e-12)
    full = torch.ops.aten.native_layer_norm_backward(
        dyd, xd, [256], m, r, wd, bd, [True, True, True]
    )
    dx_only = torch.ops.aten.native_layer_norm_backward(
        dyd, xd, [256], m, r, wd, bd, [True, False, False]
    )
    assert torch.equal(full[0].cpu(), dx_only[0].cpu())
    _, mc, rc = torch.native_layer_norm(x, [256], w, b, 1e-12)
    cpu = torch.ops.aten.native_layer_norm_backward(dy, x, [256], mc, rc, w, b, [True, True, True])
    xd64, dy64, w64, b64 = (t.double() for t in (x, dy, w, b))
    _, m64, r64 = torch.native_layer_norm(xd64, [256], w64, b64, 1e-12)
    ref = torch.ops.aten.native_layer_norm_backward(
        dy64, xd64, [256], m64, r64, w64, b64, [True, True, True]
    )
    for k in (1, 2):
        err = (full[k].cpu().double() - ref[k]).abs().max()
        err_cpu = (cpu[k].double() - ref[k]).abs().max()
        assert err <= err_cpu, (k, err, err_cpu)


def test_layer_norm_mixed_dtype():
    # bfloat16 input with float32 parameters (as under autocast).
    x = _rand((8, 32), torch.bfloat16)
    w, b = _rand((32,), seed=1), _rand((32,), seed=2)
    exp = torch.native_layer_norm(x, [32], w, b, 1e-5)
    got = torch.native_layer_norm(x.to("neuron"), [32], w.to("neuron"), b.to("neuron"), 1e-5)
    for e, g in zip(exp, got):
        assert e.dtype == g.dtype
        torch.testing.assert_close(g.cpu(), e, rtol=2e-2, atol=2e-2)


def test_layer_norm_errors():
    x = torch.randn(2, 3, device="neuron")
    with pytest.raises(RuntimeError, match="normalized_shape"):
        F.layer_norm(x, [4])
    with pytest.raises(RuntimeError, match="weight"):
        F.layer_norm(x, [3], torch.ones(4, device="neuron"))


@pytest.mark.parametrize("dtype", FLOATS, ids=str)
@pytest.mark.parametrize("reduction", ["none", "mean", "sum"])
@pytest.mark.parametrize("weighted", [False, True])
def test_nll_loss(dtype, reduction, weighted):
    logp = F.log_softmax(_rand((10, 7)), -1).to(dtype)
    target = torch.tensor([0, 3, 6, 2, -100, 1, 1, 5, 4, 6])
    w = _rand((7,), seed=5).abs().to(dtype) if weighted else None
    _compare(
        lambda x: F.nll_loss(
            x,
            target.to(x.device),
            weight=None if w is None else w.to(x.device),
            reduction=reduction,
        ),
        [logp],
        dtype,
    )
    t3 = target.clamp(min=0)
    _compare(
        lambda x: F.nll_loss(x, t3.to(x.device), reduction=reduction, ignore_index=3), [logp], dtype
    )


def test_nll_loss_1d_and_2d():
    x = F.log_softmax(_rand((7,)), 0)
    for red in ("none", "mean", "sum"):
        _compare(
            lambda t: F.nll_loss(t, torch.tensor(2, device=t.device), reduction=red),
            [x],
            torch.float32,
        )
    x4 = F.log_softmax(_rand((2, 5, 3, 4)), 1)
    tgt = torch.randint(0, 5, (2, 3, 4), generator=torch.Generator().manual_seed(0))
    tgt[0, 0, 0] = -100
    for red in ("none", "mean", "sum"):
        _compare(lambda t: F.nll_loss(t, tgt.to(t.device), reduction=red), [x4], torch.float32)


def test_nll_loss_all_ignored_and_bounds():
    x = F.log_softmax(_rand((3, 4)), -1)
    tgt = torch.full((3,), -100)
    exp = F.nll_loss(x, tgt)
    got = F.nll_loss(x.to("neuron"), tgt.to("neuron"))
    torch.testing.assert_close(got.cpu(), exp, equal_nan=True)
    with pytest.raises(IndexError, match="out of bounds"):
        F.nll_loss(x.to("neuron"), torch.tensor([0, 4, 1], device="neuron"))


@pytest.mark.parametrize("dtype", FLOATS, ids=str)
def test_cross_entropy(dtype):
    logits = _rand((16, 11), dtype)
    target = torch.randint(0, 11, (16,), generator=torch.Generator().manual_seed(3))
    tol = dict(rtol=3e-2, atol=3e-2) if dtype == torch.bfloat16 else dict(rtol=1e-4, atol=1e-5)
    _compare(lambda x: F.cross_entropy(x, target.to(x.device)), [logits], dtype, **tol)
    _compare(
        lambda x: F.cross_entropy(x, target.to(x.device), label_smoothing=0.1),
        [logits],
        dtype,
        **tol,
    )


@pytest.mark.parametrize("dtype", FLOATS, ids=str)
@pytest.mark.parametrize("reduction", ["none", "mean", "sum"])
def test_mse_loss(dtype, reduction):
    a, b = _rand((6, 5), dtype), _rand((6, 5), dtype, seed=1)
    _compare(lambda x, y: F.mse_loss(x, y, reduction=reduction), [a, b], dtype)


@pytest.mark.parametrize("dtype", FLOATS, ids=str)
def test_dropout(dtype):
    x = _rand((64, 33), dtype) + 10.0
    torch.neuron.manual_seed(123)
    xd = x.to("neuron").requires_grad_()
    torch_neuronx.clear_op_tracking()
    y = F.dropout(xd, 0.3, training=True)
    y.backward(torch.ones_like(y))
    assert _fallbacks() == []
    yc, gc = y.detach().cpu(), xd.grad.cpu()
    keep = yc != 0
    frac = keep.float().mean().item()
    assert 0.6 < frac < 0.8
    # kept elements scaled by 1 / (1 - p), their grads too
    torch.testing.assert_close(yc[keep], (x / 0.7).to(dtype)[keep], **_tol(dtype))
    torch.testing.assert_close(gc, keep.to(dtype) / 0.7, **_tol(dtype))
    # same seed -> same mask; next draw differs
    torch.neuron.manual_seed(123)
    y2 = F.dropout(x.to("neuron"), 0.3, training=True).cpu()
    assert torch.equal(y2 != 0, keep)
    y3 = F.dropout(x.to("neuron"), 0.3, training=True).cpu()
    assert not torch.equal(y3 != 0, keep)
    # eval mode and p = 0 are the identity
    torch.testing.assert_close(F.dropout(x.to("neuron"), 0.3, training=False).cpu(), x)
    out, mask = torch.native_dropout(x.to("neuron"), 0.3, False)
    assert mask.dtype == torch.bool and bool(mask.all())
    torch.testing.assert_close(out.cpu(), x)


def test_dropout_generator_state():
    x = torch.ones(1000, device="neuron")
    state = torch.neuron.get_rng_state()
    a = F.dropout(x, 0.5).cpu()
    torch.neuron.set_rng_state(state)
    b = F.dropout(x, 0.5).cpu()
    assert torch.equal(a, b)


# ---- end-to-end training step ----------------------------------------------
class Block(nn.Module):
    def __init__(self, d=32, heads=4, vocab=50, manual_attn=False, act=None):
        super().__init__()
        self.heads, self.manual_attn = heads, manual_attn
        self.emb = nn.Embedding(vocab, d)
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.qkv, self.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
        self.fc1, self.fc2 = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)
        self.act = act if act is not None else nn.GELU()
        self.drop = nn.Dropout(0.1)
        self.head = nn.Linear(d, vocab)

    def forward(self, idx):
        x = self.emb(idx)
        b, t, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).chunk(3, dim=-1)
        q, k, v = (z.view(b, t, self.heads, d // self.heads).transpose(1, 2) for z in (q, k, v))
        if self.manual_attn:
            s = (q @ k.transpose(-2, -1)) / (d // self.heads) ** 0.5
            y = self.drop(torch.softmax(s, dim=-1)) @ v
        else:
            y = F.scaled_dot_product_attention(q, k, v, dropout_p=0.1 if self.training else 0.0)
        x = x + self.drop(self.proj(y.transpose(1, 2).reshape(b, t, d)))
        x = x + self.drop(self.fc2(self.act(self.fc1(self.ln2(x)))))
        return self.head(x)


OPTIMIZERS = {
    "adamw": lambda p: torch.optim.AdamW(p, lr=1e-3),
    "adamw_loop": lambda p: torch.optim.AdamW(p, lr=1e-3, foreach=False),
    "sgd": lambda p: torch.optim.SGD(p, lr=1e-2, momentum=0.9),
    "sgd_loop": lambda p: torch.optim.SGD(p, lr=1e-2, momentum=0.9, foreach=False),
}


def _train(device, opt_name, manual_attn, act=None, steps=2, dropout=True):
    torch.manual_seed(0)
    model = Block(manual_attn=manual_attn, act=act)
    if not dropout:
        model.drop.p = 0.0
    model = model.to(device)
    opt = OPTIMIZERS[opt_name](model.parameters())
    g = torch.Generator().manual_seed(0)
    idx = torch.randint(0, 50, (4, 16), generator=g).to(device)
    tgt = torch.randint(0, 50, (4, 16), generator=g).to(device)
    losses = []
    for _ in range(steps):
        opt.zero_grad()
        out = model(idx)
        loss = F.cross_entropy(out.view(-1, out.shape[-1]), tgt.view(-1))
        loss.backward()
        opt.step()
        losses.append(loss.detach().cpu())
    return torch.stack(losses), [p.detach().cpu() for p in model.parameters()]


@pytest.mark.parametrize("opt_name", list(OPTIMIZERS))
@pytest.mark.parametrize("manual_attn", [False, True])
def test_training_step_no_fallback(opt_name, manual_attn):
    torch_neuronx.clear_op_tracking()
    losses, _ = _train("neuron", opt_name, manual_attn)
    assert _fallbacks() == []
    assert torch.isfinite(losses).all()


@pytest.mark.parametrize("opt_name", ["adamw", "sgd_loop"])
def test_training_step_matches_cpu(opt_name):
    # Without dropout the step is deterministic: neuron follows CPU.
    lc, pc = _train("cpu", opt_name, True, dropout=False, steps=3)
    torch_neuronx.clear_op_tracking()
    ln, pn = _train("neuron", opt_name, True, dropout=False, steps=3)
    assert _fallbacks() == []
    torch.testing.assert_close(ln, lc, rtol=1e-4, atol=1e-4)
    for a, b in zip(pn, pc):
        torch.testing.assert_close(a, b, rtol=1e-3, atol=1e-4)


@pytest.mark.parametrize(
    "act",
    [
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
    ],
    ids=lambda a: type(a).__name__,
)
def test_training_step_activations(act):
    torch_neuronx.clear_op_tracking()
    _train("neuron", "sgd", False, act=act, steps=1)
    assert _fallbacks() == []
