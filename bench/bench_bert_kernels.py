"""BERT's non-GEMM aten ops at the model zoo's "small" BERT shapes, per call: neuron vs PyTorch
CPU (or two neuron builds, see below) alternated call-group by call-group in one process, so both
sides see the same phase of the machine (its speed moves 20-25 % over seconds to minutes).

Each round times `reps` calls of every case on each side (wall time after a synchronize);
prints min / median us per call and CPU ÷ neuron of the medians (> 1: neuron faster). Threads:
TORCH_NEURONX_NUM_THREADS / OMP_NUM_THREADS (run two threads under `chrt -f 1` on a loaded
machine, or the second thread may get no CPU; each side sleeps 20 ms after its calls, so the
other side's spinning workers do not hold the second core):

    OMP_NUM_THREADS=1 TORCH_NEURONX_NUM_THREADS=1 python bench/bench_bert_kernels.py [-k gelu]
"""

import argparse
import statistics
import time

import torch

import torch_neuronx
from torch_neuronx import eager_fusion

aten = torch.ops.aten
B, T, D, V = 8, 64, 256, 128


def cases():
    g = torch.Generator().manual_seed(0)

    def rn(*s, dtype=torch.float32):
        return torch.randn(*s, generator=g).to(dtype)

    c = {}
    for dt, tag in ((torch.float32, "f32"), (torch.bfloat16, "bf16")):
        x = rn(B, T, 4 * D, dtype=dt)
        gy = rn(B, T, 4 * D, dtype=dt)
        c[f"gelu_{tag}"] = ([x], lambda x: aten.gelu(x))
        c[f"gelu_backward_{tag}"] = ([gy, x], lambda gy, x: aten.gelu_backward(gy, x))
    x, w, b = rn(B * T, D), rn(D), rn(D)
    _, mean, rstd = aten.native_layer_norm(x, [D], w, b, 1e-12)
    gy = rn(B * T, D)
    c["layer_norm_f32"] = ([x, w, b], lambda x, w, b: aten.native_layer_norm(x, [D], w, b, 1e-12))
    c["layer_norm_backward_f32"] = (
        [gy, x, mean, rstd, w, b],
        lambda gy, x, m, r, w, b: aten.native_layer_norm_backward(
            gy, x, [D], m, r, w, b, [True, True, True]
        ),
    )
    z = rn(B * T, V)
    ls = aten._log_softmax(z, 1, False)
    gz = rn(B * T, V)
    c["log_softmax_f32"] = ([z], lambda z: aten._log_softmax(z, 1, False))
    c["log_softmax_backward_f32"] = (
        [gz, ls],
        lambda g, o: aten._log_softmax_backward_data(g, o, 1, torch.float32),
    )
    return c


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("-k", default="")
    ap.add_argument("--rounds", type=int, default=9)
    ap.add_argument("--reps", type=int, default=20)
    args = ap.parse_args()
    eager_fusion.set_enabled(False)  # per-op times: no deferred (dropped) chains
    sync = {"neuron": torch.neuron.synchronize, "cpu": lambda: None}
    print(f"{torch_neuronx.__file__} cpu threads {torch.get_num_threads()}")
    for name, (ins, fn) in cases().items():
        if args.k and args.k not in name:
            continue
        sides = {"neuron": [t.to("neuron") for t in ins], "cpu": ins}
        times = {s: [] for s in sides}
        for s, a in sides.items():
            for _ in range(3):
                fn(*a)
            sync[s]()
        for _ in range(args.rounds):
            for s, a in sides.items():
                t0 = time.perf_counter()
                for _ in range(args.reps):
                    fn(*a)
                sync[s]()
                times[s].append((time.perf_counter() - t0) / args.reps * 1e6)
                # Let the side's spinning workers (OpenMP's, the pool's) go to sleep
                # before the other side runs: under chrt they would hold the core.
                time.sleep(0.02)
        mn, mc = statistics.median(times["neuron"]), statistics.median(times["cpu"])
        print(
            f"{name:28s} neuron {min(times['neuron']):8.1f} / {mn:8.1f}  "
            f"cpu {min(times['cpu']):8.1f} / {mc:8.1f}  cpu/neuron {mc / mn:5.2f}"
        )


if __name__ == "__main__":
    main()
