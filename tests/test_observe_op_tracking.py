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


# Every native op takes the log's lock with the GIL released, so another
# thread may hold it at a fork: the runtime's fork handlers hold it across
# fork (a leaf lock, trn_fork_add_leaf_lock), or the child's first op waited
# on a lock no thread of its own would release. (Found as test_weight_cache's
# forked-children test hanging a child about 1 run in 3, on main too.)
_FORK_WHILE_HELD = """
import os, time
import torch
import torch_neuronx
from torch_neuronx import _C
x = torch.ones(4, device="neuron")
(x + x).cpu()
bad = []
for _ in range(4):
    _C._op_log_hold_for_test(100)  # another thread holds the log's lock now
    pid = os.fork()
    if pid == 0:
        torch_neuronx.clear_op_tracking()
        ok = torch.equal((x + x).cpu(), torch.full((4,), 2.0))
        ok = ok and "aten::add" in torch_neuronx.get_executed_ops()
        os._exit(0 if ok else 3)
    deadline, status = time.time() + 30, "hung"
    while time.time() < deadline:
        done, st = os.waitpid(pid, os.WNOHANG)
        if done:
            status = st
            break
        time.sleep(0.01)
    if status == "hung":
        os.kill(pid, 9)
        os.waitpid(pid, 0)
    if status != 0:
        bad.append(status)
print("bad", bad)
"""


def test_child_forked_while_another_thread_holds_the_log_runs_ops():
    import subprocess
    import sys

    out = subprocess.run(
        [sys.executable, "-c", _FORK_WHILE_HELD], capture_output=True, text=True, timeout=300
    )
    assert out.returncode == 0, out.stderr
    assert "bad []" in out.stdout, out.stdout + out.stderr
