"""Fused optimizers through PyTorch's own optimizer database
(torch.testing._internal.common_optimizers.optim_db): every configuration
its optim_inputs_func gives for Adam, AdamW and SGD, with fused=True, runs
on neuron and with fused=True on the CPU (PyTorch's own fused CPU kernels;
single-tensor SGD for bfloat16, see below);
after several steps the parameters and every state entry (step, exp_avg,
exp_avg_sq, max_exp_avg_sq, momentum_buffer) must match, the neuron step
must have run the native fused kernel, and nothing may fall back.
GradScaler's ops are covered by tests/test_amp_ops.py (no OpInfo exists)."""

import pytest
import torch
from torch.testing._internal.common_optimizers import optim_db

import torch_neuronx

SHAPES = [(33, 17), (17,), (3000,), (4, 3, 5)]
STEPS = 4
_FUSED = {"Adam": "aten::_fused_adam_", "AdamW": "aten::_fused_adamw_", "SGD": "aten::_fused_sgd_"}


def _cases():
    for info in optim_db:
        name = info.optim_cls.__name__
        if name not in _FUSED:
            continue
        for dtype in (torch.float32, torch.bfloat16):
            for oi in info.optim_inputs_func(device="cpu", dtype=dtype):
                yield pytest.param(
                    info.optim_cls,
                    oi.kwargs,
                    dtype,
                    id=f"{name}-{oi.desc.replace(' ', '_')}-{str(dtype)[6:]}",
                )


def _to(v, device):
    return v.to(device) if isinstance(v, torch.Tensor) else v


def _train(cls, kwargs, dtype, device, fused=True):
    g = torch.Generator().manual_seed(0)
    params = [torch.randn(s, generator=g).to(dtype).to(device).requires_grad_() for s in SHAPES]
    mode = {"fused": True} if fused else {"foreach": False}
    opt = cls(params, **mode, **{k: _to(v, device) for k, v in kwargs.items()})
    for step in range(STEPS):
        gg = torch.Generator().manual_seed(100 + step)
        for p in params:
            p.grad = torch.randn(p.shape, generator=gg).to(dtype).to(device)
        opt.step()
    return params, opt


@pytest.mark.parametrize("cls,kwargs,dtype", list(_cases()))
def test_fused_optimizer_matches_cpu_fused(cls, kwargs, dtype):
    # PyTorch 2.13's fused CPU SGD leaves bfloat16 parameters unchanged on
    # its vectorized path (lr 0.01, 40 elements: elements 1-6 keep their
    # values), so bfloat16 SGD is compared with CPU's single-tensor SGD.
    cpu_fused = not (cls is torch.optim.SGD and dtype == torch.bfloat16)
    ref_params, ref_opt = _train(cls, kwargs, dtype, "cpu", fused=cpu_fused)
    torch_neuronx.clear_op_tracking()
    params, opt = _train(cls, kwargs, dtype, "neuron")
    torch.neuron.synchronize()
    assert torch_neuronx.get_fallback_ops() == []
    assert _FUSED[cls.__name__] in torch_neuronx.get_executed_ops()
    # float32: both kernels compute in float32 in the same order; bfloat16
    # states round to bfloat16 after each step, where a 1-ulp difference in
    # an intermediate may flip a rounding.
    tol = {} if dtype == torch.float32 else {"atol": 1e-2, "rtol": 1.6e-2}
    if not cpu_fused:
        # Single-tensor SGD rounds the momentum buffer to bfloat16 after
        # each of its ops (mul_, add_); the fused kernel rounds once: buffers
        # that nearly cancel differ by a few bfloat16 ulps of their inputs
        # (<= 0.04 absolute on values of magnitude ~1 after 4 steps).
        tol = {"atol": 5e-2, "rtol": 1.6e-2}
    for p_ref, p in zip(ref_params, params):
        torch.testing.assert_close(p.detach().cpu(), p_ref.detach(), **tol)
        s_ref, s = ref_opt.state[p_ref], opt.state[p]
        assert set(s) == set(s_ref)
        for key, b in s_ref.items():
            a = s[key]
            assert isinstance(a, torch.Tensor) == isinstance(b, torch.Tensor)
            if isinstance(b, torch.Tensor):
                assert a.dtype == b.dtype and a.shape == b.shape, key
                torch.testing.assert_close(a.cpu(), b, msg=lambda m: f"state {key}: {m}", **tol)
            else:
                assert a == b, key
