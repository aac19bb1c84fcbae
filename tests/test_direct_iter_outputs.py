"""Functional elementwise ops allocate their outputs without the dispatcher
(aten/direct_iter.h): the outputs must keep TensorIterator's layout, dtype
and values exactly as CPU gives them."""

import pytest
import torch

import torch_neuronx  # noqa: F401


def _inputs():
    g = torch.Generator().manual_seed(0)
    x = torch.randn(2, 3, 4, 5, generator=g)
    return {
        "contiguous": (x, torch.randn(2, 3, 4, 5, generator=g)),
        "transposed": (x.transpose(1, 3), torch.randn(2, 5, 4, 3, generator=g)),
        "channels_last": (
            x.contiguous(memory_format=torch.channels_last),
            torch.randn(2, 3, 4, 5, generator=g).contiguous(memory_format=torch.channels_last),
        ),
        "broadcast": (x, torch.randn(5, generator=g)),
        "expanded": (torch.randn(1, 3, 1, 5, generator=g).expand(2, 3, 4, 5), x),
        "int_float": (torch.randint(-5, 5, (3, 4), generator=g), torch.randn(3, 4, generator=g)),
        "cpu_scalar": (x, torch.tensor(2.5)),
        "zero_dim": (torch.tensor(1.5), torch.tensor(-0.25)),
        "empty": (torch.randn(0, 3, generator=g), torch.randn(0, 3, generator=g)),
    }


@pytest.mark.parametrize("case", list(_inputs()))
@pytest.mark.parametrize("op", [torch.add, torch.mul, torch.sub, torch.maximum, torch.lt])
def test_binary_outputs_match_cpu(case, op):
    a, b = _inputs()[case]
    want = op(a, b)
    # A 0-dim CPU tensor stays on the host, as models pass it.
    db = b if case == "cpu_scalar" else b.to("neuron")
    got = op(a.to("neuron"), db)
    assert got.device.type == "neuron"
    assert got.dtype == want.dtype and got.shape == want.shape
    assert got.stride() == want.stride()
    torch.testing.assert_close(got.cpu(), want, rtol=0, atol=0)


@pytest.mark.parametrize("case", ["contiguous", "transposed", "channels_last", "int_float"])
@pytest.mark.parametrize("op", [torch.neg, torch.exp, torch.sigmoid, torch.abs])
def test_unary_outputs_match_cpu(case, op):
    a = _inputs()[case][0]
    # exp / sigmoid of an integer input: the default dtype, as on CPU.
    want = op(a)
    got = op(a.to("neuron"))
    assert got.dtype == want.dtype and got.stride() == want.stride()
    torch.testing.assert_close(got.cpu(), want, rtol=1e-6, atol=1e-6)


def test_out_and_inplace_unchanged():
    a, b = torch.randn(4, 5), torch.randn(4, 5)
    da, db = a.to("neuron"), b.to("neuron")
    out = torch.empty(0, device="neuron")
    torch.add(da, db, out=out)
    assert out.shape == (4, 5)
    torch.testing.assert_close(out.cpu(), a + b, rtol=0, atol=0)
    da.mul_(db)
    torch.testing.assert_close(da.cpu(), a * b, rtol=0, atol=0)


def test_functional_builders_borrow_their_operands():
    # An owned operand bumps the TensorImpl's use count, and PyTorch 2.13 then
    # takes the GIL (incref_pyobject / decref_pyobject) twice per op for a
    # tensor only Python holds; the borrowing builders leave the count alone.
    # Order: before, then while binary / float / comparison / unary / unary
    # float builders hold `a`.
    a, b = torch.randn(1, 768, device="neuron"), torch.randn(1, 768, device="neuron")
    counts = torch_neuronx._C._ew_operand_use_counts_for_test(a, b)
    assert len(counts) == 6
    assert counts[1:] == [counts[0]] * 5


def test_inplace_and_param_ops_launch_without_a_second_handle():
    # While launch() runs, the first input's TensorImpl should hold no more
    # references than for `neg` called the same way (a method call, or a
    # function whose argument parser keeps one handle): a copied handle in an
    # in-place wrapper or an owning iterator builder adds one, and PyTorch 2.13
    # then takes the GIL twice per op (see the test above).
    F = torch.nn.functional
    probe = torch_neuronx._C._ew_launch_use_count_probe_for_test
    a = torch.randn(4, 8, device="neuron")
    b = torch.rand(4, 8, device="neuron") + 1
    methods = {
        "gt_": lambda: a.clone().gt_(0.5),
        "div_ floor": lambda: a.clone().div_(b, rounding_mode="floor"),
        "clamp": lambda: a.clamp(-0.5, 0.5),
        "clamp_": lambda: a.clone().clamp_(-0.5, 0.5),
        "clamp_ tensor": lambda: a.clone().clamp_(min=b * -1, max=b),
        "relu_": lambda: a.clone().relu_(),
        "pow_ scalar": lambda: a.clone().pow_(2),
        "pow_ tensor": lambda: a.clone().abs_().pow_(b),
    }
    functions = {
        "leaky_relu_": lambda: F.leaky_relu_(a.clone(), 0.1),
        "hardtanh_": lambda: F.hardtanh_(a.clone()),
        "elu": lambda: F.elu(a),
        "elu_": lambda: F.elu_(a.clone()),
        "gelu": lambda: F.gelu(a, approximate="tanh"),
        "gelu_": lambda: torch._C._nn.gelu_(a.clone()),
    }
    probe(True)
    try:
        counts, expected = {}, {}
        for base, calls in ((lambda: a.neg(), methods), (lambda: torch.neg(a), functions)):
            base()
            held = probe(True)
            assert held >= 1
            for name, fn in calls.items():
                fn()
                counts[name], expected[name] = probe(True), held
    finally:
        probe(False)
    assert counts == expected
