"""The shadow numerics' inputs and error metric (torch_neuronx/evaluate/shadow.py):
the CPU re-run reads the device's tensors in place (``_C._host_views``) except
the arguments an op writes, which it copies, and the batched error equals
``rel_error`` pair by pair. The planted findings are in tests/test_evaluate.py."""

import os
import subprocess
import sys

import pytest
import torch
from torch.utils.module_tracker import ModuleTracker

from torch_neuronx import _C
from torch_neuronx.evaluate.shadow import (
    Scratch,
    ShadowNumerics,
    _Plan,
    cpu_inputs,
    errors,
    rel_error,
)


@torch.library.custom_op("evaluate_shadow_test::axpy_", mutates_args=("x",))
def axpy_(x: torch.Tensor, y: torch.Tensor) -> None:
    x.add_(y, alpha=2)


@axpy_.register_kernel("neuron")
def _(x, y):
    x.add_(y, alpha=2).add_(0.5)  # the device kernel disagrees with the CPU one


def shadowed(fn):
    tracker = ModuleTracker()
    shadow = ShadowNumerics(tracker)
    with tracker, shadow:
        fn()
    return shadow


def test_host_views_hold_the_values_in_place():
    a = torch.randn(6, 5, device="neuron")
    b = (a * 3).t()[1:]  # strided, storage offset, a pending device result
    i = torch.arange(7, device="neuron")
    h = torch.randn(4, device="neuron", dtype=torch.bfloat16)
    e = torch.empty(0, 3, device="neuron")
    views = _C._host_views([a, b, i, h, e])
    for t, v in zip((a, b, i, h, e), views):
        assert v.device.type == "cpu" and v.dtype == t.dtype and v.shape == t.shape
        assert torch.equal(v, t.cpu())
    assert views[1].stride() == b.stride()
    # The same memory: a device write shows through after a synchronize.
    a.mul_(2)
    torch.neuron.synchronize()
    assert torch.equal(views[0], a.cpu())
    # A view keeps the device storage alive.
    want = a.cpu()
    del a
    assert torch.equal(views[0], want)


def test_host_views_reject_cpu_tensors():
    with pytest.raises(RuntimeError, match="expected neuron tensors"):
        _C._host_views([torch.ones(2)])


def test_host_views_copy_protected_memory():
    """Under protected device memory the host cannot read device pages: the
    helper copies instead (same values)."""
    code = (
        "import torch, torch_neuronx\n"
        "from torch_neuronx import _C\n"
        "assert _C._memory_protect_enabled()\n"
        "a = torch.randn(5, 3, device='neuron')\n"
        "v = _C._host_views([a, a.t()])\n"
        "assert torch.equal(v[0], a.cpu()) and torch.equal(v[1], a.t().cpu())\n"
        "print('ok')\n"
    )
    env = dict(os.environ, TORCH_NEURONX_DEBUG_PROTECT_MEMORY="1")
    r = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120
    )
    assert r.returncode == 0 and r.stdout.strip().endswith("ok"), r.stderr[-2000:]


def test_written_arguments_and_their_aliases_are_copied():
    """In-place and out= ops whose read arguments share memory with the
    written one: the CPU re-run starts from the values the device op saw, so
    a correct op compares equal."""
    a = torch.randn(16, 16, device="neuron")
    c = torch.empty(16, 16, device="neuron")
    b = torch.randn(16, 16, device="neuron")

    def ops():
        a.addcmul_(a, a, value=0.5)  # reads the memory it writes
        a[0].copy_(a[1])  # ... through another view of its storage
        a[:, 2].add_(a[:, 3], alpha=2)
        torch.mul(b, 3, out=c)  # out= is keyword-only in the schema

    shadow = shadowed(ops)
    got = shadow.by_op
    assert {"aten::addcmul_", "aten::copy_", "aten::add_", "aten::mul"} <= set(got), set(got)
    assert all(o["max_error_cpu"] < 1e-6 for o in got.values()), dict(got)
    assert shadow.divergences == {}


def test_cpu_inputs_copy_exactly_the_written_memory():
    a = torch.randn(4, 4, device="neuron")
    b = torch.randn(4, 4, device="neuron")
    s = torch.ones(2)  # a CPU argument
    args, kwargs = cpu_inputs(_Plan(torch.ops.aten.addcmul_.default), (a, a[1], b), {"value": 2})
    assert all(x.device.type == "cpu" for x in args) and kwargs == {"value": 2}
    assert args[0].data_ptr() != a.data_ptr()  # written: a copy
    assert args[1].data_ptr() != a[1].data_ptr()  # shares the written storage: a copy
    assert args[2].data_ptr() == b.data_ptr()  # only read: the device memory itself
    assert all(torch.equal(x, y.cpu()) for x, y in zip(args, (a, a[1], b)))
    args, kwargs = cpu_inputs(_Plan(torch.ops.aten.mul.out), (b, s), {"out": a})
    assert args[0].data_ptr() == b.data_ptr() and args[1].data_ptr() == s.data_ptr()
    assert kwargs["out"].device.type == "cpu" and kwargs["out"].data_ptr() != a.data_ptr()
    # A list the op writes; the read list's b shares memory with a written b.
    written, read = cpu_inputs(_Plan(torch.ops.aten._foreach_add_.List), ([a, s], [b, b]), {})[0]
    assert written[0].data_ptr() != a.data_ptr() and written[1].data_ptr() != s.data_ptr()
    assert [x.data_ptr() == b.data_ptr() for x in read] == [True, True]
    written, read = cpu_inputs(_Plan(torch.ops.aten._foreach_add_.List), ([a], [b]), {})[0]
    assert written[0].data_ptr() != a.data_ptr() and read[0].data_ptr() == b.data_ptr()
    written, read = cpu_inputs(_Plan(torch.ops.aten._foreach_add_.List), ([b], [b]), {})[0]
    assert read[0].data_ptr() != b.data_ptr()


def test_unannounced_writes_are_copied():
    """native_batch_norm (training) updates its running statistics although
    its schema does not say so: the CPU run gets copies, or it would update
    the device's statistics a second time, through the views."""
    x = torch.randn(8, 3, device="neuron")
    mean, var = torch.zeros(3, device="neuron"), torch.ones(3, device="neuron")
    want = 0.1 * x.cpu().mean(0)
    shadow = shadowed(
        lambda: torch.ops.aten.native_batch_norm(x, None, None, mean, var, True, 0.1, 1e-5)
    )
    assert torch.allclose(mean.cpu(), want, atol=1e-6), (mean.cpu(), want)
    assert shadow.by_op["aten::native_batch_norm"]["max_error_cpu"] < 1e-5
    assert _C._undeclared_write("aten::native_batch_norm", "", "running_var")
    assert not _C._undeclared_write("aten::native_batch_norm", "", "input")


def test_list_in_place_ops_are_compared():
    """The optimizers' _foreach_*_ ops return nothing: their results are the
    lists they write, compared tensor by tensor."""
    xs = [torch.randn(5, device="neuron"), torch.randn(3, 2, device="neuron")]
    ys = [torch.randn(5, device="neuron"), torch.randn(3, 2, device="neuron")]

    def ops():
        torch._foreach_mul_(xs, 0.5)
        torch._foreach_addcmul_(xs, ys, ys, value=0.1)

    got = shadowed(ops).by_op
    assert got["aten::_foreach_mul_"]["count"] == 1
    assert got["aten::_foreach_addcmul_"]["count"] == 1
    assert all(o["max_error_cpu"] < 1e-6 for o in got.values()), dict(got)


def test_divergent_in_place_op_is_found():
    x = torch.ones(8, device="neuron")
    shadow = shadowed(lambda: axpy_(x, x))  # the read argument aliases the written one
    d = shadow.first_divergence
    assert d is not None and d["op"] == "evaluate_shadow_test::axpy_"
    # CPU: 1 + 2*1 = 3; device: 3.5.
    assert d["error_cpu"] == pytest.approx(0.5 / 3)
    assert __file__ in d["location"]


def test_batched_errors_equal_rel_error():
    g = torch.Generator().manual_seed(0)
    r = torch.randn(300, generator=g)
    y = r + 1e-3 * torch.randn(300, generator=g)
    nan_same = torch.tensor([1.0, float("nan"), float("inf")])
    pairs = [
        (y, r),
        (y.to(torch.bfloat16), r),
        (y.double(), r),
        (torch.zeros(3), torch.zeros(3)),
        (nan_same, nan_same.clone()),
        (nan_same, torch.tensor([1.0, 2.0, float("inf")])),
        (torch.tensor([1.0, float("inf")]), torch.tensor([2.0, float("inf")])),
        (torch.ones(2), torch.ones(3)),
        (torch.ones(0), torch.ones(0)),
        (y.view(30, 10).t(), r.view(30, 10).t()),
    ]
    assert errors(pairs) == [rel_error(a, b) for a, b in pairs]


def test_scratch_buffer_reused_and_large_results_not_kept(monkeypatch):
    monkeypatch.setattr(Scratch, "KEEP", 1000)
    sc = Scratch()
    small = sc.like(torch.ones(10, 5), torch.float32)
    assert (
        small.shape == (10, 5)
        and small.data_ptr() == sc.like(torch.ones(7), torch.float32).data_ptr()
    )
    big = sc.like(torch.ones(2000), torch.float32)
    assert big.shape == (2000,) and sc.buf[torch.float32].data_ptr() == small.data_ptr()
    g = torch.Generator().manual_seed(1)
    pairs = [(torch.randn(n, generator=g), torch.randn(n, generator=g)) for n in (50, 2000, 30)]
    assert errors(pairs, sc) == [rel_error(a, b) for a, b in pairs]
