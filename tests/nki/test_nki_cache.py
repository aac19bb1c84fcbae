"""NKI kernels share the graph compiler's disk cache rules: a kernel
compiled once is loaded by the next process (a new kernel object here),
and TORCH_NEURONX_NEFF_CACHE_MAX_SIZE bounds the cache (least recently
used entries go)."""

import glob
import os

import numpy as np

import nki
import nki.language as nl
from nki import _runtime


def _adder(c):
    @nki.jit
    def add_const(a):
        out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
        nl.store(out, nl.add(nl.load(a), c))
        return out

    return add_const


def _entries(cache):
    return sorted(os.path.basename(p) for p in glob.glob(os.path.join(cache, "*.so")))


def test_nki_kernels_use_the_disk_cache_and_its_size_bound(tmp_path, monkeypatch):
    cache = str(tmp_path / "cache")
    monkeypatch.setenv("TORCH_NEURONX_NEFF_CACHE_DIR", cache)
    monkeypatch.delenv("TORCH_NEURONX_NEFF_CACHE_MAX_SIZE", raising=False)
    x = np.arange(8, dtype=np.float32).reshape(2, 4)
    before = dict(_runtime.stats)
    np.testing.assert_array_equal(_adder(3.0)(x), x + 3)
    np.testing.assert_array_equal(_adder(3.0)(x), x + 3)  # a new kernel: from the disk
    assert _runtime.stats["compiles"] - before["compiles"] == 1
    assert _runtime.stats["disk_hits"] - before["disk_hits"] == 1
    first = _entries(cache)
    assert len(first) == 1

    # A bound of one byte keeps only the entry just stored.
    monkeypatch.setenv("TORCH_NEURONX_NEFF_CACHE_MAX_SIZE", "1")
    np.testing.assert_array_equal(_adder(5.0)(x), x + 5)
    second = _entries(cache)
    assert len(second) == 1 and second != first
