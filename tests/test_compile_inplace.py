"""torch.compile(backend="neuron"): input mutations inside the graph.

Inference graphs (the optimizer step, no_grad code) keep their in-place
updates of inputs as copy_ nodes; libtrn writes those inputs in place
(trn_graph_store), or copies eagerly when it cannot order the write after
every read of the old values. Compiled optimizers keep their step counters on
the device (capturable), so the whole AdamW update is compiled."""

import os

import pytest
import torch
import torch._dynamo

import torch_neuronx  # noqa: F401
from torch_neuronx._compile import jobs as J

DEV = "neuron"


@pytest.fixture(autouse=True)
def _fresh(tmp_path, monkeypatch):
    monkeypatch.setenv("TORCH_NEURONX_NEFF_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("TORCH_NEURONX_PRESERVE_COMPILATION_ARTIFACTS", "1")
    monkeypatch.setenv("TORCH_NEURONX_DEBUG_DIR", str(tmp_path / "debug"))
    torch._dynamo.reset()
    J._memory_cache.clear()
    torch.neuron.reset_dynamo_metrics()
    yield
    torch._dynamo.reset()


def _sources(tmp_path):
    d = tmp_path / "debug"
    return "\n".join(p.read_text() for p in sorted(d.glob("*.c")))


def _x(*shape, seed=0):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed))


def ema_update(p, m, g):
    # An optimizer-like step: m and p updated in place; m's new value is read
    # twice (stored and used for p), p's is only stored.
    with torch.no_grad():
        m.mul_(0.9).add_(g)
        p.sub_(0.1 * m)
    return p.sum()


def test_inputs_updated_in_place(tmp_path):
    p, m, g = _x(16, 8, seed=1), _x(16, 8, seed=2), _x(16, 8, seed=3)
    ref_p, ref_m = p.clone(), m.clone()
    ref_s = ema_update(ref_p, ref_m, g)
    dp, dm = p.to(DEV), m.to(DEV)
    ptr_p, ptr_m = dp.data_ptr(), dm.data_ptr()
    s = torch.compile(ema_update, backend="neuron")(dp, dm, g.to(DEV))
    torch.testing.assert_close(dp.cpu(), ref_p)
    torch.testing.assert_close(dm.cpu(), ref_m)
    torch.testing.assert_close(s.cpu(), ref_s)
    assert (dp.data_ptr(), dm.data_ptr()) == (ptr_p, ptr_m)
    src = _sources(tmp_path)
    assert src.count("in place") == 2, src
    assert torch.neuron.get_dynamo_metrics()["host_steps"] == 0


def swap_mix(a, b):
    # a = a + b and b = b * (old a): computing a's store first would clobber
    # the a that b's update reads, so both values are computed, then copied.
    with torch.no_grad():
        old = a.clone()
        a.add_(b)
        b.mul_(old)


def test_stores_that_read_each_other(tmp_path):
    a, b = _x(4, 33, seed=4), _x(4, 33, seed=5)
    ra, rb = a.clone(), b.clone()
    swap_mix(ra, rb)
    da, db = a.to(DEV), b.to(DEV)
    torch.compile(swap_mix, backend="neuron")(da, db)
    torch.testing.assert_close(da.cpu(), ra)
    torch.testing.assert_close(db.cpu(), rb)
    assert "in place" in _sources(tmp_path)


def test_strided_input_copies_eagerly(tmp_path):
    # A non-contiguous input slice cannot be written through a dense layout:
    # the copy_ runs as a host step, with the same result.
    def f(x, y):
        with torch.no_grad():
            x.add_(y)

    base = _x(8, 16, seed=6)
    y = _x(8, 8, seed=7)
    ref = base.clone()
    f(ref[:, ::2], y)
    dbase = base.to(DEV)
    torch.compile(f, backend="neuron")(dbase[:, ::2], y.to(DEV))
    torch.testing.assert_close(dbase.cpu(), ref)


@pytest.mark.parametrize("opt_cls", [torch.optim.AdamW, torch.optim.SGD])
def test_optimizer_step_fully_compiled(opt_cls):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4))
    cpu_model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4))
    cpu_model.load_state_dict(model.state_dict())
    model = model.to(DEV)
    kw = {"lr": 1e-2} if opt_cls is torch.optim.AdamW else {"lr": 1e-2, "momentum": 0.9}
    opt, cpu_opt = opt_cls(model.parameters(), **kw), opt_cls(cpu_model.parameters(), **kw)
    x = _x(5, 8, seed=8)

    @torch.compile(backend="neuron")
    def opt_step():
        opt.step()

    torch.neuron.reset_dynamo_metrics()
    for _ in range(3):
        for mdl, o in ((model, opt), (cpu_model, cpu_opt)):
            o.zero_grad(set_to_none=True)
            mdl(x.to(next(mdl.parameters()).device)).square().mean().backward()
        opt_step()
        cpu_opt.step()
    # Every graph compiled for the step runs no eager op (no host step).
    m = torch.neuron.get_dynamo_metrics()
    assert m["graphs"] >= 1 and m["host_steps"] == 0 and m["fallback_graphs"] == 0, m
    if opt_cls is torch.optim.AdamW:
        st = opt.state[next(iter(model.parameters()))]["step"]
        assert st.device.type == DEV and float(st) == 3.0
    for p, q in zip(model.parameters(), cpu_model.parameters()):
        torch.testing.assert_close(p.detach().cpu(), q.detach(), rtol=1e-5, atol=1e-6)


def test_capturable_only_for_device_groups():
    # The hook only touches groups whose parameters are all on the device
    # (and whose state does not exist yet).
    from torch_neuronx._compile import optimizer as O

    cpu_p = torch.nn.Parameter(torch.zeros(3))
    opt = torch.optim.AdamW([cpu_p])
    assert not O._neuron_group(opt, opt.param_groups[0])
    dev_p = torch.nn.Parameter(torch.zeros(3, device=DEV))
    opt = torch.optim.AdamW([dev_p])
    assert O._neuron_group(opt, opt.param_groups[0])
