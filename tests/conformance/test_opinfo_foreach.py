"""Conformance of the native _foreach_* ops: PyTorch's own ForeachFuncInfo
samples (tensor lists with tensor-list, scalar, scalar-list and one-element
tensor operands, alpha, norm orders, empty tensors) run out of place and in
place on neuron and on CPU; values, dtypes and shapes must match, nothing
may fall back, and where the lists can take the one-launch fast path
(floating dtypes) the native foreach kernel must be the one that ran.
float32 gradients of the out-of-place ops are compared too.
"""

import importlib.util
import math
import os
import pathlib

import pytest
import torch

import torch_neuronx
from .dtypes import DTYPES
from .exclusions import EXCLUDED, TOLERANCES

_spec = importlib.util.spec_from_file_location(
    "ops_foreach", pathlib.Path(__file__).parent / "ops_foreach.py"
)
_fe = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_fe)

# PyTorch's default lists hold 20 and 23 tensors; a few suffice for the
# kernels' logic (the chunking over 64Ki elements is tested in
# tests/test_foreach_optim.py). OPENNEURON_FULL_TESTS=1 runs PyTorch's sizes.
_FULL = os.environ.get("OPENNEURON_FULL_TESTS") == "1"
_NUM_TENSORS = {} if _FULL else {"num_input_tensors": [5]}
# int32 / uint8 take the same per-tensor loop as int64 (no list kernel for
# integers); they run in the full mode only, to keep the default suite short.
_DTYPES = DTYPES if _FULL else [d for d in DTYPES if d not in (torch.int32, torch.uint8)]
_FLOATS = (torch.float32, torch.bfloat16, torch.float16)


def _cases():
    for op in _fe.DB:
        if op.name not in _fe.OPS:
            continue
        for dtype in _DTYPES:
            for inplace in (False, True):
                if inplace and op.inplace_variant is None:
                    continue
                if not inplace and op.op is op.inplace_variant:  # _foreach_zero_ only
                    continue
                yield pytest.param(
                    op, dtype, inplace, id=f"{op.name}{'_' if inplace else ''}-{str(dtype)[6:]}"
                )


def _samples(op, dtype, requires_grad=False):
    # The sample functions intersperse empty tensors in the lists only for a
    # device other than "cpu"; "cpu:0" is the same device and gets them.
    yield from op.sample_inputs("cpu:0", dtype, requires_grad=requires_grad, **_NUM_TENSORS)
    if not requires_grad:
        yield from op.sample_zero_size_inputs("cpu", dtype)


def _to(x, device):
    if isinstance(x, torch.Tensor):
        return x.to(device)
    if isinstance(x, (list, tuple)) and any(isinstance(t, torch.Tensor) for t in x):
        return [_to(t, device) for t in x]
    return x


def _clone(x):
    if isinstance(x, torch.Tensor):
        return x.clone()
    if isinstance(x, (list, tuple)):
        return [_clone(t) for t in x]
    return x


def _run(fn, inp, args, kwargs):
    """(result, None) or (None, exception)."""
    try:
        return fn(inp, *args, **kwargs), None
    except (RuntimeError, TypeError, ValueError, IndexError) as e:
        return None, e


def _tolerance(op, dtype):
    tol = TOLERANCES.get((op.name, "", dtype))
    return {} if tol is None else {"atol": tol[0], "rtol": tol[1]}


def _fast_path(op, sample, dtype):
    """Whether neuron must take its one-launch kernel for this sample: a
    floating dtype and real scalars (complex ones run PyTorch's loop), for
    norms an order of 1, 2 or inf in the list's own dtype."""
    if dtype not in _FLOATS:
        return False
    if op.name == "_foreach_norm":
        return sample.kwargs.get("ord", 2) in (1, 2, math.inf) and sample.kwargs.get("dtype") in (
            None,
            dtype,
        )
    flat = [*sample.args, *sample.kwargs.values()]
    flat = [v for a in flat for v in (a if isinstance(a, (list, tuple)) else [a])]
    return not any(isinstance(v, complex) for v in flat)


def _excluded(op, dtype):
    for key in [(op.name, "", dtype), (op.name, "", "*")]:
        if key in EXCLUDED:
            return EXCLUDED[key]
    return None


@pytest.mark.parametrize("op,dtype,inplace", list(_cases()))
def test_foreach_matches_cpu(op, dtype, inplace):
    if _excluded(op, dtype):
        pytest.skip(_excluded(op, dtype))
    fn = op.inplace_variant if inplace else op.op
    unsupported = (op.name, dtype) in _fe.CPU_UNSUPPORTED
    n = 0
    for sample in _samples(op, dtype):
        inp, args, kwargs = _clone(sample.input), _clone(list(sample.args)), dict(sample.kwargs)
        dinp, dargs = _to(inp, "neuron"), [_to(a, "neuron") for a in args]
        expected, err = _run(fn, inp, args, kwargs)
        torch_neuronx.clear_op_tracking()
        got, derr = _run(fn, dinp, dargs, kwargs)
        what = f"{op.name}{'_' if inplace else ''} {dtype} {sample}"
        if unsupported:
            # No CPU kernel for the dtype (ops_foreach.CPU_UNSUPPORTED).
            assert isinstance(err, NotImplementedError), f"{what}: CPU runs it now: {err!r}"
            n += 1
            continue
        if err is not None:
            # Same refusal as CPU (e.g. an int list with a float scalar in
            # place, a bool scalar subtracted).
            assert derr is not None and type(derr) is type(err), (
                f"{what}: CPU raised {err!r}, neuron {derr!r}"
            )
            n += 1
            continue
        assert derr is None, f"{what}: neuron raised {derr!r}"
        torch.neuron.synchronize()
        assert torch_neuronx.get_fallback_ops() == [], (
            f"{what} fell back: {torch_neuronx.get_fallback_ops()}"
        )
        if _fast_path(op, sample, dtype) and any(t.numel() for t in dinp):
            ran = torch_neuronx.get_executed_ops()
            assert any(r.startswith(f"aten::{op.name}") for r in ran), f"{what}: ran {ran}"
        if inplace:  # the lists themselves were updated
            got, expected = dinp, inp
        torch.testing.assert_close(
            got,
            expected,
            check_device=False,
            equal_nan=True,
            msg=lambda m: f"{what}: {m}",
            **_tolerance(op, dtype),
        )
        n += 1
    assert n > 0


def _grad_cases():
    for op in _fe.DB:
        if op.name in _fe.OPS and op.supports_autograd and op.op is not op.inplace_variant:
            yield pytest.param(op, id=op.name)


def _leaves(sample):
    flat = []
    for t in [sample.input, *sample.args]:
        flat.extend(t if isinstance(t, (list, tuple)) else [t])
    return [t for t in flat if isinstance(t, torch.Tensor) and t.requires_grad]


@pytest.mark.parametrize("op", list(_grad_cases()))
def test_foreach_gradients_match_cpu(op):
    """Gradients for every leaf, and for the input list alone: CPU's own
    backward refuses some samples (addcdiv with tensor1 / tensor2 leaves
    raises IndexError in PyTorch 2.13, a one-element tensor operand raises
    "inconsistent range for TensorList output"); neuron must refuse those
    the same way and match CPU on the rest."""
    checked = 0
    for sample in _samples(op, torch.float32, requires_grad=True):
        every = _leaves(sample)
        inputs = [t for t in every if any(t is x for x in sample.input)]
        for leaves in [every, inputs] if len(inputs) < len(every) else [every]:
            if leaves:
                checked += _check_grads(op, sample, leaves)
    assert checked > 0, f"{op.name}: no differentiable sample was checked"


def _check_grads(op, sample, leaves):
    """1 when CPU's gradients were compared, 0 when CPU refused (and neuron too)."""
    dev = {id(t): t.detach().to("neuron").requires_grad_() for t in leaves}

    def move(x):
        if isinstance(x, torch.Tensor):
            return dev.get(id(x), x.detach().to("neuron"))
        if isinstance(x, (list, tuple)) and any(isinstance(t, torch.Tensor) for t in x):
            return [move(t) for t in x]
        return x

    def grad_of(wrt):
        def run(inp, *args):
            out = op.op(inp, *args, **sample.kwargs)
            return torch.autograd.grad(sum(o.sum() for o in out), wrt, allow_unused=True)

        return run

    grads, err = _run(grad_of(leaves), sample.input, sample.args, {})
    dgrads, derr = _run(
        grad_of([dev[id(t)] for t in leaves]),
        move(sample.input),
        [move(a) for a in sample.args],
        {},
    )
    if err is not None:
        assert derr is not None and type(derr) is type(err), f"{op.name}: {err!r} vs {derr!r}"
        return 0
    assert derr is None, f"{op.name} {sample}: neuron raised {derr!r}"
    for g, dg in zip(grads, dgrads):
        if g is None:
            assert dg is None
        else:
            torch.testing.assert_close(
                dg,
                g,
                check_device=False,
                equal_nan=True,
                msg=lambda m: f"{op.name} grad {sample}: {m}",
            )
    return 1
