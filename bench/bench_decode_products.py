"""A decode token's products in the model's order, weights from L3: neuron vs CPU.

Each model's ("small" configs of tests/model_zoo.py: hidden 256, 4 layers)
weights are built once with the model's shapes and layouts (Llama's
nn.Linear weights (out, in) through `F.linear`; GPT-2's Conv1D weights
(in, out) through `torch.addmm` with the bias, and its tied LM head) and
called in the order a token calls them, so each weight comes from L3 as in
`generate()` (Llama ~10 MB, GPT-2 ~13 MB of weights a token, both far past
L2). Each call is timed on its own (wall clock, `perf_counter_ns`); a row
is the median over rounds of the per-token sum per shape, min / median over
rounds for the token's total; neuron and CPU alternated round by round in
one process:

    TORCH_NEURONX_NUM_THREADS=2 chrt -f 1 .venv/bin/python \\
        bench/bench_decode_products.py [--rows 1,8] [--rounds 15] [--models llama,gpt2]

CPU runs at the same thread count (libtrn's pool size is read once, from the
environment, so one process per count).
"""

import argparse
import os
import statistics
import time

import torch
import torch.nn.functional as F

import torch_neuronx  # noqa: F401

LAYERS, D = 4, 256


def llama_calls(dev, rows, g):
    def w(o, i):
        return torch.randn(o, i, generator=g).to(dev) * 0.05

    inter = 2 * D + 32
    calls = []
    x = torch.randn(rows, D, generator=g).to(dev)
    xi = torch.randn(rows, inter, generator=g).to(dev)
    for _ in range(LAYERS):
        for name, o, i in (
            ("q 256->256", D, D),
            ("k 256->128", D // 2, D),
            ("v 256->128", D // 2, D),
            ("o 256->256", D, D),
            ("gate 256->544", inter, D),
            ("up 256->544", inter, D),
            ("down 544->256", D, inter),
        ):
            wt, a = w(o, i), (x if i == D else xi)
            calls.append((name, lambda a=a, wt=wt: F.linear(a, wt)))
    head = w(128, D)
    calls.append(("lm_head 256->128", lambda: F.linear(x, head)))
    return calls


def gpt2_calls(dev, rows, g):
    def w(i, o):
        return torch.randn(i, o, generator=g).to(dev) * 0.05

    calls = []
    x = torch.randn(rows, D, generator=g).to(dev)
    x4 = torch.randn(rows, 4 * D, generator=g).to(dev)
    for _ in range(LAYERS):
        for name, i, o in (
            ("c_attn 256->768", D, 3 * D),
            ("attn c_proj 256->256", D, D),
            ("c_fc 256->1024", D, 4 * D),
            ("mlp c_proj 1024->256", 4 * D, D),
        ):
            wt, b, a = w(i, o), torch.randn(o, generator=g).to(dev), (x if i == D else x4)
            calls.append((name, lambda a=a, wt=wt, b=b: torch.addmm(b, a, wt)))
    wte = torch.randn(128, D, generator=g).to(dev) * 0.05
    calls.append(("lm_head 256->128", lambda: F.linear(x, wte)))
    return calls


def token_us(calls):
    per = {}
    clock = time.perf_counter_ns
    for name, fn in calls:
        t = clock()
        fn()
        per[name] = per.get(name, 0.0) + (clock() - t) / 1e3
    return per


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--models", default="llama,gpt2")
    ap.add_argument("--rows", default="1,8")
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--tokens", type=int, default=20, help="timed tokens per round")
    ap.add_argument("--warm", type=int, default=30, help="untimed tokens before them")
    args = ap.parse_args()
    build = {"llama": llama_calls, "gpt2": gpt2_calls}
    threads = int(os.environ.get("TORCH_NEURONX_NUM_THREADS", "2"))
    torch.set_num_threads(threads)
    for model in args.models.split(","):
        for rows in map(int, args.rows.split(",")):
            sides = {
                s: build[model](s, rows, torch.Generator().manual_seed(0))
                for s in ("neuron", "cpu")
            }
            for _ in range(3):
                for c in sides.values():
                    token_us(c)
            tot = {s: [] for s in sides}
            per = {s: {} for s in sides}
            for _ in range(args.rounds):
                for s, c in sides.items():
                    # Untimed tokens first: the other side's threads (MKL's
                    # OpenMP team, libtrn's pool worker) spin for a while
                    # after its calls, on the core this side's worker needs.
                    for _ in range(args.warm):
                        token_us(c)
                    acc = {}
                    for _ in range(args.tokens):
                        for k, v in token_us(c).items():
                            acc[k] = acc.get(k, 0.0) + v / args.tokens
                    tot[s].append(sum(acc.values()))
                    for k, v in acc.items():
                        per[s].setdefault(k, []).append(v)
            print(f"{model} rows {rows} threads {threads}: us a token, neuron / CPU (min, median)")
            for k in per["neuron"]:
                n, c = statistics.median(per["neuron"][k]), statistics.median(per["cpu"][k])
                print(f"  {k:22s} {n:8.1f} / {c:8.1f}  {n / c:5.2f}")
            n, c = sorted(tot["neuron"]), sorted(tot["cpu"])
            nm, cm = statistics.median(n), statistics.median(c)
            print(
                f"  {'token':22s} {n[0]:8.1f} / {c[0]:8.1f} (min)  "
                f"{nm:8.1f} / {cm:8.1f} (med)  {nm / cm:5.2f}",
                flush=True,
            )


if __name__ == "__main__":
    main()
