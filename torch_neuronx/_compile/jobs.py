"""Per-graph compiles: lowering, the C compile on compile threads, caching.

Owner: ``compile_fx_graph`` (one AOT graph: its in-memory cache key, the
lowering, a ``_CompileJob`` run on a compile thread), the jobs in flight
(``_pending``, ``_inflight``: a second identical graph shares the job), the
compile thread pool (``TORCH_NEURONX_COMPILE_THREADS``), the ``_Group`` of one
Dynamo graph's jobs (its warm-cache entry is saved once all compiled),
``finish_pending`` and the fallback to eager execution. backend.py calls in;
nothing here imports it.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import os
import threading
import time
import warnings
import weakref
from pathlib import Path

import torch
from torch._functorch.aot_autograd import make_boxed_func
from torch._inductor.output_code import OutputCode

from .. import _C
from . import artifacts, metrics, warm
from .config import (
    NeuronCompileError,
    _include_dir,
    cache_dir,
    caching_enabled,
    compile_program,
    debug_dir,
)
from .lower import Lowerer, UnsupportedOpError
from .program import _report_compile
from .runtime import CompiledGraph


# Graphs by key while something still runs them: weak, so that a graph nobody
# references (after torch._dynamo.reset(), say) is freed and its shared
# object unloaded (trn_program_free dlcloses it); compiling it again then
# loads it from the disk cache.
_memory_cache: "weakref.WeakValueDictionary[str, CompiledGraph]" = weakref.WeakValueDictionary()
_graph_counter = [0]


def _graph_key(gm: torch.fx.GraphModule, kind: str, cc) -> str:
    h = hashlib.sha256()
    # The nodes as text, not gm.code: AOTAutograd's graphs recompile lazily and
    # .code would generate their Python only for this key (~10 ms a graph).
    for sub_name, sub in gm.named_modules():
        if isinstance(sub, torch.fx.GraphModule):
            h.update(f"module {sub_name}\n{warm._graph_text(sub.graph)}\n".encode())
    for node in gm.graph.nodes:
        v = node.meta.get("val")
        for t in v if isinstance(v, (list, tuple)) else [v]:
            if isinstance(t, torch.Tensor):
                h.update(
                    f"{node.name}:{tuple(t.shape)}:{t.stride()}:{t.storage_offset()}:{t.dtype}:{t.device};".encode()
                )
        if node.op == "get_attr":
            c = getattr(gm, node.target)
            if isinstance(c, torch.Tensor):
                # Baked constants are part of the graph: hash their bytes.
                from torch._subclasses.fake_tensor import unset_fake_temporarily

                with unset_fake_temporarily():
                    data = (
                        c.detach()
                        .to("cpu")
                        .contiguous()
                        .reshape(-1)
                        .view(torch.uint8)
                        .numpy()
                        .tobytes()
                    )
                h.update(f"{node.target}:{c.dtype}:{tuple(c.shape)}".encode())
                h.update(data)
    h.update(
        f"{kind}|{_C._compiler_version()}|{cc.key()}|"
        f"{os.environ.get('CC', '')}|{torch.__version__}|"
        f"{os.environ.get('TORCH_NEURONX_NATIVE_FLOAT64', '')}".encode()
    )
    return h.hexdigest()


def _device_of(gm) -> torch.device:
    for node in gm.graph.nodes:
        v = node.meta.get("val")
        for t in v if isinstance(v, (list, tuple)) else [v]:
            if isinstance(t, torch.Tensor) and t.device.type == "neuron":
                return torch.device("neuron", t.device.index or 0)
    return torch.device("neuron", 0)


def compile_fx_graph(gm: torch.fx.GraphModule, kind: str, opts):
    """Lowers one AOT graph (``opts``: backend._Options) (here: an op that cannot be lowered fails now,
    naming it) and returns a boxed callable at once; the C compile (schedule,
    render, gcc: the GIL is released) runs on a compile thread while
    AOTAutograd and Dynamo go on. The graph waits for it at its first call."""
    t0 = time.perf_counter()
    use_cache = caching_enabled()  # in memory: also when the disk cache is refused
    key = _graph_key(gm, kind, opts.cc)
    if use_cache:
        hit = _memory_cache.get(key)
        job = _inflight.get(key) if hit is None else None
        if hit is not None or job is not None:
            metrics.add(
                graphs=1,
                cache_hits=1,
                memory_cache_hits=1,
                compile_seconds=time.perf_counter() - t0,
            )
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
    warnings.warn(
        f"neuron backend: {e}; running graph {name} eagerly (fallback_execution)", stacklevel=3
    )
    metrics.add(graphs=1, fallback_graphs=1, compile_seconds=seconds)
    return _EagerGraph(gm)


class _CompileJob:
    """One lowered graph's C compile, run on a compile thread (or here, with
    TORCH_NEURONX_COMPILE_THREADS=0). ``finish()`` waits for it and makes the
    graph runnable; it runs once, on the first of: the graph's first call,
    ``finish_pending()`` (metrics reads, exit), and its result or error is
    kept for every later caller."""

    def __init__(self, gm, lowered, name, ddir, key, opts, t0):
        self.gm, self.lowered, self.name, self.ddir, self.key, self.opts = (
            gm,
            lowered,
            name,
            ddir,
            key,
            opts,
        )
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
            graph = CompiledGraph(self.lowered, None, _device_of(self.gm), self.name, self.opts.cc)
        else:  # AOTAutograd may already hold it: rebuilt in place
            graph.__init__(self.lowered, None, graph.device, self.name, self.opts.cc)
        graph._job = self
        return graph

    def compile(self):
        t = time.perf_counter()
        try:
            return compile_program(
                self.lowered.graph, self.include, self.cache, self.ddir, self.name, self.opts.cc
            )
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
            failed = NeuronCompileError(
                f"neuron compiler: graph {self.name} did not compile ({type(e).__name__}: {e})"
            )
            return _fallback(failed, self.name, self.opts, self.gm, self.busy)
        compiled = self.graph
        artifacts.record_program(program)
        if program.from_cache:
            metrics.add(cache_hits=1, disk_cache_hits=1)
        else:
            metrics.add(compiles=1, cc_seconds=program.compile_seconds)
        # Our own time (lowering and C compile), not the overlapped wall time.
        seconds = self.busy
        metrics.add(
            graphs=1,
            kernels=program.kernel_count,
            host_steps=len(self.lowered.hosts),
            extern_kernels=program.extern_count,
            compile_seconds=seconds,
        )
        _report_compile(self.name, program, seconds, compiled.device.index or 0)
        if self.key is not None:
            _memory_cache[self.key] = compiled
        # Counted and off the pending list before the graph is ready: another
        # thread may be finishing this job (a warm entry's lock holder,
        # shared.py) while the graph's caller takes the ready path, and that
        # caller must see the job done (finish_pending waits on self.lock).
        with _lock:
            if self in _pending:
                _pending.remove(self)
        compiled._attach(program)
        compiled._job = None
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

    def finish(self) -> None:
        """Finishes this Dynamo graph's C compiles now (waits for the compile
        threads, runs nothing), so that its warm entry is saved when it
        closes: what a process holding the entry's lock (shared.py) must
        do before letting go. A failed graph keeps its error for its calls."""
        while True:
            with _lock:
                pending = [j for j in self.jobs if not j.done]
            if not pending:
                return
            for job in pending:
                with contextlib.suppress(Exception):
                    job.finish()

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
_pending: list[_CompileJob] = []  # submitted, not yet finished
_inflight: dict[str, _CompileJob] = {}  # by graph key: a second identical graph shares the job
_tls = threading.local()  # .group: the Dynamo graph our backend is compiling


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
        raise NeuronCompileError(
            f"TORCH_NEURONX_COMPILE_THREADS={v!r}: expected a number of threads"
        ) from None


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


@contextlib.contextmanager
def dynamo_graph():
    """While the backend compiles one Dynamo graph: its AOT graphs' jobs join
    the yielded ``_Group``, which is closed on the way out."""
    group = _Group()
    _tls.group = group
    try:
        yield group
    finally:
        _tls.group = None
        group.close()


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


# Metrics reads settle the graphs still compiling (their counts come in then).
metrics.on_settle(functools.partial(finish_pending, raise_errors=False))
