"""out= arguments of the native neuron kernels, checked against PyTorch CPU.

Every native ``out=`` path must check the out tensor as ATen does before a
kernel writes into it: its dtype (a smaller element type must never receive
wider elements), its device, internal overlap (an expanded out) and overlap
with the inputs; and where CPU accepts an out that aliases an input (``out=``
the input itself), the result must be the same as on CPU.

Each scenario runs the op on CPU and on neuron with the same construction of
arguments and out tensor. Where CPU raises, neuron raises the same exception
type with a matching message fragment. Where CPU accepts:
  - a wrong-dtype out (ops that cast into out): the same values;
  - an internally or partially overlapping out (CPU's reduction and BLAS
    kernels skip TensorIterator's check and return order-dependent values):
    neuron raises TensorIterator's error;
  - an out that is an input (full aliasing): the op's functional result
    (CPU's gemm-based ops return garbage there; neuron computes into a
    temporary).
"""

import re

import pytest
import torch

import torch_neuronx

DEV = "neuron"


def _g(seed=0):
    return torch.Generator().manual_seed(seed)


def randn(*shape, seed=0):
    return torch.randn(shape, generator=_g(seed))


def pos(*shape, seed=0):  # positive values (log, prod, multinomial)
    return torch.rand(shape, generator=_g(seed)) + 0.5


IDX3 = torch.tensor([0, 2, 4])
GIDX = torch.tensor([[0, 2], [1, 0], [2, 2], [1, 1]])  # (4, 2), columns < 3
SIDX = torch.tensor([[0, 2], [1, 0], [2, 1], [1, 2]])  # unique per row (scatter)


class Case:
    """fn(*args, out=None) runs the op; ``args`` are CPU tensors (moved to the
    device as they are); ``alias``: indices of args an out may alias;
    ``cpu_unsafe``: scenarios not run on CPU because PyTorch's CPU kernel
    writes past the out's memory there (softmax into an expanded out)."""

    def __init__(
        self,
        name,
        fn,
        args,
        alias=(),
        dtype_bad=torch.int8,
        random=False,
        cpu_unsafe=(),
        partial_arg=0,
    ):
        self.name, self.fn, self.args = name, fn, args
        self.alias, self.dtype_bad, self.random = alias, dtype_bad, random
        self.cpu_unsafe, self.partial_arg = cpu_unsafe, partial_arg

    def __repr__(self):
        return self.name


def O(op):  # noqa: E743 - reads as the out= marker in the tables below
    """fn(*args, out=...) for a torch function taking out= (None: functional)."""
    return lambda *a, out=None: op(*a) if out is None else op(*a, out=out)


CASES = [
    # indexing
    Case(
        "index_add",
        lambda x, i, s, out=None: torch.index_add(x, 0, i, s, out=out)
        if out is not None
        else torch.index_add(x, 0, i, s),
        (randn(5, 3), IDX3, randn(3, 3, seed=1)),
        alias=(0,),
    ),
    Case(
        "index_select",
        lambda x, i, out=None: torch.index_select(x, 0, i, out=out)
        if out is not None
        else torch.index_select(x, 0, i),
        (randn(5, 3), IDX3),
    ),
    Case(
        "index.Tensor_out",
        lambda x, i, out=None: torch.ops.aten.index.Tensor_out(x, [i], out=out)
        if out is not None
        else x[i],
        (randn(5, 3), IDX3),
    ),
    Case(
        "gather",
        lambda x, i, out=None: torch.gather(x, 1, i, out=out)
        if out is not None
        else torch.gather(x, 1, i),
        (randn(4, 3), GIDX),
    ),
    Case(
        "scatter.src",
        lambda x, i, s, out=None: torch.scatter(x, 1, i, s, out=out)
        if out is not None
        else torch.scatter(x, 1, i, s),
        (randn(4, 3), SIDX, randn(4, 2, seed=1)),
        alias=(0,),
    ),
    Case(
        "scatter.value",
        lambda x, i, out=None: torch.scatter(x, 1, i, 2.5, out=out)
        if out is not None
        else torch.scatter(x, 1, i, 2.5),
        (randn(4, 3), SIDX),
        alias=(0,),
    ),
    Case(
        "scatter.reduce",
        lambda x, i, s, out=None: torch.scatter(x, 1, i, s, reduce="add", out=out)
        if out is not None
        else torch.scatter(x, 1, i, s, reduce="add"),
        (randn(4, 3), SIDX, randn(4, 2, seed=1)),
        alias=(0,),
    ),
    Case(
        "scatter_add",
        lambda x, i, s, out=None: torch.scatter_add(x, 1, i, s, out=out)
        if out is not None
        else torch.scatter_add(x, 1, i, s),
        (randn(4, 3), GIDX, randn(4, 2, seed=1)),
        alias=(0,),
    ),
    Case(
        "scatter_reduce",
        lambda x, i, s, out=None: torch.scatter_reduce(x, 1, i, s, "amax", out=out)
        if out is not None
        else torch.scatter_reduce(x, 1, i, s, "amax"),
        (randn(4, 3), GIDX, randn(4, 2, seed=1)),
        alias=(0,),
    ),
    Case("masked_select", O(torch.masked_select), (randn(4, 3), randn(4, 3, seed=1) > 0)),
    Case(
        "cat",
        lambda a, b, out=None: torch.cat([a, b], 0, out=out)
        if out is not None
        else torch.cat([a, b], 0),
        (randn(2, 3), randn(3, 3, seed=1)),
    ),
    # matrix products
    Case("mm", O(torch.mm), (randn(3, 3), randn(3, 3, seed=1)), alias=(0, 1)),
    Case("bmm", O(torch.bmm), (randn(2, 3, 3), randn(2, 3, 3, seed=1)), alias=(0, 1)),
    Case(
        "addmm",
        O(torch.addmm),
        (randn(3, 3), randn(3, 3, seed=1), randn(3, 3, seed=2)),
        alias=(0, 1, 2),
    ),
    Case(
        "baddbmm",
        O(torch.baddbmm),
        (randn(2, 3, 3), randn(2, 3, 4, seed=1), randn(2, 4, 3, seed=2)),
        alias=(0,),
    ),
    Case(
        "addbmm",
        O(torch.addbmm),
        (randn(3, 3), randn(2, 3, 4, seed=1), randn(2, 4, 3, seed=2)),
        alias=(0,),
    ),
    Case("addmv", O(torch.addmv), (randn(3), randn(3, 3, seed=1), randn(3, seed=2)), alias=(0, 2)),
    Case("mv", O(torch.mv), (randn(3, 3), randn(3, seed=1)), alias=(1,)),
    # reductions, scans, softmax
    Case(
        "sum",
        lambda x, out=None: torch.sum(x, 1, out=out) if out is not None else torch.sum(x, 1),
        (randn(4, 3),),
    ),
    Case(
        "mean",
        lambda x, out=None: torch.mean(x, 1, out=out) if out is not None else torch.mean(x, 1),
        (randn(4, 3),),
    ),
    Case(
        "prod",
        lambda x, out=None: torch.prod(x, 1, out=out) if out is not None else torch.prod(x, 1),
        (pos(4, 3),),
    ),
    Case(
        "amax",
        lambda x, out=None: torch.amax(x, 1, out=out) if out is not None else torch.amax(x, 1),
        (randn(4, 3),),
    ),
    Case(
        "max.dim",
        lambda x, out=None: torch.max(x, 1, out=out) if out is not None else torch.max(x, 1),
        (randn(4, 3),),
    ),
    Case(
        "argmax",
        lambda x, out=None: torch.argmax(x, 1, out=out) if out is not None else torch.argmax(x, 1),
        (randn(4, 3),),
        dtype_bad=torch.int32,
    ),
    Case(
        "var",
        lambda x, out=None: torch.var(x, 1, out=out) if out is not None else torch.var(x, 1),
        (randn(4, 3),),
    ),
    Case(
        "vector_norm",
        lambda x, out=None: torch.linalg.vector_norm(x, 2, 1, out=out)
        if out is not None
        else torch.linalg.vector_norm(x, 2, 1),
        (randn(4, 3),),
    ),
    Case(
        "norm",
        lambda x, out=None: torch.norm(x, 2, 1, out=out)
        if out is not None
        else torch.norm(x, 2, 1),
        (randn(4, 3),),
    ),
    Case(
        "logsumexp",
        lambda x, out=None: torch.logsumexp(x, 1, out=out)
        if out is not None
        else torch.logsumexp(x, 1),
        (randn(4, 3),),
    ),
    Case(
        "any",
        lambda x, out=None: torch.any(x, 1, out=out) if out is not None else torch.any(x, 1),
        (randn(4, 3) > 0,),
        dtype_bad=torch.float32,
    ),
    Case(
        "cumsum",
        lambda x, out=None: torch.cumsum(x, 1, out=out) if out is not None else torch.cumsum(x, 1),
        (randn(4, 3),),
        alias=(0,),
    ),
    Case(
        "cumprod",
        lambda x, out=None: torch.cumprod(x, 1, out=out)
        if out is not None
        else torch.cumprod(x, 1),
        (pos(4, 3),),
        alias=(0,),
    ),
    Case(
        "softmax",
        lambda x, out=None: torch.ops.aten._softmax.out(x, 1, False, out=out)
        if out is not None
        else torch.ops.aten._softmax(x, 1, False),
        (randn(4, 3),),
        alias=(0,),
        cpu_unsafe=("internal",),
    ),
    Case(
        "log_softmax",
        lambda x, out=None: torch.ops.aten._log_softmax.out(x, 1, False, out=out)
        if out is not None
        else torch.ops.aten._log_softmax(x, 1, False),
        (randn(4, 3),),
        alias=(0,),
        cpu_unsafe=("internal",),
    ),
    Case(
        "softmax_backward",
        lambda g, y, out=None: torch.ops.aten._softmax_backward_data.out(
            g, y, 1, torch.float32, grad_input=out
        )
        if out is not None
        else torch.ops.aten._softmax_backward_data(g, y, 1, torch.float32),
        (randn(4, 3), torch.softmax(randn(4, 3, seed=1), 1)),
        alias=(0, 1),
        cpu_unsafe=("internal",),
    ),
    # selection, sorting
    Case(
        "sort",
        lambda x, out=None: torch.sort(x, 1, out=out) if out is not None else torch.sort(x, 1),
        (randn(4, 3),),
        alias=(0,),
    ),
    Case(
        "topk",
        lambda x, out=None: torch.topk(x, 2, 1, out=out)
        if out is not None
        else torch.topk(x, 2, 1),
        (randn(4, 3),),
    ),
    Case(
        "kthvalue",
        lambda x, out=None: torch.kthvalue(x, 2, 1, out=out)
        if out is not None
        else torch.kthvalue(x, 2, 1),
        (randn(4, 3),),
    ),
    Case(
        "median",
        lambda x, out=None: torch.median(x, 1, out=out) if out is not None else torch.median(x, 1),
        (randn(4, 3),),
    ),
    Case(
        "nanmedian",
        lambda x, out=None: torch.nanmedian(x, 1, out=out)
        if out is not None
        else torch.nanmedian(x, 1),
        (randn(4, 3),),
    ),
    Case("tril", O(torch.tril), (randn(4, 3),), alias=(0,)),
    Case("triu", O(torch.triu), (randn(4, 3),), alias=(0,)),
    Case(
        "multinomial",
        lambda p, out=None: torch.multinomial(p, 2, out=out)
        if out is not None
        else torch.multinomial(p, 2),
        (pos(3, 4),),
        dtype_bad=torch.int32,
        random=True,
    ),
    # elementwise and friends
    Case("xlogy", O(torch.xlogy), (randn(4, 3), pos(4, 3, seed=1)), alias=(0, 1)),
    Case("sgn", O(torch.sgn), (randn(4, 3),), alias=(0,)),
    Case(
        "isin",
        O(torch.isin),
        (torch.arange(12).reshape(4, 3), torch.tensor([1, 5, 7])),
        dtype_bad=torch.int8,
    ),
    Case("add", O(torch.add), (randn(4, 3), randn(4, 3, seed=1)), alias=(0, 1)),
    Case(
        "clamp",
        lambda x, out=None: torch.clamp(x, -0.5, 0.5, out=out)
        if out is not None
        else torch.clamp(x, -0.5, 0.5),
        (randn(4, 3),),
        alias=(0,),
    ),
    Case(
        "where",
        lambda c, x, y, out=None: torch.where(c, x, y, out=out)
        if out is not None
        else torch.where(c, x, y),
        (randn(4, 3) > 0, randn(4, 3, seed=1), randn(4, 3, seed=2)),
        alias=(1, 2),
        partial_arg=1,
    ),
    Case(
        "addcmul",
        O(torch.addcmul),
        (randn(4, 3), randn(4, 3, seed=1), randn(4, 3, seed=2)),
        alias=(0, 1),
    ),
]


def _first(out):
    return out[0] if isinstance(out, (tuple, list)) else out


def _outs_like(ref, dev, first):
    """An out argument shaped like ``ref`` whose first tensor is ``first``."""
    if isinstance(ref, (tuple, list)):
        return (first,) + tuple(torch.empty(0, dtype=r.dtype, device=dev) for r in ref[1:])
    return first


def _build(case, scenario, dev, k=0):
    """(args, out, watched): the case's args on ``dev`` and the out for
    ``scenario``; ``watched`` are tensors whose contents are compared after."""
    args = [a.clone().to(dev) for a in case.args]  # copies: the CPU run writes its args
    ref = case.fn(*case.args)
    r0 = _first(ref)
    if scenario == "dtype":
        return args, _outs_like(ref, dev, torch.empty(0, dtype=case.dtype_bad, device=dev)), []
    if scenario == "internal":
        first = torch.zeros(1, dtype=r0.dtype, device=dev).expand(r0.shape)
        return args, _outs_like(ref, dev, first), [first]
    if scenario == "partial":
        a = case.args[k]
        buf = torch.zeros(max(a.numel(), r0.numel()) + 1, dtype=a.dtype, device=dev)
        args[k] = buf[: a.numel()].view(a.shape).copy_(a)
        first = buf[1 : 1 + r0.numel()].view(r0.shape)
        return args, _outs_like(ref, dev, first), [buf]
    if scenario == "alias":
        return args, _outs_like(ref, dev, args[k]), [args[k]]
    raise AssertionError(scenario)


def _call(case, args, out):
    try:
        return case.fn(*args, out=out), None
    except Exception as e:  # noqa: BLE001 - compared with CPU's below
        return None, e


def _as_list(r):
    return list(r) if isinstance(r, (tuple, list)) else [r]


def _fragment(msg):
    """The part of an error message both backends must share: its first line
    up to the first device- or dtype-specific detail."""
    line = msg.strip().splitlines()[0]
    return re.split(r"\bcpu\b|neuron|torch\.\w*Tensor|\b(?:Float|Char|Bool|Half|Long|Int)\b", line)[
        0
    ].strip()


OVERLAP = "unsupported operation: .* single memory location"


def compare(case, scenario, k=0):
    nargs, nout, nwatch = _build(case, scenario, DEV, k)
    nres, nerr = _call(case, nargs, nout)
    if scenario in case.cpu_unsafe:
        assert nerr is not None and re.search(OVERLAP, str(nerr)), f"neuron: {nerr!r}"
        return
    cargs, cout, cwatch = _build(case, scenario, "cpu", k)
    cres, cerr = _call(case, cargs, cout)
    if cerr is not None:
        assert nerr is not None, f"CPU raised {type(cerr).__name__}: {cerr}; neuron returned"
        assert isinstance(nerr, type(cerr)), (
            f"{type(nerr).__name__}: {nerr} (CPU: {type(cerr).__name__})"
        )
        frag = _fragment(str(cerr))
        assert frag and frag in str(nerr), f"neuron: {nerr!s}\nCPU: {cerr!s}"
        return
    if scenario in ("internal", "partial"):
        assert nerr is not None and re.search(OVERLAP, str(nerr)), f"neuron: {nerr!r}"
        assert isinstance(nerr, RuntimeError)
        return
    assert nerr is None, f"neuron raised {type(nerr).__name__}: {nerr}; CPU returned"
    if case.random:
        return
    if scenario == "alias":  # the functional result, in the returned tensors and in out
        expected = _as_list(case.fn(*case.args))
        for e, n in zip(expected + expected[:1], _as_list(nres) + [nwatch[0]]):
            torch.testing.assert_close(n.cpu(), e, equal_nan=True)
        return
    for c, n in zip(
        _as_list(cres) + _as_list(cout) + cwatch, _as_list(nres) + _as_list(nout) + nwatch
    ):
        torch.testing.assert_close(n.cpu(), c, equal_nan=True)


@pytest.mark.parametrize("case", CASES, ids=repr)
@pytest.mark.parametrize("scenario", ["dtype", "internal", "partial"])
def test_out_checked_like_cpu(case, scenario):
    compare(case, scenario, case.partial_arg if scenario == "partial" else 0)


ALIAS = [(c, k) for c in CASES for k in c.alias]


@pytest.mark.parametrize("case,k", ALIAS, ids=[f"{c.name}-arg{k}" for c, k in ALIAS])
def test_out_aliasing_input(case, k):
    compare(case, "alias", k)


@pytest.mark.parametrize("case", CASES, ids=repr)
def test_out_on_another_device_raises(case):
    args = [a.to(DEV) for a in case.args]
    ref = case.fn(*case.args)
    out = _outs_like(ref, "cpu", torch.empty(0, dtype=_first(ref).dtype))
    with pytest.raises(RuntimeError, match="device"):
        case.fn(*args, out=out)


def test_sort_out_aliasing_input():
    """torch.sort(x, out=(x, idx)) is legal on CPU and sorts x in place."""
    x = randn(5, 7)
    expected = torch.sort(x, 1)
    idx = torch.empty(0, dtype=torch.long)
    torch.sort(x, 1, out=(x, idx))
    d = randn(5, 7).to(DEV)
    didx = torch.empty(0, dtype=torch.long, device=DEV)
    torch.sort(d, 1, out=(d, didx))
    torch.testing.assert_close(d.cpu(), x)
    torch.testing.assert_close(d.cpu(), expected.values)
    torch.testing.assert_close(didx.cpu(), expected.indices)


FACTORIES = {
    "arange": (lambda out: torch.arange(4, out=out), torch.float32),
    "linspace": (lambda out: torch.linspace(0, 1, 4, out=out), torch.float32),
    "randperm": (lambda out: torch.randperm(4, out=out), torch.long),
}


@pytest.mark.parametrize("name", FACTORIES)
def test_factory_out_internal_overlap_raises(name):
    fn, dtype = FACTORIES[name]
    if name != "randperm":  # CPU's randperm writes an expanded out without the check
        with pytest.raises(RuntimeError, match=OVERLAP):
            fn(torch.zeros(1, dtype=dtype).expand(4))
    with pytest.raises(RuntimeError, match=OVERLAP):
        fn(torch.zeros(1, dtype=dtype, device=DEV).expand(4))


@pytest.mark.parametrize("dtype", [torch.int8, torch.bool, torch.float16, torch.float64])
def test_index_add_out_dtype_checked_like_cpu(dtype):
    x, src = randn(5, 3), randn(3, 3, seed=1)
    with pytest.raises(RuntimeError, match="Expected out tensor to have dtype float") as cpu:
        torch.index_add(x, 0, IDX3, src, out=torch.empty(0, dtype=dtype))
    with pytest.raises(RuntimeError) as dev:
        torch.index_add(
            x.to(DEV), 0, IDX3.to(DEV), src.to(DEV), out=torch.empty(0, dtype=dtype, device=DEV)
        )
    assert str(cpu.value) == str(dev.value)


def test_index_add_out_checks_device_and_overlap():
    x, src = randn(5, 3).to(DEV), randn(3, 3, seed=1).to(DEV)
    idx = IDX3.to(DEV)
    with pytest.raises(RuntimeError, match="device"):
        torch.index_add(x, 0, idx, src, out=torch.empty(0))
    with pytest.raises(RuntimeError, match="more than one element of the written-to tensor"):
        torch.index_add(x, 0, idx, src, out=torch.zeros(1, device=DEV).expand(5, 3))
    buf = torch.zeros(16, device=DEV)
    xs = buf[:15].view(5, 3).copy_(x)
    with pytest.raises(
        RuntimeError, match="some elements of the input tensor and the written-to tensor"
    ):
        torch.index_add(xs, 0, idx, src, out=buf[1:].view(5, 3))
    expected = torch.index_add(x.cpu(), 0, IDX3, src.cpu())
    torch.index_add(x, 0, idx, src, out=x)  # out is self: in place, as on CPU
    torch.testing.assert_close(x.cpu(), expected)


@pytest.mark.parametrize("dtype", [torch.int8, torch.bool, torch.float16])
def test_index_add_bad_out_dtype_leaves_neighbour_intact(dtype):
    """index_add with a narrower out must raise before writing: it used to
    write float32 elements (4 bytes per index step) into the out's 512-byte
    block, so index 128 landed on the next device tensor (7.0 became 10.0)."""
    n = 512 // torch.empty(0, dtype=dtype).element_size()
    x = torch.zeros(n, device=DEV)
    src = torch.full((1,), 3.0, device=DEV)
    idx = torch.tensor([128], device=DEV)
    t = torch.zeros(n, dtype=dtype, device=DEV)  # the right size: no reallocation
    neighbour = torch.full((4,), 7.0, device=DEV)
    with pytest.raises(RuntimeError, match="Expected out tensor to have dtype float"):
        torch.index_add(x, 0, idx, src, out=t)
    assert torch.equal(neighbour.cpu(), torch.full((4,), 7.0))
    assert torch.equal(t.cpu(), torch.zeros(n, dtype=dtype))
    with pytest.raises(RuntimeError, match="Expected out tensor to have dtype float"):
        torch.index_add(x.cpu(), 0, idx.cpu(), src.cpu(), out=torch.zeros(n, dtype=dtype))
