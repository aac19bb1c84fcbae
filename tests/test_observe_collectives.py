"""Collectives of the neuron process group in the profiler (device events
with bytes, linked to their CPU op), the metrics API and the DEBUG log:
one 2-rank run (process start-up is the cost), checked three ways."""

import json
import os
import re

import pytest

from _dist_harness import check_ranks


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    out = tmp_path_factory.mktemp("coll")
    outs = check_ranks(
        "observe_collectives", 2, {"TORCH_NEURONX_LOG_LEVEL": "DEBUG"}, timeout=120, args=str(out)
    )
    return out, outs


def test_chrome_trace_has_collective_events_with_bytes(run):
    out, _ = run
    for rank in range(2):
        with open(os.path.join(out, f"trace-{rank}.json")) as f:
            events = json.load(f)["traceEvents"]
        coll = [e for e in events if e.get("cat") == "collective_comm"]
        by_name = {e["name"]: e for e in coll}
        assert {
            "neuron:all_reduce",
            "neuron:all_gather_into_tensor",
            "neuron:barrier",
            "neuron:send" if rank == 0 else "neuron:recv",
        } <= set(by_name), sorted(by_name)
        ar = by_name["neuron:all_reduce"]
        assert int(ar["args"]["bytes"]) == 4096
        assert int(by_name["neuron:all_gather_into_tensor"]["args"]["bytes"]) == 2 * 1024
        assert ar["dur"] > 0 and ar["pid"] == rank  # the device's row
        assert "float32 [1024], rank %d of 2" % rank in ar["args"]["input shapes"]
        # linked to the CPU op that issued it (c10d::allreduce_)
        corr = int(ar["args"]["correlation"])
        cpu = [
            e
            for e in events
            if e.get("cat") == "cpu_op" and e.get("args", {}).get("External id") == corr
        ]
        assert cpu and any("allreduce" in e["name"] for e in cpu), [e["name"] for e in cpu]


def test_counters_and_debug_log_line(run):
    _, outs = run
    for rank in range(2):
        text = outs[rank][1]
        assert "counters ok" in text  # the worker asserted the metrics API's counts
        line = re.search(
            r"\[neuron D [0-9:.]+ pid \d+\] collective: neuron:all_reduce 4096 bytes "
            r"\(float32 \[1024\], rank %d of 2, shm\) on neuron:%d: done in [0-9.]+ ms"
            % (rank, rank),
            text,
        )
        assert line, text[-3000:]
