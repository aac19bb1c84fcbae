"""torch._scaled_mm under torch.compile(backend="neuron") is an extern step
of the compiled program calling libtrn's scaled-mm kernel
(torch_neuronx/_compile/lower_scaled_mm.py), not a host step: tensorwise and
rowwise float32 scales, MX (e8m0 scales per 32, swizzled), a bias, every
output dtype, row- and column-major mat2 and mixed float8 formats give
eager's bits. (Calls eager would not compute natively - scale_result,
other scale shapes or dtypes - stay host steps, where eager's op runs.)"""

import pytest
import torch

import torch_neuronx

DEV = "neuron"

# A cache of its own: a warm load would skip the lowering under test.
pytestmark = pytest.mark.usefixtures("fresh_compile_cache")


def _f8(shape, dtype, gen):
    return (torch.randn(shape, generator=gen) * 3).to(dtype)


def _same(got, want):
    assert got.dtype == want.dtype and got.shape == want.shape
    assert torch.equal(got.cpu().view(torch.uint8), want.cpu().view(torch.uint8))


def _run(fn, *xs):
    torch_neuronx.clear_op_tracking()
    dev = [x.to(DEV) for x in xs]
    got = torch.compile(fn, backend="neuron")(*dev)
    want = fn(*dev)
    for g, w in zip(got, want):
        _same(g, w)
    assert torch_neuronx.get_fallback_ops() == []
    return torch.neuron.get_dynamo_metrics()


@pytest.mark.parametrize("out_dtype", [torch.bfloat16, torch.float32, torch.float16])
@pytest.mark.parametrize(
    "fa,fb", [(torch.float8_e4m3fn, torch.float8_e4m3fn), (torch.float8_e4m3fn, torch.float8_e5m2)]
)
def test_tensorwise_rowwise_bias_bit_identical_no_host_step(out_dtype, fa, fb):
    gen = torch.Generator().manual_seed(0)
    m, k, n = 37, 80, 48
    a = _f8((m, k), fa, gen)
    b_cm = _f8((n, k), fb, gen)  # used as b_cm.t(): column-major mat2, as torchao passes it
    b_rm = _f8((k, n), fb, gen)
    s1, s2 = torch.rand(1, generator=gen) + 0.5, torch.rand(1, generator=gen) + 0.5
    ra, rb = torch.rand(m, 1, generator=gen) + 0.5, torch.rand(1, n, generator=gen) + 0.5
    bias = torch.randn(n, generator=gen).to(
        out_dtype if out_dtype != torch.float16 else torch.float16
    )

    def fn(a, b_cm, b_rm, s1, s2, ra, rb, bias):
        return (
            torch._scaled_mm(a, b_cm.t(), s1, s2, out_dtype=out_dtype),
            torch._scaled_mm(a, b_rm, ra, rb, out_dtype=out_dtype, use_fast_accum=True),
            torch._scaled_mm(a, b_cm.t(), ra, rb, bias=bias, out_dtype=out_dtype),
            torch._scaled_mm(a[::2], b_rm[:, 1:], s1, s2, out_dtype=out_dtype),
        )

    m_ = _run(fn, a, b_cm, b_rm, s1, s2, ra, rb, bias)
    assert m_["host_steps"] == 0 and m_["extern_kernels"] == 4 and m_["fallback_graphs"] == 0, m_


def test_float8_output_and_graph_made_operands():
    gen = torch.Generator().manual_seed(1)
    x = torch.randn(32, 64, generator=gen)
    w = torch.randn(16, 64, generator=gen)

    def fn(x, w):
        # the float8 operands and the scales are computed in the graph
        sx = x.abs().amax() / 448
        sw = w.abs().amax() / 448
        xf = (x / sx).to(torch.float8_e4m3fn)
        wf = (w / sw).to(torch.float8_e4m3fn)
        return (
            torch._scaled_mm(xf, wf.t(), sx.reshape(1), sw.reshape(1), out_dtype=torch.float32),
            torch._scaled_mm(
                xf, wf.t(), sx.reshape(1), sw.reshape(1), out_dtype=torch.float8_e4m3fn
            ),
        )

    m_ = _run(fn, x, w)
    assert m_["host_steps"] == 0 and m_["extern_kernels"] == 2, m_


def test_mx_bit_identical_no_host_step():
    to_blocked = pytest.importorskip("torchao.prototype.mx_formats.utils").to_blocked
    gen = torch.Generator().manual_seed(2)
    m, k, n = 40, 96, 24
    a = _f8((m, k), torch.float8_e4m3fn, gen)
    b = _f8((n, k), torch.float8_e5m2, gen)
    kb = k // 32
    sa = to_blocked(
        torch.randint(118, 136, (m, kb), generator=gen, dtype=torch.uint8).view(
            torch.float8_e8m0fnu
        )
    )
    sb = to_blocked(
        torch.randint(118, 136, (n, kb), generator=gen, dtype=torch.uint8).view(
            torch.float8_e8m0fnu
        )
    )
    bias = torch.randn(n, generator=gen)

    def fn(a, b, sa, sb, bias):
        return (
            torch._scaled_mm(a, b.t(), sa, sb, out_dtype=torch.bfloat16),
            torch._scaled_mm(a, b.t(), sa, sb, bias=bias, out_dtype=torch.float32),
        )

    m_ = _run(fn, a, b, sa, sb, bias)
    assert m_["host_steps"] == 0 and m_["extern_kernels"] == 2, m_


def test_scales_made_in_the_graph_as_views():
    gen = torch.Generator().manual_seed(3)
    a = _f8((8, 32), torch.float8_e4m3fn, gen)
    b = _f8((16, 32), torch.float8_e4m3fn, gen)
    sa = torch.rand(8, 1, generator=gen) + 0.5
    sb_col = torch.rand(16, 1, generator=gen) + 0.5

    def fn(a, b, sa, sb):
        return (
            # rowwise scale_b from a transposed copy; tensorwise from 1-element slices
            torch._scaled_mm(a, b.t(), sa, sb.t().contiguous(), out_dtype=torch.float32),
            torch._scaled_mm(a, b.t(), sa.reshape(-1)[:1], sb[:1, 0], out_dtype=torch.float32),
        )

    m_ = _run(fn, a, b, sa, sb_col)
    assert m_["host_steps"] == 0 and m_["extern_kernels"] == 2, m_
