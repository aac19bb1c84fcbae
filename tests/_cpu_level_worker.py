"""Run by tests/test_cpu_capability.py in a subprocess whose
TORCH_NEURONX_CPU_CAPABILITY picks the kernels' CPU level: evaluates a few
OpInfo op families (pointwise, reduce, softmax/norm, scan, matmul) on their
first samples on neuron and saves the outputs (on CPU) with the level that
ran them, for the parent to compare across levels."""

import sys

import torch
from torch.testing._internal.common_methods_invocations import op_db

import torch_neuronx

OPS = (
    "add",
    "mul",
    "div",
    "exp",
    "tanh",
    "sigmoid",
    "nn.functional.gelu",
    "nn.functional.silu",
    "where",
    "sum",
    "mean",
    "amax",
    "cumsum",
    "softmax",
    "log_softmax",
    "nn.functional.layer_norm",
    "matmul",
)
SAMPLES = 8


def _to(x):
    return x.to("neuron") if isinstance(x, torch.Tensor) else x


def _cpu(out):
    if isinstance(out, torch.Tensor):
        return out.cpu()
    if isinstance(out, (tuple, list)):
        return [_cpu(o) for o in out]
    return out


def main(path):
    results = {}
    for op in op_db:
        if op.name not in OPS or op.variant_test_name:
            continue
        for dtype in (torch.float32, torch.bfloat16):
            if dtype not in op.supported_dtypes("cpu"):
                continue
            torch.manual_seed(0)
            for i, sample in enumerate(op.sample_inputs("cpu", dtype)):
                if i == SAMPLES:
                    break
                dev = sample.transform(_to)
                got = op(dev.input, *dev.args, **dev.kwargs)
                expected = op(sample.input, *sample.args, **sample.kwargs)
                results[f"{op.name}-{str(dtype)[6:]}-{i}"] = (_cpu(got), expected, op.name, dtype)
    torch.save({"level": torch_neuronx.cpu_capability(), "results": results}, path)


if __name__ == "__main__":
    main(sys.argv[1])
