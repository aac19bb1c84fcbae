"""NKI kernels inside torch.compile(backend="neuron") graphs: an ``nki_op``
call between aten ops is one node of the captured graph (no graph break) and
an extern step of the compiled program (torch_neuronx/_compile/lower_nki.py):
the program calls the kernel's compiled entry itself, with no host step.
Results match eager (the same kernel) and CPU float64 references; backward
through register_autograd compiles too; a second process loads the graph
and the kernel from the disk cache. An op whose function does more than
call kernels stays a host step (and still computes the same)."""

import json
import os
import subprocess
import sys

import pytest
import torch

import nki
import nki.language as nl
import torch_neuronx  # noqa: F401
from nki import _runtime
from torch_neuronx import nki_op

from kernels_rmsnorm import Net, rmsnorm_kernel


# A cache of its own: a warm load would skip the lowering under test.
pytestmark = pytest.mark.usefixtures("fresh_compile_cache")


def _net(d=64):
    torch.manual_seed(0)
    return Net(d)


def test_forward_is_one_extern_step_no_host_step():
    net = _net().to("neuron")
    x = torch.randn(256, 64).to("neuron")
    f = torch.compile(net, backend="neuron", fullgraph=True)  # fullgraph: no graph break
    with torch.no_grad():
        y = f(x)
        ref = net(x)
    m = torch.neuron.get_dynamo_metrics()
    assert (
        m["lowerings"] >= 1
        and m["host_steps"] == 0
        and m["extern_kernels"] == 1
        and m["fallback_graphs"] == 0
    ), m
    torch.testing.assert_close(y.cpu(), ref.cpu(), rtol=1e-5, atol=1e-5)
    # Against float64 math on the CPU (the same model with rms_norm).
    cpu = _net().double()
    with torch.no_grad():
        want = cpu(x.cpu().double(), nki_norm=False)
    torch.testing.assert_close(y.cpu().double(), want, rtol=1e-4, atol=1e-4)
    # Later calls run the compiled program again: no new lowering or kernel compile.
    before = dict(_runtime.stats)
    with torch.no_grad():
        y2 = f(x)
    assert torch.equal(y2.cpu(), y.cpu())
    assert _runtime.stats["compiles"] == before["compiles"]
    assert torch.neuron.get_dynamo_metrics()["lowerings"] == m["lowerings"]


def test_backward_through_register_autograd_compiles_without_host_steps():
    net = _net().to("neuron")
    ref_net = _net().to("neuron")
    x = torch.randn(256, 64).to("neuron")

    def step(model, x):
        loss = model(x).square().mean()
        loss.backward()
        return loss.detach()

    loss = torch.compile(step, backend="neuron")(net, x)
    ref = step(ref_net, x)
    m = torch.neuron.get_dynamo_metrics()
    assert (
        m["lowerings"] >= 1
        and m["host_steps"] == 0
        and m["extern_kernels"] >= 1
        and m["fallback_graphs"] == 0
    ), m
    torch.testing.assert_close(loss.cpu(), ref.cpu(), rtol=1e-5, atol=1e-6)
    for p, q in zip(net.parameters(), ref_net.parameters()):
        torch.testing.assert_close(p.grad.cpu(), q.grad.cpu(), rtol=1e-4, atol=1e-5)
    # The backward formula against float64 autograd of rms_norm on the CPU.
    cpu = _net().double()
    cpu(x.cpu().double(), nki_norm=False).square().mean().backward()
    torch.testing.assert_close(net.w.grad.cpu().double(), cpu.w.grad, rtol=1e-3, atol=1e-5)


@nki.jit
def _scale(x, s):
    out = nl.ndarray(x.shape, x.dtype, buffer=nl.shared_hbm)
    for i in nl.affine_range(x.shape[0] // 128):
        t = nl.load(x[nl.ds(i * 128, 128), :])
        nl.store(out[nl.ds(i * 128, 128), :], nl.multiply(t, s))
    return out


@nki_op("nkicompile::chain", mutates_args=())
def _chain(x: torch.Tensor, w: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    a = rmsnorm_kernel(x, w, 1e-6)
    return a, _scale(a, 3.0)


@nki_op("nkicompile::not_only_kernels", mutates_args=())
def _not_only(x: torch.Tensor) -> torch.Tensor:
    return _scale(x + 1, 2.0)


def test_kernel_chain_views_and_consts_as_arguments():
    """Two kernels in one op (the second reads the first's output from the
    workspace); a transposed view and a const-filled tensor as arguments."""
    x = torch.randn(64, 256).to("neuron")
    w = torch.randn(64).to("neuron")

    def fn(x, w):
        a, b = _chain(x.t(), w)  # a strided view: the kernel is built for its strides
        c = _chain(torch.ones(128, 64, device=x.device), w)[1]
        return a + 1, b.sum(0), c

    got = torch.compile(fn, backend="neuron", fullgraph=True)(x, w)
    m = torch.neuron.get_dynamo_metrics()
    assert m["lowerings"] >= 1 and m["host_steps"] == 0 and m["extern_kernels"] == 4, m
    for g, r in zip(got, fn(x, w)):
        torch.testing.assert_close(g.cpu(), r.cpu(), rtol=1e-5, atol=1e-5)
    xd, wd = x.cpu().double().t(), w.cpu().double()
    want = xd * torch.rsqrt(xd.square().mean(-1, keepdim=True) + 1e-6) * wd
    torch.testing.assert_close(got[0].cpu().double(), want + 1, rtol=1e-4, atol=1e-4)


def test_function_with_aten_ops_stays_a_host_step():
    x = torch.randn(128, 8).to("neuron")
    y = torch.compile(lambda x: _not_only(x.exp()), backend="neuron", fullgraph=True)(x)
    m = torch.neuron.get_dynamo_metrics()
    assert m["lowerings"] == 1 and m["host_steps"] == 1 and m["extern_kernels"] == 0, m
    torch.testing.assert_close(y.cpu(), (x.cpu().exp() + 1) * 2)


_CHILD = r'''
import json
import torch
import torch_neuronx
from nki import _runtime
from kernels_rmsnorm import Net

torch.manual_seed(0)
net = Net().to("neuron")
x = torch.randn(256, 64, generator=torch.Generator().manual_seed(1)).to("neuron")

def step(x):
    loss = net(x).square().mean()
    loss.backward()
    return loss.detach()

loss = torch.compile(step, backend="neuron")(x)
m = torch.neuron.get_dynamo_metrics()
print(json.dumps({"loss": float(loss), "grad": net.w.grad.cpu().tolist(), "m": m,
                  "nki": {k: _runtime.stats[k] for k in ("compiles", "disk_hits")}}))
'''


def _child(env):
    r = subprocess.run(
        [sys.executable, "-c", _CHILD], env=env, capture_output=True, text=True, timeout=300
    )
    assert r.returncode == 0, r.stderr[-3000:]
    return json.loads(r.stdout.strip().splitlines()[-1])


def test_warm_start_loads_graph_and_kernel_from_disk(tmp_path):
    env = dict(os.environ, TORCH_NEURONX_NEFF_CACHE_DIR=str(tmp_path / "cache"))
    env.pop("TORCH_NEURONX_NEFF_DISABLE_CACHE", None)
    here = os.path.dirname(os.path.abspath(__file__))
    env["PYTHONPATH"] = os.pathsep.join(p for p in (here, env.get("PYTHONPATH")) if p)
    cold = _child(env)
    assert cold["m"]["lowerings"] >= 1 and cold["m"]["host_steps"] == 0, cold["m"]
    assert cold["m"]["extern_kernels"] >= 1 and cold["nki"]["compiles"] >= 1
    hot = _child(env)
    m = hot["m"]
    assert m["lowerings"] == 0 and m["compiles"] == 0 and m["warm_graphs"] >= 1, m
    assert hot["nki"]["compiles"] == 0 and hot["nki"]["disk_hits"] >= 1, hot["nki"]
    assert hot["loss"] == cold["loss"] and hot["grad"] == cold["grad"]  # bit-identical
