"""2-d (and 1-d) max / average pooling on neuron against PyTorch CPU,
natively: ResNet's stem pooling forward and backward, ceil mode, dilation,
padding with count_include_pad, divisor_override, NaN propagation, channels
last, and PyTorch's argument errors."""

import pytest
import torch
import torch.nn.functional as F

import torch_neuronx


def _rand(*shape, seed=0, dtype=torch.float32):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=g).to(dtype)


def _check(fn, x, tol=None):
    tol = tol or {}
    xc = x.clone().requires_grad_()
    xd = x.to("neuron").requires_grad_()
    torch_neuronx.clear_op_tracking()
    yd = fn(xd)
    yc = fn(xc)
    yc, yd = (yc[0], yd[0]) if isinstance(yc, tuple) else (yc, yd)
    torch.testing.assert_close(yd.detach().cpu(), yc.detach(), equal_nan=True, **tol)
    g = _rand(*yc.shape, seed=7, dtype=x.dtype)
    yc.backward(g)
    yd.backward(g.to("neuron"))
    torch.testing.assert_close(xd.grad.cpu(), xc.grad, equal_nan=True, **tol)
    assert torch_neuronx.get_fallback_ops() == [], torch_neuronx.get_fallback_ops()
    return yd


CASES = {
    "resnet_stem": lambda x: F.max_pool2d(x, 3, 2, 1),
    "indices": lambda x: F.max_pool2d(x, (2, 3), (1, 2), (1, 0), return_indices=True),
    "ceil_dilation": lambda x: F.max_pool2d(x, 3, 2, 1, dilation=2, ceil_mode=True),
    "avg": lambda x: F.avg_pool2d(x, 3, 2, 1),
    "avg_no_pad_count": lambda x: F.avg_pool2d(x, 3, 2, 1, count_include_pad=False, ceil_mode=True),
    "avg_divisor": lambda x: F.avg_pool2d(x, 2, divisor_override=3),
    "max1d": lambda x: F.max_pool1d(x.flatten(2), 4, 3, 2),
    "avg1d": lambda x: F.avg_pool1d(x.flatten(2), 4, 3, 2),
}


@pytest.mark.parametrize("name", list(CASES))
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
def test_pool_matches_cpu(name, dtype):
    tol = dict(rtol=1e-2, atol=1e-2) if dtype == torch.bfloat16 else None
    _check(CASES[name], _rand(2, 3, 11, 10, dtype=dtype), tol)


def test_unbatched_and_channels_last():
    _check(lambda x: F.max_pool2d(x, 2), _rand(3, 8, 8))
    x = _rand(2, 4, 9, 9).to(memory_format=torch.channels_last)
    y = _check(lambda x: F.max_pool2d(x, 3, 2, 1), x)
    assert y.is_contiguous(memory_format=torch.channels_last)


def test_nan_propagates_with_its_index():
    x = _rand(1, 1, 4, 4)
    x[0, 0, 1, 1] = float("nan")
    yc, ic = F.max_pool2d(x, 2, return_indices=True)
    yd, idd = F.max_pool2d(x.to("neuron"), 2, return_indices=True)
    torch.testing.assert_close(yd.cpu(), yc, equal_nan=True)
    assert torch.equal(idd.cpu(), ic)


@pytest.mark.parametrize(
    "dtype", [torch.float32, torch.bfloat16, torch.float16, torch.float64], ids=str
)
@pytest.mark.parametrize("kernel,stride", [(2, 2), ((2, 3), (2, 1)), (3, 3), ((1, 2), (3, 2))])
def test_max_windows_inside_the_image_match_cpu_exactly(dtype, kernel, stride):
    """Windows that never leave the image take pool2d.c's branch-free path
    (runs of up to 128 outputs): values and indices equal CPU's bit for bit,
    with ties (first maximum wins), NaN (a later NaN wins), -inf and rows
    wider than one run."""
    g = torch.Generator().manual_seed(3)
    x = torch.randint(-3, 4, (2, 3, 9, 301), generator=g).to(dtype)
    x[0, 0, 0, :7] = float("nan")
    x[0, 1, 2, 5] = float("nan")
    x[1, 2] = float("-inf")
    x[1, 1, :, 260:] = float("-inf")
    yc, ic = F.max_pool2d(x, kernel, stride, return_indices=True)
    yd, idd = F.max_pool2d(x.to("neuron"), kernel, stride, return_indices=True)
    assert torch.equal(idd.cpu(), ic)
    assert torch.equal(yd.cpu().isnan(), yc.isnan())
    torch.testing.assert_close(yd.cpu(), yc, equal_nan=True, rtol=0, atol=0)
    assert torch.equal(
        F.max_pool2d(x.to("neuron"), kernel, stride).cpu().nan_to_num(), yc.nan_to_num()
    )


@pytest.mark.parametrize(
    "dtype", [torch.float32, torch.bfloat16, torch.float16, torch.float64], ids=str
)
@pytest.mark.parametrize("kernel,stride,padding", [(2, 2, 0), (3, 2, 1), (3, 1, 1)])
def test_max_backward_scatter_matches_cpu_bits(dtype, kernel, stride, padding):
    """pool2d.c's max_scatter: the gradient of max pooling equals CPU's bit
    for bit, with ResNet's non-overlapping windows and overlapping ones
    (several outputs add into one input, in output order), planes larger
    than the 16-bit types' on-stack sum."""
    g = torch.Generator().manual_seed(5)
    x = torch.randint(-2, 3, (2, 3, 33, 34), generator=g).to(dtype)  # ties
    y, ix = F.max_pool2d(x, kernel, stride, padding, return_indices=True)
    dy = torch.randn(y.shape, generator=g, dtype=torch.float64).mul(1e3).to(dtype)
    op = torch.ops.aten.max_pool2d_with_indices_backward
    args = ([kernel] * 2, [stride] * 2, [padding] * 2, [1, 1], False)
    dc = op(dy, x, *args, ix)
    dd = op(dy.to("neuron"), x.to("neuron"), *args, ix.to("neuron")).cpu()
    if dtype.itemsize == 2 and kernel > stride:
        # Overlapping windows: CPU adds in the 16-bit type (a rounding per
        # add), neuron in float32 and rounds once: never further from the
        # float64 sum than CPU.
        ref = op(dy.double(), x.double(), *args, ix)
        assert ((dd.double() - ref).abs() <= (dc.double() - ref).abs()).all()
        return
    bits = {2: torch.int16, 4: torch.int32, 8: torch.int64}[dtype.itemsize]
    assert torch.equal(dd.view(bits), dc.view(bits))


def test_max_backward_index_outside_its_plane_is_an_error():
    x = _rand(1, 2, 4, 4)
    y, ix = F.max_pool2d(x, 2, return_indices=True)
    ix[0, 1, 1, 1] = 16
    op = torch.ops.aten.max_pool2d_with_indices_backward
    args = ([2, 2], [2, 2], [0, 0], [1, 1], False)
    with pytest.raises(ValueError, match="outside its input plane"):
        op(y.to("neuron"), x.to("neuron"), *args, ix.to("neuron")).cpu()


@pytest.mark.parametrize(
    "kwargs,msg",
    [
        (dict(kernel_size=3, padding=2), "pad should be at most half"),
        (dict(kernel_size=0, stride=1), "kernel size should be greater than zero"),
        (dict(kernel_size=2, stride=0), "stride should"),
        (dict(kernel_size=20), "Output size is too small"),
    ],
)
def test_errors_match_cpu(kwargs, msg):
    for dev in ("cpu", "neuron"):
        with pytest.raises(RuntimeError, match=msg):
            F.max_pool2d(torch.randn(1, 2, 8, 8, device=dev), **kwargs)
