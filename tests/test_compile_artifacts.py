"""Portable and shared compile caches (issue 21, item 4).

- torch.compiler.save_cache_artifacts() / load_cache_artifacts() carry our
  compiled graphs: a process with a fresh cache directory and another cache
  key (another machine) that loads the bundle traces, lowers and compiles
  nothing, and computes the same numbers.
- Processes sharing TORCH_NEURONX_NEFF_CACHE_DIR trace, lower and compile
  each graph once (a per-key flock on the warm entry, and libtrn's on the
  object); a holder that dies, mid-lowering too, never blocks the others; a
  holder that outlives TORCH_NEURONX_NEFF_CACHE_LOCK_TIMEOUT is compiled
  around.
- TORCH_NEURONX_NEFF_CACHE_MAX_SIZE bounds the directory (least recently
  used entries go first).
- Integrity stays: an artifact that does not verify populates nothing."""

import json
import os
import subprocess
import sys
import time
import warnings

import pytest
import torch
import torch._dynamo

import torch_neuronx  # noqa: F401
from torch_neuronx import _C
from torch_neuronx._compile import artifacts, jobs

_TRAIN = r"""
import json, os, sys, torch
import torch_neuronx
mode, bundle = sys.argv[1], sys.argv[2]
if mode == "load":
    info = torch.compiler.load_cache_artifacts(open(bundle, "rb").read())
    loaded = len(info.neuron_artifacts)
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.GELU(), torch.nn.Linear(16, 4)).to("neuron")
opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
x = torch.randn(6, 8, generator=torch.Generator().manual_seed(1)).to("neuron")

@torch.compile(backend="neuron")
def step(x):
    opt.zero_grad(set_to_none=True)
    loss = model(x).square().mean()
    loss.backward()
    opt.step()
    return loss.detach()

losses = [float(step(x)) for _ in range(3)]
m = torch.neuron.get_dynamo_metrics()
out = {"losses": losses, "m": m}
if mode == "save":
    data, info = torch.compiler.save_cache_artifacts()
    open(bundle, "wb").write(data)
    out["saved"] = len(info.neuron_artifacts)
else:
    out["loaded"] = loaded
print(json.dumps(out))
"""


def _env(tmp_path, name):
    env = dict(
        os.environ,
        TORCH_NEURONX_NEFF_CACHE_DIR=str(tmp_path / name / "cache"),
        XDG_CONFIG_HOME=str(tmp_path / name / "config"),
    )
    env.pop("TORCH_NEURONX_NEFF_DISABLE_CACHE", None)
    env.pop("TORCH_NEURONX_DISABLE_NEFF_CACHE", None)
    return env


def _run(env, *args, code=_TRAIN):
    r = subprocess.run(
        [sys.executable, "-c", code, *args], env=env, capture_output=True, text=True, timeout=300
    )
    assert r.returncode == 0, r.stderr[-3000:]
    return json.loads(r.stdout.strip().splitlines()[-1])


def test_bundle_starts_a_fresh_cache_warm(tmp_path):
    bundle = str(tmp_path / "bundle.bin")
    cold = _run(_env(tmp_path, "a"), "save", bundle)
    assert cold["m"]["compiles"] >= 2 and cold["saved"] >= 4, cold  # objects + warm entries
    # Another cache directory and another user key: what a second machine has.
    hot = _run(_env(tmp_path, "b"), "load", bundle)
    m = hot["m"]
    assert hot["loaded"] == cold["saved"]
    assert m["lowerings"] == 0 and m["compiles"] == 0 and m["warm_graphs"] >= 2, m
    assert hot["losses"] == cold["losses"]
    # The entries were re-authenticated under b's own key: they verify there.
    assert any(f.endswith(".mac") for f in os.listdir(tmp_path / "b" / "cache"))


def test_artifact_that_does_not_verify_populates_nothing(tmp_path, monkeypatch):
    monkeypatch.setenv("TORCH_NEURONX_NEFF_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("TORCH_NEURONX_NEFF_DISABLE_CACHE", raising=False)
    cls = artifacts._registered[0]
    key = "ab" * 32
    good = artifacts._wrap(b"\x7fELF pretend object")
    bad = good[:-1] + bytes([good[-1] ^ 1])
    with pytest.warns(UserWarning, match="does not verify"):
        cls(f"so/{key}", bad).populate_cache()
    assert not (tmp_path / "cache" / f"{key}.so").exists()
    cls(f"so/{key}", good).populate_cache()
    assert (tmp_path / "cache" / f"{key}.so").read_bytes() == b"\x7fELF pretend object"
    # Stored under this user's MAC: the libtrn reader accepts it ...
    mac = (tmp_path / "cache" / f"{key}.mac").read_text()
    assert mac == _C._compile_cache_mac(key, b"\x7fELF pretend object")
    with pytest.warns(UserWarning, match="does not verify"):
        cls("nonsense", good).populate_cache()


# ---- processes sharing one cache ----------------------------------------------------------

_SHARED = r"""
import json, sys, time, torch
import torch_neuronx
start = float(sys.argv[1])
while time.time() < start:  # all ranks compile at the same moment
    time.sleep(0.005)
fns = [lambda x: (x.exp() * 3).sin() + x, lambda x: x.tanh().cumsum(0) * 2, lambda x: (x * x).sum(1).sqrt()]
outs = [torch.compile(f, backend="neuron")(torch.linspace(0, 1, 48, device="neuron").reshape(6, 8)).cpu().tolist()
        for f in fns]
print(json.dumps({"m": torch.neuron.get_dynamo_metrics(), "outs": outs}))
"""


@pytest.mark.parametrize("threads", ["0", "2"])
def test_processes_sharing_a_cold_cache_compile_each_graph_once(tmp_path, threads):
    """4 processes, 3 graphs: each graph is traced, lowered and compiled by
    one of them (holding its warm entry's lock, its C compile finished
    before it lets go: on the compile threads too); the others load it."""
    env = _env(tmp_path, "shared")
    env["TORCH_NEURONX_COMPILE_THREADS"] = threads
    start = time.time() + 6
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", _SHARED, str(start)],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(4)
    ]
    results = []
    for p in procs:
        out, err = p.communicate(timeout=300)
        assert p.returncode == 0, err[-3000:]
        results.append(json.loads(out.strip().splitlines()[-1]))
    ms = [r["m"] for r in results]
    assert sum(m["compiles"] for m in ms) == 3, ms
    assert sum(m["lowerings"] for m in ms) == 3, ms
    assert sum(m["warm_graphs"] for m in ms) == 9, ms
    # The loaders took the objects from the disk cache.
    assert sum(m["disk_cache_hits"] for m in ms) == 9, ms
    assert all(r["outs"] == results[0]["outs"] for r in results)


# A process that dies holding a warm entry's lock, in the middle of lowering.
_DIE_LOWERING = r"""
import sys, time, torch
import torch_neuronx
from torch_neuronx._compile import jobs
def run(self):
    print("lowering", flush=True)
    time.sleep(600)
jobs.Lowerer.run = run
torch.compile(lambda x: (x * 5).exp2() - x, backend="neuron")(torch.ones(3, 7, device="neuron"))
"""

# A process that reports when it starts waiting for that lock.
_WAIT = r"""
import json, torch
import torch_neuronx
from torch_neuronx._compile import shared
take = shared._acquire
def acquire(*a):
    print("acquiring", flush=True)
    return take(*a)
shared._acquire = acquire
x = torch.linspace(-1, 1, 21, device="neuron").reshape(3, 7)
y = torch.compile(lambda x: (x * 5).exp2() - x, backend="neuron")(x)
torch.testing.assert_close(y.cpu(), (x.cpu() * 5).exp2() - x.cpu())
print(json.dumps(torch.neuron.get_dynamo_metrics()))
"""


def test_a_holder_killed_while_lowering_never_blocks(tmp_path):
    env = _env(tmp_path, "killed")
    env["TORCH_NEURONX_NEFF_CACHE_LOCK_TIMEOUT"] = "1200"  # a lock left held would hang
    h = subprocess.Popen(
        [sys.executable, "-c", _DIE_LOWERING], env=env, stdout=subprocess.PIPE, text=True
    )
    w = None
    try:
        assert h.stdout.readline().strip() == "lowering"
        w = subprocess.Popen(
            [sys.executable, "-c", _WAIT],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        assert w.stdout.readline().strip() == "acquiring"
        time.sleep(0.5)  # blocked on the holder's flock
        h.kill()  # SIGKILL mid-lowering: the kernel drops the lock
        h.wait()
        out, err = w.communicate(timeout=300)
        assert w.returncode == 0, err[-3000:]
    finally:
        for p in (h, w):
            if p is not None and p.poll() is None:
                p.kill()
                p.wait()
    m = json.loads(out.strip().splitlines()[-1])
    # It waited, found no entry, and made it itself.
    assert m["warm_lock_waits"] == 1 and m["lowerings"] == 1 and m["compiles"] == 1, m
    assert m["warm_graphs"] == 0, m


_HOLD = r"""
import fcntl, os, sys, time
fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT, 0o600)
fcntl.flock(fd, fcntl.LOCK_EX)
print("held", flush=True)
time.sleep(600)
"""


def _compile_key(tmp_path, monkeypatch, fn, x):
    """The libtrn cache key fn's graph compiles under (compiled once here)."""
    torch._dynamo.reset()
    jobs._memory_cache.clear()
    torch.compile(fn, backend="neuron")(x)
    keys = [g.program.cache_key for g in list(jobs._memory_cache.values()) if g.program is not None]
    assert len(keys) == 1
    return keys[0]


@pytest.fixture
def cache(tmp_path, monkeypatch):
    root = tmp_path / "cache"
    monkeypatch.setenv("TORCH_NEURONX_NEFF_CACHE_DIR", str(root))
    monkeypatch.setenv("TORCH_NEURONX_COMPILE_THREADS", "0")
    monkeypatch.delenv("TORCH_NEURONX_NEFF_DISABLE_CACHE", raising=False)
    torch._dynamo.reset()
    jobs._memory_cache.clear()
    torch.neuron.reset_dynamo_metrics()
    yield root
    torch._dynamo.reset()
    jobs._memory_cache.clear()


def _forget(root):
    """Drops every compiled entry (objects, warm entries) and what this process holds."""
    for p in root.glob("*.so"):
        p.unlink()
    for p in (root / "aot").glob("*.bin"):
        p.unlink()
    torch._dynamo.reset()
    jobs._memory_cache.clear()
    torch.neuron.reset_dynamo_metrics()


def _holder(lock):
    h = subprocess.Popen(
        [sys.executable, "-c", _HOLD, str(lock)], stdout=subprocess.PIPE, text=True
    )
    assert h.stdout.readline().strip() == "held"
    return h


def test_a_dead_lock_holder_never_blocks(cache, monkeypatch):
    x = torch.randn(5, 6, device="neuron")
    fn = lambda x: x.sigmoid() * 7 - x  # noqa: E731
    key = _compile_key(cache.parent, monkeypatch, fn, x)
    lock = cache / "locks" / f"{key}.lock"
    assert lock.exists()
    _forget(cache)
    h = _holder(lock)
    h.kill()  # SIGKILL: the kernel drops its flock
    h.wait()
    monkeypatch.setenv(
        "TORCH_NEURONX_NEFF_CACHE_LOCK_TIMEOUT", "1200"
    )  # a held lock would hang the test
    y = torch.compile(fn, backend="neuron")(x)
    torch.testing.assert_close(y.cpu(), fn(x.cpu()))
    assert torch.neuron.get_dynamo_metrics()["compiles"] == 1


def test_a_live_holder_past_the_timeout_is_compiled_around(cache, monkeypatch):
    x = torch.randn(4, 3, device="neuron")
    fn = lambda x: x.cos() + 11  # noqa: E731
    key = _compile_key(cache.parent, monkeypatch, fn, x)
    _forget(cache)
    h = _holder(cache / "locks" / f"{key}.lock")
    try:
        monkeypatch.setenv("TORCH_NEURONX_NEFF_CACHE_LOCK_TIMEOUT", "0.5")
        y = torch.compile(fn, backend="neuron")(x)
    finally:
        h.kill()
        h.wait()
    torch.testing.assert_close(y.cpu(), fn(x.cpu()))
    assert torch.neuron.get_dynamo_metrics()["compiles"] == 1
    assert (cache / f"{key}.so").exists()


# ---- size bound ---------------------------------------------------------------------------


def test_evict_removes_least_recently_used_first(tmp_path):
    d = str(tmp_path / "c")
    keys = [c * 64 for c in "abc"]
    for i, k in enumerate(keys):
        _C._compile_cache_store(d, k, b"x" * 1000)
        for suffix in (".so", ".mac"):
            os.utime(os.path.join(d, k + suffix), (1000 + i, 1000 + i))
    # 3 x (1000 + 64) bytes; the bound keeps two entries: the oldest goes.
    assert _C._compile_cache_evict(d, 2200, None) == 1064
    assert sorted(f for f in os.listdir(d) if f.endswith(".so")) == [
        keys[1] + ".so",
        keys[2] + ".so",
    ]
    # `keep` is never removed, even when it is the oldest.
    assert _C._compile_cache_evict(d, 1, keys[1]) == 1064
    assert [f for f in os.listdir(d) if f.endswith((".so", ".mac"))] != []
    assert os.path.exists(os.path.join(d, keys[1] + ".so")) and not os.path.exists(
        os.path.join(d, keys[2] + ".so")
    )


def test_cache_stays_within_its_bound(cache, monkeypatch):
    x = torch.randn(8, 8, device="neuron")
    fns = [lambda x: x + 1, lambda x: x * 3, lambda x: x.exp(), lambda x: x.abs() - 2]
    torch.compile(fns[0], backend="neuron")(x)
    one = sum(p.stat().st_size for p in cache.glob("*.so")) + 64
    one_aot = sum(p.stat().st_size for p in (cache / "aot").glob("*.bin"))
    bound = int(2.5 * (one + one_aot))
    monkeypatch.setenv("TORCH_NEURONX_NEFF_CACHE_MAX_SIZE", str(bound))
    for f in fns[1:]:
        torch._dynamo.reset()
        y = torch.compile(f, backend="neuron")(x)
        torch.testing.assert_close(y.cpu(), f(x.cpu()))
        total = sum(p.stat().st_size for p in cache.glob("*.so")) + sum(
            p.stat().st_size for p in cache.glob("*.mac")
        )
        total += sum(p.stat().st_size for p in (cache / "aot").glob("*.bin"))
        assert total <= bound, (total, bound)
    assert len(list(cache.glob("*.so"))) < len(fns)


# ---- ranks on their own devices share entries ---------------------------------------------

_ON_DEVICE = r"""
import json, sys, torch
import torch_neuronx
dev = torch.device("neuron", int(sys.argv[1]))
torch.neuron.set_device(dev)
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(5, 7), torch.nn.GELU(), torch.nn.Linear(7, 3)).to(dev)
x = torch.randn(4, 5, generator=torch.Generator().manual_seed(1)).to(dev)
f = lambda x: (model(x).sin() * torch.ones(3, device=x.device)).sum()
y = torch.compile(f, backend="neuron")(x)
y.backward()
grad = model[0].weight.grad
print(json.dumps({"y": y.item(), "grad": grad.cpu().tolist(), "devices": [str(y.device), str(grad.device)],
                  "m": torch.neuron.get_dynamo_metrics()}))
"""


def test_an_entry_made_on_one_device_loads_onto_another(tmp_path):
    """Ranks run on neuron:<local rank>: the warm key leaves the graph's one
    device open and the entry loads onto the loading process's device."""
    env = _env(tmp_path, "devices")
    made = _run(env, "1", code=_ON_DEVICE)
    loaded = _run(env, "0", code=_ON_DEVICE)
    assert made["m"]["lowerings"] == 2 and made["m"]["warm_graphs"] == 0, made["m"]
    assert loaded["m"]["lowerings"] == 0 and loaded["m"]["warm_graphs"] == 1, loaded["m"]
    assert made["devices"] == ["neuron:1"] * 2 and loaded["devices"] == ["neuron:0"] * 2
    assert loaded["y"] == made["y"] and loaded["grad"] == made["grad"]


def test_warm_key_leaves_only_a_single_device_open():
    from torch_neuronx._compile import warm

    def key(*devices):
        g = torch.fx.Graph()
        xs = [g.placeholder(f"x{i}") for i in range(len(devices))]
        out = g.call_function(
            torch.ops.aten.add.Tensor,
            (
                xs[0],
                g.call_function(
                    torch.ops.aten._to_copy.default, (xs[-1],), {"device": torch.device(devices[0])}
                ),
            ),
        )
        g.output(out)
        gm = torch.fx.GraphModule(torch.nn.Module(), g)
        return warm.graph_key_and_device(gm, [torch.ones(2, device=d) for d in devices], "salt")

    (k0, d0), (k1, d1) = key("neuron:0"), key("neuron:1")
    assert (d0, d1) == (0, 1) and k0 == k1
    # Two devices: the key names them, and opens nothing.
    (k01, d01), (k10, d10) = key("neuron:0", "neuron:1"), key("neuron:1", "neuron:0")
    assert d01 is None and d10 is None and k01 != k10 and k01 != k0
