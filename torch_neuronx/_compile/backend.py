"""torch.compile(backend="neuron"): Dynamo -> AOTAutograd -> libtrn compiler.

Owner: the backend entry (``neuron_backend``), its options and environment
variables, the per-graph compile with in-memory and disk caching, and the
fallback policy. TorchNeuron's documented behaviour: ``dynamic=True`` is
rejected, a ``mode`` other than "default" warns, an op that cannot be lowered
fails the compile naming it unless fallback execution is on, CPU inputs are
copied to the device.
"""
from __future__ import annotations

import functools
import hashlib
import os
import tempfile
import time
import warnings
from pathlib import Path

import torch
from torch._dynamo.backends.common import aot_autograd
from torch._functorch.aot_autograd import make_boxed_func
from torch._functorch.partitioners import min_cut_rematerialization_partition

from .. import _C, _logging
from . import metrics
from .lower import Lowerer, UnsupportedOpError
from .runtime import CompiledGraph


class NeuronCompileError(RuntimeError):
    """The neuron backend cannot compile this graph (see the message)."""


def _env_flag(name: str, default: bool) -> bool:
    v = os.environ.get(name)
    if v is None or v == "":
        return default
    return v.strip().lower() not in ("0", "false", "no", "off")


def _include_dir() -> str:
    here = Path(__file__).resolve().parent.parent
    for cand in (here / "include", here.parent / "libtrn" / "include"):
        if (cand / "trn" / "scalar.h").is_file():
            return str(cand)
    raise NeuronCompileError("neuron compiler: libtrn headers (trn/scalar.h) not found next to torch_neuronx")


def cache_dir() -> str | None:
    if _env_flag("TORCH_NEURONX_NEFF_DISABLE_CACHE", False):
        return None
    d = os.environ.get("TORCH_NEURONX_NEFF_CACHE_DIR")
    return d or os.path.join(tempfile.gettempdir(), f"openneuron-compile-cache-{os.getuid()}")


def debug_dir() -> str | None:
    if not _env_flag("TORCH_NEURONX_PRESERVE_COMPILATION_ARTIFACTS", False):
        return None
    d = os.environ.get("TORCH_NEURONX_DEBUG_DIR") or os.path.join(os.getcwd(), "neuron_debug")
    os.makedirs(d, mode=0o700, exist_ok=True)
    return d


class _Options:
    def __init__(self, options, mode):
        options = dict(options or {})
        if mode not in (None, "default"):
            warnings.warn(f"torch.compile(backend='neuron'): mode={mode!r} is not supported; using 'default'",
                          stacklevel=3)
        fb = options.pop("fallback_execution", None)
        if fb is None:
            fb = not _env_flag("TORCH_NEURONX_DISABLE_FALLBACK_EXECUTION", True)
        self.fallback = bool(fb)
        self.model_name = str(options.pop("model_name", "graph"))


_memory_cache: dict[str, CompiledGraph] = {}
_graph_counter = [0]


def _graph_key(gm: torch.fx.GraphModule, kind: str) -> str:
    h = hashlib.sha256()
    h.update(gm.code.encode())
    for node in gm.graph.nodes:
        v = node.meta.get("val")
        for t in (v if isinstance(v, (list, tuple)) else [v]):
            if isinstance(t, torch.Tensor):
                h.update(f"{node.name}:{tuple(t.shape)}:{t.stride()}:{t.storage_offset()}:{t.dtype}:{t.device};"
                         .encode())
        if node.op == "get_attr":
            c = getattr(gm, node.target)
            if isinstance(c, torch.Tensor):
                # Baked constants are part of the graph: hash their bytes.
                from torch._subclasses.fake_tensor import unset_fake_temporarily
                with unset_fake_temporarily():
                    data = c.detach().to("cpu").contiguous().reshape(-1).view(torch.uint8).numpy().tobytes()
                h.update(f"{node.target}:{c.dtype}:{tuple(c.shape)}".encode())
                h.update(data)
    h.update(f"{kind}|{_C._compiler_version()}|{os.environ.get('NEURON_CC_FLAGS', '')}|"
             f"{os.environ.get('CC', '')}|{torch.__version__}|"
             f"{os.environ.get('TORCH_NEURONX_NATIVE_FLOAT64', '')}".encode())
    return h.hexdigest()


def _device_of(gm) -> torch.device:
    for node in gm.graph.nodes:
        v = node.meta.get("val")
        for t in (v if isinstance(v, (list, tuple)) else [v]):
            if isinstance(t, torch.Tensor) and t.device.type == "neuron":
                return torch.device("neuron", t.device.index or 0)
    return torch.device("neuron", 0)


def compile_fx_graph(gm: torch.fx.GraphModule, kind: str, opts: _Options):
    """Lowers and compiles one AOT graph; returns a boxed callable."""
    t0 = time.perf_counter()
    use_cache = cache_dir() is not None
    key = _graph_key(gm, kind)
    if use_cache and key in _memory_cache:
        metrics.add(graphs=1, cache_hits=1, memory_cache_hits=1, compile_seconds=time.perf_counter() - t0)
        _C._counter_add("compile_cache_hits", _memory_cache[key].device.index or 0, 1)
        return _memory_cache[key]
    _graph_counter[0] += 1
    name = f"{opts.model_name}_{_graph_counter[0]}_{kind}"
    ddir = debug_dir()
    if ddir:
        Path(ddir, name + ".fx.txt").write_text(gm.print_readable(print_output=False))
    try:
        lowered = Lowerer(gm).run()
        try:
            program = lowered.graph.compile(_include_dir(), cache_dir(), ddir, name)
        except NotImplementedError:
            if not lowered.stores:
                raise
            # The schedule cannot order an in-place input update after every
            # read of the old values: the copies run eagerly instead.
            lowered = Lowerer(gm, in_place=False).run()
            program = lowered.graph.compile(_include_dir(), cache_dir(), ddir, name)
    except UnsupportedOpError as e:
        if not opts.fallback:
            raise NeuronCompileError(str(e)) from None
        warnings.warn(f"neuron backend: {e}; running graph {name} eagerly (fallback_execution)", stacklevel=2)
        metrics.add(graphs=1, fallback_graphs=1, compile_seconds=time.perf_counter() - t0)
        return make_boxed_func(gm.forward)
    compiled = CompiledGraph(lowered, program, _device_of(gm), name)
    if program.from_cache:
        metrics.add(cache_hits=1, disk_cache_hits=1)
    else:
        metrics.add(compiles=1, cc_seconds=program.compile_seconds)
    seconds = time.perf_counter() - t0
    metrics.add(graphs=1, kernels=program.kernel_count, host_steps=len(lowered.hosts),
                compile_seconds=seconds)
    _report_compile(name, program, seconds, compiled.device.index or 0)
    if use_cache:
        _memory_cache[key] = compiled
    return compiled


def _report_compile(name: str, program, seconds: float, device: int) -> None:
    """The same event in TorchNeuron's metrics API (torch_neuronx.metrics:
    compiles, compile_ns, cache hits/misses per device) and in the log."""
    if program.from_cache:
        _C._counter_add("compile_cache_hits", device, 1)
    else:
        _C._counter_add("compile_cache_misses", device, 1)
        _C._counter_add("compiles", device, 1)
    _C._counter_add("compile_ns", device, int(seconds * 1e9))
    _logging.log(_logging.INFO, "compile",
                 f"graph {name}: {program.kernel_count} kernels, "
                 f"{'disk cache hit' if program.from_cache else 'compiled'} in {seconds * 1e3:.0f} ms")


def _graph_compiler(kind: str, opts: _Options):
    def fn(gm, example_inputs):
        return compile_fx_graph(gm, kind, opts)
    return fn


def _decompositions():
    from torch._decomp import core_aten_decompositions, get_decompositions
    aten = torch.ops.aten
    table = dict(core_aten_decompositions())
    # Ours: composite ops whose parts the compiler fuses (softmax, norms).
    table.update(get_decompositions([
        aten._softmax, aten._log_softmax, aten._softmax_backward_data, aten._log_softmax_backward_data,
        aten.native_layer_norm, aten.native_layer_norm_backward,
        aten._native_batch_norm_legit_functional, aten._native_batch_norm_legit_no_training,
        aten._native_batch_norm_legit, aten.native_batch_norm_backward, aten.native_batch_norm,
        aten.mse_loss, aten.mse_loss_backward, aten.silu, aten.silu_backward,
        aten.embedding_dense_backward, aten.addmv, aten.linalg_vector_norm,
    ]))
    return table


def _autocopy_inputs(example_inputs):
    """Indices of CPU tensor inputs to copy to the device (0-dim CPU tensors
    are scalars PyTorch lets mix with device tensors; they stay)."""
    idx = [i for i, x in enumerate(example_inputs)
           if isinstance(x, torch.Tensor) and x.device.type == "cpu" and x.dim() > 0]
    if idx and _env_flag("TORCH_NEURONX_DYNAMO_DISABLE_CPU_AUTOCOPY", False):
        raise NeuronCompileError(
            f"neuron backend: input {idx[0]} is a CPU tensor (shape {tuple(example_inputs[idx[0]].shape)}); move it "
            f"to the neuron device or unset TORCH_NEURONX_DYNAMO_DISABLE_CPU_AUTOCOPY")
    return idx


def neuron_backend(gm: torch.fx.GraphModule, example_inputs, options=None, mode=None):
    """The ``neuron`` Dynamo backend (TorchNeuron's name and signature)."""
    if not torch._dynamo.config.assume_static_by_default or any(
            isinstance(x, torch.SymInt) for x in example_inputs):
        raise NeuronCompileError("torch.compile(backend='neuron') does not support dynamic=True (dynamic shapes); "
                                 "use dynamic=False: each new input shape compiles its own graph")
    opts = _Options(options, mode)
    copy_idx = _autocopy_inputs(example_inputs)
    if copy_idx:
        _insert_device_copies(gm, copy_idx)
    compiler = aot_autograd(
        fw_compiler=_graph_compiler("fw", opts),
        bw_compiler=_graph_compiler("bw", opts),
        inference_compiler=_graph_compiler("inf", opts),
        decompositions=_decompositions(),
        partition_fn=min_cut_rematerialization_partition,
        # Inference graphs (the optimizer step, no_grad forwards) keep their
        # input mutations as copy_ nodes: the compiler writes those inputs in
        # place instead of AOTAutograd copying each one back eagerly.
        keep_inference_input_mutations=True,
    )
    try:
        compiled = compiler(gm, example_inputs)
    except NeuronCompileError:
        raise
    except Exception as e:  # noqa: BLE001 - AOT tracing failed
        if not opts.fallback:
            raise
        warnings.warn(f"neuron backend: {type(e).__name__}: {e}; running the graph eagerly (fallback_execution)")
        metrics.add(fallback_graphs=1)
        return gm.forward
    return compiled


def _insert_device_copies(gm: torch.fx.GraphModule, idx) -> None:
    """The graph copies these CPU inputs to the device first thing (the copy
    is a host step; everything after it runs compiled on the device)."""
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    dev = torch.device("neuron", 0)
    with gm.graph.inserting_after(placeholders[-1]):
        for i in idx:
            ph = placeholders[i]
            cp = gm.graph.call_function(torch.ops.aten._to_copy.default, (ph,), {"device": dev})
            ph.replace_all_uses_with(cp, delete_user_cb=lambda u, cp=cp: u is not cp)
    gm.recompile()


def dispatch_backend(gm: torch.fx.GraphModule, example_inputs, mode=None, options=None):
    """Default backend installed at load: neuron graphs go to the neuron
    backend, everything else to Inductor (TorchNeuron selects its backend
    for its device automatically)."""
    def on_neuron(x):
        return isinstance(x, torch.Tensor) and x.device.type == "neuron"
    hit = any(on_neuron(x) for x in example_inputs)
    if not hit:
        for node in gm.graph.nodes:
            v = node.meta.get("example_value")
            if any(on_neuron(t) for t in (v if isinstance(v, (list, tuple)) else [v])):
                hit = True
                break
    if hit:
        return neuron_backend(gm, example_inputs, options=options, mode=mode)
    return torch._TorchCompileInductorWrapper(mode, options, None)(gm, example_inputs)
