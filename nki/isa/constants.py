"""nki.isa.constants: the enums, importable on their own (nki-library style)."""

from . import dge_mode, dma_engine, engine, matmul_perf_mode, nc_version, oob_mode, reduce_cmd  # noqa: F401
