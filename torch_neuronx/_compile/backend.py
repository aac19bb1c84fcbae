"""torch.compile(backend="neuron"): Dynamo -> AOTAutograd -> libtrn compiler.

Owner: the backend entry (``neuron_backend``), its options and environment
variables, the per-graph compile with in-memory and disk caching, and the
fallback policy. TorchNeuron's documented behaviour: ``dynamic=True`` is
rejected, a ``mode`` other than "default" warns, an op that cannot be lowered
fails the compile naming it unless fallback execution is on, CPU inputs are
copied to the device.
"""
from __future__ import annotations

import contextlib
import functools
import hashlib
import os
import tempfile
import time
import warnings
from pathlib import Path

import torch
from torch._functorch.aot_autograd import SerializableAOTDispatchCompiler, make_boxed_func
from torch._functorch.partitioners import min_cut_rematerialization_partition
from torch._inductor.output_code import OutputCode

from .. import _C, _logging
from . import metrics, warm
from .lower import Lowerer, UnsupportedOpError
from .runtime import CompiledGraph
from .tape import replay


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
    # The nodes as text, not gm.code: AOTAutograd's graphs recompile lazily and
    # .code would generate their Python only for this key (~10 ms a graph).
    for sub_name, sub in gm.named_modules():
        if isinstance(sub, torch.fx.GraphModule):
            h.update(f"module {sub_name}\n{warm._graph_text(sub.graph)}\n".encode())
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


def compile_fx_graph(gm: torch.fx.GraphModule, kind: str, opts: _Options, background: bool = False):
    """Lowers and compiles one AOT graph; returns a boxed callable. With
    ``background``, the C compile (schedule, render, gcc: the GIL is released)
    runs on a worker thread while AOTAutograd goes on with the next graph; the
    graph is finished by ``finish_pending()``, before anything can call it."""
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
    metrics.add(lowerings=1)
    try:
        lowered = Lowerer(gm).run()
    except UnsupportedOpError as e:
        return _fallback(e, name, opts, gm, t0)
    job = _CompileJob(gm, lowered, name, ddir, key if use_cache else None, opts, t0)
    if background:
        job.future = _compile_pool().submit(job.compile)
        _pending.append(job)
        return job.graph
    return job.finish()


def _fallback(e, name, opts, gm, t0):
    if not opts.fallback:
        raise NeuronCompileError(str(e)) from None
    warnings.warn(f"neuron backend: {e}; running graph {name} eagerly (fallback_execution)", stacklevel=3)
    metrics.add(graphs=1, fallback_graphs=1, compile_seconds=time.perf_counter() - t0)
    return _EagerGraph(gm)


class _CompileJob:
    """One lowered graph's C compile, run here or on the compile thread."""

    def __init__(self, gm, lowered, name, ddir, key, opts, t0):
        self.gm, self.lowered, self.name, self.ddir, self.key, self.opts = gm, lowered, name, ddir, key, opts
        self.t0, self.busy, self.future = t0, time.perf_counter() - t0, None
        # What AOTAutograd gets back now; its program is attached by finish().
        self.graph = CompiledGraph(lowered, None, _device_of(gm), name)

    def compile(self):
        t = time.perf_counter()
        try:
            return self.lowered.graph.compile(_include_dir(), cache_dir(), self.ddir, self.name)
        finally:
            self.busy += time.perf_counter() - t

    def finish(self):
        """The compiled graph (waits for the compile thread if it ran there)."""
        try:
            try:
                program = self.future.result() if self.future is not None else self.compile()
            except NotImplementedError:
                if not self.lowered.stores:
                    raise
                # The schedule cannot order an in-place input update after every
                # read of the old values: the copies run eagerly instead.
                self.lowered = Lowerer(self.gm, in_place=False).run()
                # AOTAutograd may already hold self.graph: rebuilt in place.
                self.graph.__init__(self.lowered, None, self.graph.device, self.name)
                self.future = None
                program = self.compile()
        except UnsupportedOpError as e:
            return _fallback(e, self.name, self.opts, self.gm, self.t0)
        compiled = self.graph
        compiled._attach(program)
        if program.from_cache:
            metrics.add(cache_hits=1, disk_cache_hits=1)
        else:
            metrics.add(compiles=1, cc_seconds=program.compile_seconds)
        # Our own time (lowering and C compile), not the overlapped wall time.
        seconds = self.busy
        metrics.add(graphs=1, kernels=program.kernel_count, host_steps=len(self.lowered.hosts),
                    compile_seconds=seconds)
        _report_compile(self.name, program, seconds, compiled.device.index or 0)
        if self.key is not None:
            _memory_cache[self.key] = compiled
        return compiled


_pending: list[_CompileJob] = []


@functools.cache
def _compile_pool():
    from concurrent.futures import ThreadPoolExecutor
    return ThreadPoolExecutor(max_workers=1, thread_name_prefix="neuron-compile")


def finish_pending() -> None:
    """Waits for every graph compiling on the compile thread; the first
    failure is raised (after all have finished)."""
    err = None
    while _pending:
        job = _pending.pop(0)
        try:
            if job.finish() is not job.graph:
                raise NeuronCompileError(f"neuron backend: graph {job.name} cannot run compiled")
        except BaseException as e:  # noqa: BLE001 - raised below, once all are done
            err = err or e
    if err is not None:
        raise err


class _EagerGraph(OutputCode):
    """A graph run eagerly (fallback execution), in the OutputCode form
    AOTAutograd's cache entries need; it is never written to the warm cache
    (it does not pickle), so a warm process compiles it again and warns."""

    def __init__(self, gm: torch.fx.GraphModule):
        self._run = make_boxed_func(gm.forward)
        self._boxed_call = True

    def __call__(self, args):
        return self._run(args)

    def __reduce__(self):
        raise TypeError("graphs run eagerly (fallback execution) are not cached")

    def post_compile(self, example_inputs, constants, graph_kwargs) -> None:
        pass


def rebuild_program(tape, name: str, device: torch.device):
    """A compiled graph's program from its builder tape (a warm start): the
    schedule and C source are made again, the shared object comes from the
    disk cache (compiled only if it is missing there)."""
    t0 = time.perf_counter()
    ddir = debug_dir()
    program = replay(tape).compile(_include_dir(), cache_dir(), ddir, name)
    if program.from_cache:
        metrics.add(cache_hits=1, disk_cache_hits=1)
    else:
        metrics.add(compiles=1, cc_seconds=program.compile_seconds)
    seconds = time.perf_counter() - t0
    metrics.add(graphs=1, kernels=program.kernel_count, compile_seconds=seconds)
    _report_compile(name, program, seconds, device.index or 0)
    return program


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
        if kind == "fw":
            # The forward's C compile overlaps the backward's tracing,
            # partition and lowering; the backward compiler waits for it.
            return compile_fx_graph(gm, kind, opts, background=True)
        try:
            return compile_fx_graph(gm, kind, opts)
        finally:
            finish_pending()
    return fn


@functools.cache
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
    root = cache_dir()
    # (With force_disable_caches AOTAutograd would not consult the warm cache.)
    key = warm.graph_key(gm, example_inputs, _salt(opts)) \
        if root is not None and not torch.compiler.config.force_disable_caches else None
    if key is not None:
        hit = warm.load_compiled(root, key, gm)
        if hit is not None:
            from torch._dynamo import disable
            return disable(hit, reason="compiled graph")

    def mk(kind):
        fn = _graph_compiler(kind, opts)
        # Serializable compilers make AOTAutograd consult (our) cache.
        return SerializableAOTDispatchCompiler(OutputCode, fn) if key is not None else fn
    aot_kwargs = dict(
        fw_compiler=mk("fw"),
        bw_compiler=mk("bw"),
        inference_compiler=mk("inf"),
        # With the warm cache, warm.aot_cache supplies them on a miss.
        decompositions=_decompositions() if key is None else None,
        partition_fn=min_cut_rematerialization_partition,
        # Inference graphs (the optimizer step, no_grad forwards) keep their
        # input mutations as copy_ nodes: the compiler writes those inputs in
        # place instead of AOTAutograd copying each one back eagerly.
        keep_inference_input_mutations=True,
    )
    try:
        try:
            with warm.aot_cache(root, key, _decompositions) if key is not None else contextlib.nullcontext():
                compiled = _aot(gm, example_inputs, aot_kwargs)
        finally:
            finish_pending()  # a forward whose backward compiles lazily
    except NeuronCompileError:
        raise
    except Exception as e:  # noqa: BLE001 - AOT tracing failed
        if not opts.fallback:
            raise
        warnings.warn(f"neuron backend: {type(e).__name__}: {e}; running the graph eagerly (fallback_execution)")
        metrics.add(fallback_graphs=1)
        return gm.forward
    return compiled


def _aot(gm, example_inputs, kw):
    """AOTAutograd for one Dynamo graph. What Dynamo's ``aot_autograd()``
    wrapper does, minus its debug-logging setup, which imports most of
    Inductor (~0.3 s of a warm start): list inputs are flattened, and Dynamo
    is kept out of the backward compiler and of the compiled graphs."""
    from torch._dynamo import disable
    from torch._dynamo.utils import flatten_graph_inputs
    from torch._functorch.aot_autograd import aot_module_simplified

    if any(isinstance(x, (list, tuple, dict)) for x in example_inputs):
        return flatten_graph_inputs(gm, example_inputs, lambda g, ex: _aot(g, ex, kw))
    bw = kw["bw_compiler"]
    if not getattr(bw, "_neuron_bw_wrapped", False):
        inner = bw.compiler_fn if isinstance(bw, SerializableAOTDispatchCompiler) else bw

        def bw_compile(*args, **kwargs):
            return disable(disable(inner, reason="neuron backward compiler")(*args, **kwargs),
                           reason="compiled backward graph")
        if isinstance(bw, SerializableAOTDispatchCompiler):
            bw.compiler_fn = bw_compile
        else:
            bw = bw_compile
        bw._neuron_bw_wrapped = True
        kw = dict(kw, bw_compiler=bw)
    return disable(aot_module_simplified(gm, example_inputs, **kw), reason="compiled graph")


def _salt(opts: _Options) -> str:
    """What else decides our compiled graphs (the warm key's part that is ours)."""
    env = "|".join(f"{k}={os.environ.get(k, '')}" for k in (
        "CC", "NEURON_CC_FLAGS", "TORCH_NEURONX_NATIVE_FLOAT64", "TORCH_NEURONX_DYNAMO_CAPTURABLE_OPTIMIZER"))
    return f"compiler={_C._compiler_version()}|{env}|fallback={opts.fallback}|name={opts.model_name}"


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
