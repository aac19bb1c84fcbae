"""Reads the per-process stats pages libtrn writes (/dev/shm/trn-stats-<pid>,
layout: ``trn_stats_page`` in libtrn/include/trn/metrics.h) for neuron-ls and
neuron-top. Pages of processes that are gone are removed."""
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
SHM_DIR = "/dev/shm"


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


def _boot_time() -> "float | None":
    try:
        with open("/proc/stat") as f:
            for line in f:
                if line.startswith("btime "):
                    return float(line.split()[1])
    except OSError:
        pass
    return None


def _alive(pid: int, page_start_ns: "int | None" = None) -> bool:
    """Whether the page's process still runs: the pid exists, is not a zombie
    (a SIGKILLed child its parent has not reaped yet still has a pid), and was
    not reused by a process started after the page was written."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            stat = f.read()
    except FileNotFoundError:
        return False
    except OSError:
        stat = None
    if stat is None:  # no /proc access: the pid's existence is all we know
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            return True
        return True
    fields = stat[stat.rindex(")") + 2:].split()  # after "pid (comm) "
    if fields[0] in ("Z", "X"):
        return False
    boot = _boot_time()
    if page_start_ns and boot is not None:
        started = boot + int(fields[19]) / os.sysconf("SC_CLK_TCK")
        # btime has 1 s resolution; a page is written after its process starts
        if started > page_start_ns / 1e9 + 2:
            return False
    return True


def counter_names() -> list[str]:
    from .. import _C
    return list(_C._counters())


def parse(data: bytes, names: list[str]) -> "ProcessStats | None":
    if len(data) < PAGE_SIZE:
        return None
    magic, version, pid, ndev, start, _ncounters, command = _HEADER.unpack_from(data, 0)
    if magic != MAGIC or version != VERSION:
        return None
    proc = ProcessStats(pid, command.split(b"\0", 1)[0].decode(errors="replace"),
                        int(ndev), start)
    for d in range(min(int(ndev), MAX_DEVICES)):
        vals = _DEVICE.unpack_from(data, _HEADER.size + d * _DEVICE.size)
        counters = dict(zip(names, vals[:COUNTERS]))
        in_use, running, alloc, reserved, cap = vals[COUNTERS:]
        # running is a signed count stored as uint64
        running = running - (1 << 64) if running >= (1 << 63) else running
        proc.devices.append(DeviceStats(counters, bool(in_use), running, alloc, reserved, cap))
    return proc


def page_files() -> list[tuple[int, str]]:
    out = []
    try:
        names = os.listdir(SHM_DIR)
    except OSError:
        return out
    for name in names:
        if name.startswith("trn-stats-") and name[10:].isdigit():
            out.append((int(name[10:]), os.path.join(SHM_DIR, name)))
    return sorted(out)


def read_all(names: "list[str] | None" = None, skip_pid: "int | None" = None) -> list[ProcessStats]:
    """Every live process's page; stale pages (dead pid) are removed."""
    names = names or counter_names()
    procs = []
    for pid, path in page_files():
        if pid == skip_pid:
            continue
        try:
            with open(path, "rb") as f:
                data = f.read(PAGE_SIZE)
        except OSError:
            continue
        proc = parse(data, names)
        if not _alive(pid, proc.start_unix_ns if proc is not None else None):
            try:
                os.unlink(path)
            except OSError:
                pass
            continue
        if proc is not None:
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
    words = [os.path.basename(w) if "/" in w and not w.startswith("-") else w for w in command.split()]
    text = " ".join(words)
    return text if len(text) <= limit else text[:limit - 3] + "..."
