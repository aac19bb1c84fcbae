"""Shared helpers for the Python test suite.

The backend is autoloaded by ``import torch``; tests that need a fresh process
(environment variables read once, autoload, fork) use ``run_python``.
"""

import os
import subprocess
import sys
import textwrap

import pytest
import torch

import torch_neuronx  # noqa: F401  (explicit, in case autoload is disabled)

# Generated C must compile warning-free: the suite compiles every graph with
# warnings as errors (users' compiles keep warnings in the compile log).
# Child processes inherit it.
os.environ.setdefault("TORCH_NEURONX_CC_EXTRA_FLAGS", "-Wall -Wextra -Werror")


def run_python(code: str, env: dict | None = None, timeout: int = 120):
    """Runs ``code`` in a fresh interpreter; returns the CompletedProcess."""
    full_env = dict(os.environ)
    full_env.update(env or {})
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        env=full_env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


@pytest.fixture
def python():
    return run_python


@pytest.fixture
def fresh_compile_cache(tmp_path, monkeypatch):
    """torch.compile from scratch: a cache directory of the test's own (the
    disk cache on), no Dynamo or in-memory graphs and zeroed metrics, so what
    the test compiles is lowered and compiled, not loaded."""
    from torch_neuronx._compile import jobs

    monkeypatch.setenv("TORCH_NEURONX_NEFF_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("TORCH_NEURONX_NEFF_DISABLE_CACHE", raising=False)
    torch._dynamo.reset()
    jobs._memory_cache.clear()
    torch.neuron.reset_dynamo_metrics()
    yield
    torch._dynamo.reset()


@pytest.fixture(autouse=True)
def _clean_tracking():
    torch_neuronx.clear_op_tracking()
    yield
