"""OpenNeuron's ``torch_neuronx``: the ``neuron`` PyTorch device, run by a
software NeuronCore on the host CPU, API-compatible with AWS TorchNeuron.

Importing ``torch`` loads this package through the ``torch.backends`` entry
point (unless ``TORCH_DEVICE_BACKEND_AUTOLOAD=0``). Loading renames
PrivateUse1 to ``neuron``, registers ``torch.neuron`` and generates
``Tensor.neuron()`` / ``Module.neuron()`` / ``UntypedStorage.neuron()``.
"""

import warnings

# `import torch_neuronx` before torch: importing torch below runs the
# entry point while this module is half-built. _autoload must already exist
# then, and defers: the _register() call at the bottom does the work.
_importing = True


def _autoload() -> None:
    """``torch.backends`` entry point: never raises, so ``import torch`` can't fail."""
    if _importing:
        return
    try:
        _register()
    except Exception as e:  # noqa: BLE001 - must not break `import torch`
        warnings.warn(f"torch_neuronx: could not register the neuron device: {e!r}")


import torch  # noqa: E402

from . import _C  # noqa: E402  # registers kernels, guard, allocators, hooks, fallback

# Backward runs on the calling thread (the device is the host CPU: autograd's
# per-device thread only added two hand-offs), and autograd's device threads
# must not drop a GraphTask during interpreter finalization. Registered before anything else of ours registers an atexit
# hook (atexit runs them last-in, first-out), so it runs after them: the
# metrics CSV writer (metrics.py) must not count the drain's kernels.
from ._autograd_exit import install as _install_autograd_exit, run_backward_on_calling_thread  # noqa: E402

_install_autograd_exit()
run_backward_on_calling_thread()
from ._op_tracking import clear_op_tracking, get_executed_ops, get_fallback_ops
from . import neuron
from .neuron import (
    Event,
    Stream,
    StreamContext,
    current_device,
    current_stream,
    default_stream,
    device_count,
    empty_cache,
    get_device_name,
    get_device_properties,
    is_available,
    is_initialized,
    manual_seed,
    manual_seed_all,
    memory_allocated,
    memory_reserved,
    memory_stats,
    max_memory_allocated,
    max_memory_reserved,
    set_device,
    set_stream,
    stream,
    synchronize,
)

__version__ = "0.1.0"

_registered = False


def is_neuron_runtime_initialized() -> bool:
    """True once the runtime has started (first allocation, stream or copy)."""
    return _C._is_initialized()


def cpu_capability() -> str:
    """The CPU level the kernels run at: "avx2" (x86-64-v3), "avx512" (x86-64-v4) or
    "native" (a development build for its own machine). libtrn picks the best level it was
    built with that this CPU runs, when it loads; ``TORCH_NEURONX_CPU_CAPABILITY`` (set
    before ``import torch_neuronx``) overrides, like ATen's ``ATEN_CPU_CAPABILITY``. Raises
    ``RuntimeError`` with the reason when that override was refused."""
    error = _C._cpu_level_error()
    if error:
        raise RuntimeError(error)
    return _C._cpu_capability()


def cpu_capabilities() -> list[str]:
    """The CPU levels this build holds, baseline first (a wheel: ``["avx2", "avx512"]``)."""
    return _C._cpu_levels()


def _register() -> None:
    """Idempotent: rename PrivateUse1, register torch.neuron, generate methods."""
    global _registered
    if _registered:
        return
    name = torch._C._get_privateuse1_backend_name()
    if name not in ("privateuseone", "neuron"):
        # Another PrivateUse1 backend came first; like TorchNeuron, defer to it.
        warnings.warn(
            f"torch_neuronx: PrivateUse1 is already taken by '{name}'; "
            "the neuron device is not registered"
        )
        return
    if name == "privateuseone":
        torch.utils.rename_privateuse1_backend("neuron")
    if not hasattr(torch, "neuron"):
        torch._register_device_module("neuron", neuron)
    if not hasattr(torch.Tensor, "is_neuron"):
        torch.utils.generate_methods_for_privateuse1_backend(
            for_tensor=True, for_module=True, for_storage=True
        )
    _registered = True


_register()
# The neuron c10d backend (torch_neuronx/distributed): launcher device count
# first (before anything reads the device count), then registration.
from . import distributed  # noqa: E402

distributed._default_device_count_for_launcher()
try:
    distributed._register()
except Exception as e:  # noqa: BLE001 - a broken torch.distributed must not break the device
    warnings.warn(f"torch_neuronx: could not register the neuron c10d backend: {e!r}")
_importing = False

# Observability (docs/observability.md): metrics, profiler entry points, memory summary.
from . import metrics, multiprocessing, profiling  # noqa: E402
from .memory import memory_summary  # noqa: E402
from .profiling import NeuronConfig, NeuronProfiler, ProfileMode  # noqa: E402

# torch.compile(backend="neuron"): registered lazily when torch._dynamo loads.
from ._compile import get_dynamo_metrics, reset_dynamo_metrics, install as _install_compile  # noqa: E402

neuron.get_dynamo_metrics, neuron.reset_dynamo_metrics = get_dynamo_metrics, reset_dynamo_metrics
_install_compile()

# FlexAttention's higher-order ops and varlen_attn's custom ops on neuron
# (libtrn's block-sparse flash kernel).
from ._flex_attention import install as _install_flex_attention  # noqa: E402
from ._varlen_attn import install as _install_varlen_attn  # noqa: E402

_install_flex_attention()
_install_varlen_attn()

# neuron-evaluate's Python API (docs/evaluate.md): the package itself is
# callable, torch_neuronx.evaluate(model, inputs, ...), and keeps its
# attributes (torch_neuronx.evaluate.Report). Strict mode when asked.
from . import evaluate  # noqa: E402
from .evaluate import strict as _strict  # noqa: E402

if _strict.enabled():
    _strict.install()

# Adaptive Eager Execution (docs/adaptive-eager.md): its switches and state.
from . import eager_fusion  # noqa: E402, F401


# NKI kernels (docs/nki.md): `from torch_neuronx import nki_op, wrap_nki, nki`.
# Loaded on first use: registering the custom ops imports torch.library.
def __getattr__(name):
    if name in ("nki_op", "wrap_nki"):
        from . import nki_torch as _m

        return getattr(_m, name)
    if name == "nki":
        from . import nki_torch as _m

        return _m.nki
    raise AttributeError(f"module 'torch_neuronx' has no attribute {name!r}")
