"""Planted for tests/test_evaluate.py: each line marked PLANT-<kind> trips
one finding of neuron-evaluate, and nothing else in the file should."""

import torch
import torch.nn as nn


@torch.library.custom_op("evaluate_test::scale", mutates_args=())
def scale(x: torch.Tensor) -> torch.Tensor:
    return x * 2


@scale.register_kernel("neuron")
def _(x):
    return x * 2 + 0.5  # the device kernel disagrees with the CPU one


@scale.register_fake
def _(x):
    return torch.empty_like(x)


scale.register_autograd(lambda ctx, g: g * 2)


class Head(nn.Module):
    def forward(self, x):
        return x + 0 * torch.bucketize(x.detach(), x.new_zeros(2)).sum()  # PLANT-fallback


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(8, 8)
        self.head = Head()

    def forward(self, x):
        y = self.head(self.lin(x))
        y = scale(y)  # PLANT-divergence
        d = x.double().mean()  # PLANT-float64
        big = torch.arange(3, device=x.device) * (1 << 32)  # PLANT-int64
        return y.pow(2).mean() + 0 * d.float() + 0 * (big > 0).any()


torch.manual_seed(0)
model = Net().to("neuron")
opt = torch.optim.SGD(model.parameters(), lr=0.05)
x = torch.randn(4, 8, device="neuron")
for _ in range(100):
    opt.zero_grad()
    loss = model(x)
    loss.backward()
    opt.step()
