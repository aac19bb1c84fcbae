"""Processes sharing a cold cache directory share the whole backend work.

Owner: the per-key lock on a warm entry (``warm_entry_lock``). After a warm
miss the backend takes it on the entry's key, looks again, and only the
holder traces (AOTAutograd), lowers, compiles and stores the entry; the
others wait and load it, so N ranks on one cold directory lower each graph
once (the C compile alone was shared before, by libtrn's ``locks/<key>.lock``).

Deadlock rule: the lock covers only work that finishes inside the backend's
compile call. The holder finishes its graphs' C compiles before it lets go
(jobs._Group.finish) and runs nothing: a rank whose first call needs a
collective with a waiting rank would otherwise never release it. The lock
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


@contextlib.contextmanager
def warm_entry_lock(root: str, key: str):
    """Holds the per-key lock on warm entry ``key`` for the block; yields
    whether it is held (False: no lock could be made, or the wait passed the
    timeout and the caller compiles around the holder)."""
    keys = getattr(_held, "keys", None)
    if keys is None:
        keys = _held.keys = set()
    if key in keys:
        yield True
        return
    timeout = cache_lock_timeout()  # read first: a bad value is an error, not a hang
    fd = _open(root, key)
    if fd is None:
        yield False
        return
    try:
        held = _acquire(fd, key, timeout)
        if held:
            keys.add(key)
        try:
            yield held
        finally:
            keys.discard(key)
    finally:
        os.close(fd)  # drops the flock


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
