"""The neuron device as PyTorch sees it: registration, autoload, indices,
device module, generated methods, fork safety."""

import os

import pytest
import torch

import torch_neuronx


def test_accelerator_is_neuron():
    assert torch.accelerator.current_accelerator() == torch.device("neuron")
    assert torch.accelerator.is_available()
    assert torch.accelerator.device_count() == torch.neuron.device_count() >= 2
    assert torch._C._get_privateuse1_backend_name() == "neuron"


def test_autoload_needs_no_import(python):
    r = python("""
        import sys, torch
        assert "torch_neuronx" in sys.modules
        x = torch.ones(3, device="neuron")
        print(x.device, torch.neuron.device_count())
    """)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["neuron:0", "2"]


def test_autoload_can_be_disabled(python):
    r = python(
        """
        import sys, torch
        assert "torch_neuronx" not in sys.modules
        assert not hasattr(torch, "neuron")
        import torch_neuronx
        print(torch.ones(1, device="neuron").device)
    """,
        env={"TORCH_DEVICE_BACKEND_AUTOLOAD": "0"},
    )
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "neuron:0"


def test_register_is_idempotent():
    torch_neuronx._register()
    torch_neuronx._autoload()
    assert torch.neuron is torch_neuronx.neuron


@pytest.mark.parametrize(
    "env,count",
    [
        ({"NEURON_RT_VISIBLE_CORES": "0-3"}, 4),
        ({"NEURON_RT_VISIBLE_CORES": "0,2"}, 2),
        ({"NEURON_RT_VISIBLE_CORES": "5"}, 1),
        ({"NEURON_RT_NUM_CORES": "3"}, 3),
        ({"NEURON_RT_VISIBLE_CORES": "1-2", "NEURON_RT_NUM_CORES": "8"}, 2),
    ],
)
def test_device_count_from_env(python, env, count):
    r = python(
        "import torch; print(torch.neuron.device_count(), torch.accelerator.device_count())",
        env=env,
    )
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == [str(count)] * 2


def test_invalid_core_list_gives_no_device_and_a_clear_error(python):
    r = python(
        """
        import torch
        print(torch.neuron.is_available())
        try:
            torch.ones(1, device="neuron")
        except RuntimeError as e:
            print("ERR", e)
    """,
        env={"NEURON_RT_VISIBLE_CORES": "zero-one"},
    )
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("False")
    assert "NEURON_RT_VISIBLE_CORES" in r.stdout and "zero-one" in r.stdout


def test_out_of_range_device_says_how_many_exist():
    with pytest.raises(RuntimeError, match=r"2 devices"):
        torch.empty(1, device="neuron:7")
    with pytest.raises(RuntimeError, match=r"2 devices"):
        torch.neuron.set_device(9)
    with pytest.raises(RuntimeError, match=r"2 devices"):
        torch.ones(2).to("neuron:2")


def test_current_device_and_context():
    assert torch.neuron.current_device() == 0
    with torch.neuron.device(1):
        assert torch.neuron.current_device() == 1
        assert torch.empty(1, device="neuron").device == torch.device("neuron:1")
        assert torch.accelerator.current_device_index() == 1
    assert torch.neuron.current_device() == 0
    torch.neuron.set_device("neuron:1")
    try:
        assert torch.ones(1).neuron().device.index == 1
    finally:
        torch.neuron.set_device(0)
    x = torch.ones(1, device="neuron:1")
    with torch.neuron.device_of(x):
        assert torch.neuron.current_device() == 1


def test_device_module_surface():
    n = torch.neuron
    for name in [
        "is_available",
        "is_initialized",
        "init",
        "device_count",
        "current_device",
        "set_device",
        "get_device_name",
        "get_device_properties",
        "device",
        "synchronize",
        "Stream",
        "Event",
        "stream",
        "current_stream",
        "default_stream",
        "set_stream",
        "wait_stream",
        "wait_event",
        "record_event",
        "query",
        "manual_seed",
        "manual_seed_all",
        "seed",
        "seed_all",
        "initial_seed",
        "get_rng_state",
        "set_rng_state",
        "get_amp_supported_dtype",
        "is_bf16_supported",
        "memory_allocated",
        "memory_reserved",
        "max_memory_allocated",
        "max_memory_reserved",
        "memory_stats",
        "memory_summary",
        "reset_peak_memory_stats",
        "empty_cache",
        "_is_in_bad_fork",
        "_lazy_init",
    ]:
        assert callable(getattr(n, name)), name
    props = n.get_device_properties(0)
    assert "NeuronCore" in props.name and props.total_memory > 0
    assert n.get_device_name() == props.name
    assert torch.float16 in n.get_amp_supported_dtype() and n.is_bf16_supported()
    torch.ones(1, device="neuron")
    assert n.is_initialized() and torch_neuronx.is_neuron_runtime_initialized()


def test_generated_methods():
    t = torch.arange(4.0)
    d = t.neuron()
    assert d.is_neuron and not t.is_neuron and d.device == torch.device("neuron:0")
    assert t.neuron(1).device == torch.device("neuron:1")
    m = torch.nn.Linear(2, 2).neuron()
    assert all(p.is_neuron for p in m.parameters())
    s = torch.UntypedStorage(8).neuron()
    assert s.device.type == "neuron"
    assert torch.ones(2).to("neuron").is_neuron
    assert torch.zeros(2, device="neuron").is_neuron


def test_fork_after_init_child_uses_device():
    # libtrn's fork handlers: the child keeps using the device, seeing the
    # parent's memory as of the fork, copied on write (tests/test_observe_multiprocessing
    # runs DataLoader workers the same way).
    t = torch.arange(6.0, device="neuron")
    t.mul_(1)  # queued work before the fork
    pid = os.fork()
    if pid == 0:
        ok = False
        try:
            ok = not torch.neuron._is_in_bad_fork()
            ok = ok and torch.equal((t * 2).cpu(), torch.arange(6.0) * 2)
            t.add_(100)  # the child's copy only
            torch.neuron.synchronize()
            ok = ok and float(t.sum()) == 615.0
        finally:
            os._exit(0 if ok else 1)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert not torch.neuron._is_in_bad_fork()
    assert torch.equal(t.cpu(), torch.arange(6.0))


def test_import_torch_neuronx_before_torch(python):
    # The entry point fires while torch_neuronx is half-imported; it must not
    # break the import, and the device must be registered afterwards.
    r = python(
        "import torch_neuronx, torch; print(torch.ones(2, device='neuron').device)",
        env={"TORCH_DEVICE_BACKEND_AUTOLOAD": "1"},
    )
    assert r.returncode == 0, r.stderr
    assert "neuron:0" in r.stdout


def test_backward_runs_on_the_calling_thread():
    """Importing torch_neuronx turns off autograd's device threads for the
    importing thread (torch_neuronx/_autograd_exit.py): a neuron backward runs
    where it was called; set_multithreading_enabled(True) restores PyTorch's
    per-device thread."""
    import threading

    x = torch.ones(4, device="neuron", requires_grad=True)
    seen = []
    y = x * 2
    y.register_hook(lambda g: seen.append(threading.get_ident()))
    y.sum().backward()
    assert seen == [threading.get_ident()]
    assert torch.equal(x.grad.cpu(), torch.full((4,), 2.0))
    with torch.autograd.set_multithreading_enabled(True):
        y = x * 2
        y.register_hook(lambda g: seen.append(threading.get_ident()))
        y.sum().backward()
    assert len(seen) == 2 and seen[1] != threading.get_ident()


def test_exit_right_after_backward_drains_autograd_threads():
    """A script that ends right after a neuron backward: the exit hook runs one
    backward per device through the C++ engine (torch_neuronx/_autograd_exit.py),
    so a device thread never drops a GraphTask holding a Python object during
    finalization (that aborted with "terminate called without an active
    exception"). The hook itself must run cleanly: nothing ignored in atexit."""
    import subprocess
    import sys

    script = (
        "import torch, torch_neuronx\n"
        "import atexit\n"
        "m = torch.nn.Linear(8, 8).to('neuron')\n"
        "for _ in range(3):\n"
        "    m(torch.randn(4, 8, device='neuron')).sum().backward()\n"
        "atexit.register(lambda: print('exit-hooks-ran', flush=True))\n"
    )
    r = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]
    assert "exit-hooks-ran" in r.stdout
    assert "Exception ignored" not in r.stderr and "terminate called" not in r.stderr, r.stderr[
        -2000:
    ]
    # The hook is what runs last of ours and it needs a live runtime: check it
    # directly too (a backward on every device, no stash in thread-local state).
    from torch_neuronx import _autograd_exit

    _autograd_exit._drain_device_threads()


def test_metrics_csv_written_at_exit_after_backward(tmp_path):
    """TORCH_NEURONX_METRICS_DIR's CSV is written at exit after a backward, and
    before the autograd exit hook runs its own kernels (atexit is last-in,
    first-out, so that hook is registered first): the CSV's kernel_launches
    is the count the script itself saw at exit."""
    import subprocess
    import sys

    script = (
        "import atexit, torch, torch_neuronx\n"
        "m = torch.nn.Linear(8, 8).to('neuron')\n"
        "m(torch.randn(4, 8, device='neuron')).sum().backward()\n"
        "def seen():\n"
        "    torch.neuron.synchronize()\n"
        "    n = torch_neuronx.metrics.get_counter_value('kernel_launches')\n"
        "    print('launches', n, flush=True)\n"
        "atexit.register(seen)\n"
    )
    env = dict(os.environ, TORCH_NEURONX_METRICS_DIR=str(tmp_path))
    r = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120, env=env
    )
    assert r.returncode == 0, r.stderr[-2000:]
    seen = int(r.stdout.split("launches")[1].split()[0])
    csvs = list(tmp_path.glob("neuron_metrics_*.csv"))
    assert len(csvs) == 1, csvs
    rows = {
        line.split(",")[0]: line.split(",")[2].strip('"')
        for line in csvs[0].read_text().splitlines()[1:]
    }
    assert int(rows["kernel_launches"]) == seen > 0


@pytest.mark.parametrize(
    "env,expect",
    [
        ({"LOCAL_RANK": "1"}, 1),  # torchrun rank 1: its own core
        ({"LOCAL_RANK": "1", "NEURON_RT_NUM_CORES": "4"}, 1),
        ({"LOCAL_RANK": "5"}, 0),  # more ranks than cores
        (
            {"LOCAL_RANK": "1", "NEURON_RT_VISIBLE_CORES": "3"},
            0,
        ),  # one core per rank, TorchNeuron's way
        ({"LOCAL_RANK": "x"}, 0),
        ({}, 0),
    ],
)
def test_launcher_rank_is_the_default_device(python, env, expect):
    """Under torchrun / accelerate each rank's default device is its own
    core, so code that never calls set_device (and accelerate's
    "neuron:{current_device()}") runs on it; set_device still wins."""
    r = python(
        """
        import torch, threading
        t = torch.empty(2, device="neuron")
        seen = []
        th = threading.Thread(target=lambda: seen.append(torch.neuron.current_device()))
        th.start(); th.join()
        torch.neuron.set_device(0)
        print(t.device.index, seen[0], torch.empty(1, device="neuron").device.index)
    """,
        env={"NEURON_RT_NUM_CORES": "2", **env},
    )
    assert r.returncode == 0, r.stderr[-2000:]
    assert r.stdout.split() == [str(expect), str(expect), "0"], r.stdout
