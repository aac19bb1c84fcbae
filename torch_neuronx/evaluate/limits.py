"""The documented TorchNeuron limits and hardware figures the report cites.

Owner: every citation a finding carries (``LIMITS``) and the HBM capacity of
one logical NeuronCore on Trn2 and Trn3 (``HBM``). Nothing here measures:
the other modules attach these to what they measured, so each finding names
the documented behaviour it is about and where that is written.
"""

from __future__ import annotations

_RN = "https://awsdocs-neuron.readthedocs-hosted.com/en/latest/release-notes/components/torchneuron.html"
_OPS = "https://awsdocs-neuron.readthedocs-hosted.com/en/latest/torch/reference/api/supported-operators.html"
_COMPILE = "https://awsdocs-neuron.readthedocs-hosted.com/en/latest/torch/compile/reference-torch-compile.html"
_ENV = "https://awsdocs-neuron.readthedocs-hosted.com/en/latest/torch/reference/env-vars.html"
_DIST = (
    "https://awsdocs-neuron.readthedocs-hosted.com/en/latest/torch/guides/torch-distributed.html"
)
_MODULE = "https://awsdocs-neuron.readthedocs-hosted.com/en/latest/torch/reference/api/torch-neuron-module.html"
_BACKEND = (
    "[R] torch_neuronx/distributed/backend.py (_neuron_runtime_setup, barrier, alltoall_base) in "
    "github.com/parmoham-aws/test-repo-parmoham@98154b8, the source torchneuron.md reads"
)
_LNC_PAGE = (
    "https://awsdocs-neuron.readthedocs-hosted.com/en/latest/general/arch/neuron-features/"
    "logical-neuroncore-config.html"
)
_TABLE = "https://github.com/aws-neuron/torch-neuronx/blob/main/docs/torch_api_compatibility.md"

# key -> (what TorchNeuron documents, where)
LIMITS: dict[str, tuple[str, str]] = {
    "fallback": (
        "Ops without a Neuron kernel run on the CPU fallback in eager mode (slower: the inputs are "
        "copied to the host and the results back), with a warning",
        _OPS,
    ),
    "unlowerable": (
        "Under torch.compile(backend='neuron') an op the backend cannot lower fails the compile "
        "by default (TORCH_NEURONX_DISABLE_FALLBACK_EXECUTION=1)",
        _ENV,
    ),
    "float64": (
        "float64 runs as float32 (with a warning): tensors keep dtype float64 with float32 precision",
        _RN,
    ),
    "int64": (
        "Eager kernels and compiled graphs compute int64 as int32 and cast back: values outside "
        "[-2**31, 2**31-1] wrap",
        "torchneuron.md §5 (64-bit dtypes) [R]: torch-neuronx source",
    ),
    "sparse": ("torch.sparse is not supported in the beta", _RN),
    "nested": ("torch.nested is not supported in the beta", _RN),
    "func": ("torch.func is not supported in the beta", _RN),
    "distributions": ("torch.distributions is not supported in the beta", _RN),
    "fft": (
        "Only some torch.fft transforms run on Neuron (the rest fall back or fail); check the table",
        _RN + " ; " + _TABLE,
    ),
    "torchao": (
        "No TorchAO integration and no MXFP8 in this release (torchao-neuron needs torch-neuronx "
        ">= 2.14.3.1, Trn3)",
        _RN,
    ),
    "dynamic": (
        "torch.compile(backend='neuron') rejects dynamic=True: each new input shape compiles its own "
        "graph; pad or bucket shapes",
        _COMPILE,
    ),
    "mode": (
        "torch.compile(backend='neuron') supports only mode='default'; other modes warn and use default",
        _COMPILE,
    ),
    "recompile": (
        "No native dynamic shapes: a new input shape recompiles (the first compile can take "
        "minutes on Trainium); AWS suggests padding or bucketing",
        _COMPILE,
    ),
    "send_recv": (
        "ProcessGroupNeuron has no send/recv; recv_anysource and monitored_barrier raise "
        "NotImplementedError",
        "torchneuron.md §4 (distributed coverage) [R]",
    ),
    "pg_backend": (
        "Distributed training on Neuron uses init_process_group(backend='neuron') with one process "
        "per logical NeuronCore",
        _DIST,
    ),
    "device_index": (
        "device_count() counts the logical NeuronCores the process sees (NEURON_RT_VISIBLE_CORES, "
        "NEURON_LOGICAL_NC_CONFIG); one process per logical core in distributed training, where "
        "each rank sees only its own core as neuron:0",
        f"{_MODULE} ; {_DIST} ; {_BACKEND}",
    ),
    "device_config": (
        "Trn2 logical core configuration: NEURON_LOGICAL_NC_CONFIG 1 or 2 (default 2: 4 logical "
        "cores per chip), at most 16 chips (trn2.48xlarge)",
        _LNC_PAGE,
    ),
    "pg_runtime_init": (
        "init_process_group(backend='neuron') asserts that the Neuron runtime was not initialized "
        "before it (create the process group before moving anything to the device)",
        _BACKEND,
    ),
    "pg_one_core": (
        "In distributed training each process uses exactly one logical NeuronCore "
        "(init_process_group asserts it)",
        f"{_DIST} ; {_BACKEND}",
    ),
    "pg_backend_unavailable": (
        "Distributed training on Neuron uses init_process_group(backend='neuron'); NCCL, MPI and "
        "UCC do not exist on Trainium",
        _DIST,
    ),
    "pg_barrier": (
        "ProcessGroupNeuron's barrier is implemented only for the default group "
        "(NotImplementedError otherwise)",
        _BACKEND,
    ),
    "pg_alltoall": (
        "ProcessGroupNeuron's all_to_all_single supports only split sizes None or all ones "
        "(NotImplementedError: 'Only even split sizes are supported')",
        f"torchneuron.md §4 (alltoall/alltoall_base: only certain split sizes) ; {_BACKEND}",
    ),
    "channels_last": (
        "Convolutions on channels_last inputs are rejected",
        "torchneuron.md §5 (maturity signals) [R]",
    ),
}

_TRN2 = "https://awsdocs-neuron.readthedocs-hosted.com/en/latest/nki/arch/trainium2_arch.html"
_TRN3 = (
    "https://awsdocs-neuron.readthedocs-hosted.com/en/v2.29.1/_sources/about-neuron/arch/"
    "neuron-hardware/trainium3.rst"
)
_LNC = (
    "https://awsdocs-neuron.readthedocs-hosted.com/en/latest/general/arch/neuron-features/"
    "logical-neuroncore-config.html"
)
GIB = 1 << 30

# One chip's HBM split over its logical NeuronCores (8 physical cores per chip;
# LNC=2, the Trn2 default, groups two per logical core: 4 per chip).
HBM: list[dict] = [
    {
        "name": "Trn2, LNC=2 (default)",
        "bytes": 96 * GIB // 4,
        "source": f"{_TRN2} (96 GiB, 8 cores); {_LNC}",
    },
    {"name": "Trn2, LNC=1", "bytes": 96 * GIB // 8, "source": f"{_TRN2}; {_LNC}"},
    {
        "name": "Trn3, LNC=2",
        "bytes": 144 * GIB // 4,
        "source": f"{_TRN3} (144 GiB, 8 cores); {_LNC}",
    },
    {"name": "Trn3, LNC=1", "bytes": 144 * GIB // 8, "source": f"{_TRN3}; {_LNC}"},
]


def cite(key: str) -> dict:
    text, src = LIMITS[key]
    return {"limit": text, "source": src}
