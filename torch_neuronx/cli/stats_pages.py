"""Reads the per-process stats pages libtrn writes (/dev/shm/trn-stats-<pid>,
layout: ``trn_stats_page`` in libtrn/include/trn/metrics.h) for neuron-ls and
neuron-top. Pages of processes that are gone are removed."""
from __future__ import annotations

import os
import struct
from dataclasses import dataclass, field

MAGIC = 0x31544154534E5254  # "TRNSTAT1"
MAX_DEVICES = 64
COUNTERS = 16
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


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def counter_names() -> list[str]:
    from .. import _C
    return list(_C._counters())


def parse(data: bytes, names: list[str]) -> "ProcessStats | None":
    if len(data) < PAGE_SIZE:
        return None
    magic, version, pid, ndev, start, _ncounters, command = _HEADER.unpack_from(data, 0)
    if magic != MAGIC or version != 1:
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
        if not _alive(pid):
            try:
                os.unlink(path)
            except OSError:
                pass
            continue
        try:
            with open(path, "rb") as f:
                data = f.read(PAGE_SIZE)
        except OSError:
            continue
        proc = parse(data, names)
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
