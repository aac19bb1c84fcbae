"""The compile backend's settings from the environment and its directories.

Owner: ``NeuronCompileError``, the environment-flag reader, where libtrn's
headers are (``_include_dir``), the disk cache (``cache_dir``, its lock
timeout and size bound), the C compiler settings (``cc_settings``:
``NEURON_CC_FLAGS`` and ``options={"compiler_args": ...}`` read as
neuronx-cc flags, ``TORCH_NEURONX_CC_EXTRA_FLAGS``) and the debug-artifact
folder (``debug_dir``). It imports no other ``_compile``
module (only ``_C``, for libtrn's cache trust checks), so every one of them
may use it.
"""

from __future__ import annotations

import dataclasses
import os
import shlex
import tempfile
import threading
import warnings
from pathlib import Path

from .. import _C


class NeuronCompileError(RuntimeError):
    """The neuron backend cannot compile this graph (see the message)."""


class NeuronExecutionError(RuntimeError):
    """TorchNeuron's NEFFExecutionError: a compiled graph failed while running.
    OpenNeuron raises the device's own RuntimeError there; this name exists
    so ``except NEFFExecutionError`` clauses import."""


# neuron_dynamo_backend.set_model_name: options' model_name when none is given.
default_model_name: str | None = None


def _env_flag(name: str, default: bool) -> bool:
    v = os.environ.get(name)
    if v is None or v == "":
        return default
    return v.strip().lower() not in ("0", "false", "no", "off")


def _include_dir() -> str:
    here = Path(__file__).resolve().parent.parent
    # An installed package carries the headers in torch_neuronx/include (the
    # wheel's package data); a source tree has them in libtrn/include.
    for cand in (here / "include", here.parent / "libtrn" / "include"):
        if (cand / "trn" / "scalar.h").is_file():
            return str(cand)
    raise NeuronCompileError(
        f"neuron compiler: libtrn headers (trn/scalar.h) not found in {here / 'include'} "
        "(the package is incomplete: reinstall it)"
    )


# ---- C compiler settings --------------------------------------------------------------

# neuronx-cc options TorchNeuron users put in NEURON_CC_FLAGS that have no
# counterpart in a C compiler (ignored, logged once): those taking a value,
# then switches. Any --enable-*, --disable-* or --internal-* is one too.
_NCC_VALUE = {
    "--target",
    "--model-type",
    "--auto-cast",
    "--auto-cast-type",
    "--lnc",
    "--logical-nc-config",
    "--distribution-strategy",
    "--framework",
    "--logfile",
    "--workdir",
    "--pipeline",
    "--verbose",
    "--cache_dir",
    "--output",
    "--jobs",
    "--tensorizer-options",
    "--execute-repetition",
    "--hbm-scratchpad-page-size",
    "--logical-neuroncore-config",
    "--num-neuroncores",
}
_NCC_SWITCH = {"--retry_failed_compilation", "--fast-math", "--no-fast-math", "--compile-only"}


@dataclasses.dataclass(frozen=True)
class CcSettings:
    """How generated C is compiled: ``opt_level`` (0-3, the C compiler's -O)
    and ``extra_flags`` (C compiler flags, TORCH_NEURONX_CC_EXTRA_FLAGS)."""

    opt_level: int = 2
    extra_flags: str = ""
    # neuronx-cc flags read and ignored (not applicable), for the docs' table and tests.
    ignored: tuple = ()

    def key(self) -> str:
        return f"O{self.opt_level}|cc_extra={self.extra_flags}"


_logged_flags: set = set()
_logged_lock = threading.Lock()


def _log_once(flag: str, message: str) -> None:
    with _logged_lock:
        if flag in _logged_flags:
            return
        _logged_flags.add(flag)
    from .. import _logging

    _logging.log(_logging.WARNING, "compile", message)


def _opt_level(text: str, where: str) -> int:
    if text not in ("0", "1", "2", "3"):
        raise NeuronCompileError(f"{where}: optimisation level {text!r} is not one of 0, 1, 2, 3")
    return int(text)


def parse_neuron_cc_flags(args, where: str = "NEURON_CC_FLAGS", level: int = 2):
    """neuronx-cc flags (a string, shell-quoted, or a list) -> (the -O level,
    the flags ignored). -O0..-O3 / --optlevel N pick the C compiler's -O
    level (the last one wins); other neuronx-cc flags do not apply to a C
    compiler and are logged once; anything else is no neuronx-cc flag (a C
    flag put here by habit): logged once and ignored too. Nothing here ever
    reaches the C compiler."""
    toks = shlex.split(args) if isinstance(args, str) else [str(a) for a in (args or [])]
    ignored = []
    i = 0
    while i < len(toks):
        t = toks[i]
        name, eq, value = t.partition("=")
        if len(t) == 3 and t.startswith("-O") and t[2].isdigit():
            level = _opt_level(t[2], where)
        elif t in ("-O", "--optlevel") or name == "--optlevel":
            if not eq:
                i += 1
                value = toks[i] if i < len(toks) else ""
            level = _opt_level(value, where)
        elif (
            name in _NCC_VALUE
            or name in _NCC_SWITCH
            or name.startswith(("--enable-", "--disable-", "--internal-"))
        ):
            if (
                name in _NCC_VALUE
                and not eq
                and i + 1 < len(toks)
                and not toks[i + 1].startswith("-")
            ):
                i += 1
                t = f"{t} {toks[i]}"
            ignored.append(t)
            _log_once(
                t,
                f"{where}: neuronx-cc flag `{t}` does not apply to OpenNeuron's C compiler; ignored "
                "(only the optimisation level, -O0..-O3 / --optlevel, takes effect)",
            )
        else:
            ignored.append(t)
            _log_once(
                t,
                f"{where}: `{t}` is not a neuronx-cc flag OpenNeuron knows; ignored. Flags for the C "
                "compiler that builds compiled graphs go in TORCH_NEURONX_CC_EXTRA_FLAGS",
            )
        i += 1
    return level, ignored


def cc_settings(compiler_args=None) -> CcSettings:
    """The C compiler settings for a compile: TorchNeuron's
    NEURON_COMPILER_OPT_LEVEL, then NEURON_CC_FLAGS, then
    ``options={"compiler_args": ...}`` (the later wins), then our own
    TORCH_NEURONX_CC_EXTRA_FLAGS, passed to the C compiler as they are."""
    level = 2
    v = os.environ.get("NEURON_COMPILER_OPT_LEVEL", "").strip()
    if v:
        level = _opt_level(v.removeprefix("-O"), "NEURON_COMPILER_OPT_LEVEL")
    level, ignored = parse_neuron_cc_flags(os.environ.get("NEURON_CC_FLAGS", ""), level=level)
    if compiler_args:
        level, more = parse_neuron_cc_flags(compiler_args, 'options["compiler_args"]', level)
        ignored += more
    extra = " ".join(os.environ.get("TORCH_NEURONX_CC_EXTRA_FLAGS", "").split())
    return CcSettings(level, extra, tuple(ignored))


def _parse_size(text: str, name: str) -> int:
    t = text.strip().upper().removesuffix("B").removesuffix("I")
    mult = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}.get(t[-1:], 1)
    try:
        n = float(t[:-1] if t[-1:] in "KMGT" else t)
    except ValueError:
        n = -1
    if n <= 0:
        raise NeuronCompileError(
            f"{name}={text!r}: expected a size such as 10G, 512M or a number of bytes"
        )
    return int(n * mult)


def cache_max_bytes() -> int:
    """TORCH_NEURONX_NEFF_CACHE_MAX_SIZE in bytes; 0: unbounded."""
    v = os.environ.get("TORCH_NEURONX_NEFF_CACHE_MAX_SIZE", "").strip()
    return _parse_size(v, "TORCH_NEURONX_NEFF_CACHE_MAX_SIZE") if v else 0


def cache_lock_timeout() -> float:
    """TORCH_NEURONX_NEFF_CACHE_LOCK_TIMEOUT in seconds (default 1200, as
    TorchNeuron's), as libtrn takes it: < 0 means do not wait (the
    variable's 0)."""
    v = os.environ.get("TORCH_NEURONX_NEFF_CACHE_LOCK_TIMEOUT", "").strip()
    if not v:
        return 1200.0
    try:
        t = float(v)
    except ValueError:
        raise NeuronCompileError(
            f"TORCH_NEURONX_NEFF_CACHE_LOCK_TIMEOUT={v!r}: expected seconds"
        ) from None
    return t if t > 0 else -1.0


def compile_program(
    cgraph, include: str, cache: str | None, ddir: str | None, name: str, cc: CcSettings
):
    """libtrn's compile of a built graph (``_C._CompilerGraph``) with these settings."""
    return cgraph.compile(
        include,
        cache,
        ddir,
        name,
        cc.opt_level + 1,
        cc.extra_flags,
        cache_lock_timeout(),
        cache_max_bytes() if cache else 0,
    )


_refused_caches: set[tuple[str, str]] = set()


def caching_enabled() -> bool:
    """Whether compiled graphs are cached at all (in memory, and on disk when
    ``cache_dir()`` is usable): TORCH_NEURONX_NEFF_DISABLE_CACHE (or
    TorchNeuron's spelling, TORCH_NEURONX_DISABLE_NEFF_CACHE) turns every
    cache off; a refused directory only costs the disk cache."""
    return not (
        _env_flag("TORCH_NEURONX_NEFF_DISABLE_CACHE", False)
        or _env_flag("TORCH_NEURONX_DISABLE_NEFF_CACHE", False)
    )


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
            warnings.warn(
                f"neuron compile cache not used: {why}. Compiling without the disk cache; remove it, "
                "or set TORCH_NEURONX_NEFF_CACHE_DIR to a directory of your own",
                stacklevel=2,
            )
        return None
    return d


def debug_dir() -> str | None:
    if not _env_flag("TORCH_NEURONX_PRESERVE_COMPILATION_ARTIFACTS", False):
        return None
    d = os.environ.get("TORCH_NEURONX_DEBUG_DIR") or os.path.join(os.getcwd(), "neuron_debug")
    os.makedirs(d, mode=0o700, exist_ok=True)
    return d
