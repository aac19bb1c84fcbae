"""Greedy generate() tokens/s: CPU, this checkout's build and a baseline's, one process each.

bench_models.py --generate runs every side in one process (one build); this
runs PyTorch CPU, neuron from this checkout and, with --baseline TREE,
neuron from TREE's build as three child processes, each holding its own
copy of a zoo model ("small" configs, same seed), and times whole greedy
`generate()` calls (batch 1, --tokens new tokens, wall clock) in turns:
each round asks every side for --calls calls, the side order rotating round
by round so no side always follows the same one (the threads a side leaves
spinning - MKL's OpenMP team, libtrn's pool worker - land on the next). The
first call of a turn is untimed for the same reason. Prints tokens/s (min /
median over all timed calls) and the ratios of the medians to CPU's:

    chrt -f 1 .venv/bin/python bench/bench_generate_ab.py --baseline ../main \\
        [--models gpt2,llama] [--rounds 5] [--calls 2] [--threads 2]
"""

import argparse
import os
import statistics
import subprocess
import sys
import time

HERE = os.path.abspath(__file__)


def serve(side):
    """Child: answers "model calls" lines with the calls' times."""
    import torch

    if side == "neuron":
        import torch_neuronx  # noqa: F401

    sys.path.insert(0, os.path.join(os.path.dirname(HERE), "..", "tests"))
    import model_zoo as zoo

    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", torch.get_num_threads())))
    runs = {}
    print("READY", flush=True)
    for line in sys.stdin:
        name, calls, tokens = line.split()
        if name not in runs:
            torch.manual_seed(0)
            model = zoo.MODELS[name]("small").eval().to(side)
            ids = torch.randint(0, zoo.VOCAB, (1, 8), generator=torch.Generator().manual_seed(0))
            ids, mask = ids.to(side), torch.ones_like(ids).to(side)

            def run(model=model, ids=ids, mask=mask, tokens=int(tokens)):
                with torch.no_grad():
                    out = model.generate(
                        ids,
                        attention_mask=mask,
                        max_new_tokens=tokens,
                        min_new_tokens=tokens,
                        do_sample=False,
                        pad_token_id=0,
                    )
                return out.cpu()

            runs[name] = run
            for _ in range(2):
                run()
            if side == "neuron":
                torch_neuronx.eager_fusion.wait_for_compiles()
        runs[name]()  # untimed: the previous side's spinning threads
        times = []
        for _ in range(int(calls)):
            t = time.perf_counter()
            runs[name]()
            times.append(time.perf_counter() - t)
        print("TIMES " + " ".join(f"{x:.6f}" for x in times), flush=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--models", default="gpt2,llama")
    ap.add_argument("--baseline", help="also neuron from this checkout's build")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--calls", type=int, default=2, help="timed calls per side per round")
    ap.add_argument("--tokens", type=int, default=32)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--serve", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.serve:
        serve(args.serve)
        return
    t = str(args.threads)
    env = dict(os.environ, OMP_NUM_THREADS=t, TORCH_NEURONX_NUM_THREADS=t)
    mine = os.path.dirname(os.path.dirname(HERE))
    sides = {"neuron": (mine, "neuron"), "cpu": (mine, "cpu")}
    if args.baseline:
        sides = {"base": (os.path.abspath(args.baseline), "neuron"), **sides}
    procs = {}
    for key, (tree, side) in sides.items():
        e = dict(env, PYTHONPATH=tree)
        if tree != mine:
            e["PYTHONDONTWRITEBYTECODE"] = "1"  # leave the baseline's tree as it is
        procs[key] = subprocess.Popen(
            [sys.executable, HERE, "--serve", side],
            env=e,
            cwd=tree,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
    for p in procs.values():
        while p.stdout.readline().strip() != "READY":
            if p.poll() is not None:
                raise RuntimeError("a child failed to start")
    print(
        f"greedy generate(), {args.tokens} new tokens, batch 1, small configs, {t} threads a "
        f"side, {args.rounds} rounds x {args.calls} calls; load {os.getloadavg()[0]:.1f}"
    )
    keys = list(sides)
    print(f"{'model':6s} " + " ".join(f"{k + ' tok/s min/med':>22s}" for k in keys) + "  ÷ CPU")
    for name in args.models.split(","):
        times = {k: [] for k in keys}
        for r in range(args.rounds):
            for key in keys[r % len(keys) :] + keys[: r % len(keys)]:
                p = procs[key]
                p.stdin.write(f"{name} {args.calls} {args.tokens}\n")
                p.stdin.flush()
                line = p.stdout.readline()
                if not line.startswith("TIMES "):
                    raise RuntimeError(f"{key}: {line!r}")
                times[key] += [float(x) for x in line.split()[1:]]
        rate = {k: sorted(args.tokens / x for x in v) for k, v in times.items()}
        med = {k: statistics.median(v) for k, v in rate.items()}
        cells = " ".join(f"{v[0]:10.1f} / {med[k]:9.1f}" for k, v in rate.items())
        ratios = " ".join(f"{k} {med[k] / med['cpu']:.2f}" for k in keys if k != "cpu")
        print(f"{name:6s} {cells}  {ratios}", flush=True)
    for p in procs.values():
        p.stdin.close()
        p.wait()
    print(f"load after: {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
