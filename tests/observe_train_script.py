"""A small training loop on neuron for the CLI tests (tests/test_observe_cli.py):
prints "ready <pid>" after the first step and runs until the file named by
argv[1] exists (or 120 s pass), then exits normally (removing its stats page)."""

import os
import sys
import time

import torch

stop_file = sys.argv[1]
model = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.ReLU(), torch.nn.Linear(64, 1)).to(
    "neuron"
)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
x = torch.randn(32, 64, device="neuron")
y = torch.randn(32, 1, device="neuron")
ballast = torch.empty(8 << 20, dtype=torch.uint8, device="neuron")  # 8 MiB in use
deadline = time.monotonic() + 120
step = 0
while time.monotonic() < deadline and not os.path.exists(stop_file):
    opt.zero_grad()
    loss = torch.nn.functional.mse_loss(model(x), y)
    loss.backward()
    opt.step()
    torch.special.zeta(y, y)  # one CPU fallback per step
    torch.neuron.synchronize()
    step += 1
    if step == 1:
        print(f"ready {os.getpid()}", flush=True)
    time.sleep(0.002)
print(f"done {step}", flush=True)
