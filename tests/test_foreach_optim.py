"""_foreach_* ops and fused optimizers on neuron (aten/foreach.cpp,
libtrn/src/kernels/train/foreach.c): Adam / AdamW / SGD with foreach=True and
fused=True against CPU's single-tensor (foreach=False) reference over
several steps, every state compared (param, exp_avg, exp_avg_sq,
max_exp_avg_sq, step, momentum_buffer); lr as a tensor; grad_scale /
found_inf against CPU's own fused kernel; clip_grad_norm_(foreach=True);
mixed lists taking the per-tensor path."""

import pytest
import torch

import torch_neuronx

SHAPES = [(33, 17), (17,), (70000,), (4, 3, 5)]  # one tensor spans two chunks


def _params(dev, seed=0):
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(s, generator=g).to(dev).requires_grad_() for s in SHAPES]


def _grads(step):
    g = torch.Generator().manual_seed(100 + step)
    return [torch.randn(s, generator=g) for s in SHAPES]


def _train(dev, make_opt, steps=4):
    params = _params(dev)
    opt = make_opt(params)
    for step in range(steps):
        for p, g in zip(params, _grads(step)):
            p.grad = g.to(dev)
        opt.step()
    return params, opt


def _compare_states(ref_opt, ref_params, opt, params, atol=1e-6, rtol=1e-5):
    for p_ref, p in zip(ref_params, params):
        torch.testing.assert_close(p.detach().cpu(), p_ref.detach(), atol=atol, rtol=rtol)
        s_ref, s = ref_opt.state[p_ref], opt.state[p]
        assert set(s_ref) == set(s)
        for key in s_ref:
            a, b = s[key], s_ref[key]
            if isinstance(b, torch.Tensor):
                torch.testing.assert_close(
                    a.cpu().to(b.dtype).reshape(b.shape),
                    b,
                    atol=atol,
                    rtol=rtol,
                    msg=lambda m: f"state {key}: {m}",
                )
            else:
                assert a == b


ADAM_CASES = [
    (torch.optim.Adam, dict(lr=1e-2)),
    (torch.optim.Adam, dict(lr=1e-2, weight_decay=0.1, amsgrad=True)),
    (torch.optim.Adam, dict(lr=1e-2, maximize=True, betas=(0.8, 0.95))),
    (torch.optim.AdamW, dict(lr=1e-2, weight_decay=0.1)),
    (torch.optim.AdamW, dict(lr=1e-2, weight_decay=0.05, amsgrad=True, maximize=True)),
    (torch.optim.SGD, dict(lr=0.1)),
    (torch.optim.SGD, dict(lr=0.1, momentum=0.9, weight_decay=0.01)),
    (torch.optim.SGD, dict(lr=0.1, momentum=0.9, nesterov=True, dampening=0.0, maximize=True)),
    (torch.optim.SGD, dict(lr=0.1, momentum=0.5, dampening=0.3)),
]


@pytest.mark.parametrize("mode", ["foreach", "fused"])
@pytest.mark.parametrize("cls,kw", ADAM_CASES, ids=lambda x: getattr(x, "__name__", str(x)))
def test_optimizer_matches_cpu_single_tensor(cls, kw, mode):
    ref_params, ref_opt = _train("cpu", lambda ps: cls(ps, foreach=False, **kw))
    torch_neuronx.clear_op_tracking()
    params, opt = _train("neuron", lambda ps: cls(ps, **{mode: True}, **kw))
    ran = set(torch_neuronx.get_executed_ops())
    assert torch_neuronx.get_fallback_ops() == []
    if mode == "fused":
        fused = {
            torch.optim.Adam: "aten::_fused_adam_",
            torch.optim.AdamW: "aten::_fused_adamw_",
            torch.optim.SGD: "aten::_fused_sgd_",
        }[cls]
        assert fused in ran, sorted(ran)
    else:
        assert any(o.startswith("aten::_foreach_") for o in ran), sorted(ran)
    _compare_states(ref_opt, ref_params, opt, params)


def test_fused_adam_tensor_lr():
    ref_params, ref_opt = _train("cpu", lambda ps: torch.optim.AdamW(ps, lr=1e-2, foreach=False))
    params, opt = _train(
        "neuron", lambda ps: torch.optim.AdamW(ps, lr=torch.tensor(1e-2), fused=True)
    )
    _compare_states(ref_opt, ref_params, opt, params)


@pytest.mark.parametrize("adamw", [False, True])
def test_fused_adam_grad_scale_found_inf_match_cpu_kernel(adamw):
    op = torch._fused_adamw_ if adamw else torch._fused_adam_
    for found in (0.0, 1.0):
        results = []
        for dev in ("cpu", "neuron"):
            g = torch.Generator().manual_seed(3)
            mk = lambda: [torch.randn(s, generator=g).to(dev) for s in SHAPES]
            p, gr, m, v, mx = mk(), mk(), mk(), [t.abs() for t in mk()], [t.abs() + 1 for t in mk()]
            steps = [torch.tensor(3.0, device=dev) for _ in SHAPES]
            op(
                p,
                gr,
                m,
                v,
                mx,
                steps,
                lr=1e-2,
                beta1=0.9,
                beta2=0.99,
                weight_decay=0.1,
                eps=1e-8,
                amsgrad=True,
                maximize=False,
                grad_scale=torch.tensor(8.0, device=dev),
                found_inf=torch.tensor(found, device=dev),
            )
            results.append([t.cpu() for t in (*p, *gr, *m, *v, *mx)])
        for a, b in zip(results[1], results[0]):
            torch.testing.assert_close(a, b, atol=1e-6, rtol=1e-5)


def test_fused_sgd_grad_scale_matches_cpu_kernel():
    results = []
    for dev in ("cpu", "neuron"):
        g = torch.Generator().manual_seed(4)
        mk = lambda: [torch.randn(s, generator=g).to(dev) for s in SHAPES]
        p, gr, buf = mk(), mk(), mk()
        torch._fused_sgd_(
            p,
            gr,
            buf,
            weight_decay=0.01,
            momentum=0.9,
            lr=0.1,
            dampening=0.1,
            nesterov=False,
            maximize=False,
            is_first_step=False,
            grad_scale=torch.tensor(4.0, device=dev),
            found_inf=torch.tensor(0.0, device=dev),
        )
        results.append([t.cpu() for t in (*p, *gr, *buf)])
    for a, b in zip(results[1], results[0]):
        torch.testing.assert_close(a, b, atol=1e-6, rtol=1e-5)


def test_clip_grad_norm_foreach():
    for norm_type in (2.0, 1.0, float("inf")):
        outs = []
        for dev in ("cpu", "neuron"):
            params = _params(dev)
            for p, g in zip(params, _grads(0)):
                p.grad = g.to(dev) * 3
            # CPU has no foreach path (PyTorch refuses foreach=True there)
            total = torch.nn.utils.clip_grad_norm_(
                params, 1.5, norm_type=norm_type, foreach=dev == "neuron"
            )
            outs.append([total.cpu(), *[p.grad.cpu() for p in params]])
        for a, b in zip(outs[1], outs[0]):
            torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-5)


def test_mixed_lists_take_per_tensor_path():
    a = [torch.randn(5), torch.randn(3, dtype=torch.float64), torch.arange(4)]
    b = [torch.randn(5), torch.randn(3, dtype=torch.float64), torch.arange(4)]
    ref = torch._foreach_add(a, b, alpha=2)
    got = torch._foreach_add([t.to("neuron") for t in a], [t.to("neuron") for t in b], alpha=2)
    for x, y in zip(got, ref):
        torch.testing.assert_close(x.cpu(), y)
    # non-contiguous members
    nc = [torch.randn(6, 4).t(), torch.randn(5)]
    ref = torch._foreach_mul(nc, 3.0)
    got = torch._foreach_mul([t.to("neuron") for t in nc], 3.0)
    for x, y in zip(got, ref):
        torch.testing.assert_close(x.cpu(), y)


def test_errors():
    p = [torch.randn(3, device="neuron")]
    with pytest.raises(RuntimeError):
        torch._foreach_add(p, [torch.randn(4, device="neuron"), torch.randn(3, device="neuron")])
    with pytest.raises(RuntimeError, match="same length|match"):
        torch._fused_sgd_(
            p,
            [torch.randn(3, device="neuron")] * 2,
            [],
            weight_decay=0.0,
            momentum=0.0,
            lr=0.1,
            dampening=0.0,
            nesterov=False,
            maximize=False,
            is_first_step=True,
        )


def test_inplace_foreach_bumps_versions_like_cpu():
    # Autograd detects saved tensors modified in place through the version
    # counter: every in-place _foreach_ op must bump it, as on CPU.
    def versions(dev):
        t = lambda: [torch.ones(3, device=dev), torch.ones(5, device=dev)]  # noqa: E731
        out = []
        for f in (
            lambda a: torch._foreach_add_(a, 1.0),
            lambda a: torch._foreach_mul_(a, [2.0, 3.0]),
            lambda a: torch._foreach_add_(a, t(), alpha=2),
            lambda a: torch._foreach_add_(a, torch.tensor(1.0, device=dev)),
            lambda a: torch._foreach_sqrt_(a),
            lambda a: torch._foreach_zero_(a),
            lambda a: torch._foreach_lerp_(a, t(), 0.5),
            lambda a: torch._foreach_addcmul_(a, t(), t(), value=2.0),
        ):
            a = t()
            f(a)
            out.append([x._version for x in a])
        return out

    assert versions("neuron") == versions("cpu")
    w = torch.ones(3, device="neuron", requires_grad=True)
    y = w * 1.0
    z = (y * y).sum()  # saves y
    torch._foreach_add_([y], 1.0)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        z.backward()
