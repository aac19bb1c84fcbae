"""FlexAttention in compiled graphs: the ``flex_attention`` and
``flex_attention_backward`` higher-order ops.

Owner: which higher-order ops the compiler runs as host steps, and the
work done for them at compile time. Under ``torch.compile(backend="neuron")``
AOTAutograd leaves these ops in the forward and backward graphs with their
score_mod, mask_mod and joint graphs as ``get_attr`` subgraphs and the
BlockMask's tensors as inputs. The libtrn graph compiler has no tiled
attention schedule, so the op runs between the compiled kernels as a host
step calling its neuron kernel (torch_neuronx/_flex_attention.py: libtrn's
block-sparse flash kernel with the subgraphs rendered as C). Rendering and
building that C happens here, while the graph compiles, so the first run
does not pay for it (the result is cached by source).
"""

from __future__ import annotations

import torch
from torch._higher_order_ops.flex_attention import flex_attention, flex_attention_backward

from .lower_core import meta

HOST_HOPS = (flex_attention, flex_attention_backward)


def runs_on_device(target) -> bool:
    """Whether a higher-order op has a neuron kernel (runs as a host step)."""
    return any(target is h for h in HOST_HOPS)


def _value(gm, a):
    if isinstance(a, torch.fx.Node):
        if a.op == "get_attr":
            return getattr(gm, a.target)
        return meta(a)
    if isinstance(a, (tuple, list)):
        return type(a)(_value(gm, x) for x in a)
    return a


def _number_example(b, q):
    """A captured Python number (or Dynamo's symbolic one) as the 0-d tensor
    the op passes to the kernel in its place."""
    if isinstance(b, (bool, torch.SymBool)):
        dtype = torch.bool
    elif isinstance(b, (int, torch.SymInt)):
        dtype = torch.int64
    elif isinstance(b, (float, torch.SymFloat)):
        dtype = torch.get_default_dtype()
    else:
        return b
    return torch.empty((), dtype=dtype, device=q.device)


def prepare(gm: torch.fx.GraphModule, node: torch.fx.Node) -> None:
    """Builds the C modifications of a flex attention node ahead of its
    first run (a failure here only means the run builds them, or falls back
    to the dense reference with its warning)."""
    from .. import _flex_attention as fx

    args = [_value(gm, a) for a in node.args]
    if node.target is flex_attention:
        q, k, v, score_mod, block_mask = args[:5]
        sbufs, mbufs = (args[7] if len(args) > 7 else ()), (args[8] if len(args) > 8 else ())
        joint = None
    else:
        q, k, v = args[:3]
        score_mod, joint, block_mask = args[7], args[8], args[9]
        sbufs, mbufs = (args[12] if len(args) > 12 else ()), (args[13] if len(args) > 13 else ())
    if isinstance(q, torch.Tensor):  # numbers run as 0-d tensors (fx._scalars_as_tensors)
        sbufs, mbufs = (tuple(_number_example(b, q) for b in bs) for bs in (sbufs, mbufs))
    bufs = tuple(sbufs) + tuple(mbufs)
    if not isinstance(q, torch.Tensor) or not fx._kernel_takes(q, k, v, block_mask, bufs):
        return
    if joint is not None and fx._buffer_grads_wanted(joint):
        return
    from torch._subclasses.fake_tensor import unset_fake_temporarily

    with unset_fake_temporarily():
        real_q = torch.empty((), dtype=q.dtype, device=q.device)
        real_bufs = [torch.empty_strided(b.shape, b.stride(), dtype=b.dtype, device=b.device)
                     for b in bufs]  # fmt: skip
        fx.compile_mods(
            real_q, score_mod, block_mask[-1], joint, real_bufs[: len(sbufs)],
            real_bufs[len(sbufs):],
        )  # fmt: skip
