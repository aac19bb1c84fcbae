"""The CPU fallback and op tracking, as TorchNeuron documents them."""

import warnings

import pytest
import torch

import torch_neuronx


def test_fallback_runs_ops_and_tracks_them():
    # lgamma / digamma: ops with no native kernel (special functions).
    x = torch.rand(64, 64) + 0.5
    d = x.to("neuron")
    torch_neuronx.clear_op_tracking()
    y = d.lgamma().digamma()
    assert y.device == torch.device("neuron:0")
    torch.testing.assert_close(y.cpu(), x.lgamma().digamma())
    torch.neuron.synchronize()
    fb = torch_neuronx.get_fallback_ops()
    assert fb.count("aten::lgamma") == 1 and fb.count("aten::digamma") == 1
    assert "aten::_copy_from" in torch_neuronx.get_executed_ops()
    d.lgamma()
    assert torch_neuronx.get_fallback_ops().count("aten::lgamma") == 2  # one per invocation
    torch_neuronx.clear_op_tracking()
    assert torch_neuronx.get_fallback_ops() == [] and torch_neuronx.get_executed_ops() == []


def test_fallback_warns_once_per_op(python):
    r = python("""
        import warnings, torch
        warnings.simplefilter("always")
        d = torch.ones(4, device="neuron")
        with warnings.catch_warnings(record=True) as w:
            warnings.simplefilter("always")
            for _ in range(3):
                d.lgamma()
            d.digamma()
        msgs = [str(x.message) for x in w]
        print(sum("aten::lgamma" in m for m in msgs), sum("aten::digamma" in m for m in msgs))
    """)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["1", "1"]


def test_fallback_handles_out_inplace_and_factories():
    d = torch.zeros(3, device="neuron")
    d.add_(1.0)
    out = torch.empty(3, device="neuron")
    torch.mul(d, 2.0, out=out)
    assert out.tolist() == [2.0, 2.0, 2.0]
    assert torch.arange(5, device="neuron").tolist() == [0, 1, 2, 3, 4]
    assert torch.full((2,), 7.0, device="neuron").cpu().tolist() == [7.0, 7.0]
    assert torch.eye(2, device="neuron").sum().item() == 2.0


def test_view_ops_stay_views():
    d = torch.arange(12.0, device="neuron").reshape(3, 4)
    for v in [
        d.t(),
        d[1],
        d[:, 1:3],
        d.unsqueeze(0),
        d.expand(2, 3, 4),
        d.permute(1, 0),
        d.narrow(0, 1, 1),
        d.diagonal(),
        d.view(4, 3),
        d.unfold(1, 2, 2),
    ]:
        assert v.untyped_storage().data_ptr() == d.untyped_storage().data_ptr()
    parts = d.split(1)
    assert all(p.untyped_storage().data_ptr() == d.untyped_storage().data_ptr() for p in parts)


def test_autograd_through_fallback():
    torch.manual_seed(0)
    w = torch.randn(8, 4, requires_grad=True)
    wd = w.detach().to("neuron").requires_grad_()
    x = torch.randn(16, 8)
    loss = (x @ w).tanh().sum()
    loss.backward()
    lossd = (x.to("neuron") @ wd).tanh().sum()
    lossd.backward()
    assert wd.grad.device.type == "neuron"
    torch.testing.assert_close(wd.grad.cpu(), w.grad)
    torch.testing.assert_close(lossd.cpu(), loss.detach())


def test_training_steps_reduce_loss():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 16), torch.nn.ReLU(), torch.nn.Linear(16, 1)).to(
        "neuron"
    )
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    x = torch.randn(64, 4).to("neuron")
    y = x.sum(1, keepdim=True)
    losses = []
    for _ in range(20):
        opt.zero_grad()
        loss = torch.nn.functional.mse_loss(model(x), y)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    assert losses[-1] < losses[0] * 0.5
    assert all(p.grad.is_neuron for p in model.parameters())


def test_autocast_accepts_neuron():
    a = torch.randn(8, 8, device="neuron")
    with torch.autocast("neuron", dtype=torch.bfloat16):
        out = a @ a
        f = torch.nn.functional.softmax(out, dim=-1)
    assert out.dtype == torch.bfloat16
    assert f.dtype == torch.float32
    with torch.autocast("neuron", enabled=False):
        assert (a @ a).dtype == torch.float32


def test_custom_op_without_neuron_kernel_falls_back():
    lib = torch.library.Library("neuron_test", "DEF")
    lib.define("twice(Tensor x) -> Tensor")
    lib.impl("twice", lambda x: x * 2, "CPU")
    d = torch.ones(3, device="neuron")
    out = torch.ops.neuron_test.twice(d)
    assert out.device.type == "neuron" and out.cpu().tolist() == [2.0, 2.0, 2.0]
    assert "neuron_test::twice" in torch_neuronx.get_fallback_ops()
