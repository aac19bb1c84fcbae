"""Changing shapes under the default ``torch.compile`` (issue 21, item 1).

With ``dynamic=None`` Dynamo makes a dimension symbolic once it changes; the
neuron backend compiles one static graph per shape instead, as TorchNeuron
documents. Explicit ``dynamic=True`` and ``mark_dynamic`` keep the clear
error; ``fail_on_recompile`` and the recompile limit behave as Dynamo's."""

import warnings

import pytest
import torch
import torch._dynamo

import torch_neuronx  # noqa: F401
from torch_neuronx._compile import config, jobs
from torch_neuronx._compile.backend import NeuronCompileError


@pytest.fixture(autouse=True)
def _fresh(tmp_path, monkeypatch):
    monkeypatch.setenv(
        "TORCH_NEURONX_NEFF_CACHE_DIR", str(tmp_path / "cache")
    )  # compiles are counted
    monkeypatch.delenv("TORCH_NEURONX_NEFF_DISABLE_CACHE", raising=False)
    torch._dynamo.reset()
    jobs._memory_cache.clear()
    torch.neuron.reset_dynamo_metrics()
    yield
    torch._dynamo.reset()


def _f(x):
    return torch.tanh(x) * 2 + x.sum(0)


def test_new_shapes_compile_static_graphs_and_match_eager():
    g = torch.compile(_f, backend="neuron")
    for n in (8, 8, 16, 16, 8):
        x = torch.randn(n, 3)
        torch.testing.assert_close(g(x.to("neuron")).cpu(), _f(x), rtol=1e-5, atol=1e-5)
    m = torch.neuron.get_dynamo_metrics()
    # Two shapes, two C compiles: the 8 met again through the symbolic graph
    # is the same static program as the first (a cache hit).
    assert m["compiles"] == 2 and m["shape_graphs"] == 2, m


def test_training_with_a_smaller_last_batch():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 2))
    ref = [p.detach().clone() for p in model.parameters()]
    model = model.to("neuron")
    step = torch.compile(lambda x: model(x).square().mean(), backend="neuron")
    for n in (6, 6, 5, 3):
        x = torch.randn(n, 4)
        loss = step(x.to("neuron"))
        loss.backward()
        w1, b1, w2, b2 = ref
        h = torch.relu(x @ w1.T + b1)
        expect = (h @ w2.T + b2).square().mean()
        torch.testing.assert_close(loss.detach().cpu(), expect, rtol=1e-5, atol=1e-6)
    assert model[0].weight.grad is not None


def test_explicit_dynamic_true_is_refused():
    g = torch.compile(_f, backend="neuron", dynamic=True)
    with pytest.raises(Exception, match="does not support dynamic=True"):
        g(torch.randn(4, 3, device="neuron"))


def test_mark_dynamic_is_refused():
    x = torch.randn(4, 3, device="neuron")
    torch._dynamo.mark_dynamic(x, 0)
    g = torch.compile(_f, backend="neuron")
    with pytest.raises(Exception, match="does not support dynamic=True") as e:
        g(x)
    assert isinstance(getattr(e.value, "inner_exception", e.value), NeuronCompileError)


def test_fail_on_recompile_stance():
    g = torch.compile(_f, backend="neuron")
    g(torch.randn(8, 3, device="neuron"))
    g(torch.randn(16, 3, device="neuron"))  # symbolic graph, static graph for 16
    with torch.compiler.set_stance("fail_on_recompile"):
        g(torch.randn(16, 3, device="neuron"))  # known shape: fine
        with pytest.raises(Exception, match="fail_on_recompile"):
            g(torch.randn(24, 3, device="neuron"))


def test_recompile_limit_warns_and_runs_eagerly():
    g = torch.compile(_f, backend="neuron")
    with torch._dynamo.config.patch(recompile_limit=3), warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        for n in range(2, 9):
            x = torch.randn(n, 3)
            torch.testing.assert_close(g(x.to("neuron")).cpu(), _f(x), rtol=1e-5, atol=1e-5)
    assert any("recompile_limit" in str(x.message) for x in w)
    assert torch.neuron.get_dynamo_metrics()["shape_graphs"] <= 3
