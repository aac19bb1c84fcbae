"""Portable compile caches: torch.compiler.save_cache_artifacts() and
load_cache_artifacts() carry our compiled graphs.

Owner: the ``neuron`` cache artifact type (PyTorch's CacheArtifactManager,
"MegaCache") and what is recorded in it: every shared object a process
compiles or loads from its disk cache (``so/<libtrn key>``) and every warm
entry it writes or loads (``aot/<warm key>``, warm.py). Loading a bundle
writes them into this user's cache directory, each under this user's MAC
(cache_key.c), so a process with a fresh cache directory - another machine,
a CI runner, a new rank - starts warm: nothing traced, lowered or compiled.

Trust: a bundle is code (shared objects, pickled entries), like PyTorch's
own artifacts; loading one is the user's decision, the same as running the
program that made it. Each artifact carries the SHA-256 of its payload, so a
damaged bundle populates nothing it cannot verify; entries in the cache
directory keep the usual rule (an entry whose MAC does not verify is
recompiled, never loaded). An object compiled for other CPU features, C
compiler or flags simply never matches a key here (they are in the key).
"""

from __future__ import annotations

import hashlib
import warnings

from torch.compiler._cache import CacheArtifact, CacheArtifactFactory, CacheArtifactManager

TYPE = "neuron"
_registered = []


def _wrap(payload: bytes) -> bytes:
    return hashlib.sha256(payload).digest() + payload


def _unwrap(content: bytes) -> bytes | None:
    digest, payload = content[:32], content[32:]
    return payload if len(content) >= 32 and hashlib.sha256(payload).digest() == digest else None


def register() -> None:
    """Registers the artifact type (at load: a process that only loads a
    bundle must know it before ``load_cache_artifacts``)."""
    if _registered:
        return

    class NeuronCacheArtifact(CacheArtifact):
        @staticmethod
        def type() -> str:
            return TYPE

        def populate_cache(self) -> None:
            _populate(self.key, self.content)

    if TYPE not in CacheArtifactFactory._artifact_types:
        CacheArtifactFactory.register(NeuronCacheArtifact)
    _registered.append(NeuronCacheArtifact)


def _record(kind: str, key: str, payload: bytes) -> None:
    if not payload:
        return
    try:
        CacheArtifactManager.record_artifact(TYPE, f"{kind}/{key}", _wrap(payload))
    except Exception as e:  # noqa: BLE001 - a bundle that misses a graph only costs a compile
        warnings.warn(f"neuron compile: could not record cache artifact {kind}/{key[:12]}: {e}")


def record_program(program) -> None:
    """A compiled or disk-cached shared object (its libtrn cache key)."""
    _record("so", program.cache_key, program.object)


def record_warm(key: str, payload: bytes) -> None:
    """A warm entry's payload (what warm.save MACs and writes)."""
    _record("aot", key, payload)


_warned_no_cache = []


def _populate(key: str, content: bytes) -> None:
    from .config import cache_dir

    kind, _, k = key.partition("/")
    payload = _unwrap(content)
    if kind not in ("so", "aot") or payload is None or len(k) != 64:
        warnings.warn(
            f"neuron cache artifact {key[:40]!r} does not verify (damaged bundle); skipped: "
            "its graph compiles when first used"
        )
        return
    root = cache_dir()
    if root is None:
        if not _warned_no_cache:
            _warned_no_cache.append(True)
            warnings.warn(
                "neuron cache artifacts not loaded: the compile cache is disabled or refused "
                "(TORCH_NEURONX_NEFF_CACHE_DIR, TORCH_NEURONX_NEFF_DISABLE_CACHE)"
            )
        return
    if kind == "so":
        from .. import _C

        _C._compile_cache_store(root, k, payload)
    else:
        from . import warm

        warm.store_payload(root, k, payload)
