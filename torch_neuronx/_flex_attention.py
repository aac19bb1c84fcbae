"""FlexAttention (``torch.nn.attention.flex_attention``) on ``neuron``.

Owner: the neuron kernels of PyTorch's ``flex_attention`` and
``flex_attention_backward`` higher-order ops (registered for PrivateUse1 by
``install``), and turning a score_mod / mask_mod into compiled C functions
(traced here, rendered by _flex_render.py, built by libtrn's JIT).

PyTorch runs FlexAttention in eager mode by tracing the call with Dynamo
(backend "eager") and calling the higher-order op, whose only non-CUDA
implementation is a dense reference that materialises the [L, S] score
matrix for every head. Under ``torch.compile(backend="neuron")`` the same op
reaches our compiler, which runs it as a host step (lower_attention.py). In
both cases the op lands here and runs libtrn's block-sparse flash kernel
(trn/flex_attention.h): key blocks the BlockMask leaves out are never
computed, mask_mod runs only on partial blocks, and score_mod / mask_mod
(and score_mod's derivative, from the joint graph autograd traced) run as C
functions rendered from their ATen graphs by ``render_mods`` and built by
libtrn's JIT (disk-cached like compiled graphs).

What the kernel does not take runs PyTorch's dense reference on neuron
(its ops are native): float64, key/value batch broadcasting, more than
``TRN_FLEX_MAX_BUFFERS`` captured tensors, captured tensors that need a
gradient, and score_mod / mask_mod graphs with ops ``render_mods`` does not
know (one warning each).
"""

from __future__ import annotations

import math
import threading
import warnings

import torch
from torch._C import DispatchKey

from . import _C
from ._flex_render import RenderUnsupported, render_mods

_LN2 = math.log(2.0)
_MAX_BUFFERS = 6  # TRN_FLEX_MAX_BUFFERS
_KERNEL_DTYPES = (torch.float32, torch.bfloat16, torch.float16)


# ---- tracing the modifications -------------------------------------------------------
def _trace(fn, example):
    from torch._dynamo._trace_wrapped_higher_order_op import TransformGetItemToIndex
    from torch.fx.experimental.proxy_tensor import make_fx

    with TransformGetItemToIndex():
        return make_fx(fn, tracing_mode="fake")(*example)


_traced: dict = {}


def _aten_graph(fn, example):
    """fn as an ATen graph of 0-dim tensors (already one when it comes from
    AOTAutograd: its nodes carry OpOverloads and meta values). Traces are
    kept per callable (and captured tensors' dtypes and ranks): PyTorch makes
    a new joint graph every backward, but the score_mod is the same one."""
    key = (id(fn), tuple((t.dtype, t.dim()) for t in example))
    hit = _traced.get(key)
    if hit is not None and hit[0] is fn:
        return hit[1]
    gm = _aten_graph_uncached(fn, example)
    if len(_traced) > 256:
        _traced.clear()
    _traced[key] = (fn, gm)
    return gm


def _aten_graph_uncached(fn, example):
    if (
        isinstance(fn, torch.fx.GraphModule)
        and all(
            n.op != "call_function" or isinstance(n.target, torch._ops.OpOverload)
            for n in fn.graph.nodes
        )
        and all("val" in n.meta for n in fn.graph.nodes if n.op != "output")
    ):
        return fn
    return _trace(fn, example)


def _examples(query, bufs, with_grad=False):
    dev = query.device
    ex = [torch.zeros((), dtype=torch.float32, device=dev)]
    ex += [torch.zeros((), dtype=torch.int32, device=dev) for _ in range(4)]
    if with_grad:
        ex.append(torch.zeros((), dtype=torch.float32, device=dev))
    return ex + [b for b in bufs]


_cache_lock = threading.Lock()
_mods_by_source: dict = {}
_mods_by_callables: dict = {}
_warned: set = set()


def _warn_once(what: str) -> None:
    if what not in _warned:
        _warned.add(what)
        warnings.warn(
            f"flex_attention on neuron: {what}; running PyTorch's dense reference "
            "implementation (native neuron ops, scores materialised)",
            stacklevel=3,
        )


def compile_mods(query, score_mod, mask_mod, joint, score_bufs, mask_bufs):
    """The compiled modifications (a torch_neuronx._C._FlexMods) for these
    callables, or None (with a warning) when they cannot be rendered."""
    from ._compile.config import _include_dir, cache_dir, cc_settings, debug_dir

    # The same callables (a compiled graph's subgraphs, a model's mask_mod)
    # come back every step: skip tracing them again. The entry keeps them
    # alive, so their ids stay theirs.
    memo_key = (
        id(score_mod), id(mask_mod), id(joint),
        tuple((b.dtype, b.dim()) for b in (*score_bufs, *mask_bufs)), len(score_bufs),
    )  # fmt: skip
    hit = _mods_by_callables.get(memo_key)
    if hit is not None:
        return hit[0]
    try:
        score_gm = _aten_graph(score_mod, _examples(query, score_bufs))
        mask_gm = None
        if mask_mod is not None:
            ex = _examples(query, ())[1:5] + list(mask_bufs)
            mask_gm = _aten_graph(mask_mod, ex)
        joint_gm = None
        if joint is not None:
            joint_gm = _aten_graph(joint, _examples(query, score_bufs, with_grad=True))
        source = render_mods(score_gm, mask_gm, joint_gm, len(score_bufs))
    except RenderUnsupported as e:
        _warn_once(f"score_mod/mask_mod not rendered ({e})")
        return None
    with _cache_lock:
        mods = _mods_by_source.get(source)
        if mods is None:
            cc = cc_settings()
            mods = _C._flex_mods_compile(
                source, _include_dir(), cache_dir(), debug_dir(), "flex_mods", cc.opt_level + 1,
                cc.extra_flags,
            )  # fmt: skip
            _mods_by_source[source] = mods
        if len(_mods_by_callables) > 256:
            _mods_by_callables.clear()
        _mods_by_callables[memo_key] = (mods, score_mod, mask_mod, joint)
    return mods


def _buffers_ok(bufs, query) -> bool:
    return all(
        isinstance(b, torch.Tensor) and b.device == query.device and b.dim() <= 4 for b in bufs
    )


def _scalars_as_tensors(bufs, query) -> tuple:
    """Python numbers among the captured buffers (a closure int that Dynamo
    made a graph input after recompiles, e.g. a document length) as 0-d
    device tensors, which the kernel's rendered modifications read like any
    captured tensor; comparisons and arithmetic give the same values."""
    return tuple(
        torch.tensor(b, device=query.device)
        if isinstance(b, (bool, int, float)) and not isinstance(b, torch.Tensor)
        else b
        for b in bufs
    )


def _block_tensors(block_mask, query):
    def i32(t):
        if t is None:
            return None
        if t.dtype != torch.int32:
            t = t.to(torch.int32)
        return t.contiguous()

    kv_num, kv_idx, full_num, full_idx = (i32(t) for t in block_mask[2:6])
    q_block, kv_block = int(block_mask[-3]), int(block_mask[-2])
    return kv_num, kv_idx, full_num, full_idx, q_block, kv_block


def _kernel_takes(query, key, value, block_mask, bufs) -> bool:
    return (
        query.dtype in _KERNEL_DTYPES
        and key.dtype == query.dtype
        and value.dtype == query.dtype
        and query.dim() == 4
        and key.size(0) == query.size(0)
        and value.size(0) == query.size(0)
        and query.size(1) % key.size(1) == 0
        and len(bufs) <= _MAX_BUFFERS
        and _buffers_ok(bufs, query)
        and block_mask[3] is not None
        and block_mask[3].device == query.device
    )


def _rows(t):
    return t if t.size(-1) <= 1 or t.stride(-1) == 1 else t.contiguous()


def _like(t, strides_of):
    from torch._higher_order_ops.flex_attention import _permute_strides

    out = torch.empty(t, dtype=strides_of.dtype, device=strides_of.device)
    out = _permute_strides(out, strides_of.stride())
    return out if out.stride(-1) == 1 or out.size(-1) <= 1 else out.contiguous()


def flex_forward(query, key, value, score_mod, block_mask, scale, kernel_options,
                 score_mod_other_buffers=(), mask_mod_other_buffers=()):  # fmt: skip
    from torch._higher_order_ops.flex_attention import sdpa_dense

    score_mod_other_buffers = _scalars_as_tensors(score_mod_other_buffers, query)
    mask_mod_other_buffers = _scalars_as_tensors(mask_mod_other_buffers, query)
    bufs = tuple(score_mod_other_buffers) + tuple(mask_mod_other_buffers)
    mods = None
    if _kernel_takes(query, key, value, block_mask, bufs):
        mods = compile_mods(
            query, score_mod, block_mask[-1], None, score_mod_other_buffers, mask_mod_other_buffers
        )
    elif query.dtype in _KERNEL_DTYPES:
        _warn_once("inputs the block-sparse kernel does not take")
    if mods is None:
        return sdpa_dense(query, key, value, score_mod, block_mask, scale, kernel_options,
                          score_mod_other_buffers, mask_mod_other_buffers)  # fmt: skip
    q, k, v = _rows(query), _rows(key), _rows(value)
    B, H, L, _ = q.shape
    out = _like((B, H, L, v.size(-1)), query)
    lse = torch.empty((B, H, L), dtype=torch.float32, device=q.device)
    mx = torch.empty((B, H, L), dtype=torch.float32, device=q.device)
    kv_num, kv_idx, full_num, full_idx, qb, kb = _block_tensors(block_mask, q)
    _C._flex_attention_forward(
        q,
        k,
        v,
        out,
        lse,
        mx,
        kv_num,
        kv_idx,
        full_num,
        full_idx,
        qb,
        kb,
        float(scale),
        mods,
        [b.contiguous() for b in bufs],
    )
    # The op's statistics are in log2 units (the Triton kernels'); the
    # public function multiplies them back by ln 2.
    return out, lse.div_(_LN2), mx.div_(_LN2)


def _buffer_grads_wanted(joint) -> bool:
    if joint is None:
        return False
    out = next(n for n in joint.graph.nodes if n.op == "output").args[0]
    return isinstance(out, (tuple, list)) and any(o is not None for o in out[5:])


def flex_backward(query, key, value, out, logsumexp, grad_out, grad_logsumexp, fw_graph,
                  joint_graph, block_mask, scale, kernel_options, score_mod_other_buffers=(),
                  mask_mod_other_buffers=()):  # fmt: skip
    from torch._higher_order_ops.flex_attention import create_fw_bw_graph, sdpa_dense_backward

    score_mod_other_buffers = _scalars_as_tensors(score_mod_other_buffers, query)
    mask_mod_other_buffers = _scalars_as_tensors(mask_mod_other_buffers, query)
    bufs = tuple(score_mod_other_buffers) + tuple(mask_mod_other_buffers)
    mods = None
    if joint_graph is None and _kernel_takes(query, key, value, block_mask, bufs):
        ex = _examples(query, ())[:5]
        ex[0].requires_grad_(True)
        from torch._dynamo._trace_wrapped_higher_order_op import TransformGetItemToIndex

        with TransformGetItemToIndex():
            _, joint_graph = create_fw_bw_graph(fw_graph, tuple(ex), score_mod_other_buffers)
    if _kernel_takes(query, key, value, block_mask, bufs) and not _buffer_grads_wanted(joint_graph):
        mods = compile_mods(
            query, fw_graph, block_mask[-1], joint_graph, score_mod_other_buffers,
            mask_mod_other_buffers,
        )  # fmt: skip
    elif query.dtype in _KERNEL_DTYPES:
        _warn_once("a backward the block-sparse kernel does not take (captured tensors that "
                   "need a gradient, or unsupported inputs)")  # fmt: skip
    if mods is None:
        return sdpa_dense_backward(
            query, key, value, out, logsumexp, grad_out, grad_logsumexp, fw_graph, joint_graph,
            block_mask, scale, kernel_options, score_mod_other_buffers, mask_mod_other_buffers,
        )  # fmt: skip
    q, k, v, o = _rows(query), _rows(key), _rows(value), _rows(out)
    if grad_out is None:
        grad_out = torch.zeros_like(o)
    go = _rows(grad_out)
    lse = (logsumexp.to(torch.float32) * _LN2).contiguous()
    dlse = None
    if grad_logsumexp is not None:
        dlse = (grad_logsumexp.to(torch.float32) / _LN2).contiguous()
    dq = _like(tuple(query.shape), query)
    dk = _like(tuple(key.shape), key)
    dv = _like(tuple(value.shape), value)
    kv_num, kv_idx, full_num, full_idx, qb, kb = _block_tensors(block_mask, q)
    _C._flex_attention_backward(
        q, k, v, o, lse, go, dlse, dq, dk, dv, kv_num, kv_idx, full_num, full_idx, qb, kb,
        float(scale), mods, [b.contiguous() for b in bufs],
    )  # fmt: skip
    return dq, dk, dv, tuple(None for _ in score_mod_other_buffers)


def flex_forward_autocast(query, key, value, score_mod, block_mask, scale, kernel_options,
                          score_mod_other_buffers=(), mask_mod_other_buffers=()):  # fmt: skip
    """Under torch.autocast("neuron"): q/k/v in the autocast dtype, then the
    kernel (PyTorch's CPU/CUDA autocast shims do the same)."""
    from torch._higher_order_ops.flex_attention import flex_attention

    dtype = torch.get_autocast_dtype("neuron")
    cast = lambda t: t.to(dtype) if t.is_floating_point() else t  # noqa: E731
    with torch._C._ExcludeDispatchKeyGuard(
        torch._C.DispatchKeySet(DispatchKey.AutocastPrivateUse1)
    ):
        return flex_attention(
            cast(query), cast(key), cast(value), score_mod, block_mask, scale, kernel_options,
            score_mod_other_buffers, mask_mod_other_buffers,
        )  # fmt: skip


# ---- installation -----------------------------------------------------------------------
_installed = False


def install() -> None:
    """Registers the neuron kernels of the flex_attention ops and lets
    ``flex_attention`` accept neuron tensors (PyTorch's device check lists
    only its own backends; backward is supported here, unlike on CPU)."""
    global _installed
    if _installed:
        return
    _installed = True
    import torch.nn.attention.flex_attention as fa
    from torch._higher_order_ops.flex_attention import flex_attention, flex_attention_backward

    flex_attention.py_impl(DispatchKey.PrivateUse1)(flex_forward)
    flex_attention.py_impl(DispatchKey.AutocastPrivateUse1)(flex_forward_autocast)
    flex_attention_backward.py_impl(DispatchKey.PrivateUse1)(flex_backward)

    original = fa._validate_device

    def _validate_device(query, key, value):
        if query.device.type == "neuron":
            return
        original(query, key, value)

    fa._validate_device = _validate_device
