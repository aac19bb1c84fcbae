"""The compile cache trusts only what the user owns (issue 26, item 1).

Another local user must not be able to run code as us through the cache:
a cache directory that is a symlink, belongs to someone else or is writable
by others is refused with a warning (the compile goes on without it); a
warm-cache entry is unpickled only once its MAC under the user's own key
verifies, so a planted pickle with a matching checksum never runs; cache
paths that cannot be used (a file, a dangling symlink, read-only) cost a
recompile, never a failed compile (item 8)."""

import hashlib
import os
import pickle
import subprocess
import sys
import textwrap
import warnings

import pytest
import torch
import torch._dynamo

import torch_neuronx  # noqa: F401
from torch_neuronx._compile import config, jobs
from torch_neuronx._compile import warm


def _cache_dir_with(monkeypatch, path):
    monkeypatch.setenv("TORCH_NEURONX_NEFF_CACHE_DIR", str(path))
    monkeypatch.delenv("TORCH_NEURONX_NEFF_DISABLE_CACHE", raising=False)
    config._refused_caches.clear()
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        d = config.cache_dir()
    return d, [str(x.message) for x in w]


def _refused(monkeypatch, path, reason):
    d, msgs = _cache_dir_with(monkeypatch, path)
    assert d is None
    assert len(msgs) == 1 and "neuron compile cache not used" in msgs[0] and reason in msgs[0], msgs


def test_private_directory_is_used_and_created_0700(tmp_path, monkeypatch):
    d, msgs = _cache_dir_with(monkeypatch, tmp_path / "a" / "cache")
    assert d == str(tmp_path / "a" / "cache") and msgs == []
    assert os.stat(d).st_mode & 0o777 == 0o700


def test_world_writable_directory_refused(tmp_path, monkeypatch):
    p = tmp_path / "open"
    p.mkdir()
    p.chmod(0o777)
    _refused(monkeypatch, p, "writable by group or others")


def test_symlink_refused(tmp_path, monkeypatch):
    (tmp_path / "real").mkdir(mode=0o700)
    (tmp_path / "link").symlink_to(tmp_path / "real")
    _refused(monkeypatch, tmp_path / "link", "symbolic link")


@pytest.mark.skipif(os.geteuid() != 0, reason="only root can hand a directory to another user")
def test_directory_of_another_user_refused(tmp_path, monkeypatch):
    p = tmp_path / "foreign"
    p.mkdir(mode=0o700)
    os.chown(p, 65534, 65534)
    _refused(monkeypatch, p, "owned by uid 65534")


@pytest.mark.parametrize("kind", ["file", "dangling", "readonly"])
def test_unusable_cache_path_skips_the_cache(tmp_path, monkeypatch, kind):
    p = tmp_path / "cache"
    if kind == "file":
        p.write_text("x")
    elif kind == "dangling":
        p.symlink_to(tmp_path / "missing")
    else:
        p.mkdir(mode=0o500)
    _, msgs = _cache_dir_with(monkeypatch, p)
    if kind != "readonly" or os.geteuid() != 0:  # root may write a 0500 directory
        assert msgs and "neuron compile cache not used" in msgs[0], msgs
    # The compile itself succeeds (without a disk cache where refused).
    torch._dynamo.reset()
    jobs._memory_cache.clear()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        f = torch.compile(lambda x: torch.sin(x) + 1, backend="neuron")
        x = torch.randn(5, device="neuron")
        torch.testing.assert_close(f(x).cpu(), torch.sin(x.cpu()) + 1)
    torch._dynamo.reset()


def test_refused_directory_keeps_the_in_memory_cache(tmp_path, monkeypatch):
    p = tmp_path / "open"
    p.mkdir()
    p.chmod(0o777)
    _refused(monkeypatch, p, "writable by group or others")
    torch._dynamo.reset()
    jobs._memory_cache.clear()
    torch.neuron.reset_dynamo_metrics()
    x = torch.randn(6, device="neuron")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        # Two functions, one graph: the second is a memory hit while the
        # first graph lives.
        f = torch.compile(lambda t: torch.cos(t) * 3, backend="neuron")
        g = torch.compile(lambda t: torch.cos(t) * 3, backend="neuron")
        f(x), g(x)
    m = torch.neuron.get_dynamo_metrics()
    assert m["memory_cache_hits"] >= 1 and m["disk_cache_hits"] == 0, m
    assert not any(p.iterdir())  # nothing written into the refused directory
    torch._dynamo.reset()


# The attack: a planted pickle runs code when unpickled.
class _Payload:
    def __init__(self, mark):
        self.mark = mark

    def __reduce__(self):
        return (os.system, (f"touch {self.mark}",))


_RUN = textwrap.dedent("""
    import json, torch, torch_neuronx
    f = torch.compile(lambda x: torch.tanh(x) * 3, backend="neuron")
    y = f(torch.arange(6.0, device="neuron"))
    ok = torch.allclose(y.cpu(), torch.tanh(torch.arange(6.0)) * 3)
    print(json.dumps({"ok": bool(ok), **torch.neuron.get_dynamo_metrics()}))
""")


def _run(env):
    r = subprocess.run(
        [sys.executable, "-c", _RUN], env=env, capture_output=True, text=True, timeout=300
    )
    assert r.returncode == 0, r.stderr[-3000:]
    import json

    return json.loads(r.stdout.strip().splitlines()[-1])


def test_planted_warm_entry_is_never_unpickled(tmp_path):
    root = tmp_path / "cache"
    env = dict(
        os.environ, TORCH_NEURONX_NEFF_CACHE_DIR=str(root), XDG_CONFIG_HOME=str(tmp_path / "config")
    )
    env.pop("TORCH_NEURONX_NEFF_DISABLE_CACHE", None)
    cold = _run(env)
    assert cold["ok"] and cold["warm_graphs"] == 0
    entries = sorted((root / "aot").glob("*.bin"))
    assert entries
    mark = tmp_path / "planted-code-ran"
    payload = pickle.dumps(_Payload(mark))
    for i, e in enumerate(entries):
        # What an attacker can write: the checksum of their payload, under
        # the old header and under the current one.
        head = warm.MAGIC if i % 2 == 0 else b"openneuron-aot-v1\n"
        e.write_bytes(head + hashlib.sha256(payload).hexdigest().encode() + b"\n" + payload)
    hot = _run(env)
    assert not mark.exists()
    assert hot["ok"] and hot["warm_rejected"] >= 1 and hot["warm_graphs"] == 0
    # The recompile rewrote the entries with the user's MAC: they load now.
    again = _run(env)
    assert again["ok"] and again["warm_graphs"] >= 1 and again["warm_rejected"] == 0
    assert not mark.exists()


def test_entry_of_the_wrong_type_is_replaced(tmp_path):
    """An entry that verifies but holds no AOTAutograd result (written by
    another version of us, say) is removed, not a failure on every compile."""
    root = tmp_path / "cache"
    env = dict(
        os.environ, TORCH_NEURONX_NEFF_CACHE_DIR=str(root), XDG_CONFIG_HOME=str(tmp_path / "config")
    )
    env.pop("TORCH_NEURONX_NEFF_DISABLE_CACHE", None)
    assert _run(env)["ok"]
    code = textwrap.dedent(f"""
        import pickle, torch_neuronx
        from torch_neuronx._compile import warm
        import pathlib
        for e in pathlib.Path({str(root / 'aot')!r}).glob("*.bin"):
            payload = pickle.dumps(42)
            e.write_bytes(warm.MAGIC + warm._mac(e.stem, payload) + b"\\n" + payload)
    """)
    subprocess.run([sys.executable, "-c", code], env=env, check=True, timeout=120)
    hot = _run(env)
    assert hot["ok"] and hot["warm_rejected"] >= 1
    again = _run(env)
    assert again["ok"] and again["warm_graphs"] >= 1 and again["warm_rejected"] == 0
