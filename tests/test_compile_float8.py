"""float8 values in generated code (libtrn compiler: graph.c takes the
8-bit float dtypes, render_text.c converts them with trn/convert.h, the
eager conversions' one definition). Under torch.compile(backend="neuron")
casts to float8 (from float32, bfloat16, float16) and back to float32, and
copies of float8 values, run inside compiled kernels - no host steps - and
give the same bits as eager, NaN/inf/saturation/-0 included. What generated
code refuses (float8 -> float16/bfloat16/integers, arithmetic, amax) runs
as host steps, still bit-identical. A TorchAO tensorwise float8 training
step compiles with no host step for its casts and matches eager bit for
bit."""

import copy

import pytest
import torch
import torch._dynamo
import torch.nn as nn

import torch_neuronx
import torch_neuronx._compile.lower as lower

DEV = "neuron"
FP8 = [
    torch.float8_e4m3fn,
    torch.float8_e5m2,
    torch.float8_e4m3fnuz,
    torch.float8_e5m2fnuz,
    torch.float8_e8m0fnu,
]


@pytest.fixture(autouse=True)
def _fresh(tmp_path, monkeypatch):
    monkeypatch.setenv("TORCH_NEURONX_NEFF_CACHE_DIR", str(tmp_path / "cache"))
    torch._dynamo.reset()
    torch.neuron.reset_dynamo_metrics()
    yield
    torch._dynamo.reset()


@pytest.fixture
def host_ops(monkeypatch):
    """The targets lowered as host steps (a spy on Lowerer.host_step)."""
    seen = []
    orig = lower.Lowerer.host_step

    def spy(self, node):
        seen.append(str(node.target))
        return orig(self, node)

    monkeypatch.setattr(lower.Lowerer, "host_step", spy)
    return seen


def _bits(t):
    t = t.detach().cpu()
    return t.view(torch.uint8) if t.element_size() == 1 else t.view(torch.int32)


def _values(src):
    """Every rounding region: a dense sweep over the 8-bit formats' range,
    both signs, and the special values."""
    mags = torch.logspace(-42, 17, 6000, base=2.0)
    x = torch.cat([mags, -mags, torch.randn(2000) * 500])
    special = [float("nan"), float("inf"), -float("inf"), 0.0, -0.0, 448.0, 449.0, 464.0]
    special += [57344.0, 61440.0, 240.0, 248.0, 2.0**-127, 3.0 * 2.0**-128, 1e38, 65504.0]
    return torch.cat([x, torch.tensor(special)]).to(src)


@pytest.mark.parametrize("dtype", FP8, ids=str)
@pytest.mark.parametrize("src", [torch.float32, torch.bfloat16, torch.float16], ids=str)
def test_casts_compile_bit_identical(dtype, src):
    def f(x):
        y = (x * 2).to(dtype)  # fused: multiply, round to 8 bits
        return y, y.to(torch.float32) - 1, y.clone()

    x = _values(src).to(DEV)
    got = torch.compile(f, backend=DEV, fullgraph=True)(x)
    want = f(x)
    m = torch.neuron.get_dynamo_metrics()
    assert m["host_steps"] == 0 and m["fallback_graphs"] == 0, m
    for g, w in zip(got, want):
        assert g.dtype == w.dtype
        assert torch.equal(_bits(g), _bits(w))


def test_float8_input_copies_keep_every_code(host_ops):
    # e5m2 has several NaN codes: a copy in generated code moves the byte.
    codes = torch.arange(256, dtype=torch.uint8).repeat(3)

    def f(a, b):
        return a.t().contiguous().t(), b.to(torch.float32), b[::2].clone()

    for d in FP8:
        torch._dynamo.reset()
        a = codes.view(d).reshape(48, 16).to(DEV)
        b = codes.view(d).to(DEV)
        got = torch.compile(f, backend=DEV, fullgraph=True)(a, b)
        want = f(a, b)
        for g, w in zip(got, want):
            assert torch.equal(_bits(g), _bits(w)), d
    assert host_ops == []


def test_refused_float8_ops_run_as_host_steps(host_ops):
    def f(x):
        y = x.to(torch.float8_e4m3fn)
        return y.to(torch.bfloat16), y.to(torch.int32), y.abs(), y.amax()

    x = (torch.randn(64) * 100).to(DEV)
    x[0] = float("nan")
    got = torch.compile(f, backend=DEV, fullgraph=True)(x)
    want = f(x)
    for g, w in zip(got, want):
        assert g.dtype == w.dtype and torch.equal(_bits(g.float()), _bits(w.float()))
    assert torch.neuron.get_dynamo_metrics()["fallback_graphs"] == 0
    assert sorted(set(host_ops)) == [
        "aten._to_copy.default",
        "aten.abs.default",
        "aten.amax.default",
    ]


class _MLP(nn.Module):
    def __init__(self, dim=64, hidden=128):
        super().__init__()
        self.up = nn.Linear(dim, hidden, bias=False)
        self.down = nn.Linear(hidden, dim, bias=False)

    def forward(self, x):
        return self.down(torch.relu(self.up(x)))


def test_torchao_tensorwise_step_compiled_no_host_step(host_ops):
    torchao_float8 = pytest.importorskip("torchao.float8")
    torch.manual_seed(0)
    base = _MLP().to(DEV)
    results = []
    for compile_it in (False, True):
        model = copy.deepcopy(base)
        torchao_float8.convert_to_float8_training(
            model, config=torchao_float8.Float8LinearConfig.from_recipe_name("tensorwise")
        )
        fwd = torch.compile(model, backend=DEV) if compile_it else model
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        g = torch.Generator().manual_seed(1)
        losses = []
        for _ in range(2):
            x = torch.randn(32, 64, generator=g).to(DEV)
            loss = fwd(x).pow(2).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
            losses.append(loss.detach().cpu())
        results.append((losses, {k: v.detach().cpu() for k, v in model.state_dict().items()}))
    (eager_l, eager_p), (comp_l, comp_p) = results
    # No host step: the casts are generated code, the float8 matmuls extern
    # steps calling the scaled-mm kernel (lower_scaled_mm.py).
    assert host_ops == [], host_ops
    m = torch.neuron.get_dynamo_metrics()
    assert m["fallback_graphs"] == 0 and m["extern_kernels"] > 0, m
    for a, b in zip(comp_l, eager_l):
        assert torch.equal(_bits(a), _bits(b))
    for name, p in eager_p.items():
        assert torch.equal(_bits(comp_p[name]), _bits(p)), name


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.int64], ids=str)
def test_max_min_all_dims_compile(dtype, host_ops):
    # torch.max(x) / torch.min(x) (torchao's amax) lower like amax/amin:
    # no host step, the values of PyTorch CPU (NaN wins).
    def f(x):
        return torch.max(x.abs()), torch.min(x), torch.max(x[:, 1:])

    x = (torch.randn(37, 9) * 100).to(dtype)
    if dtype.is_floating_point:
        x[3, 0] = float("nan")
    got = torch.compile(f, backend=DEV, fullgraph=True)(x.to(DEV))
    for g, w in zip(got, f(x)):
        assert g.dtype == w.dtype
        torch.testing.assert_close(g.cpu(), w, equal_nan=True, rtol=0, atol=0)
    assert host_ops == []
