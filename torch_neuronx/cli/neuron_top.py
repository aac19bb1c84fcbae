"""``neuron-top``: a live view per NeuronCore of every process using the
device: utilization, memory in use, kernels per second and CPU fallbacks per
second, read from the processes' stats pages (memfds, through /proc/<pid>/fd).
Quit with ``q`` (or Ctrl-C).

Utilization is sampled: ~100 times a second neuron-top reads each page's
count of tasks running right now, and reports the busy fraction per refresh.
``--batch N`` prints N refreshes as plain text instead (for scripts).
"""

from __future__ import annotations

import argparse
import os
import sys
import time

from .stats_pages import counter_names, fmt_bytes, read_all, short_command

SAMPLE_S = 0.01


class Sampler:
    """Keeps the previous counters to turn them into per-second rates."""

    def __init__(self) -> None:
        self.names = counter_names()
        self.prev: dict[tuple[int, int], tuple[float, int, int]] = {}
        self.busy: dict[tuple[int, int], int] = {}
        self.samples = 0

    def sample(self) -> None:
        self.samples += 1
        for p in read_all(self.names, skip_pid=os.getpid()):
            for d, ds in enumerate(p.devices):
                if ds.running > 0:
                    self.busy[(p.pid, d)] = self.busy.get((p.pid, d), 0) + 1

    def rows(self) -> tuple[list[dict], list[dict]]:
        now = time.monotonic()
        procs = read_all(self.names, skip_pid=os.getpid())
        per_proc, cores = [], {}
        for p in procs:
            for d, ds in enumerate(p.devices):
                key = (p.pid, d)
                launches = ds.counters.get("kernel_launches", 0)
                fallbacks = ds.counters.get("cpu_fallbacks", 0)
                t0, l0, f0 = self.prev.get(key, (now, launches, fallbacks))
                dt = now - t0
                kps = (launches - l0) / dt if dt > 0 else 0.0
                fps = (fallbacks - f0) / dt if dt > 0 else 0.0
                self.prev[key] = (now, launches, fallbacks)
                util = 100.0 * self.busy.get(key, 0) / self.samples if self.samples else 0.0
                core = cores.setdefault(
                    d,
                    {
                        "core": d,
                        "util": 0.0,
                        "mem": 0,
                        "cap": ds.mem_capacity,
                        "kps": 0.0,
                        "fps": 0.0,
                        "pids": [],
                    },
                )
                core["cap"] = core["cap"] or ds.mem_capacity
                if not ds.in_use:
                    continue
                row = {
                    "pid": p.pid,
                    "core": d,
                    "util": util,
                    "mem": ds.mem_allocated,
                    "kps": kps,
                    "fps": fps,
                    "command": short_command(p.command),
                }
                per_proc.append(row)
                core["util"] = min(100.0, core["util"] + util)
                core["mem"] += ds.mem_allocated
                core["kps"] += kps
                core["fps"] += fps
                core["pids"].append(str(p.pid))
        self.busy.clear()
        self.samples = 0
        return [cores[k] for k in sorted(cores)], per_proc


def render(cores: list[dict], procs: list[dict], width: int = 120) -> list[str]:
    lines = [
        f"neuron-top  {time.strftime('%H:%M:%S')}  processes: {len({p['pid'] for p in procs})}"
        "   (q: quit)",
        "",
    ]
    lines.append(
        f"{'CORE':<6}{'UTIL':>7}  {'MEMORY IN USE / TOTAL':<26}{'KERNELS/S':>11}{'FALLBACKS/S':>13}  PIDS"
    )
    if not cores:
        lines.append("(no process is using a neuron device)")
    for c in cores:
        mem = f"{fmt_bytes(c['mem'])} / {fmt_bytes(c['cap'])}"
        lines.append(
            f"nc{c['core']:<4}{c['util']:>6.1f}%  {mem:<26}{c['kps']:>11.1f}{c['fps']:>13.1f}  "
            f"{','.join(c['pids']) or '-'}"
        )
    lines += [
        "",
        f"{'PID':<8}{'CORE':<6}{'UTIL':>7}  {'MEMORY':<12}{'KERNELS/S':>11}{'FALLBACKS/S':>13}  COMMAND",
    ]
    for p in procs:
        lines.append(
            f"{p['pid']:<8}nc{p['core']:<4}{p['util']:>6.1f}%  {fmt_bytes(p['mem']):<12}"
            f"{p['kps']:>11.1f}{p['fps']:>13.1f}  {p['command']}"
        )
    return [ln[:width] for ln in lines]


def run_batch(iterations: int, interval: float) -> int:
    sampler = Sampler()
    sampler.rows()
    for _ in range(iterations):
        end = time.monotonic() + interval
        while time.monotonic() < end:
            sampler.sample()
            time.sleep(SAMPLE_S)
        print("\n".join(render(*sampler.rows())), flush=True)
    return 0


def run_curses(interval: float) -> int:
    import curses

    def loop(screen) -> None:
        curses.curs_set(0)
        screen.timeout(int(SAMPLE_S * 1000))
        sampler = Sampler()
        sampler.rows()
        next_draw = 0.0
        while True:
            key = screen.getch()
            if key in (ord("q"), ord("Q")):
                return
            sampler.sample()
            if time.monotonic() >= next_draw:
                height, width = screen.getmaxyx()
                screen.erase()
                for y, line in enumerate(render(*sampler.rows(), width=width - 1)[: height - 1]):
                    screen.addstr(y, 0, line)
                screen.refresh()
                next_draw = time.monotonic() + interval

    try:
        curses.wrapper(loop)
    except KeyboardInterrupt:
        pass
    return 0


def main(argv: "list[str] | None" = None) -> int:
    parser = argparse.ArgumentParser(prog="neuron-top", description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--interval", "-d", type=float, default=1.0, help="seconds between refreshes"
    )
    parser.add_argument(
        "--batch", "-b", type=int, metavar="N", help="print N refreshes as text and exit"
    )
    args = parser.parse_args(argv)
    if args.interval <= 0:
        parser.error("--interval must be positive")
    try:
        if args.batch is not None or not sys.stdout.isatty():
            return run_batch(args.batch or 1, args.interval)
        return run_curses(args.interval)
    except KeyboardInterrupt:
        return 0


if __name__ == "__main__":
    sys.exit(main())
