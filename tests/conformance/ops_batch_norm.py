"""OpInfo names of the native batch norm ops (libtrn/src/kernels/norm/batch_norm.c,
torch_neuronx/csrc/aten/batch_norm.cpp): native_batch_norm, the
_native_batch_norm_legit forms, the _batch_norm_with_update stack and their
backwards. instance_norm runs through native_batch_norm. Running-stat
updates are checked by tests/test_batch_norm.py (OpInfo compares outputs)."""

OPS = {
    "nn.functional.batch_norm",
    "native_batch_norm",
    "_native_batch_norm_legit",
    "_batch_norm_with_update",
    "nn.functional.instance_norm",
}
