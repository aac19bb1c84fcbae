"""Native slice_backward and float32 column sums (session 28, lmk5).

- slice_backward (aten/index.cpp + libtrn kernels/index/slice_backward.c) writes
  each output element once: zeros outside the slice, the gradient inside. It must
  equal PyTorch CPU's composite (zeros + a strided copy) bit for bit, for every dtype,
  dim, step, negative / out-of-range bound and gradient layout (transposed, expanded,
  sliced views), run natively (no CPU fallback), and through autograd.
- sum over an outer dim of float32 (column sums) runs in register strips: the same
  additions in the same order as the column loop, so its error vs float64 stays at or
  below PyTorch CPU's.
"""

import pytest
import torch

import torch_neuronx
from torch_neuronx import eager_fusion

DTYPES = [
    torch.float32,
    torch.bfloat16,
    torch.float16,
    torch.float64,
    torch.int64,
    torch.int32,
    torch.int8,
    torch.bool,
    torch.complex64,
]

# (input sizes, dim, start, end, step)
CASES = [
    ((8, 4, 64, 64), -1, 0, 32, 1),  # Llama's RoPE halves
    ((8, 4, 64, 64), -1, 32, 64, 1),
    ((8, 4, 64, 64), 3, 32, 9223372036854775807, 1),
    ((512, 768), 0, 0, 256, 1),  # outer 1: rows split
    ((512, 768), 1, 100, 700, 1),
    ((512, 768), 1, 1, 768, 3),  # step along the last dim: element by element
    ((512, 768), 0, 3, 500, 7),
    ((3, 5, 7), 1, -4, -1, 1),  # negative bounds
    ((3, 5, 7), 1, -100, 100, 2),  # clamped
    ((3, 5, 7), 2, 5, 2, 1),  # empty slice: all zeros
    ((3, 5, 7), 0, 3, 10, 1),  # start at the end: empty
    ((3, 5, 7), -3, 0, 1, 1),
    ((1, 1, 9), 2, 2, 9, 4),
    ((6,), 0, 1, 5, 2),
    ((2, 3, 4, 5, 6), 2, 1, 3, 1),
    ((2, 0, 4), 2, 1, 3, 1),  # empty output
    ((1030, 300), 0, 5, 1000, 1),  # parallel pieces over rows
    ((64, 4096), 1, 2048, 4096, 1),
]


def _grad_like(sizes, dim, start, end, step, dtype, layout):
    index = (slice(None),) * (dim % len(sizes)) + (slice(start, end, step),)
    shape = list(torch.empty(sizes)[index].shape)
    if dtype == torch.bool:
        g = torch.rand(shape) > 0.5
    elif dtype.is_floating_point or dtype.is_complex:
        g = torch.randn(shape, dtype=dtype)
    else:
        g = torch.randint(-100, 100, shape, dtype=dtype)
    if layout == "contiguous" or g.dim() < 2 or g.numel() == 0:
        return g
    if layout == "transposed":  # the same values, strides of a transposed buffer
        return g.transpose(0, -1).contiguous().transpose(0, -1)
    if layout == "sliced":  # a view into a wider buffer (cat's backward)
        wide = torch.cat([g, g], dim=-1)
        return wide[..., : g.shape[-1]]
    if layout == "expanded":  # sum()'s backward: one value everywhere
        return g.flatten()[:1].reshape([1] * g.dim()).expand(shape)
    raise ValueError(layout)


def _run(sizes, dim, start, end, step, g):
    return torch.ops.aten.slice_backward(g, list(sizes), dim, start, end, step)


@pytest.mark.parametrize("case", CASES, ids=lambda c: f"{c[0]}-d{c[1]}-{c[2]}:{c[3]}:{c[4]}")
@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: str(d)[6:])
def test_slice_backward_matches_cpu(case, dtype):
    sizes, dim, start, end, step = case
    for layout in ["contiguous", "transposed", "sliced", "expanded"]:
        g = _grad_like(sizes, dim, start, end, step, dtype, layout)
        expected = _run(sizes, dim, start, end, step, g)
        torch_neuronx.clear_op_tracking()
        got = _run(sizes, dim, start, end, step, g.to("neuron"))
        assert torch_neuronx.get_fallback_ops() == []
        assert got.device.type == "neuron" and got.dtype == dtype and got.is_contiguous()
        assert torch.equal(got.cpu(), expected), (case, dtype, layout)


def test_slice_backward_negative_zero_and_nan():
    # bytes copied, not values: -0.0 and NaN payloads survive
    g = torch.tensor([[-0.0, float("nan")], [float("inf"), -1.0]])
    got = _run((2, 5), 1, 1, 5, 2, g.to("neuron")).cpu()
    exp = _run((2, 5), 1, 1, 5, 2, g)
    assert torch.equal(got.view(torch.int32), exp.view(torch.int32))


def test_slice_backward_errors_and_broadcast_like_cpu():
    g = torch.randn(3, 2)
    with pytest.raises(RuntimeError, match="step must be positive"):
        _run((3, 5), 1, 0, 4, 0, g.to("neuron"))
    # a gradient that broadcasts into the slice takes PyTorch's composite
    gb = torch.randn(1, 2)
    torch.testing.assert_close(
        _run((3, 5), 1, 0, 4, 2, gb.to("neuron")).cpu(), _run((3, 5), 1, 0, 4, 2, gb)
    )


def _rope_grad(x):
    t = x.detach().requires_grad_()
    a, b = t[..., :4], t[..., 4:]  # RoPE's rotate_half
    y = torch.cat([-b, a], dim=-1) * t + t[:, 1:5:2].sum()
    y.square().sum().backward()
    return t.grad


def test_slice_backward_through_autograd_fusion_on_off():
    """Gradients through slices: close to CPU's (the sums' order differs), and
    bit-identical with Adaptive Eager fusion on and off."""
    x = torch.randn(4, 6, 8)
    was = torch_neuronx._C._eager_fusion_switched_on()
    try:
        grads = []
        for on in (False, True, False, True):
            eager_fusion.set_enabled(on)
            grads.append(_rope_grad(x.to("neuron")).cpu())
            eager_fusion.flush()
    finally:
        eager_fusion.set_enabled(was)
    for g in grads[1:]:
        assert torch.equal(g, grads[0])
    torch.testing.assert_close(grads[0], _rope_grad(x))
