"""Tensors on neuron: allocation, every copy direction, views, resize/set_,
scalars, dtypes and serialization, each compared with PyTorch CPU."""

import pytest
import torch

import torch_neuronx

DTYPES = [
    torch.bool,
    torch.uint8,
    torch.int8,
    torch.int16,
    torch.int32,
    torch.int64,
    torch.float16,
    torch.bfloat16,
    torch.float32,
    torch.float64,
    torch.complex64,
    torch.complex128,
]


def _sample(dtype, shape=(3, 5)):
    g = torch.Generator().manual_seed(0)
    if dtype == torch.bool:
        return torch.randint(0, 2, shape, generator=g).bool()
    if dtype.is_complex or dtype.is_floating_point:
        return (torch.randn(shape, generator=g, dtype=torch.float64) * 100).to(dtype)
    return torch.randint(-100 if dtype != torch.uint8 else 0, 100, shape, generator=g).to(dtype)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_roundtrip_every_dtype(dtype):
    x = _sample(dtype)
    d = x.to("neuron")
    assert d.dtype == dtype and d.shape == x.shape and d.device.type == "neuron"
    assert torch.equal(d.cpu(), x)


@pytest.mark.parametrize(
    "src",
    [torch.float32, torch.float64, torch.int64, torch.bool, torch.bfloat16, torch.complex64],
    ids=str,
)
@pytest.mark.parametrize(
    "dst",
    [
        torch.float16,
        torch.bfloat16,
        torch.int32,
        torch.uint8,
        torch.bool,
        torch.float64,
        torch.complex128,
    ],
    ids=str,
)
def test_dtype_converting_copies_match_cpu(src, dst):
    x = _sample(src)
    expected = x.to(dst)
    assert torch.equal(x.to("neuron").to(dst).cpu(), expected)  # on device
    assert torch.equal(x.to("neuron", dst).cpu(), expected)  # host -> device
    assert torch.equal(x.to("neuron").to("cpu", dst), expected)  # device -> host


def test_special_float_conversions_match_cpu():
    x = torch.tensor(
        [
            float("nan"),
            float("inf"),
            -float("inf"),
            1e30,
            -1e30,
            2.5,
            -2.5,
            0.5,
            65504.0,
            70000.0,
            1e-8,
            3.0e38,
        ]
    )
    d = x.to("neuron")
    for dtype in [torch.float16, torch.bfloat16, torch.bool]:
        assert torch.equal(
            d.to(dtype).cpu(),
            x.to(dtype),
        ) or torch.allclose(d.to(dtype).cpu().float(), x.to(dtype).float(), equal_nan=True), dtype
    finite = x[5:8]
    for dtype in [torch.int8, torch.int32, torch.int64, torch.uint8]:
        assert torch.equal(finite.to("neuron").to(dtype).cpu(), finite.to(dtype)), dtype


@pytest.mark.parametrize("half", [torch.bfloat16, torch.float16], ids=str)
def test_16bit_conversions_bitwise_on_large_and_strided_tensors(half):
    # Every float32 bit pattern class (subnormals, rounding ties, overflow,
    # infinities) through the contiguous conversion loops and the strided
    # ones, on tensors big enough to be split across threads. NaN stays NaN
    # (its payload bits are libtrn's, not compared).
    g = torch.Generator().manual_seed(0)
    bits = torch.randint(-(2**31), 2**31, (3, 70001), generator=g, dtype=torch.int64)
    x = bits.to(torch.int32).view(torch.float32)
    x[0, :4] = torch.tensor([float("nan"), -float("nan"), float("inf"), 65520.0])
    for view in (x, x[:, 1:], x.t(), x[::2, ::3]):
        for src in (view, view.to(half)):
            dst_dtype = torch.float32 if src.dtype == half else half
            want = src.to(dst_dtype)
            got = src.to("neuron").to(dst_dtype).cpu()
            nan = want.isnan()
            assert torch.equal(got.isnan(), nan)
            ints = torch.int16 if dst_dtype == half else torch.int32
            assert torch.equal(got[~nan].view(ints), want[~nan].view(ints)), (src.dtype, view.shape)
            # a strided destination on the device
            dst = torch.empty(view.shape[::-1], dtype=dst_dtype, device="neuron").t()
            dst.copy_(src.to("neuron"))
            assert torch.equal(dst.cpu()[~nan].view(ints), want[~nan].view(ints))


def test_non_contiguous_copies():
    x = torch.arange(60.0).reshape(3, 4, 5)
    for view in [x.transpose(0, 2), x[:, ::2, 1:], x.permute(1, 2, 0), x[1], x.expand(2, 3, 4, 5)]:
        assert torch.equal(view.to("neuron").cpu(), view)
    d = x.to("neuron")
    for make in [
        lambda t: t.transpose(0, 2),
        lambda t: t[:, ::2, 1:],
        lambda t: t.unfold(2, 2, 1),
        lambda t: t.permute(1, 2, 0).contiguous(),
    ]:
        assert torch.equal(make(d).cpu(), make(x))
    # 2-d transposes big enough for the tiled path, every element size it takes
    for dtype in (torch.float32, torch.bfloat16, torch.int64):
        y = torch.arange(75 * 130).reshape(75, 130).to(dtype)
        assert torch.equal(y.t().to("neuron").cpu(), y.t())
        assert torch.equal(y.to("neuron").t().contiguous().cpu(), y.t().contiguous())
        tdst = torch.empty(130, 75, dtype=dtype, device="neuron").t()
        tdst.copy_(y.to("neuron"))
        assert torch.equal(tdst.cpu(), y)
    # non-contiguous destination on device
    dst = torch.zeros(5, 4, 3, device="neuron").transpose(0, 2)
    dst.copy_(x)
    assert torch.equal(dst.cpu(), x)
    # broadcasting copy_
    dst = torch.zeros(3, 4, device="neuron")
    dst.copy_(torch.arange(4.0))
    assert torch.equal(dst.cpu(), torch.arange(4.0).expand(3, 4))


def test_device_to_device_and_across_devices():
    x = torch.randn(17, 9)
    a = x.to("neuron:0")
    b = a.to("neuron:1")
    assert b.device == torch.device("neuron:1")
    assert torch.equal(b.cpu(), x)
    c = torch.empty(9, 17, device="neuron:0")
    c.copy_(b.t())
    assert torch.equal(c.cpu(), x.t())
    assert torch.equal(a.clone().cpu(), x)


def test_zero_size_and_zero_dim():
    e = torch.empty(0, 3, device="neuron")
    assert e.shape == (0, 3) and e.cpu().shape == (0, 3)
    s = torch.tensor(3.5).to("neuron")
    assert s.dim() == 0 and s.item() == 3.5
    assert torch.tensor(True).to("neuron").item() is True
    assert torch.tensor(7, dtype=torch.int64).to("neuron").item() == 7
    assert torch.tensor(1 + 2j).to("neuron").item() == 1 + 2j


def test_views_share_storage():
    d = torch.zeros(4, 4, device="neuron")
    v = d.view(16)
    v[3] = 5.0  # copy_ into a view (fill through the CPU fallback)
    assert d[0, 3].item() == 5.0
    t = d.t()
    assert t.data_ptr() == d.data_ptr() and t.stride() == (1, 4)
    s = d.as_strided((2, 2), (4, 1), 5)
    assert s.storage_offset() == 5
    r = torch.view_as_real(torch.zeros(3, dtype=torch.complex64, device="neuron"))
    assert r.shape == (3, 2) and r.dtype == torch.float32
    assert d.unfold(0, 2, 2).shape == (2, 4, 2)
    assert d.reshape(2, 8).data_ptr() == d.data_ptr()


def test_resize_and_set():
    d = torch.arange(6.0).to("neuron")
    d.resize_(2, 5)
    assert d.shape == (2, 5)
    assert torch.equal(d.flatten()[:6].cpu(), torch.arange(6.0))
    d.resize_(1)
    assert d.shape == (1,)
    src = torch.arange(8.0).to("neuron")
    t = torch.empty(0, device="neuron")
    t.set_(src)
    assert t.data_ptr() == src.data_ptr() and torch.equal(t.cpu(), torch.arange(8.0))
    t.set_(src.untyped_storage(), 2, (2, 2), (2, 1))
    assert torch.equal(t.cpu(), torch.tensor([[2.0, 3.0], [4.0, 5.0]]))
    t.set_()
    assert t.numel() == 0
    st = torch.arange(4.0).to("neuron").untyped_storage()
    st.resize_(32)
    assert st.nbytes() == 32


def test_conj_and_neg_views_copy_correctly():
    z = torch.tensor([1 + 2j, 3 - 4j])
    assert torch.equal(z.conj().to("neuron").cpu(), z.conj().resolve_conj())
    zd = z.to("neuron")
    assert torch.equal(zd.conj().cpu(), z.conj().resolve_conj())


def test_unsupported_dtype_is_a_clear_error():
    with pytest.raises(TypeError, match="neuron does not support dtype"):
        torch.empty(2, dtype=torch.complex32, device="neuron")
    with pytest.raises(TypeError, match="neuron does not support dtype"):
        torch.empty(2, dtype=torch.bits8, device="neuron")
    with pytest.raises(TypeError, match="neuron does not support dtype"):
        torch.ones(2).to("neuron", torch.complex32)
    # quantized dtypes are routed by PyTorch to a Quantized key we don't serve
    with pytest.raises(NotImplementedError, match="Quantizedneuron"):
        torch.empty(2, dtype=torch.quint8, device="neuron")


def test_bad_sizes_are_clear_errors():
    with pytest.raises(RuntimeError, match="negative dimension"):
        torch.empty(-1, device="neuron")
    with pytest.raises((RuntimeError, torch.OutOfMemoryError)):
        torch.empty(2**62, device="neuron")
    with pytest.raises(RuntimeError):
        torch.empty(2**40, 2**40, device="neuron")
    assert torch.ones(2, device="neuron").sum().item() == 2.0  # still usable


def test_float8_is_stored_and_converted_natively():
    # Exhaustive checks: tests/test_fp8_dtypes.py.
    x = torch.tensor([0.5, 1.5, -2.0, 448.0]).to(torch.float8_e4m3fn)
    d = x.to("neuron")
    assert torch.equal(d.cpu().view(torch.uint8), x.view(torch.uint8))
    torch_neuronx.clear_op_tracking()
    f = d.to(torch.float32)
    assert torch.equal(f.cpu(), x.float())
    assert torch_neuronx.get_fallback_ops() == []


def test_unsupported_copy_without_fallback_raises(python):
    # A conjugate view is what the native copy hands to the CPU.
    r = python(
        """
        import torch
        d = torch.tensor([1 + 2j]).to("neuron").conj()
        try:
            d.to(torch.complex128)
            print("no error")
        except NotImplementedError as e:
            print("ERR", e)
    """,
        env={"TORCH_NEURONX_FALLBACK_ONLY_FOR_UNIMPLEMENTED_OPS": "1"},
    )
    assert r.returncode == 0, r.stderr
    assert "CPU fallback disabled" in r.stdout and "conjugate" in r.stdout


def test_serialization_roundtrip(tmp_path):
    y = torch.randn(4, 4).to("neuron")
    path = tmp_path / "y.pt"
    torch.save(y, path)
    back = torch.load(path, map_location="neuron")
    assert back.device == torch.device("neuron:0") and torch.equal(back.cpu(), y.cpu())
    on_cpu = torch.load(path, map_location="cpu")
    assert on_cpu.device.type == "cpu" and torch.equal(on_cpu, y.cpu())
    y1 = torch.arange(3.0).to("neuron:1")
    torch.save({"w": y1}, path)
    assert torch.load(path)["w"].device == torch.device("neuron:1")
    torch.save(torch.nn.Linear(3, 2).neuron().state_dict(), path)
    sd = torch.load(path, map_location="neuron")
    assert sd["weight"].is_neuron


def test_pinned_memory():
    p = torch.randn(8).pin_memory()
    assert p.is_pinned() and not torch.randn(8).is_pinned()
    assert torch.equal(p.to("neuron", non_blocking=True).cpu(), p)
    e = torch.empty(4, pin_memory=True)
    assert e.is_pinned()
