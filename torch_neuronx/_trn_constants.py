"""The libtrn enum values and constants the Python side uses, as its C
headers define them, read once at import from the extension
(csrc/runtime/trn_constants.cpp), so Python never retypes a C number:
``VALUES["TRN_GRAPH_MAX"]`` (any name the binding lists) and
``DTYPE_IDS["float32"]`` (trn_dtype by trn_dtype_name)."""

from __future__ import annotations

from . import _C

VALUES: dict[str, int] = dict(_C._trn_constants())
DTYPE_IDS: dict[str, int] = dict(_C._trn_dtype_ids())
