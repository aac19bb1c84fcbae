"""Device activity in PyTorch's profilers: kernel and copy events in
torch.profiler's trace (found by opening the exported Chrome trace), device
times in key_averages(), and use_device="neuron" in the autograd profiler."""

import json

import torch
from torch.profiler import ProfilerActivity, profile

import torch_neuronx


def _work():
    a = torch.randn(64, 32).to("neuron")
    b = torch.randn(32, 16, device="neuron")
    c = torch.mm(a, b)
    d = torch.relu(c)
    return d.cpu()


def test_kernels_in_exported_chrome_trace(tmp_path):
    _work()  # warm up
    with profile(
        activities=[ProfilerActivity.CPU, ProfilerActivity.PrivateUse1], record_shapes=True
    ) as prof:
        _work()
    path = tmp_path / "trace.json"
    prof.export_chrome_trace(str(path))
    events = json.loads(path.read_text())["traceEvents"]
    kernels = [e for e in events if e.get("cat") == "kernel"]
    copies = [e for e in events if e.get("cat") == "gpu_memcpy"]
    names = {e["name"] for e in kernels}
    assert {"trn::mm", "trn::relu"} <= names, names
    mm = next(e for e in kernels if e["name"] == "trn::mm")
    assert mm["dur"] >= 0 and int(mm["args"]["bytes"]) == (64 * 32 + 32 * 16) * 4
    assert "[64, 32]" in mm["args"]["input shapes"] and "[32, 16]" in mm["args"]["input shapes"]
    assert mm["pid"] == 0  # device row neuron:0
    # correlated with the CPU op that launched it
    cpu_mm = [e for e in events if e.get("cat") == "cpu_op" and e["name"] == "aten::mm"]
    assert cpu_mm and int(mm["args"]["correlation"]) == cpu_mm[0]["args"]["External id"]
    if torch_neuronx._C._stream_async_enabled():
        # a worker thread runs it once the op has queued it
        assert cpu_mm[0]["ts"] <= mm["ts"]
    else:  # inline: during the op
        assert cpu_mm[0]["ts"] <= mm["ts"] <= cpu_mm[0]["ts"] + cpu_mm[0]["dur"] + 1
    directions = {e["name"] for e in copies}
    assert "Memcpy HtoD (Host -> Device)" in directions
    assert "Memcpy DtoH (Device -> Host)" in directions


def test_key_averages_device_times():
    _work()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.PrivateUse1]) as prof:
        _work()
    avgs = {e.key: e for e in prof.key_averages()}
    assert avgs["aten::mm"].device_time_total > 0
    assert avgs["trn::mm"].device_time_total > 0
    for e in prof.key_averages():
        assert e.cpu_time_total >= 0 and e.device_time_total >= 0, e.key
    # Every row (which kernels lead by device time depends on their speed:
    # a 64x32x16 mm now takes about as long as the relu and the copies).
    table = prof.key_averages().table(sort_by="device_time_total", row_limit=-1)
    assert "trn::mm" in table and "trn::relu" in table
    assert "Self NEURON time total" in table


def test_autograd_profiler_use_device_neuron():
    _work()
    with torch.autograd.profiler.profile(use_device="neuron") as prof:
        _work()
    mm = [e for e in prof.function_events if e.name == "aten::mm"]
    assert mm and mm[0].device_time_total > 0
    for e in prof.key_averages():
        assert e.cpu_time_total >= 0 and e.device_time_total >= 0, e.key
        assert e.device_time_total < 60e6  # no garbage (the old -7e16)


def test_neuron_profiler_entry_point(tmp_path):
    cfg = torch_neuronx.NeuronConfig(output_dir=str(tmp_path))
    with torch_neuronx.NeuronProfiler(config=cfg) as prof:
        _work()
    path = prof.export()
    events = json.loads(open(path).read())["traceEvents"]
    assert any(e.get("cat") == "kernel" and e["name"] == "trn::mm" for e in events)
