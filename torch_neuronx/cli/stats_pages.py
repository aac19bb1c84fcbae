"""Reads the per-process stats pages libtrn writes (layout:
``trn_stats_page`` in libtrn/include/trn/metrics.h) for neuron-ls and
neuron-top. Each page is an unnamed shared mapping (a memfd named
"trn-stats") that the kernel frees with its process: it is found through
/proc/<pid>/fd/<n>, whose link reads "/memfd:trn-stats (deleted)", which
works for the reader's own processes (and for root). There is nothing to
sweep: a process that is gone, or a zombie, has no open files."""

from __future__ import annotations

import os
import struct
from dataclasses import dataclass, field

from .._trn_constants import VALUES

MAGIC = VALUES["TRN_STATS_MAGIC"]  # "TRNSTAT1"
VERSION = VALUES["TRN_STATS_VERSION"]
MAX_DEVICES = VALUES["TRN_MAX_DEVICES"]
COUNTERS = VALUES["TRN_STATS_COUNTERS"]
_HEADER = struct.Struct("<6Q128s")
_DEVICE = struct.Struct(f"<{COUNTERS}Q5Q")
PAGE_SIZE = _HEADER.size + MAX_DEVICES * _DEVICE.size
MEMFD_LINK = "/memfd:trn-stats (deleted)"


@dataclass
class DeviceStats:
    counters: dict[str, int]
    in_use: bool
    running: int
    mem_allocated: int
    mem_reserved: int
    mem_capacity: int


@dataclass
class ProcessStats:
    pid: int
    command: str
    device_count: int
    start_unix_ns: int
    devices: list[DeviceStats] = field(default_factory=list)


def counter_names() -> list[str]:
    from .. import _C

    return list(_C._counters())


def parse(data: bytes, names: list[str]) -> "ProcessStats | None":
    if len(data) < PAGE_SIZE:
        return None
    magic, version, pid, ndev, start, _ncounters, command = _HEADER.unpack_from(data, 0)
    if magic != MAGIC or version != VERSION:
        return None
    proc = ProcessStats(pid, command.split(b"\0", 1)[0].decode(errors="replace"), int(ndev), start)
    for d in range(min(int(ndev), MAX_DEVICES)):
        vals = _DEVICE.unpack_from(data, _HEADER.size + d * _DEVICE.size)
        counters = dict(zip(names, vals[:COUNTERS]))
        in_use, running, alloc, reserved, cap = vals[COUNTERS:]
        # running is a signed count stored as uint64
        running = running - (1 << 64) if running >= (1 << 63) else running
        proc.devices.append(DeviceStats(counters, bool(in_use), running, alloc, reserved, cap))
    return proc


# pid -> the fd its page was last found at (neuron-top re-reads every
# interval; most processes keep the same fd, so one readlink finds it).
_known_fd: dict[int, str] = {}


def _page_fd(pid: int) -> "str | None":
    base = f"/proc/{pid}/fd"
    fd = _known_fd.get(pid)
    if fd is not None:
        try:
            if os.readlink(f"{base}/{fd}") == MEMFD_LINK:
                return fd
        except OSError:
            pass
        del _known_fd[pid]
    try:
        fds = os.listdir(base)  # PermissionError: another user's process
    except OSError:
        return None
    for fd in fds:
        try:
            if os.readlink(f"{base}/{fd}") == MEMFD_LINK:
                _known_fd[pid] = fd
                return fd
        except OSError:
            continue
    return None


def page_files() -> list[tuple[int, str]]:
    """(pid, /proc/<pid>/fd/<n>) of every process whose page this user can
    read, by pid."""
    out = []
    try:
        pids = sorted(int(n) for n in os.listdir("/proc") if n.isdigit())
    except OSError:
        return out
    for pid in list(_known_fd):
        if pid not in pids:
            del _known_fd[pid]
    for pid in pids:
        fd = _page_fd(pid)
        if fd is not None:
            out.append((pid, f"/proc/{pid}/fd/{fd}"))
    return out


def read_all(names: "list[str] | None" = None, skip_pid: "int | None" = None) -> list[ProcessStats]:
    """Every live process's page (of this user; of everyone for root)."""
    names = names or counter_names()
    procs = []
    for pid, path in page_files():
        if pid == skip_pid:
            continue
        try:
            with open(path, "rb") as f:
                data = f.read(PAGE_SIZE)
        except OSError:  # the process just exited
            continue
        proc = parse(data, names)
        # A page inherited without libtrn's fork handler (a raw clone) still
        # names the process that created it.
        if proc is not None and proc.pid == pid:
            procs.append(proc)
    return procs


def fmt_bytes(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if n < 1024 or unit == "TiB":
            return f"{int(n)} B" if unit == "B" else f"{n:.2f} {unit}"
        n /= 1024
    return f"{n} B"


def short_command(command: str, limit: int = 60) -> str:
    """'/venv/bin/python /src/train.py --x' -> 'python train.py --x'."""
    words = [
        os.path.basename(w) if "/" in w and not w.startswith("-") else w for w in command.split()
    ]
    text = " ".join(words)
    return text if len(text) <= limit else text[: limit - 3] + "..."
