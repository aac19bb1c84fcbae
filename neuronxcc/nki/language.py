"""neuronxcc.nki.language: nki.language plus the legacy-only names
(arange, mgrid, par_dim, divide, static_cast, ...); tiles broadcast NumPy
style and promote types as the legacy API documents."""

from nki.language import *  # noqa: F401,F403
from nki.language import (
    _range,
    arange,
    bf16,
    bfp16,
    divide,
    fp16,
    fp32,
    iota,
    loop_reduce,
    mgrid,  # noqa: F401
    par_dim,
    spmd_dim,
    nc,
    static_cast,
)
