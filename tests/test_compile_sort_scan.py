"""sort, argsort, topk, cumsum/cumprod and histc under torch.compile(backend=
"neuron") are extern steps of the compiled program calling libtrn's eager
kernels (torch_neuronx/_compile/lower_sort_scan.py), not host steps: the
results are eager's bits (ties kept in input order, NaN sorting last, -0.0
equal to 0.0; cumsum's float64/int64 accumulation) for every dim, strided
and transposed inputs and the dtypes a router uses, and a MoE router whose
per-expert counts change every call compiles once. What the lowering does
not take (an inexact cast before a cumsum, a histc range taken from the
data) stays a host step and still matches eager."""

import pytest
import torch
import torch._dynamo

import torch_neuronx

DEV = "neuron"

# A cache of its own: a warm load would skip the lowering under test.
pytestmark = pytest.mark.usefixtures("fresh_compile_cache")


def _inputs(dtype, gen):
    x = torch.randint(-4, 5, (6, 9, 33), generator=gen).to(dtype)  # many ties
    if dtype.is_floating_point:
        x = x / 2
        x[0, 0, :4] = torch.tensor([float("nan"), -0.0, 0.0, float("inf")], dtype=dtype)
        x[1, 2, 5] = float("nan")
    return x


def _check(fn, *xs):
    torch_neuronx.clear_op_tracking()
    dev = [x.to(DEV) for x in xs]
    got = torch.compile(fn, backend="neuron")(*dev)
    want = fn(*dev)
    for g, w in zip(got, want):
        assert g.dtype == w.dtype and g.shape == w.shape
        assert torch.equal(
            g.cpu().view(torch.uint8) if g.is_floating_point() else g.cpu(),
            w.cpu().view(torch.uint8) if w.is_floating_point() else w.cpu(),
        )
    assert torch_neuronx.get_fallback_ops() == []
    return got


@pytest.mark.parametrize(
    "dtype", [torch.float32, torch.bfloat16, torch.float16, torch.float64, torch.int64, torch.int32]
)
def test_sort_topk_every_dim_bit_identical_no_host_step(dtype):
    gen = torch.Generator().manual_seed(0)
    x = _inputs(dtype, gen)

    def fn(x):
        out = []
        for d in (0, 1, -1):
            v, i = torch.sort(x, dim=d)
            out += [v, i]
            v, i = torch.sort(x, dim=d, descending=True, stable=True)
            out += [v, i]
            out.append(torch.argsort(x.transpose(0, 2), dim=d, stable=True))
            v, i = torch.topk(x, 3, dim=d)
            out += [v, i]
            v, i = torch.topk(x, 2, dim=d, largest=False)
            out += [v, i]
        v, i = torch.topk(x[:, ::2, 1:], 5, dim=-1)  # a strided view, read in place
        return out + [v, i]

    _check(fn, x)
    m = torch.neuron.get_dynamo_metrics()
    assert m["host_steps"] == 0 and m["fallback_graphs"] == 0, m
    assert m["extern_kernels"] == 16, m


@pytest.mark.parametrize(
    "dtype,out",
    [
        (torch.int64, None),
        (torch.int32, None),  # cumsum of int32 is int64 (an exact cast in the graph)
        (torch.bool, None),
        (torch.float32, None),
        (torch.bfloat16, None),
        (torch.float16, torch.float32),
        (torch.float64, None),
    ],
)
def test_cumsum_cumprod_bit_identical_no_host_step(dtype, out):
    gen = torch.Generator().manual_seed(1)
    x = _inputs(dtype, gen) if dtype != torch.bool else torch.rand(6, 9, 33, generator=gen) > 0.5

    def fn(x):
        r = [torch.cumsum(x, d, dtype=out) for d in (0, 1, 2)]
        r.append(torch.cumsum(x.transpose(0, 2)[::2], 1, dtype=out))
        if dtype != torch.bool:
            r.append(torch.cumprod(x * 0.5 if x.is_floating_point() else x % 3, -1))
        return r

    _check(fn, x)
    m = torch.neuron.get_dynamo_metrics()
    assert m["host_steps"] == 0 and m["fallback_graphs"] == 0, m
    assert m["extern_kernels"] == (4 if dtype == torch.bool else 5), m


def test_inexact_cast_before_cumsum_stays_a_host_step():
    x = torch.randn(40, generator=torch.Generator().manual_seed(2)) * 1e4

    def fn(x):
        return (torch.cumsum(x, 0, dtype=torch.int32),)

    _check(fn, x)
    assert torch.neuron.get_dynamo_metrics()["host_steps"] == 1


@pytest.mark.parametrize("dtype", [torch.int32, torch.int64, torch.float32, torch.bfloat16])
def test_histc_bit_identical_no_host_step(dtype):
    gen = torch.Generator().manual_seed(4)
    # expert ids, some out of range (Hugging Face's expert-parallel sentinels
    # fall past max and are not counted), on a strided view
    ids = torch.randint(-1, 10, (2, 97), generator=gen)
    x = ids.to(dtype) if not dtype.is_floating_point else ids.to(dtype) + 0.25

    def fn(x):
        return (
            torch.histc(x, bins=8, min=0, max=7),
            torch.histc(x[:, ::3], bins=5, min=-0.5, max=9.7),
            torch.histc(x.t(), bins=1, min=2, max=3),
        )

    _check(fn, x)
    m = torch.neuron.get_dynamo_metrics()
    assert m["host_steps"] == 0 and m["fallback_graphs"] == 0 and m["extern_kernels"] == 3, m


def test_histc_range_from_data_stays_a_host_step():
    x = torch.randn(50, generator=torch.Generator().manual_seed(5))

    def fn(x):
        return (torch.histc(x, bins=7),)  # min == max == 0: the data's extrema

    _check(fn, x)
    assert torch.neuron.get_dynamo_metrics()["host_steps"] == 1


def _router(probs, k):
    """A TorchTitan-style router's routing: top-k experts, tokens sorted by
    expert, cumulative counts as _grouped_mm's offs. (The softmax before it
    is generated code, which may differ from eager's in the last bit.)"""
    p, e = probs.topk(k, dim=-1)
    flat = e.reshape(-1)
    counts = (flat.unsqueeze(1) == torch.arange(probs.shape[-1], device=probs.device)).sum(0)
    order = flat.argsort(stable=True)
    return p, order, order // k, counts.cumsum(0).to(torch.int32)


def test_router_counts_change_without_recompile():
    gen = torch.Generator().manual_seed(3)
    f = torch.compile(_router, backend="neuron")
    seen = set()
    with torch._dynamo.config.patch(error_on_recompile=True):
        for step in range(4):
            # logits skewed differently each step: the per-expert counts change
            logits = torch.randn(64, 8, generator=gen) + torch.randn(8, generator=gen) * step
            ld = logits.softmax(-1).to(DEV)
            got, want = f(ld, 2), _router(ld, 2)
            for g, w in zip(got, want):
                assert torch.equal(g.cpu(), w.cpu())
            seen.add(tuple(got[3].tolist()))
    assert len(seen) == 4
    m = torch.neuron.get_dynamo_metrics()
    assert m["host_steps"] == 0 and m["fallback_graphs"] == 0 and m["extern_kernels"] == 3, m


def test_extern_steps_load_warm():
    """The warm cache replays a graph's builder calls (tape.py): a graph with
    every new extern step (sort, topk, cumsum, histc, _scaled_mm,
    _scaled_grouped_mm) compiled once loads warm after a reset - no
    lowering - and gives the same bits."""
    from torch_neuronx._compile import jobs

    gen = torch.Generator().manual_seed(6)
    x = torch.randn(16, 8, generator=gen)
    a8 = torch.randn(16, 32, generator=gen).to(torch.float8_e4m3fn)
    b8 = torch.randn(4, 24, 32, generator=gen).to(torch.float8_e4m3fn)
    sa, sb = torch.rand(16, generator=gen) + 0.5, torch.rand(4, 24, generator=gen) + 0.5

    def fn(x, a8, b8, sa, sb):
        v, i = x.topk(2, dim=-1)
        order = i.reshape(-1).argsort(stable=True)
        counts = torch.histc(i.reshape(-1).to(torch.int32), bins=8, min=0, max=7)
        offs = torch.cumsum(counts, 0, dtype=torch.int32)
        mm = torch._scaled_mm(a8, b8[0].t(), sa[:1], sb[0, :1], out_dtype=torch.float32)
        offs4 = torch.tensor([4, 8, 12, 16], dtype=torch.int32, device=x.device)
        g = torch._scaled_grouped_mm(a8, b8.transpose(-2, -1), sa, sb, offs=offs4)
        return v, order, offs, mm, g

    args = [t.to(DEV) for t in (x, a8, b8, sa, sb)]
    first = torch.compile(fn, backend="neuron")(*args)
    torch._dynamo.reset()
    jobs._memory_cache.clear()
    torch.neuron.reset_dynamo_metrics()
    again = torch.compile(fn, backend="neuron")(*args)
    m = torch.neuron.get_dynamo_metrics()
    assert m["warm_graphs"] == 1 and m["lowerings"] == 0 and m["extern_kernels"] == 6, m
    for p, q in zip(first, again):
        assert torch.equal(p.cpu(), q.cpu())
