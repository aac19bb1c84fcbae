"""out= arguments of the native neuron kernels, checked against PyTorch CPU.

Every native ``out=`` path must check the out tensor as ATen does before a
kernel writes into it: its dtype (a smaller element type must never receive
wider elements), its device, internal overlap (an expanded out) and overlap
with the inputs; and where CPU accepts an out that aliases an input (``out=``
the input itself), the result must be the same as on CPU.

Each scenario runs the op on CPU and on neuron with the same construction of
arguments and out tensor: both must raise (same exception type, a matching
message fragment) or both succeed with the same values in the returned
tensors and in the memory the out shares with the inputs.
"""
import re

import pytest
import torch

import torch_neuronx

DEV = "neuron"


def _g(seed=0):
    return torch.Generator().manual_seed(seed)


def randn(*shape, seed=0):
    return torch.randn(shape, generator=_g(seed))


def pos(*shape, seed=0):  # positive values (log, prod, multinomial)
    return torch.rand(shape, generator=_g(seed)) + 0.5


IDX3 = torch.tensor([0, 2, 4])


@pytest.mark.parametrize("dtype", [torch.int8, torch.bool, torch.float16, torch.float64])
def test_index_add_out_dtype_checked_like_cpu(dtype):
    x, src = randn(5, 3), randn(3, 3, seed=1)
    with pytest.raises(RuntimeError, match="Expected out tensor to have dtype float") as cpu:
        torch.index_add(x, 0, IDX3, src, out=torch.empty(0, dtype=dtype))
    with pytest.raises(RuntimeError) as dev:
        torch.index_add(x.to(DEV), 0, IDX3.to(DEV), src.to(DEV), out=torch.empty(0, dtype=dtype, device=DEV))
    assert str(cpu.value) == str(dev.value)


def test_index_add_out_checks_device_and_overlap():
    x, src = randn(5, 3).to(DEV), randn(3, 3, seed=1).to(DEV)
    idx = IDX3.to(DEV)
    with pytest.raises(RuntimeError, match="device"):
        torch.index_add(x, 0, idx, src, out=torch.empty(0))
    with pytest.raises(RuntimeError, match="more than one element of the written-to tensor"):
        torch.index_add(x, 0, idx, src, out=torch.zeros(1, device=DEV).expand(5, 3))
    buf = torch.zeros(16, device=DEV)
    xs = buf[:15].view(5, 3).copy_(x)
    with pytest.raises(RuntimeError, match="some elements of the input tensor and the written-to tensor"):
        torch.index_add(xs, 0, idx, src, out=buf[1:].view(5, 3))
    expected = torch.index_add(x.cpu(), 0, IDX3, src.cpu())
    torch.index_add(x, 0, idx, src, out=x)   # out is self: in place, as on CPU
    torch.testing.assert_close(x.cpu(), expected)


@pytest.mark.parametrize("dtype", [torch.int8, torch.bool, torch.float16])
def test_index_add_bad_out_dtype_leaves_neighbour_intact(dtype):
    """index_add with a narrower out must raise before writing: it used to
    write float32 elements (4 bytes per index step) into the out's 512-byte
    block, so index 128 landed on the next device tensor (7.0 became 10.0)."""
    n = 512 // torch.empty(0, dtype=dtype).element_size()
    x = torch.zeros(n, device=DEV)
    src = torch.full((1,), 3.0, device=DEV)
    idx = torch.tensor([128], device=DEV)
    t = torch.zeros(n, dtype=dtype, device=DEV)  # the right size: no reallocation
    neighbour = torch.full((4,), 7.0, device=DEV)
    with pytest.raises(RuntimeError, match="Expected out tensor to have dtype float"):
        torch.index_add(x, 0, idx, src, out=t)
    assert torch.equal(neighbour.cpu(), torch.full((4,), 7.0))
    assert torch.equal(t.cpu(), torch.zeros(n, dtype=dtype))
    with pytest.raises(RuntimeError, match="Expected out tensor to have dtype float"):
        torch.index_add(x.cpu(), 0, idx.cpu(), src.cpu(), out=torch.zeros(n, dtype=dtype))
