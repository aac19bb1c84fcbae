"""The kernels' CPU level (libtrn/src/runtime/cpu_level.c): what is reported,
the TORCH_NEURONX_CPU_CAPABILITY override and its refusals, and the same
results from every level this build holds (development builds: avx2 and
native; wheels: avx2 and avx512) on a few OpInfo op families."""

import importlib.util
import os
import subprocess
import sys

import torch

import torch_neuronx
from torch_neuronx import _C

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_spec = importlib.util.spec_from_file_location(
    "_conformance_exclusions", os.path.join(ROOT, "tests", "conformance", "exclusions.py")
)
_exclusions = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_exclusions)
TOLERANCES = _exclusions.TOLERANCES  # the conformance suite's per-op tolerances


def _run(code_or_args, level, **kw):
    env = dict(os.environ, TORCH_NEURONX_CPU_CAPABILITY=level)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [ROOT, os.environ.get("PYTHONPATH")]))
    args = code_or_args if isinstance(code_or_args, list) else ["-c", code_or_args]
    return subprocess.run(
        [sys.executable, *args], env=env, capture_output=True, text=True, timeout=600, **kw
    )


def _runnable_levels():
    return [name for name in torch_neuronx.cpu_capabilities() if _supported(name)]


def _supported(name):
    # What libtrn itself decides, seen through a forced choice.
    r = _run("import torch_neuronx; print(torch_neuronx.cpu_capability())", name)
    return r.returncode == 0 and r.stdout.strip() == name


def test_reported_level_is_built_and_best():
    levels = torch_neuronx.cpu_capabilities()
    assert levels[0] == "avx2", levels  # every build holds the baseline first
    assert torch_neuronx.cpu_capability() in levels
    if "TORCH_NEURONX_CPU_CAPABILITY" not in os.environ:
        # Automatic: the last built level this CPU runs.
        assert torch_neuronx.cpu_capability() == _runnable_levels()[-1]
    assert _C._cpu_level_error() == ""


def test_forced_baseline_runs_and_is_reported():
    code = (
        "import torch, torch_neuronx\n"
        "x = torch.arange(6.0, device='neuron')\n"
        "print(torch_neuronx.cpu_capability(), (x * 2).sum().item())\n"
    )
    r = _run(code, "avx2")
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["avx2", "30.0"]
    r = _run(["-m", "torch_neuronx.cli.neuron_ls"], "avx2")
    assert r.returncode == 0, r.stderr
    assert f"cpu kernels: avx2 (built: {', '.join(torch_neuronx.cpu_capabilities())})" in r.stdout


def test_unknown_level_is_refused_with_a_clear_error():
    code = (
        "import torch, torch_neuronx\n"
        "for f in (torch_neuronx.cpu_capability, lambda: torch.ones(2, device='neuron')):\n"
        "    try:\n"
        "        f()\n"
        "    except RuntimeError as e:\n"
        "        print('refused:', e)\n"
    )
    r = _run(code, "amx")
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert len(lines) == 2, r.stdout
    built = ", ".join(torch_neuronx.cpu_capabilities())
    for line in lines:
        assert "TORCH_NEURONX_CPU_CAPABILITY='amx' is not a CPU level" in line, line
        assert f"(built: {built})" in line, line
    r = _run(["-m", "torch_neuronx.cli.neuron_ls"], "amx")
    assert "cpu kernels refused: TORCH_NEURONX_CPU_CAPABILITY='amx'" in r.stdout, r.stdout


def test_level_the_cpu_lacks_is_refused():
    # avx512 on a CPU without it; on a CPU with it, a level that is built and
    # runs is accepted: either way the answer matches libtrn's CPUID check.
    code = (
        "import torch_neuronx\n"
        "try:\n"
        "    print('chosen', torch_neuronx.cpu_capability())\n"
        "except RuntimeError as e:\n"
        "    print('refused', e)\n"
    )
    r = _run(code, "avx512")
    assert r.returncode == 0, r.stderr
    with open("/proc/cpuinfo") as f:
        flags = next(line for line in f if line.startswith("flags")).split()
    has_v4 = all(f in flags for f in ("avx512f", "avx512bw", "avx512cd", "avx512dq", "avx512vl"))
    if "avx512" not in torch_neuronx.cpu_capabilities():
        assert r.stdout.startswith("refused TORCH_NEURONX_CPU_CAPABILITY='avx512' is not"), r.stdout
    elif has_v4:
        assert r.stdout.strip() == "chosen avx512", r.stdout
    else:
        assert "this CPU lacks the instructions" in r.stdout, r.stdout


def test_every_level_gives_the_same_results(tmp_path):
    levels = _runnable_levels()
    assert len(levels) >= 2, levels  # development builds hold avx2 and native
    runs = {}
    for level in levels:
        out = tmp_path / f"{level}.pt"
        r = _run([os.path.join(ROOT, "tests", "_cpu_level_worker.py"), str(out)], level)
        assert r.returncode == 0, r.stderr[-4000:]
        runs[level] = torch.load(out, weights_only=False)
        assert runs[level]["level"] == level
    base = runs[levels[0]]["results"]
    assert len(base) > 100, len(base)
    for level in levels:
        results = runs[level]["results"]
        assert results.keys() == base.keys()
        for key, (got, expected, name, dtype) in results.items():
            # Against PyTorch CPU with the conformance suite's tolerance, and
            # against the baseline level with the same (vector width may
            # change a reduction's order: not bit equality).
            tol = TOLERANCES.get((name, "", dtype))
            tol = {} if tol is None else {"atol": tol[0], "rtol": tol[1]}
            torch.testing.assert_close(
                got, expected, equal_nan=True, msg=lambda m: f"{level} {key}: {m}", **tol
            )
            torch.testing.assert_close(
                got,
                base[key][0],
                equal_nan=True,
                msg=lambda m: f"{level} vs {levels[0]} {key}: {m}",
                **tol,
            )
