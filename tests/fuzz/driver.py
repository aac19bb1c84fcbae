"""Bad-input fuzzer driver: runs OpInfo-derived cases (tests/fuzz/cases.py) on
CPU and on neuron in a pool of worker processes and counts each class.

    python tests/fuzz/driver.py                  # the full run (make fuzz)
    python tests/fuzz/driver.py --subset         # the fixed-seed subset of make test
    python tests/fuzz/driver.py --ops 'add*' --dtypes float32 --report r.json

A worker that dies (a crash) or stops answering (a hang, CASE_TIMEOUT_S) is
replaced; its current case is classified "crash" and the unit resumes after
it, so no case can stop the run. Cases of the classes that fail the run
(neuron_returns, values_differ, crash) are matched against the table of
accepted differences in docs/fuzz.md; the exit status is 1 when any is not
accepted.
"""

import argparse
import collections
import fnmatch
import json
import os
import pathlib
import queue
import re
import select
import subprocess
import sys
import threading
import time

HERE = pathlib.Path(__file__).resolve().parent
ROOT = HERE.parent.parent
sys.path.insert(0, str(HERE.parent))

from fuzz.cases import BAD_CLASSES, CASE_TIMEOUT_S, CLASSES  # noqa: E402

DOC = ROOT / "docs" / "fuzz.md"
SEED = 26
# The subset in `make test`: the natively implemented ops (conformance's
# ops_*.py lists), float32, one sample each, every mutation.
SUBSET_DTYPES = ["float32"]
FULL_DTYPES = ["float32", "float16", "int64", "bool"]


def accepted_table(path=DOC):
    """Rows (op pattern, case pattern, class, reason) of docs/fuzz.md's table
    of accepted differences (between its 'accepted differences' heading and
    the next heading)."""
    rows, inside = [], False
    for line in path.read_text().splitlines():
        if line.startswith("#"):
            inside = "accepted differences" in line.lower()
            continue
        if not inside or not line.startswith("|"):
            continue
        cells = [c.strip().strip("`") for c in line.strip().strip("|").split("|")]
        if len(cells) < 4 or cells[0] in ("op", "") or set(cells[0]) <= {"-", ":"}:
            continue
        rows.append(tuple(cells[:4]))
    return rows


def accepted(rows, unit, kind, cls):
    """The reason a bad case is accepted, or None."""
    for op_pat, kind_pat, cls_pat, reason in rows:
        if (
            fnmatch.fnmatch(unit, op_pat)
            and fnmatch.fnmatch(kind, kind_pat)
            and fnmatch.fnmatch(cls, cls_pat)
        ):
            return reason
    return None


def native_op_names():
    """OpInfo names the conformance suite lists as native (ops_*.py OPS)."""
    import importlib.util

    names = set()
    for path in sorted((HERE.parent / "conformance").glob("ops_*.py")):
        spec = importlib.util.spec_from_file_location(path.stem, path)
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
        names |= set(mod.OPS)
    return names


def plan(subset, op_patterns, dtypes, samples):
    """Units as worker specs, in a fixed order."""
    import torch
    from torch.testing._internal.common_methods_invocations import op_db

    native = native_op_names() if subset else None
    units = []
    for op in op_db:
        if native is not None and op.name not in native:
            continue
        if op_patterns and not any(fnmatch.fnmatch(op.name, p) for p in op_patterns):
            continue
        supported = op.supported_dtypes("cpu")
        for dt in dtypes:
            if getattr(torch, dt) in supported:
                units.append(
                    {
                        "op": op.name,
                        "variant": op.variant_test_name,
                        "dtype": dt,
                        "seed": SEED,
                        "samples": samples,
                        "start": 0,
                        "kinds": None,
                    }
                )
    return units


class Worker:
    def __init__(self, env):
        self.p = subprocess.Popen(
            [sys.executable, str(HERE / "worker.py")],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
            env=env,
            cwd=str(ROOT),
            start_new_session=True,
        )
        self.buf = ""
        self.eof = False

    def send(self, spec):
        self.p.stdin.write(json.dumps(spec) + "\n")
        self.p.stdin.flush()

    def read(self, timeout):
        """The next message, or None when the worker died or timed out."""
        deadline = time.monotonic() + timeout
        while "\n" not in self.buf:
            left = deadline - time.monotonic()
            if left <= 0:
                return None
            r, _, _ = select.select([self.p.stdout], [], [], left)
            if not r:
                return None
            chunk = os.read(self.p.stdout.fileno(), 65536).decode()
            if not chunk:
                self.eof = True
                return None
            self.buf += chunk
        line, self.buf = self.buf.split("\n", 1)
        try:
            return json.loads(line)
        except json.JSONDecodeError:  # not a message (the channel is private: never expected)
            return self.read(timeout)

    def kill(self):
        try:
            os.killpg(self.p.pid, 9)
        except OSError:
            pass
        self.p.wait()

    def why_dead(self):
        rc = self.p.poll()
        if rc is None and self.eof:  # its output closed: it is exiting
            try:
                rc = self.p.wait(timeout=30)
            except subprocess.TimeoutExpired:
                rc = None
        if rc is None:
            return f"no answer within {CASE_TIMEOUT_S} s (hang)"
        return f"worker died: signal {-rc}" if rc < 0 else f"worker exited with status {rc}"


def cpu_crashes_alone(env, spec, index):
    """Whether case `index` of the unit kills a fresh worker that runs only
    its CPU side: a crash that is PyTorch CPU's own (memory corrupted by the
    CPU reference can abort later, in the neuron run)."""
    w = Worker(env)
    try:
        if w.read(300) is None:
            return False
        w.send(dict(spec, start=index, stop=index + 1, cpu_only=True))
        while True:
            msg = w.read(CASE_TIMEOUT_S)
            if msg is None:
                return True
            if "done" in msg:
                return False
    finally:
        w.kill()


def run_units(units, jobs, env, progress=None):
    """Runs every unit; returns the list of case results (dicts)."""
    todo = queue.Queue()
    for u in units:
        todo.put(dict(u))
    results, lock = [], threading.Lock()

    def loop():
        w = None
        while True:
            try:
                spec = todo.get_nowait()
            except queue.Empty:
                break
            while spec is not None:
                if w is None:
                    w = Worker(env)
                    if w.read(300) is None:  # import torch, op_db
                        raise RuntimeError("fuzz worker failed to start: " + w.why_dead())
                w.send(spec)
                current = phase = None
                while True:
                    msg = w.read(CASE_TIMEOUT_S)
                    if msg is None:
                        why = w.why_dead()
                        w.kill()
                        w = None
                        if current is None:  # died while generating the unit's cases
                            with lock:
                                results.append(
                                    {
                                        "id": f"{spec['op']}:{spec['dtype']}:unit",
                                        "cls": "crash",
                                        "detail": why,
                                    }
                                )
                            spec = None
                        else:
                            index = int(current.split("#")[1].split(":")[0])
                            side = {
                                "cpu": " in the CPU reference run",
                                "neuron": " in the neuron run",
                            }.get(phase, "")
                            if cpu_crashes_alone(env, spec, index):
                                side += "; the CPU reference alone crashes too (a PyTorch CPU bug)"
                            with lock:
                                results.append(
                                    {"id": current, "cls": "crash", "detail": why + side}
                                )
                            spec = dict(spec, start=index + 1)
                        break
                    if "start" in msg:
                        current, phase = msg["id"], None
                    elif "phase" in msg:
                        phase = msg["phase"]
                    elif "result" in msg:
                        current = None
                        with lock:
                            results.append(msg)
                    elif "done" in msg:
                        if msg.get("error"):
                            with lock:
                                results.append(
                                    {
                                        "id": f"{spec['op']}:{spec['dtype']}:unit",
                                        "cls": "no_cases",
                                        "detail": msg["error"],
                                    }
                                )
                        spec = None
                        if progress:
                            progress(msg)
                        break
        if w is not None:
            w.p.stdin.close()
            w.kill()

    threads = [threading.Thread(target=loop) for _ in range(jobs)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return results


def summarize(results, rows):
    counts = collections.Counter(r["cls"] for r in results)
    failing, accepted_n, used = [], collections.Counter(), set()
    for r in results:
        if r["cls"] not in BAD_CLASSES:
            continue
        unit, _, rest = r["id"].partition("#")
        kind = rest.split(":", 1)[1] if ":" in rest else rest
        reason = accepted(rows, unit, kind, r["cls"])
        if reason is None:
            failing.append(r)
        else:
            accepted_n[r["cls"]] += 1
            used.add(reason)
    type_mismatch = sum(1 for r in results if r["cls"] == "both_raise" and r.get("detail"))
    return counts, accepted_n, failing, type_mismatch


def worker_env(protect, asan=None):
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    env["OMP_NUM_THREADS"] = "1"
    if protect:
        env["TORCH_NEURONX_DEBUG_PROTECT_MEMORY"] = "1"
    if asan:
        # The ASan runtime first, then the instrumented libtrn: the
        # extension's libtrn.so dependency resolves to the preloaded one (same
        # soname). abort_on_error: a finding kills the worker, so its case is
        # a crash; the report itself goes to a file per process.
        lib, logs = asan
        runtime = subprocess.run(
            ["gcc", "-print-file-name=libasan.so"], capture_output=True, text=True, check=True
        ).stdout.strip()
        env["LD_PRELOAD"] = f"{runtime} {lib}"
        env["ASAN_OPTIONS"] = f"detect_leaks=0:abort_on_error=1:log_path={logs}/asan"
        env["UBSAN_OPTIONS"] = f"print_stacktrace=1:log_path={logs}/ubsan"
    return env


def asan_findings(logs):
    """ASan/UBSan reports that involve OpenNeuron: an access to poisoned
    device memory (only libtrn poisons), or a frame in libtrn or the
    extension. Reports of PyTorch's CPU kernels alone (the CPU side's known
    crashes, accepted in the table) are not ours."""
    found = []
    for f in sorted(pathlib.Path(logs).glob("*san.*")):
        text = f.read_text(errors="replace")
        if "use-after-poison" in text or "libtrn" in text or "torch_neuronx" in text:
            found.append((f.name, text))
    return found


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--subset", action="store_true", help="the fixed-seed subset of make test")
    ap.add_argument("--ops", nargs="*", help="OpInfo name patterns (fnmatch)")
    ap.add_argument("--dtypes", nargs="*", help="dtype names (default: by mode)")
    ap.add_argument("--samples", type=int, help="samples per unit (default: 1 subset, 2 full)")
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 2)
    ap.add_argument(
        "--protect",
        action="store_true",
        help="workers run with TORCH_NEURONX_DEBUG_PROTECT_MEMORY=1",
    )
    ap.add_argument(
        "--asan",
        metavar="LIBTRN",
        help="workers preload this ASan-instrumented libtrn.so (make fuzz-asan); "
        "its reports (build/fuzz-asan/) that involve OpenNeuron fail the run",
    )
    ap.add_argument("--report", help="write every case's result here (JSON)")
    ap.add_argument("--show", type=int, default=50, help="failing cases to print")
    a = ap.parse_args(argv)
    dtypes = a.dtypes or (SUBSET_DTYPES if a.subset else FULL_DTYPES)
    samples = a.samples or (1 if a.subset else 2)
    t0 = time.monotonic()
    units = plan(a.subset, a.ops, dtypes, samples)
    done = [0]

    def progress(msg):
        done[0] += 1
        if done[0] % 50 == 0:
            print(f"  {done[0]}/{len(units)} units, {time.monotonic() - t0:.0f} s", flush=True)

    asan = None
    if a.asan:
        logs = ROOT / "build" / "fuzz-asan"
        logs.mkdir(parents=True, exist_ok=True)
        for f in logs.glob("*san.*"):
            f.unlink()
        asan = (str(pathlib.Path(a.asan).resolve()), str(logs))
    results = run_units(units, a.jobs, worker_env(a.protect, asan), progress)
    rows = accepted_table()
    counts, acc, failing, mismatch = summarize(results, rows)
    print(f"{len(results)} cases in {len(units)} units, {time.monotonic() - t0:.0f} s")
    for c in CLASSES:
        extra = f" ({acc[c]} accepted in docs/fuzz.md)" if acc[c] else ""
        print(f"  {c:15s} {counts[c]}{extra}")
    print(f"  (both_raise with different exception types: {mismatch})")
    if counts["no_cases"]:
        print(f"  ({counts['no_cases']} units whose OpInfo could not build cases: no_cases)")
    for r in failing[: a.show]:
        print(f"FAIL {r['cls']:14s} {r['id']}: {r.get('detail', '')}")
    if len(failing) > a.show:
        print(f"... {len(failing) - a.show} more")
    if a.report:
        pathlib.Path(a.report).write_text(
            json.dumps({"counts": counts, "accepted": acc, "results": results}, indent=1)
        )
    findings = asan_findings(asan[1]) if asan else []
    for name, text in findings[: a.show]:
        print(f"ASAN {name}:\n" + "\n".join(text.splitlines()[:25]))
    if asan:
        print(f"  sanitizer reports involving OpenNeuron: {len(findings)}")
    return 1 if failing or findings else 0


if __name__ == "__main__":
    sys.exit(main())
