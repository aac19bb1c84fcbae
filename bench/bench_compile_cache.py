"""Portable and shared compile caches, measured (issue 21, item 4).

For a model's compiled AdamW training step (tests/compile_models.py):
  1. cold: one process, empty cache directory; saves a bundle
     (torch.compiler.save_cache_artifacts);
  2. bundle: a process with another empty cache directory and another cache
     key (another machine) loads the bundle first: backend time per Dynamo
     graph (Dynamo's call_user_compiler + lazily compiled backwards + waits
     for compile threads, as bench_compile.py's "backend adds");
  3. shared: N processes start together on one empty cache directory:
     C compiles and C compiler seconds summed over them, vs one process on an
     empty directory of its own.
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
while time.time() < start:
    time.sleep(0.002)
from torch._dynamo.utils import compilation_time_metrics
compilation_time_metrics.clear()
torch.neuron.reset_dynamo_metrics()
t = time.perf_counter()
step(*batch)
step(*batch)
torch.neuron.synchronize()
wall = time.perf_counter() - t
m = torch.neuron.get_dynamo_metrics()
backend = sum(compilation_time_metrics.get("OutputGraph.call_user_compiler", []))
backend += sum(compilation_time_metrics.get("backward._backward_impl", []))
backend += m["compile_wait_seconds"]
if mode == "save":
    open(bundle, "wb").write(torch.compiler.save_cache_artifacts()[0])
import resource
cpu = resource.getrusage(resource.RUSAGE_CHILDREN)  # the C compiler runs (children we waited for)
own = resource.getrusage(resource.RUSAGE_SELF)
print(json.dumps({"wall": wall, "backend": backend, "m": m, "cc_cpu": cpu.ru_utime + cpu.ru_stime,
                  "cpu": own.ru_utime + own.ru_stime}))
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
        cc1, ccn = one[0]["m"]["cc_seconds"], sum(r["m"]["cc_seconds"] for r in many)
        k1, kn = one[0]["m"]["compiles"], sum(r["m"]["compiles"] for r in many)
        cpu1, cpun = one[0]["cc_cpu"], sum(r["cc_cpu"] for r in many)
        py1, pyn = one[0]["cpu"], sum(r["cpu"] for r in many)
        print(
            f"{name}: 1 process on a cold cache: {k1} C compiles, C compiler {cc1:.2f} s wall / {cpu1:.2f} s CPU, "
            f"process CPU {py1:.2f} s, backend {one[0]['backend']:.2f} s, wall {one_wall:.2f} s"
        )
        print(
            f"{name}: {n} processes sharing a cold cache: {kn} C compiles ({kn / max(k1, 1):.2f}x), C compiler "
            f"{ccn:.2f} s wall ({ccn / cc1:.2f}x) / {cpun:.2f} s CPU ({cpun / max(cpu1, 1e-9):.2f}x), process CPU "
            f"{pyn:.2f} s ({pyn / py1:.2f}x), backend {sum(r['backend'] for r in many):.2f} s summed "
            f"({sum(r['backend'] for r in many) / one[0]['backend']:.2f}x), wall {many_wall:.2f} s "
            f"({many_wall / one_wall:.2f}x)"
        )


if __name__ == "__main__":
    main()
