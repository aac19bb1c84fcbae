"""OpInfo names of native embedding_bag (libtrn/src/kernels/nn/embedding_bag.c,
torch_neuronx/csrc/aten/embedding_bag.cpp): _embedding_bag (sum / mean /
max, offsets, per_sample_weights, include_last_offset, padding_idx),
_embedding_bag_dense_backward and _embedding_bag_per_sample_weights_backward."""

OPS = {"nn.functional.embedding_bag"}
