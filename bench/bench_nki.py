"""NKI kernels compiled by OpenNeuron, side by side (one run, `make bench`):
tiled matmul, softmax, RMSNorm, layer norm and flash-attention forward,
against (a) the same math in PyTorch CPU eager, (b) libtrn's own kernel for
the op on the neuron device (SDPA for attention) and (c) an
instruction-by-instruction NumPy execution of the same traced program (how
AWS's simulator runs kernels). Also the cold compile time of each kernel.
Prints a table; NKI and native times are the fastest of 9 alternated rounds
(`paired`), the others wall-clock medians on this machine, and the last
column compares the process CPU time (all threads) of the NKI kernel with
the native one's, which holds up when other work shares the machine."""

import math
import os
import statistics
import sys
import time

import numpy as np
import torch

import nki
import nki.isa as nisa
import nki.language as nl
import torch_neuronx  # noqa: F401

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests", "nki"))
import kernels_norm  # noqa: E402
from kernels_attention import flash_fwd  # noqa: E402


@nki.jit
def matmul(a_t, b):  # a_t (K, M), b (K, N) -> a_t.T @ b
    K, M = a_t.shape
    N = b.shape[1]
    out = nl.ndarray((M, N), nl.float32, buffer=nl.shared_hbm)
    for m in nl.affine_range(M // 128):
        for n in nl.affine_range(N // 512):
            ps = nl.ndarray((128, 512), nl.float32, buffer=nl.psum)
            for k in nl.affine_range(K // 128):
                at = nl.ndarray((128, 128), a_t.dtype, buffer=nl.sbuf)
                nisa.dma_copy(dst=at, src=a_t[nl.ds(k * 128, 128), nl.ds(m * 128, 128)])
                bt = nl.ndarray((128, 512), b.dtype, buffer=nl.sbuf)
                nisa.dma_copy(dst=bt, src=b[nl.ds(k * 128, 128), nl.ds(n * 512, 512)])
                nisa.nc_matmul(dst=ps, stationary=at, moving=bt)
            o = nl.ndarray((128, 512), nl.float32, buffer=nl.sbuf)
            nisa.tensor_copy(dst=o, src=ps)
            nisa.dma_copy(dst=out[nl.ds(m * 128, 128), nl.ds(n * 512, 512)], src=o)
    return out


@nki.jit
def softmax(x):
    out = nl.ndarray(x.shape, x.dtype, buffer=nl.shared_hbm)
    F = x.shape[1]
    for i in nl.affine_range(x.shape[0] // 128):
        t = nl.ndarray((128, F), nl.float32, buffer=nl.sbuf)
        nisa.dma_copy(dst=t, src=x[nl.ds(i * 128, 128), :])
        m = nl.ndarray((128, 1), nl.float32, buffer=nl.sbuf)
        nisa.tensor_reduce(dst=m, op=nl.maximum, data=t, axis=1, negate=True)
        s = nl.ndarray((128, 1), nl.float32, buffer=nl.sbuf)
        nisa.activation(dst=t, op=nl.exp, data=t, bias=m, reduce_op=nl.add, reduce_res=s)
        r = nl.ndarray((128, 1), nl.float32, buffer=nl.sbuf)
        nisa.reciprocal(dst=r, data=s)
        nisa.tensor_scalar(dst=t, data=t, op0=nl.multiply, operand0=r)
        nisa.dma_copy(dst=out[nl.ds(i * 128, 128), :], src=t)
    return out


rmsnorm = nki.jit(kernels_norm.rmsnorm)


@nki.jit
def layernorm(x, eps):
    out = nl.ndarray(x.shape, x.dtype, buffer=nl.shared_hbm)
    F = x.shape[1]
    for i in nl.affine_range(x.shape[0] // 128):
        t = nl.ndarray((128, F), nl.float32, buffer=nl.sbuf)
        nisa.dma_copy(dst=t, src=x[nl.ds(i * 128, 128), :])
        st = nl.ndarray((128, 6), nl.float32, buffer=nl.sbuf)
        nisa.bn_stats(dst=st, data=t)
        mv = nl.ndarray((128, 2), nl.float32, buffer=nl.sbuf)
        nisa.bn_aggr(dst=mv, data=st)
        r = nl.ndarray((128, 1), nl.float32, buffer=nl.sbuf)
        nisa.tensor_scalar(dst=r, data=mv[:, 1:2], op0=nl.add, operand0=eps)
        nisa.activation(dst=r, op=nl.rsqrt, data=r)
        nisa.tensor_scalar(
            dst=t, data=t, op0=nl.subtract, operand0=mv[:, 0:1], op1=nl.multiply, operand1=r
        )
        nisa.dma_copy(dst=out[nl.ds(i * 128, 128), :], src=t)
    return out


# ---------------------------------------------------------------- (c) NumPy, one instruction at a time
ACT = {
    0: lambda x: x,
    1: np.exp,
    2: np.log,
    3: np.sqrt,
    4: lambda x: 1 / np.sqrt(x),
    5: lambda x: 1 / x,
    22: np.square,
    23: np.negative,
}
ALU = {
    0: lambda a, b: a,
    1: np.add,
    2: np.subtract,
    3: np.multiply,
    4: np.divide,
    5: np.maximum,
    6: np.minimum,
}
RED = {1: np.sum, 5: np.max, 6: np.min}


class NumpySim:
    """Executes the traced program text instruction by instruction with
    NumPy views (fp32 storage): loops run in Python."""

    def __init__(self, text, args):
        toks = [ln.split() for ln in text.strip().split("\n")]
        self.mem, self.stmts, self.shapes, self.views = {}, [], {}, {}
        k = 0
        for t in toks:
            if t[0] == "T":
                tid, kind, nd = int(t[1]), int(t[2]), int(t[4])
                shape = [int(x) for x in t[5 : 5 + nd]]
                strides = [int(x) for x in t[5 + nd : 5 + 2 * nd]]
                base, off = int(t[6 + 2 * nd]), int(t[7 + 2 * nd])
                if kind in (0, 1):
                    self.mem[tid] = args[k].reshape(-1)
                    self.shapes[tid] = strides
                    k += 1
                elif kind == 5:
                    self.views[tid] = (base, off)
                    self.shapes[tid] = [int(np.prod(shape[d + 1 :])) for d in range(nd)]
                else:
                    self.mem[tid] = np.full(int(np.prod(shape)), np.nan, np.float32)
                    self.shapes[tid] = [int(np.prod(shape[d + 1 :])) for d in range(nd)]
            else:
                self.stmts.append(t)

    def root(self, tid):
        off = 0
        while tid in self.views:
            tid, o = self.views[tid]
            off += o
        return tid, off

    def operand(self, t, i, env):
        tid, nd = int(t[i]), int(t[i + 1])
        counts = [int(x) for x in t[i + 2 : i + 2 + nd]]
        ntd = int(t[i + 2 + nd])
        j = i + 3 + nd
        strides = self.shapes[tid]
        root, off = self.root(tid)
        flat, st = off, [0] * nd
        for d in range(ntd):
            c, n = int(t[j]), int(t[j + 1])
            j += 2
            for _ in range(n):
                c += int(t[j + 1]) * env[int(t[j])]
                j += 2
            flat += c * strides[d]
            for a in range(nd):
                st[a] += int(t[j + a]) * strides[d]
            j += nd
        m = self.mem[root]
        v = np.lib.stride_tricks.as_strided(
            m[flat:], shape=counts, strides=[s * m.itemsize for s in st]
        )
        return v, j

    def run(self, pid=0):
        env = {1000: pid}
        self.fresh = set()
        self._block(0, len(self.stmts), env)

    def _block(self, a, b, env):
        i = a
        while i < b:
            t = self.stmts[i]
            if t[0] == "L":
                depth, j = 1, i + 1
                while depth:
                    depth += self.stmts[j][0] == "L"
                    depth -= self.stmts[j][0] == "E"
                    j += 1
                for v in range(int(t[2]), int(t[3]), int(t[4])):
                    env[int(t[1])] = v
                    self._block(i + 1, j - 1, env)
                i = j
                continue
            if t[0] == "I":
                self._instr(t, env)
            elif t[0] == "P":
                self.fresh.add(int(t[1]))
            i += 1

    def _instr(self, t, env):
        op, npar = int(t[1]), int(t[4])
        p = [float(x) for x in t[5 : 5 + npar]]
        j = 5 + npar
        nopd = int(t[j])
        j += 1
        ops = []
        for _ in range(nopd):
            v, j = self.operand(t, j, env)
            ops.append(v)
        d = ops[0]
        if op == 0:
            d[...] = ops[1].reshape(d.shape) if ops[1].size == d.size else ops[1]
        elif op == 1:
            d[...] = ALU[int(p[0])](ops[1], ops[2])
        elif op == 2:
            x, k = ops[1], 2
            for s in (0, 4):
                if p[s + 2] == 0:
                    continue
                sc = p[s + 3] if p[s + 2] == 1 else ops[k].reshape(-1, 1)
                k += p[s + 2] == 2
                x = ALU[int(p[s])](sc, x) if p[s + 1] else ALU[int(p[s])](x, sc)
            d[...] = x
        elif op == 3:
            x, k = ops[1], 2
            bias = None
            if p[1]:
                bias, k = ops[k], k + 1
            x = x * (ops[k] if p[2] == 2 else p[3])
            k += p[2] == 2
            if bias is not None:
                x = x + bias
            x = ACT[int(p[0])](x)
            d[...] = x
            if p[4] >= 0:
                ops[k][...] = RED[int(p[4])](x, axis=1, keepdims=True)
        elif op == 4:
            r = RED[int(p[0])](ops[1], axis=tuple(range(ops[1].ndim - int(p[1]), ops[1].ndim)))
            d[...] = (-r if p[2] else r).reshape(d.shape)
        elif op == 5:
            prod = ops[1].reshape(ops[1].shape[0], -1).T @ ops[2].reshape(ops[2].shape[0], -1)
            root = self.root(int(t[5 + npar + 1]))[0]
            first = (
                root in self.fresh
            )  # first write to a fresh PSUM tile overwrites (per tile, not per element)
            self.fresh.discard(root)
            d[...] = prod if (p[0] == 2 or (p[0] == 0 and first)) else d + prod
        elif op == 6:
            d[...] = ops[1].T
        elif op == 15:  # affine_select: expr over (partition, free) index
            j += 1
            c, n = int(t[j]), int(t[j + 1])
            j += 2
            for _ in range(n):
                c += int(t[j + 1]) * env[int(t[j])]
                j += 2
            nd = int(t[j])
            coefs = [int(x) for x in t[j + 1 : j + 1 + nd]]
            grid = np.indices(d.shape)
            val = c + sum(cf * g for cf, g in zip(coefs, grid))
            keep = {8: val == 0, 9: val != 0, 10: val < 0, 11: val <= 0, 12: val > 0, 13: val >= 0}[
                int(p[0])
            ]
            d[...] = np.where(keep, ops[1], p[1])
        elif op == 8:
            d[...] = p[0]
        elif op == 10:
            sc = p[3] if p[2] == 1 else ops[2]
            x = ALU[int(p[0])](ops[1], sc)
            d[...] = ALU[int(p[1])](x, ops[3])
        elif op == 13:
            x = ops[1]
            d[...] = np.stack(
                [np.full(x.shape[0], x.shape[1]), x.mean(1), x.var(1)] + [np.zeros(x.shape[0])] * 3,
                1,
            )
        elif op == 14:
            d[...] = np.stack([ops[1][:, 1], ops[1][:, 2]], 1)
        else:
            raise NotImplementedError(op)


def timeit(fn, reps=5):
    fn()
    ts = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t0)
    return statistics.median(ts)


def paired(fa, fb, rounds=9, min_s=0.02):
    """Per-call wall and process CPU (every thread) seconds of ``fa`` and
    ``fb``, alternated round by round (a and b see the same load); each round
    times a loop of calls long enough for the clocks (>= ``min_s``), and the
    fastest round of each counts. Sub-millisecond kernels measured 5 times
    apart moved their ratio 3x between runs; this holds within ~15 %."""
    fa(), fb()
    n = {}
    for f in (fa, fb):
        t0, k = time.perf_counter(), 0
        while time.perf_counter() - t0 < min_s:
            f()
            k += 1
        n[f] = max(k, 1)
    best = {fa: [float("inf")] * 2, fb: [float("inf")] * 2}
    for _ in range(rounds):
        for f in (fa, fb):
            w0, c0 = time.perf_counter(), time.process_time()
            for _ in range(n[f]):
                f()
            w, c = (time.perf_counter() - w0) / n[f], (time.process_time() - c0) / n[f]
            best[f] = [min(best[f][0], w), min(best[f][1], c)]
    return best[fa], best[fb]


def main():
    torch.manual_seed(0)
    dev = "neuron"
    sync = torch.neuron.synchronize if hasattr(torch, "neuron") else (lambda: None)
    M = K = N = 512
    R, F = 1024, 512
    BH, S, D = 4, 512, 64
    a_t, b = torch.randn(K, M), torch.randn(K, N)
    x, w = torch.randn(R, F), torch.randn(F)
    q, k, v = (torch.randn(BH, S, D) for _ in range(3))
    cases = [
        (
            "matmul 512^3",
            matmul,
            (a_t, b),
            lambda: a_t.T @ b,
            lambda a, bb: a.T @ bb,
            lambda: (a_t, b),
        ),
        (
            "softmax 1024x512",
            softmax,
            (x,),
            lambda: torch.softmax(x, 1),
            lambda xx: torch.softmax(xx, 1),
            lambda: (x,),
        ),
        (
            "rmsnorm 1024x512",
            rmsnorm,
            (x, w, 1e-6),
            lambda: x * torch.rsqrt((x * x).mean(1, keepdim=True) + 1e-6) * w,
            lambda xx, ww, e: torch.nn.functional.rms_norm(xx, (F,), ww, e),
            lambda: (x, w, 1e-6),
        ),
        (
            "layernorm 1024x512",
            layernorm,
            (x, 1e-5),
            lambda: torch.nn.functional.layer_norm(x, (F,), eps=1e-5),
            lambda xx, e: torch.nn.functional.layer_norm(xx, (F,), eps=e),
            lambda: (x, 1e-5),
        ),
        (
            "flash fwd 4x512x64",
            flash_fwd,
            (q, k, v, 1 / math.sqrt(D), True),
            lambda: torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True),
            lambda qq, kk, vv, s, c: torch.nn.functional.scaled_dot_product_attention(
                qq, kk, vv, is_causal=True
            ),
            lambda: (q, k, v, 1 / math.sqrt(D), True),
        ),
    ]
    os.environ.setdefault("TORCH_NEURONX_NEFF_DISABLE_CACHE", "1")  # cold compiles below are real
    print(
        f"{'kernel':22} {'compile s':>9} {'nki ms':>8} {'(a) cpu ms':>10} {'(b) native ms':>13} "
        f"{'(c) numpy ms':>12} {'c/nki':>7} {'nki/b':>6} {'cpu nki/b':>9}"
    )
    for name, kern, args, cpu_fn, native_fn, _ in cases:
        dargs = [t.to(dev) if isinstance(t, torch.Tensor) else t for t in args]
        t0 = time.perf_counter()
        kern.specialize(*dargs)
        compile_s = time.perf_counter() - t0

        def run_nki():
            kern(*dargs)
            sync()

        def run_native():
            native_fn(*dargs)
            sync()

        (t_nki, c_nki), (t_nat, c_nat) = paired(run_nki, run_native)
        t_cpu = timeit(cpu_fn)
        cpu_ratio = c_nki / c_nat
        tr = kern.trace(*args)[0]
        np_args = [t.numpy() if isinstance(t, torch.Tensor) else None for t in args]
        outs = [np.zeros(int(np.prod(t.shape)), np.float32) for t in tr.tensors if t.kind == 1]
        mems = [a for a in np_args if a is not None] + outs
        t_np = timeit(lambda: NumpySim(tr.text(), [m.copy() for m in mems]).run(), reps=1)
        print(
            f"{name:22} {compile_s:9.3f} {t_nki * 1e3:8.2f} {t_cpu * 1e3:10.2f} {t_nat * 1e3:13.2f} "
            f"{t_np * 1e3:12.1f} {t_np / t_nki:7.1f} {t_nki / t_nat:6.2f} {cpu_ratio:9.2f}"
        )


if __name__ == "__main__":
    main()
