"""The executed-op log (torch_neuronx.get_executed_ops): one entry per native
invocation, under the op's name, however the log interns the names (kernels
pass string literals, looked up by address in a 64-slot table; more distinct
names than slots must still each log their own name)."""

import torch

import torch_neuronx

UNARY = [
    "abs", "acos", "asin", "atan", "ceil", "cos", "cosh", "erf", "exp", "expm1", "floor",
    "frac", "log", "log10", "log1p", "log2", "neg", "reciprocal", "round", "rsqrt", "sigmoid",
    "sign", "sin", "sinh", "sqrt", "tan", "tanh", "trunc",
]  # fmt: skip
BINARY = ["add", "sub", "mul", "div", "maximum", "minimum", "atan2", "pow", "eq", "lt", "gt"]


def _run_all(x, y):
    for name in UNARY:
        getattr(torch, name)(x)
    for name in BINARY:
        getattr(torch, name)(x, y)
    for name in UNARY:
        getattr(torch.Tensor, name + "_")(x.clone())


def test_executed_log_names_each_invocation():
    x = (torch.rand(3, 5) * 0.5 + 0.25).to("neuron")
    y = (torch.rand(3, 5) * 0.5 + 0.25).to("neuron")
    torch_neuronx.eager_fusion.flush()
    torch.neuron.synchronize()
    torch_neuronx.clear_op_tracking()
    _run_all(x, y)
    torch.neuron.synchronize()
    first = torch_neuronx.get_executed_ops()
    # Each op logged under its own name, in call order.
    for name in UNARY + BINARY:
        assert f"aten::{name}" in first, name
    for name in UNARY[1:]:  # abs_ logs as aten::abs (it runs abs's kernel)
        assert f"aten::{name}_" in first, name
    assert first.index("aten::acos") < first.index("aten::add") < first.index("aten::acos_")
    # Over 64 distinct names: slots shared by several names; the log is the
    # same on every later round.
    assert len(set(first)) > 64
    for _ in range(3):
        torch_neuronx.clear_op_tracking()
        _run_all(x, y)
        torch.neuron.synchronize()
        assert torch_neuronx.get_executed_ops() == first
