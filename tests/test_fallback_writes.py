"""The CPU fallback is never silently wrong for ops that write an argument
their schema does not mark as written (found by
scripts/audit_fallback_writes.py, listed in docs/training-ops.md): after the
op, every such argument on neuron equals what CPU leaves in it."""

import torch

import torch_neuronx

C = 3


def _rand(*shape, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=g)


def _stats():
    return _rand(C, seed=5), _rand(C, seed=6).abs() + 0.5


def _fallback(name, overload, *args, **kwargs):
    """Runs the op through the CPU fallback even if it has a native kernel."""
    return torch_neuronx._C._cpu_fallback_call(name, overload, *args, **kwargs)


def test_native_batch_norm_fallback_updates_running_stats():
    x, w, b = _rand(4, C, 5), _rand(C, seed=1), _rand(C, seed=2)
    rm, rv = _stats()
    exp = torch.ops.aten.native_batch_norm(x, w, b, rm, rv, True, 0.3, 1e-5)
    drm, drv = _stats()
    drm, drv = drm.to("neuron"), drv.to("neuron")
    got = _fallback(
        "aten::native_batch_norm",
        "",
        x.to("neuron"),
        w.to("neuron"),
        b.to("neuron"),
        drm,
        drv,
        True,
        0.3,
        1e-5,
    )
    assert drm.device.type == "neuron"
    torch.testing.assert_close(drm.cpu(), rm)
    torch.testing.assert_close(drv.cpu(), rv)
    assert not torch.equal(drm.cpu(), _stats()[0])  # they really were updated
    for a, e in zip(got, exp):
        torch.testing.assert_close(a.cpu(), e)


def test_native_batch_norm_out_fallback_updates_running_stats():
    x = _rand(6, C)
    rm, rv = _stats()
    outs = [torch.empty(6, C), torch.empty(C), torch.empty(C)]
    torch.ops.aten.native_batch_norm.out(
        x, None, None, rm, rv, True, 0.1, 1e-5, out=outs[0], save_mean=outs[1], save_invstd=outs[2]
    )
    drm, drv = (t.to("neuron") for t in _stats())
    douts = [
        torch.empty(6, C, device="neuron"),
        torch.empty(C, device="neuron"),
        torch.empty(C, device="neuron"),
    ]
    _fallback(
        "aten::native_batch_norm",
        "out",
        x.to("neuron"),
        None,
        None,
        drm,
        drv,
        True,
        0.1,
        1e-5,
        out=douts[0],
        save_mean=douts[1],
        save_invstd=douts[2],
    )
    torch.testing.assert_close(drm.cpu(), rm)
    torch.testing.assert_close(drv.cpu(), rv)
    for a, e in zip(douts, outs):
        torch.testing.assert_close(a.cpu(), e)


def test_batch_norm_update_stats_updates_running_stats():
    x = _rand(5, C, 2, 2)
    rm, rv = _stats()
    exp = torch.batch_norm_update_stats(x, rm, rv, 0.2)
    drm, drv = (t.to("neuron") for t in _stats())
    got = torch.batch_norm_update_stats(x.to("neuron"), drm, drv, 0.2)  # no native kernel
    torch.testing.assert_close(drm.cpu(), rm)
    torch.testing.assert_close(drv.cpu(), rv)
    for a, e in zip(got, exp):
        torch.testing.assert_close(a.cpu(), e)


def test_batch_norm_update_stats_non_contiguous_stats():
    # The copy-back writes through the caller's strides.
    x = _rand(5, C)
    base = _rand(C, 2, seed=9)
    rm = base[:, 0]
    exp = base.clone()
    torch.batch_norm_update_stats(x, exp[:, 0], None, 0.5)
    dbase = base.to("neuron")
    torch.batch_norm_update_stats(x.to("neuron"), dbase[:, 0], None, 0.5)
    torch.testing.assert_close(dbase.cpu(), exp)
    assert not torch.equal(exp[:, 0], rm)


def test_mkldnn_rnn_layer_backward_workspace():
    T, B, I, H = 3, 2, 4, 5
    ins = [
        _rand(T, B, I, seed=1),
        _rand(4 * H, I, seed=2),
        _rand(4 * H, H, seed=3),
        _rand(4 * H, seed=4),
        _rand(4 * H, seed=5),
        _rand(1, B, H, seed=6),
        _rand(1, B, H, seed=7),
    ]
    out, hy, cy, ws = torch.ops.aten.mkldnn_rnn_layer(
        *ins, False, [], 2, H, 1, True, False, False, True
    )
    grads = [_rand(T, B, H, seed=8), _rand(1, B, H, seed=9), _rand(1, B, H, seed=10)]
    dws = ws.to("neuron")
    tail = (False, 2, H, 1, True, True, False, [], False)
    exp = torch.ops.aten.mkldnn_rnn_layer_backward(*ins, out, hy, cy, *grads, *tail, ws)
    dev = [t.to("neuron") for t in ins + [out, hy, cy] + grads]
    got = torch.ops.aten.mkldnn_rnn_layer_backward(*dev, *tail, dws)
    assert torch.equal(dws.cpu(), ws)
    for a, e in zip(got, exp):
        torch.testing.assert_close(a.cpu(), e)
