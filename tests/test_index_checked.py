"""Backward ops whose indices their forward already checked do not wait for the
stream (aten/index_checked.h): embedding_dense_backward, nll_loss_backward.

A forward that checks indices synchronizes so that a bad index raises at the
call, as on CPU. Its backward reads the same, unwritten index tensor, so under
asynchronous streams it launches without waiting for the queue (which would
leave the stream's worker idle while Python goes on). Each case runs in a child
with worker threads, queues products ahead of the backward, and asserts that an
event behind them is still pending when the backward returns, then compares with
CPU."""

import textwrap

import pytest
import torch

WORKERS = {"TORCH_NEURONX_ENABLE_ASYNC_NRT": "1"}

PRELUDE = """
    import torch
    import torch.nn.functional as F
    import torch_neuronx  # noqa: F401

    def busy_queue():
        # Products the worker needs a while for (what a backward that waits
        # for the stream would wait for), and an event behind them.
        a = torch.randn(768, 768, device="neuron") * 0.03
        b = a
        for _ in range(24):
            b = b @ a
        done = torch.neuron.Event()
        done.record()
        return b, done

    def busy(queued):
        return not queued[1].query()

"""


def run(python, body, env=WORKERS):
    """Runs `body` twice in a child and returns what its second run printed
    (`say`): a process's first backward takes longer than the products."""
    loop = "for attempt in range(2):\n    say = print if attempt else (lambda *a: None)\n"
    code = textwrap.dedent(PRELUDE) + loop + textwrap.indent(textwrap.dedent(body), "    ")
    r = python(code, env=env)
    assert r.returncode == 0, r.stderr[-3000:]
    return r.stdout.split()


@pytest.mark.parametrize("expanded", [False, True], ids=["dense", "expanded"])
def test_embedding_backward_does_not_wait_for_its_checked_indices(python, expanded):
    """The token ids (dense) and BERT's token types (a row expanded over the
    batch, copied when flattened) checked by the forward's embedding."""
    body = f"""
        torch.manual_seed(0)
        w_cpu = torch.randn(128, 32)
        ids_cpu = torch.randint(0, 128, (1 if {expanded} else 8, 64))
        if {expanded}:
            ids_cpu = ids_cpu.expand(8, 64)
        g_cpu = torch.randn(8, 64, 32)
        w = w_cpu.to("neuron").requires_grad_()
        ids = ids_cpu.to("neuron") if not {expanded} else ids_cpu[:1].to("neuron").expand(8, 64)
        g = g_cpu.to("neuron")
        out = F.embedding(ids, w)
        keep = busy_queue()
        out.backward(g)
        say(busy(keep))
        torch.neuron.synchronize()
        w_ref = w_cpu.clone().requires_grad_()
        F.embedding(ids_cpu, w_ref).backward(g_cpu)
        say(torch.equal(w.grad.cpu(), w_ref.grad))
    """
    assert run(python, body) == ["True", "True"]


def test_nll_loss_backward_does_not_wait_for_its_checked_target(python):
    body = """
        torch.manual_seed(0)
        x_cpu = torch.randn(512, 128)
        y_cpu = torch.randint(0, 128, (512,))
        y_cpu[::7] = -100  # ignored
        x = x_cpu.to("neuron").requires_grad_()
        loss = F.cross_entropy(x, y_cpu.to("neuron"))
        keep = busy_queue()
        loss.backward()
        say(busy(keep))
        torch.neuron.synchronize()
        x_ref = x_cpu.clone().requires_grad_()
        F.cross_entropy(x_ref, y_cpu).backward()
        # The kernels are those of a waiting backward: only the wait is gone.
        say(torch.allclose(x.grad.cpu(), x_ref.grad, rtol=1e-5, atol=1e-8))
    """
    assert run(python, body) == ["True", "True"]


def test_indices_written_since_the_check_are_checked_again(python):
    """An in-place write (a new version) or other indices: the backward op
    checks at the call, raising where CPU raises."""
    body = """
        w = torch.randn(128, 32, device="neuron")
        ids = torch.randint(0, 128, (8, 64)).to("neuron")
        g = torch.randn(8, 64, 32, device="neuron")
        F.embedding(ids, w)
        ids[0, 0] = 1000  # out of range, seen by the version counter
        keep = busy_queue()
        try:
            torch.ops.aten.embedding_dense_backward(g, ids, 128, -1, False)
            say("no-error")
        except (IndexError, RuntimeError):
            say("raised-at-the-call")
        other = torch.randint(0, 64, (8, 64)).to("neuron")
        keep = busy_queue()
        torch.ops.aten.embedding_dense_backward(g, other, 128, -1, False)
        say(busy(keep))  # never checked: waited for the queue
        F.embedding(other, w)
        keep = busy_queue()
        torch.ops.aten.embedding_dense_backward(g, other, 256, -1, False)
        say(busy(keep))  # checked against 128 rows, within 256
        keep = busy_queue()
        torch.ops.aten.embedding_dense_backward(g, other, 64, -1, False)
        say(busy(keep))  # not within 64 rows: checked again
    """
    assert run(python, body) == ["raised-at-the-call", "False", "True", "False"]


@pytest.mark.parametrize("workers", ["0", "1"])
def test_write_that_bypasses_the_version_still_raises(python, workers):
    """`.data` writes do not move the version counter: the backward then
    trusts the forward's check, but its kernel still checks every index, so
    the error comes at the next synchronize instead of a read out of bounds."""
    body = """
        w = torch.randn(128, 32, device="neuron")
        ids = torch.randint(0, 128, (8, 64)).to("neuron")
        g = torch.randn(8, 64, 32, device="neuron")
        F.embedding(ids, w)
        ids.data[0, 0] = 1000
        try:
            torch.ops.aten.embedding_dense_backward(g, ids, 128, -1, False)
            torch.neuron.synchronize()
            say("no-error")
        except (IndexError, RuntimeError, ValueError) as e:
            say("raised" if "1000" in str(e) else str(e))
        ok = torch.ops.aten.embedding_dense_backward(g, ids.clamp(0, 127), 128, -1, False)
        torch.neuron.synchronize()
        say(bool(torch.isfinite(ok).all()))
    """
    assert run(python, body, {"TORCH_NEURONX_ENABLE_ASYNC_NRT": workers}) == ["raised", "True"]


def test_backward_ops_raise_for_unchecked_bad_indices():
    """Direct calls with indices no forward checked raise at the call, as
    before (CPU's embedding_dense_backward does not check at all)."""
    g = torch.randn(4, 8, device="neuron")
    bad = torch.tensor([0, 1, 9, 2], device="neuron")
    with pytest.raises(RuntimeError):
        torch.ops.aten.embedding_dense_backward(g, bad, 8, -1, False)
    x = torch.randn(4, 8, device="neuron").log_softmax(-1)
    one, total = torch.tensor(1.0, device="neuron"), torch.tensor(4.0, device="neuron")
    with pytest.raises(IndexError):
        torch.ops.aten.nll_loss_backward(one, x, bad, None, 1, -100, total)
