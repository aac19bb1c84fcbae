"""Fuzz worker: one process, fed units on stdin, one JSON object per line:
  {"op": name, "variant": v, "dtype": "float32", "seed": s, "samples": n,
   "start": i, "kinds": [patterns] or null}
For each case from index `start` on it writes {"start": i, "id": ...} before
running it, {"phase": "cpu"} and {"phase": "neuron"} before each side, and
{"result": i, "cls": ..., "detail": ...} after, then
{"done": unit, "cases": n}. With "stop" only cases [start, stop) run; with
"cpu_only" only their CPU side (the driver's probe of a crash). A case that kills the process leaves its "start"
line as the last word: the driver records it as a crash and resumes the unit
after it in a fresh worker.
"""

import fnmatch
import json
import os
import signal
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import torch  # noqa: E402
import torch_neuronx  # noqa: E402,F401
from torch.testing._internal.common_methods_invocations import op_db  # noqa: E402

from fuzz.cases import classify, run_on, unit_cases  # noqa: E402

# Test hook (tests/fuzz/test_fuzz.py): the cases whose id matches this
# pattern kill the worker, as a crashing kernel would.
CRASH_AT = os.environ.get("OPENNEURON_FUZZ_CRASH_AT")
OPS = {(op.name, op.variant_test_name): op for op in op_db}


# The messages go to a private copy of stdout; fd 1 itself goes to stderr,
# so an op that prints (from Python or C) cannot corrupt the channel.
CHANNEL = os.fdopen(os.dup(1), "w")
os.dup2(2, 1)
sys.stdout = sys.stderr


def emit(obj):
    CHANNEL.write(json.dumps(obj) + "\n")
    CHANNEL.flush()


def main():
    emit({"ready": os.getpid()})
    for line in sys.stdin:
        spec = json.loads(line)
        op = OPS[(spec["op"], spec["variant"])]
        dtype = getattr(torch, spec["dtype"])
        try:
            unit, cases = unit_cases(op, dtype, spec["seed"], spec["samples"], spec.get("kinds"))
        except Exception as e:  # noqa: BLE001 - the OpInfo cannot build this unit's cases
            emit({"done": spec["op"], "cases": 0, "error": f"{type(e).__name__}: {e}"[:300]})
            continue
        for case in cases[spec.get("start", 0) : spec.get("stop")]:
            emit({"start": case.index, "id": case.id})
            if CRASH_AT and fnmatch.fnmatch(case.id, CRASH_AT):
                os.kill(os.getpid(), signal.SIGSEGV)  # the driver's own test
            if spec.get("cpu_only"):  # the driver's probe of a crash
                kind, _ = run_on(case, "cpu")
                emit({"result": case.index, "id": case.id, "cls": "cpu_only", "detail": kind})
                continue
            cls, detail = classify(op.name, case, lambda p: emit({"phase": p}))
            emit({"result": case.index, "id": case.id, "cls": cls, "detail": detail})
        emit({"done": unit, "cases": len(cases)})


if __name__ == "__main__":
    main()
