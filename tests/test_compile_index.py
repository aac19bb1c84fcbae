"""Index ops through torch.compile(backend="neuron") (lower_index.py): they
compile into bounds-checked loops (no host steps), fused with their
neighbours; an out-of-range index raises the op's PyTorch error at the call,
never reads or writes out of bounds; the embedding backward accumulates
duplicate rows like PyTorch."""

import pytest
import torch
import torch._dynamo
import torch.nn.functional as F

import torch_neuronx  # noqa: F401


@pytest.fixture(autouse=True)
def _fresh(tmp_path, monkeypatch):
    monkeypatch.setenv("TORCH_NEURONX_NEFF_CACHE_DIR", str(tmp_path / "cache"))
    torch._dynamo.reset()
    torch.neuron.reset_dynamo_metrics()
    yield
    torch._dynamo.reset()


def _compiled(fn):
    return torch.compile(fn, backend="neuron", fullgraph=True)


def test_embedding_forward_backward_no_host_steps():
    torch.manual_seed(0)
    w_cpu = torch.randn(11, 6, requires_grad=True)
    w = w_cpu.detach().to("neuron").requires_grad_()
    ids = torch.tensor([[1, 10, 3, 3], [0, 3, 5, 10]])  # duplicates accumulate in the backward
    pos = torch.randn(4, 6)

    def f(w, ids, pos):
        return (F.embedding(ids, w) + pos).tanh().sum()

    loss = _compiled(f)(w, ids.to("neuron"), pos.to("neuron"))
    loss.backward()
    ref = f(w_cpu, ids, pos)
    ref.backward()
    m = torch.neuron.get_dynamo_metrics()
    assert m["host_steps"] == 0 and m["fallback_graphs"] == 0, m
    torch.testing.assert_close(loss.cpu(), ref.detach(), atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(w.grad.cpu(), w_cpu.grad, atol=1e-5, rtol=1e-5)


def test_bf16_embedding_backward_sums_in_float32():
    """As PyTorch's decomposition (and Inductor) do: the sum of 300 rows is
    the float32 sum rounded once (CPU's eager kernel, summing in bf16 in its
    own order, gives 3.22 here)."""
    w = torch.zeros(3, 4, dtype=torch.bfloat16, device="neuron", requires_grad=True)
    ids = torch.zeros(300, dtype=torch.long)
    g = torch.full((300, 4), 0.01, dtype=torch.bfloat16)

    def f(w, ids, g):
        return (F.embedding(ids, w) * g).sum()

    _compiled(f)(w, ids.to("neuron"), g.to("neuron")).backward()
    expected = torch.zeros(3, 4)
    expected[0] = g.float().sum(0)
    torch.testing.assert_close(w.grad.cpu(), expected.bfloat16())


def test_gather_scatter_and_advanced_indexing_match_cpu():
    torch.manual_seed(1)
    x = torch.randn(5, 7)
    rows, cols = torch.tensor([0, -1, 3, 2]), torch.tensor([6, 0, -7, 2])
    t = torch.tensor([[6], [0], [3], [1], [2]])

    def f(x, rows, cols, t):
        picked = x[rows, cols] * 2  # index.Tensor, negative indices wrap
        nll = -torch.gather(x.log_softmax(1), 1, t).mean()  # gather fused into a reduction
        upd = torch.zeros(5, 7, device=x.device).scatter_add(1, t.expand(5, 3), x[:, :3])
        put = x.index_put((rows,), torch.ones(4, 7, device=x.device), accumulate=True)
        return picked, nll, upd, put

    got = _compiled(f)(*(a.to("neuron") for a in (x, rows, cols, t)))
    assert torch.neuron.get_dynamo_metrics()["host_steps"] == 0
    for g, e in zip(got, f(x, rows, cols, t)):
        torch.testing.assert_close(g.cpu(), e, atol=1e-5, rtol=1e-5)


def test_out_of_range_index_raises_like_pytorch():
    w = torch.randn(4, 3)
    emb = _compiled(lambda w, i: F.embedding(i, w) + 1)
    emb(w.to("neuron"), torch.tensor([0, 3]).to("neuron"))  # compiles; in range
    with pytest.raises(IndexError, match="index out of range in self"):
        emb(w.to("neuron"), torch.tensor([0, 4]).to("neuron"))
    with pytest.raises(IndexError, match="index out of range in self"):
        emb(w.to("neuron"), torch.tensor([-1, 0]).to("neuron"))  # embedding does not wrap
    gat = _compiled(lambda x, i: torch.gather(x, 1, i))
    with pytest.raises(RuntimeError, match="index 3 is out of bounds for dimension 1 with size 3"):
        gat(w.to("neuron"), torch.tensor([[0], [3], [1], [2]]).to("neuron"))
    idx = _compiled(lambda x, i: x[i])
    with pytest.raises(IndexError, match="index -5 is out of bounds for dimension 0 with size 4"):
        idx(w.to("neuron"), torch.tensor([1, -5]).to("neuron"))
    # The device is still usable, with the same compiled graphs.
    out = emb(w.to("neuron"), torch.tensor([2, 1]).to("neuron"))
    torch.testing.assert_close(out.cpu(), F.embedding(torch.tensor([2, 1]), w) + 1)


def test_cat_pad_arange_any_compile_without_host_steps():
    """The mask and label plumbing of HF transformers (arange, pad with -100,
    cat with a legacy empty tensor, any) and rotate_half's cat."""
    torch.manual_seed(2)
    x, y, ids = torch.randn(2, 3, 5), torch.randn(2, 3, 4), torch.randint(0, 9, (2, 16))

    def f(x, y, ids):
        dev = x.device
        return (
            torch.cat([-x[..., 2:], x[..., :2], y], -1),
            torch.arange(0, 16, device=dev).view(16, 1) <= torch.arange(16, device=dev),
            F.pad(ids, (0, 1), value=-100),
            torch.cat([torch.empty(0, device=dev), x.reshape(-1)]),
            (x > 0).any(-1, keepdim=True),
            (x > -3).all(),
            torch.arange(1.5, 4.0, 0.5, device=dev) * 2,
            F.pad(x, (1, 2, 0, 1)),
            # three and four padded dims: chains of two-dim pads
            F.pad(x, (1, 1, 1, 1, 1, 1), value=2.0),
            F.pad(x[None], (0, 1, 2, 0, 1, 1, 3, 0), value=-1.5),
            # six pieces, mixed dtypes: cats of up to 4, joined
            torch.cat(
                [
                    x,
                    y,
                    ids[:, None, :4].expand(2, 3, 4),
                    x * 2,
                    y,
                    ids[:, None, 4:9].expand(2, 3, 5),
                ],
                -1,
            ),
        )

    got = _compiled(f)(x.to("neuron"), y.to("neuron"), ids.to("neuron"))
    assert torch.neuron.get_dynamo_metrics()["host_steps"] == 0
    for g, e in zip(got, f(x, y, ids)):
        assert g.dtype == e.dtype
        torch.testing.assert_close(g.cpu(), e)


def test_slice_scatter_and_scalar_tensor_constants():
    """rotate_half's backward (slice_scatter) and HF's torch.tensor(1.0) - mask."""
    torch.manual_seed(3)
    x, s = torch.randn(2, 8), torch.randn(2, 3)

    def f(x, s):
        return (
            torch.slice_scatter(x, s, 1, 2, 5),
            torch.slice_scatter(x, s, 1, -3),
            # strided: positions 1, 4, 7 (and a negative start: 0, 3, 6)
            torch.slice_scatter(x, s, 1, 1, None, 3),
            torch.slice_scatter(x, s, 1, -8, 7, 3),
            torch.tensor(1.0) - x,
            x * torch.tensor(2),
        )

    got = _compiled(f)(x.to("neuron"), s.to("neuron"))
    assert torch.neuron.get_dynamo_metrics()["host_steps"] == 0
    for g, e in zip(got, f(x, s)):
        torch.testing.assert_close(g.cpu(), e)


def test_embedding_backward_skips_padding_idx():
    w_cpu = torch.randn(6, 3, requires_grad=True)
    w = w_cpu.detach().to("neuron").requires_grad_()
    ids = torch.tensor([[3, 1, 3], [5, 3, 1]])

    def f(w, ids):
        return (F.embedding(ids, w, padding_idx=3) * 1.5).sum()

    _compiled(f)(w, ids.to("neuron")).backward()
    f(w_cpu, ids).backward()
    assert torch.neuron.get_dynamo_metrics()["host_steps"] == 0
    torch.testing.assert_close(w.grad.cpu(), w_cpu.grad)


def test_scatter_reduce_and_boolean_mask_puts_compile_without_host_steps():
    """scatter_reduce (every reduction, with and without self; duplicate
    positions, a NaN source), the legacy scatter reduce= forms, and
    x[mask] = value (where; accumulate adds) lower natively."""
    g = torch.Generator().manual_seed(0)
    x = torch.randn(6, 5, generator=g)
    src = torch.randn(4, 5, generator=g)
    src[1, 2] = float("nan")
    idx = torch.randint(0, 6, (4, 5), generator=g)
    xi = torch.randint(-9, 9, (6, 5), generator=g)
    si = torch.randint(-9, 9, (4, 5), generator=g)
    mask, rows = x > 0, x[:, 0] > 0
    row = torch.randn(5, generator=g)

    def f(x, src, idx, xi, si, mask, rows, row):
        out = [
            x.scatter_reduce(0, idx, src, r, include_self=inc)
            for r in ("sum", "prod", "mean", "amax", "amin")
            for inc in (True, False)
        ]
        out += [
            xi.scatter_reduce(0, idx, si, r, include_self=inc)
            for r in ("mean", "amax", "prod")
            for inc in (True, False)
        ]
        out += [
            x.scatter(1, idx[:, :3] % 5, src, reduce="multiply"),
            x.scatter(0, idx, 2.0, reduce="add"),
        ]
        a, b, c = x.clone(), x.clone(), x.clone()
        a[mask] = 0.5
        b[rows] = row
        c.index_put_((rows,), row, accumulate=True)
        return out + [a, b, c]

    args = (x, src, idx, xi, si, mask, rows, row)
    got = _compiled(f)(*[t.to("neuron") for t in args])
    for e, r in zip(f(*args), got):
        torch.testing.assert_close(r.cpu(), e, equal_nan=True)
    assert torch.neuron.get_dynamo_metrics()["host_steps"] == 0


def test_boolean_mask_put_one_value_per_selected_element():
    """x[mask] = values with one value per selected element, and
    masked_scatter: the k-th selected element (row-major) takes value k, a
    prefix count of the mask computed in the graph; no host steps. A mask
    longer than a power of two checks the scan's last pass."""
    g = torch.Generator().manual_seed(0)
    x = torch.randn(37, 3, generator=g)
    rows = torch.rand(37, generator=g) > 0.4
    x4 = torch.randn(2, 3, 4, 5, generator=g)
    mid = torch.rand(3, 4, generator=g) > 0.5
    xm = torch.randn(6, 5, generator=g)
    mm = xm > 0
    cols = torch.tensor([True, False, True, True, False])
    v_rows = torch.randn(int(rows.sum()), 3, generator=g)
    v_mid = torch.randn(2, int(mid.sum()), 5, generator=g)
    v_flat = torch.randn(int((xm > 0).sum()), generator=g)
    src = torch.randn(40, generator=g)

    def f(x, rows, x4, mid, xm, mm, cols, v_rows, v_mid, v_flat, src):
        a, b, c, d = x.clone(), x4.clone(), xm.clone(), x.clone()
        a[rows] = v_rows
        b[:, mid] = v_mid
        c[mm] = v_flat
        d.index_put_((rows,), v_rows, accumulate=True)
        return a, b, c, d, xm.masked_scatter(mm, src), xm.masked_scatter(cols, src)

    args = (x, rows, x4, mid, xm, mm, cols, v_rows, v_mid, v_flat, src)
    got = _compiled(f)(*[t.to("neuron") for t in args])
    for e, r in zip(f(*args), got):
        torch.testing.assert_close(r.cpu(), e)
    assert torch.neuron.get_dynamo_metrics()["host_steps"] == 0


def test_boolean_mask_put_count_mismatch_raises_and_keeps_x():
    """The mask's count is known only when the graph runs: a count other
    than the values' size fails the call with eager's shape-mismatch error
    (never a read out of bounds) and the input x keeps its values; a
    masked_scatter source shorter than the count fails like eager."""

    def put(x, m, v):
        x[m] = v

    def scatter(x, m, s):
        return x.masked_scatter(m, s)

    x = torch.arange(12.0).reshape(4, 3).to("neuron")
    v = torch.ones(2, 3).to("neuron")
    fput, fscatter = _compiled(put), _compiled(scatter)
    fput(x, torch.tensor([True, False, True, False]).to("neuron"), v)
    expect = torch.arange(12.0).reshape(4, 3)
    expect[[0, 2]] = 1
    torch.testing.assert_close(x.cpu(), expect)
    for mask in ([True, True, True, False], [False] * 4, [False, True, False, False]):
        with pytest.raises(
            RuntimeError,
            match="shape mismatch: value tensor of size 2 along dimension 0 cannot be "
            f"broadcast to indexing result of {sum(mask)} selected elements",
        ):
            fput(x, torch.tensor(mask).to("neuron"), v)
        torch.testing.assert_close(x.cpu(), expect)
    s = torch.arange(5.0).to("neuron")
    torch.testing.assert_close(
        fscatter(x, (x > 6).to("neuron"), s).cpu(), expect.masked_scatter(expect > 6, s.cpu())
    )
    with pytest.raises(RuntimeError, match="Number of elements of source < number of ones in mask"):
        fscatter(x, x > 0, s)
    assert torch.neuron.get_dynamo_metrics()["host_steps"] == 0
