"""torch.compile(backend="neuron"): Dynamo -> AOTAutograd -> libtrn compiler.

Owner: the backend entry (``neuron_backend``, ``dispatch_backend``), its
options and environment variables, the AOTAutograd set-up (decompositions,
partitioner, the warm cache and, through shared.py, its per-key lock) and the
fallback policy. The per-graph compile
(lowering, the C compile on the compile threads, in-memory caching) is
jobs.py's; settings and directories are config.py's. TorchNeuron's documented behaviour: ``dynamic=True`` is
rejected, a ``mode`` other than "default" warns, an op that cannot be lowered
fails the compile naming it unless fallback execution is on, CPU inputs are
copied to the device.
"""

from __future__ import annotations

import contextlib
import functools
import os
import warnings

import torch
from torch._functorch.aot_autograd import SerializableAOTDispatchCompiler
from torch._functorch.partitioners import min_cut_rematerialization_partition
from torch._inductor.output_code import OutputCode

from .. import _C
from . import jobs, metrics, shapes, shared, warm
from .config import NeuronCompileError, _env_flag, cache_dir, cc_settings  # noqa: F401  (NeuronCompileError: this module's public name)


class _Options:
    def __init__(self, options, mode):
        options = dict(options or {})
        if mode not in (None, "default"):
            warnings.warn(
                f"torch.compile(backend='neuron'): mode={mode!r} is not supported; using 'default'",
                stacklevel=3,
            )
        fb = options.pop("fallback_execution", None)
        if fb is None:
            fb = not _env_flag("TORCH_NEURONX_DISABLE_FALLBACK_EXECUTION", True)
        self.fallback = bool(fb)
        from . import config

        self.model_name = str(
            options.pop("model_name", None) or config.default_model_name or "graph"
        )
        # TorchNeuron's compiler_args: neuronx-cc flags, read as NEURON_CC_FLAGS is.
        self.cc = cc_settings(options.pop("compiler_args", None))


def _graph_compiler(kind: str, opts: _Options):
    def fn(gm, example_inputs):
        return jobs.compile_fx_graph(gm, kind, opts)

    return fn


@functools.cache
def _decompositions():
    from torch._decomp import core_aten_decompositions, get_decompositions

    aten = torch.ops.aten
    table = dict(core_aten_decompositions())
    # Ours: composite ops whose parts the compiler fuses (softmax, norms).
    table.update(
        get_decompositions(
            [
                aten._softmax,
                aten._log_softmax,
                aten._softmax_backward_data,
                aten._log_softmax_backward_data,
                aten.native_layer_norm,
                aten.native_layer_norm_backward,
                aten._native_batch_norm_legit_functional,
                aten._native_batch_norm_legit_no_training,
                aten._native_batch_norm_legit,
                aten.native_batch_norm_backward,
                aten.native_batch_norm,
                aten.mse_loss,
                aten.mse_loss_backward,
                aten.silu,
                aten.silu_backward,
                aten.embedding_dense_backward,
                aten.addmv,
                aten.linalg_vector_norm,
            ]
        )
    )
    return table


def _autocopy_inputs(example_inputs):
    """Indices of CPU tensor inputs to copy to the device (0-dim CPU tensors
    are scalars PyTorch lets mix with device tensors; they stay)."""
    idx = [
        i
        for i, x in enumerate(example_inputs)
        if isinstance(x, torch.Tensor) and x.device.type == "cpu" and x.dim() > 0
    ]
    if idx and _env_flag("TORCH_NEURONX_DYNAMO_DISABLE_CPU_AUTOCOPY", False):
        raise NeuronCompileError(
            f"neuron backend: input {idx[0]} is a CPU tensor (shape {tuple(example_inputs[idx[0]].shape)}); move it "
            f"to the neuron device or unset TORCH_NEURONX_DYNAMO_DISABLE_CPU_AUTOCOPY"
        )
    return idx


def neuron_backend(gm: torch.fx.GraphModule, example_inputs, options=None, mode=None):
    """The ``neuron`` Dynamo backend (TorchNeuron's name and signature)."""
    if shapes.user_asked_dynamic(example_inputs):
        raise NeuronCompileError(
            "torch.compile(backend='neuron') does not support dynamic=True (dynamic shapes); "
            "use dynamic=False: each new input shape compiles its own graph"
        )
    if shapes.is_symbolic(example_inputs):
        # Dynamo made sizes symbolic on its own (dynamic=None, a shape that
        # changed): one static graph per shape, compiled at first sight.
        from torch._dynamo import disable

        def compile_static(g, args):
            fresh, keep = shapes.bake_symbolic_inputs(g, example_inputs, args)
            fn = neuron_backend(fresh, [args[i] for i in keep], options=options, mode=mode)
            return lambda *a: fn(*[a[i] for i in keep])

        return disable(shapes.PerShape(gm, compile_static), reason="neuron per-shape graphs")
    opts = _Options(options, mode)
    copy_idx = _autocopy_inputs(example_inputs)
    if copy_idx:
        _insert_device_copies(gm, copy_idx)
    root = cache_dir()
    # (With force_disable_caches AOTAutograd would not consult the warm cache.)
    key, dev = (
        warm.graph_key_and_device(gm, example_inputs, _salt(opts))
        if root is not None and not torch.compiler.config.force_disable_caches
        else (None, None)
    )
    if key is None:
        return _compile(gm, example_inputs, opts, root, None)
    hit = warm.load_compiled(root, key, gm, dev)
    if hit is None:
        # A miss: whoever holds the entry's lock makes it while the others
        # (ranks sharing the directory, each on its own device) wait, then
        # look again and load it.
        with shared.warm_entry_lock(root, key) as hold:
            hit = warm.load_compiled(root, key, gm, dev)
            if hit is None:
                return _compile(gm, example_inputs, opts, root, key, dev, hold=hold)
    from torch._dynamo import disable

    return disable(hit, reason="compiled graph")


def _compile(gm, example_inputs, opts, root, key, dev=None, hold=None):
    """AOTAutograd and our compiler for one Dynamo graph (a warm miss, or a
    graph the warm cache cannot key). The C compiles run on after this
    returns (the graph's first call waits for them); ``hold``, the warm
    entry's lock when this process holds it, is kept until they end and the
    entry is saved (shared.py's rule: no graph runs to release it)."""

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
        with (
            jobs.dynamo_graph() as group,
            warm.aot_cache(root, key, _decompositions, group.defer_save, dev)
            if key is not None
            else contextlib.nullcontext(),
        ):
            compiled = _aot(gm, example_inputs, aot_kwargs)
    except NeuronCompileError:
        raise
    except Exception as e:  # noqa: BLE001 - AOT tracing failed
        if not opts.fallback:
            raise
        warnings.warn(
            f"neuron backend: {type(e).__name__}: {e}; running the graph eagerly (fallback_execution)"
        )
        metrics.add(fallback_graphs=1)
        return gm.forward
    if hold is not None and hold.held:
        hold.release_after(group.finish)  # the group is closed: its entry saves when its jobs end
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
    # Counted as Dynamo's wrapper counts it: DDPOptimizer reads the count to
    # know AOTAutograd ran (and so that the compiled submodule's first call,
    # which it makes under fake mode, returns the fake outputs it asked for);
    # uncounted, that fake first call fell to the first real step instead.
    from torch._dynamo.utils import counters

    counters["aot_autograd"]["total"] += 1
    bw = kw["bw_compiler"]
    if not getattr(bw, "_neuron_bw_wrapped", False):
        inner = bw.compiler_fn if isinstance(bw, SerializableAOTDispatchCompiler) else bw

        def bw_compile(*args, **kwargs):
            return disable(
                disable(inner, reason="neuron backward compiler")(*args, **kwargs),
                reason="compiled backward graph",
            )

        if isinstance(bw, SerializableAOTDispatchCompiler):
            bw.compiler_fn = bw_compile
        else:
            bw = bw_compile
        bw._neuron_bw_wrapped = True
        kw = dict(kw, bw_compiler=bw)
    return disable(aot_module_simplified(gm, example_inputs, **kw), reason="compiled graph")


def _salt(opts: _Options) -> str:
    """What else decides our compiled graphs (the warm key's part that is ours)."""
    env = "|".join(
        f"{k}={os.environ.get(k, '')}"
        for k in ("CC", "TORCH_NEURONX_NATIVE_FLOAT64", "TORCH_NEURONX_DYNAMO_CAPTURABLE_OPTIMIZER")
    )
    return (
        f"compiler={_C._compiler_version()}|{env}|cc={opts.cc.key()}|fallback={opts.fallback}|"
        f"name={opts.model_name}"
    )


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
