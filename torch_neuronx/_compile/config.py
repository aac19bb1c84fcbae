"""The compile backend's settings from the environment and its directories.

Owner: ``NeuronCompileError``, the environment-flag reader, where libtrn's
headers are (``_include_dir``), the disk cache (``cache_dir``) and the
debug-artifact folder (``debug_dir``). It imports no other ``_compile``
module (only ``_C``, for libtrn's cache trust checks), so every one of them
may use it.
"""
from __future__ import annotations

import os
import tempfile
import warnings
from pathlib import Path

from .. import _C


class NeuronCompileError(RuntimeError):
    """The neuron backend cannot compile this graph (see the message)."""


def _env_flag(name: str, default: bool) -> bool:
    v = os.environ.get(name)
    if v is None or v == "":
        return default
    return v.strip().lower() not in ("0", "false", "no", "off")


def _include_dir() -> str:
    here = Path(__file__).resolve().parent.parent
    for cand in (here / "include", here.parent / "libtrn" / "include"):
        if (cand / "trn" / "scalar.h").is_file():
            return str(cand)
    raise NeuronCompileError("neuron compiler: libtrn headers (trn/scalar.h) not found next to torch_neuronx")


_refused_caches: set[tuple[str, str]] = set()


def caching_enabled() -> bool:
    """Whether compiled graphs are cached at all (in memory, and on disk when
    ``cache_dir()`` is usable): TORCH_NEURONX_NEFF_DISABLE_CACHE turns every
    cache off; a refused directory only costs the disk cache."""
    return not _env_flag("TORCH_NEURONX_NEFF_DISABLE_CACHE", False)


def cache_dir() -> str | None:
    """The disk cache directory, or None (disabled, or refused). libtrn
    trusts a directory only if it is the user's own, not a symlink and not
    writable by others, and entries only with a MAC under the user's key
    (another local user could otherwise plant code that runs as us): a
    refused cache warns once and the process compiles without it."""
    if not caching_enabled():
        return None
    d = os.environ.get("TORCH_NEURONX_NEFF_CACHE_DIR")
    d = d or os.path.join(tempfile.gettempdir(), f"openneuron-compile-cache-{os.getuid()}")
    why = _C._compile_cache_check_dir(d)
    if not why:
        try:
            _C._compile_cache_mac("", b"")  # the user's key: made once, or refused
        except RuntimeError as e:
            why = str(e)
    if why:
        if (d, why) not in _refused_caches:
            _refused_caches.add((d, why))
            warnings.warn(f"neuron compile cache not used: {why}. Compiling without the disk cache; remove it, "
                          "or set TORCH_NEURONX_NEFF_CACHE_DIR to a directory of your own", stacklevel=2)
        return None
    return d


def debug_dir() -> str | None:
    if not _env_flag("TORCH_NEURONX_PRESERVE_COMPILATION_ARTIFACTS", False):
        return None
    d = os.environ.get("TORCH_NEURONX_DEBUG_DIR") or os.path.join(os.getcwd(), "neuron_debug")
    os.makedirs(d, mode=0o700, exist_ok=True)
    return d
