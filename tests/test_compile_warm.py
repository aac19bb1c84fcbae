"""Warm start (torch_neuronx/_compile/warm.py): a second process running the
same training step loads AOTAutograd's result and our compiled graphs from
the disk cache: nothing is traced by AOTAutograd, lowered or compiled, and
the results are the same. A different graph (another shape, another op, a
changed flag) is compiled, never served a wrong entry; an entry that does
not verify is recompiled."""

import json
import os
import subprocess
import sys

import pytest
import torch
import torch._dynamo

import torch_neuronx  # noqa: F401
from torch_neuronx._compile import backend as B
from torch_neuronx._compile import jobs as J
from torch_neuronx._compile import warm

# Trains a tiny model for 3 steps (forward+backward graph, optimizer graph),
# then runs a forward with a new batch size (a new graph). Prints metrics
# after each part and the numbers.
_CHILD = r"""
import json, sys, torch, torch._dynamo
import torch_neuronx
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.GELU(), torch.nn.Linear(16, 4)).to("neuron")
opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
x = torch.randn(6, 8, generator=torch.Generator().manual_seed(1)).to("neuron")

def step(x):
    opt.zero_grad(set_to_none=True)
    loss = model(x).square().mean()
    loss.backward()
    opt.step()
    return loss.detach()

step = torch.compile(step, backend="neuron")
losses = [float(step(x)) for _ in range(3)]
part1 = torch.neuron.get_dynamo_metrics()
torch.neuron.reset_dynamo_metrics()
fwd = torch.compile(lambda m, x: m(x).relu(), backend="neuron")
with torch.no_grad():
    y = fwd(model, torch.ones(3, 8, device="neuron"))
    ref = model(torch.ones(3, 8, device="neuron")).relu()
print(json.dumps({"losses": losses, "train": part1, "new_shape": torch.neuron.get_dynamo_metrics(),
                  "new_shape_err": float((y - ref).abs().max())}))
"""


def _child(env, code=_CHILD):
    r = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300
    )
    assert r.returncode == 0, r.stderr[-3000:]
    return json.loads(r.stdout.strip().splitlines()[-1])


def _in_process(monkeypatch, root):
    """The child's code in this process (saves a Python start-up)."""
    monkeypatch.setenv("TORCH_NEURONX_NEFF_CACHE_DIR", root)
    monkeypatch.delenv("TORCH_NEURONX_NEFF_DISABLE_CACHE", raising=False)
    torch._dynamo.reset()
    J._memory_cache.clear()
    torch.neuron.reset_dynamo_metrics()
    out = []
    try:
        exec(compile(_CHILD, "<cold run>", "exec"), {"print": out.append})
    finally:
        torch._dynamo.reset()
        J._memory_cache.clear()
    return json.loads(out[-1])


def _entries(root):
    d = os.path.join(root, "aot")
    return sorted(os.path.join(d, f) for f in os.listdir(d) if f.endswith(".bin"))


def test_second_process_traces_lowers_and_compiles_nothing(tmp_path, monkeypatch):
    root = str(tmp_path / "cache")
    env = dict(os.environ, TORCH_NEURONX_NEFF_CACHE_DIR=root)
    env.pop("TORCH_NEURONX_NEFF_DISABLE_CACHE", None)
    cold = _in_process(monkeypatch, root)
    assert cold["train"]["lowerings"] >= 3 and cold["train"]["warm_graphs"] == 0
    assert cold["train"]["warm_unsaved"] == 0
    assert oct(os.stat(os.path.join(root, "aot")).st_mode & 0o777) == "0o700"
    n_entries = len(_entries(root))
    assert n_entries >= 3  # forward+backward, optimizer, the second function
    # The last entry written is the second function's: corrupt it. It must be
    # rejected (and removed), never unpickled: that graph is lowered again
    # (the C compile is still a disk hit) while the training step loads warm.
    newest = max(_entries(root), key=os.path.getmtime)
    blob = bytearray(open(newest, "rb").read())
    blob[-10] ^= 0xFF
    open(newest, "wb").write(bytes(blob))
    hot = _child(env)
    t = hot["train"]
    assert t["lowerings"] == 0 and t["compiles"] == 0 and t["warm_graphs"] >= 2, t
    assert t["warm_rejected"] == 0 and t["disk_cache_hits"] == cold["train"]["lowerings"]
    assert hot["losses"] == cold["losses"]  # same kernels, same inputs: bit-identical
    s2 = hot["new_shape"]
    assert s2["warm_rejected"] == 1 and s2["warm_graphs"] == 0, s2
    assert s2["lowerings"] >= 1 and s2["compiles"] == 0 and hot["new_shape_err"] == 0.0
    assert len(_entries(root)) == n_entries  # rewritten


def _key(fn, *inputs, salt="s"):
    gm = torch.fx.symbolic_trace(fn)
    return warm.graph_key(gm, list(inputs), salt)


def test_key_covers_graph_inputs_state_and_salt():
    a = torch.randn(4, 4, device="neuron")
    base = _key(lambda x: x + 1, a)
    assert base is not None and base == _key(lambda x: x + 1, a.clone())
    others = [
        _key(lambda x: x * 2, a),  # another op
        _key(lambda x: x + 1, torch.randn(4, 5, device="neuron")),  # shape
        _key(lambda x: x + 1, a.t()),  # strides
        _key(lambda x: x + 1, a.double()),  # dtype
        _key(lambda x: x + 1, a.cpu()),  # device
        _key(lambda x: x + 1, a.clone().requires_grad_()),  # autograd
        _key(lambda x: x + 1, a, salt="t"),  # our compiler/flags
    ]
    with torch.no_grad():
        others.append(_key(lambda x: x + 1, a))  # grad mode
    assert base not in others and len(set(others)) == len(others)
    # The salt follows the flags that decide the generated code.
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("NEURON_CC_FLAGS", "")
        plain = B._salt(B._Options(None, None))
        mp.setenv("NEURON_CC_FLAGS", "-O3")  # the optimisation level (read when options are)
        assert B._salt(B._Options(None, None)) != plain
        mp.setenv("NEURON_CC_FLAGS", "--model-type=transformer")  # not applicable: same objects
        assert B._salt(B._Options(None, None)) == plain
        mp.setenv("TORCH_NEURONX_CC_EXTRA_FLAGS", "-fno-tree-vectorize")
        assert B._salt(B._Options(None, None)) != plain
    # Two inputs sharing storage are planned differently from two that do not.
    b = torch.randn(8, 4, device="neuron")
    assert _key(lambda x, y: x + y, b[:4], b[4:]) != _key(lambda x, y: x + y, a, a.clone())


def test_graph_with_unknown_function_compiles_uncached(tmp_path, monkeypatch):
    # A user function Dynamo keeps in the graph (allow_in_graph): its code is
    # not in the graph, so the graph has no key; it compiles as before and
    # nothing is written to the warm cache.
    root = tmp_path / "cache"
    monkeypatch.setenv("TORCH_NEURONX_NEFF_CACHE_DIR", str(root))
    torch._dynamo.reset()
    J._memory_cache.clear()
    torch.neuron.reset_dynamo_metrics()

    @torch._dynamo.allow_in_graph
    def user_op(x):
        return x * 3

    x = torch.arange(6.0, device="neuron")
    out = torch.compile(lambda x: user_op(x) + 1, backend="neuron")(x)
    torch.testing.assert_close(out.cpu(), torch.arange(6.0) * 3 + 1)
    assert torch.neuron.get_dynamo_metrics()["lowerings"] == 1
    assert not (root / "aot").exists() or not any((root / "aot").iterdir())
    torch._dynamo.reset()


# LLaMA's rotary embedding runs under `with torch.autocast(..., enabled=False)`:
# Dynamo keeps autocast's enter/exit in the graph. That graph must get a key
# (it used to get none, so a warm LLaMA process lowered 2 of its 4 graphs).
_AUTOCAST_CHILD = r"""
import json, torch, torch_neuronx
x = torch.linspace(-1, 1, 24, device="neuron").reshape(4, 6)
def f(x):
    with torch.autocast(device_type="cpu", enabled=False):
        y = (x.float() * 2).sin()
    return y.sum(1)
out = torch.compile(f, backend="neuron")(x)
print(json.dumps({"out": out.cpu().tolist(), "m": torch.neuron.get_dynamo_metrics()}))
"""


def test_autocast_block_graph_is_cached_warm(tmp_path):
    env = dict(os.environ, TORCH_NEURONX_NEFF_CACHE_DIR=str(tmp_path / "cache"))
    env.pop("TORCH_NEURONX_NEFF_DISABLE_CACHE", None)
    cold = _child(env, _AUTOCAST_CHILD)
    assert cold["m"]["lowerings"] == 1 and len(_entries(str(tmp_path / "cache"))) == 1
    hot = _child(env, _AUTOCAST_CHILD)
    assert hot["m"]["lowerings"] == 0 and hot["m"]["warm_graphs"] == 1, hot["m"]
    assert hot["out"] == cold["out"]


def _tracked(obj, seen) -> int:
    """GC-tracked objects reachable from obj (what a full collection walks)."""
    import gc

    if id(obj) in seen or not gc.is_tracked(obj):
        return 0
    seen.add(id(obj))
    return 1 + sum(_tracked(r, seen) for r in gc.get_referents(obj) if not isinstance(r, type))


def test_warm_entry_graphs_unpickle_into_few_gc_tracked_objects(tmp_path, monkeypatch):
    """What a warm start unpickles for each compiled graph stays small for
    the collector: the builder tape is bytes records (not a tuple and list
    per call) and only the bases of values the run hands out are kept. As
    objects, a GPT-2 training process's tapes were thousands of them, which
    brought CPython's full collections into the backend's share of a warm
    start (0.5-0.8 s each in bench_compile's long process)."""
    from torch_neuronx._compile.runtime import CompiledGraph

    _in_process(monkeypatch, str(tmp_path / "cache"))
    graphs = []
    for path in _entries(str(tmp_path / "cache")):
        blob = open(path, "rb").read()
        # (Entries leave their device open: loaded onto neuron:0.)
        entry = warm._loads(blob[len(warm.MAGIC) + 65 :], 0)
        graphs += [g for g in vars(entry).values() if isinstance(g, CompiledGraph)]
        graphs += [
            g
            for f in vars(entry).values()
            for g in getattr(f, "__dict__", {}).values()
            if isinstance(g, CompiledGraph)
        ]
    assert len(graphs) >= 3 and max(len(g.tape) for g in graphs) >= 20
    for g in graphs:
        assert _tracked(g.tape, set()) <= 2, g.name  # the Tape and its list
        used = {v.base for v in g.outputs if hasattr(v, "base")}
        assert set(g.bases) == used, g.name
