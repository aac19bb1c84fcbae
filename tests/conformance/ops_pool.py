"""OpInfo names of the native pooling ops: max_pool2d_with_indices and
avg_pool2d with their backwards (libtrn/src/kernels/pool/pool2d.c,
torch_neuronx/csrc/aten/pool.cpp; the 1-d forms run through them), and
max_pool3d_with_indices, avg_pool3d, the adaptive average / max pools in
1-3 d with their backwards (libtrn/src/kernels/pool/pool3d.c,
torch_neuronx/csrc/aten/pool3d.cpp).

PyTorch's max-pool OpInfo entries have 576-1,440 samples per dtype (every
kernel / stride / padding / dilation / ceil / memory-format combination).
That count is why they were slow, not a kernel: per sample, neuron's op
takes ~0.4 ms, while building the sample and running the CPU reference
take ~2-3 ms (measured on max_pool2d_with_indices_backward, float32), ~6
minutes for all of them on the loaded 2-core host. Building one dtype's
samples alone costs ~2 s, even for samples then passed over. The default
run checks every SAMPLE_STRIDE-th sample (strides coprime with the option
cycles, so every option is still hit) in float32, values and gradients;
the 16-bit max-pool paths are checked by tests/test_pool.py and
tests/test_pool3d.py. OPENNEURON_FULL_TESTS=1 runs every sample in every
dtype."""

import os

import torch

OPS = {
    "nn.functional.avg_pool1d",
    "nn.functional.avg_pool2d",
    "nn.functional.avg_pool3d",
    "nn.functional.max_pool1d",
    "nn.functional.max_pool2d",
    "nn.functional.max_pool3d",
    "max_pool2d_with_indices_backward",
    "nn.functional.adaptive_avg_pool1d",
    "nn.functional.adaptive_avg_pool2d",
    "nn.functional.adaptive_avg_pool3d",
    "nn.functional.adaptive_max_pool1d",
    "nn.functional.adaptive_max_pool2d",
    "nn.functional.adaptive_max_pool3d",
}

_FULL = os.environ.get("OPENNEURON_FULL_TESTS") == "1"
SAMPLE_STRIDE = (
    {}
    if _FULL
    else {
        "nn.functional.max_pool1d": 37,
        "nn.functional.max_pool2d": 61,
        "max_pool2d_with_indices_backward": 61,
        "nn.functional.max_pool3d": 29,
    }
)
SAMPLE_DTYPES = {} if _FULL else {name: [torch.float32] for name in SAMPLE_STRIDE}
