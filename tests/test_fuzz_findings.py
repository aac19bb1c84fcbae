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
