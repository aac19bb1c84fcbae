"""neuronxcc.nki.isa.constants: the ISA enums."""

from nki.isa.constants import *  # noqa: F401,F403
from nki.isa.constants import (
    dge_mode,
    dma_engine,
    engine,
    matmul_perf_mode,
    nc_version,
    oob_mode,
    reduce_cmd,
)  # noqa: F401
