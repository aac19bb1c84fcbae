"""neuronxcc.nki: the legacy NKI front end (result-returning ISA calls,
arange/mgrid index expressions, mask=, par_dim, N-d SPMD grids,
simulate_kernel, baremetal, benchmark) on OpenNeuron's NKI core."""

import nki as _nki
from nki import NkiError, baremetal, benchmark, profile, simulate_kernel  # noqa: F401
from nki._runtime import Kernel

from . import isa, language  # noqa: F401
from . import typing  # noqa: F401


def jit(fn=None, mode="auto", **opts):
    if fn is None:
        return lambda f: jit(f, mode=mode, **opts)
    if isinstance(fn, Kernel):
        return fn
    return Kernel(
        fn, legacy=True, mode=mode, force_host=mode in ("simulation", "baremetal", "benchmark")
    )


trace = jit
simulate = _nki.simulate
