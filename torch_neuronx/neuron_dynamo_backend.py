"""TorchNeuron's public compile helper namespace (torch_neuronx.neuron_dynamo_backend).

Owner: the names TorchNeuron documents for its compile backend, mapped onto
ours (torch_neuronx/_compile): the backend and a factory with bound
options, the default model name, the rank used in artifact names, the
metrics, the error types and the FX-graph savers. TorchNeuron's MLIR helpers
(``save_fx_as_mlir``, ``fx_to_mlir_string``, ``save_mlir``, ``load_mlir``)
import too, but raise: OpenNeuron compiles graphs to C, there is no
StableHLO/MLIR to save (docs/compile.md).
"""

from __future__ import annotations

import os

from ._compile import get_dynamo_metrics, neuron_backend, reset_dynamo_metrics

__all__ = [
    "neuron_backend",
    "create_neuron_backend",
    "set_model_name",
    "get_model_name",
    "get_rank",
    "get_dynamo_metrics",
    "reset_dynamo_metrics",
    "NEFFCompilationError",
    "NEFFExecutionError",
    "save_fx_graph_txt",
    "save_fx_graph_all_formats",
    "save_fx_as_mlir",
    "fx_to_mlir_string",
    "save_mlir",
    "load_mlir",
]


def create_neuron_backend(options: dict | None = None, mode: str | None = None):
    """A backend callable with these ``options`` (``model_name``,
    ``fallback_execution``, ``compiler_args``) bound: what
    ``torch.compile(backend=create_neuron_backend({...}))`` uses."""
    bound = dict(options or {})

    def backend(gm, example_inputs, options=None, mode_=None, **kw):
        return neuron_backend(
            gm,
            example_inputs,
            options={**bound, **(options or {})},
            mode=kw.get("mode", mode_ or mode),
        )

    backend.__name__ = "neuron_backend"
    return backend


def set_model_name(name: str | None) -> None:
    """The ``model_name`` graphs get when torch.compile's options give none
    (the stem of their debug artifacts)."""
    from ._compile import config

    config.default_model_name = None if name is None else str(name)


def get_model_name() -> str | None:
    from ._compile import config

    return config.default_model_name


def get_rank() -> int:
    """This process's rank (torch.distributed when initialised, else RANK, else 0)."""
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        return dist.get_rank()
    try:
        return int(os.environ.get("RANK", "0"))
    except ValueError:
        return 0


def save_fx_graph_txt(gm, path: str) -> str:
    """Writes the FX graph module's readable form to ``path``; returns it."""
    text = gm.print_readable(print_output=False)
    with open(path, "w") as f:
        f.write(text)
    return path


def save_fx_graph_all_formats(gm, prefix: str) -> list[str]:
    """``<prefix>.txt`` (readable graph) and ``<prefix>.py`` (its Python code)."""
    paths = [save_fx_graph_txt(gm, prefix + ".txt"), prefix + ".py"]
    with open(paths[1], "w") as f:
        f.write(gm.code)
    return paths


def _no_mlir(name):
    def fn(*args, **kwargs):
        from ._compile.config import NeuronCompileError

        raise NeuronCompileError(
            f"torch_neuronx.neuron_dynamo_backend.{name}: OpenNeuron compiles graphs to C "
            "(libtrn), not to StableHLO/MLIR, so there is no MLIR to save or load; use "
            "save_fx_graph_txt, or TORCH_NEURONX_PRESERVE_COMPILATION_ARTIFACTS=1 for the "
            "generated C"
        )

    fn.__name__ = name
    return fn


save_fx_as_mlir = _no_mlir("save_fx_as_mlir")
fx_to_mlir_string = _no_mlir("fx_to_mlir_string")
save_mlir = _no_mlir("save_mlir")
load_mlir = _no_mlir("load_mlir")


def __getattr__(name):
    # Loaded lazily: the error types live with the backend (imports torch._dynamo parts).
    if name in ("NEFFCompilationError", "NeuronCompileError"):
        from ._compile.config import NeuronCompileError

        return NeuronCompileError
    if name == "NEFFExecutionError":
        from ._compile.config import NeuronExecutionError

        return NeuronExecutionError
    raise AttributeError(name)
