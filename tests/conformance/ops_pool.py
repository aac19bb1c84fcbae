"""OpInfo names of the native pooling ops: max_pool2d_with_indices and
avg_pool2d with their backwards (libtrn/src/kernels/pool.c,
torch_neuronx/csrc/NeuronPool.cpp; the 1-d forms run through them), and
max_pool3d_with_indices, avg_pool3d, the adaptive average / max pools in
1-3 d with their backwards (libtrn/src/kernels/pool3d.c,
torch_neuronx/csrc/NeuronPool3d.cpp).

PyTorch's max-pool OpInfo entries have 576-1,440 samples per dtype (every
kernel / stride / padding / dilation / ceil / memory-format combination).
The time goes into the samples themselves (each is a few small ops on both
devices plus a comparison, ~10 ms on the loaded 2-core host), not into any
one slow kernel: all of them together took about 6 minutes. The default run
checks every SAMPLE_STRIDE-th sample, which still covers each option;
OPENNEURON_FULL_TESTS=1 runs them all."""
import os

OPS = {
    "nn.functional.avg_pool1d", "nn.functional.avg_pool2d", "nn.functional.avg_pool3d",
    "nn.functional.max_pool1d", "nn.functional.max_pool2d", "nn.functional.max_pool3d",
    "max_pool2d_with_indices_backward",
    "nn.functional.adaptive_avg_pool1d", "nn.functional.adaptive_avg_pool2d",
    "nn.functional.adaptive_avg_pool3d", "nn.functional.adaptive_max_pool1d",
    "nn.functional.adaptive_max_pool2d", "nn.functional.adaptive_max_pool3d",
}

# Strides coprime with the samples' option cycles, so the subset does not
# pin any one option.
SAMPLE_STRIDE = {} if os.environ.get("OPENNEURON_FULL_TESTS") == "1" else {
    "nn.functional.max_pool1d": 37,
    "nn.functional.max_pool2d": 61,
    "max_pool2d_with_indices_backward": 61,
    "nn.functional.max_pool3d": 29,
}
