"""Conformance through torch.compile(backend="neuron"): PyTorch's OpInfo
samples of the ops the compiler lowers (elementwise, reductions, matmul,
index ops, sort/topk/scans/histc),
compiled and compared with PyTorch CPU. float32 and int64, the first two
samples of each op; all of a dtype's samples go into one compiled function
(one graph, one C compile), then each op is checked on its own."""

import importlib.util
import os
import pathlib

import pytest
import torch
import torch._dynamo
from torch.testing._internal.common_methods_invocations import op_db
from torch.testing._internal.opinfo.core import SampleInput

import torch_neuronx  # noqa: F401
from .exclusions import EXCLUDED, TIE_ORDER_FREE, TOLERANCES
from .test_opinfo import _compare_tie_free


def _ops_from(name):
    path = pathlib.Path(__file__).parent / f"{name}.py"
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return set(mod.OPS)


# Elementwise ops lower to fused loops; these reductions and products too.
LOWERED = _ops_from("ops_elementwise") | {
    "sum",
    "mean",
    "amax",
    "amin",
    "softmax",
    "log_softmax",
    "var",
    "mm",
    "bmm",
    "addmm",
    "nn.functional.linear",
    # bounds-checked gather/scatter loops (lower_index.py)
    "gather",
    "index_select",
    "nn.functional.embedding",
    "scatter",
    "scatter_add",
    "index_put",
    "take_along_dim",
    # folding scatters (every variant: sum, prod, mean, amax, amin)
    "scatter_reduce",
    # a boolean mask's prefix count picks each element's value
    "masked_scatter",
    # coordinate-selected: iota + clamped gathers + where
    "cat",
    "constant_pad_nd",
    "slice_scatter",
    "any",
    "all",
    # extern steps calling the eager kernels (lower_sort_scan.py)
    "sort",
    "argsort",
    "topk",
    "cumsum",
    "cumprod",
    "histc",
}
# The default run keeps to float32 and one sample per op (the machine's test
# time budget); OPENNEURON_FULL_TESTS=1 adds int64 and a second sample.
FULL = os.environ.get("OPENNEURON_FULL_TESTS") == "1"
DTYPES = [torch.float32, torch.int64] if FULL else [torch.float32]
SAMPLES_PER_OP = 2 if FULL else 1
# Samples run beyond the first ones, by index, where those miss a lowered
# form: slice_scatter's first samples all have step 1 (2 and 8: step 2),
# constant_pad_nd's pad at most two dims (37 and 45: three); scatter's 1 and 2
# are reduce="add" / "multiply"; scatter_reduce's 1 keeps self (0 does not).
EXTRA_SAMPLES = {
    "slice_scatter": (2, 8),
    "constant_pad_nd": (37, 45),
    "scatter": (1, 2),
    "scatter_reduce": (1,),
}
# Ops whose OpInfo variants (variant_test_name) are all lowered.
VARIANTS = {"scatter_reduce"}


def _own_samples(name, dtype):
    """Forms OpInfo has no sample of: cat of more than 4 pieces (lowered as
    cats of up to 4, then joined); index_put with a boolean mask and the
    same value for every selected element (a where), or one value per
    selected element (a gather at each element's prefix count)."""
    g = torch.Generator().manual_seed(0)
    if name == "index_put":
        x = torch.randn(5, 4, generator=g).to(dtype)
        mask, rows = x > 0, torch.tensor([True, False, True, True, False])
        return [
            SampleInput(x, args=((mask,), torch.tensor(3).to(dtype))),
            SampleInput(x, args=((rows,), torch.randn(4, generator=g).to(dtype))),
            SampleInput(
                x,
                args=((None, mask[0]), torch.randn(5, 1, generator=g).to(dtype)),
                kwargs={"accumulate": True},
            ),
            SampleInput(x, args=((rows,), torch.randn(3, 4, generator=g).to(dtype))),
            SampleInput(
                x,
                args=((rows,), torch.randn(3, 1, generator=g).to(dtype)),
                kwargs={"accumulate": True},
            ),
        ]
    if name != "cat":
        return []
    pieces = [torch.randn(3, i + 1, 2, generator=g).to(dtype) for i in range(9)]
    return [SampleInput(pieces, kwargs={"dim": 1}), SampleInput(pieces[:6], kwargs={"dim": -2})]


# Not compared: outputs that depend on something other than the inputs.
COMPILE_EXCLUDED = {
    # float_power computes in float64: the compiler computes float64 in
    # float32 (TorchNeuron's policy) while CPU keeps double precision.
    "float_power": "float64 computed as float32",
}


def _cases():
    for op in op_db:
        if (
            op.name not in LOWERED
            or op.name in COMPILE_EXCLUDED
            or (op.variant_test_name and op.name not in VARIANTS)
        ):
            continue
        v = op.variant_test_name
        for dtype in DTYPES:
            if (
                dtype in op.supported_dtypes("cpu")
                and (op.name, v, dtype) not in EXCLUDED
                and (op.name, v, "*") not in EXCLUDED
            ):
                yield op, dtype


def _to(x, dev):
    if isinstance(x, torch.Tensor):
        return x.to(dev)
    if isinstance(x, (list, tuple)):
        return type(x)(_to(y, dev) for y in x)
    return x


_results = {}


def _run_dtype(dtype, tmp_cache):
    """Runs every (op, sample) of `dtype` through one compiled function."""
    if dtype in _results:
        return _results[dtype]
    work = []
    for op, dt in _cases():
        if dt != dtype:
            continue
        extra = EXTRA_SAMPLES.get(op.name, ())
        for i, s in enumerate(op.sample_inputs("cpu", dtype)):
            if i >= SAMPLES_PER_OP and i > max(extra, default=-1):
                break
            if i >= SAMPLES_PER_OP and i not in extra:
                continue
            tensors = isinstance(s.input, (list, tuple)) and all(
                isinstance(t, torch.Tensor) for t in s.input
            )
            if not isinstance(s.input, torch.Tensor) and not tensors:  # cat takes a list
                continue
            work.append((op, s))
        work.extend((op, s) for s in _own_samples(op.name, dtype))
    expected = []
    for op, s in work:
        try:
            expected.append(op.op(s.input, *s.args, **s.kwargs))
        except Exception as e:  # noqa: BLE001 - CPU rejects this sample: so must we
            expected.append(e)
    live = [(op, s) for (op, s), e in zip(work, expected) if not isinstance(e, Exception)]
    dev_args = [
        (_to(s.input, "neuron"), _to(s.args, "neuron"), _to(s.kwargs, "neuron")) for _, s in live
    ]

    def all_ops(args):
        return [op.op(x, *a, **k) for (op, _), (x, a, k) in zip(live, args)]

    torch._dynamo.reset()
    got = torch.compile(all_ops, backend="neuron")(dev_args)
    out = {}
    it = iter(got)
    for (op, s), e in zip(work, expected):
        if isinstance(e, Exception):
            continue
        out.setdefault(_key(op), []).append((e, next(it), s))
    _results[dtype] = out
    return out


def _key(op):
    return f"{op.name}.{op.variant_test_name}" if op.variant_test_name else op.name


@pytest.mark.parametrize(
    "op,dtype", [pytest.param(op, dt, id=f"{_key(op)}-{str(dt)[6:]}") for op, dt in _cases()]
)
def test_compiled_op_matches_cpu(op, dtype, tmp_path_factory, monkeypatch):
    monkeypatch.setenv(
        "TORCH_NEURONX_NEFF_CACHE_DIR", str(tmp_path_factory.getbasetemp() / "neuron-compile-cache")
    )
    results = _run_dtype(dtype, None).get(_key(op), [])
    assert results, f"{_key(op)}: no sample ran"
    for expected, got, sample in results:
        if op.name in TIE_ORDER_FREE:
            # sort/argsort/topk: CPU orders equal elements its own way (as
            # the eager suite, indices are compared by what they select)
            _compare_tie_free(op, sample, got, expected)
            continue
        floating = isinstance(expected, torch.Tensor) and expected.dtype.is_floating_point
        atol, rtol = TOLERANCES.get(
            (op.name, op.variant_test_name, dtype), (1e-5, 1e-4) if floating else (0, 0)
        )
        if isinstance(expected, torch.Tensor):
            assert got.device.type == "neuron"
            torch.testing.assert_close(
                got.cpu(), expected, atol=atol, rtol=rtol, equal_nan=True, check_stride=False
            )
        else:
            torch.testing.assert_close(
                _to(got, "cpu"), expected, atol=atol, rtol=rtol, equal_nan=True
            )
