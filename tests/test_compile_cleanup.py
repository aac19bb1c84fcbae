"""Nothing of a compile outlives its process: a process SIGKILLed while its
C compiler runs leaves no compiler (nor any of the compiler's children)
running and nothing in its $TMPDIR (trn-janitor, libtrn/tools)."""

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

HERE = Path(__file__).parent


def _wait(pred, timeout=30.0):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if pred():
            return True
        time.sleep(0.1)
    return pred()


def _running(pid: int) -> bool:
    """Exists and is not a zombie (a reparented zombie may wait for init)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    return stat[stat.rindex(")") + 2] not in "ZX"


# A C compiler that records its pid, its $TMPDIR and the pid of a child of
# its own (like gcc's cc1), drops a temporary file the way gcc does, and then
# compiles forever. Version queries go to gcc.
WRAPPER = """#!/bin/sh
case "$1" in -dumpfullversion|-dumpversion|--version) exec gcc "$@";; esac
: > "$TMPDIR/ccTEMP.s"
sleep 100000 &
echo "$$ $! $TMPDIR" >> "$WRAPPER_LOG"
wait
"""


def test_sigkill_mid_compile_leaves_no_compiler_and_no_files(tmp_path):
    tmp, log, cc = tmp_path / "tmp", tmp_path / "cc.log", tmp_path / "cc.sh"
    tmp.mkdir()
    cc.write_text(WRAPPER)
    cc.chmod(0o755)
    env = dict(
        os.environ,
        TMPDIR=str(tmp),
        CC=str(cc),
        WRAPPER_LOG=str(log),
        TORCH_NEURONX_NEFF_CACHE_DIR=str(tmp_path / "cache"),
        TORCHINDUCTOR_CACHE_DIR=str(tmp_path / "inductor"),
    )
    child = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import torch, torch_neuronx\n"
            "f = torch.compile(lambda x: (x * 2).relu().sum(), backend='neuron')\n"
            "f(torch.ones(64, device='neuron')).cpu()\n",
        ],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert _wait(lambda: log.exists() and log.read_text().endswith("\n"), timeout=120), (
            child.stderr.read() if child.poll() is not None else "no compile started"
        )
        cc_pid, grandchild, cc_tmp = log.read_text().split()
        cc_pid, grandchild = int(cc_pid), int(grandchild)
        # The compiler's temporaries land in the compile's private directory,
        # inside the process's scratch root.
        root = Path(cc_tmp).parent
        assert root.parent == tmp and root.name.startswith("trn-cc-")
        assert {p.name for p in Path(cc_tmp).iterdir()} >= {"graph.c", "ccTEMP.s"}
        assert _running(cc_pid) and _running(grandchild)
        child.kill()
        child.wait()
        assert _wait(lambda: not _running(cc_pid) and not _running(grandchild)), (
            cc_pid,
            grandchild,
        )
        assert _wait(lambda: list(tmp.iterdir()) == []), list(tmp.rglob("*"))
    finally:
        child.kill()
        child.wait()
        if log.exists():
            for pid in map(int, log.read_text().split()[:2]):
                if _running(pid):
                    os.kill(pid, 9)


def test_exit_removes_the_scratch_root(tmp_path):
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    env = dict(
        os.environ,
        TMPDIR=str(tmp),
        TORCH_NEURONX_NEFF_CACHE_DIR=str(tmp_path / "cache"),
        TORCHINDUCTOR_CACHE_DIR=str(tmp_path / "inductor"),
    )
    code = (
        "import json, os, torch, torch_neuronx\n"
        "f = torch.compile(lambda x: (x + 1).sum(), backend='neuron')\n"
        "f(torch.ones(8, device='neuron')).cpu()\n"
        # while the process runs: only its (empty) scratch root
        "t = os.environ['TMPDIR']\n"
        "print(json.dumps([os.listdir(t), [os.listdir(os.path.join(t, d)) for d in os.listdir(t)]]))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300
    )
    assert out.returncode == 0, out.stderr
    names, contents = json.loads(out.stdout.strip().splitlines()[-1])
    assert len(names) == 1 and names[0].startswith("trn-cc-") and contents == [[]]
    assert _wait(lambda: list(tmp.iterdir()) == []), list(tmp.rglob("*"))


@pytest.mark.skipif(not Path("/proc/self/fd").exists(), reason="needs /proc")
def test_forked_child_compiles_with_its_own_janitor(tmp_path):
    """A forked child closes its parent's janitor pipe: the parent's janitor
    ends with the parent even while the child lives on."""
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    env = dict(
        os.environ,
        TMPDIR=str(tmp),
        TORCH_NEURONX_NEFF_CACHE_DIR=str(tmp_path / "cache"),
        TORCHINDUCTOR_CACHE_DIR=str(tmp_path / "inductor"),
    )
    code = (
        "import os, sys, torch, torch_neuronx\n"
        "f = torch.compile(lambda x: (x + 1).sum(), backend='neuron')\n"
        "f(torch.ones(8, device='neuron')).cpu()\n"
        "pid = os.fork()\n"
        "if pid == 0:\n"
        "    os.environ['TORCH_NEURONX_COMPILE_THREADS'] = '0'\n"  # (the pool's threads stayed behind)
        "    torch._dynamo.reset()\n"
        "    g = torch.compile(lambda x: (x * 3).sum(), backend='neuron')\n"
        "    print('child', float(g(torch.ones(8, device='neuron')).cpu()), flush=True)\n"
        "    sys.stdin.read()\n"  # lives on until the test closes its stdin
        "    os._exit(0)\n"
        "print('parent', pid, flush=True)\n"
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", code],
        env=env,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        lines = [proc.stdout.readline().split() for _ in range(2)]
        got = {ln[0]: ln[1] for ln in lines if ln}
        assert set(got) == {"parent", "child"}, proc.stderr.read()
        assert got["child"] == "24.0"
        assert proc.wait(timeout=120) == 0
        # the parent is gone: its root goes; the child's own root stays
        assert _wait(lambda: len(list(tmp.iterdir())) == 1), list(tmp.iterdir())
    finally:
        proc.stdin.close()
        proc.kill()
        proc.wait()
    assert _wait(lambda: list(tmp.iterdir()) == []), list(tmp.rglob("*"))


def test_reset_unloads_every_compiled_graph(tmp_path):
    """A compiled graph's shared object is unloaded once nothing references
    the graph: 12 graphs (on the compile threads), then torch._dynamo.reset()
    and a collection leave no graph object mapped; compiling one again loads
    it from the disk cache."""
    code = (
        "import gc, json, torch, torch._dynamo, torch_neuronx\n"
        "from torch_neuronx._compile import jobs as B\n"
        "def maps():\n"
        "    return sum('/trn-cc-' in line for line in open('/proc/self/maps'))\n"
        "def f(x):\n"
        "    return (x * 2).relu().sum()\n"
        "g = torch.compile(f, backend='neuron', dynamic=False)\n"
        "got = [float(g(torch.ones(n, device='neuron')).cpu()) for n in range(1, 13)]\n"
        "loaded = maps()\n"
        "del g\n"
        "torch._dynamo.reset()\n"
        "gc.collect()\n"
        "after = maps()\n"
        "g = torch.compile(f, backend='neuron', dynamic=False)\n"
        "again = float(g(torch.ones(5, device='neuron')).cpu())\n"
        "print(json.dumps([got, loaded, after, len(B._memory_cache), maps(), again,"
        " torch.neuron.get_dynamo_metrics()]))\n"
    )
    env = dict(
        os.environ,
        TMPDIR=str(tmp_path),
        TORCH_NEURONX_NEFF_CACHE_DIR=str(tmp_path / "cache"),
        TORCHINDUCTOR_CACHE_DIR=str(tmp_path / "inductor"),
    )
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=600
    )
    assert out.returncode == 0, out.stderr
    got, loaded, after, cached, reloaded, again, m = json.loads(out.stdout.strip().splitlines()[-1])
    assert got == [2.0 * n for n in range(1, 13)]
    assert loaded >= 12  # each graph's object maps several segments
    assert after == 0 and cached == 0
    assert 0 < reloaded <= loaded // 12 * 2 and again == 10.0
    assert m["disk_cache_hits"] >= 1
