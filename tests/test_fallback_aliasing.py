"""The CPU fallback keeps the aliasing of its operands (fallback/host_stage.h):
operands that share device memory share host memory while the CPU kernel
runs, so CPU's overlap errors fire and legal aliasing computes what CPU
computes; written memory comes back to the device exactly as the CPU kernel
left it, and nothing outside the written operands changes."""

import pytest
import torch

import torch_neuronx

OVERLAP = "to a single memory location"


def on_both(fn, *templates):
    """fn run on CPU copies and on neuron copies of the templates; returns
    (cpu outcome, neuron outcome, cpu templates, neuron templates moved back)
    where an outcome is the result or the exception raised."""
    outcomes, operands = [], []
    for dev in ("cpu", "neuron"):
        ts = [t.clone().to(dev) for t in templates]
        try:
            out = fn(*ts)
            if dev == "neuron":
                torch.neuron.synchronize()
        except RuntimeError as e:
            out = e
        outcomes.append(out)
        operands.append([t.cpu() for t in ts])
    return outcomes[0], outcomes[1], operands[0], operands[1]


def test_fallback_op_is_a_fallback():
    # The ops below must really run through the CPU fallback for these tests
    # to mean anything.
    x = torch.rand(4, device="neuron") + 1.5
    torch_neuronx.clear_op_tracking()
    torch.acosh(x, out=torch.empty(4, device="neuron"))
    torch.neuron.synchronize()
    assert "aten::acosh" in torch_neuronx.get_fallback_ops()


def test_partial_overlap_of_out_and_input_raises_as_on_cpu():
    buf = torch.rand(9) + 1.5
    c, n, _, nops = on_both(lambda b: torch.acosh(b[:-1], out=b[1:]), buf)
    assert isinstance(c, RuntimeError) and OVERLAP in str(c)
    assert isinstance(n, RuntimeError) and OVERLAP in str(n)
    torch.testing.assert_close(nops[0], buf)  # nothing written


def test_expanded_out_raises_as_on_cpu():
    x = torch.rand(4) + 1.5
    c, n, _, _ = on_both(lambda x, o: torch.acosh(x, out=o.expand(4)), x, torch.zeros(1))
    assert isinstance(c, RuntimeError) and OVERLAP in str(c)
    assert isinstance(n, RuntimeError) and OVERLAP in str(n)


def test_out_aliasing_its_input_is_computed_in_place():
    x = torch.rand(3, 5) + 1.5
    c, n, cops, nops = on_both(lambda x: torch.acosh(x, out=x), x)
    torch.testing.assert_close(cops[0], x.acosh())
    torch.testing.assert_close(nops[0], cops[0])


def test_sort_into_its_own_input_is_legal():
    # sort(x, out=(x, idx)) is legal on CPU: the values output is the input.
    x = torch.randn(4, 7)
    for dev in ("neuron",):
        d = x.to(dev)
        idx = torch.empty(4, 7, dtype=torch.long, device=dev)
        vals, ind = torch_neuronx._C._cpu_fallback_call(
            "aten::sort", "values", d, -1, False, values=d, indices=idx
        )
        assert vals.data_ptr() == d.data_ptr() and ind.data_ptr() == idx.data_ptr()
        ref = x.sort(-1)
        torch.testing.assert_close(d.cpu(), ref.values)
        torch.testing.assert_close(idx.cpu(), ref.indices)


def test_same_tensor_twice_and_overlapping_inputs():
    # Inputs may overlap each other freely; an input passed twice is one buffer.
    a = torch.randn(6, 3)
    c, n, _, _ = on_both(lambda a: torch.linalg.cross(a[:-1], a[1:]), a)
    torch.testing.assert_close(n.cpu(), c)
    c, n, _, _ = on_both(lambda a: torch.logaddexp(a, a), a)
    torch.testing.assert_close(n.cpu(), c)


def test_strided_out_writes_only_its_elements():
    m = torch.randn(5, 6)

    def column(m):
        return torch.acosh(m[:, 2].abs() + 1.5, out=m[:, 2])

    c, n, cops, nops = on_both(column, m)
    torch.testing.assert_close(nops[0], cops[0])  # the other columns untouched


def test_sparse_out_in_a_large_storage():
    # A column of a wide matrix is staged compactly (alone in its storage).
    m = torch.randn(4, 40000)
    c, n, cops, nops = on_both(lambda m: torch.acosh(m[:, 7].abs() + 2, out=m[:, 7]), m)
    torch.testing.assert_close(nops[0], cops[0])


def test_out_in_the_same_storage_without_overlap():
    # out and input in one storage, disjoint: legal, and both halves correct.
    buf = torch.rand(10) + 1.5
    c, n, cops, nops = on_both(lambda b: torch.acosh(b[:5], out=b[5:]), buf)
    torch.testing.assert_close(nops[0], cops[0])


def test_out_of_another_shape_is_resized():
    x = torch.rand(7) + 1.5
    with pytest.warns(UserWarning):
        c, n, cops, nops = on_both(lambda x, o: torch.acosh(x, out=o), x, torch.zeros(3))
    assert nops[1].shape == (7,)
    torch.testing.assert_close(nops[1], cops[1])


def test_out_of_another_shape_sharing_storage_is_resized():
    # The resize reallocates the shared host copy: each written operand goes
    # back on its own.
    buf = torch.rand(12) + 1.5

    def fn(b):
        o = b[8:10]
        torch.acosh(b[:4], out=o)
        return o

    with pytest.warns(UserWarning):
        c, n, cops, nops = on_both(fn, buf)
    torch.testing.assert_close(n.cpu(), c)
    torch.testing.assert_close(nops[0], cops[0])


def test_running_stats_still_written():
    # native_batch_norm writes running_mean / running_var without declaring it.
    x = torch.randn(8, 3)
    rm, rv = torch.zeros(3), torch.ones(3)
    torch.ops.aten.native_batch_norm(x, None, None, rm, rv, True, 0.1, 1e-5)
    rmn, rvn = torch.zeros(3, device="neuron"), torch.ones(3, device="neuron")
    torch_neuronx._C._cpu_fallback_call(
        "aten::native_batch_norm", "", x.to("neuron"), None, None, rmn, rvn, True, 0.1, 1e-5
    )
    torch.testing.assert_close(rmn.cpu(), rm)
    torch.testing.assert_close(rvn.cpu(), rv)


def test_running_stats_sharing_one_storage():
    # running_mean and running_var as two halves of one buffer: one host copy,
    # both halves written back.
    x = torch.randn(8, 3)
    stats = torch.cat([torch.zeros(3), torch.ones(3)])
    torch.ops.aten.native_batch_norm(x, None, None, stats[:3], stats[3:], True, 0.1, 1e-5)
    d = torch.cat([torch.zeros(3), torch.ones(3)]).to("neuron")
    torch_neuronx._C._cpu_fallback_call(
        "aten::native_batch_norm", "", x.to("neuron"), None, None, d[:3], d[3:], True, 0.1, 1e-5
    )
    torch.testing.assert_close(d.cpu(), stats)


def test_tensor_list_members_alias():
    # cat's out overlapping one of its (list) inputs: CPU refuses.
    buf = torch.randn(8)
    c, n, _, nops = on_both(
        lambda b: torch_neuronx._C._cpu_fallback_call(
            "aten::cat", "out", [b[:2], b[2:4]], 0, out=b[3:7]
        )
        if b.device.type == "neuron"
        else torch.cat([b[:2], b[2:4]], 0, out=b[3:7]),
        buf,
    )
    assert isinstance(c, RuntimeError)
    assert isinstance(n, RuntimeError) and type(n) is type(c)
    torch.testing.assert_close(nops[0], buf)


def test_view_ops_are_refused_before_running():
    x = torch.randn(4, device="neuron")
    with pytest.raises(RuntimeError, match="appears to be a view operator"):
        torch_neuronx._C._cpu_fallback_call("aten::alias", "", x)
