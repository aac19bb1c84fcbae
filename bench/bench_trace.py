"""What Dynamo (and AOTAutograd) cost on neuron tensors vs CPU tensors, with no
backend compiler: is any of the tracing that both backends pay dearer for
our device?

usage: python bench/bench_trace.py [--calls] [model ...]   (default: all five)

Each (model, mode, backend, device) runs in a fresh process: imports and a
tiny compile on the same device first (one-time costs), then the model's
first two calls (as bench_compile.py's cold compile; the optimizer graph
compiles at the second). Backends: "dynamo" returns the graph's own forward
(Dynamo's tracing only); "aot" also runs AOTAutograd with the neuron
backend's decompositions and partitioner, its compilers returning the graphs
as they are. Prints process CPU seconds, or, with --calls, the number of
Python function calls under cProfile (deterministic: independent of load).
"""

import os
import subprocess
import sys
import time

MODELS = ["mlp", "cnn", "llama", "gpt2", "bert"]


def child(name, dev, mode, be, calls):
    import cProfile

    import torch
    import torch._dynamo

    import torch_neuronx  # noqa: F401

    sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests"))
    import compile_models as cm

    train = mode == "train"

    def dynamo_only(gm, example_inputs):
        return gm.forward

    def aot(gm, example_inputs):
        from torch._dynamo.backends.common import aot_autograd
        from torch._functorch.aot_autograd import make_boxed_func
        from torch._functorch.partitioners import min_cut_rematerialization_partition

        from torch_neuronx._compile.backend import _decompositions

        def same(g, _):
            return make_boxed_func(g.forward)

        return aot_autograd(
            fw_compiler=same,
            bw_compiler=same,
            inference_compiler=same,
            decompositions=_decompositions(),
            partition_fn=min_cut_rematerialization_partition,
            keep_inference_input_mutations=True,
        )(gm, example_inputs)

    backend = {"dynamo": dynamo_only, "aot": aot}[be]

    def tiny(x, w):
        return torch.nn.functional.gelu(x @ w).sum()

    r = torch.compile(tiny, backend=backend)(
        *[torch.randn(4, 4, device=dev, requires_grad=train) for _ in range(2)]
    )
    if train:
        r.backward()
    torch._dynamo.reset()

    _, step, batch = cm.make_step(name, dev, train, backend)
    prof = cProfile.Profile() if calls else None
    t = time.process_time()
    if prof:
        prof.enable()
    step(*batch)
    step(*batch)
    if dev == "neuron":
        torch.neuron.synchronize()
    if prof:
        prof.disable()
        import pstats

        print(f"RESULT {pstats.Stats(prof).total_calls}")
    else:
        print(f"RESULT {time.process_time() - t:.3f}")


def main():
    args = sys.argv[1:]
    calls = "--calls" in args
    names = [a for a in args if not a.startswith("--")] or MODELS
    what = "Python calls (millions)" if calls else "CPU seconds"
    print(f"| model | mode | backend | neuron | cpu | neuron/cpu |  ({what}, fresh process each)")
    print("|---|---|---|---|---|---|")
    for name in names:
        for mode in ("train", "infer"):
            for be in ("dynamo", "aot"):
                got = {}
                for dev in ("neuron", "cpu"):
                    out = subprocess.run(
                        [sys.executable, __file__, "--child", name, dev, mode, be, str(int(calls))],
                        capture_output=True,
                        text=True,
                    )
                    lines = [ln for ln in out.stdout.splitlines() if ln.startswith("RESULT ")]
                    if not lines:
                        sys.exit(f"{name} {dev} {mode} {be} failed:\n{out.stderr[-2000:]}")
                    got[dev] = float(lines[-1].split()[1]) / (1e6 if calls else 1)
                print(
                    f"| {name} | {mode} | {be} | {got['neuron']:.3f} | {got['cpu']:.3f} | "
                    f"{got['neuron'] / got['cpu']:.3f} |",
                    flush=True,
                )


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        child(sys.argv[2], sys.argv[3], sys.argv[4], sys.argv[5], sys.argv[6] == "1")
    else:
        main()
