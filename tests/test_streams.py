"""Streams and events: ordering, queries, timing, contexts, sync points."""

import pytest
import torch


def test_default_and_new_streams():
    d = torch.neuron.default_stream()
    assert d.stream_id == 0 and d.device == torch.device("neuron:0")
    assert torch.neuron.current_stream() == d
    s = torch.neuron.Stream()
    assert s.stream_id != 0 and s.device_index == 0
    s1 = torch.neuron.Stream(device=1)
    assert s1.device_index == 1
    assert torch.accelerator.current_stream().device.type == "neuron"


def test_stream_context_and_ordering():
    s = torch.neuron.Stream()
    x = torch.randn(256, 256)
    with torch.neuron.stream(s):
        assert torch.neuron.current_stream() == s
        d = x.to("neuron")
        y = d.t().contiguous()
    assert torch.neuron.current_stream() == torch.neuron.default_stream()
    torch.neuron.current_stream().wait_stream(s)
    assert torch.equal(y.cpu(), x.t())
    s.synchronize()
    assert s.query()


def test_stream_context_switches_device():
    s1 = torch.neuron.Stream(device=1)
    with torch.neuron.stream(s1):
        assert torch.neuron.current_device() == 1
        assert torch.neuron.current_stream(1) == s1
    assert torch.neuron.current_device() == 0
    assert torch.neuron.current_stream(1).stream_id == 0


def test_events_record_query_elapsed():
    start = torch.neuron.Event(enable_timing=True)
    end = torch.neuron.Event(enable_timing=True)
    start.record()
    x = torch.randn(512, 512).to("neuron")
    for _ in range(5):
        x = x.t().contiguous()
    end.record()
    end.synchronize()
    assert start.query() and end.query()
    assert start.elapsed_time(end) >= 0.0
    e = torch.Event(device="neuron", enable_timing=True)
    e.record()
    e.synchronize()
    assert e.query()


def test_event_wait_orders_streams():
    s1, s2 = torch.neuron.Stream(), torch.neuron.Stream()
    src = torch.arange(1_000_000, dtype=torch.float32)
    with torch.neuron.stream(s1):
        d = src.to("neuron")
        e = torch.neuron.record_event()
    s2.wait_event(e)
    with torch.neuron.stream(s2):
        out = d.clone()
    s2.synchronize()
    assert torch.equal(out.cpu(), src)


def test_device_synchronize_and_accelerator():
    torch.ones(4, device="neuron:1")
    torch.neuron.synchronize(1)
    torch.accelerator.synchronize()
    torch.neuron.synchronize("neuron:0")


def test_record_stream():
    s = torch.neuron.Stream()
    x = torch.ones(1024, device="neuron")
    x.record_stream(s)
    del x
    torch.neuron.synchronize()


def test_launch_blocking_and_inline_modes(python):
    code = """
        import torch
        x = torch.randn(64, 64)
        d = x.to("neuron")
        s = torch.neuron.Stream()
        with torch.neuron.stream(s):
            y = d.t().contiguous()
        s.synchronize()
        assert torch.equal(y.cpu(), x.t())
        print("ok")
    """
    for env in [
        {"NEURON_LAUNCH_BLOCKING": "1"},
        {"TORCH_NEURONX_ENABLE_ASYNC_NRT": "0"},
        {"TORCH_NEURONX_ENABLE_ASYNC_NRT": "1"},
    ]:
        r = python(code, env=env)
        assert r.returncode == 0 and r.stdout.strip() == "ok", (env, r.stderr)


def test_compiled_code_outlives_its_queued_runs(python):
    """With worker threads, freeing a compiled graph (Dynamo's reset drops
    it) must wait for its runs still queued on a stream: the worker calls
    into the program's loaded code, which used to be unmapped under it
    (a segfault in `trn.cc_kernel_launch`)."""
    code = """
        import gc
        import torch
        import torch_neuronx  # noqa: F401

        def f(x):
            return torch.relu(x * 2.0 + 1.0).sum(dim=1)

        a = torch.randn(768, 768, device="neuron") * 0.03
        x = torch.randn(64, 257)
        want = f(x)
        for _ in range(5):
            g = torch.compile(f, backend="neuron")
            g(x.to("neuron"))  # compiles and runs
            torch.neuron.synchronize()
            b = a
            for _ in range(24):  # keeps the worker busy for a while
                b = b @ a
            y = g(x.to("neuron"))  # queued behind the products
            del g
            torch._dynamo.reset()
            gc.collect()  # the program is freed here, its run still queued
            torch.neuron.synchronize()
            assert torch.allclose(y.cpu(), want, rtol=1e-5, atol=1e-5)
        print("ok")
    """
    r = python(code, env={"TORCH_NEURONX_ENABLE_ASYNC_NRT": "1"})
    assert r.returncode == 0 and r.stdout.strip().endswith("ok"), (r.returncode, r.stderr[-3000:])
