"""Entry point for workers launched by torchrun (tests/_dist_harness.py
run_torchrun): runs DIST_FN of tests/_dist_workers.py in this rank."""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _dist_workers  # noqa: E402

_dist_workers.main()
