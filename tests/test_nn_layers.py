"""Group norm, RMS norm, upsampling, transposed convolution and
embedding_bag on neuron against PyTorch CPU at module level, natively (no
fallback): a few training steps of each nn module (outputs, input and
parameter gradients), the shapes OpInfo does not cover (channels_last,
output_padding with groups and dilation, include_last_offset, max mode
gradients, int32 indices), HF Llama's hand-written RMSNorm, and PyTorch's
errors for bad input. Conformance on OpInfo samples lives in
tests/conformance/ops_{group_norm,upsample,conv_transpose,embedding_bag}.py."""

import copy

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import torch_neuronx


def _rand(*shape, seed=0, dtype=torch.float32):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=g).to(dtype)


def _no_fallback():
    assert torch_neuronx.get_fallback_ops() == [], torch_neuronx.get_fallback_ops()


def _train_like_cpu(ref, make_input, steps=2, tol=None, channels_last=False):
    """Forward + backward of `ref` and its neuron copy on the same inputs."""
    tol = tol or {}
    dev = copy.deepcopy(ref).to("neuron")
    torch_neuronx.clear_op_tracking()
    for step in range(steps):
        x = make_input(step)
        if channels_last:
            x = x.to(memory_format=torch.channels_last)
        xc = x.clone().requires_grad_(x.is_floating_point())
        xd = x.to("neuron").requires_grad_(x.is_floating_point())
        yc, yd = ref(xc), dev(xd)
        g = _rand(*yc.shape, seed=100 + step, dtype=yc.dtype)
        yc.backward(g)
        yd.backward(g.to("neuron"))
        torch.testing.assert_close(yd.detach().cpu(), yc.detach(), **tol)
        if x.is_floating_point():
            torch.testing.assert_close(xd.grad.cpu(), xc.grad, **tol)
    for (name, a), (_, b) in zip(dev.named_parameters(), ref.named_parameters()):
        torch.testing.assert_close(a.grad.cpu(), b.grad, msg=name, **tol)
    _no_fallback()
    return dev


# --- group norm -------------------------------------------------------------


@pytest.mark.parametrize("shape,groups", [((4, 6, 5, 3), 3), ((2, 8, 7), 8), ((3, 4), 1)])
def test_group_norm_module(shape, groups):
    m = nn.GroupNorm(groups, shape[1])
    with torch.no_grad():
        m.weight.uniform_(0.5, 1.5)
        m.bias.uniform_(-0.5, 0.5)
    _train_like_cpu(m, lambda s: _rand(*shape, seed=s) * 2 + 1, tol={"atol": 1e-5, "rtol": 1e-5})


def test_group_norm_channels_last_and_mixed_type():
    m = nn.GroupNorm(2, 4)
    _train_like_cpu(
        m, lambda s: _rand(2, 4, 5, 6, seed=s), channels_last=True, tol={"atol": 1e-5, "rtol": 1e-5}
    )
    x = _rand(2, 4, 5, 6).to(torch.bfloat16)
    w, b = _rand(4, seed=1), _rand(4, seed=2)
    got = torch.ops.aten.native_group_norm(
        x.to("neuron"), w.to("neuron"), b.to("neuron"), 2, 4, 30, 2, 1e-5
    )
    want = torch.ops.aten.native_group_norm(x, w, b, 2, 4, 30, 2, 1e-5)
    for g, e in zip(got, want):
        assert g.dtype == e.dtype
        torch.testing.assert_close(g.cpu(), e, atol=2e-2, rtol=2e-2)
    _no_fallback()


def test_group_norm_empty():
    for x in [torch.randn(2, 4, 0), torch.randn(0, 4, 3)]:
        want = torch.ops.aten.native_group_norm(x, None, None, x.shape[0], 4, x.shape[2], 2, 1e-5)
        got = torch.ops.aten.native_group_norm(
            x.to("neuron"), None, None, x.shape[0], 4, x.shape[2], 2, 1e-5
        )
        for g, e in zip(got, want):
            torch.testing.assert_close(g.cpu(), e, equal_nan=True)
    _no_fallback()


def test_group_norm_errors():
    x = torch.randn(2, 6, 3, device="neuron")
    with pytest.raises(RuntimeError, match="divisible by num_groups"):
        F.group_norm(x, 4)
    with pytest.raises(RuntimeError, match="weight"):
        F.group_norm(x, 3, weight=torch.ones(5, device="neuron"))


# --- RMS norm ---------------------------------------------------------------


def test_rms_norm_module_is_fused():
    m = nn.RMSNorm([6, 8], eps=1e-6)
    with torch.no_grad():
        m.weight.uniform_(0.5, 1.5)
    _train_like_cpu(m, lambda s: _rand(3, 5, 6, 8, seed=s), tol={"atol": 1e-5, "rtol": 1e-5})
    executed = torch_neuronx.get_executed_ops()
    assert "aten::_fused_rms_norm" in executed
    assert "aten::_fused_rms_norm_backward" in executed
    assert "aten::pow" not in executed and "aten::rsqrt" not in executed


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float64])
def test_rms_norm_dtypes(dtype):
    x = _rand(4, 16, dtype=dtype)
    w = (_rand(16, seed=3) + 1).to(dtype)
    want = F.rms_norm(x, (16,), w)
    got = F.rms_norm(x.to("neuron"), (16,), w.to("neuron"))
    assert got.dtype == dtype
    tol = {} if dtype == torch.float64 else {"atol": 2e-2, "rtol": 2e-2}
    torch.testing.assert_close(got.cpu(), want, **tol)
    _no_fallback()


def test_rms_norm_default_eps_and_no_weight():
    x = _rand(3, 7) * 1e-4  # small values: the default eps matters
    torch.testing.assert_close(F.rms_norm(x.to("neuron"), (7,)).cpu(), F.rms_norm(x, (7,)))
    _no_fallback()


def test_llama_rmsnorm_as_written():
    """HF Llama's RMSNorm (pow / mean / rsqrt by hand) trains like CPU."""

    class LlamaRMSNorm(nn.Module):
        def __init__(self, hidden, eps=1e-6):
            super().__init__()
            self.weight = nn.Parameter(torch.ones(hidden))
            self.eps = eps

        def forward(self, h):
            dtype = h.dtype
            h = h.to(torch.float32)
            var = h.pow(2).mean(-1, keepdim=True)
            h = h * torch.rsqrt(var + self.eps)
            return self.weight * h.to(dtype)

    m = LlamaRMSNorm(16)
    with torch.no_grad():
        m.weight.uniform_(0.5, 1.5)
    _train_like_cpu(m, lambda s: _rand(2, 5, 16, seed=s), tol={"atol": 1e-5, "rtol": 1e-5})


def test_rms_norm_errors():
    x = torch.randn(2, 6, device="neuron")
    with pytest.raises(RuntimeError, match="normalized_shape"):
        F.rms_norm(x, (5,))
    with pytest.raises(RuntimeError, match="weight"):
        F.rms_norm(x, (6,), torch.ones(5, device="neuron"))


# --- upsample ---------------------------------------------------------------


@pytest.mark.parametrize(
    "mode,shape,kw",
    [
        ("nearest", (2, 3, 5), {"scale_factor": 3}),
        ("nearest", (2, 3, 4, 5), {"size": (7, 3)}),
        ("nearest", (1, 2, 3, 4, 5), {"scale_factor": (2, 1.5, 0.5)}),
        ("nearest-exact", (2, 3, 4, 5), {"size": (9, 7)}),
        ("nearest-exact", (1, 2, 3, 2, 4), {"size": (5, 3, 2)}),
        ("bilinear", (2, 3, 4, 5), {"size": (9, 7), "align_corners": False}),
        ("bilinear", (2, 3, 4, 5), {"scale_factor": 2.5, "align_corners": True}),
        ("bilinear", (1, 2, 8, 6), {"scale_factor": 0.6, "align_corners": False}),
        ("linear", (2, 3, 6), {"size": 13, "align_corners": False}),
        ("trilinear", (1, 2, 3, 4, 5), {"size": (5, 7, 3), "align_corners": False}),
        ("trilinear", (2, 1, 3, 2, 4), {"scale_factor": (2, 1.5, 1), "align_corners": True}),
    ],
)
def test_interpolate_trains_like_cpu(mode, shape, kw):
    m = nn.Upsample(mode=mode, **kw)
    _train_like_cpu(m, lambda s: _rand(*shape, seed=s), tol={"atol": 1e-5, "rtol": 1e-5})


def test_upsample_channels_last_and_integers():
    m = nn.Upsample(scale_factor=2, mode="bilinear")
    _train_like_cpu(
        m, lambda s: _rand(2, 3, 4, 5, seed=s), channels_last=True, tol={"atol": 1e-5, "rtol": 1e-5}
    )
    x = torch.arange(24, dtype=torch.uint8).reshape(1, 2, 3, 4)
    got = F.interpolate(x.to("neuron"), scale_factor=2, mode="nearest")
    torch.testing.assert_close(got.cpu(), F.interpolate(x, scale_factor=2, mode="nearest"))
    _no_fallback()


def test_upsample_errors():
    x = torch.randn(1, 2, 3, 4, device="neuron")
    with pytest.raises(RuntimeError, match="greater than 0"):
        torch.ops.aten.upsample_nearest2d(x, [0, 4])


# --- transposed convolution -------------------------------------------------


@pytest.mark.parametrize(
    "cls,shape,kw",
    [
        (
            nn.ConvTranspose1d,
            (2, 4, 7),
            {"kernel_size": 3, "stride": 2, "padding": 1, "output_padding": 1},
        ),
        (
            nn.ConvTranspose2d,
            (2, 4, 5, 6),
            {
                "kernel_size": (3, 2),
                "stride": (2, 3),
                "padding": (1, 0),
                "output_padding": (1, 2),
                "groups": 2,
                "dilation": (2, 1),
            },
        ),
        (
            nn.ConvTranspose2d,
            (1, 3, 4, 4),
            {"kernel_size": 4, "stride": 2, "padding": 1, "bias": False},
        ),
        (nn.ConvTranspose3d, (1, 2, 3, 4, 3), {"kernel_size": 2, "stride": 2, "groups": 2}),
    ],
)
def test_conv_transpose_trains_like_cpu(cls, shape, kw):
    torch.manual_seed(0)
    m = cls(shape[1], 6, **kw)
    _train_like_cpu(m, lambda s: _rand(*shape, seed=s), tol={"atol": 1e-4, "rtol": 1e-4})


def test_conv_transpose_channels_last_bf16():
    torch.manual_seed(0)
    m = nn.ConvTranspose2d(4, 6, 3, stride=2, padding=1, output_padding=1)
    _train_like_cpu(
        m, lambda s: _rand(2, 4, 5, 6, seed=s), channels_last=True, tol={"atol": 1e-4, "rtol": 1e-4}
    )
    mb = copy.deepcopy(m).to(torch.bfloat16)
    x = _rand(2, 4, 5, 6, dtype=torch.bfloat16)
    torch.testing.assert_close(
        copy.deepcopy(mb).to("neuron")(x.to("neuron")).detach().cpu(),
        mb(x).detach(),
        atol=5e-2,
        rtol=2e-2,
    )
    _no_fallback()


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_conv_transpose_16bit_rounds_once(dtype):
    # Against float64 on the same 16-bit values: float32 accumulation rounded
    # once to the 16-bit type (CPU rounds intermediate sums: looser).
    torch.manual_seed(0)
    x = _rand(2, 4, 3, 4, 3, dtype=dtype) * 3
    w = _rand(4, 3, 3, 2, 3, seed=1, dtype=dtype)
    b = _rand(3, seed=2, dtype=dtype)
    kw = {"stride": (2, 1, 2), "padding": 1, "output_padding": (1, 0, 0)}
    ref = F.conv_transpose3d(x.double(), w.double(), b.double(), **kw)
    got = F.conv_transpose3d(x.to("neuron"), w.to("neuron"), b.to("neuron"), **kw).cpu()
    eps = torch.finfo(dtype).eps
    assert ((got.double() - ref).abs() <= eps / 2 * ref.abs() + 1e-3).all()
    _no_fallback()


def test_conv2d_bf16_forward_and_backward():
    # bfloat16 convolutions run natively in oneDNN where the CPU has bf16
    # instructions (float32 accumulation, one rounding): forward, input,
    # weight and bias gradients against float64 on the same bf16 values.
    x = _rand(2, 8, 9, 10, dtype=torch.bfloat16)
    w = _rand(12, 4, 3, 3, seed=1, dtype=torch.bfloat16)
    b = _rand(12, seed=2, dtype=torch.bfloat16)
    g = _rand(2, 12, 5, 5, seed=3, dtype=torch.bfloat16)
    kw = {"stride": 2, "padding": 1, "groups": 2}
    ref_in = [t.double().requires_grad_() for t in (x, w, b)]
    ref = F.conv2d(*ref_in, **kw)
    ref_grads = torch.autograd.grad(ref, ref_in, g.double())
    dev_in = [t.to("neuron").requires_grad_() for t in (x, w, b)]
    got = F.conv2d(*dev_in, **kw)
    got_grads = torch.autograd.grad(got, dev_in, g.to("neuron"))
    for r, d in zip((ref,) + ref_grads, (got,) + got_grads):
        assert d.dtype == torch.bfloat16
        torch.testing.assert_close(d.detach().cpu().double(), r.detach(), atol=3e-2, rtol=1.6e-2)
    _no_fallback()


def test_conv_transpose_output_padding_beyond_stride():
    # PyTorch allows output_padding >= stride when it is below the dilation.
    torch.manual_seed(0)
    m = nn.ConvTranspose2d(2, 4, 3, stride=(1, 2), output_padding=(1, 2), dilation=(2, 3))
    _train_like_cpu(m, lambda s: _rand(2, 2, 4, 5, seed=s), tol={"atol": 1e-4, "rtol": 1e-4})


# --- embedding_bag ----------------------------------------------------------


@pytest.mark.parametrize("mode", ["sum", "mean", "max"])
@pytest.mark.parametrize("padding_idx", [None, 2])
def test_embedding_bag_trains_like_cpu(mode, padding_idx):
    torch.manual_seed(0)
    m = nn.EmbeddingBag(10, 4, mode=mode, padding_idx=padding_idx)
    idx = torch.tensor([1, 2, 4, 5, 4, 3, 2, 9, 2])
    off = torch.tensor([0, 2, 2, 5])

    class Wrap(nn.Module):
        def __init__(self):
            super().__init__()
            self.bag = m

        def forward(self, x):
            return self.bag(idx.to(x.device), off.to(x.device)) * x

    _train_like_cpu(Wrap(), lambda s: _rand(4, 4, seed=s), tol={"atol": 1e-5, "rtol": 1e-5})


def test_embedding_bag_per_sample_weights_and_last_offset():
    torch.manual_seed(0)
    w = torch.randn(10, 3)
    idx = torch.tensor([1, 2, 4, 5, 4, 3], dtype=torch.int32)
    off = torch.tensor([0, 2, 6], dtype=torch.int32)
    psw = torch.randn(6)
    outs = []
    for dev in ["cpu", "neuron"]:
        wd = w.clone().to(dev).requires_grad_()
        pd = psw.clone().to(dev).requires_grad_()
        y = F.embedding_bag(
            idx.to(dev),
            wd,
            off.to(dev),
            mode="sum",
            per_sample_weights=pd,
            include_last_offset=True,
        )
        (y * torch.arange(6.0, device=dev).reshape(2, 3)).sum().backward()
        outs.append((y.detach().cpu(), wd.grad.cpu(), pd.grad.cpu()))
    for a, b in zip(*outs):
        torch.testing.assert_close(b, a)
    _no_fallback()


def test_embedding_bag_scale_grad_by_freq():
    # Reference: F.embedding (per-index rows, same scaling) summed per bag.
    # (PyTorch 2.13's CPU embedding_bag halves some once-seen rows here.)
    w = torch.randn(10, 3)
    idx = torch.tensor([1, 2, 4, 5, 4, 3])
    wc = w.clone().requires_grad_()
    ref = F.embedding(idx, wc, scale_grad_by_freq=True)
    torch.stack([ref[:2].sum(0), ref[2:].sum(0)]).mul(
        torch.arange(6.0).reshape(2, 3)
    ).sum().backward()
    wd = w.to("neuron").requires_grad_()
    y = F.embedding_bag(
        idx.to("neuron"),
        wd,
        torch.tensor([0, 2], device="neuron"),
        mode="sum",
        scale_grad_by_freq=True,
    )
    (y * torch.arange(6.0, device="neuron").reshape(2, 3)).sum().backward()
    torch.testing.assert_close(wd.grad.cpu(), wc.grad)
    _no_fallback()


def test_embedding_bag_index_after_last_offset_gets_no_gradient():
    # With include_last_offset, index 5 (row 3) belongs to no bag: zero
    # gradients (PyTorch CPU reads uninitialized memory here).
    w = torch.randn(10, 3, device="neuron", requires_grad=True)
    psw = torch.randn(6, device="neuron", requires_grad=True)
    idx = torch.tensor([1, 2, 4, 5, 4, 3], device="neuron")
    off = torch.tensor([0, 2, 5], device="neuron")
    y = F.embedding_bag(idx, w, off, mode="sum", per_sample_weights=psw, include_last_offset=True)
    assert y.shape == (2, 3)
    y.sum().backward()
    assert torch.count_nonzero(w.grad[3].cpu()) == 0 and psw.grad[5].item() == 0
    _no_fallback()


def test_embedding_bag_2d_input_bf16():
    w = torch.randn(12, 5).to(torch.bfloat16)
    idx = torch.tensor([[1, 2, 3], [11, 0, 0]])
    want = F.embedding_bag(idx, w, mode="mean")
    got = F.embedding_bag(idx.to("neuron"), w.to("neuron"), mode="mean")
    torch.testing.assert_close(got.cpu(), want, atol=1e-2, rtol=1e-2)
    _no_fallback()


def test_embedding_bag_empty():
    # No bags (mean: no bag sizes to read) and no indices: zero gradients.
    # (PyTorch 2.13's CPU backward crashes on the first; checked by value.)
    w = torch.randn(5, 3, device="neuron", requires_grad=True)
    y = F.embedding_bag(
        torch.tensor([1, 2], device="neuron"),
        w,
        torch.tensor([], dtype=torch.long, device="neuron"),
    )
    y.sum().backward()
    assert y.shape == (0, 3) and torch.count_nonzero(w.grad.cpu()) == 0
    y = F.embedding_bag(
        torch.tensor([], dtype=torch.long, device="neuron"),
        w,
        torch.tensor([0, 0], device="neuron"),
        mode="max",
    )
    assert torch.equal(y.detach().cpu(), torch.zeros(2, 3))
    _no_fallback()


def test_embedding_bag_errors():
    w = torch.randn(5, 3, device="neuron")
    with pytest.raises(RuntimeError, match="takes value 7 which is not in the valid range"):
        F.embedding_bag(
            torch.tensor([1, 7], device="neuron"), w, torch.tensor([0], device="neuron")
        )
    with pytest.raises(RuntimeError, match="has to start from position 0"):
        F.embedding_bag(
            torch.tensor([1, 2], device="neuron"), w, torch.tensor([1], device="neuron")
        )
    with pytest.raises((RuntimeError, NotImplementedError, ValueError), match="per_sample_weights"):
        F.embedding_bag(
            torch.tensor([1, 2], device="neuron"),
            w,
            torch.tensor([0], device="neuron"),
            mode="max",
            per_sample_weights=torch.ones(2, device="neuron"),
        )
