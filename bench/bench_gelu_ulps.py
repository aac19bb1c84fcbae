"""Erf GELU float32 over every float input (or every --stride-th bit pattern):
max / mean error in float32 ulps per range of x against a float64 reference,
for libtrn's shipped form (trn/scalar.h, compiled here from the tree's
header), the candidate forms in bench/c/gelu_ulps.c and PyTorch CPU's
torch.nn.functional.gelu (and the derivatives: shipped and CPU's
gelu_backward with grad 1). Also counts bit differences of each candidate
from the shipped form.

    python bench/bench_gelu_ulps.py [--stride 1] [--workers 2]

The full run (stride 1, 2^32 inputs) takes ~5-10 min on two cores.
"""

import argparse
import ctypes
import multiprocessing as mp
import pathlib
import subprocess
import tempfile
import time

import numpy as np
import torch

ROOT = pathlib.Path(__file__).resolve().parent.parent
FORMS = ["gelu_shipped", "gelu_A", "gelu_C"]
NAMES = ["< -13", "-13..-8", "-8..-3", "-3..-0.7", "-0.7..0.7", "0.7..3", "3..8", ">= 8"]
CHUNK = 1 << 22
_lib = None


def _build(out):
    flags = "-O3 -fno-math-errno -fno-trapping-math -march=x86-64-v4 -mprefer-vector-width=512"
    subprocess.run(
        ["cc", *flags.split(), "-fPIC", "-shared", "-I", str(ROOT / "libtrn/include")]
        + [str(ROOT / "bench/c/gelu_ulps.c"), "-o", out, "-lm"],
        check=True,
    )


def _init(path):
    global _lib
    _lib = ctypes.CDLL(path)
    torch.set_num_threads(1)


def _ptr(a):
    return ctypes.c_void_p(a.ctypes.data)


def _work(job):
    start, stride = job
    bits = (np.arange(CHUNK, dtype=np.uint64) * stride + start).astype(np.uint32)
    bits = bits[np.arange(CHUNK, dtype=np.uint64) * stride + start < (1 << 32)]
    x = bits.view(np.float32)
    n = ctypes.c_size_t(len(x))
    rf, rb = np.empty(len(x)), np.empty(len(x))
    _lib.gelu_refs(_ptr(x), _ptr(rf), _ptr(rb), n)
    acc, diffs, ys = {}, {}, {}
    for f in FORMS + ["gelu_backward_shipped"]:
        y = np.empty(len(x), np.float32)
        getattr(_lib, f)(_ptr(x), _ptr(y), n)
        ys[f] = y
    xt = torch.from_numpy(x)
    ys["cpu"] = np.ascontiguousarray(torch.nn.functional.gelu(xt).numpy())
    ys["cpu_backward"] = np.ascontiguousarray(
        torch.ops.aten.gelu_backward(torch.ones_like(xt), xt).numpy()
    )
    for k, y in ys.items():
        a = np.zeros(45)
        _lib.gelu_stats(_ptr(x), _ptr(y), _ptr(rb if "backward" in k else rf), n, _ptr(a))
        acc[k] = a
    for f in FORMS[1:]:
        _lib.gelu_diff.restype = ctypes.c_size_t
        diffs[f] = _lib.gelu_diff(_ptr(ys[f]), _ptr(ys["gelu_shipped"]), n)
    return acc, diffs


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--stride", type=int, default=1)
    ap.add_argument("--workers", type=int, default=2)
    args = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="gelu_ulps-")
    lib = f"{tmp}/libgelu_ulps.so"
    _build(lib)
    jobs = [(s, args.stride) for s in range(0, 1 << 32, CHUNK * args.stride)]
    total, diffs = {}, {}
    t0 = time.time()
    with mp.get_context("fork").Pool(args.workers, _init, (lib,)) as pool:
        for acc, d in pool.imap_unordered(_work, jobs):
            for k, a in acc.items():
                if k not in total:
                    total[k] = a
                    continue
                t = total[k].reshape(9, 5)
                a = a.reshape(9, 5)
                upd = a[:, 0] > t[:, 0]
                t[upd, 0], t[upd, 4] = a[upd, 0], a[upd, 4]
                t[:, 1:4] += a[:, 1:4]
            for k, v in d.items():
                diffs[k] = diffs.get(k, 0) + v
    print(f"every {args.stride}-th float32 bit pattern, {time.time() - t0:.0f} s")
    print("max ulps / mean ulps (x of the max) per range of x; NaN mismatches if any")
    for k, a in total.items():
        print(k)
        for nm, r in zip(NAMES, a.reshape(9, 5)[:8]):
            bad = f"  NaN mismatches {int(r[3])}" if r[3] else ""
            mean = r[1] / max(r[2], 1)
            print(f"  {nm:>10}: max {r[0]:10.4g} (x={r[4]:.7g})  mean {mean:.4f}{bad}")
    for k, v in diffs.items():
        print(f"{k}: {v} results differ from gelu_shipped's bits")


if __name__ == "__main__":
    main()
