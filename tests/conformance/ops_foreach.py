"""ForeachFuncInfo names of the native list ops (libtrn/src/kernels/train/foreach.c,
torch_neuronx/csrc/aten/foreach.cpp). They live in PyTorch's foreach_*_op_db
lists, not in op_db: test_opinfo_foreach.py runs them (in place and out of
place), DB is what it and scripts/gen_ops_doc.py look the names up in."""

import torch
from torch.testing._internal.common_methods_invocations import (
    foreach_binary_op_db,
    foreach_other_op_db,
    foreach_pointwise_op_db,
    foreach_reduce_op_db,
    foreach_unary_op_db,
)

DB = [
    *foreach_unary_op_db,
    *foreach_binary_op_db,
    *foreach_pointwise_op_db,
    *foreach_reduce_op_db,
    *foreach_other_op_db,
]

OPS = {
    "_foreach_add",
    "_foreach_sub",
    "_foreach_mul",
    "_foreach_div",
    "_foreach_maximum",
    "_foreach_minimum",
    "_foreach_clamp_min",
    "_foreach_clamp_max",
    "_foreach_pow",
    "_foreach_addcmul",
    "_foreach_addcdiv",
    "_foreach_lerp",
    "_foreach_sqrt",
    "_foreach_neg",
    "_foreach_abs",
    "_foreach_exp",
    "_foreach_reciprocal",
    "_foreach_zero",
    "_foreach_norm",
}

# ForeachFuncInfo claims every dtype; these have no CPU kernel at all (every
# sample raises NotImplementedError there, e.g. "abs_cpu" not implemented for
# 'Bool'), so there is nothing to compare with: the equivalent of a dtype
# missing from an op_db entry's dtypes. The suite fails if one of them gets
# a CPU kernel (a sample that CPU runs).
CPU_UNSUPPORTED = {
    ("_foreach_abs", torch.bool),
    ("_foreach_addcmul", torch.bool),
    ("_foreach_lerp", torch.int64),
    ("_foreach_lerp", torch.int32),
    ("_foreach_lerp", torch.uint8),
    ("_foreach_lerp", torch.bool),
}
