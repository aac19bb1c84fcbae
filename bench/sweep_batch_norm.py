"""Batch-norm numerics sweep (issue 22: neuron's error <= 1.5x CPU's).

For every case of a grid (batch N, channels C, plane H*W, input float32 /
bfloat16 with float32 params, train / eval, affine or not, mean offset 0 /
100) runs F.batch_norm forward and backward on neuron, on the CPU and on a
float64 copy (the inputs widened: the exact answer to the same question),
and compares, per output (y, running mean / var, dx, dweight, dbias), the
max and rms error relative to the reference's magnitude (the measure of
tests/test_numerics_vs_f64.py). Prints the count of comparisons where
neuron's error exceeds 1.5x CPU's (plus 1e-9) and the worst ones.

  python bench/sweep_batch_norm.py            # the full grid
  python bench/sweep_batch_norm.py --quick    # a smaller grid
"""

import argparse
import itertools

import torch
import torch.nn.functional as F

import torch_neuronx  # noqa: F401

RATIO = 1.5
FLOOR = 1e-9
OUTPUTS = ("y", "running_mean", "running_var", "dx", "dweight", "dbias")


def errors(out, ref):
    out, ref = out.detach().cpu().double(), ref.detach().double()
    d = out - ref
    smax = ref.abs().max().clamp_min(1e-300)
    srms = ref.pow(2).mean().sqrt().clamp_min(1e-300)
    return (d.abs().max() / smax).item(), (d.pow(2).mean().sqrt() / srms).item()


def run_case(n, c, hw, dtype, training, affine, offset, seed=0):
    """The outputs of one case on (float64 reference, CPU, neuron)."""
    g = torch.Generator().manual_seed(seed)
    x = (torch.randn(n, c, hw, generator=g, dtype=torch.float64) + offset).to(dtype)
    dy = torch.randn(n, c, hw, generator=g, dtype=torch.float64).to(dtype)
    w = torch.rand(c, generator=g, dtype=torch.float64).float() + 0.5 if affine else None
    b = torch.randn(c, generator=g, dtype=torch.float64).float() if affine else None
    rm = (torch.randn(c, generator=g, dtype=torch.float64) * 0.1 + offset).float()
    rv = (torch.rand(c, generator=g, dtype=torch.float64) + 0.5).float()

    def side(dev, widen):
        def cv(t):
            if t is None:
                return None
            t = t.double() if widen else t
            return t.clone().to(dev)

        xs = cv(x).requires_grad_()
        ws = cv(w).requires_grad_() if affine else None
        bs = cv(b).requires_grad_() if affine else None
        rms, rvs = cv(rm), cv(rv)
        y = F.batch_norm(xs, rms, rvs, ws, bs, training=training, momentum=0.1, eps=1e-5)
        wrt = [xs] + ([ws, bs] if affine else [])
        grads = torch.autograd.grad(y, wrt, cv(dy))
        out = {"y": y, "dx": grads[0]}
        if affine:
            out["dweight"], out["dbias"] = grads[1], grads[2]
        if training:
            out["running_mean"], out["running_var"] = rms, rvs
        return out

    return side("cpu", True), side("cpu", False), side("neuron", False)


def compare(case):
    """[(case, output, measure, neuron err, cpu err)] of the comparisons that fail."""
    ref, cpu, neu = run_case(*case)
    bad, total = [], 0
    for name in OUTPUTS:
        if name not in ref:
            continue
        ce, ne = errors(cpu[name], ref[name]), errors(neu[name], ref[name])
        for what, cv, nv in zip(("max", "rms"), ce, ne):
            total += 1
            if nv > RATIO * cv + FLOOR:
                bad.append((case, name, what, nv, cv))
    return bad, total


def grid(quick):
    ns = (1, 2, 3, 8) if quick else (1, 2, 3, 4, 8, 16)
    cs = (1, 3, 4) if quick else (1, 2, 3, 4, 8, 40)
    hws = (1, 7, 64, 300) if quick else (1, 2, 5, 7, 16, 64, 100, 300, 1024)
    dtypes = (torch.float32, torch.bfloat16)
    for n, c, hw, dt, tr, af, off in itertools.product(
        ns, cs, hws, dtypes, (True, False), (True, False), (0.0, 100.0)
    ):
        if tr and n * hw < 2:
            continue  # a channel of one value has no batch variance
        yield (n, c, hw, dt, tr, af, off)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--quick", action="store_true")
    p.add_argument("--show", type=int, default=15)
    args = p.parse_args()
    bad, total = [], 0
    for case in grid(args.quick):
        b, t = compare(case)
        bad += b
        total += t
    print(f"comparisons {total}, neuron over {RATIO}x CPU's error: {len(bad)}")
    for k in OUTPUTS:
        m = sum(1 for x in bad if x[1] == k)
        if m:
            print(f"  {k}: {m}")
    bad.sort(key=lambda x: -x[3] / max(x[4], 1e-300))
    for case, name, what, nv, cv in bad[: args.show]:
        n, c, hw, dt, tr, af, off = case
        print(
            f"  {n}x{c}x{hw} {str(dt)[6:]} {'train' if tr else 'eval'} "
            f"{'affine' if af else 'plain'} offset {off:g} {name} {what}: "
            f"neuron {nv:.3g} CPU {cv:.3g}"
        )


if __name__ == "__main__":
    main()
