"""Side-by-side timing for the benchmarks whose rows compare two or more
ways of doing one thing (bench_moe.py, bench_flex_attention.py): every side
of a row is timed in the same rounds, alternating, so they see the same
load on a shared machine."""

import pathlib
import sys
import time

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from bench_ops import SYNC  # noqa: E402

ROUNDS = 5


def alternated(fns, min_s=0.05):
    """Best per-call wall seconds of each of ``fns`` ({name: (fn, device)}),
    timed in ROUNDS rounds that alternate between them, so every side of a
    row sees the same load (the machine is shared: timing one side after
    the other once moved a row 3x between runs). Each round times a loop of
    calls lasting at least ``min_s``, after one warm-up call."""
    reps = {}
    for name, (fn, dev) in fns.items():
        fn()  # warm-up (and compile)
        SYNC[dev]()
        t0, k = time.perf_counter(), 0
        while time.perf_counter() - t0 < min_s:
            fn()
            SYNC[dev]()
            k += 1
        reps[name] = max(k, 1)
    best = dict.fromkeys(fns, float("inf"))
    for _ in range(ROUNDS):
        for name, (fn, dev) in fns.items():
            t0 = time.perf_counter()
            for _ in range(reps[name]):
                fn()
            SYNC[dev]()
            best[name] = min(best[name], (time.perf_counter() - t0) / reps[name])
    return best
