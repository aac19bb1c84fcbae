"""``neuron-ls``: the visible NeuronCores, their memory, and which processes
use which core (from the processes' stats pages), like the SDK's neuron-ls.

    $ neuron-ls
    instance: OpenNeuron (software NeuronCores on the host CPU), 2 cores
    cpu kernels: avx512 (built: avx2, avx512)
    +--------+--------------------------------------+-----------+---------+-------------------------------+
    | NEURON | NAME                                 | MEMORY    | THREADS | PROCESSES (PID MEMORY COMMAND)|
    ...
``--json`` prints the same as JSON.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

from .stats_pages import fmt_bytes, read_all, short_command


def collect() -> dict:
    from .. import _C

    devices = []
    procs = read_all(skip_pid=os.getpid())
    for d in range(_C._device_count()):
        props = _C._get_device_properties(d)
        users = []
        for p in procs:
            if d < len(p.devices) and p.devices[d].in_use:
                ds = p.devices[d]
                users.append(
                    {
                        "pid": p.pid,
                        "command": p.command,
                        "memory_allocated": ds.mem_allocated,
                        "memory_reserved": ds.mem_reserved,
                    }
                )
        devices.append(
            {
                "index": d,
                "name": props["name"],
                "memory": props["total_memory"],
                "threads": props["core_count"],
                "processes": users,
            }
        )
    return {
        "device_count": len(devices),
        "devices": devices,
        # The CPU level the kernels run at (libtrn/src/runtime/cpu_level.c).
        "cpu_capability": _C._cpu_capability(),
        "cpu_capabilities": _C._cpu_levels(),
        "cpu_capability_error": _C._cpu_level_error() or None,
    }


def render(info: dict) -> str:
    cols = ("NEURON", "NAME", "MEMORY", "THREADS", "PROCESSES (PID, MEMORY IN USE, COMMAND)")
    rows = []
    for d in info["devices"]:
        users = [
            f"{u['pid']} {fmt_bytes(u['memory_allocated'])} {short_command(u['command'])}"
            for u in d["processes"]
        ] or ["-"]
        rows.append(
            (f"nc{d['index']}", d["name"], fmt_bytes(d["memory"]), str(d["threads"]), users[0])
        )
        rows += [("", "", "", "", u) for u in users[1:]]
    widths = [
        max(len(c), *(len(r[i]) for r in rows)) if rows else len(c) for i, c in enumerate(cols)
    ]
    sep = "+" + "+".join("-" * (w + 2) for w in widths) + "+"
    line = lambda r: "| " + " | ".join(v.ljust(w) for v, w in zip(r, widths)) + " |"  # noqa: E731
    out = [
        f"instance: OpenNeuron (software NeuronCores on the host CPU), "
        f"{info['device_count']} core{'s' if info['device_count'] != 1 else ''}",
        f"cpu kernels: {info['cpu_capability']} (built: {', '.join(info['cpu_capabilities'])})",
    ]
    if info["cpu_capability_error"]:
        out.append(f"cpu kernels refused: {info['cpu_capability_error']}")
    out += [
        sep,
        line(cols),
        sep,
    ]
    out += [line(r) for r in rows]
    out.append(sep)
    return "\n".join(out)


def main(argv: "list[str] | None" = None) -> int:
    parser = argparse.ArgumentParser(prog="neuron-ls", description=__doc__.split("\n\n")[0])
    parser.add_argument("--json", "-j", action="store_true", help="print JSON")
    args = parser.parse_args(argv)
    info = collect()
    print(json.dumps(info, indent=2) if args.json else render(info))
    return 0


if __name__ == "__main__":
    sys.exit(main())
