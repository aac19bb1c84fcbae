"""Planted for tests/test_evaluate.py: a graph break and changing input
shapes under torch.compile; lines marked PLANT-<kind>."""

import torch
import torch.nn as nn


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = nn.Linear(8, 8)
        self.b = nn.Linear(8, 1)

    def forward(self, x):
        h = torch.relu(self.a(x))  # PLANT-first_op (of forward: where the recompile is reported)
        torch._dynamo.graph_break()  # PLANT-graph_break
        return self.b(h).mean()


# Never called: the call itself is the finding (TorchNeuron rejects dynamic=True, warns on modes).
helper = torch.compile(lambda t: t + 1, dynamic=True, mode="max-autotune")  # PLANT-dynamic
torch.manual_seed(0)
model = Net().to("neuron")
opt = torch.optim.SGD(model.parameters(), lr=0.05)
for step in range(100):
    n = (3, 5, 6, 7)[step % 4]  # PLANT-recompile: the batch size changes every step
    x = torch.randn(n, 8).to("neuron")
    opt.zero_grad()
    loss = model(x)
    loss.backward()
    opt.step()
