"""FlexAttention on neuron (torch_neuronx/_flex_attention.py,
libtrn/src/kernels/nn/flex_attention.c, _compile/lower_attention.py).

``flex_attention`` with causal, sliding-window, document and prefix-LM block
masks and ALiBi / soft-capping / relative score_mods runs libtrn's
block-sparse kernel (no CPU fallback), eagerly and under
``torch.compile(backend="neuron")``. Forward results match PyTorch CPU's
flex_attention (CPU has no backward) and a float64 dense reference; the
backward (dq, dk, dv) matches the float64 reference's autograd, in float32
and bfloat16. A model with document-masked FlexAttention trains on neuron as
the same model does on CPU with the equivalent dense SDPA mask."""

import math

import pytest
import torch
import torch.nn.functional as F
from torch.nn.attention.flex_attention import create_block_mask, flex_attention

import torch_neuronx

FWD = "higher_order::flex_attention"
BWD = "higher_order::flex_attention_backward"

B, H, S, E = 2, 4, 384, 32
DOC = torch.tensor([0] * 100 + [1] * 150 + [2] * 134, dtype=torch.int32)
SLOPES = torch.tensor([2.0 ** (-(i + 1)) for i in range(H)])


def _causal(b, h, q, kv):
    return q >= kv


def _window(b, h, q, kv):
    return (q >= kv) & (q - kv <= 96)


def _prefix(b, h, q, kv):
    return (kv < 64) | (q >= kv)


def _mask_mods(dev):
    doc = DOC.to(dev)

    def document(b, h, q, kv):
        return (doc[q] == doc[kv]) & (q >= kv)

    return {"causal": _causal, "window": _window, "prefix": _prefix, "document": document}


def _score_mods(dev):
    slopes = SLOPES.to(dev)

    def alibi(s, b, h, q, kv):
        return s + slopes[h] * (kv - q)

    def softcap(s, b, h, q, kv):
        return 8.0 * torch.tanh(s / 8.0)

    def relative(s, b, h, q, kv):
        return s + ((q - kv) % 7).float() * 0.05

    return {"none": None, "alibi": alibi, "softcap": softcap, "relative": relative}


def _dense_mask(name):
    q = torch.arange(S)[:, None]
    kv = torch.arange(S)[None, :]
    if name == "causal":
        return q >= kv
    if name == "window":
        return (q >= kv) & (q - kv <= 96)
    if name == "prefix":
        return (kv < 64) | (q >= kv)
    return (DOC[:, None] == DOC[None, :]) & (q >= kv)


def _dense_score(name, s):
    q = torch.arange(S, dtype=torch.float64)[:, None]
    kv = torch.arange(S, dtype=torch.float64)[None, :]
    if name == "alibi":
        return s + SLOPES.double()[None, :, None, None] * (kv - q)
    if name == "softcap":
        return 8.0 * torch.tanh(s / 8.0)
    if name == "relative":
        return s + torch.remainder(q - kv, 7) * 0.05
    return s


def _reference(q, k, v, score, mask, grad):
    """float64 dense attention and its input gradients."""
    q, k, v = (t.detach().double().requires_grad_() for t in (q, k, v))
    s = _dense_score(score, q @ k.transpose(-2, -1) / math.sqrt(E))
    s = s.masked_fill(~_dense_mask(mask), float("-inf"))
    out = torch.softmax(s, -1) @ v
    gq, gk, gv = torch.autograd.grad(out, (q, k, v), grad.double())
    return out, (gq, gk, gv)


def _inputs(dtype):
    torch.manual_seed(0)
    return [torch.randn(B, H, S, E, dtype=dtype) for _ in range(3)], torch.randn(B, H, S, E)


def _run(fn, q, k, v, score, mask, grad, dev):
    mods = _mask_mods(dev)
    bm = create_block_mask(mods[mask], None, None, S, S, device=dev)
    leaves = [t.to(dev).requires_grad_() for t in (q, k, v)]
    out = fn(*leaves, score_mod=_score_mods(dev)[score], block_mask=bm)
    grads = torch.autograd.grad(out, leaves, grad.to(dev, out.dtype))
    return out, grads


def _cpu_forward(q, k, v, score, mask):
    bm = create_block_mask(_mask_mods("cpu")[mask], None, None, S, S, device="cpu")
    return flex_attention(q, k, v, score_mod=_score_mods("cpu")[score], block_mask=bm)


TOL = {torch.float32: (2e-5, 1e-4), torch.bfloat16: (2e-2, 2e-2)}


def _check(fn, score, mask, dtype):
    (q, k, v), grad = _inputs(dtype)
    ref, ref_g = _reference(q, k, v, score, mask, grad)
    cpu = _cpu_forward(q, k, v, score, mask)
    torch_neuronx.clear_op_tracking()
    out, grads = _run(fn, q, k, v, score, mask, grad, "neuron")
    ran = set(torch_neuronx.get_executed_ops())
    assert FWD in ran and BWD in ran, sorted(ran)
    assert torch_neuronx.get_fallback_ops() == []
    atol, rtol = TOL[dtype]
    torch.testing.assert_close(out.cpu(), cpu, atol=atol, rtol=rtol)
    torch.testing.assert_close(out.cpu().double(), ref, atol=atol, rtol=rtol)
    for g, r in zip(grads, ref_g):
        torch.testing.assert_close(g.cpu().double(), r, atol=atol * 10, rtol=rtol * 10)


@pytest.mark.parametrize("mask", ["causal", "window", "prefix", "document"])
@pytest.mark.parametrize("score", ["none", "alibi", "softcap"])
def test_eager_float32(score, mask):
    _check(flex_attention, score, mask, torch.float32)


@pytest.mark.parametrize("score,mask", [("alibi", "document"), ("softcap", "window")])
def test_eager_bfloat16(score, mask):
    _check(flex_attention, score, mask, torch.bfloat16)


@pytest.mark.parametrize(
    "score,mask,dtype",
    [
        ("none", "causal", torch.float32),
        ("alibi", "document", torch.float32),
        ("relative", "prefix", torch.float32),
        ("softcap", "window", torch.bfloat16),
    ],
)
def test_compiled(score, mask, dtype):
    torch._dynamo.reset()
    torch_neuronx.reset_dynamo_metrics()
    _check(torch.compile(flex_attention, backend="neuron"), score, mask, dtype)
    # The forward and backward graphs ran compiled (none eagerly as a fallback).
    m = torch_neuronx.get_dynamo_metrics()
    assert m["graphs"] == 2 and m["fallback_graphs"] == 0, m


def test_no_mask_gqa_and_odd_length():
    """No block mask (every block full), grouped-query heads and a length
    that is not a multiple of the block size."""
    torch.manual_seed(1)
    L = 200
    q = torch.randn(1, 4, L, 16)
    k, v = torch.randn(1, 2, L, 16), torch.randn(1, 2, L, 16)
    ref = F.scaled_dot_product_attention(q, k, v, enable_gqa=True)
    leaves = [t.to("neuron").requires_grad_() for t in (q, k, v)]
    out = flex_attention(*leaves, enable_gqa=True)
    torch.testing.assert_close(out.cpu(), ref, atol=2e-5, rtol=1e-4)
    g = torch.randn_like(ref)
    qc, kc, vc = (t.clone().requires_grad_() for t in (q, k, v))
    F.scaled_dot_product_attention(qc, kc, vc, enable_gqa=True).backward(g)
    out.backward(g.to("neuron"))
    for a, b in zip(leaves, (qc, kc, vc)):
        torch.testing.assert_close(a.grad.cpu(), b.grad, atol=1e-4, rtol=1e-4)


def test_lse_and_fully_masked_rows():
    """return_aux lse matches CPU, and rows whose keys are all masked give 0
    (and -inf lse), as PyTorch's reference does."""
    from torch.nn.attention.flex_attention import AuxRequest

    torch.manual_seed(2)
    q, k, v = (torch.randn(1, 2, 256, 16) for _ in range(3))

    def late(b, h, qi, kv):
        return (qi >= 128) & (kv <= qi)

    outs = []
    for dev in ("cpu", "neuron"):
        bm = create_block_mask(late, None, None, 256, 256, device=dev)
        o, aux = flex_attention(
            q.to(dev), k.to(dev), v.to(dev), block_mask=bm, return_aux=AuxRequest(lse=True)
        )
        outs.append((o.cpu(), aux.lse.cpu()))
    torch.testing.assert_close(outs[1][0], outs[0][0], atol=2e-5, rtol=1e-4)
    torch.testing.assert_close(outs[1][1], outs[0][1], atol=2e-5, rtol=1e-4)
    assert torch.all(outs[1][0][:, :, :128] == 0)


@pytest.mark.parametrize("compiled", [False, True])
def test_work_differs_by_batch_and_head(compiled):
    """A block mask per (batch, head) whose heads visit from 1 to all key
    blocks (the kernel splits its query tiles between the threads by their
    key-tile count, not their number): forward and backward against PyTorch
    CPU and a float64 reference."""
    torch.manual_seed(3)
    Bw, Hw, L = 2, 4, 512
    q, k, v = (torch.randn(Bw, Hw, L, 16) for _ in range(3))

    def uneven(b, h, qi, kv):
        return (qi >= kv) & (qi - kv <= 8 + 160 * h * (1 - b) + 480 * b * (h == 3))

    fn = torch.compile(flex_attention, backend="neuron") if compiled else flex_attention
    bm = create_block_mask(uneven, Bw, Hw, L, L, device="neuron")
    leaves = [t.to("neuron").requires_grad_() for t in (q, k, v)]
    out = fn(*leaves, block_mask=bm)
    g = torch.randn(Bw, Hw, L, 16)
    grads = torch.autograd.grad(out, leaves, g.to("neuron"))
    bmc = create_block_mask(uneven, Bw, Hw, L, L, device="cpu")
    cpu = flex_attention(q, k, v, block_mask=bmc)
    b_ = torch.arange(Bw)[:, None, None, None]
    h_ = torch.arange(Hw)[None, :, None, None]
    qi = torch.arange(L)[None, None, :, None]
    kv = torch.arange(L)[None, None, None, :]
    keep = uneven(b_, h_, qi, kv)
    ref_leaves = [t.double().requires_grad_() for t in (q, k, v)]
    s = ref_leaves[0] @ ref_leaves[1].transpose(-2, -1) / 4.0
    ref = torch.softmax(s.masked_fill(~keep, float("-inf")), -1) @ ref_leaves[2]
    ref_g = torch.autograd.grad(ref, ref_leaves, g.double())
    torch.testing.assert_close(out.detach().cpu(), cpu, atol=2e-5, rtol=1e-4)
    torch.testing.assert_close(out.detach().cpu().double(), ref, atol=2e-5, rtol=1e-4)
    for a, r in zip(grads, ref_g):
        torch.testing.assert_close(a.cpu().double(), r, atol=2e-4, rtol=1e-3)


@pytest.mark.parametrize("heads,kv_heads", [(1, 1), (4, 1)])
def test_backward_of_one_kv_head(heads, kv_heads):
    """One sequence with one key/value head (fewer backward units than
    threads: the kernel splits the unit's query tiles between the threads
    and adds their dk/dv): gradients against CPU SDPA and float64, causal,
    grouped-query heads, a length that is not a multiple of the block."""
    torch.manual_seed(4)
    L = 700
    q = torch.randn(1, heads, L, 16)
    k, v = torch.randn(1, kv_heads, L, 16), torch.randn(1, kv_heads, L, 16)
    g = torch.randn(1, heads, L, 16)
    bm = create_block_mask(_causal, None, None, L, L, device="neuron")
    leaves = [t.to("neuron").requires_grad_() for t in (q, k, v)]
    out = flex_attention(*leaves, block_mask=bm, enable_gqa=True)
    grads = torch.autograd.grad(out, leaves, g.to("neuron"))
    for dtype, tol in ((torch.float32, (1e-4, 1e-4)), (torch.float64, (1e-4, 1e-4))):
        ref_leaves = [t.to(dtype).requires_grad_() for t in (q, k, v)]
        ref = F.scaled_dot_product_attention(*ref_leaves, is_causal=True, enable_gqa=True)
        ref_g = torch.autograd.grad(ref, ref_leaves, g.to(dtype))
        torch.testing.assert_close(out.detach().cpu().to(dtype), ref, atol=2e-5, rtol=1e-4)
        for a, r in zip(grads, ref_g):
            torch.testing.assert_close(a.cpu().to(dtype), r, atol=tol[0], rtol=tol[1])


def test_captured_gradient_falls_back_to_dense_reference():
    """A score_mod bias that needs a gradient is outside the kernel: the
    dense reference runs (still on neuron, with a warning) and its gradients
    are right."""
    torch.manual_seed(3)
    q, k, v = (torch.randn(1, 2, 128, 16) for _ in range(3))
    bias = torch.randn(2, requires_grad=True)

    def run(dev):
        b = bias.detach().to(dev).requires_grad_()
        leaves = [t.to(dev).requires_grad_() for t in (q, k, v)]
        out = flex_attention(*leaves, score_mod=lambda s, bb, h, qi, kv: s + b[h])
        out.sum().backward()
        return out, b.grad

    out_ref = F.scaled_dot_product_attention(q, k, v, attn_mask=bias[None, :, None, None])
    with pytest.warns(UserWarning, match="dense reference"):
        out, g = run("neuron")
    torch.testing.assert_close(out.detach().cpu(), out_ref.detach(), atol=2e-5, rtol=1e-4)
    # d out.sum() / d bias[h] = 0 (softmax is shift invariant).
    torch.testing.assert_close(g.cpu(), torch.zeros(2), atol=1e-4, rtol=0)


class _DocBlock(torch.nn.Module):
    """A pre-norm transformer block whose attention is document-masked."""

    def __init__(self, dim=64, heads=4, flex=True):
        super().__init__()
        self.heads, self.flex = heads, flex
        self.norm = torch.nn.LayerNorm(dim)
        self.qkv = torch.nn.Linear(dim, 3 * dim)
        self.proj = torch.nn.Linear(dim, dim)
        self.mlp = torch.nn.Sequential(
            torch.nn.Linear(dim, 128), torch.nn.GELU(), torch.nn.Linear(128, dim)
        )

    def forward(self, x, mask):
        b, t, d = x.shape
        qkv = self.qkv(self.norm(x)).view(b, t, 3, self.heads, d // self.heads)
        q, k, v = qkv.permute(2, 0, 3, 1, 4)
        if self.flex:
            a = flex_attention(q, k, v, block_mask=mask)
        else:
            a = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        x = x + self.proj(a.transpose(1, 2).reshape(b, t, d))
        return x + self.mlp(x)


def _train(dev, flex, compiled, steps=3):
    torch.manual_seed(0)
    model = _DocBlock(flex=flex).to(dev)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    torch.manual_seed(1)
    x = torch.randn(2, S, 64).to(dev)
    target = torch.randn(2, S, 64).to(dev)
    doc = DOC.to(dev)
    if flex:

        def document(b, h, q, kv):
            return (doc[q] == doc[kv]) & (q >= kv)

        mask = create_block_mask(document, None, None, S, S, device=dev)
    else:
        mask = _dense_mask("document").to(dev)
    fwd = torch.compile(model, backend="neuron") if compiled else model
    losses = []
    for _ in range(steps):
        opt.zero_grad()
        loss = F.mse_loss(fwd(x, mask), target)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses, [p.detach().cpu() for p in model.parameters()]


@pytest.mark.parametrize("compiled", [False, True])
def test_document_masked_model_trains_like_cpu(compiled):
    torch._dynamo.reset()
    ref_losses, ref_params = _train("cpu", flex=False, compiled=False)
    torch_neuronx.clear_op_tracking()
    losses, params = _train("neuron", flex=True, compiled=compiled)
    assert BWD in set(torch_neuronx.get_executed_ops())
    assert torch_neuronx.get_fallback_ops() == []
    torch.testing.assert_close(torch.tensor(losses), torch.tensor(ref_losses), atol=1e-4, rtol=1e-4)
    for a, b in zip(params, ref_params):
        torch.testing.assert_close(a, b, atol=1e-4, rtol=1e-4)


def test_autocast_bfloat16():
    """Under torch.autocast("neuron", bfloat16) the kernel runs in bfloat16
    (as PyTorch's CPU/CUDA autocast shims cast q/k/v) and the backward
    reaches the float32 leaves."""
    torch.manual_seed(4)
    leaves = [torch.randn(1, 2, 128, 16, device="neuron", requires_grad=True) for _ in range(3)]
    bm = create_block_mask(_causal, None, None, 128, 128, device="neuron")
    with torch.autocast("neuron", dtype=torch.bfloat16):
        out = flex_attention(*leaves, block_mask=bm)
    assert out.dtype == torch.bfloat16
    ref = flex_attention(*(t.detach().bfloat16() for t in leaves), block_mask=bm)
    torch.testing.assert_close(out.detach(), ref, atol=0, rtol=0)
    out.float().sum().backward()
    assert all(t.grad is not None and t.grad.dtype == torch.float32 for t in leaves)


_WARM_CHILD = r"""
import json, torch, torch_neuronx
from torch.nn.attention.flex_attention import flex_attention, create_block_mask
torch.manual_seed(0)
q, k, v = (torch.randn(1, 2, 256, 16).to("neuron").requires_grad_() for _ in range(3))
bm = create_block_mask(lambda b, h, qi, kv: qi >= kv, None, None, 256, 256, device="neuron")
f = torch.compile(flex_attention, backend="neuron")
out = f(q, k, v, score_mod=lambda s, b, h, qi, kv: s + (kv - qi) * 0.01, block_mask=bm)
out.sum().backward()
print(json.dumps({"m": torch.neuron.get_dynamo_metrics(), "out": out.sum().item(),
                  "g": q.grad.abs().sum().item()}))
"""


def test_compiled_graph_warm_start(tmp_path, python):
    """A second process loads the compiled forward/backward graphs (their
    flex_attention host steps pickled by op name) from the disk cache:
    nothing is lowered or compiled and the results are the same."""
    import json

    root = tmp_path / "cache"
    root.mkdir(mode=0o700)
    env = {"TORCH_NEURONX_NEFF_CACHE_DIR": str(root), "TORCH_NEURONX_NEFF_DISABLE_CACHE": ""}
    runs = []
    for _ in range(2):
        r = python(_WARM_CHILD, env=env, timeout=300)
        assert r.returncode == 0, r.stderr[-3000:]
        runs.append(json.loads(r.stdout.strip().splitlines()[-1]))
    cold, hot = runs
    assert cold["m"]["lowerings"] == 2 and cold["m"]["fallback_graphs"] == 0
    assert hot["m"]["warm_graphs"] == 1 and hot["m"]["lowerings"] == 0 and hot["m"]["compiles"] == 0
    assert hot["out"] == cold["out"] and hot["g"] == cold["g"]


def test_python_number_captured_by_mask_mod_takes_the_kernel(monkeypatch):
    """A closure int in mask_mod (a document boundary) that Dynamo turns into
    a graph input once it changes reaches the op as a Python number among
    the captured buffers: it is passed to the kernel as a 0-d tensor, not
    sent to PyTorch's dense reference (which ran 3x slower than no mask in
    bench_flex_attention.py), forward and backward, results as CPU's."""
    import torch_neuronx._flex_attention as fa

    took, numbers = [], []
    orig_takes, orig_scalars = fa._kernel_takes, fa._scalars_as_tensors

    def spy_takes(*args):
        took.append(orig_takes(*args))
        return took[-1]

    def spy_scalars(bufs, query):
        numbers.extend(b for b in bufs if not isinstance(b, torch.Tensor))
        return orig_scalars(bufs, query)

    monkeypatch.setattr(fa, "_kernel_takes", spy_takes)
    monkeypatch.setattr(fa, "_scalars_as_tensors", spy_scalars)

    def two_docs(n):
        def mask(b, h, q_idx, kv_idx):
            return (q_idx < n) == (kv_idx < n)

        return mask

    torch._dynamo.reset()
    f = torch.compile(flex_attention, backend="neuron")
    (q, k, v), grad = _inputs(torch.float32)
    for n in (S // 4, S // 2, 3 * S // 4):  # the second call makes n dynamic
        bm = create_block_mask(two_docs(n), None, None, S, S, device="neuron")
        leaves = [t.to("neuron").requires_grad_() for t in (q, k, v)]
        out = f(*leaves, block_mask=bm)
        grads = torch.autograd.grad(out, leaves, grad.to("neuron"))
        # float64 dense reference (PyTorch CPU's flex has no backward)
        ql, kl, vl = (t.double().requires_grad_() for t in (q, k, v))
        i = torch.arange(S)
        keep = (i[:, None] < n) == (i[None, :] < n)
        ref = F.scaled_dot_product_attention(ql, kl, vl, attn_mask=keep)
        ref_g = torch.autograd.grad(ref, (ql, kl, vl), grad.double())
        torch.testing.assert_close(out.cpu().double(), ref.detach(), atol=2e-5, rtol=1e-4)
        for g, r in zip(grads, ref_g):
            torch.testing.assert_close(g.cpu().double(), r, atol=2e-4, rtol=1e-3)
    assert took and all(took), took
    assert numbers, "no Python number reached the op: the case under test did not happen"
