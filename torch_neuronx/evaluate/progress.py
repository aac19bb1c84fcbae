"""The progress display on stderr: which phase runs and its step count."""

from __future__ import annotations

import sys
import time

_NAMES = {
    "eager": "eager on neuron (fallbacks, op time, fidelity)",
    "shadow": "shadow numerics (each op re-run on CPU and float64)",
    "cpu": "CPU reference (loss curve)",
    "compile": "torch.compile(backend='neuron'), cold cache",
    "warm": "torch.compile, warm start",
}


class Progress:
    def __init__(self, stream=None):
        self.stream = stream or sys.stderr
        self.tty = hasattr(self.stream, "isatty") and self.stream.isatty()
        self.n = 0
        self.t0 = time.perf_counter()

    def phase(self, name: str, total: int):
        self.n += 1
        self._line(f"[neuron-evaluate] phase {self.n}/{total}: {_NAMES.get(name, name)}", end=True)

    def step(self, name: str, i: int, total: int):
        if self.tty:
            self._line(
                f"[neuron-evaluate]   {name}: step {i}/{total} ({time.perf_counter() - self.t0:.1f} s)",
                end=False,
            )

    def _line(self, text, end):
        if self.tty:
            self.stream.write("\r\033[K" + text + ("\n" if end else ""))
        else:
            self.stream.write(text + "\n")
        self.stream.flush()
