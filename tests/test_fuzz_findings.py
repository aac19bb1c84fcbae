"""Findings of the bad-input fuzzer (tests/fuzz, docs/fuzz.md) outside the CPU
fallback's aliasing (tests/test_fallback_aliasing.py): each case returned a
value on neuron where PyTorch CPU raises. Each is run on both devices with the
same construction; neuron must raise the same exception type with CPU's
message fragment."""

import pytest
import torch

import torch_neuronx  # noqa: F401

OVERLAP = "refer to a single memory location"


def raises_on_both(fn, exc, fragment):
    for dev in ("cpu", "neuron"):
        with pytest.raises(exc, match=fragment):
            fn(dev)
            if dev == "neuron":
                torch.neuron.synchronize()


def overlapping(dev, shape=(3, 4)):
    """An input and an out one element apart in one buffer."""
    n = 1
    for s in shape:
        n *= s
    buf = torch.arange(n + 1, dtype=torch.float32, device=dev)
    return buf[:n].view(shape), buf[1:].view(shape)


def test_addr_out_partially_overlapping_self():
    def fn(dev):
        x, o = overlapping(dev)
        torch.addr(x, torch.ones(3, device=dev), torch.ones(4, device=dev), out=o)

    raises_on_both(fn, RuntimeError, OVERLAP)


def test_copy_between_partially_overlapping_views():
    def fn(dev):
        x, o = overlapping(dev)
        o.copy_(x)

    raises_on_both(fn, RuntimeError, OVERLAP)


def test_diff_zeroth_order_out_partially_overlapping():
    # diff(n=0) is a copy_ of the input into out.
    def fn(dev):
        x, o = overlapping(dev, (5,))
        torch.diff(x, n=0, out=o)

    raises_on_both(fn, RuntimeError, OVERLAP)


def test_copy_within_one_buffer_without_overlap_still_works():
    for dev in ("cpu", "neuron"):
        buf = torch.arange(12.0, device=dev)
        buf[:6].copy_(buf[6:])
        assert buf.cpu()[:6].tolist() == [6.0, 7.0, 8.0, 9.0, 10.0, 11.0]
        buf.copy_(buf)  # full aliasing: a no-op


@pytest.mark.parametrize("out_dtype", [torch.float16, torch.int64])
def test_where_out_of_another_dtype(out_dtype):
    def fn(dev):
        c = torch.tensor([True, False, True], device=dev)
        a = torch.ones(3, device=dev)
        torch.where(c, a, a, out=torch.empty(3, dtype=out_dtype, device=dev))

    raises_on_both(fn, RuntimeError, "Expected out type to be Float")


@pytest.mark.parametrize("op", ["cumsum", "cumprod"])
def test_bool_scans_have_no_kernel(op):
    def fn(dev):
        getattr(torch, op)(torch.tensor([True, False, True], device=dev), 0, dtype=torch.bool)

    raises_on_both(fn, NotImplementedError, "not implemented for 'Bool'")


def test_masked_cumsum_of_bool():
    def fn(dev):
        x = torch.tensor([[True, False], [True, True]], device=dev)
        torch.masked._ops.cumsum(x, 0, mask=torch.ones_like(x))

    raises_on_both(fn, NotImplementedError, "not implemented for 'Bool'")


def test_fallback_out_on_the_cpu_is_refused():
    # acosh runs through the CPU fallback: an out= on another device must be
    # refused as TensorIterator refuses it, not written on the CPU.
    x = torch.rand(4, device="neuron") + 1.5
    o = torch.zeros(4)
    with pytest.raises(RuntimeError, match="Expected all tensors to be on the same device"):
        torch.acosh(x, out=o)
    assert o.tolist() == [0.0] * 4


# ---- values that differed from CPU (docs/fuzz.md, "Open" before this) ----


@pytest.mark.parametrize(
    "a, b, out_dtype",
    [
        # bool + bool is computed in bool (a logical or), then cast: 1, not 2.
        ([True, True, False], [True, False, False], torch.int64),
        ([True, True, False], [True, False, False], torch.float16),
        # int8 wraps in int8 before it is widened: 127 + 1 is -128.
        ([127, -128, 5], [1, -1, 3], torch.int16),
        ([127, -128, 5], [1, -1, 3], torch.float32),
    ],
)
@pytest.mark.parametrize("op", [torch.add, torch.mul])
def test_integer_op_into_a_wider_out_computes_in_the_common_dtype(a, b, out_dtype, op):
    dtype = torch.bool if isinstance(a[0], bool) else torch.int8
    if op is torch.add and dtype is torch.int8:
        a, b = [100, -100, 5], [100, -100, 3]  # overflow in add too
    results = []
    for dev in ("cpu", "neuron"):
        x = torch.tensor(a, dtype=dtype, device=dev).view(3, 1)
        y = torch.tensor(b, dtype=dtype, device=dev)
        out = torch.empty(3, 3, dtype=out_dtype, device=dev)
        op(x, y, out=out)
        results.append(out.cpu())
    torch.testing.assert_close(results[1], results[0], rtol=0, atol=0)


@pytest.mark.parametrize("align_corners", [True, False])
def test_interpolate_linear_keeps_infinities(align_corners):
    # A 1-d op has no h / d taps: ATen's linear kernel gives -inf between -inf
    # and a finite value, where a 0 * -inf term of the missing dims made NaN.
    import torch.nn.functional as F

    x = torch.tensor([float("nan"), float("inf"), -float("inf"), -2.4, 1.0, float("inf")])
    for shape, size, mode in [
        ((1, 1, 6), (9,), "linear"),
        ((1, 1, 1, 6), (1, 9), "bilinear"),
        ((1, 1, 6, 1), (9, 1), "bilinear"),
        ((1, 1, 1, 1, 6), (1, 1, 9), "trilinear"),
        ((1, 1, 1, 2, 3), (1, 3, 5), "trilinear"),
    ]:
        want = F.interpolate(x.view(shape), size=size, mode=mode, align_corners=align_corners)
        got = F.interpolate(
            x.view(shape).to("neuron"), size=size, mode=mode, align_corners=align_corners
        )
        torch.testing.assert_close(got.cpu(), want, equal_nan=True, msg=f"{mode} {shape}")
    want = F.interpolate(x.view(1, 1, 6), size=9, mode="linear", align_corners=align_corners)
    assert torch.isinf(want).sum() >= 2  # the case is the one that matters


@pytest.mark.parametrize("self_dtype", [torch.complex64, torch.float32])
def test_addr_promotes_the_vectors_before_the_outer_product(self_dtype):
    # CPU computes in the common dtype; outer() of the float16 vectors rounded
    # to float16 first gave errors of 1e-2 where CPU's are 1e-7.
    g = torch.Generator().manual_seed(0)
    m = torch.randn(5, 10, generator=g).to(self_dtype)
    v1 = (torch.randn(5, generator=g) * 7).half()
    v2 = (torch.randn(10, generator=g) * 7).half()
    want = torch.addr(m, v1, v2)
    got = torch.addr(m.to("neuron"), v1.to("neuron"), v2.to("neuron"))
    assert got.dtype == want.dtype
    torch.testing.assert_close(got.cpu(), want, rtol=1e-6, atol=1e-5)
    out = torch.empty(5, 10, dtype=self_dtype, device="neuron")
    torch.addr(m.to("neuron"), v1.to("neuron"), v2.to("neuron"), out=out)
    torch.testing.assert_close(out.cpu(), want, rtol=1e-6, atol=1e-5)


UNSET_POLYNOMIALS = [
    "chebyshev_polynomial_u",
    "chebyshev_polynomial_w",
    "shifted_chebyshev_polynomial_u",
    "shifted_chebyshev_polynomial_w",
    "laguerre_polynomial_l",
    "legendre_polynomial_p",
]


@pytest.mark.parametrize("name", UNSET_POLYNOMIALS)
def test_polynomial_of_nan_is_nan(name):
    # CPU's recurrence returns a local it never set for a NaN x and n >= 2
    # (a different garbage value per call); neuron runs that kernel through
    # the fallback and sets those lanes to NaN. Other lanes are CPU's.
    fn = getattr(torch.special, name)
    nan = float("nan")
    x = torch.tensor([nan, nan, nan, nan, 0.25, -0.5, float("inf")]).view(7, 1)
    n = torch.tensor([0.0, 1.0, 2.0, 3.5, 7.0, -1.0])
    got = fn(x.to("neuron"), n.to("neuron")).cpu()
    want = fn(x, n)
    lanes = torch.isnan(x) & (n >= 2)
    assert torch.isnan(got[lanes.expand_as(got)]).all()
    torch.testing.assert_close(got[~lanes], want[~lanes], equal_nan=True)
    out = torch.empty(7, 6, device="neuron")
    fn(x.to("neuron"), n.to("neuron"), out=out)
    torch.testing.assert_close(out.cpu(), got, equal_nan=True, rtol=0, atol=0)
    # The scalar overloads reach the same kernels.
    assert torch.isnan(fn(x.to("neuron"), 3).cpu()[:4]).all()
