"""Conformance: every native elementwise op against PyTorch CPU on PyTorch's
own OpInfo samples (values, dtypes, shapes; gradients for float32), and proof
that the op ran natively (nothing in get_fallback_ops() for a supported dtype).
"""
import importlib.util
import pathlib

import pytest
import torch
from torch.testing._internal.common_methods_invocations import op_db

import torch_neuronx
from .dtypes import DTYPES
from .exclusions import ALLOWED_FALLBACKS, EXCLUDED, TOLERANCES

# OpInfo names whose aten kernels are native on neuron: the union of the
# OPS sets in this folder's ops_*.py files (one per kernel family).
NATIVE = set()
for _path in sorted(pathlib.Path(__file__).parent.glob("ops_*.py")):
    _spec = importlib.util.spec_from_file_location(_path.stem, _path)
    _mod = importlib.util.module_from_spec(_spec)
    _spec.loader.exec_module(_mod)
    NATIVE |= set(_mod.OPS)


def _cases():
    for op in op_db:
        if op.name not in NATIVE:
            continue
        supported = op.supported_dtypes("cpu")
        for dtype in DTYPES:
            if dtype in supported:
                variant = op.variant_test_name or "default"
                yield pytest.param(op, dtype, id=f"{op.name}.{variant}-{str(dtype)[6:]}")


def _to(x, device):
    return x.to(device) if isinstance(x, torch.Tensor) else x


def _tolerance(op, key):
    tol = TOLERANCES.get((op.name, op.variant_test_name, key))
    return {} if tol is None else {"atol": tol[0], "rtol": tol[1]}


def _excluded(op, dtype):
    for key in [(op.name, op.variant_test_name, dtype), (op.name, op.variant_test_name, "*")]:
        if key in EXCLUDED:
            return EXCLUDED[key]
    return None


@pytest.mark.parametrize("op,dtype", list(_cases()))
def test_matches_cpu(op, dtype):
    reason = _excluded(op, dtype)
    if reason:
        pytest.skip(reason)
    n = 0
    for sample in op.sample_inputs("cpu", dtype, requires_grad=False):
        dev = sample.transform(lambda t: _to(t, "neuron"))
        expected = op(sample.input, *sample.args, **sample.kwargs)
        torch_neuronx.clear_op_tracking()
        got = op(dev.input, *dev.args, **dev.kwargs)
        fallbacks = [f for f in torch_neuronx.get_fallback_ops()
                     if f not in ALLOWED_FALLBACKS.get(op.name, ())]
        assert fallbacks == [], f"{op.name} fell back on {dtype}: {fallbacks}; {sample}"
        torch.testing.assert_close(got, expected, check_device=False, equal_nan=True,
                                   msg=lambda m: f"{op.name} {dtype} {sample}: {m}",
                                   **_tolerance(op, dtype))
        n += 1
    assert n > 0


def _grad_cases():
    for op in op_db:
        if op.name in NATIVE and op.supports_autograd and torch.float32 in op.supported_dtypes("cpu"):
            yield pytest.param(op, id=f"{op.name}.{op.variant_test_name or 'default'}")


def _differentiable(out):
    """The outputs that carry gradients (max.dim returns values and indices)."""
    outs = out if isinstance(out, (tuple, list)) else (out,)
    return [o for o in outs if isinstance(o, torch.Tensor) and o.requires_grad]


@pytest.mark.parametrize("op", list(_grad_cases()))
def test_gradients_match_cpu(op):
    if _excluded(op, torch.float32):
        pytest.skip(_excluded(op, torch.float32))
    checked = 0
    for sample in op.sample_inputs("cpu", torch.float32, requires_grad=True):
        # Leaves may sit in the input itself or in a list (cat, stack...).
        flat = []
        for t in [sample.input, *sample.args, *sample.kwargs.values()]:
            flat.extend(t if isinstance(t, (list, tuple)) else [t])
        leaves = [t for t in flat if isinstance(t, torch.Tensor) and t.requires_grad]
        if not leaves:
            continue
        out = _differentiable(op(sample.input, *sample.args, **sample.kwargs))
        if not out:
            continue
        grads = torch.autograd.grad(sum(o.sum() for o in out), leaves, allow_unused=True)
        dev_leaves = {id(t): t.detach().to("neuron").requires_grad_() for t in leaves}
        dev = sample.transform(
            lambda t: dev_leaves[id(t)] if id(t) in dev_leaves else _to(t, "neuron"))
        dout = _differentiable(op(dev.input, *dev.args, **dev.kwargs))
        dgrads = torch.autograd.grad(sum(o.sum() for o in dout),
                                     [dev_leaves[id(t)] for t in leaves], allow_unused=True)
        for g, dg in zip(grads, dgrads):
            if g is None:
                assert dg is None
            else:
                torch.testing.assert_close(dg, g, check_device=False, equal_nan=True,
                                           **_tolerance(op, "grad"))
        checked += 1
    assert checked > 0, f"{op.name}: no differentiable sample was checked"


def test_exclusions_are_used():
    names = {(op.name, op.variant_test_name) for op in op_db}
    for (name, variant, _dtype) in [*EXCLUDED, *TOLERANCES]:
        assert (name, variant) in names, f"stale exclusion {name}.{variant}"
