"""torch.compile(backend="neuron"): Dynamo -> AOTAutograd -> libtrn compiler.

Owner: the backend entry (``neuron_backend``), its options and environment
variables, the per-graph compile (lowering here, the C compile on the compile
threads) with in-memory and disk caching, and the fallback policy. TorchNeuron's documented behaviour: ``dynamic=True`` is
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
import threading
import time
import warnings
import weakref
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


_refused_caches: set[tuple[str, str]] = set()


def cache_dir() -> str | None:
    """The disk cache directory, or None (disabled, or refused). libtrn
    trusts a directory only if it is the user's own, not a symlink and not
    writable by others, and entries only with a MAC under the user's key
    (another local user could otherwise plant code that runs as us): a
    refused cache warns once and the process compiles without it."""
    if _env_flag("TORCH_NEURONX_NEFF_DISABLE_CACHE", False):
        return None
    d = os.environ.get("TORCH_NEURONX_NEFF_CACHE_DIR")
    d = d or os.path.join(tempfile.gettempdir(), f"openneuron-compile-cache-{os.getuid()}")
    why = _C._compile_cache_check_dir(d)
    if not why:
        try:
            _C._compile_cache_mac("", b"")  # the user's key: made once, or refused
        except RuntimeError as e:
            why = str(e)
    if why:
        if (d, why) not in _refused_caches:
            _refused_caches.add((d, why))
            warnings.warn(f"neuron compile cache not used: {why}. Compiling without the disk cache; remove it, "
                          "or set TORCH_NEURONX_NEFF_CACHE_DIR to a directory of your own", stacklevel=2)
        return None
    return d


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


# Graphs by key while something still runs them: weak, so that a graph nobody
# references (after torch._dynamo.reset(), say) is freed and its shared
# object unloaded (trn_program_free dlcloses it); compiling it again then
# loads it from the disk cache.
_memory_cache: "weakref.WeakValueDictionary[str, CompiledGraph]" = weakref.WeakValueDictionary()
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


def compile_fx_graph(gm: torch.fx.GraphModule, kind: str, opts: _Options):
    """Lowers one AOT graph (here: an op that cannot be lowered fails now,
    naming it) and returns a boxed callable at once; the C compile (schedule,
    render, gcc: the GIL is released) runs on a compile thread while
    AOTAutograd and Dynamo go on. The graph waits for it at its first call."""
    t0 = time.perf_counter()
    use_cache = cache_dir() is not None
    key = _graph_key(gm, kind)
    if use_cache:
        hit = _memory_cache.get(key)
        job = _inflight.get(key) if hit is None else None
        if hit is not None or job is not None:
            metrics.add(graphs=1, cache_hits=1, memory_cache_hits=1, compile_seconds=time.perf_counter() - t0)
            graph = hit if hit is not None else job.graph
            _C._counter_add("compile_cache_hits", graph.device.index or 0, 1)
            if job is not None:
                _join_group(job)
            return graph
    _graph_counter[0] += 1
    name = f"{opts.model_name}_{_graph_counter[0]}_{kind}"
    ddir = debug_dir()
    if ddir:
        Path(ddir, name + ".fx.txt").write_text(gm.print_readable(print_output=False))
    metrics.add(lowerings=1)
    try:
        lowered = Lowerer(gm).run()
    except UnsupportedOpError as e:
        return _fallback(e, name, opts, gm, time.perf_counter() - t0)
    job = _CompileJob(gm, lowered, name, ddir, key if use_cache else None, opts, t0)
    workers = _compile_threads()
    if workers == 0:
        return job.finish()
    with _lock:
        _pending.append(job)
        if job.key is not None:
            _inflight[job.key] = job
    _join_group(job)
    job.future = _compile_pool(workers).submit(job.compile)
    return job.graph


def _fallback(e, name, opts, gm, seconds):
    if not opts.fallback:
        raise NeuronCompileError(str(e)) from None
    warnings.warn(f"neuron backend: {e}; running graph {name} eagerly (fallback_execution)", stacklevel=3)
    metrics.add(graphs=1, fallback_graphs=1, compile_seconds=seconds)
    return _EagerGraph(gm)


class _CompileJob:
    """One lowered graph's C compile, run on a compile thread (or here, with
    TORCH_NEURONX_COMPILE_THREADS=0). ``finish()`` waits for it and makes the
    graph runnable; it runs once, on the first of: the graph's first call,
    ``finish_pending()`` (metrics reads, exit), and its result or error is
    kept for every later caller."""

    def __init__(self, gm, lowered, name, ddir, key, opts, t0):
        self.gm, self.lowered, self.name, self.ddir, self.key, self.opts = gm, lowered, name, ddir, key, opts
        self.t0, self.busy, self.future = t0, time.perf_counter() - t0, None
        # Read here, not on the compile thread: the caller's environment decides.
        self.include, self.cache = _include_dir(), cache_dir()
        self.groups: list[_Group] = []
        self.lock = threading.Lock()
        self.done, self.result, self.error = False, None, None
        # What AOTAutograd gets back now; its program is attached by finish().
        self.graph = self._new_graph()

    def _new_graph(self, graph=None):
        if graph is None:
            graph = CompiledGraph(self.lowered, None, _device_of(self.gm), self.name)
        else:  # AOTAutograd may already hold it: rebuilt in place
            graph.__init__(self.lowered, None, graph.device, self.name)
        graph._job = self
        return graph

    def compile(self):
        t = time.perf_counter()
        try:
            return self.lowered.graph.compile(self.include, self.cache, self.ddir, self.name)
        finally:
            self.busy += time.perf_counter() - t

    def finish(self):
        """The runnable graph (CompiledGraph, or _EagerGraph under fallback
        execution); waits for the compile thread. Raises the compile's error,
        at every call, when the graph cannot run."""
        with self.lock:
            if not self.done:
                try:
                    self.result = self._finish()
                except Exception as e:  # noqa: BLE001 - kept: every caller of this graph sees it
                    self.error = e
                self.done = True
                _finished(self)
        if self.error is not None:
            raise self.error
        return self.result

    def _finish(self):
        try:
            try:
                program = self.future.result() if self.future is not None else self.compile()
            except NotImplementedError:
                if not self.lowered.stores:
                    raise
                # The schedule cannot order an in-place input update after every
                # read of the old values: the copies run eagerly instead.
                self.lowered = Lowerer(self.gm, in_place=False).run()
                self._new_graph(self.graph)
                self.future = None
                program = self.compile()
        except UnsupportedOpError as e:
            return _fallback(e, self.name, self.opts, self.gm, self.busy)
        except Exception as e:  # noqa: BLE001 - the C compile failed (C compiler error, ...)
            failed = NeuronCompileError(f"neuron compiler: graph {self.name} did not compile ({type(e).__name__}: {e})")
            return _fallback(failed, self.name, self.opts, self.gm, self.busy)
        compiled = self.graph
        compiled._attach(program)
        compiled._job = None
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
        self.gm = self.lowered = None  # the graph keeps what it runs
        return compiled


class _Group:
    """The compile jobs of one Dynamo graph and its warm-cache entry, which is
    written only once all of them compiled (never an entry whose graph
    failed or runs eagerly)."""

    def __init__(self):
        self.jobs: set[_CompileJob] = set()
        self.save = None
        self.ok = True
        self.closed = False

    def defer_save(self, save) -> None:
        self.save = save

    def close(self) -> None:
        """AOTAutograd is done with this graph (its entry, if any, is known)."""
        with _lock:
            self.closed = True
        self._maybe_save()

    def _job_done(self, job) -> None:
        with _lock:
            self.jobs.discard(job)
            self.ok = self.ok and job.error is None and job.result is job.graph
        self._maybe_save()

    def _maybe_save(self) -> None:
        with _lock:
            if not self.closed or self.jobs or self.save is None:
                return
            save, self.save = self.save, None
        if self.ok:
            save()
        else:
            metrics.add(warm_unsaved=1)


_lock = threading.RLock()
_pending: list[_CompileJob] = []          # submitted, not yet finished
_inflight: dict[str, _CompileJob] = {}    # by graph key: a second identical graph shares the job
_tls = threading.local()                  # .group: the Dynamo graph our backend is compiling


def _join_group(job) -> None:
    group = getattr(_tls, "group", None)
    if group is None:
        return
    with _lock:
        if job.done:  # (a shared job that finished meanwhile)
            group.ok = group.ok and job.error is None and job.result is job.graph
        else:
            group.jobs.add(job)
            job.groups.append(group)


def _finished(job) -> None:
    with _lock:
        if job in _pending:
            _pending.remove(job)
        if job.key is not None and _inflight.get(job.key) is job:
            del _inflight[job.key]
        groups, job.groups = job.groups, []
    for g in groups:
        g._job_done(job)


def _compile_threads() -> int:
    v = os.environ.get("TORCH_NEURONX_COMPILE_THREADS", "")
    try:
        return max(0, int(v)) if v.strip() else 2
    except ValueError:
        raise NeuronCompileError(f"TORCH_NEURONX_COMPILE_THREADS={v!r}: expected a number of threads") from None


@functools.cache
def _compile_pool(workers: int):
    from concurrent.futures import ThreadPoolExecutor
    pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="neuron-compile")
    # At exit, compiles not yet started are cancelled (their graphs were never
    # called); running ones finish (gcc cleans up its temporary files). Hooks
    # registered here run before concurrent.futures' own, which would run
    # every queued job first.
    threading._register_atexit(functools.partial(pool.shutdown, wait=True, cancel_futures=True))
    return pool


def finish_pending(raise_errors: bool = True) -> None:
    """Finishes every graph still compiling (waits for the compile threads):
    metrics reads call it so their counts are complete. With
    ``raise_errors``, the first failure is raised once all are done; a failed
    graph raises its error at its own calls either way."""
    err = None
    while True:
        with _lock:
            if not _pending:
                break
            job = _pending[0]
            if job.future is not None and job.future.cancelled():
                _pending.remove(job)  # at exit: never started, nothing to finish
                continue
        try:
            job.finish()
        except Exception as e:  # noqa: BLE001 - raised below, once all are done
            err = err or e
    if err is not None and raise_errors:
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
        return compile_fx_graph(gm, kind, opts)
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
    group = _Group()
    _tls.group = group
    try:
        try:
            with warm.aot_cache(root, key, _decompositions, group.defer_save) if key is not None \
                    else contextlib.nullcontext():
                compiled = _aot(gm, example_inputs, aot_kwargs)
        finally:
            _tls.group = None
            group.close()
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
