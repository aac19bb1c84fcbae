"""varlen_attn (torch.nn.attention.varlen) on neuron (torch_neuronx/_varlen_attn.py,
libtrn's block-sparse FlexAttention kernel).

PyTorch CPU has no varlen_attn (its flash kernel is CUDA's), so packed
sequences are checked against CPU's scaled_dot_product_attention run per
sequence and against a float64 reference: forward, lse and backward, causal
and not, windows, grouped-query heads, float32 and bfloat16, eager and under
torch.compile(backend="neuron"); a packed-sequence model trains like the
same model run per sequence on CPU."""

import pytest
import torch
import torch.nn.functional as F
from torch.nn.attention.varlen import AuxRequest, varlen_attn

import torch_neuronx

LENS = [5, 130, 61, 200]


def _packed(H=4, Hk=4, E=16, dtype=torch.float32, lens=LENS):
    torch.manual_seed(0)
    T = sum(lens)
    cu = torch.tensor([0, *torch.tensor(lens).cumsum(0).tolist()], dtype=torch.int32)
    q = torch.randn(T, H, E, dtype=dtype)
    k, v = torch.randn(T, Hk, E, dtype=dtype), torch.randn(T, Hk, E, dtype=dtype)
    return q, k, v, cu


def _per_sequence(q, k, v, cu, causal, window=None, gqa=False, dtype=None):
    """CPU SDPA on each sequence, packed back; dtype=float64 for the reference."""
    outs, lses = [], []
    for a, b in zip(cu[:-1].tolist(), cu[1:].tolist()):
        qs, ks, vs = (t[a:b].transpose(0, 1) for t in (q, k, v))
        if dtype is not None:
            qs, ks, vs = qs.to(dtype), ks.to(dtype), vs.to(dtype)
        if gqa:
            rep = qs.size(0) // ks.size(0)
            ks, vs = ks.repeat_interleave(rep, 0), vs.repeat_interleave(rep, 0)
        n = b - a
        i = torch.arange(n)[:, None]
        j = torch.arange(n)[None, :]
        mask = torch.ones(n, n, dtype=torch.bool)
        if causal:
            mask &= j <= i
        if window is not None:
            left, right = window
            if left >= 0:
                mask &= j >= i - left
            if right >= 0:
                mask &= j <= i + right
        s = qs @ ks.transpose(-2, -1) / qs.size(-1) ** 0.5
        s = s.masked_fill(~mask, float("-inf"))
        lses.append(torch.logsumexp(s, -1))
        outs.append((torch.softmax(s, -1) @ vs).transpose(0, 1))
    return torch.cat(outs), torch.cat(lses, -1)


def _run(q, k, v, cu, dev, g, **kw):
    leaves = [t.to(dev).requires_grad_() for t in (q, k, v)]
    cu_d = cu.to(dev)
    n = max(cu[1:] - cu[:-1]).item()
    fn = kw.pop("fn", varlen_attn)
    out, lse = fn(*leaves, cu_d, cu_d, n, n, return_aux=AuxRequest(lse=True), **kw)
    grads = torch.autograd.grad(out, leaves, g.to(dev, out.dtype))
    return out, lse, grads


def _check(causal=False, window=None, dtype=torch.float32, H=4, Hk=4, fn=varlen_attn, lens=LENS):
    q, k, v, cu = _packed(H=H, Hk=Hk, dtype=dtype, lens=lens)
    g = torch.randn(q.shape[0], H, v.size(-1))
    kw = {"fn": fn}
    if window is not None:
        kw["window_size"] = window
    elif causal:
        kw["window_size"] = (-1, 0)
    if Hk != H:
        kw["enable_gqa"] = True
    torch_neuronx.clear_op_tracking()
    out, lse, grads = _run(q, k, v, cu, "neuron", g, **kw)
    assert torch_neuronx.get_fallback_ops() == []
    cpu_out, _ = _per_sequence(q, k, v, cu, causal, window, Hk != H)
    leaves = [t.detach().double().requires_grad_() for t in (q, k, v)]
    ref, ref_lse = _per_sequence(*leaves, cu, causal, window, Hk != H, torch.float64)
    ref_g = torch.autograd.grad(ref, leaves, g.double())
    atol, rtol = (2e-5, 1e-4) if dtype == torch.float32 else (2e-2, 2e-2)
    torch.testing.assert_close(out.detach().cpu(), cpu_out, atol=atol, rtol=rtol)
    torch.testing.assert_close(out.detach().cpu().double(), ref, atol=atol, rtol=rtol)
    torch.testing.assert_close(lse.detach().cpu().double(), ref_lse, atol=1e-4, rtol=1e-4)
    for a, b in zip(grads, ref_g):
        torch.testing.assert_close(a.cpu().double(), b, atol=atol * 10, rtol=rtol * 10)


@pytest.mark.parametrize("causal", [False, True])
def test_float32(causal):
    _check(causal=causal)


def test_bfloat16_causal():
    _check(causal=True, dtype=torch.bfloat16)


def test_window_and_gqa():
    _check(window=(32, 0))
    _check(window=(16, 8))
    _check(causal=True, H=4, Hk=2)


def test_compiled_lengths_change_without_recompiling_kernels():
    """Under torch.compile the custom op runs its neuron kernel; a second
    packing with other lengths (same total) reuses the compiled mask."""
    torch._dynamo.reset()
    fn = torch.compile(varlen_attn, backend="neuron")
    _check(causal=True, fn=fn)
    _check(causal=True, fn=fn, lens=[100, 96, 200])


class _PackedBlock(torch.nn.Module):
    def __init__(self, dim=32, heads=2):
        super().__init__()
        self.heads = heads
        self.qkv = torch.nn.Linear(dim, 3 * dim)
        self.proj = torch.nn.Linear(dim, dim)

    def forward(self, x, cu, n, packed):
        t, d = x.shape
        q, k, v = self.qkv(x).view(t, 3, self.heads, d // self.heads).unbind(1)
        if packed:
            a = varlen_attn(q, k, v, cu, cu, n, n, window_size=(-1, 0))
        else:
            a = torch.cat(
                [
                    F.scaled_dot_product_attention(
                        q[s:e].transpose(0, 1), k[s:e].transpose(0, 1), v[s:e].transpose(0, 1),
                        is_causal=True,
                    ).transpose(0, 1)
                    for s, e in zip(cu[:-1].tolist(), cu[1:].tolist())
                ]
            )  # fmt: skip
        return x + self.proj(a.reshape(t, d))


@pytest.mark.parametrize("compiled", [False, True])
def test_packed_model_trains_like_cpu(compiled):
    torch._dynamo.reset()

    def train(dev, packed):
        torch.manual_seed(0)
        m = _PackedBlock().to(dev)
        opt = torch.optim.SGD(m.parameters(), lr=0.1)
        torch.manual_seed(1)
        x, y = torch.randn(sum(LENS), 32).to(dev), torch.randn(sum(LENS), 32).to(dev)
        cu = torch.tensor([0, *torch.tensor(LENS).cumsum(0).tolist()], dtype=torch.int32)
        fwd = torch.compile(m, backend="neuron") if compiled and dev == "neuron" else m
        losses = []
        for _ in range(3):
            opt.zero_grad()
            loss = F.mse_loss(fwd(x, cu.to(dev), max(LENS), packed), y)
            loss.backward()
            opt.step()
            losses.append(loss.item())
        return losses, [p.detach().cpu() for p in m.parameters()]

    ref_l, ref_p = train("cpu", packed=False)
    torch_neuronx.clear_op_tracking()
    l, p = train("neuron", packed=True)
    assert torch_neuronx.get_fallback_ops() == []
    torch.testing.assert_close(torch.tensor(l), torch.tensor(ref_l), atol=1e-4, rtol=1e-4)
    for a, b in zip(p, ref_p):
        torch.testing.assert_close(a, b, atol=1e-4, rtol=1e-4)


# ---- seqused_k and block_table (KV-cache decoding; forward only, as PyTorch) ----


def _reference(q, ks, vs, cu_q, causal, dtype):
    """Attention of each query segment of cu_q over its own key/value rows
    ks[i], vs[i] ([len_k, heads, dim]; GQA heads repeated), the causal mask
    aligned to the bottom-right as flash attention's; [T, H, E] and lse."""
    outs, lses = [], []
    for i, (a, b) in enumerate(zip(cu_q[:-1].tolist(), cu_q[1:].tolist())):
        qs, kk, vv = (t.transpose(0, 1).to(dtype) for t in (q[a:b], ks[i], vs[i]))
        rep = qs.size(0) // kk.size(0)
        kk, vv = kk.repeat_interleave(rep, 0), vv.repeat_interleave(rep, 0)
        lq, lk = b - a, kk.size(1)
        s = qs @ kk.transpose(-2, -1) / qs.size(-1) ** 0.5
        if causal:
            keep = torch.arange(lk)[None, :] <= torch.arange(lq)[:, None] + (lk - lq)
            s = s.masked_fill(~keep, float("-inf"))
        lses.append(torch.logsumexp(s, -1))
        outs.append((torch.softmax(s, -1) @ vv).transpose(0, 1))
    return torch.cat(outs), torch.cat(lses, -1)


def _cu(lens):
    return torch.tensor([0, *torch.tensor(lens).cumsum(0).tolist()], dtype=torch.int32)


def _compare(fn, args, kw, q, ks, vs, cu_q, causal):
    torch_neuronx.clear_op_tracking()
    out, lse = fn(*args, return_aux=AuxRequest(lse=True), **kw)
    assert torch_neuronx.get_fallback_ops() == []
    cpu, _ = _reference(q, ks, vs, cu_q, causal, torch.float32)
    ref, ref_lse = _reference(q, ks, vs, cu_q, causal, torch.float64)
    torch.testing.assert_close(out.cpu(), cpu, atol=2e-5, rtol=1e-4)
    torch.testing.assert_close(out.cpu().double(), ref, atol=2e-5, rtol=1e-4)
    torch.testing.assert_close(lse.cpu().double(), ref_lse, atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("compiled", [False, True])
@pytest.mark.parametrize("causal", [False, True])
def test_seqused_k(causal, compiled):
    """Key segments longer than their used part (a KV cache's free slots):
    only the first seqused_k[i] keys of sequence i count, and the causal
    mask aligns to them. Decode (one query) and chunked-prefill segments."""
    torch._dynamo.reset()
    torch.manual_seed(0)
    lq, seg, used = [1, 4, 61, 1], [40, 150, 70, 260], [33, 150, 61, 201]
    q = torch.randn(sum(lq), 4, 16)
    k, v = torch.randn(sum(seg), 4, 16), torch.randn(sum(seg), 4, 16)
    # The unused slots hold garbage that must not leak into the result.
    cu_q, cu_k = _cu(lq), _cu(seg)
    for i, u in enumerate(used):
        k[cu_k[i] + u : cu_k[i + 1]] = 1e4
        v[cu_k[i] + u : cu_k[i + 1]] = float("nan")
    ks = [k[a : a + u] for a, u in zip(cu_k[:-1].tolist(), used)]
    vs = [v[a : a + u] for a, u in zip(cu_k[:-1].tolist(), used)]
    fn = torch.compile(varlen_attn, backend="neuron") if compiled else varlen_attn
    dev = [t.to("neuron") for t in (q, k, v, cu_q, cu_k)]
    kw = {"seqused_k": torch.tensor(used, dtype=torch.int32).to("neuron")}
    if causal:
        kw["window_size"] = (-1, 0)
    _compare(fn, (*dev, max(lq), max(seg)), kw, q, ks, vs, cu_q, causal)


@pytest.mark.parametrize("compiled", [False, True])
def test_block_table_paged_kv(compiled):
    """A paged KV cache: key/value are a pool of pages [pages, page_size,
    Hkv, D] in any order, block_table maps each sequence's logical pages to
    pool pages, seqused_k its valid tokens (the last page partly filled);
    grouped-query heads, causal."""
    torch._dynamo.reset()
    torch.manual_seed(0)
    pages, page, H, Hk, E = 24, 16, 4, 2, 16
    lq, used = [1, 3, 20], [33, 70, 20]
    q = torch.randn(sum(lq), H, E)
    kpool, vpool = torch.randn(pages, page, Hk, E), torch.randn(pages, page, Hk, E)
    order = torch.randperm(pages)
    table = torch.zeros(3, 6, dtype=torch.int32)  # unused entries stay 0
    ks, vs, at = [], [], 0
    for i, u in enumerate(used):
        n = (u + page - 1) // page
        table[i, :n] = order[at : at + n].to(torch.int32)
        at += n
        ks.append(kpool[table[i, :n].long()].reshape(-1, Hk, E)[:u])
        vs.append(vpool[table[i, :n].long()].reshape(-1, Hk, E)[:u])
    cu_q = _cu(lq)
    fn = torch.compile(varlen_attn, backend="neuron") if compiled else varlen_attn
    dev = [t.to("neuron") for t in (q, kpool, vpool, cu_q)]
    kw = {
        "seqused_k": torch.tensor(used, dtype=torch.int32).to("neuron"),
        "block_table": table.to("neuron"),
        "window_size": (-1, 0),
        "enable_gqa": True,
    }
    args = (dev[0], dev[1], dev[2], dev[3], _cu(used).to("neuron"), max(lq), max(used))
    _compare(fn, args, kw, q, ks, vs, cu_q, True)


def test_paging_errors():
    q, k, v, cu = (t.to("neuron") for t in _packed())
    with pytest.raises(ValueError, match="seqused_k"):
        varlen_attn(q, k, v, cu, cu, 200, 200, seqused_k=torch.tensor([6, 1, 1, 1]).to("neuron"))
    pool = torch.randn(4, 16, 4, 16).to("neuron")
    table = torch.tensor([[0], [1], [2], [9]], dtype=torch.int32).to("neuron")
    used = torch.tensor([5, 5, 5, 5], dtype=torch.int32).to("neuron")
    with pytest.raises(ValueError, match="outside"):
        varlen_attn(q, pool, pool, cu, cu, 200, 16, seqused_k=used, block_table=table)
    with pytest.raises(ValueError, match="requires seqused_k"):
        varlen_attn(q, pool, pool, cu, cu, 200, 16, block_table=table)
