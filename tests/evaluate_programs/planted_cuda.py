"""A CUDA script (no neuron anywhere) for --map-device cuda=neuron, with an
unsupported API (torch.distributions) and a crash at a known line."""

import sys

import torch
import torch.nn as nn

device = "cuda" if torch.cuda.is_available() else sys.exit("needs CUDA")
torch.manual_seed(0)
model = nn.Sequential(nn.Linear(4, 16), nn.Tanh(), nn.Linear(16, 1)).to(device)
opt = torch.optim.Adam(model.parameters(), lr=1e-2)
x = torch.randn(32, 4).cuda()
y = x.sum(dim=1, keepdim=True)
noise = torch.distributions.Normal(0.0, 1.0)  # PLANT-distributions
for step in range(100):
    opt.zero_grad()
    loss = ((model(x) - y) ** 2).mean()
    loss.backward()
    opt.step()
    if step == int(sys.argv[1]) if len(sys.argv) > 1 else False:
        raise ValueError("planted failure")  # PLANT-error
