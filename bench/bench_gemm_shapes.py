"""Every GEMM of a model_zoo training step, neuron vs PyTorch CPU, same process.

Records the mm/addmm/bmm/baddbmm calls (sizes, strides, beta/alpha) of one
AdamW step of a model (the same step as bench/bench_models.py) with a
TorchDispatchMode, then times each distinct call on both devices,
interleaved, on operands of the same sizes and strides. Prints per call us,
the CPU/neuron time ratio (> 1: neuron faster) and the per-step total
(time x calls per step), so the cases that lose show with their weight.
Process CPU time is printed too; Linux brings other threads' share of it up
to date only at scheduler ticks, so for multi-threaded calls it is rough.

    .venv/bin/python bench/bench_gemm_shapes.py --model bert [--reps 20] [--autocast]

With --autocast the step runs under torch.autocast(bfloat16), so the
recorded GEMMs are the bfloat16 ones and are timed in bfloat16.
"""

import argparse
import collections
import copy
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests"))
sys.path.insert(0, os.path.dirname(__file__))

import torch  # noqa: E402
from torch.utils._python_dispatch import TorchDispatchMode  # noqa: E402

import torch_neuronx  # noqa: E402,F401
import model_zoo as zoo  # noqa: E402
from bench_models import make_step  # noqa: E402

OPS = {
    torch.ops.aten.mm.default: "mm",
    torch.ops.aten.addmm.default: "addmm",
    torch.ops.aten.bmm.default: "bmm",
    torch.ops.aten.baddbmm.default: "baddbmm",
}


class Recorder(TorchDispatchMode):
    def __init__(self):
        super().__init__()
        self.calls = collections.Counter()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func in OPS:
            tens = tuple(
                (tuple(a.shape), tuple(a.stride())) for a in args if isinstance(a, torch.Tensor)
            )
            dtype = next(a.dtype for a in args if isinstance(a, torch.Tensor))
            scal = tuple(kwargs.get(k, 1) for k in ("beta", "alpha"))
            self.calls[(OPS[func], tens, scal, dtype)] += 1
        return func(*args, **kwargs)


def operand(shape, stride, device, gen, dtype):
    need = 1 + sum((s - 1) * st for s, st in zip(shape, stride))
    base = torch.randn(max(need, 1), generator=gen).to(dtype)
    return (
        base.as_strided(shape, stride).to(device)
        if device == "cpu"
        else base.to(device).as_strided(shape, stride)
    )


def timed(fn, sync, reps):
    """(wall, process CPU time) per call: CPU time counts every thread's
    work and spinning, so it still compares when the machine is loaded."""
    fn()
    sync()
    t0, c0 = time.perf_counter(), time.process_time()
    for _ in range(reps):
        fn()
    sync()
    return (time.perf_counter() - t0) / reps, (time.process_time() - c0) / reps


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="bert")
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--rounds", type=int, default=3, help="interleaved rounds; best kept")
    ap.add_argument(
        "--autocast",
        action="store_true",
        help="record the step under bfloat16 autocast (bfloat16 GEMMs)",
    )
    args = ap.parse_args()
    torch.manual_seed(0)
    cpu = zoo.MODELS[args.model]("small")
    gen = torch.Generator().manual_seed(0)
    batch = (
        zoo.image_batch(32, 32, gen=gen) if args.model == "resnet" else zoo.lm_batch(8, 64, gen=gen)
    )
    step = make_step(args.model, copy.deepcopy(cpu), "cpu", batch, args.autocast)
    step()
    rec = Recorder()
    with rec:
        step()
    sync = {"cpu": lambda: None, "neuron": torch.neuron.synchronize}
    cases = []
    for (op, tens, (beta, alpha), dtype), count in rec.calls.items():
        fns = {}
        for dev in ("cpu", "neuron"):
            g = torch.Generator().manual_seed(1)
            ts = [operand(s, st, dev, g, dtype) for s, st in tens]
            f = getattr(torch, op)
            kw = {"beta": beta, "alpha": alpha} if op in ("addmm", "baddbmm") else {}
            fns[dev] = lambda f=f, ts=ts, kw=kw: f(*ts, **kw)
        cases.append((op, tens, count, fns))
    # Rounds alternate the devices, each timing all its shapes in a row: a
    # device's threads (PyTorch's OpenMP team, libtrn's pool) spin a while
    # after its last call, which would tax the other device's first calls.
    best = [{"cpu": (float("inf"),) * 2, "neuron": (float("inf"),) * 2} for _ in cases]
    for _ in range(args.rounds):
        for dev in ("neuron", "cpu"):
            for i, (_, _, _, fns) in enumerate(cases):
                best[i][dev] = min(best[i][dev], timed(fns[dev], sync[dev], args.reps))
    rows = [
        (op, tens, count, *b["cpu"], *b["neuron"]) for (op, tens, count, _), b in zip(cases, best)
    ]
    rows.sort(key=lambda r: -r[2] * r[5])
    tot = [0.0] * 4
    print(
        f"{args.model}: {sum(r[2] for r in rows)} GEMM calls per step, "
        f"{torch.get_num_threads()} threads{', bf16 autocast' if args.autocast else ''}; best of {args.rounds} rounds of {args.reps}"
    )
    print(
        f"{'op':8s} {'operands (shape/stride)':58s} {'n':>3s} {'cpu us':>7s} {'neu us':>7s} "
        f"{'ratio':>6s} {'cpu-time us cpu/neu':>20s}"
    )
    for op, tens, count, *t in rows:
        tot = [a + count * b for a, b in zip(tot, t)]
        desc = " ".join(f"{'x'.join(map(str, s))}/{','.join(map(str, st))}" for s, st in tens)
        print(
            f"{op:8s} {desc:58s} {count:3d} {t[0] * 1e6:7.0f} {t[2] * 1e6:7.0f} "
            f"{t[0] / t[2]:6.2f} {t[1] * 1e6:9.0f} {t[3] * 1e6:7.0f}"
        )
    print(
        f"per step wall: cpu {tot[0] * 1e3:.1f} ms, neuron {tot[2] * 1e3:.1f} ms, "
        f"ratio {tot[0] / tot[2]:.2f}; CPU time: cpu {tot[1] * 1e3:.1f} ms, "
        f"neuron {tot[3] * 1e3:.1f} ms"
    )


if __name__ == "__main__":
    main()
