"""Every float32 GEMM of a training step as a fraction of this core's FMA peak.

Records the mm/addmm/bmm/baddbmm calls of one AdamW step (bench_models'
step, model_zoo "small" configs) with bench_gemm_shapes' recorder, then times
each distinct call alone on neuron and on PyTorch CPU (MKL), alternated in
rounds, min per call. Prints per call: orientation (A and B normal or
transposed), m x n x k, calls per step, G multiply-adds per CPU-second of each
side, % of the peak given with --peak (a register-only FMA loop: 12
independent zmm chains; 58.4 G/s on the session-25 EPYC), and the call's
share of neuron's GEMM time per step (its weight).

Process CPU time: with several threads it counts every thread (and oneDNN /
OpenMP spinning), so "G/s per CPU-second" is the efficiency measure; the
wall column is the latency.

    OMP_NUM_THREADS=1 TORCH_NEURONX_NUM_THREADS=1 \\
        .venv/bin/python bench/bench_gemm_peak.py --models gpt2,llama,bert
"""

import argparse
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests"))
sys.path.insert(0, os.path.dirname(__file__))

import torch  # noqa: E402

import torch_neuronx  # noqa: E402,F401
from bench_gemm_inmodel import macs_of, make_fn  # noqa: E402
from bench_gemm_shapes import Recorder  # noqa: E402
from bench_models import paired_steps  # noqa: E402


def orient(key):
    """'nn' / 'nt' / 'tn' ...: whether A's and B's last dim is the strided one."""
    op, tens, _, _ = key
    a, b = (tens[1], tens[2]) if op in ("addmm", "baddbmm") else (tens[0], tens[1])
    return "".join("t" if st[-1] != 1 and s[-1] > 1 else "n" for s, st in (a, b))


def dims(key):
    op, tens, _, _ = key
    a, b = (tens[1], tens[2]) if op in ("addmm", "baddbmm") else (tens[0], tens[1])
    batch = a[0][0] if len(a[0]) == 3 else 1
    return batch, a[0][-2], b[0][-1], a[0][-1]


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default="gpt2,llama,bert")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--secs", type=float, default=0.05, help="per timed loop")
    ap.add_argument("--peak", type=float, default=58.4, help="G FMA per CPU-second")
    args = ap.parse_args()
    threads = torch.get_num_threads()
    for name in args.models.split(","):
        steps, sync = paired_steps(name)
        steps["neuron"]()
        rec = Recorder()
        with rec:
            steps["cpu"]()
        keys = [k for k in rec.calls if k[3] == torch.float32]
        g = torch.Generator().manual_seed(1)
        fns = {dev: {k: make_fn(k, dev, g) for k in keys} for dev in ("neuron", "cpu")}
        best = {dev: {k: (float("inf"), float("inf")) for k in keys} for dev in fns}
        for _ in range(args.rounds):
            for k in keys:
                for dev in ("neuron", "cpu"):
                    fn = fns[dev][k]
                    fn()
                    sync[dev]()
                    reps = max(2, int(args.secs * 40e9 / max(macs_of(k), 1)))
                    t0, c0 = time.perf_counter(), time.process_time()
                    for _ in range(reps):
                        fn()
                    sync[dev]()
                    w = (time.perf_counter() - t0) / reps
                    c = (time.process_time() - c0) / reps
                    ow, oc = best[dev][k]
                    best[dev][k] = (min(ow, w), min(oc, c))
        tot = {dev: sum(best[dev][k][1] * rec.calls[k] for k in keys) for dev in fns}
        macs = sum(macs_of(k) * rec.calls[k] for k in keys)
        print(
            f"\n{name} f32, {threads} thread(s), {len(keys)} distinct products, min of {args.rounds}"
        )
        print(
            f"{'op':7s} {'or':2s} {'batch x m x n x k':20s} {'#':>2s} "
            f"{'neu G/s':>8s} {'cpu G/s':>8s} {'neu %pk':>7s} {'cpu %pk':>7s} "
            f"{'neu/cpu':>7s} {'wall neu/cpu us':>16s} {'weight':>6s}"
        )
        rows = sorted(keys, key=lambda k: -best["neuron"][k][1] * rec.calls[k])
        for k in rows:
            b, m, n, kk = dims(k)
            mac = macs_of(k)
            rn, rc = mac / best["neuron"][k][1] / 1e9, mac / best["cpu"][k][1] / 1e9
            wn, wc = best["neuron"][k][0] * 1e6, best["cpu"][k][0] * 1e6
            wt = best["neuron"][k][1] * rec.calls[k] / tot["neuron"]
            bias = "+b" if k[0] in ("addmm", "baddbmm") else ""
            print(
                f"{k[0] + bias:7s} {orient(k):2s} {f'{b}x{m}x{n}x{kk}':20s} {rec.calls[k]:2d} "
                f"{rn:8.1f} {rc:8.1f} {100 * rn / args.peak:6.0f}% {100 * rc / args.peak:6.0f}% "
                f"{rn / rc:7.2f} {wn:7.0f} {wc:7.0f}  {100 * wt:5.1f}%"
            )
        rn, rc = macs / tot["neuron"] / 1e9, macs / tot["cpu"] / 1e9
        print(
            f"step total: {tot['neuron'] * 1e3:.1f} / {tot['cpu'] * 1e3:.1f} CPU-ms, "
            f"{rn:.1f} / {rc:.1f} G/s = {100 * rn / args.peak:.0f}% / {100 * rc / args.peak:.0f}% "
            f"of peak (neuron / cpu, time-weighted)"
        )


if __name__ == "__main__":
    main()
