"""Warm start: a second process skips AOTAutograd's tracing and our lowering.

Owner: the warm cache, one file per Dynamo graph under
``$TORCH_NEURONX_NEFF_CACHE_DIR/aot/``. It holds what AOTAutograd built for
the graph (its runtime metadata and wrappers: PyTorch's own
BundledAOTAutogradResult, loaded by PyTorch's own code) and, inside it, our
compiled graphs as builder tapes plus run plans (runtime.CompiledGraph);
their shared objects come from libtrn's disk cache, so nothing is traced,
lowered or compiled.

We reuse AOTAutogradCache's entry machinery but not its key or its
directory: its key hashes every torch source file (over a second per
process) yet knows nothing of our decompositions, lowering or compiler. Our
key (``graph_key``) hashes the Dynamo graph, each input's metadata and
aliasing, the global state AOTAutograd reads, the functorch config, torch's
version and our compiler's sources, version and flags. It leaves the
graph's neuron device open when the graph uses exactly one
(``graph_key_and_device``): ranks on neuron:<local rank> share one entry,
which is pickled with that device as a persistent id and so loads onto the
loading process's device. The two AOTAutogradCache entry points are
replaced only while our backend runs AOTAutograd (Dynamo compiles one graph
at a time), and the backward is compiled eagerly then, so the entry is
complete when it is saved.

Files are ``MAGIC, MAC, payload``: the MAC is libtrn's HMAC of the key and
the payload under the user's cache key (kept 0600 outside the cache), so
only this user's processes can make an entry that loads; written
atomically (private temporary file, rename) in a directory libtrn trusts
(the user's own, not writable by others); a file whose MAC does not verify,
or that does not hold an AOTAutograd entry, is removed and recompiled, and
nothing is unpickled before its MAC verifies.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import hashlib
import hmac
import io
import os
import pickle
import re
import tempfile
import time
import warnings
from pathlib import Path

import torch
from torch.utils._python_dispatch import is_traceable_wrapper_subclass

from .. import _C
from . import metrics

MAGIC = b"openneuron-aot-v3\n"


@functools.cache
def _sources_hash() -> str:
    """Our Python compiler (decompositions, lowering, runtime plan): a change
    to it must not load entries it made."""
    h = hashlib.sha256()
    here = Path(__file__).resolve().parent
    for p in sorted(here.glob("*.py")):
        h.update(p.name.encode())
        h.update(p.read_bytes())
    return h.hexdigest()


def _tensor_meta(x: torch.Tensor) -> str:
    return (
        f"T{tuple(x.shape)}:{x.stride()}:{x.storage_offset()}:{x.dtype}:{x.device}:{x.requires_grad}:"
        f"{x.is_leaf}:{type(x).__name__}:{x.is_inference()}:{x.untyped_storage().nbytes()}"
    )


def _constant_bytes(c: torch.Tensor) -> bytes:
    from torch._subclasses.fake_tensor import unset_fake_temporarily

    with unset_fake_temporarily():
        return c.detach().to("cpu").contiguous().reshape(-1).view(torch.uint8).numpy().tobytes()


def module_state(gm: torch.nn.Module) -> list:
    """The graph's own parameters and buffers (nn modules Dynamo did not
    inline), which AOTAutograd passes as leading inputs, in its order."""
    return [
        *dict(gm.named_parameters(remove_duplicate=False)).values(),
        *dict(gm.named_buffers(remove_duplicate=False)).values(),
    ]


def _graph_text(graph: torch.fx.Graph) -> str:
    """The graph's nodes as text, for the key: what ``gm.code`` says, without
    generating and compiling Python (Dynamo's graph modules recompile lazily:
    ``.code`` was ~40 % of a warm start's backend time)."""
    from torch.fx.node import _get_qualified_name

    lines = []
    for n in graph.nodes:
        t = n.target
        if callable(t):
            try:
                t = _get_qualified_name(t)
            except Exception:  # noqa: BLE001 - a repr with an address: a key no other process reuses
                t = repr(t)
        lines.append(f"{n.op} {n.name} {t} {n.args!r} {n.kwargs!r}")
    return "\n".join(lines)


_AUTOCAST_FNS = {
    "torch.amp.autocast_mode._enter_autocast": torch.__version__,
    "torch.amp.autocast_mode._exit_autocast": torch.__version__,
}


def graph_key(gm: torch.fx.GraphModule, example_inputs, salt: str) -> str | None:
    """The warm-cache key of one Dynamo graph and its inputs, or None when the
    graph holds something this key cannot describe (then nothing is cached)."""
    return graph_key_and_device(gm, example_inputs, salt)[0]


# A neuron device as the graph's text, the inputs' metadata and the entry's
# strings write it.
_NEURON_DEVICE = re.compile(r"device\(type='neuron', index=(\d+)\)|neuron:(\d+)")
_ANY_INDEX = "\x00neuron-index\x00"


def _device_indices(text: str) -> set[int]:
    return {int(a or b) for a, b in _NEURON_DEVICE.findall(text)}


def _neutral(text: str) -> str:
    """text with its neuron device index left open (the graph's one device)."""
    return _NEURON_DEVICE.sub(
        lambda m: m.group(0).replace(m.group(1) or m.group(2), _ANY_INDEX, 1), text
    )


def graph_key_and_device(gm: torch.fx.GraphModule, example_inputs, salt: str):
    """(key, device index): ``graph_key``, and the one neuron device the graph
    and its inputs use, which the key leaves open (None: several, or none;
    then the key names them). Ranks of a job each run on their own device
    (neuron:<local rank>): with the index open they share one entry, which
    loads onto the loading process's device (``_EntryUnpickler``)."""
    parts = _graph_key_parts(gm, example_inputs, salt)
    if parts is None:
        return None, None
    seen: set[int] = set()
    for p in parts:
        if isinstance(p, str):
            seen |= _device_indices(p)
    device = seen.pop() if len(seen) == 1 else None
    h = hashlib.sha256()
    h.update(MAGIC)
    h.update(f"device={'open' if device is not None else 'named'}\n".encode())
    for p in parts:
        if isinstance(p, str):
            h.update((_neutral(p) if device is not None else p).encode())
        else:
            h.update(p)
    return h.hexdigest(), device


def _graph_key_parts(gm: torch.fx.GraphModule, example_inputs, salt: str):
    """What graph_key hashes, in order (str: text that may name the device;
    bytes: constants), or None when the graph cannot be cached."""
    from torch._functorch import config as functorch_config
    from torch._functorch._aot_autograd.autograd_cache import check_cacheable

    from torch._inductor import config as inductor_config

    try:
        # PyTorch's own test: only torch ops, builtins and known functions,
        # plus autocast's enter/exit, which Dynamo puts in the graph for a
        # `with torch.autocast(...)` block (LLaMA's rotary embedding): their
        # arguments are in the graph's code, which the key hashes, and the
        # traced graph they produce depends on nothing else.
        marked = {**inductor_config.unsafe_marked_cacheable_functions, **_AUTOCAST_FNS}
        with inductor_config.patch(unsafe_marked_cacheable_functions=marked):
            check_cacheable(gm)
    except Exception:  # noqa: BLE001 - BypassAOTAutogradCache and friends
        return None
    parts: list = []
    for name, mod in gm.named_modules():
        if isinstance(mod, torch.fx.GraphModule):
            parts.append(f"module {name}\n")
            parts.append(_graph_text(mod.graph))
        elif name:
            return None  # a real submodule: its state is not in the code
        lifted = {id(t) for t in module_state(mod)}
        for node in mod.graph.nodes:
            if node.op == "get_attr":
                c = functools.reduce(getattr, node.target.split("."), mod)
                if isinstance(c, torch.Tensor):
                    parts.append(f"attr {node.target}:{_tensor_meta(c)}")
                    # Parameters and buffers are inputs to AOTAutograd (hashed
                    # below); other tensors are baked into the graph.
                    if id(c) not in lifted:
                        parts.append(_constant_bytes(c))
                elif not isinstance(c, torch.fx.GraphModule):
                    return None
    # Inputs: metadata, and which earlier input each one shares storage with
    # (AOTAutograd plans aliased inputs differently).
    storages: dict[int, int] = {}
    for i, x in enumerate([*module_state(gm), *example_inputs]):
        if isinstance(x, torch.Tensor):
            if is_traceable_wrapper_subclass(x):
                # A DTensor (SimpleFSDP, tensor parallel): no storage of its
                # own, and its placements and mesh, which the trace depends
                # on, are not in the metadata hashed here: not cached.
                return None
            ptr = x.untyped_storage().data_ptr()
            alias = storages.setdefault(ptr, i) if ptr else i
            parts.append(f"in{i}:{_tensor_meta(x)}:alias{alias};")
        elif isinstance(x, (int, float, bool, str, type(None))):
            parts.append(f"in{i}:{type(x).__name__}:{x!r};")
        else:
            return None
    autocast = [
        (d, torch.get_autocast_dtype(d))
        for d in torch._C._autocast_supported_devices()
        if torch.is_autocast_enabled(d)
    ]
    parts.append(
        f"grad={torch.is_grad_enabled()} autocast={autocast} "
        f"det={torch.are_deterministic_algorithms_enabled()} torch={torch.__version__} "
        f"src={_sources_hash()} {salt}"
    )
    parts.append(functorch_config.save_config())
    return parts


def _dir(root: str) -> str:
    d = os.path.join(root, "aot")
    why = _C._compile_cache_check_dir(d)  # created 0700, refused unless private
    if why:
        raise OSError(why)
    return d


def _mac(key: str, payload: bytes) -> bytes:
    return _C._compile_cache_mac(key, payload).encode()


def _entry_type():
    from torch._functorch._aot_autograd.autograd_cache import BundledAOTAutogradResult

    return BundledAOTAutogradResult


class _EntryPickler(pickle.Pickler):
    """Pickles an entry whose key leaves its device open: every reference to
    that neuron device (torch.device objects, and strings naming it: FX
    code, debug text) is written as a persistent id, so that the entry loads
    onto another process's device."""

    def __init__(self, f, device: int):
        super().__init__(f)
        self.device = device

    def persistent_id(self, obj):
        t = type(obj)
        if t is torch.device:
            if obj.type == "neuron" and obj.index == self.device:
                return ("neuron-device",)
        elif t is str and "neuron" in obj and _device_indices(obj) == {self.device}:
            return ("neuron-text", _neutral(obj))
        return None


class _EntryUnpickler(pickle.Unpickler):
    def __init__(self, f, device: int | None):
        super().__init__(f)
        self.device = device

    def persistent_load(self, pid):
        if self.device is None or not isinstance(pid, tuple) or not pid:
            raise pickle.UnpicklingError(f"warm entry: unexpected persistent id {pid!r}")
        if pid[0] == "neuron-device":
            return torch.device("neuron", self.device)
        if pid[0] == "neuron-text" and len(pid) == 2 and isinstance(pid[1], str):
            return pid[1].replace(_ANY_INDEX, str(self.device))
        raise pickle.UnpicklingError(f"warm entry: unexpected persistent id {pid!r}")


def _dumps(entry, device: int | None) -> bytes:
    if device is None:
        return pickle.dumps(entry)
    f = io.BytesIO()
    _EntryPickler(f, device).dump(entry)
    return f.getvalue()


def _loads(payload: bytes, device: int | None):
    return _EntryUnpickler(io.BytesIO(payload), device).load()


def load(root: str, key: str, device: int | None = None):
    """The verified, unpickled entry for key (onto neuron ``device`` when the
    key leaves it open), or None."""
    path = os.path.join(_dir(root), key + ".bin")
    try:
        with open(path, "rb") as f:
            blob = f.read()
    except FileNotFoundError:
        return None
    head = len(MAGIC) + 65
    digest = blob[len(MAGIC) : head - 1]
    payload = blob[head:]
    entry = None
    if blob.startswith(MAGIC) and hmac.compare_digest(_mac(key, payload), digest):
        entry = _loads(payload, device)
        if isinstance(entry, _entry_type()):
            with contextlib.suppress(OSError):
                os.utime(path)  # a use: the cache's size bound evicts the least recently used
            from . import artifacts

            artifacts.record_warm(key, payload)
    if not isinstance(entry, _entry_type()):
        # Never unpickle bytes that do not verify, and never keep an entry
        # that cannot load (it would fail every compile): recompiled.
        metrics.add(warm_rejected=1)
        with contextlib.suppress(OSError):
            os.unlink(path)
        return None
    return entry


def save(root: str, key: str, entry, device: int | None = None) -> bool:
    try:
        entry.pre_save()
        with torch.utils._python_dispatch._disable_current_modes():
            payload = _dumps(entry, device)
    except Exception as e:  # noqa: BLE001 - an unpicklable graph is simply not cached
        metrics.add(warm_unsaved=1)
        from .. import _logging

        _logging.log(
            _logging.INFO, "compile", f"warm cache: graph not saved ({type(e).__name__}: {e})"
        )
        return False
    from . import artifacts

    artifacts.record_warm(key, payload)
    return store_payload(root, key, payload)


def store_payload(root: str, key: str, payload: bytes) -> bool:
    """Writes a warm entry's payload under its MAC (atomically), then keeps
    the cache within TORCH_NEURONX_NEFF_CACHE_MAX_SIZE."""
    try:
        d = _dir(root)
    except OSError as e:  # a refused directory costs a recompile, nothing more
        metrics.add(warm_unsaved=1)
        from .. import _logging

        _logging.log(_logging.INFO, "compile", f"warm cache: graph not saved ({e})")
        return False
    fd, tmp = tempfile.mkstemp(dir=d, prefix=".tmp-")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(MAGIC + _mac(key, payload) + b"\n" + payload)
        os.replace(tmp, os.path.join(d, key + ".bin"))
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    from .config import cache_max_bytes

    bound = cache_max_bytes()
    if bound:
        _C._compile_cache_evict(root, bound, key)
    return True


def load_compiled(root: str, key: str, gm: torch.fx.GraphModule, device: int | None = None):
    """The compiled callable for a Dynamo graph from its warm entry, or None.
    PyTorch's own loader rebuilds AOTAutograd's runtime wrappers around our
    graphs (whose ``post_compile`` rebuilds the programs), with the
    AOTAutograd config saved in the entry, as PyTorch's precompile path does:
    AOTAutograd's set-up (fake copies of every input) is skipped too."""
    from torch._functorch._aot_autograd.autograd_cache import create_fx_config

    try:
        entry = load(root, key, device)
    except Exception as e:  # noqa: BLE001 - e.g. an entry pickled by another PyTorch
        warnings.warn(
            f"neuron warm cache: cannot read entry {key[:12]}: {type(e).__name__}: {e}; recompiling"
        )
        return None
    if entry is None or entry.guards_expr:  # static shapes only: no shape guards expected
        return None
    try:
        fn = entry.wrap_post_compile([], entry.sanitized_aot_config, create_fx_config(None, None))
    except Exception as e:  # noqa: BLE001
        warnings.warn(
            f"neuron warm cache: entry {key[:12]} did not load: {type(e).__name__}: {e}; recompiling"
        )
        return None
    metrics.add(warm_graphs=1)

    # Dynamo's calling convention (what aot_module_simplified returns):
    # positional inputs, after the graph's own parameters and buffers.
    state = module_state(gm)

    def forward(*runtime_args):
        return fn([*state, *runtime_args])

    return forward


@contextlib.contextmanager
def aot_cache(root: str, key: str, decompositions, save_later=None, device: int | None = None):
    """While AOTAutograd compiles a graph that missed the warm cache: save
    what it makes under our key in our directory (``save_later(fn)``, when
    given, gets the save to run once the graph's C compiles succeeded).
    AOTAutograd is called without decompositions; ``decompositions()``
    builds the table here, on a miss, when tracing needs it (a warm process
    never does)."""
    from torch._functorch import config as functorch_config
    from torch._functorch._aot_autograd.autograd_cache import AOTAutogradCache
    from torch._functorch._aot_autograd.schemas import AOTAutogradCacheInfo

    def try_load(
        mod, args, aot_config, compiler_config_extra, local, remote, compile_region_name=None
    ):
        # load_compiled already looked: a miss, to be saved under our key.
        info = AOTAutogradCacheInfo(key, time.time_ns(), forward_symints=[])
        return None, dataclasses.replace(
            aot_config, cache_info=info, decompositions=decompositions()
        )

    def save_entry(cache_key, entry, remote):
        if save_later is None:
            save(root, cache_key, entry, device)
        else:
            save_later(functools.partial(save, root, cache_key, entry, device))

    with contextlib.ExitStack() as stack:
        stack.enter_context(
            functorch_config.patch(
                enable_autograd_cache=True,
                bundled_autograd_cache=True,
                force_non_lazy_backward_lowering=True,
            )
        )
        stack.enter_context(_patch_static(AOTAutogradCache, "try_load", try_load))
        stack.enter_context(_patch_static(AOTAutogradCache, "save", save_entry))
        yield


@contextlib.contextmanager
def _patch_static(cls, name, fn):
    old = cls.__dict__[name]
    setattr(cls, name, staticmethod(fn))
    try:
        yield
    finally:
        setattr(cls, name, old)
