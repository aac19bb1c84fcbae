"""3-d and adaptive pooling on neuron against PyTorch CPU, natively
(libtrn pool3d.c, csrc/aten/pool3d.cpp): max_pool3d / avg_pool3d with
padding, stride, dilation, ceil mode, count_include_pad and divisor;
adaptive average / max pooling in 1-3 d (non-divisible sizes, output 1,
output larger than input), forward and backward, in float32 and bfloat16,
channels_last, NaN propagation, and PyTorch's argument errors."""

import pytest
import torch
import torch.nn.functional as F

import torch_neuronx


def _rand(*shape, seed=0, dtype=torch.float32):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=g).to(dtype)


def _check(fn, x, tol=None, ref_dtype=None):
    """ref_dtype: compute the CPU reference in this dtype (CPU lacks the
    op in x's dtype; CUDA has it, and so does neuron)."""
    tol = tol or {}
    xc = x.clone().to(ref_dtype or x.dtype).requires_grad_()
    xd = x.to("neuron").requires_grad_()
    torch_neuronx.clear_op_tracking()
    yd = fn(xd)
    yc = fn(xc)
    if isinstance(yc, tuple):
        torch.testing.assert_close(yd[1].cpu(), yc[1])  # max indices
        yc, yd = yc[0], yd[0]
    torch.testing.assert_close(yd.detach().cpu(), yc.detach().to(x.dtype), equal_nan=True, **tol)
    g = _rand(*yc.shape, seed=7, dtype=x.dtype)
    yc.backward(g.to(xc.dtype))
    yd.backward(g.to("neuron"))
    torch.testing.assert_close(xd.grad.cpu(), xc.grad.to(x.dtype), equal_nan=True, **tol)
    assert torch_neuronx.get_fallback_ops() == [], torch_neuronx.get_fallback_ops()
    return yd


CASES_3D = {
    "max3d": lambda x: F.max_pool3d(x, 3, 2, 1),
    "max3d_indices": lambda x: F.max_pool3d(
        x, (2, 3, 2), (1, 2, 2), (1, 1, 0), return_indices=True
    ),
    "max3d_ceil_dilation": lambda x: F.max_pool3d(x, 2, 2, 1, dilation=2, ceil_mode=True),
    "avg3d": lambda x: F.avg_pool3d(x, 3, 2, 1),
    "avg3d_no_pad_count": lambda x: F.avg_pool3d(
        x, 3, 2, 1, count_include_pad=False, ceil_mode=True
    ),
    "avg3d_divisor": lambda x: F.avg_pool3d(x, 2, divisor_override=3),
}

CASES_ADAPTIVE = {
    "avg1d": lambda x: F.adaptive_avg_pool1d(x.flatten(2), 5),
    "avg2d": lambda x: F.adaptive_avg_pool2d(x.flatten(1, 2), (3, 4)),
    "avg2d_grow": lambda x: F.adaptive_avg_pool2d(x.flatten(1, 2), (9, 11)),
    "avg3d": lambda x: F.adaptive_avg_pool3d(x, (2, 3, 4)),
    "avg3d_one": lambda x: F.adaptive_avg_pool3d(x, 1),
    "max1d": lambda x: F.adaptive_max_pool1d(x.flatten(2), 4, return_indices=True),
    "max2d": lambda x: F.adaptive_max_pool2d(x.flatten(1, 2), (3, 5), return_indices=True),
    "max2d_one": lambda x: F.adaptive_max_pool2d(x.flatten(1, 2), 1),
    "max3d": lambda x: F.adaptive_max_pool3d(x, (2, 3, 3), return_indices=True),
}


@pytest.mark.parametrize("name", list(CASES_3D) + [f"adaptive_{n}" for n in CASES_ADAPTIVE])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
def test_matches_cpu(name, dtype):
    fn = CASES_3D.get(name) or CASES_ADAPTIVE[name[len("adaptive_") :]]
    tol = dict(rtol=1e-2, atol=1e-2) if dtype == torch.bfloat16 else None
    # CPU has no bfloat16 avg_pool3d: float32 is the reference there.
    ref = torch.float32 if name.startswith("avg3d") else None
    _check(fn, _rand(2, 3, 5, 7, 6, dtype=dtype), tol, ref)


def test_unbatched_channels_last_and_nan():
    _check(lambda x: F.max_pool3d(x, 2), _rand(3, 4, 4, 4))
    _check(lambda x: F.adaptive_avg_pool2d(x, (2, 3)), _rand(3, 5, 7))
    x = _rand(2, 4, 9, 9).to(memory_format=torch.channels_last)
    y = _check(lambda x: F.adaptive_avg_pool2d(x, (4, 5)), x)
    assert y.is_contiguous(memory_format=torch.channels_last)
    x = _rand(2, 3, 4, 5, 6).to(memory_format=torch.channels_last_3d)
    y = _check(lambda x: F.avg_pool3d(x, 2), x)
    assert y.is_contiguous(memory_format=torch.channels_last_3d)
    x = _rand(1, 2, 4, 4, 4)
    x[0, 1, 2, 1, 3] = float("nan")
    y = _check(lambda x: F.adaptive_max_pool3d(x, 2), x)
    assert torch.isnan(y.cpu()[0, 1, 1, 0, 1])
    _check(lambda x: F.max_pool3d(x, 2), x)


def test_empty_batch_and_zero_output():
    x = torch.randn(0, 3, 4, 4, 4, device="neuron")
    assert F.max_pool3d(x, 2).shape == (0, 3, 2, 2, 2)
    assert F.adaptive_avg_pool3d(x, 2).shape == (0, 3, 2, 2, 2)
    y = F.adaptive_avg_pool2d(torch.randn(2, 3, 4, 4, device="neuron"), (0, 2))
    assert y.shape == (2, 3, 0, 2)


def test_argument_errors():
    x = torch.randn(1, 2, 4, 4, 4, device="neuron")
    with pytest.raises(
        RuntimeError, match="kernel_size must either be a single int, or a tuple of three ints"
    ):
        torch.ops.aten.max_pool3d_with_indices(x, [2, 2])
    with pytest.raises(RuntimeError, match="pad should be"):
        F.max_pool3d(x, 2, padding=2)
    with pytest.raises(RuntimeError, match="Output size is too small"):
        F.avg_pool3d(torch.randn(1, 1, 1, 4, 4, device="neuron"), 2)
    with pytest.raises(RuntimeError, match="divisor must be not zero"):
        F.avg_pool3d(x, 2, divisor_override=0)
    with pytest.raises(RuntimeError, match="Expected 3D or 4D tensor"):
        F.adaptive_avg_pool2d(torch.randn(4, device="neuron"), 2)
    with pytest.raises(RuntimeError, match="non-zero size for non-batch dimensions"):
        F.adaptive_max_pool2d(torch.randn(2, 0, 4, device="neuron"), 2)
