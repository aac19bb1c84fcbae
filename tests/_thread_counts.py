"""Runs a snippet in fresh processes with different libtrn pool sizes: the
tests that results do not depend on how work was split over threads."""

import os
import subprocess
import sys


def outputs_at_thread_counts(code: str, counts=("1", "2", "3")) -> set:
    """The set of distinct stdouts of `python -c code` at each TORCH_NEURONX_NUM_THREADS."""
    outs = set()
    for threads in counts:
        env = dict(os.environ, TORCH_NEURONX_NUM_THREADS=threads)
        r = subprocess.run(
            [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
        )
        outs.add(r.stdout.strip())
    return outs
