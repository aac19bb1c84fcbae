"""torch.compile(backend="neuron"): every graph's C compile (schedule,
render, gcc) runs on the compile threads. The backend returns as soon as the
graphs are lowered; a graph waits for its compile at its first call, which is
where a failed C compile raises (or, under fallback execution, runs the graph
eagerly with a warning). Metrics reads finish pending compiles first; caches
never keep a graph whose compile failed; reset and exit with compiles in
flight are safe."""

import os
import subprocess
import sys
import threading

import pytest
import torch
import torch._dynamo

import torch_neuronx
from torch_neuronx._compile import backend as B
from torch_neuronx._compile import jobs as J

DEV = "neuron"


@pytest.fixture(autouse=True)
def _fresh(tmp_path, monkeypatch):
    monkeypatch.setenv("TORCH_NEURONX_NEFF_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("TORCH_NEURONX_NEFF_DISABLE_CACHE", raising=False)
    monkeypatch.delenv("TORCH_NEURONX_COMPILE_THREADS", raising=False)
    torch._dynamo.reset()
    J._memory_cache.clear()
    torch.neuron.reset_dynamo_metrics()
    yield
    J.finish_pending(raise_errors=False)
    torch._dynamo.reset()


@pytest.fixture
def gate(monkeypatch):
    """Holds every C compile on the compile thread until the test sets it."""
    opened = threading.Event()
    original = J._CompileJob.compile

    def compile(self):
        if threading.current_thread() is not threading.main_thread():
            assert opened.wait(120), "the test never opened the gate"
        return original(self)

    monkeypatch.setattr(J._CompileJob, "compile", compile)
    return opened


def _x(*shape, seed=0):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed))


def f(x, w):
    return (torch.relu(x @ w) * 1.5 + torch.sigmoid(w).sum(),)


def _dynamo_graph(fn, *args):
    """The Dynamo graph of fn and its example inputs (as our backend gets them)."""
    got = []

    def grab(gm, example_inputs):
        got.append((gm, example_inputs))
        return gm.forward

    torch.compile(fn, backend=grab)(*args)
    torch._dynamo.reset()
    return got[0]


def _aot_dir(tmp_path):
    d = tmp_path / "cache" / "aot"
    return sorted(d.glob("*.bin")) if d.is_dir() else []


def test_backend_returns_before_the_c_compile_and_first_call_waits(gate, tmp_path):
    x, w = _x(5, 4), _x(4, 3, seed=1)
    compiled = B.neuron_backend(*_dynamo_graph(f, x.to(DEV), w.to(DEV)))
    # Returned while the compile thread is still held: nothing ran the C compiler here.
    (job,) = J._pending
    assert job.graph.program is None and not job.done
    assert _aot_dir(tmp_path) == []  # the warm entry waits for the compile
    gate.set()
    (out,) = compiled(x.to(DEV), w.to(DEV))
    assert job.graph.program is not None and not J._pending
    torch.testing.assert_close(out.cpu(), f(x, w)[0], atol=1e-5, rtol=1e-5)
    assert len(_aot_dir(tmp_path)) == 1
    (again,) = compiled(x.to(DEV), w.to(DEV))  # the ready path
    torch.testing.assert_close(again.cpu(), out.cpu(), atol=0, rtol=0)


def test_training_forward_and_backward_compile_on_the_thread(gate):
    x, w = _x(5, 4), _x(4, 3, seed=1)
    wd = w.to(DEV).requires_grad_()
    compiled = B.neuron_backend(*_dynamo_graph(f, x.to(DEV), wd))
    # Forward and backward (AOTAutograd compiles it eagerly for the warm cache).
    assert len(J._pending) == 2 and all(j.graph.program is None for j in J._pending)
    gate.set()
    (out,) = compiled(x.to(DEV), wd)
    out.sum().backward()
    assert not J._pending
    w.requires_grad_()
    f(x, w)[0].sum().backward()
    torch.testing.assert_close(out.detach().cpu(), f(x, w)[0].detach(), atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(wd.grad.cpu(), w.grad, atol=1e-5, rtol=1e-5)
    m = torch.neuron.get_dynamo_metrics()
    assert m["graphs"] == 2 and m["compiles"] == 2 and m["fallback_graphs"] == 0, m
    # The first calls waited for the held compiles, and say so.
    assert m["compile_wait_seconds"] > 0, m


def test_metrics_complete_while_compiles_pending(gate):
    x, w = _x(5, 4), _x(4, 3, seed=1)
    before = torch_neuronx.metrics.get_compilation_metrics()
    compiled = B.neuron_backend(*_dynamo_graph(f, x.to(DEV), w.to(DEV)))
    assert J._pending
    gate.set()
    # Never called yet: the read finishes the compile and counts it.
    m = torch.neuron.get_dynamo_metrics()
    assert m["graphs"] == 1 and m["compiles"] == 1 and m["kernels"] >= 1 and not J._pending, m
    after = torch_neuronx.metrics.get_compilation_metrics()
    assert after["compiles"] - before["compiles"] == 1
    compiled(x.to(DEV), w.to(DEV))
    assert torch.neuron.get_dynamo_metrics()["compiles"] == 1  # nothing compiled at the call


def test_c_compile_failure_raises_at_first_call_and_is_not_cached(tmp_path, monkeypatch):
    monkeypatch.setenv("CC", "false")  # the C compiler fails
    x = _x(6)
    fn = torch.compile(lambda t: (t * 3 + 1).sum(), backend="neuron")
    for _ in range(2):  # every call of the graph names it
        with pytest.raises(B.NeuronCompileError, match=r"graph graph_\d+_inf did not compile"):
            fn(x.to(DEV))
    assert not J._memory_cache and not J._pending and _aot_dir(tmp_path) == []
    m = torch.neuron.get_dynamo_metrics()
    assert m["compiles"] == 0 and m["warm_unsaved"] == 1, m


def test_c_compile_failure_falls_back_eagerly(tmp_path, monkeypatch):
    monkeypatch.setenv("CC", "false")
    x = _x(6)
    fn = torch.compile(
        lambda t: (t * 3 + 1).sum(), backend="neuron", options={"fallback_execution": True}
    )
    with pytest.warns(UserWarning, match="did not compile.*fallback_execution"):
        out = fn(x.to(DEV))
    torch.testing.assert_close(out.cpu(), (x * 3 + 1).sum())
    torch.testing.assert_close(fn(x.to(DEV)).cpu(), (x * 3 + 1).sum())
    m = torch.neuron.get_dynamo_metrics()
    assert m["fallback_graphs"] == 1 and m["compiles"] == 0 and m["warm_unsaved"] == 1, m
    assert not J._memory_cache and _aot_dir(tmp_path) == []


def test_in_place_retry_runs_at_first_call(monkeypatch):
    # The schedule refusing an in-place store (NotImplementedError from the C
    # compile) makes the graph lower again with eager copies; simulated here
    # for the first compile of a graph with stores.
    refused = []
    original = J._CompileJob.compile

    def compile(self):
        if self.lowered.stores and not refused:
            refused.append(self.name)
            raise NotImplementedError("store overwrites an input a later step reads (simulated)")
        return original(self)

    monkeypatch.setattr(J._CompileJob, "compile", compile)

    def ema(p, m, g):
        with torch.no_grad():
            m.mul_(0.9).add_(g)
            p.sub_(0.1 * m)
        return p.sum()

    p, m, g = _x(4, 8), _x(4, 8, seed=1), _x(4, 8, seed=2)
    dp, dm = p.to(DEV), m.to(DEV)
    out = torch.compile(ema, backend="neuron")(dp, dm, g.to(DEV))
    ref = ema(p, m, g)
    assert refused and not J._pending
    torch.testing.assert_close(out.cpu(), ref)
    torch.testing.assert_close(dp.cpu(), p)
    torch.testing.assert_close(dm.cpu(), m)
    metrics = torch.neuron.get_dynamo_metrics()
    assert metrics["host_steps"] >= 2 and metrics["compiles"] == 1, (
        metrics
    )  # the copies run eagerly


def test_dynamo_reset_with_compile_in_flight(gate):
    x, w = _x(5, 4), _x(4, 3, seed=1)
    compiled = B.neuron_backend(*_dynamo_graph(f, x.to(DEV), w.to(DEV)))
    torch._dynamo.reset()
    gate.set()
    (out,) = compiled(x.to(DEV), w.to(DEV))
    torch.testing.assert_close(out.cpu(), f(x, w)[0], atol=1e-5, rtol=1e-5)


_EXIT = r"""
import torch, torch_neuronx
import torch._dynamo
from torch_neuronx._compile import backend as B
from torch_neuronx._compile import jobs as J
def make(c):
    def f(x, w):
        return (torch.tanh(x @ w) - c,)
    return f
g = torch.Generator().manual_seed(0)
args = [torch.randn(6, 5, generator=g).to("neuron"), torch.randn(5, 7, generator=g).to("neuron")]
for i in range(3):  # compiled, never called: running or queued at exit
    B.neuron_backend(torch.fx.symbolic_trace(make(i + 2)), args)
torch._dynamo.reset()
print("pending", len(J._pending))
"""


def test_exit_with_compiles_in_flight(tmp_path):
    env = dict(
        os.environ,
        TORCH_NEURONX_NEFF_CACHE_DIR=str(tmp_path / "cache"),
        TORCH_NEURONX_COMPILE_THREADS="1",
    )
    env.pop("TORCH_NEURONX_NEFF_DISABLE_CACHE", None)
    r = subprocess.run(
        [sys.executable, "-c", _EXIT], env=env, capture_output=True, text=True, timeout=300
    )
    assert r.returncode == 0 and "Traceback" not in r.stderr and "Warning" not in r.stderr, (
        r.stderr[-2000:]
    )
    assert r.stdout.startswith("pending 3"), r.stdout
    # Compiles running at exit finished (complete, verified cache entries);
    # queued ones were cancelled.
    objects = sorted((tmp_path / "cache").glob("*.so"))
    assert 1 <= len(objects) <= 3
    assert all(o.with_suffix(".mac").is_file() for o in objects)
