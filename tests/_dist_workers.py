"""Worker functions run by tests/_dist_harness.py, one process per rank.
Each initialises one process group and runs many checks with it (process
start-up dominates the cost on this machine)."""
import datetime
import os
import sys
import traceback

import torch
import torch.distributed as dist

import torch_neuronx  # noqa: F401


def rank_world():
    return int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])


def main():
    fn = globals()[os.environ["DIST_FN"]]
    try:
        fn()
    except BaseException:
        traceback.print_exc()
        sys.stdout.flush()
        os._exit(1)
    sys.stdout.flush()
    os._exit(0)


def smoke():
    rank, world = rank_world()
    dist.init_process_group("neuron")
    t = torch.full((5,), float(rank + 1), device="neuron")
    dist.all_reduce(t)
    assert t.cpu().tolist() == [world * (world + 1) / 2] * 5, t
    print("transport", dist.group.WORLD._get_backend(torch.device("neuron")).transport)
    dist.destroy_process_group()
