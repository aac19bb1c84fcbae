"""Functions and datasets the multiprocessing tests run in spawned children
(they must be importable by name there)."""

import torch


def child_roundtrip(inq, outq, conn):
    t = inq.get()  # a neuron tensor from the parent
    outq.put(float(t.sum().item()))
    t.add_(1)  # written in place: the parent sees it
    torch.neuron.synchronize()
    mine = torch.arange(6.0, device="neuron").reshape(2, 3)
    outq.put(mine)  # a neuron tensor created here
    conn.send(mine[:, 1])  # a view through a pipe
    outq.put("done")
    inq.get()  # wait until the parent has read them


class NeuronDataset(torch.utils.data.Dataset):
    """Row i: [i, 3 i + 1, i], computed on neuron in the worker."""

    def __init__(self):
        self.w = torch.tensor([[1.0, 3.0, 1.0]], device="neuron")
        self.b = torch.tensor([0.0, 1.0, 0.0], device="neuron")

    def __len__(self):
        return 8

    def __getitem__(self, i):
        x = torch.full((1, 1), float(i), device="neuron")
        return (x @ self.w + self.b)[0]
