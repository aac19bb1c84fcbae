"""Observability without a profiler: device queries, autocast policy, logs,
metrics, memory limit, memory snapshots read by PyTorch's own tools."""

import pickle

import pytest
import torch
import torch.nn.functional as F

import torch_neuronx


def test_device_capability_and_properties():
    cap = torch.accelerator.get_device_capability("neuron:0")
    dtypes = cap["supported_dtypes"]
    for dt in (
        torch.float32,
        torch.float16,
        torch.bfloat16,
        torch.float64,
        torch.int64,
        torch.bool,
        torch.complex64,
        torch.uint8,
    ):
        assert dt in dtypes
    assert torch.float8_e4m3fn in dtypes and torch.float8_e8m0fnu in dtypes
    assert torch.qint8 not in dtypes
    props = torch.neuron.get_device_properties("neuron:1")
    assert props.name == torch.neuron.get_device_name(1)
    assert "NeuronCore" in props.name
    assert props.total_memory == torch.neuron.mem_get_info(1)[1]
    assert props.core_count >= 1
    assert torch.neuron.get_device_capability(0) == (3, 0)
    with pytest.raises(Exception, match="out of range"):
        torch.accelerator.get_device_capability(torch.neuron.device_count())


def test_autocast_refuses_binary_cross_entropy_like_cuda():
    x = torch.rand(4, 3, device="neuron")
    y = torch.rand(4, 3, device="neuron")
    with torch.autocast("neuron", dtype=torch.bfloat16):
        with pytest.raises(RuntimeError, match="unsafe to autocast"):
            F.binary_cross_entropy(x, y)
        # the safe form still runs
        out = F.binary_cross_entropy_with_logits(x, y)
    assert out.device.type == "neuron"
    F.binary_cross_entropy(x, y)  # outside autocast it is allowed


def test_metrics_count_launches_copies_and_fallbacks():
    m = torch_neuronx.metrics
    before = {
        n: m.get_counter_value(n, device=0)
        for n in (
            "kernel_launches",
            "bytes_host_to_device",
            "bytes_device_to_host",
            "cpu_fallbacks",
        )
    }
    a = torch.ones(256, device="neuron:0")  # one H2D copy of 1 KiB or a fill
    b = torch.arange(256.0).to("neuron:0")  # H2D copy of 1 KiB
    c = (a + b).cpu()  # kernel + D2H copy of 1 KiB
    assert c[3].item() == 4.0
    assert m.get_counter_value("bytes_host_to_device", 0) - before["bytes_host_to_device"] >= 1024
    assert m.get_counter_value("bytes_device_to_host", 0) - before["bytes_device_to_host"] == 1024
    assert m.get_counter_value("kernel_launches", 0) - before["kernel_launches"] >= 3
    torch.special.zeta(a, b)  # no native kernel: a CPU fallback
    assert m.get_counter_value("cpu_fallbacks", 0) - before["cpu_fallbacks"] == 1
    m.counter_add("test.custom", 2)
    m.metric_record("test.latency_ms", 3.0)
    m.metric_record("test.latency_ms", 5.0)
    assert m.get_counter_value("test.custom") == 2
    assert m.get_metric_data("test.latency_ms") == {
        "count": 2,
        "sum": 8.0,
        "min": 3.0,
        "max": 5.0,
        "mean": 4.0,
    }
    assert set(m.get_compilation_metrics()) >= {
        "compiles",
        "compile_cache_hits",
        "compile_cache_misses",
    }
    text = m.report()
    assert "kernel_launches" in text and "test.latency_ms" in text
    with pytest.raises(KeyError):
        m.get_counter_value("no_such_counter")


def test_log_level_and_stack_trace(python):
    # One interpreter per setting (the level is read once per process).
    code = """
        import torch
        from torch_neuronx._logging import log, WARNING
        x = torch.ones(1000, device="neuron")
        torch.special.zeta(x, x)
        del x
        def where_it_happened():
            log(WARNING, "test", "something odd")
        where_it_happened()
    """
    quiet = python(code, env={"TORCH_NEURONX_LOG_LEVEL": "ERROR"})
    assert quiet.returncode == 0, quiet.stderr
    assert "] alloc:" not in quiet.stderr and "something odd" not in quiet.stderr
    loud = python(
        code, env={"TORCH_NEURONX_LOG_LEVEL": "DEBUG", "TORCH_NEURONX_ENABLE_STACK_TRACE": "1"}
    )
    assert loud.returncode == 0, loud.stderr
    assert "[neuron D" in loud.stderr and "] alloc: neuron:0 alloc 4000 bytes" in loud.stderr
    assert "] fallback: aten::special_zeta has no native neuron kernel" in loud.stderr
    assert "] test: something odd" in loud.stderr
    assert "where_it_happened" in loud.stderr  # Python stack
    assert "libc.so" in loud.stderr  # native stack (backtrace_symbols)
    bad = python(
        "import torch; torch.ones(1, device='neuron')", env={"TORCH_NEURONX_LOG_LEVEL": "LOUD"}
    )
    assert "TORCH_NEURONX_LOG_LEVEL='LOUD'" in bad.stderr


def test_per_process_memory_fraction_is_enforced():
    dev = 1
    torch.neuron.synchronize(dev)
    torch.neuron.empty_cache()
    cap = torch.neuron.get_device_properties(dev).total_memory
    try:
        torch.neuron.set_per_process_memory_fraction(0.001, dev)
        assert torch.neuron.get_per_process_memory_fraction(dev) == pytest.approx(0.001, rel=1e-3)
        limit = int(cap * 0.001)
        small = torch.empty(limit // 4, dtype=torch.uint8, device=f"neuron:{dev}")
        with pytest.raises(torch.OutOfMemoryError, match="per-process limit"):
            torch.empty(limit, dtype=torch.uint8, device=f"neuron:{dev}")
        del small
    finally:
        torch.neuron.set_per_process_memory_fraction(1.0, dev)
    big = torch.empty(int(cap * 0.002), dtype=torch.uint8, device=f"neuron:{dev}")
    del big
    with pytest.raises(ValueError):
        torch.neuron.set_per_process_memory_fraction(1.5, dev)


def _allocate_for_snapshot():
    keep = torch.ones(3000, device="neuron")  # stays allocated
    tmp = torch.zeros(5000, device="neuron")
    del tmp
    return keep


def test_memory_snapshot_loads_with_pytorch_memory_viz(tmp_path):
    from torch.cuda import _memory_viz

    torch.neuron.memory._record_memory_history(max_entries=10000)
    try:
        keep = _allocate_for_snapshot()
        path = tmp_path / "snap.pickle"
        torch.neuron.memory._dump_snapshot(str(path))
    finally:
        torch.neuron.memory._record_memory_history(enabled=None)
    with open(path, "rb") as f:
        snap = pickle.load(f)
    addr = keep.data_ptr()
    # Blocks are split from segments: find keep's, and check the segment's
    # blocks tile it and add up to its figures.
    seg = [s for s in snap["segments"] if any(b["address"] == addr for b in s["blocks"])]
    assert len(seg) == 1 and seg[0]["device"] == 0
    block = [b for b in seg[0]["blocks"] if b["address"] == addr][0]
    assert block["state"] == "active_allocated" and block["requested_size"] == 12000
    assert block["size"] == 12288  # 512-byte granules
    assert sum(b["size"] for b in seg[0]["blocks"]) == seg[0]["total_size"]
    assert seg[0]["blocks"][0]["address"] == seg[0]["address"]
    assert seg[0]["allocated_size"] == sum(
        b["size"] for b in seg[0]["blocks"] if b["state"] == "active_allocated"
    )
    assert any(fr["name"] == "_allocate_for_snapshot" for fr in block["frames"])
    actions = [e["action"] for e in snap["device_traces"][0]]
    assert "alloc" in actions and "free_requested" in actions and "free_completed" in actions
    alloc = [e for e in snap["device_traces"][0] if e["action"] == "alloc" and e["addr"] == addr]
    assert alloc and alloc[0]["size"] == 12000
    # PyTorch's own tools read it
    summary = _memory_viz.segsum(snap)
    assert "segment" in summary.lower()
    html = _memory_viz.trace_plot(snap)
    assert "<html" in html.lower() or "<!doctype" in html.lower()
    assert "<html" in _memory_viz.segment_plot(snap).lower()
    _memory_viz.trace(snap)  # prints the event list; raises on a malformed snapshot
    flat = torch.neuron.memory_snapshot()
    assert any(b["address"] == addr for s in flat for b in s["blocks"])
    text = torch_neuronx.memory_summary(0)
    assert "Allocated memory" in text and "neuron:0" in text
    del keep
