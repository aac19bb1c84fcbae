"""Planted for tests/test_evaluate_strict.py: each case trips one behaviour
strict mode emulates (one visible core per rank, the device count by the
logical core configuration, TorchNeuron's process-group errors) at the line
marked PLANT-<kind>; case "clean" does it all the TorchNeuron way and trips
nothing. Usage: planted_strict_dist.py CASE (rank and world from the
launcher's environment; world size 1 when there is none)."""

import os
import sys

import torch
import torch.distributed as dist

import torch_neuronx  # noqa: F401  (registers the neuron c10d backend)

case = sys.argv[1]
rank = int(os.environ.get("RANK", "0"))
world = int(os.environ.get("WORLD_SIZE", "1"))
local_rank = int(os.environ.get("LOCAL_RANK", "0"))
os.environ.setdefault("MASTER_ADDR", "127.0.0.1")


if case == "device_index":
    # The CUDA habit: each rank on the device numbered by its local rank.
    x = torch.ones(4, device=f"neuron:{local_rank}")  # PLANT-device_index
elif case == "set_device":
    torch.neuron.set_device(local_rank)  # PLANT-set_device
elif case == "device_count":
    # One tensor per NeuronCore the program believes it has.
    xs = [torch.ones(2, device=f"neuron:{i}") for i in range(8)]  # PLANT-device_count
elif case == "runtime_init":
    w = torch.zeros(4, device="neuron")
    dist.init_process_group("neuron", rank=rank, world_size=world)  # PLANT-runtime_init
elif case == "one_core":
    dist.init_process_group("neuron", rank=rank, world_size=world)  # PLANT-one_core
elif case == "nccl":
    # A CUDA script's process group, unchanged.
    dist.init_process_group("nccl", rank=rank, world_size=world)  # PLANT-nccl
elif case == "alltoall":
    dist.init_process_group("neuron", rank=rank, world_size=world)
    x = torch.arange(2 * world, dtype=torch.float32, device="neuron")
    out = torch.empty_like(x)
    dist.all_to_all_single(out, x, [2] * world, [2] * world)  # PLANT-alltoall
elif case == "barrier":
    dist.init_process_group("neuron", rank=rank, world_size=world)
    first = dist.new_group([0])
    if rank == 0:
        dist.barrier(group=first)  # PLANT-barrier
elif case == "clean":
    dist.init_process_group("neuron", rank=rank, world_size=world)
    assert torch.neuron.device_count() == 1, torch.neuron.device_count()
    x = torch.full((2 * world,), float(rank + 1), device="neuron")
    dist.all_reduce(x)
    out = torch.empty_like(x)
    dist.all_to_all_single(out, x)
    dist.barrier()
    print("clean", rank, x.sum().item(), out.sum().item())
else:
    raise SystemExit(f"unknown case {case!r}")
if dist.is_initialized():
    dist.destroy_process_group()
