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
from .exclusions import (
    ALLOWED_FALLBACKS,
    EXCLUDED,
    RANDOM_SAMPLES,
    TIE_ORDER_FREE,
    TOLERANCES,
    VALUE_FREE,
)

# OpInfo names whose aten kernels are native on neuron: the union of the
# OPS sets in this folder's ops_*.py files (one per kernel family).
# A family may also set SAMPLE_STRIDE {name: k}: only every k-th sample of
# that op runs, and SAMPLE_DTYPES {name: dtypes}: only those dtypes (ops
# with thousands of near-identical samples, whose generation alone costs
# seconds per dtype; families fill both only outside
# OPENNEURON_FULL_TESTS=1, which runs everything).
NATIVE = set()
SAMPLE_STRIDE = {}
SAMPLE_DTYPES = {}
for _path in sorted(pathlib.Path(__file__).parent.glob("ops_*.py")):
    _spec = importlib.util.spec_from_file_location(_path.stem, _path)
    _mod = importlib.util.module_from_spec(_spec)
    _spec.loader.exec_module(_mod)
    NATIVE |= set(_mod.OPS)
    SAMPLE_STRIDE.update(getattr(_mod, "SAMPLE_STRIDE", {}))
    SAMPLE_DTYPES.update(getattr(_mod, "SAMPLE_DTYPES", {}))


def _samples(op, dtype, requires_grad):
    stride = SAMPLE_STRIDE.get(op.name, 1)
    is_random = RANDOM_SAMPLES.get(op.name, lambda s: False)
    for i, sample in enumerate(op.sample_inputs("cpu", dtype, requires_grad=requires_grad)):
        if i % stride == 0 and not is_random(sample):
            yield sample


def _cases():
    for op in op_db:
        if op.name not in NATIVE:
            continue
        supported = op.supported_dtypes("cpu")
        for dtype in SAMPLE_DTYPES.get(op.name, DTYPES):
            if dtype in supported:
                variant = op.variant_test_name or "default"
                yield pytest.param(op, dtype, id=f"{op.name}.{variant}-{str(dtype)[6:]}")


def _to(x, device):
    return x.to(device) if isinstance(x, torch.Tensor) else x


def _sort_dim(op, sample):
    if "dim" in sample.kwargs:
        return sample.kwargs["dim"]
    pos = 1 if op.name == "topk" else 0  # topk(k, dim), sort(dim), argsort(dim)
    args = sample.args
    return args[pos] if len(args) > pos and isinstance(args[pos], int) else -1


# Reductions returning (values, indices) of a selected element: where dim
# sits among the positional arguments.
_SELECT_DIM_POS = {"kthvalue": 1, "median": 0, "nanmedian": 0}


def _compare_selected(op, sample, got, expected):
    """kthvalue / median / nanmedian along a dim: among equal values the
    index is not defined, so it is checked by the value it selects."""
    if not isinstance(expected, tuple):  # median() of the whole tensor
        torch.testing.assert_close(got, expected, check_device=False, equal_nan=True)
        return
    torch.testing.assert_close(got[0], expected[0], check_device=False, equal_nan=True)
    x, idx = sample.input, got[1].cpu()
    assert idx.dtype == expected[1].dtype and idx.shape == expected[1].shape
    if x.dim() == 0:
        assert idx.item() == 0
        return
    pos = _SELECT_DIM_POS[op.name]
    args = sample.args
    dim = sample.kwargs.get("dim", args[pos] if len(args) > pos else -1)
    keepdim = sample.kwargs.get("keepdim", args[pos + 1] if len(args) > pos + 1 else False)
    picked = x.gather(dim, idx if keepdim else idx.unsqueeze(dim))
    torch.testing.assert_close(
        picked if keepdim else picked.squeeze(dim), expected[0], equal_nan=True
    )


def _compare_tie_free(op, sample, got, expected):
    """sort / topk / argsort: the order of equal elements is not defined
    (stable=False), so indices are checked by the values they select."""
    if op.name in _SELECT_DIM_POS:
        _compare_selected(op, sample, got, expected)
        return
    x = sample.input
    if op.name == "argsort":
        got_idx, exp_idx = got.cpu(), expected
    else:
        torch.testing.assert_close(got[0], expected[0], check_device=False, equal_nan=True)
        got_idx, exp_idx = got[1].cpu(), expected[1]
    assert got_idx.dtype == exp_idx.dtype and got_idx.shape == exp_idx.shape
    if x.dim() == 0:
        assert got_idx.item() == exp_idx.item() == 0
        return
    dim = _sort_dim(op, sample)
    torch.testing.assert_close(x.gather(dim, got_idx), x.gather(dim, exp_idx), equal_nan=True)


def _compare_value_free(got, expected):
    """Random fills: neuron draws from its own generator, so only what does
    not depend on the stream is compared (tests/test_random*.py check the
    distributions)."""
    assert got.device.type == "neuron"
    assert got.dtype == expected.dtype and got.shape == expected.shape


@pytest.mark.parametrize(
    "op", [op for op in op_db if op.name in NATIVE & VALUE_FREE], ids=lambda op: op.name
)
def test_error_inputs_match_cpu(op):
    """ATen's argument checks of the random fills, on neuron's kernels."""
    n = 0
    for ei in op.error_inputs("neuron"):
        s = ei.sample_input
        with pytest.raises(ei.error_type, match=ei.error_regex):
            op(s.input, *s.args, **s.kwargs)
        n += 1
    assert n > 0


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
    for sample in _samples(op, dtype, requires_grad=False):
        dev = sample.transform(lambda t: _to(t, "neuron"))
        expected = op(sample.input, *sample.args, **sample.kwargs)
        torch_neuronx.clear_op_tracking()
        got = op(dev.input, *dev.args, **dev.kwargs)
        fallbacks = [
            f
            for f in torch_neuronx.get_fallback_ops()
            if f not in ALLOWED_FALLBACKS.get(op.name, ())
        ]
        assert fallbacks == [], f"{op.name} fell back on {dtype}: {fallbacks}; {sample}"
        if op.name in VALUE_FREE:
            _compare_value_free(got, expected)
        elif op.name in TIE_ORDER_FREE:
            _compare_tie_free(op, sample, got, expected)
        else:
            torch.testing.assert_close(
                got,
                expected,
                check_device=False,
                equal_nan=True,
                msg=lambda m: f"{op.name} {dtype} {sample}: {m}",
                **_tolerance(op, dtype),
            )
        n += 1
    assert n > 0


def _grad_cases():
    for op in op_db:
        if (
            op.name in NATIVE
            and op.supports_autograd
            and torch.float32 in op.supported_dtypes("cpu")
        ):
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
    for sample in _samples(op, torch.float32, requires_grad=True):
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
            lambda t: dev_leaves[id(t)] if id(t) in dev_leaves else _to(t, "neuron")
        )
        dout = _differentiable(op(dev.input, *dev.args, **dev.kwargs))
        dgrads = torch.autograd.grad(
            sum(o.sum() for o in dout), [dev_leaves[id(t)] for t in leaves], allow_unused=True
        )
        for g, dg in zip(grads, dgrads):
            if g is None:
                assert dg is None
            else:
                torch.testing.assert_close(
                    dg, g, check_device=False, equal_nan=True, **_tolerance(op, "grad")
                )
        checked += 1
    assert checked > 0, f"{op.name}: no differentiable sample was checked"


def test_exclusions_are_used():
    from .ops_foreach import DB as FOREACH_DB  # ForeachFuncInfos (test_opinfo_foreach.py)

    names = {(op.name, op.variant_test_name) for op in [*op_db, *FOREACH_DB]}
    for name, variant, _dtype in [*EXCLUDED, *TOLERANCES]:
        assert (name, variant) in names, f"stale exclusion {name}.{variant}"
