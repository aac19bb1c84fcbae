"""TorchNeuron's distributed tutorial method: one training script run under
torchrun once with `gloo` on CPU tensors and once with `neuron`, comparing the
losses rank by rank.

    python examples/distributed_train.py --nproc 2

(Under torchrun, with --backend, it is one rank of the training run.)
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP


def train(backend: str, out: str, steps: int) -> None:
    dist.init_process_group(backend)
    rank = dist.get_rank()
    device = (
        torch.device("neuron", int(os.environ["LOCAL_RANK"]))
        if backend == "neuron"
        else torch.device("cpu")
    )
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.GELU(), torch.nn.Linear(64, 8))
    model = DDP(model.to(device))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    gen = torch.Generator().manual_seed(1000 + rank)  # each rank its own data
    losses = []
    for _ in range(steps):
        x, y = torch.randn(16, 32, generator=gen), torch.randn(16, 8, generator=gen)
        opt.zero_grad()
        loss = torch.nn.functional.mse_loss(model(x.to(device)), y.to(device))
        loss.backward()
        opt.step()
        losses.append(loss.item())
    with open(f"{out}.{rank}", "w") as f:
        json.dump(losses, f)
    dist.destroy_process_group()


def launch(backend: str, nproc: int, out: str, steps: int) -> None:
    cmd = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        f"--nproc_per_node={nproc}",
        __file__,
        "--backend",
        backend,
        "--out",
        out,
        "--steps",
        str(steps),
    ]
    subprocess.run(cmd, check=True, timeout=600)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--nproc", type=int, default=2)
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--backend")
    ap.add_argument("--out")
    ap.add_argument("--rtol", type=float, default=1e-4)
    a = ap.parse_args()
    if a.backend:
        train(a.backend, a.out, a.steps)
        return 0
    with tempfile.TemporaryDirectory() as tmp:
        for backend in ("gloo", "neuron"):
            launch(backend, a.nproc, os.path.join(tmp, backend), a.steps)
        worst = 0.0
        for rank in range(a.nproc):
            ref = json.load(open(os.path.join(tmp, f"gloo.{rank}")))
            got = json.load(open(os.path.join(tmp, f"neuron.{rank}")))
            for step, (r, g) in enumerate(zip(ref, got)):
                rel = abs(r - g) / max(abs(r), 1e-12)
                worst = max(worst, rel)
                print(f"rank {rank} step {step:2d}  gloo/cpu {r:.6f}  neuron {g:.6f}")
        ok = worst <= a.rtol
        print(f"largest relative loss difference {worst:.2e}: {'OK' if ok else 'MISMATCH'}")
        return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
