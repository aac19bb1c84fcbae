"""torch.compile(backend="neuron"): registration and TorchNeuron's documented
compile behaviours (dynamic, mode, recompiles, graph breaks, fullgraph,
unsupported ops and fallback, CPU autocopy, artifacts, metrics, caching)."""

import json
import os
import subprocess
import sys
import warnings

import pytest
import torch
import torch._dynamo

import torch_neuronx  # noqa: F401
from torch_neuronx._compile import jobs as J

DEV = "neuron"


@pytest.fixture(autouse=True)
def _fresh(tmp_path_factory, monkeypatch):
    # One disk cache for the module (warm after first use); in-memory graphs
    # and Dynamo's caches reset per test so each test compiles what it checks.
    cache = tmp_path_factory.getbasetemp() / "neuron-compile-cache"
    monkeypatch.setenv("TORCH_NEURONX_NEFF_CACHE_DIR", str(cache))
    torch._dynamo.reset()
    torch.neuron.reset_dynamo_metrics()
    yield
    torch._dynamo.reset()


def _x(*shape, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=g)


def f_pointwise(x, y):
    return torch.relu(x * 2 + y).sum(dim=1) + torch.tanh(x).mean()


def test_backend_registered_and_correct():
    assert "neuron" in torch._dynamo.list_backends()
    x, y = _x(8, 16), _x(16, seed=1)
    out = torch.compile(f_pointwise, backend="neuron")(x.to(DEV), y.to(DEV))
    assert out.device.type == "neuron"
    torch.testing.assert_close(out.cpu(), f_pointwise(x, y), rtol=1e-5, atol=1e-5)
    m = torch.neuron.get_dynamo_metrics()
    assert m["graphs"] == 1 and m["kernels"] >= 1 and m["fallback_graphs"] == 0


def test_bare_compile_on_neuron_tensors_uses_neuron():
    x, y = _x(4, 8), _x(8, seed=1)
    out = torch.compile(f_pointwise)(x.to(DEV), y.to(DEV))  # no KeyError from Inductor
    torch.testing.assert_close(out.cpu(), f_pointwise(x, y), rtol=1e-5, atol=1e-5)
    assert torch.neuron.get_dynamo_metrics()["graphs"] == 1


def test_set_default_backend_neuron():
    prev = torch.compiler.get_default_backend()
    try:
        torch.compiler.set_default_backend("neuron")
        x = _x(3, 5)
        out = torch.compile(lambda t: torch.exp(t) - 1)(x.to(DEV))
        torch.testing.assert_close(out.cpu(), torch.exp(x) - 1)
        assert torch.neuron.get_dynamo_metrics()["graphs"] == 1
    finally:
        torch.compiler.set_default_backend(prev)


def test_dynamic_true_rejected():
    with pytest.raises(Exception, match="dynamic=True"):
        torch.compile(lambda t: t + 1, backend="neuron", dynamic=True)(torch.ones(3, device=DEV))


def test_mode_warns_and_uses_default():
    with pytest.warns(UserWarning, match="mode='max-autotune' is not supported"):
        out = torch.compile(lambda t: t * 3, backend="neuron", mode="max-autotune")(
            torch.ones(3, device=DEV)
        )
    assert out.cpu().tolist() == [3.0, 3.0, 3.0]


def test_new_shape_recompiles():
    fn = torch.compile(lambda t: torch.sigmoid(t).sum(0), backend="neuron", dynamic=False)
    for n in (4, 6):
        x = _x(n, 3)
        torch.testing.assert_close(fn(x.to(DEV)).cpu(), torch.sigmoid(x).sum(0))
    assert torch.neuron.get_dynamo_metrics()["graphs"] == 2


def test_graph_break_and_fullgraph():
    def brk(t):
        a = torch.cos(t) * 2
        torch._dynamo.graph_break()
        return a + torch.sin(t)

    x = _x(5)
    out = torch.compile(brk, backend="neuron")(x.to(DEV))
    torch.testing.assert_close(out.cpu(), torch.cos(x) * 2 + torch.sin(x))
    assert torch.neuron.get_dynamo_metrics()["graphs"] == 2
    out = torch.compile(
        lambda t: torch.cos(t) * 2 + torch.sin(t), backend="neuron", fullgraph=True
    )(x.to(DEV))
    torch.testing.assert_close(out.cpu(), torch.cos(x) * 2 + torch.sin(x))


def f_fft(t):
    return torch.fft.rfft(t * 2).abs()


def test_unsupported_op_error_names_it():
    with pytest.raises(Exception, match="_fft_r2c") as info:
        torch.compile(f_fft, backend="neuron")(torch.ones(8, device=DEV))
    assert "fallback_execution" in str(info.value)


def test_fallback_execution_option_and_env(monkeypatch):
    x = _x(8)
    with pytest.warns(UserWarning, match="fallback_execution"):
        out = torch.compile(f_fft, backend="neuron", options={"fallback_execution": True})(
            x.to(DEV)
        )
    torch.testing.assert_close(out.cpu(), f_fft(x), rtol=1e-5, atol=1e-5)
    assert torch.neuron.get_dynamo_metrics()["fallback_graphs"] == 1
    torch._dynamo.reset()
    monkeypatch.setenv("TORCH_NEURONX_DISABLE_FALLBACK_EXECUTION", "0")
    with pytest.warns(UserWarning, match="fallback_execution"):
        out = torch.compile(f_fft, backend="neuron")(x.to(DEV))
    torch.testing.assert_close(out.cpu(), f_fft(x), rtol=1e-5, atol=1e-5)


def test_cpu_inputs_autocopied_and_opt_out(monkeypatch):
    # A graph traced on CPU tensors runs on the device: inputs are copied.
    x = _x(4, 4)
    w = torch.ones(4, 4)
    out = torch.compile(lambda a, b: a @ b + 1, backend="neuron")(x, w)
    assert out.device.type == "neuron"
    torch.testing.assert_close(out.cpu(), x @ w + 1)
    assert torch.neuron.get_dynamo_metrics()["graphs"] == 1
    torch._dynamo.reset()
    monkeypatch.setenv("TORCH_NEURONX_DYNAMO_DISABLE_CPU_AUTOCOPY", "1")
    with pytest.raises(Exception, match="CPU tensor"):
        torch.compile(lambda a, b: a @ b + 1, backend="neuron")(x, w)


def test_debug_artifacts(tmp_path, monkeypatch):
    monkeypatch.setenv("TORCH_NEURONX_PRESERVE_COMPILATION_ARTIFACTS", "1")
    monkeypatch.setenv("TORCH_NEURONX_DEBUG_DIR", str(tmp_path))
    monkeypatch.setenv("TORCH_NEURONX_NEFF_DISABLE_CACHE", "1")  # force the C compiler to run
    torch.compile(f_pointwise, backend="neuron")(_x(4, 8).to(DEV), _x(8).to(DEV))
    names = sorted(p.name for p in tmp_path.iterdir())
    stem = names[0].split(".")[0]
    for suffix in (".fx.txt", ".c", ".cmd", ".log"):
        assert stem + suffix in names, names
    src = (tmp_path / f"{stem}.c").read_text()
    assert "// kernel 0:" in src and "fuses:" in src and "trn_sc_relu_f" in src
    assert '#include "trn/kernel_abi.h"' in src and '#include "trn/scalar.h"' in src
    assert src.count("#include") == 2
    assert "-O2 -march=native -shared -fPIC" in (tmp_path / f"{stem}.cmd").read_text()
    assert "exit status 0" in (tmp_path / f"{stem}.log").read_text()


def test_metrics_reset():
    torch.compile(lambda t: t - 1, backend="neuron")(torch.ones(2, device=DEV))
    assert torch.neuron.get_dynamo_metrics()["graphs"] == 1
    torch.neuron.reset_dynamo_metrics()
    assert torch.neuron.get_dynamo_metrics()["graphs"] == 0
    assert torch_neuronx.get_dynamo_metrics() == torch.neuron.get_dynamo_metrics()


def test_disable_cache_writes_nothing(tmp_path, monkeypatch):
    monkeypatch.setenv("TORCH_NEURONX_NEFF_CACHE_DIR", str(tmp_path / "c"))
    monkeypatch.setenv("TORCH_NEURONX_NEFF_DISABLE_CACHE", "1")
    torch.compile(lambda t: t * 5 - 2, backend="neuron")(torch.ones(3, device=DEV))
    assert not (tmp_path / "c").exists()
    assert torch.neuron.get_dynamo_metrics()["compiles"] == 1


@pytest.mark.parametrize("cache", [True, False])
def test_training_compiled_on_worker(tmp_path, monkeypatch, cache):
    # Forward and backward compile on the compile threads (warm cache on: the
    # backward is compiled with the forward; off: lazily, at the first
    # backward); each graph waits for its compile at its first call
    # (tests/test_compile_thread.py holds the thread to show it).
    monkeypatch.setenv("TORCH_NEURONX_NEFF_CACHE_DIR", str(tmp_path / "c"))
    if cache:
        monkeypatch.delenv("TORCH_NEURONX_NEFF_DISABLE_CACHE", raising=False)
    else:
        monkeypatch.setenv("TORCH_NEURONX_NEFF_DISABLE_CACHE", "1")
    torch._dynamo.reset()
    torch.neuron.reset_dynamo_metrics()

    def f(x, w):
        return (torch.relu(x @ w) * 1.5 + torch.sigmoid(w).sum()).sum()

    x, w = _x(5, 4), _x(4, 3, seed=1)
    wd = w.to(DEV).requires_grad_()
    out = torch.compile(f, backend="neuron")(x.to(DEV), wd)
    out.backward()
    assert not J._pending
    w.requires_grad_()
    f(x, w).backward()
    torch.testing.assert_close(out.detach().cpu(), f(x, w).detach(), atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(wd.grad.cpu(), w.grad, atol=1e-5, rtol=1e-5)
    m = torch.neuron.get_dynamo_metrics()
    assert m["lowerings"] == 2 and m["graphs"] == 2 and m["fallback_graphs"] == 0, m


_CHILD = r"""
import json, torch, torch_neuronx
def f(x, y):
    return torch.relu(x @ y + 1).sum(0) * 0.5 - torch.tanh(y).mean()
g = torch.Generator().manual_seed(0)
x, y = torch.randn(8, 6, generator=g), torch.randn(6, 5, generator=g)
out = torch.compile(f, backend="neuron")(x.to("neuron"), y.to("neuron"))
assert torch.allclose(out.cpu(), f(x, y), atol=1e-5)
print(json.dumps({"dynamo": torch.neuron.get_dynamo_metrics(),
                  "device": torch_neuronx.metrics.get_compilation_metrics()}))
"""


def test_second_process_compiles_nothing(tmp_path):
    env = dict(os.environ, TORCH_NEURONX_NEFF_CACHE_DIR=str(tmp_path / "cache"))
    env.pop("TORCH_NEURONX_NEFF_DISABLE_CACHE", None)
    # First run in this process (cold: a fresh cache directory).
    J._memory_cache.clear()
    os.environ["TORCH_NEURONX_NEFF_CACHE_DIR"] = env["TORCH_NEURONX_NEFF_CACHE_DIR"]
    before = torch_neuronx.metrics.get_compilation_metrics()
    exec(compile(_CHILD.replace("print(", "_m = ("), "<first>", "exec"), {})
    first = torch.neuron.get_dynamo_metrics()
    assert first["compiles"] >= 1 and first["disk_cache_hits"] == 0
    # TorchNeuron's metrics API sees the same compiles (device counters).
    after = torch_neuronx.metrics.get_compilation_metrics()
    assert after["compiles"] - before["compiles"] == first["compiles"]
    assert after["compile_cache_misses"] - before["compile_cache_misses"] == first["compiles"]
    assert after["compiled_graph_launches"] > before["compiled_graph_launches"]
    assert after["compile_ns"] > before["compile_ns"]
    assert oct((tmp_path / "cache").stat().st_mode & 0o777) == "0o700"
    env["TORCH_NEURONX_LOG_LEVEL"] = "INFO"
    r = subprocess.run(
        [sys.executable, "-c", _CHILD], env=env, capture_output=True, text=True, timeout=300
    )
    assert r.returncode == 0, r.stderr[-2000:]
    reported = json.loads(r.stdout.strip().splitlines()[-1])
    second, device = reported["dynamo"], reported["device"]
    assert second["compiles"] == 0 and second["disk_cache_hits"] == first["compiles"]
    assert device["compiles"] == 0 and device["compile_cache_hits"] == first["compiles"]
    assert device["compiled_graph_launches"] >= 1
    # Compiles are logged at INFO: one record per graph, naming the cache hit.
    assert r.stderr.count("disk cache hit in") == first["compiles"], r.stderr[-2000:]
