"""Indexing / data-movement ops on neuron against PyTorch CPU: dtypes,
non-contiguous and zero-size inputs, out-of-range errors (exception type as
on CPU, process survives), and no CPU fallback."""

import pytest
import torch

import torch_neuronx

DTYPES = [torch.float32, torch.bfloat16, torch.int64, torch.int32, torch.bool, torch.uint8]


def make(shape, dtype, seed=0):
    g = torch.Generator().manual_seed(seed)
    if dtype == torch.bool:
        return torch.rand(shape, generator=g) > 0.5
    if dtype.is_floating_point:
        return (torch.randn(shape, generator=g) * 10).to(dtype)
    return torch.randint(0, 100, shape, generator=g).to(dtype)


def N(t):
    return t.to("neuron") if isinstance(t, torch.Tensor) else t


def check(fn, *args, **kwargs):
    expected = fn(*args, **kwargs)
    dev_args = [
        N(a) if not isinstance(a, (list, tuple)) else type(a)(N(x) for x in a) for a in args
    ]
    torch_neuronx.clear_op_tracking()
    got = fn(*dev_args, **{k: N(v) for k, v in kwargs.items()})
    assert torch_neuronx.get_fallback_ops() == []
    # bfloat16 sums may round differently when duplicates accumulate in
    # another (still fixed) order than the CPU kernel's
    tol = dict(atol=0.25, rtol=0.016) if expected.dtype == torch.bfloat16 else {}
    torch.testing.assert_close(got.cpu(), expected, equal_nan=True, **tol)


@pytest.mark.parametrize("dtype", DTYPES)
def test_index_select_gather_index(dtype):
    x = make((6, 7), dtype)
    idx = torch.tensor([5, 0, 2, 2])
    check(lambda t, i: t.index_select(0, i), x, idx)
    check(lambda t, i: t.index_select(1, i), x.t(), idx)  # non-contiguous
    check(lambda t, i: t.index_select(1, i), x, idx.to(torch.int32))
    g = torch.tensor([[0, 6, 3], [1, 1, 2]])
    check(lambda t, i: t.gather(1, i), x, g)
    check(lambda t, i: t.gather(0, i), x[:, ::2], g.clamp(max=3))
    check(lambda t, i: t[i], x, torch.tensor([[-1, 0], [3, -6]]))  # negative wraps
    check(
        lambda t, i, j: t[i, :, j],
        make((4, 5, 6), dtype),
        torch.tensor([0, 3]),
        torch.tensor([[5], [-1]]),
    )
    check(lambda t, m: t[m], x, make((6, 7), torch.bool, 1))
    check(lambda t, i: t[:, i], x, torch.tensor([], dtype=torch.long))  # zero-size
    check(
        lambda t, i: t.index_select(0, i), make((0, 3), dtype), torch.tensor([], dtype=torch.long)
    )


@pytest.mark.parametrize("dtype", DTYPES)
def test_scatter_family(dtype):
    x = make((4, 5), dtype)
    src = make((4, 5), dtype, 1)
    idx = torch.tensor([[0, 1, 2, 3, 0], [3, 3, 3, 0, 0]])
    check(lambda t, i, s: t.scatter(0, i, s), x, idx, src)
    check(lambda t, i: t.scatter(1, i, 1), x, idx.clamp(max=4))
    check(lambda t, i, s: t.scatter_add(0, i, s), x, idx, src)
    check(lambda t, i, s: t.t().scatter_add(1, i, s), x.t().contiguous(), idx, src)
    for red in ["sum", "prod", "amax", "amin", "mean"]:
        if dtype == torch.bool and red == "mean":
            continue
        for inc in [True, False]:
            check(lambda t, i, s: t.scatter_reduce(0, i, s, red, include_self=inc), x, idx, src)
    if dtype != torch.bool:
        check(lambda t, i, s: t.scatter(0, i, s, reduce="multiply"), x, idx, src)
    check(lambda t, i, s: t.index_add(0, i, s), x, torch.tensor([3, 0, 3, 1]), src)


@pytest.mark.parametrize("dtype", DTYPES)
def test_index_put_masks_cat(dtype):
    x = make((5, 3), dtype)
    v = make((3,), dtype, 2)

    def put(t, i, v, acc):
        t = t.clone()
        t.index_put_((i,), v, accumulate=acc)
        return t

    check(put, x, torch.tensor([4, 0, 4, -1]), v, True)
    check(put, x, torch.tensor([4, 0]), v, False)
    m = make((5, 3), torch.bool, 3)
    check(lambda t, m: t.masked_fill(m, 1), x, m)
    check(lambda t, m: t.t().masked_fill(m, 0), x, m.t())
    check(lambda t, m: t.masked_select(m), x, m[:1])  # mask broadcasts
    check(lambda t: t.nonzero(), x.t())
    check(lambda t: t.nonzero(), x[:0])
    check(lambda a, b: torch.cat([a, b, a[:0]], 0), x, x[::2])
    check(lambda a, b: torch.cat([a, b], 1), x, x.t().contiguous().t())


def test_embedding_forward_backward():
    w = torch.randn(10, 4)
    idx = torch.tensor([[1, 2, 2], [9, 0, 2]])
    check(lambda w, i: torch.nn.functional.embedding(i, w), w, idx)
    g = torch.randn(2, 3, 4)
    check(lambda g, i: torch.ops.aten.embedding_dense_backward(g, i, 10, 2, False), g, idx)


@pytest.mark.parametrize(
    "case",
    ["index", "index_put", "gather", "scatter", "index_select0", "index_select1", "index_add"],
)
def test_out_of_range_raises_like_cpu(case):
    ops = {
        "index": lambda t, i: t[i],
        "index_put": lambda t, i: t.index_put_((i,), torch.tensor(1.0, device=t.device)),
        "gather": lambda t, i: t.gather(1, i.view(1, 1)),
        "scatter": lambda t, i: t.scatter_(1, i.view(1, 1), 1.0),
        "index_select0": lambda t, i: t.index_select(0, i),
        "index_select1": lambda t, i: t.index_select(1, i),
        "index_add": lambda t, i: t.index_add_(0, i, t[:1]),
    }
    fn = ops[case]
    i = torch.tensor([7])
    with pytest.raises(Exception) as cpu:
        fn(torch.zeros(3, 5), i)
    with pytest.raises(Exception) as dev:
        fn(torch.zeros(3, 5, device="neuron"), N(i))
    assert type(dev.value) is type(cpu.value)
    assert str(dev.value).splitlines()[0] == str(cpu.value).splitlines()[0]
    # the device still works afterwards
    assert N(torch.arange(3.0))[N(torch.tensor([2]))].cpu().item() == 2.0


def test_cat_functional_layout_promotion_and_devices():
    # The functional cat kernel allocates its output as PyTorch's meta function
    # declares it: channels_last inputs give a channels_last result, mixed
    # dtypes promote, a KV-cache append matches CPU bit for bit, and a CPU
    # input raises instead of being read from the wrong device.
    torch_neuronx.clear_op_tracking()
    a = torch.randn(2, 3, 4, 5).to(memory_format=torch.channels_last)
    b = torch.randn(2, 3, 4, 5).to(memory_format=torch.channels_last)
    want = torch.cat([a, b], 1)
    got = torch.cat([a.to("neuron"), b.to("neuron")], 1)
    assert got.stride() == want.stride()
    assert torch.equal(got.cpu(), want)
    got = torch.cat([a.half().to("neuron"), b.to("neuron")], 0)
    assert got.dtype == torch.float32
    assert torch.equal(got.cpu(), torch.cat([a.half(), b], 0))
    cache, new = torch.randn(1, 4, 20, 64), torch.randn(1, 4, 1, 64)
    got = torch.cat([cache.to("neuron"), new.to("neuron")], dim=-2)
    assert torch.equal(got.cpu(), torch.cat([cache, new], dim=-2))
    assert "aten::cat" not in torch_neuronx.get_fallback_ops()
    with pytest.raises(RuntimeError, match="same device"):
        torch.cat([a.to("neuron"), b], 0)


@pytest.mark.parametrize(
    "shapes,dim",
    [
        (((512, 1024), (512, 1024)), -1),  # wide rows: split by rows of the output
        (((8, 64, 688), (8, 64, 100)), -1),
        (((3, 5, 40000), (3, 2, 40000)), 1),  # outer dims too short: split inside the rows
        (((70000, 3), (50000, 3)), 0),
        (((8, 64, 128), (8, 64, 128)), -1),  # 256 KiB inputs: split since session 31
        (((8, 64, 128), (8, 64, 128)), 0),
    ],
)
def test_cat_large_inputs_split_across_threads(shapes, dim):
    # Inputs past cat.c's parallel threshold (128 KiB), contiguous and
    # transposed, match CPU bit for bit whichever dim the pieces split.
    gen = torch.Generator().manual_seed(0)
    ins = [torch.randn(s, generator=gen) for s in shapes]
    ins.append(torch.randn(tuple(reversed(shapes[0])), generator=gen).transpose(0, -1))
    want = torch.cat(ins, dim)
    got = torch.cat([t.to("neuron") for t in ins], dim)
    assert torch.equal(got.cpu(), want)


@pytest.mark.parametrize("dtype", [torch.bool, torch.int16, torch.float32, torch.float64])
def test_cat_short_rows_copied_inline(dtype):
    # Rows of up to 512 bytes are copied inline (cat.c's copy_short: 32-byte
    # steps, then 8-byte steps, then bytes), longer ones by memcpy: every
    # tail length on each side of those steps and of the 512-byte switch,
    # strided sources (a RoPE half of a transposed [.., 64]) included, gives
    # CPU's bytes.
    gen = torch.Generator().manual_seed(0)
    es = torch.empty((), dtype=dtype).element_size()
    q = (torch.randn(4, 8, 2, 64, generator=gen) * 4).to(dtype).transpose(1, 2)
    qn = q.to("neuron")
    for width in sorted({1, 3, 7, 8, 9, 31, 33, 40, 41, 512 // es - 1, 512 // es, 512 // es + 3}):
        a = (torch.randn(6, 5, width, generator=gen) * 4).to(dtype)
        b = (torch.randn(6, 5, 2, generator=gen) * 4).to(dtype)
        want = torch.cat((a, b, a), -1)
        got = torch.cat((a.to("neuron"), b.to("neuron"), a.to("neuron")), -1)
        assert torch.equal(got.cpu(), want), width
    want = torch.cat((q[..., 32:], q[..., :32]), -1)
    assert torch.equal(torch.cat((qn[..., 32:], qn[..., :32]), -1).cpu(), want)


@pytest.mark.parametrize(
    "shapes,dim",
    [
        (((8, 64, 256),) * 3, -1),  # GPT-2's qkv gradient: 1.5 MiB, split by output rows
        (((5, 3, 7), (5, 2, 7), (5, 1, 7)), 1),  # [rows, slab] inputs of different widths
        (((4, 9),) * 17, 1),  # more inputs than the row-wise copy takes
        (((6, 4), (6, 1), (6, 3)), 1),  # a one-column input coalesces to 1-d
        (((3, 700),) * 2, 1),  # rows over SHORT_ROW: memcpy
    ],
)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.int8])
def test_cat_contiguous_rows_written_row_by_row(shapes, dim, dtype):
    # Inputs that are all [rows, contiguous row] are copied output row by
    # output row (cat.c's rowwise_piece); the rest input by input. Both give
    # CPU's bytes, with a transposed input mixed in too.
    gen = torch.Generator().manual_seed(0)
    ins = [(torch.randn(s, generator=gen) * 8).to(dtype) for s in shapes]
    want = torch.cat(ins, dim)
    assert torch.equal(torch.cat([t.to("neuron") for t in ins], dim).cpu(), want)
    t = (torch.randn(tuple(reversed(shapes[0])), generator=gen) * 8).to(dtype).transpose(0, -1)
    want = torch.cat([*ins, t], dim)
    assert torch.equal(torch.cat([x.to("neuron") for x in (*ins, t)], dim).cpu(), want)


def test_gathers_large_enough_to_split_across_threads():
    # Past gather.c's parallel threshold (131072 elements): pieces are whole
    # rows of the outermost dim with >= 8 indices (trn_kit_split_dim); every
    # gather form matches CPU bit for bit, including an output with a short
    # outer dim (3 x 50000) that splits inside its rows.
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(512, 2048, generator=gen)
    rows = torch.randint(0, 512, (600,), generator=gen)
    cols = torch.randint(0, 2048, (300,), generator=gen)
    w = torch.randn(1000, 768, generator=gen)
    ids = torch.randint(0, 1000, (8, 64), generator=gen)
    y = torch.randn(64, 8192, generator=gen)
    yi = torch.randint(0, 8192, (64, 8192), generator=gen)
    z = torch.randn(3, 50000, generator=gen)
    zi = torch.randint(0, 50000, (3, 50000), generator=gen)
    N = lambda t: t.to("neuron")  # noqa: E731
    cases = [
        (lambda a, i: a.index_select(0, i), x, rows),
        (lambda a, i: a.index_select(1, i), x, cols),
        (lambda a, i: a[i], x, rows),
        (lambda a, i: torch.nn.functional.embedding(i, a), w, ids),
        (lambda a, i: torch.gather(a, 1, i), y, yi),
        (lambda a, i: torch.gather(a, 1, i), z, zi),
    ]
    for fn, a, i in cases:
        assert torch.equal(fn(N(a), N(i)).cpu(), fn(a, i))


def test_single_index_loops_match_cpu():
    # gather / scatter with one index move elements in one of two loops
    # (index_impl.h): constant-scaled addresses when the moved side, the index
    # and the indexed dim are contiguous and no index is negative, strided
    # addresses otherwise; indices are checked first (once per call when every
    # row has the same ones). Every form matches CPU bit for bit.
    gen = torch.Generator().manual_seed(1)
    x = torch.randn(40, 300, generator=gen)
    xt = torch.randn(300, 40, generator=gen).t()  # indexed dim strided
    cols = torch.randint(0, 300, (90,), generator=gen)
    neg = cols - 300  # wraps under advanced indexing
    mixed = torch.where(torch.arange(90) % 2 == 0, cols, neg)
    gi = torch.randint(0, 300, (40, 70), generator=gen)
    upd = torch.randn(40, 70, generator=gen)
    cases = [
        (lambda a, i: a.index_select(1, i), x, cols),
        (lambda a, i: a.index_select(1, i), xt, cols),
        (lambda a, i: a.index_select(1, i[::2]), x, cols),  # strided index
        (lambda a, i: a[:, i], x, neg),
        (lambda a, i: a[:, i], x, mixed),
        (lambda a, i: a[:, i], xt, mixed),
        (lambda a, i: torch.gather(a, 1, i), x, gi),
        (lambda a, i: torch.gather(a, 1, i), xt, gi),
        (lambda a, i: a.clone().scatter_(1, i, upd.to(a.device)), x, gi),
        (lambda a, i: a.clone().scatter_add_(1, i, upd.to(a.device)), x, gi),
        (
            lambda a, i: a.clone().index_put_((i,), a[:1].expand(90, 300), accumulate=True),
            x.repeat(3, 1),
            cols % 120,
        ),
        (lambda a, i: a.double().index_select(1, i), x, cols),
        (lambda a, i: a.bfloat16().index_select(1, i), x, cols),
    ]
    for fn, a, i in cases:
        assert torch.equal(fn(N(a), N(i)).cpu(), fn(a, i))
    # an out-of-range index past the first rows is still reported like CPU's
    bad = cols.clone()
    bad[50] = 300
    for fn in (lambda a, i: a.index_select(1, i), lambda a, i: a[:, i]):
        with pytest.raises(Exception) as cpu:
            fn(x, bad)
        with pytest.raises(Exception) as dev:
            fn(N(x), N(bad))
        assert type(dev.value) is type(cpu.value)
        assert str(dev.value).splitlines()[0] == str(cpu.value).splitlines()[0]
