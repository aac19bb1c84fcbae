"""Dtypes the conformance suite checks each op in (as far as the op supports
them on CPU). Shared by test_opinfo.py and scripts/gen_ops_doc.py."""

import torch

DTYPES = [
    torch.float32,
    torch.bfloat16,
    torch.float16,
    torch.int64,
    torch.int32,
    torch.uint8,
    torch.bool,
]
