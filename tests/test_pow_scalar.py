"""pow(tensor, constant) fast paths (x**2, x**3, sqrt, rsqrt, 1/x, 1/x**2)
match the CPU exactly in float32/float64 (roots: within CPU's 1 ulp),
including the special values, and
within one rounding in float16 / bfloat16; other exponents keep the general
path. Also the backward (pow's grad calls pow(x, e - 1))."""

import pytest
import torch

import torch_neuronx

SPECIAL = [
    0.0,
    -0.0,
    1.0,
    -1.0,
    2.5,
    -3.25,
    1e-20,
    1e20,
    float("inf"),
    float("-inf"),
    float("nan"),
    7.0,
    -0.5,
]


def values(dtype):
    gen = torch.Generator().manual_seed(0)
    x = torch.cat([torch.tensor(SPECIAL), torch.randn(3001, generator=gen) * 4])
    # Strided too: every other element of a 2-d view.
    return x.to(dtype)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16, torch.float16])
@pytest.mark.parametrize("e", [2, 3, 0.5, -0.5, -1, -2, 1, 0, 2.5, 4])
def test_pow_scalar_matches_cpu(dtype, e):
    x = values(dtype)
    torch_neuronx.clear_op_tracking()
    got = torch.pow(x.to("neuron"), e).cpu()
    want = torch.pow(x, e)
    if dtype == torch.float64 and not torch_neuronx._C._float64_native():
        want = torch.pow(x.float(), e).double()  # float64 is computed in float32
    full = dtype in (torch.float32, torch.float64)
    if full and e in (2, 3, -1, -2, 1, 0):
        torch.testing.assert_close(got, want, rtol=0, atol=0, equal_nan=True)
    elif full and e in (0.5, -0.5):
        # CPU's vectorized sqrt (SLEEF) is within 1 ulp, not correctly rounded.
        torch.testing.assert_close(got, want, rtol=2.5e-7, atol=0, equal_nan=True)
    else:
        torch.testing.assert_close(
            got,
            want,
            equal_nan=True,
            rtol=1e-5 if dtype in (torch.float32, torch.float64) else 1e-2,
            atol=1e-5 if dtype in (torch.float32, torch.float64) else 1e-2,
        )
    strided = x.reshape(-1, 2)[:, 1]
    torch.testing.assert_close(
        torch.pow(strided.to("neuron"), e).cpu(),
        want.reshape(-1, 2)[:, 1],
        equal_nan=True,
        rtol=1e-2,
        atol=1e-2,
    )
    assert "aten::pow" in torch_neuronx.get_executed_ops()
    assert torch_neuronx.get_fallback_ops() == []


@pytest.mark.parametrize("e", [2, 3, -1, 0.5])
def test_pow_scalar_backward(e):
    x = torch.randn(64, 33, dtype=torch.float32) + 3
    xd = x.to("neuron").requires_grad_()
    xc = x.clone().requires_grad_()
    (xd**e).sum().backward()
    (xc**e).sum().backward()
    tol = dict(rtol=5e-7, atol=0) if e == 0.5 else dict(rtol=1e-6, atol=1e-6)  # roots: 1 ulp
    torch.testing.assert_close(xd.grad.cpu(), xc.grad, equal_nan=True, **tol)
