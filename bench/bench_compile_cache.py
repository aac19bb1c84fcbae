"""Portable and shared compile caches, measured (issue 21, item 4).

For a model's compiled AdamW training step (tests/compile_models.py):
  1. cold: one process, empty cache directory; saves a bundle
     (torch.compiler.save_cache_artifacts);
  2. bundle: a process with another empty cache directory and another cache
     key (another machine) loads the bundle first: backend time per Dynamo
     graph (Dynamo's call_user_compiler + lazily compiled backwards + waits
     for compile threads, as bench_compile.py's "backend adds");
  3. shared: N processes start together on one empty cache directory:
     lowerings, C compiles, and our backend's time summed over them, vs one
     process on an empty directory of its own. Our compile time is the
     backend's: its CPU (main-thread part inside Dynamo's call_user_compiler,
     plus compile threads and the C compiler) and its working wall time (less
     the time spent waiting for the process that makes a shared entry).
     Dynamo's bytecode tracing (main-thread CPU in its frame compiles, less
     the backend's) is PyTorch's, per process, and reported apart.
Usage: python bench/bench_compile_cache.py [model] [N]   (N=0: skip step 3)
"""

import json
import os
import subprocess
import sys
import tempfile
import time

WORKER = r"""
import gc, json, os, sys, time
sys.path.insert(0, sys.argv[4])
import torch, torch_neuronx
import compile_models as cm
name, mode, bundle, _, start = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4], float(sys.argv[5])
if mode == "load":
    torch.compiler.load_cache_artifacts(open(bundle, "rb").read())
_, step, batch = cm.make_step(name, "neuron", True, "neuron")
# Main-thread CPU inside Dynamo's frame compiles and inside our backend (its
# call_user_compiler): Dynamo's own tracing is the difference.
import resource, threading
import torch._dynamo.convert_frame as cf
from torch._dynamo.output_graph import OutputGraph
spent = {"dynamo": 0.0, "backend": 0.0}
def timed(fn, what):
    def inner(*a, **k):
        t = time.thread_time()
        try:
            return fn(*a, **k)
        finally:
            if threading.current_thread() is threading.main_thread():
                spent[what] += time.thread_time() - t
    return inner
cf._compile = timed(cf._compile, "dynamo")
OutputGraph.call_user_compiler = timed(OutputGraph.call_user_compiler, "backend")
def cpu_now():
    own, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime, kids.ru_utime + kids.ru_stime, time.thread_time()
while time.time() < start:
    time.sleep(0.002)
from torch._dynamo.utils import compilation_time_metrics
compilation_time_metrics.clear()
torch.neuron.reset_dynamo_metrics()
c0 = cpu_now()
t = time.perf_counter()
step(*batch)
step(*batch)
torch.neuron.synchronize()
wall = time.perf_counter() - t
m = torch.neuron.get_dynamo_metrics()
c1 = cpu_now()
backend = sum(compilation_time_metrics.get("OutputGraph.call_user_compiler", []))
backend += sum(compilation_time_metrics.get("backward._backward_impl", []))
backend += m["compile_wait_seconds"]
if mode == "save":
    open(bundle, "wb").write(torch.compiler.save_cache_artifacts()[0])
own = resource.getrusage(resource.RUSAGE_SELF)
# Our backend's CPU: its main-thread part, plus everything the other threads
# (the compile threads) and the C compiler children spent in the region.
other_threads = (c1[0] - c0[0]) - (c1[2] - c0[2])
print(json.dumps({"wall": wall, "backend": backend, "m": m, "cc_cpu": c1[1] - c0[1],
                  "cpu": own.ru_utime + own.ru_stime,
                  "backend_cpu": spent["backend"] + other_threads + (c1[1] - c0[1]),
                  "dynamo_cpu": spent["dynamo"] - spent["backend"]}))
"""

TESTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests")


def run(name, mode, bundle, root, n=1):
    start = time.time() + 3.0
    procs = []
    for i in range(n):
        env = dict(
            os.environ,
            TORCH_NEURONX_NEFF_CACHE_DIR=os.path.join(root, "cache"),
            XDG_CONFIG_HOME=os.path.join(root, "config"),
        )
        env.pop("TORCH_NEURONX_NEFF_DISABLE_CACHE", None)
        procs.append(
            subprocess.Popen(
                [sys.executable, "-c", WORKER, name, mode, bundle, TESTS, str(start)],
                env=env,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
        )
    out = []
    for p in procs:
        o, e = p.communicate()
        if p.returncode != 0:
            raise SystemExit(e[-3000:])
        out.append(json.loads(o.strip().splitlines()[-1]))
    return out, time.time() - start


def main():
    name = sys.argv[1] if len(sys.argv) > 1 else "gpt2"
    n = int(sys.argv[2]) if len(sys.argv) > 2 else 4
    with tempfile.TemporaryDirectory() as tmp:
        bundle = os.path.join(tmp, "bundle.bin")
        (cold,), _ = run(name, "save", bundle, os.path.join(tmp, "a"))
        (hot,), _ = run(name, "load", bundle, os.path.join(tmp, "b"))
        graphs = max(hot["m"]["warm_graphs"], 1)
        print(
            f"{name}: cold backend {cold['backend']:.2f} s ({cold['m']['compiles']} C compiles, "
            f"{cold['m']['cc_seconds']:.2f} s in the C compiler); warm start from a loaded bundle: backend "
            f"{hot['backend']:.3f} s for {hot['m']['warm_graphs']} Dynamo graphs = {hot['backend'] / graphs:.3f} "
            f"s/graph (lowerings {hot['m']['lowerings']}, C compiles {hot['m']['compiles']})"
        )
        (disk,), _ = run(name, "plain", bundle, os.path.join(tmp, "a"))
        print(
            f"{name}: for comparison, a warm start from the cold run's own disk cache: backend "
            f"{disk['backend']:.3f} s = {disk['backend'] / max(disk['m']['warm_graphs'], 1):.3f} s/graph"
        )
        if n == 0:
            return
        one, one_wall = run(name, "plain", bundle, os.path.join(tmp, "c"))
        many, many_wall = run(name, "plain", bundle, os.path.join(tmp, "d"), n)
        o = one[0]

        def total(k, sub=None):
            return sum(r[k] if sub is None else r[k].get(sub, 0) for r in many)

        def ratio(a, b):
            return f"{a / max(b, 1e-9):.2f}x"

        # Our compile time: the backend's work (wall, less the time spent
        # waiting for another process's warm entry) and its CPU (our main-
        # thread part, compile threads, C compiler); Dynamo's tracing (each
        # process traces its own bytecode: PyTorch's, per process) apart.
        work1 = o["backend"] - o["m"].get("warm_lock_seconds", 0)
        workn = total("backend") - total("m", "warm_lock_seconds")
        print(
            f"{name}: 1 process on a cold cache: {o['m']['lowerings']} lowerings, {o['m']['compiles']} C "
            f"compiles, C compiler {o['m']['cc_seconds']:.2f} s wall / {o['cc_cpu']:.2f} s CPU; backend "
            f"{o['backend']:.2f} s wall ({work1:.2f} s working), {o['backend_cpu']:.2f} s CPU; Dynamo "
            f"tracing {o['dynamo_cpu']:.2f} s CPU; process CPU {o['cpu']:.2f} s; wall {one_wall:.2f} s"
        )
        for i, r in enumerate(many):
            print(
                f"{name}:   process {i}: lowerings {r['m']['lowerings']}, loaded {r['m']['warm_graphs']}, "
                f"backend {r['backend']:.2f} s wall (lock wait {r['m'].get('warm_lock_seconds', 0):.2f} s), "
                f"{r['backend_cpu']:.2f} s CPU; Dynamo tracing {r['dynamo_cpu']:.2f} s CPU"
            )
        print(
            f"{name}: {n} processes sharing a cold cache: {total('m', 'lowerings')} lowerings "
            f"({ratio(total('m', 'lowerings'), o['m']['lowerings'])}), {total('m', 'compiles')} C compiles "
            f"({ratio(total('m', 'compiles'), o['m']['compiles'])}), {total('m', 'warm_graphs')} graphs "
            f"loaded; C compiler {total('m', 'cc_seconds'):.2f} s wall / {total('cc_cpu'):.2f} s CPU "
            f"({ratio(total('cc_cpu'), o['cc_cpu'])}); backend CPU {total('backend_cpu'):.2f} s "
            f"({ratio(total('backend_cpu'), o['backend_cpu'])}); backend working {workn:.2f} s "
            f"({ratio(workn, work1)}), waiting for the lock holder {total('m', 'warm_lock_seconds'):.2f} s, "
            f"backend wall {total('backend'):.2f} s ({ratio(total('backend'), o['backend'])}); Dynamo "
            f"tracing {total('dynamo_cpu'):.2f} s CPU ({ratio(total('dynamo_cpu'), o['dynamo_cpu'])}); "
            f"process CPU {total('cpu'):.2f} s ({ratio(total('cpu'), o['cpu'])}); wall {many_wall:.2f} s "
            f"({ratio(many_wall, one_wall)})"
        )


if __name__ == "__main__":
    main()
