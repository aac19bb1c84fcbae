"""torch.compile support: the ``neuron`` backend (libtrn's graph compiler).

Owner: registration. Importing torch._dynamo costs seconds, so nothing here
imports it at load: ``install()`` (called when torch_neuronx registers the
device) waits for torch._dynamo to be imported by anyone - torch.compile
does it first thing - and then registers the backend, the device interface
and, unless TORCH_NEURONX_DYNAMO_AUTO_BACKEND=0, a default backend that
sends graphs on neuron tensors to ``neuron`` and the rest to Inductor.
The ``torch_dynamo_backends`` entry point covers processes that never load
torch_neuronx before compiling.
"""

from __future__ import annotations

import importlib.machinery
import os
import sys

from .metrics import get_dynamo_metrics, reset_dynamo_metrics

__all__ = ["install", "get_dynamo_metrics", "reset_dynamo_metrics", "neuron_backend"]


def neuron_backend(gm, example_inputs, options=None, mode=None):
    from .backend import neuron_backend as impl

    return impl(gm, example_inputs, options=options, mode=mode)


def dispatch_backend(gm, example_inputs, mode=None, options=None):
    from .backend import dispatch_backend as impl

    return impl(gm, example_inputs, mode=mode, options=options)


def _on_dynamo_loaded() -> None:
    # Only light imports here: this runs while torch._dynamo's importer (often
    # torch._inductor) is still half-initialised; backend.py loads on first use.
    from importlib.metadata import EntryPoint

    from torch._dynamo.backends import registry

    from . import device_interface

    impl = neuron_backend

    # If entry points were already discovered, lookup_backend is (or will
    # be) loading ours and registers it itself; registering too would make
    # it fail with "duplicate name".
    if "neuron" not in registry._COMPILER_FNS and not isinstance(
        registry._BACKENDS.get("neuron"), EntryPoint
    ):
        registry.register_backend(compiler_fn=impl, name="neuron")
    device_interface.register()
    if os.environ.get("TORCH_NEURONX_DYNAMO_CAPTURABLE_OPTIMIZER", "1") != "0":
        from . import optimizer

        optimizer.install()
    if (
        os.environ.get("TORCH_NEURONX_DYNAMO_AUTO_BACKEND", "1") != "0"
        and registry.get_default_backend() == "inductor"
    ):
        registry.set_default_backend(dispatch_backend)


class _DynamoImportHook:
    """Runs _on_dynamo_loaded right after torch._dynamo finishes importing."""

    def find_spec(self, name, path, target=None):
        if name != "torch._dynamo":
            return None
        sys.meta_path.remove(self)
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        if spec is None or spec.loader is None:
            return spec
        loader = spec.loader
        original = loader.exec_module

        def exec_module(module):
            original(module)
            try:
                _on_dynamo_loaded()
            except Exception as e:  # noqa: BLE001 - must not break torch._dynamo's import
                import warnings

                warnings.warn(
                    f"torch_neuronx: could not register the neuron compile backend: {e!r}"
                )

        loader.exec_module = exec_module
        return spec


_installed = False


def install() -> None:
    global _installed
    if _installed:
        return
    _installed = True
    # The cache artifact type, before anyone calls load_cache_artifacts.
    from . import artifacts

    artifacts.register()
    dyn = sys.modules.get("torch._dynamo")
    if dyn is not None and hasattr(dyn, "optimize"):
        _on_dynamo_loaded()
    else:
        sys.meta_path.insert(0, _DynamoImportHook())
