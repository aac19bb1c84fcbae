"""Recurrent layers on neuron against PyTorch CPU, natively (no fallback):
nn.LSTM / nn.GRU / nn.RNN (1-2 layers, bidirectional, batch_first, initial
states, LSTM projections, packed sequences), nn.LSTMCell / GRUCell / RNNCell,
PyTorch's own ModuleInfo samples for all six, double backward, 16-bit and
float64 data, and the fused cell ops' errors. Outputs, final states and the
gradients of the input, the initial states and every parameter must match.

There is no OpInfo entry for these (op_db has none; they are ModuleInfos), so
tests/conformance/ops_rnn.py names none and this file is their conformance
test. LSTM / GRU reach _thnn_fused_lstm_cell / _thnn_fused_gru_cell (+ their
backwards); nn.RNN needs no fused op (matmul + tanh / relu)."""

import copy

import pytest
import torch
import torch.nn as nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

import torch_neuronx

FUSED = {
    nn.LSTM: "aten::_thnn_fused_lstm_cell",
    nn.LSTMCell: "aten::_thnn_fused_lstm_cell",
    nn.GRU: "aten::_thnn_fused_gru_cell",
    nn.GRUCell: "aten::_thnn_fused_gru_cell",
}
BACKWARD = {
    "aten::_thnn_fused_lstm_cell": "aten::_thnn_fused_lstm_cell_backward_impl",
    "aten::_thnn_fused_gru_cell": "aten::_thnn_fused_gru_cell_backward",
}


def _rand(*shape, seed=0, dtype=torch.float32):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=g).to(dtype)


def _flat(out):
    """The tensors of a module's output: (y, h) or (y, (h, c)), packed or not."""
    if isinstance(out, torch.Tensor):
        return [out]
    if isinstance(out, nn.utils.rnn.PackedSequence):
        return [out.data]
    return [t for o in out for t in _flat(o)]


def _run(module, inputs, device):
    """Forward on `device` (leaf copies of the CPU inputs), backward of a fixed
    weighted sum of every output; returns outputs and input / parameter grads."""
    leaves = [
        x.detach().clone().requires_grad_(x.is_floating_point())
        if isinstance(x, torch.Tensor)
        else x
        for x in inputs
    ]
    moved = [x.to(device) if isinstance(x, torch.Tensor) else x for x in leaves]
    outs = _flat(module(*moved))
    loss = sum(
        (o * _rand(*o.shape, seed=10 + i, dtype=o.dtype).to(device)).sum()
        for i, o in enumerate(outs)
    )
    loss.backward()
    grads = [x.grad for x in leaves if isinstance(x, torch.Tensor) and x.requires_grad]
    return (
        [o.detach().cpu() for o in outs],
        grads,
        {n: p.grad.cpu() for n, p in module.named_parameters()},
    )


def _compare(ref, inputs, tol=None, fused=None):
    """Runs a CPU module and its neuron copy on the same inputs; everything
    must match and nothing may fall back to the CPU."""
    tol = tol or {}
    dev = copy.deepcopy(ref).to("neuron")
    expected = _run(ref, inputs, "cpu")
    torch_neuronx.clear_op_tracking()
    got = _run(dev, inputs, "neuron")
    assert torch_neuronx.get_fallback_ops() == [], torch_neuronx.get_fallback_ops()
    if fused:
        ran = set(torch_neuronx.get_executed_ops())
        assert {fused, BACKWARD[fused]} <= ran, sorted(o for o in ran if "thnn" in o)
    for a, b in zip(got[0], expected[0]):
        torch.testing.assert_close(a, b, **tol)
    assert len(got[1]) == len(expected[1])
    for a, b in zip(got[1], expected[1]):
        torch.testing.assert_close(a, b, **tol)
    assert got[2].keys() == expected[2].keys()
    for name in expected[2]:
        torch.testing.assert_close(
            got[2][name], expected[2][name], **tol, msg=lambda m, name=name: f"{name}: {m}"
        )


LAYER_CONFIGS = [
    dict(num_layers=1),
    dict(num_layers=2, bidirectional=True, batch_first=True),
    dict(num_layers=2, bias=False, dropout=0.0),
]


@pytest.mark.parametrize("cls", [nn.LSTM, nn.GRU, nn.RNN])
@pytest.mark.parametrize("cfg", LAYER_CONFIGS, ids=["1layer", "2layer_bidir_bf", "nobias"])
def test_layers_match_cpu(cls, cfg):
    torch.manual_seed(0)
    m = cls(5, 7, **cfg)
    x = _rand(4, 3, 5, seed=1)
    _compare(m, [x], fused=FUSED.get(cls))


class _LstmWithState(nn.Module):
    """nn.LSTM with (h0, c0) passed as separate arguments (leaves for _run)."""

    def __init__(self, lstm):
        super().__init__()
        self.lstm = lstm

    def forward(self, x, h0, c0):
        return self.lstm(x, (h0, c0))


@pytest.mark.parametrize("cls", [nn.LSTM, nn.GRU, nn.RNN])
def test_initial_state_gradients(cls):
    torch.manual_seed(1)
    m = cls(4, 6, num_layers=2, bidirectional=True)
    x, h0, c0 = _rand(5, 2, 4, seed=2), _rand(4, 2, 6, seed=3), _rand(4, 2, 6, seed=4)
    if cls is nn.LSTM:
        _compare(_LstmWithState(m), [x, h0, c0], fused=FUSED[cls])
    else:
        _compare(m, [x, h0], fused=FUSED.get(cls))


@pytest.mark.filterwarnings("ignore:LSTM with projections")  # CPU reference notice
def test_lstm_projection():
    torch.manual_seed(2)
    _compare(
        nn.LSTM(4, 8, num_layers=2, proj_size=3, bidirectional=True),
        [_rand(6, 2, 4, seed=5)],
        fused=FUSED[nn.LSTM],
    )


class _Packed(nn.Module):
    """pack_padded_sequence -> rnn -> pad_packed_sequence, unsorted lengths."""

    def __init__(self, rnn, lengths):
        super().__init__()
        self.rnn, self.lengths = rnn, lengths

    def forward(self, x):
        packed = pack_padded_sequence(x, self.lengths, batch_first=True, enforce_sorted=False)
        y, h = self.rnn(packed)
        y, _ = pad_packed_sequence(y, batch_first=True)
        return y, h


@pytest.mark.parametrize("cls", [nn.LSTM, nn.GRU, nn.RNN])
def test_packed_sequences(cls):
    torch.manual_seed(3)
    m = cls(3, 5, num_layers=2, bidirectional=True, batch_first=True)
    _compare(_Packed(m, torch.tensor([3, 6, 1, 4])), [_rand(4, 6, 3, seed=6)], fused=FUSED.get(cls))


class _Unroll(nn.Module):
    """A cell stepped over a sequence, its state fed back (initial state given
    or not)."""

    def __init__(self, cell, with_state):
        super().__init__()
        self.cell, self.with_state = cell, with_state

    def forward(self, x, h0, c0):
        state = None
        if self.with_state:
            state = (h0, c0) if isinstance(self.cell, nn.LSTMCell) else h0
        outs = []
        for t in range(x.shape[0]):
            state = self.cell(x[t], state)
            outs.append(state[0] if isinstance(state, tuple) else state)
        return torch.stack(outs), state


@pytest.mark.parametrize("cls", [nn.LSTMCell, nn.GRUCell, nn.RNNCell])
@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("with_state", [True, False])
def test_cells(cls, bias, with_state):
    torch.manual_seed(4)
    cell = cls(4, 6, bias=bias)
    x, h0, c0 = _rand(3, 5, 4, seed=7), _rand(5, 6, seed=8), _rand(5, 6, seed=9)
    inputs = [x, h0, c0] if with_state else [x, None, None]
    _compare(_Unroll(cell, with_state), inputs, fused=FUSED.get(cls))


def test_unbatched_cell_input():
    torch.manual_seed(5)
    _compare(
        _Unroll(nn.GRUCell(3, 4), False), [_rand(2, 3, seed=1), None, None], fused=FUSED[nn.GRUCell]
    )


def _module_samples():
    from torch.testing._internal.common_modules import module_db

    names = ("RNNCell", "GRUCell", "LSTMCell", "RNN", "GRU", "LSTM")
    for info in module_db:
        if info.module_cls.__name__ in names:
            yield pytest.param(info, id=info.module_cls.__name__)


@pytest.mark.filterwarnings("ignore::FutureWarning")  # pytree deepcopy notice
@pytest.mark.parametrize("info", list(_module_samples()))
def test_module_info_samples(info):
    """Every sample of PyTorch's own ModuleInfo entries (sizes, bias,
    nonlinearity, proj_size, batch_first, bidirectional, unbatched input,
    given states)."""
    samples = info.module_inputs_func(
        info, device="cpu", dtype=torch.float32, requires_grad=False, training=True
    )
    for i, s in enumerate(samples):
        torch.manual_seed(i)
        m = info.module_cls(*s.constructor_input.args, **s.constructor_input.kwargs)
        args, kwargs = s.forward_input.args, s.forward_input.kwargs
        assert not kwargs
        flat, spec = torch.utils._pytree.tree_flatten(list(args))
        _compare(_Flattened(m, spec), flat)


class _Flattened(nn.Module):
    """Calls the module with the pytree-flattened arguments rebuilt, so that
    (h0, c0) tuples are leaves for _run."""

    def __init__(self, m, spec):
        super().__init__()
        self.m, self.spec = m, spec

    def forward(self, *flat):
        return self.m(*torch.utils._pytree.tree_unflatten(list(flat), self.spec))


def test_training_steps():
    """An LSTM + GRU sequence model trained with Adam on neuron follows CPU
    step by step (the issue's repro: these layers used to raise)."""
    torch.manual_seed(8)
    ref = nn.ModuleDict(
        {
            "lstm": nn.LSTM(4, 8, batch_first=True),
            "gru": nn.GRU(8, 6, bidirectional=True, batch_first=True),
            "head": nn.Linear(12, 3),
        }
    )
    dev = copy.deepcopy(ref).to("neuron")
    opts = [torch.optim.Adam(m.parameters(), lr=1e-2) for m in (ref, dev)]
    torch_neuronx.clear_op_tracking()
    for step in range(3):
        x, target = _rand(5, 7, 4, seed=20 + step), _rand(5, 7, 3, seed=40 + step)
        losses = []
        for m, opt, device in [(ref, opts[0], "cpu"), (dev, opts[1], "neuron")]:
            opt.zero_grad()
            h = m["gru"](m["lstm"](x.to(device))[0])[0]
            loss = nn.functional.mse_loss(m["head"](h), target.to(device))
            loss.backward()
            opt.step()
            losses.append(loss.item())
        assert losses[1] == pytest.approx(losses[0], rel=1e-5)
    for (name, p), (_, q) in zip(dev.named_parameters(), ref.named_parameters()):
        torch.testing.assert_close(p.detach().cpu(), q.detach(), msg=name)
    assert torch_neuronx.get_fallback_ops() == [], torch_neuronx.get_fallback_ops()


def test_double_backward_lstm_cell():
    """create_graph=True differentiates the fused backward itself (PyTorch's
    composite _thnn_differentiable_lstm_cell_backward)."""
    torch.manual_seed(6)
    cell = nn.LSTMCell(3, 4)
    dev = copy.deepcopy(cell).to("neuron")
    x = _rand(2, 3, seed=3)
    res = []
    for c, device in [(cell, "cpu"), (dev, "neuron")]:
        xx = x.clone().requires_grad_()
        h, cc = c(xx.to(device))
        (g,) = torch.autograd.grad((h * h).sum() + cc.sum(), xx, create_graph=True)
        (gg,) = torch.autograd.grad(g.pow(2).sum(), xx)
        res.append((g.detach().cpu(), gg.cpu()))
    torch.testing.assert_close(res[1], res[0])


@pytest.mark.filterwarnings("ignore:neuron computes float64")
@pytest.mark.parametrize("dtype", [torch.float64, torch.bfloat16, torch.float16])
@pytest.mark.parametrize("cls", [nn.LSTM, nn.GRU])
def test_dtypes(cls, dtype):
    """float64 matches CPU to float32 precision (neuron computes float64
    elementwise ops and matmuls in float32 by default, as TorchNeuron does; the
    cell itself uses double); 16-bit data (float accumulation inside the
    cell) stays within 16-bit rounding of a float32 reference of the same
    rounded weights and input."""
    torch.manual_seed(7)
    m = cls(4, 6, num_layers=2).to(dtype)
    x = _rand(5, 3, 4, seed=2, dtype=dtype)
    if dtype == torch.float64:
        _compare(m, [x], dict(rtol=1.3e-6, atol=1e-5), fused=FUSED[cls])
        return
    dev = copy.deepcopy(m).to("neuron")
    torch_neuronx.clear_op_tracking()
    y = dev(x.to("neuron"))[0]
    y.float().sum().backward()
    assert torch_neuronx.get_fallback_ops() == []
    ref = copy.deepcopy(m).float()
    yr = ref(x.float())[0]
    yr.sum().backward()
    tol = dict(atol=2e-2, rtol=2e-2) if dtype == torch.bfloat16 else dict(atol=2e-3, rtol=2e-3)
    assert y.dtype == dtype
    torch.testing.assert_close(y.float().cpu(), yr, **tol)
    for (name, p), (_, q) in zip(dev.named_parameters(), ref.named_parameters()):
        scale = q.grad.abs().max().item() + 1
        torch.testing.assert_close(p.grad.float().cpu() / scale, q.grad / scale, msg=name, **tol)


def test_fused_op_errors():
    """Bad operands raise PyTorch errors with the op's name, never crash."""
    n = lambda *s, dtype=torch.float32: torch.randn(*s).to(dtype).to("neuron")  # noqa: E731
    lstm, gru = torch.ops.aten._thnn_fused_lstm_cell, torch.ops.aten._thnn_fused_gru_cell
    with pytest.raises(RuntimeError, match="_thnn_fused_lstm_cell.*hidden_gates"):
        lstm(n(2, 8), n(2, 4), n(2, 2))
    with pytest.raises(RuntimeError, match="_thnn_fused_lstm_cell.*prev_hidden"):
        lstm(n(2, 8), n(2, 8), n(2, 3))
    with pytest.raises(RuntimeError, match="_thnn_fused_gru_cell.*input_bias"):
        gru(n(2, 6), n(2, 6), n(2, 2), n(5), n(6))
    with pytest.raises(RuntimeError, match="both be given"):
        gru(n(2, 6), n(2, 6), n(2, 2), n(6), None)
    with pytest.raises(RuntimeError, match="not implemented for 'Long'"):
        lstm(n(2, 8, dtype=torch.long), n(2, 8, dtype=torch.long), n(2, 2, dtype=torch.long))
    with pytest.raises(RuntimeError, match="dtype"):
        gru(n(2, 6), n(2, 6, dtype=torch.float64), n(2, 2))
    with pytest.raises(RuntimeError, match="workspace"):
        torch.ops.aten._thnn_fused_gru_cell_backward(n(2, 2), n(2, 9), True)
    with pytest.raises(RuntimeError, match="workspace"):
        torch.ops.aten._thnn_fused_lstm_cell_backward_impl(
            n(2, 2), None, n(2, 2), n(2, 2), n(2, 7), True
        )
    # No output gradient at all: nothing flows back (undefined results).
    out = torch.ops.aten._thnn_fused_lstm_cell_backward_impl(
        None, None, n(2, 2), n(2, 2), n(2, 8), True
    )
    assert all(t is None for t in out)


def test_fused_ops_direct_and_empty_batch():
    """The ops called directly (as autograd does) against a float64 CPU
    reference of the cell equations, including an empty batch."""
    ig, hg, bi, bh = (
        _rand(3, 12, seed=1),
        _rand(3, 12, seed=2),
        _rand(12, seed=3),
        _rand(12, seed=4),
    )
    cx = _rand(3, 3, seed=5)
    hy, cy, ws = torch.ops.aten._thnn_fused_lstm_cell(
        *(t.to("neuron") for t in (ig, hg, cx, bi, bh))
    )
    i, f, g, o = (ig + hg + bi + bh).double().chunk(4, 1)
    c_ref = f.sigmoid() * cx.double() + i.sigmoid() * g.tanh()
    torch.testing.assert_close(cy.cpu().double(), c_ref, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(hy.cpu().double(), o.sigmoid() * c_ref.tanh(), rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(
        ws.cpu().double(),
        torch.cat([i.sigmoid(), f.sigmoid(), g.tanh(), o.sigmoid()], 1),
        rtol=1e-5,
        atol=1e-6,
    )
    e = torch.empty(0, 6, device="neuron")
    hy, ws = torch.ops.aten._thnn_fused_gru_cell(e, e, torch.empty(0, 2, device="neuron"))
    assert hy.shape == (0, 2) and ws.shape == (0, 10)
    gi, gh, ghx, gbi, gbh = torch.ops.aten._thnn_fused_gru_cell_backward(
        torch.empty(0, 2, device="neuron"), ws, True
    )
    assert gi.shape == gh.shape == (0, 6) and ghx.shape == (0, 2)
    assert torch.equal(gbi.cpu(), torch.zeros(6)) and torch.equal(gbh.cpu(), torch.zeros(6))
