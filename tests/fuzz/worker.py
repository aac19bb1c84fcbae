"""Fuzz worker: one process, fed units on stdin, one JSON object per line:
  {"op": name, "variant": v, "dtype": "float32", "seed": s, "samples": n,
   "start": i, "kinds": [patterns] or null}
For each case from index `start` on it writes {"start": i, "id": ...} before
running it, {"phase": "cpu"} and {"phase": "neuron"} before each side, and
{"result": i, "cls": ..., "detail": ...} after, then
{"done": unit, "cases": n}. A case that kills the process leaves its "start"
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

from fuzz.cases import classify, unit_cases  # noqa: E402

# Test hook (tests/fuzz/test_fuzz.py): the cases whose id matches this
# pattern kill the worker, as a crashing kernel would.
CRASH_AT = os.environ.get("OPENNEURON_FUZZ_CRASH_AT")
OPS = {(op.name, op.variant_test_name): op for op in op_db}


def emit(obj):
    sys.stdout.write(json.dumps(obj) + "\n")
    sys.stdout.flush()


def main():
    emit({"ready": os.getpid()})
    for line in sys.stdin:
        spec = json.loads(line)
        op = OPS[(spec["op"], spec["variant"])]
        dtype = getattr(torch, spec["dtype"])
        unit, cases = unit_cases(op, dtype, spec["seed"], spec["samples"], spec.get("kinds"))
        for case in cases[spec.get("start", 0):]:
            emit({"start": case.index, "id": case.id})
            if CRASH_AT and fnmatch.fnmatch(case.id, CRASH_AT):
                os.kill(os.getpid(), signal.SIGSEGV)  # the driver's own test
            cls, detail = classify(op.name, case, lambda p: emit({"phase": p}))
            emit({"result": case.index, "id": case.id, "cls": cls, "detail": detail})
        emit({"done": unit, "cases": len(cases)})


if __name__ == "__main__":
    main()
