"""OpenNeuron's NKI: the Neuron Kernel Interface, traced once per signature
into a tile-instruction program that libtrn checks against the NeuronCore's
rules and compiles to C (docs/nki.md).

    import nki, nki.language as nl, nki.isa as nisa

    @nki.jit
    def add(a, b):
        out = nl.ndarray(a.shape, a.dtype, buffer=nl.shared_hbm)
        ...
        return out

Called with neuron tensors it runs on the device; with NumPy arrays or CPU
tensors (or under nki.simulate / NKI_SIMULATOR=1) on the host."""

from . import isa, language, typing  # noqa: F401
from ._ir import NkiError  # noqa: F401
from ._runtime import Kernel, jit, simulate, stats  # noqa: F401

__version__ = "0.6.0+openneuron"


def simulate_kernel(kernel, *args, **kwargs):
    """Legacy: run a kernel on the host with NumPy arrays."""
    return simulate(kernel)(*args, **kwargs)


def baremetal(kernel=None, **opts):
    """Legacy: a kernel run with NumPy arrays (here: on the host)."""
    if kernel is None:
        return lambda f: baremetal(f, **opts)
    k = kernel if isinstance(kernel, Kernel) else Kernel(kernel)
    return Kernel(k.fn, k.grid, k.legacy, "simulation", k._cache, True)


profile = baremetal


class _Latency:
    def __init__(self, samples_us):
        self.samples = sorted(samples_us)

    def get_latency_percentile(self, p):
        s = self.samples
        return s[min(len(s) - 1, int(round(p / 100.0 * (len(s) - 1))))]


class _BenchResult:
    def __init__(self, samples_us):
        self.nc_latency = _Latency(samples_us)


class _Benchmarked(Kernel):
    def __call__(self, *args, **kwargs):
        import time

        warmup, iters = self.opts.get("warmup", 2), self.opts.get("iters", 10)
        r = None
        for _ in range(warmup):
            r = super().__call__(*args, **kwargs)
        samples = []
        for _ in range(max(1, iters)):
            t0 = time.perf_counter()
            r = super().__call__(*args, **kwargs)
            samples.append((time.perf_counter() - t0) * 1e6)
        self.benchmark_result = _BenchResult(samples)
        return r

    def __getitem__(self, grid):
        k = super().__getitem__(grid)
        b = _Benchmarked(k.fn, k.grid, k.legacy, k.mode, k._cache, True, **self.opts)
        return b


def benchmark(kernel=None, warmup=2, iters=10, **opts):
    """Legacy: runs the kernel warmup + iters times on the host; latencies in
    .benchmark_result.nc_latency.get_latency_percentile(p) (microseconds)."""
    if kernel is None:
        return lambda f: benchmark(f, warmup=warmup, iters=iters, **opts)
    k = kernel if isinstance(kernel, Kernel) else Kernel(kernel)
    return _Benchmarked(
        k.fn, k.grid, k.legacy, "simulation", k._cache, True, warmup=warmup, iters=iters
    )
