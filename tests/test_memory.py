"""The caching allocator as users see it: stats, empty_cache, OOM."""

import gc

import pytest
import torch

MiB = 1024 * 1024


def test_stats_follow_allocations():
    # Tensors an earlier test left in reference cycles are freed whenever
    # Python's cycle collector runs, which any allocation can trigger (seen:
    # 7168 bytes vanishing between two stats calls): collect them first.
    gc.collect()
    torch.neuron.synchronize()
    torch.neuron.empty_cache()
    base = torch.neuron.memory_allocated()
    # Large enough for a segment of its own (>= 10 MiB), so empty_cache can
    # release it below whatever earlier tests keep in shared segments.
    x = torch.empty(32 * MiB, dtype=torch.uint8, device="neuron")
    assert torch.neuron.memory_allocated() - base == 32 * MiB
    assert torch.neuron.memory_reserved() >= torch.neuron.memory_allocated()
    assert torch.neuron.max_memory_allocated() >= torch.neuron.memory_allocated()
    assert torch.accelerator.memory_allocated() == torch.neuron.memory_allocated()
    del x
    assert torch.neuron.memory_allocated() == base
    reserved = torch.neuron.memory_reserved()
    assert reserved >= 32 * MiB  # freed block stays cached
    y = torch.empty(32 * MiB, dtype=torch.uint8, device="neuron")  # reuses it
    assert torch.neuron.memory_reserved() == reserved
    del y
    torch.neuron.empty_cache()
    assert torch.neuron.memory_reserved() < reserved
    stats = torch.neuron.memory_stats()
    assert stats["allocated_bytes.all.current"] == torch.neuron.memory_allocated()
    assert "num_ooms" in stats
    torch.neuron.reset_peak_memory_stats()
    assert torch.neuron.max_memory_allocated() == torch.neuron.memory_allocated()
    assert "neuron:0 memory summary" in torch.neuron.memory_summary()


def test_blocks_hold_little_more_than_requested():
    # Blocks are split from shared segments in 512-byte granules, so odd
    # activation sizes (Llama's 1.4 MiB) do not round up to size classes.
    gc.collect()
    torch.neuron.synchronize()
    s0 = torch.neuron.memory_stats()
    keep = [
        torch.empty(n, dtype=torch.uint8, device="neuron")
        for n in (1_441_792 + 7, 3_000_000, 100, 700_001, 12 * MiB + 1)
    ]
    s1 = torch.neuron.memory_stats()
    requested = s1["requested_bytes.all.current"] - s0["requested_bytes.all.current"]
    allocated = s1["allocated_bytes.all.current"] - s0["allocated_bytes.all.current"]
    assert requested == sum(t.numel() for t in keep)
    assert requested <= allocated < requested + 512 * len(keep)
    del keep


def test_mem_get_info():
    free, total = torch.neuron.mem_get_info()
    assert total == torch.neuron.get_device_properties(0).total_memory
    assert 0 <= free <= total
    assert torch.accelerator.get_memory_info(0) == (free, total)


def test_out_of_memory_is_recoverable(python):
    r = python(
        """
        import torch
        keep = [torch.empty(40 * 2**20, dtype=torch.uint8, device="neuron") for _ in range(2)]
        try:
            torch.empty(40 * 2**20, dtype=torch.uint8, device="neuron")
            print("no error")
        except torch.OutOfMemoryError as e:
            print("OOM", str(e).splitlines()[0])
        del keep
        z = torch.empty(90 * 2**20, dtype=torch.uint8, device="neuron")
        print("after", z.numel(), torch.neuron.memory_stats()["num_ooms"])
    """,
        env={"TORCH_NEURONX_HBM_SIZE": "100M"},
    )
    assert r.returncode == 0, r.stderr
    out = r.stdout
    assert "OOM" in out and "out of memory" in out and "allocated" in out
    assert "reserved" in out and "capacity" in out and "100.00 MiB" in out
    assert f"after {90 * 2**20} 1" in out


def test_capacity_env_sets_total_memory(python):
    r = python(
        "import torch; print(torch.neuron.get_device_properties(1).total_memory)",
        env={"TORCH_NEURONX_HBM_SIZE": "256M"},
    )
    assert r.returncode == 0, r.stderr
    assert int(r.stdout) == 256 * MiB


def test_memory_per_device_is_separate():
    torch.neuron.synchronize(1)
    before0, before1 = torch.neuron.memory_allocated(0), torch.neuron.memory_allocated(1)
    x = torch.empty(MiB, dtype=torch.uint8, device="neuron:1")
    assert torch.neuron.memory_allocated(0) == before0
    assert torch.neuron.memory_allocated(1) >= before1 + MiB
    del x


def test_protect_mode_makes_device_memory_unreadable_from_host(python):
    r = python(
        """
        import ctypes, torch
        import torch_neuronx
        assert torch_neuronx._C._memory_protect_enabled()
        d = torch.arange(1024.0).to("neuron")
        assert d.sum().item() == sum(range(1024))   # kernels and fallback still work
        print("ok", flush=True)
        ctypes.c_float.from_address(d.data_ptr()).value  # host read: must fault
        print("read succeeded")
    """,
        env={"TORCH_NEURONX_DEBUG_PROTECT_MEMORY": "1"},
    )
    assert r.stdout.startswith("ok") and "read succeeded" not in r.stdout
    assert r.returncode != 0  # killed by SIGSEGV


def test_poison_mode_fills_memory_no_tensor_owns(python):
    # TORCH_NEURONX_DEBUG_POISON_FREED: unwritten and freed memory reads as
    # 0xFF bytes (NaN floats, -1 integers); the ops still compute right.
    r = python(
        """
        import torch
        import torch_neuronx  # noqa: F401
        assert torch.isnan(torch.empty(64, device="neuron").cpu()).all()
        x = torch.arange(64.0, device="neuron")
        del x
        i = torch.empty(16, dtype=torch.int32, device="neuron")
        assert (i.cpu() == -1).all()
        y = torch.arange(64.0, device="neuron") * 2 + 1
        assert torch.equal(y.cpu(), torch.arange(64.0) * 2 + 1)
        print("ok")
    """,
        env={"TORCH_NEURONX_DEBUG_POISON_FREED": "1"},
    )
    assert r.returncode == 0 and "ok" in r.stdout, r.stderr[-2000:]
