"""float32 GEMM shapes on neuron, two builds side by side (alternated processes).

A change to the GEMM library calls (matmul.c's k blocks, row groups, pieces)
is judged against the build before it on the same shapes: this tool runs
each build (a source tree with an in-place build: its directory goes on
PYTHONPATH) in its own child process, alternating, several rounds, and
keeps per shape the minimum process CPU time per call (the machine is
shared: CPU time, not wall).

Shape sets (m x n x k, then A and B as n(ormal) or t(ransposed)):
  model: every float32 product with k > 128 of the model_zoo "small"
         GPT-2 / Llama / BERT steps (512 tokens, widths 256, 544, 768, 1024),
         forward and both backward products;
  big:   2048^3 and GPT-2-base-like wide products (n or k of 3072 / 4096).

    bench/bench_gemm_builds.py --builds /work/main,. --set big --threads 1 --rounds 3
"""

import argparse
import json
import os
import subprocess
import sys
import time

PAIRS = [(256, 768), (256, 256), (256, 1024), (1024, 256), (256, 544), (544, 256)]
BIG = [
    (2048, 2048, 2048, "nn"),
    (2048, 2048, 2048, "nt"),
    (2048, 2048, 2048, "tn"),
    (512, 3072, 768, "nt"),
    (512, 768, 3072, "nn"),
    (512, 768, 3072, "nt"),
    (768, 3072, 512, "tn"),
    (3072, 768, 512, "tn"),
    (1024, 4096, 1024, "nt"),
    (1024, 1024, 4096, "nt"),
    (4096, 1024, 1024, "tn"),
]


def shapes(which):
    if which == "big":
        return BIG
    out = set()
    for i, o in PAIRS:
        # y = x W^T (nt), y = x W (nn); dx both ways; dW = X^T dY (tn).
        out |= {(512, o, i, "nt"), (512, o, i, "nn"), (512, i, o, "nn"), (512, i, o, "nt")}
        out.add((o, i, 512, "tn"))
    return sorted(out)


def child(which, threads, rounds):
    import torch
    import torch_neuronx  # noqa: F401

    torch.set_num_threads(threads)
    res = {}
    for m, n, k, t in shapes(which):
        a = torch.randn(k, m).to("neuron").t() if t[0] == "t" else torch.randn(m, k).to("neuron")
        b = torch.randn(n, k).to("neuron").t() if t[1] == "t" else torch.randn(k, n).to("neuron")
        torch.mm(a, b).cpu()
        # Several threads: Linux updates the other threads' share of the
        # process CPU time at scheduler ticks only, so each timed loop runs
        # about 0.5 s (at 1 thread, a few ms).
        reps = max(2, int((3e8 if threads == 1 else 2.5e10) / (m * n * k)))
        best = float("inf")
        for _ in range(rounds if threads == 1 else 3):
            c0 = time.process_time()
            for _ in range(reps):
                c = torch.mm(a, b)
            c.cpu()
            best = min(best, (time.process_time() - c0) / reps)
        res[f"{m}x{n}x{k} {t}"] = best
    print(json.dumps(res))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--builds", help="two source trees, comma-separated (A,B)")
    ap.add_argument("--set", choices=("model", "big"), default="model")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--rounds", type=int, default=3, help="alternated processes per build")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        child(args.set, args.threads, 5 if args.set == "model" else 3)
        return
    if not args.builds or len(args.builds.split(",")) != 2:
        ap.error("--builds takes two source trees: A,B")
    builds = [os.path.abspath(b) for b in args.builds.split(",")]
    env = dict(os.environ, OMP_NUM_THREADS=str(args.threads))
    env["TORCH_NEURONX_NUM_THREADS"] = str(args.threads)
    best = {b: {} for b in builds}
    for _ in range(args.rounds):
        for b in builds:
            cmd = [sys.executable, os.path.abspath(__file__), "--child", "--set", args.set]
            cmd += ["--threads", str(args.threads)]
            out = subprocess.run(
                cmd, env=dict(env, PYTHONPATH=b), capture_output=True, text=True, check=True
            )
            for key, v in json.loads(out.stdout.strip().splitlines()[-1]).items():
                best[b][key] = min(v, best[b].get(key, float("inf")))
    b0, b1 = builds
    print(f"{args.set} shapes, {args.threads} thread(s), min of {args.rounds} alternated rounds")
    print(f"{'shape':20s} {'A ms':>9s} {'B ms':>9s} {'A/B':>6s}   G MAC/s A / B")
    tot = [0.0, 0.0]
    for key in best[b0]:
        m, n, k = (int(x) for x in key.split()[0].split("x"))
        t0, t1 = best[b0][key], best[b1][key]
        tot[0] += t0
        tot[1] += t1
        g0, g1 = m * n * k / t0 / 1e9, m * n * k / t1 / 1e9
        print(f"{key:20s} {t0 * 1e3:9.3f} {t1 * 1e3:9.3f} {t0 / t1:6.3f}   {g0:.1f} / {g1:.1f}")
    print(f"{'total':20s} {tot[0] * 1e3:9.2f} {tot[1] * 1e3:9.2f} {tot[0] / tot[1]:6.3f}")
    print(f"A = {b0}\nB = {b1}")


if __name__ == "__main__":
    main()
