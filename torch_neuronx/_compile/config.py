"""The compile backend's settings from the environment and its directories.

Owner: ``NeuronCompileError``, the environment-flag reader, where libtrn's
headers are (``_include_dir``), the disk cache (``cache_dir``) and the
debug-artifact folder (``debug_dir``). It imports no other ``_compile``
module, so every one of them may use it.
"""
from __future__ import annotations

import os
import tempfile
from pathlib import Path


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


def cache_dir() -> str | None:
    if _env_flag("TORCH_NEURONX_NEFF_DISABLE_CACHE", False):
        return None
    d = os.environ.get("TORCH_NEURONX_NEFF_CACHE_DIR")
    return d or os.path.join(tempfile.gettempdir(), f"openneuron-compile-cache-{os.getuid()}")


def debug_dir() -> str | None:
    if not _env_flag("TORCH_NEURONX_PRESERVE_COMPILATION_ARTIFACTS", False):
        return None
    d = os.environ.get("TORCH_NEURONX_DEBUG_DIR") or os.path.join(os.getcwd(), "neuron_debug")
    os.makedirs(d, mode=0o700, exist_ok=True)
    return d
