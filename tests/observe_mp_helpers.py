"""Functions and datasets the multiprocessing tests run in spawned children
(they must be importable by name there)."""
import torch


def child_roundtrip(inq, outq, conn):
    t = inq.get()                      # a neuron tensor from the parent
    outq.put(float(t.sum().item()))
    t.add_(1)                          # written in place: the parent sees it
    torch.neuron.synchronize()
    mine = torch.arange(6.0, device="neuron").reshape(2, 3)
    outq.put(mine)                     # a neuron tensor created here
    conn.send(mine[:, 1])              # a view through a pipe
    outq.put("done")
    inq.get()                          # wait until the parent has read them


class NeuronDataset(torch.utils.data.Dataset):
    def __len__(self):
        return 8

    def __getitem__(self, i):
        return torch.full((3,), float(i), device="neuron")
