"""Batch norm forward / backward µs on neuron at ResNet's shapes (batch 32),
float32 and bfloat16, training, process CPU time (run with one thread:
OMP_NUM_THREADS=1 TORCH_NEURONX_NUM_THREADS=1; torch's thread count follows
OMP_NUM_THREADS). Prints the min and median of several rounds per shape;
compare builds by alternating processes (swap torch_neuronx/lib/libtrn.so).
`--device cpu` times PyTorch CPU's batch norm on the same shapes."""

import argparse
import os
import statistics
import time

import torch

import torch_neuronx  # noqa: F401

SHAPES = [(32, c, p) for c in (32, 64, 128) for p in (16, 8, 4)]


def timed(fn, reps):
    torch.neuron.synchronize()
    t = time.process_time()
    for _ in range(reps):
        fn()
    torch.neuron.synchronize()
    return (time.process_time() - t) / reps * 1e6


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--device", default="neuron", choices=("neuron", "cpu"))
    dev = p.parse_args().device
    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1")))
    for dtype in (torch.float32, torch.bfloat16):
        for n, c, p in SHAPES:
            x = torch.randn(n, c, p, p).to(dtype).to(dev)
            dy = torch.randn(n, c, p, p).to(dtype).to(dev)
            w, b = torch.rand(c, device=dev) + 0.5, torch.randn(c, device=dev)
            rm, rv = torch.zeros(c, device=dev), torch.ones(c, device=dev)
            _, sm, si = torch.ops.aten.native_batch_norm(x, w, b, rm, rv, True, 0.1, 1e-5)

            def fwd():
                torch.ops.aten.native_batch_norm(x, w, b, rm, rv, True, 0.1, 1e-5)

            def bwd():
                torch.ops.aten.native_batch_norm_backward(
                    dy, x, w, rm, rv, sm, si, True, 1e-5, [True, True, True]
                )

            reps = max(20, int(2e6 / x.numel()))
            res = {}
            for name, fn in (("fwd", fwd), ("bwd", bwd)):
                fn()
                ts = [timed(fn, reps) for _ in range(7)]
                res[name] = (min(ts), statistics.median(ts))
            print(
                f"{str(dtype)[6:]:8} {n}x{c}x{p}x{p}  fwd {res['fwd'][0]:7.1f} "
                f"({res['fwd'][1]:7.1f})  bwd {res['bwd'][0]:7.1f} ({res['bwd'][1]:7.1f})"
            )


if __name__ == "__main__":
    main()
