"""``torch.nn.attention.varlen.varlen_attn`` on ``neuron``.

Owner: the neuron kernels of the ``torch_attn::_varlen_attn`` and
``torch_attn::_varlen_attn_backward`` custom ops (PyTorch implements them
only with CUDA's flash / cuDNN kernels).

Packed variable-length attention is block-sparse attention over the packed
tokens: query token i of sequence d sees the keys of sequence d only (and,
with a window, only those within it). It runs on libtrn's FlexAttention
kernel (trn/flex_attention.h) with [1, heads, tokens, dim] views of the
packed [tokens, heads, dim] tensors, a mask function comparing per-token
sequence ids (compiled once per window) and a block structure computed from
``cu_seq_q`` / ``cu_seq_k``: query block m lists the key blocks that the
sequences of its first and last token span, so keys of other sequences are
never computed.

Semantics follow flash attention's varlen kernels: the causal mask (window
(-1, 0)) and windows are aligned to the bottom-right of each sequence's
[len_q, len_k] score block; ``lse`` is [heads, tokens] in natural log.
KV-cache inference (forward only, as PyTorch): ``seqused_k`` (sequence i
uses the first seqused_k[i] keys of its cu_seq_k segment) and
``block_table`` (paged key/value pools) gather the used keys and values
into packed tensors on the device first (``_used_keys``); len_k is then
seqused_k[i].
"""

from __future__ import annotations

import importlib.machinery
import math
import sys
import warnings

import torch

from . import _C
from . import _flex_attention as fx

_BLOCK = 128


def _identity(s, b, h, q, kv, *bufs):
    return s


def _window_mask(left: int, right: int):
    """mask_mod over (b, h, q, kv) with per-token buffers: the query's
    sequence id and bottom-right aligned position, the key's sequence id
    and position."""

    def mask(b, h, q, kv, seq_q, pos_q, seq_k, pos_k):
        keep = seq_q[q] == seq_k[kv]
        d = pos_k[kv] - pos_q[q]  # > 0: key right of the query's aligned position
        if left >= 0:
            keep = keep & (d >= -left)
        if right >= 0:
            keep = keep & (d <= right)
        return keep

    return mask


_mods: dict = {}


def _get_mods(query, left, right, bufs):
    key = (left, right)
    if key not in _mods:
        m = fx.compile_mods(query, _identity, _window_mask(left, right), None, (), bufs)
        if m is None:
            raise RuntimeError("varlen_attn on neuron: the sequence mask could not be compiled")
        _mods[key] = m
    return _mods[key]


def _token_tables(cu_q, cu_k, total_q, total_k, device):
    """Per-token sequence ids and positions (the query's aligned to the
    bottom-right of its sequence's score block), and the block structure."""
    cu_q = cu_q.to("cpu", torch.int64)
    cu_k = cu_k.to("cpu", torch.int64)
    len_q, len_k = cu_q[1:] - cu_q[:-1], cu_k[1:] - cu_k[:-1]
    n = len_q.numel()
    seq_q = torch.repeat_interleave(torch.arange(n), len_q, output_size=total_q)
    seq_k = torch.repeat_interleave(torch.arange(n), len_k, output_size=total_k)
    pos_q = torch.arange(total_q) - cu_q[seq_q] + (len_k - len_q)[seq_q]
    pos_k = torch.arange(total_k) - cu_k[seq_k]
    nqb = (total_q + _BLOCK - 1) // _BLOCK
    nkb = max((total_k + _BLOCK - 1) // _BLOCK, 1)
    first = seq_q[torch.arange(nqb) * _BLOCK]
    last = seq_q[torch.clamp(torch.arange(nqb) * _BLOCK + _BLOCK - 1, max=total_q - 1)]
    k_lo, k_hi = cu_k[first], cu_k[last + 1]  # keys [k_lo, k_hi) of the block's sequences
    lo = k_lo // _BLOCK
    num = torch.where(k_hi > k_lo, (k_hi - 1) // _BLOCK - lo + 1, torch.zeros_like(lo))
    idx = torch.clamp(lo[:, None] + torch.arange(nkb)[None, :], max=nkb - 1)
    as_dev = lambda t: t.to(device=device, dtype=torch.int32).contiguous()  # noqa: E731
    bufs = [as_dev(seq_q), as_dev(pos_q), as_dev(seq_k), as_dev(pos_k)]
    return bufs, as_dev(num.view(1, 1, nqb)), as_dev(idx.view(1, 1, nqb, nkb))


def _as_bhsd(t):
    return t.permute(1, 0, 2).unsqueeze(0)  # [T, H, D] -> [1, H, T, D], a view


def _window(is_causal, window_size):
    left, right = (list(window_size) if window_size is not None else [-1, -1]) or [-1, -1]
    if is_causal:
        right = 0
    return int(left), int(right)


def _used_keys(key, value, cu_seq_q, cu_seq_k, seqused_k, block_table):
    """The keys and values a KV cache's sequences use, packed: with
    block_table, key and value are a pool of pages [pages, page_size, heads,
    dim] and sequence i's token t is on page block_table[i, t // page_size]
    at t % page_size; without it, sequence i's keys are its cu_seq_k segment.
    Either way only its first seqused_k[i] tokens take part. Returns packed
    [sum(seqused_k), heads, dim] key and value (gathered on the device with
    index_select, only the token indices built on the host) and their
    cu_seq_k. Gathered, not masked: flash attention never reads the unused
    slots, which may hold anything (NaN times a zero probability is NaN)."""
    used = seqused_k.to("cpu", torch.int64)
    n = cu_seq_q.numel() - 1
    if used.dim() != 1 or used.numel() != n:
        raise ValueError(
            f"varlen_attn: seqused_k of shape {tuple(seqused_k.shape)} for {n} sequences"
        )
    if block_table is None:
        cu_k = cu_seq_k.to("cpu", torch.int64)
        seg = cu_k[1:] - cu_k[:-1]
        if cu_k.numel() != n + 1 or bool(((used < 0) | (used > seg)).any()):
            raise ValueError(
                f"varlen_attn: seqused_k {used.tolist()} outside [0, key lengths "
                f"{seg.tolist()}] of cu_seq_k"
            )
        start, rows = cu_k[:-1], key.size(0)
    else:
        if key.dim() != 4 or value.dim() != 4 or key.shape[:2] != value.shape[:2]:
            raise ValueError(
                "varlen_attn: with block_table, key and value are [pages, page_size, heads, "
                f"dim]; got {tuple(key.shape)} and {tuple(value.shape)}"
            )
        if block_table.dim() != 2 or block_table.size(0) != n:
            raise ValueError(
                f"varlen_attn: block_table of shape {tuple(block_table.shape)} for {n} sequences"
            )
        pages, page = key.shape[:2]
        table = block_table.to("cpu", torch.int64)
        if bool(((used < 0) | (used > table.size(1) * page)).any()):
            raise ValueError(
                f"varlen_attn: seqused_k {used.tolist()} outside [0, {table.size(1)} pages x "
                f"{page} tokens] of block_table"
            )
        rows = pages * page
        key = key.reshape(rows, *key.shape[2:])
        value = value.reshape(rows, *value.shape[2:])
    seq = torch.repeat_interleave(torch.arange(n), used)
    cu = torch.cat([used.new_zeros(1), used.cumsum(0)])
    t = torch.arange(seq.numel()) - cu[seq]
    if block_table is None:
        index = start[seq] + t
    else:
        page_of = table[seq, t // page]
        if bool(((page_of < 0) | (page_of >= pages)).any()):
            raise ValueError(f"varlen_attn: block_table holds pages outside [0, {pages})")
        index = page_of * page + t % page
    index = index.to(key.device)
    return key.index_select(0, index), value.index_select(0, index), cu


def _check(query, key, value):
    if (
        query.dtype not in fx._KERNEL_DTYPES
        or key.dtype != query.dtype
        or value.dtype != query.dtype
    ):
        raise TypeError(
            f"varlen_attn on neuron: unsupported dtypes {query.dtype}, {key.dtype}, {value.dtype}"
        )


def varlen_forward(query, key, value, cu_seq_q, cu_seq_k, max_q, max_k, is_causal=False,
                   scale=None, window_size=None, enable_gqa=False, seqused_k=None,
                   block_table=None, num_splits=None):  # fmt: skip
    _check(query, key, value)
    if cu_seq_k is None:
        cu_seq_k = cu_seq_q
    if block_table is not None and seqused_k is None:
        raise ValueError("varlen_attn: block_table requires seqused_k")
    if seqused_k is not None:
        key, value, cu_seq_k = _used_keys(key, value, cu_seq_q, cu_seq_k, seqused_k, block_table)
    left, right = _window(is_causal, window_size)
    T, H, _ = query.shape
    bufs, num, idx = _token_tables(cu_seq_q, cu_seq_k, T, key.size(0), query.device)
    mods = _get_mods(query, left, right, bufs)
    out = torch.empty((T, H, value.size(-1)), dtype=query.dtype, device=query.device)
    lse = torch.empty((H, T), dtype=torch.float32, device=query.device)
    sc = scale if scale is not None else 1.0 / math.sqrt(query.size(-1))
    q, k, v = (_as_bhsd(fx._rows(t)) for t in (query, key, value))
    _C._flex_attention_forward(
        q, k, v, _as_bhsd(out), lse.unsqueeze(0), None, num, idx, None, None, _BLOCK, _BLOCK,
        float(sc), mods, bufs,
    )  # fmt: skip
    rng = torch.zeros((2,), dtype=torch.uint64, device=query.device)
    return out, lse, rng


def varlen_backward(grad_out, query, key, value, out, lse, cu_seq_q, cu_seq_k, max_q, max_k,
                    is_causal, rng_state, scale=None, window_size=None):  # fmt: skip
    _check(query, key, value)
    if cu_seq_k is None:
        cu_seq_k = cu_seq_q
    left, right = _window(is_causal, window_size)
    T, H, _ = query.shape
    bufs, num, idx = _token_tables(cu_seq_q, cu_seq_k, T, key.size(0), query.device)
    mods = _get_mods(query, left, right, bufs)
    dq, dk, dv = (torch.empty(t.shape, dtype=t.dtype, device=t.device) for t in (query, key, value))
    sc = scale if scale is not None else 1.0 / math.sqrt(query.size(-1))
    q, k, v, o, go = (_as_bhsd(fx._rows(t)) for t in (query, key, value, out, grad_out))
    _C._flex_attention_backward(
        q, k, v, o, lse.to(torch.float32).contiguous().unsqueeze(0), go, None, _as_bhsd(dq),
        _as_bhsd(dk), _as_bhsd(dv), num, idx, None, None, _BLOCK, _BLOCK, float(sc), mods, bufs,
    )  # fmt: skip
    return dq, dk, dv


def _register() -> None:
    torch.library.register_kernel("torch_attn::_varlen_attn", "neuron", varlen_forward)
    torch.library.register_kernel("torch_attn::_varlen_attn_backward", "neuron", varlen_backward)


class _VarlenImportHook:
    """Registers the kernels right after torch.nn.attention.varlen (which
    defines the ops, and imports torch._dynamo: seconds) is imported."""

    def find_spec(self, name, path, target=None):
        if name != "torch.nn.attention.varlen":
            return None
        sys.meta_path.remove(self)
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        if spec is None or spec.loader is None:
            return spec
        original = spec.loader.exec_module

        def exec_module(module):
            original(module)
            try:
                _register()
            except Exception as e:  # noqa: BLE001 - must not break the import
                warnings.warn(f"torch_neuronx: varlen_attn kernels not registered: {e!r}")

        spec.loader.exec_module = exec_module
        return spec


_installed = False


def install() -> None:
    """Registers the neuron kernels of PyTorch's varlen custom ops, now if
    torch.nn.attention.varlen is loaded, else when it is."""
    global _installed
    if _installed:
        return
    _installed = True
    if "torch.nn.attention.varlen" in sys.modules:
        _register()
    else:
        sys.meta_path.insert(0, _VarlenImportHook())
