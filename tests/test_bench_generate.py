"""bench/bench_models.py --generate: fusion on and off in their own processes.

Until session 40 the bench toggled Adaptive Eager with set_enabled() inside one
process that also ran the CPU side, in a rotation that always put "on" right
after the CPU: it read fusion on 8-16 % slower than off, a cost of that
position (docs/performance.md, gen40). Each side now runs in its own process,
as a user runs generate(). These check the mechanics, never a timing: the
"off" process really has fusion off and the "on" one on (the bench refuses a
side that is not), and both generate the same tokens (the bench raises if not).
"""

import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BENCH = os.path.join(ROOT, "bench", "bench_models.py")
ARGS = ["--generate", "--size", "tiny", "--models", "gpt2", "--rounds", "2", "--calls", "1"]


def _run(**env):
    return subprocess.run(
        [sys.executable, BENCH, *ARGS, "--tokens", "4"],
        env=dict(os.environ, OMP_NUM_THREADS="1", TORCH_NEURONX_NUM_THREADS="1", **env),
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_generate_bench_sides_in_own_processes():
    r = _run()
    assert r.returncode == 0, r.stderr[-3000:]
    rows = [line for line in r.stdout.splitlines() if line.startswith("gpt2 ")]
    assert len(rows) == 1, r.stdout
    assert "own processes" in r.stdout


def test_generate_bench_refuses_an_on_side_without_fusion():
    # Fusion switched off for every child: the "on" side would time fusion off.
    r = _run(TORCH_NEURONX_EAGER_FUSION="0")
    assert r.returncode != 0
    assert "--generate side on: fusion is off" in r.stderr
