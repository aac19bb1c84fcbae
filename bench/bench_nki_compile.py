"""A small model with an NKI RMSNorm (tests/nki/kernels_rmsnorm.py) under
torch.compile(backend="neuron"): step time with the kernel call as an extern
step of the compiled program (lower_nki.py) against the same graph with the
call as a host step (the op's lowering removed: how it ran before), side by
side in one process, alternating, several repeats. Prints min and median
wall time and process CPU time per step, forward (inference) and a training
step (forward + backward).

    PYTHONPATH=. python bench/bench_nki_compile.py [rows] [dim] [iters] [repeats]
"""

import os
import statistics
import sys
import time
import types

os.environ["TORCH_NEURONX_NEFF_DISABLE_CACHE"] = "1"  # each variant compiles its own graph

import torch  # noqa: E402
import torch._dynamo  # noqa: E402

import torch_neuronx  # noqa: E402, F401
from torch_neuronx._compile import jobs as J  # noqa: E402
from torch_neuronx._compile import metrics  # noqa: E402
from torch_neuronx._compile.lower_core import LOWERINGS  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests", "nki"))
from kernels_rmsnorm import Net  # noqa: E402


def build(extern, train, rows, dim):
    target = torch.ops.nkicompile.rmsnorm.default
    saved = LOWERINGS.get(target)
    if not extern:
        LOWERINGS.pop(target, None)
    J._memory_cache.clear()
    metrics.reset_dynamo_metrics()
    torch.manual_seed(0)
    net = Net(dim).to("neuron")
    x = torch.randn(rows, dim).to("neuron")

    def fwd(x):
        with torch.no_grad():
            return net(x)

    def step(x):
        loss = net(x).square().mean()
        loss.backward()
        return loss.detach()

    fn = step if train else fwd
    # A code object of its own per variant: Dynamo caches compiled frames by
    # code object, and would run the other variant's graph.
    fn = types.FunctionType(
        fn.__code__.replace(co_name=f"{fn.__name__}_{'extern' if extern else 'host'}"),
        fn.__globals__,
        closure=fn.__closure__,
    )
    f = torch.compile(fn, backend="neuron")
    f(x)
    torch.neuron.synchronize()
    m = metrics.get_dynamo_metrics()
    if saved is not None:
        LOWERINGS[target] = saved
    return f, x, m["host_steps"], m["extern_kernels"]


def timed(f, x, iters):
    torch.neuron.synchronize()
    w, c = time.perf_counter(), time.process_time()
    for _ in range(iters):
        f(x)
    torch.neuron.synchronize()
    return (time.perf_counter() - w) / iters, (time.process_time() - c) / iters


def main():
    rows = int(sys.argv[1]) if len(sys.argv) > 1 else 256
    dim = int(sys.argv[2]) if len(sys.argv) > 2 else 256
    iters = int(sys.argv[3]) if len(sys.argv) > 3 else 50
    repeats = int(sys.argv[4]) if len(sys.argv) > 4 else 7
    for train in (False, True):
        variants = {"extern": build(True, train, rows, dim), "host": build(False, train, rows, dim)}
        res = {k: ([], []) for k in variants}
        for _ in range(repeats):
            for k, (f, x, _h, _e) in variants.items():
                w, c = timed(f, x, iters)
                res[k][0].append(w)
                res[k][1].append(c)
        what = "train step" if train else "forward"
        for k, (f, x, h, e) in variants.items():
            w, c = res[k]
            print(
                f"{what:10s} {rows}x{dim} {k:6s} host_steps={h} extern_kernels={e}: "
                f"wall min {min(w) * 1e6:8.1f} us median {statistics.median(w) * 1e6:8.1f} us, "
                f"cpu min {min(c) * 1e6:8.1f} us median {statistics.median(c) * 1e6:8.1f} us"
            )
        we, wh = statistics.median(res["extern"][0]), statistics.median(res["host"][0])
        print(f"{what:10s} host/extern median wall ratio: {wh / we:.2f}")


if __name__ == "__main__":
    main()
