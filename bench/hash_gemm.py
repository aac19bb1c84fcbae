"""Hash the GEMM results of a build, to check that a kernel change keeps its bits.

Runs float32 and bfloat16 mm / addmm (bias row; beta 0.5, alpha 1.5) over 14
shapes x 4 transpositions, sliced operands, bmm, baddbmm, a broadcast matmul
and a linear on neuron (seeded inputs), and prints one digest of all outputs.
With --save it writes one short hash per result; --compare lists the results
that differ between two saved files. Run each build with its source tree on
PYTHONPATH and the same thread count (the pool's split into pieces can
change the calls' sizes, and with them oneDNN's kernels):

    OMP_NUM_THREADS=1 TORCH_NEURONX_NUM_THREADS=1 PYTHONPATH=/work/main \\
        python bench/hash_gemm.py --save main.json
    ... PYTHONPATH=. python bench/hash_gemm.py --save new.json
    python bench/hash_gemm.py --compare main.json new.json
"""

import argparse
import hashlib
import itertools
import json

SHAPES = [
    (9, 17, 129),
    (64, 40, 200),
    (100, 300, 257),
    (512, 256, 1024),
    (512, 1024, 256),
    (256, 768, 512),
    (33, 3072, 300),
    (700, 96, 1000),
    (1024, 2048, 640),
    (300, 4096, 384),
    (2048, 512, 2048),
    (16, 5000, 129),
    (1500, 1500, 129),
    (640, 3000, 1100),
]
BATCHED = [(4, 64, 64, 256), (8, 100, 50, 300), (3, 512, 256, 640), (16, 64, 256, 130)]


def results():
    import torch
    import torch.nn.functional as F

    import torch_neuronx  # noqa: F401

    gen = torch.Generator().manual_seed(0)
    dev = "neuron"

    def rnd(*shape, dtype):
        return torch.randn(*shape, generator=gen).to(dtype)

    def on_dev(t, transposed):
        # A transposed operand as PyTorch makes it: the transpose of a
        # contiguous tensor.
        return t.t().contiguous().to(dev).t() if transposed else t.to(dev)

    for dtype in (torch.float32, torch.bfloat16):
        for m, n, k in SHAPES:
            if dtype == torch.bfloat16 and m * n * k > 2e8:
                continue
            for ta, tb in itertools.product((0, 1), (0, 1)):
                a = rnd(k, m, dtype=dtype).t() if ta else rnd(m, k, dtype=dtype)
                b = rnd(n, k, dtype=dtype).t() if tb else rnd(k, n, dtype=dtype)
                ad, bd = on_dev(a, ta), on_dev(b, tb)
                key = f"{dtype} {m}x{n}x{k} {ta}{tb}"
                yield f"mm {key}", torch.mm(ad, bd)
                yield f"addmm {key}", torch.addmm(rnd(n, dtype=dtype).to(dev), ad, bd)
                c = rnd(m, n, dtype=dtype).to(dev)
                yield f"addmm_b {key}", torch.addmm(c, ad, bd, beta=0.5, alpha=1.5)
            a = rnd(m, k + 37, dtype=dtype).to(dev)[:, 5 : k + 5]
            b = rnd(k, n + 19, dtype=dtype).to(dev)[:, 3 : n + 3]
            yield f"mm_slice {dtype} {m}x{n}x{k}", torch.mm(a, b)
        for bt, m, n, k in BATCHED:
            a, b = rnd(bt, m, k, dtype=dtype).to(dev), rnd(bt, k, n, dtype=dtype).to(dev)
            key = f"{dtype} {bt} {m}x{n}x{k}"
            yield f"bmm {key}", torch.bmm(a, b)
            bt_ = rnd(bt, n, k, dtype=dtype).to(dev).transpose(1, 2)
            yield f"bmm_t {key}", torch.bmm(a, bt_)
            c = rnd(bt, m, n, dtype=dtype).to(dev)
            yield f"baddbmm {key}", torch.baddbmm(c, a, b, beta=0.7, alpha=1.3)
            yield f"matmul_bcast {key}", torch.matmul(a, rnd(k, n, dtype=dtype).to(dev))
        x = rnd(8, 64, 768, dtype=dtype).to(dev)
        w, bias = rnd(3072, 768, dtype=dtype).to(dev), rnd(3072, dtype=dtype).to(dev)
        yield f"linear {dtype}", F.linear(x, w, bias)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--save", help="write one hash per result to this JSON file")
    ap.add_argument("--compare", nargs=2, metavar=("A", "B"), help="diff two saved files")
    args = ap.parse_args()
    if args.compare:
        a, b = (json.load(open(p)) for p in args.compare)
        diff = [k for k in a if a[k] != b.get(k)]
        print(f"{len(diff)} of {len(a)} results differ")
        for k in diff:
            print(" ", k)
        return
    import torch

    whole, per = hashlib.sha256(), {}
    for name, out in results():
        out = out.detach().cpu().contiguous()
        raw = out.view(torch.int16 if out.dtype == torch.bfloat16 else torch.uint8)
        data = raw.numpy().tobytes()
        per[name] = hashlib.sha256(data).hexdigest()[:16]
        whole.update(data)
    print(whole.hexdigest(), len(per), "results")
    if args.save:
        with open(args.save, "w") as f:
            json.dump(per, f, indent=0)


if __name__ == "__main__":
    main()
