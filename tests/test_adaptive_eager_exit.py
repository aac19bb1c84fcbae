"""Adaptive Eager's compile thread and interpreter exit.

The compile thread asks Python (torch_neuronx.eager_fusion._compile_settings)
for torch.compile's settings when the first fused group compiles. A thread
that takes the GIL while the interpreter finalizes is ended inside pybind11's
frames and the process aborts ("Fatal Python error: PyThreadState_Get"), which
happened when a program raised while its first groups were compiling
(test_evaluate's planted failure, under load). From Python's atexit on the
thread no longer asks: its groups stay unfused.
"""

import subprocess
import sys

PROGRAM = """
import torch, torch_neuronx
from torch_neuronx import _C, eager_fusion
{before}
x = torch.randn(4096, device="neuron")
outs = [((x * 2.0 + 1.0) * x).sum().item() for _ in range(6)]
assert eager_fusion.wait_for_compiles(60.0)
st = eager_fusion.stats()
ref = ((x.cpu() * 2.0 + 1.0) * x.cpu()).sum().item()
assert all(abs(o - ref) <= 1e-3 * abs(ref) for o in outs), (outs, ref)
print(st["ready"], st["failed"])
"""


def _run(before):
    r = subprocess.run(
        [sys.executable, "-c", PROGRAM.format(before=before)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert r.returncode == 0, r.stdout + r.stderr
    return r


def test_no_python_from_the_compile_thread_once_exit_began():
    """After atexit's hook (called directly here, as atexit would) the first
    compile gets no settings: the pattern is marked failed without a warning
    and its ops run unfused, with the right results."""
    r = _run("_C._eager_fusion_python_exiting()")
    ready, failed = map(int, r.stdout.split())
    assert ready == 0 and failed >= 1, r.stdout
    assert "compile" not in r.stderr, r.stderr


def test_groups_compile_normally_before_exit():
    r = _run("")
    ready, failed = map(int, r.stdout.split())
    assert ready >= 1 and failed == 0, r.stdout


def test_exit_while_the_first_groups_compile():
    """A program that ends right after its first groups were handed to the
    compile thread exits cleanly (several times: the race is timing's)."""
    code = (
        "import torch, torch_neuronx\n"
        "x = torch.randn(4096, device='neuron')\n"
        "for _ in range(3): ((x * 2.0 + 1.0) * x).sum().item()\n"
        "raise SystemExit(3)\n"
    )
    for _ in range(5):
        r = subprocess.run(
            [sys.executable, "-c", code], capture_output=True, text=True, timeout=120
        )
        assert r.returncode == 3, r.stderr
        assert "Fatal Python error" not in r.stderr
