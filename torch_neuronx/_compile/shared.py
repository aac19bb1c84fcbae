"""Processes sharing a cold cache directory share the whole backend work.

Owner: the per-key lock on a warm entry (``warm_entry_lock``). After a warm
miss the backend takes it on the entry's key, looks again, and only the
holder traces (AOTAutograd), lowers, compiles and stores the entry; the
others wait and load it, so N ranks on one cold directory lower each graph
once (the C compile alone was shared before, by libtrn's ``locks/<key>.lock``).

Deadlock rule: the lock is never released by running a graph. The backend
returns as soon as the holder's graphs are lowered (the C compiles go on, as
without a cache), and hands the lock to a thread of its own that finishes
those C compiles, lets the warm entry be saved and only then lets go
(``_Hold.release_after``, jobs._Group.finish): that thread runs no graph, so a
holder whose first call needs a collective with a waiting rank still
releases it. (Released at the graph's first call instead, a forward with a
collective would wait for a rank that waits for the backward's compile.) The lock
is released on every path out (errors included), waiting obeys
TORCH_NEURONX_NEFF_CACHE_LOCK_TIMEOUT (past it: a warning, and the graph is
compiled around the holder; the entry is written atomically, so the
duplicate is harmless), and it is a ``flock``: the kernel drops it when its
holder dies, however it dies.

The lock file lives beside the entries (``aot/<key>.lock``, the directory
warm.py has already checked is the user's own and private); the size bound
never removes lock files (removing one a process waits on would let a third
take a fresh lock on a new file).
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import threading
import time
import warnings

from . import metrics
from .config import cache_lock_timeout

_held = threading.local()  # .keys: warm keys this thread holds (re-entry takes no second lock)


def _open(root: str, key: str) -> int | None:
    from . import warm

    try:
        d = warm._dir(root)
        return os.open(
            os.path.join(d, key + ".lock"),
            os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC,
            0o600,
        )
    except OSError:
        return None  # a refused or unwritable directory: compile without sharing


class _Hold:
    """What ``warm_entry_lock`` yields: ``held`` (whether this process holds
    the lock) and ``release_after``, which keeps it past the block."""

    def __init__(self, fd: int | None, held: bool):
        self.held = held
        self._fd = fd if held else None

    def release_after(self, work) -> None:
        """Hands the held lock to a daemon thread that runs ``work`` (it must
        run no graph: finishing C compiles, saving the entry) and then closes
        the lock file, which drops the flock; the block's exit then leaves it
        alone. Errors in ``work`` stay with the graphs (each job keeps its
        own and raises it at its calls)."""
        fd, self._fd = self._fd, None
        if fd is None:
            return

        def run():
            try:
                with contextlib.suppress(Exception):
                    work()
            finally:
                os.close(fd)

        threading.Thread(target=run, name="neuron-warm-entry-lock", daemon=True).start()


@contextlib.contextmanager
def warm_entry_lock(root: str, key: str):
    """Holds the per-key lock on warm entry ``key`` for the block (or, after
    ``release_after``, until that work ends); yields a ``_Hold`` whose
    ``held`` is False when no lock could be made, or the wait passed the
    timeout and the caller compiles around the holder."""
    keys = getattr(_held, "keys", None)
    if keys is None:
        keys = _held.keys = set()
    if key in keys:
        yield _Hold(None, True)
        return
    timeout = cache_lock_timeout()  # read first: a bad value is an error, not a hang
    fd = _open(root, key)
    if fd is None:
        yield _Hold(None, False)
        return
    hold = _Hold(fd, False)
    try:
        hold = _Hold(fd, _acquire(fd, key, timeout))
        if hold.held:
            keys.add(key)
        try:
            yield hold
        finally:
            keys.discard(key)
    finally:
        if hold._fd is not None or not hold.held:
            os.close(fd)  # drops the flock (unless handed to release_after's thread)


def _acquire(fd: int, key: str, timeout: float) -> bool:
    t0 = time.perf_counter()
    deadline = t0 + max(timeout, 0.0)
    waited = False
    try:
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                return True
            except BlockingIOError:
                pass
            except InterruptedError:
                continue
            except OSError:
                return False  # flock unsupported here (some network filesystems)
            waited = True
            if timeout <= 0 or time.perf_counter() >= deadline:
                warnings.warn(
                    f"neuron compile cache: another process has held the lock on warm entry {key[:12]} "
                    f"for over {max(timeout, 0):g} s (TORCH_NEURONX_NEFF_CACHE_LOCK_TIMEOUT); compiling "
                    "it here too",
                    stacklevel=4,
                )
                return False
            time.sleep(0.005)
    finally:
        if waited:
            metrics.add(warm_lock_waits=1, warm_lock_seconds=time.perf_counter() - t0)
