"""``torch_neuronx.profiling``: TorchNeuron's profiler entry points, mapped
onto ``torch.profiler``.

Device activity (a kernel event per launch on its stream, with the op name,
input shapes and bytes; copies by direction) reaches torch.profiler through
the Kineto plug-in in ``csrc/observe/profiler.cpp`` whenever
``ProfilerActivity.PrivateUse1`` is profiled, so plain torch.profiler code
works; ``NeuronProfiler`` only picks the activities for you:

    with torch_neuronx.NeuronProfiler() as prof:
        model(x)
    print(prof.key_averages().table(sort_by="device_time_total"))
    prof.export_chrome_trace("trace.json")
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Any, Iterable

import torch
from torch.profiler import ProfilerActivity


class ProfileMode(enum.Enum):
    DEVICE = "device"  # kernels and copies on the device timeline
    RUNTIME = "runtime"  # host ops with their input shapes
    CPU_UTIL = "cpu_util"  # host ops
    HOST_MEMORY = "host_memory"  # allocations (profile_memory)


@dataclass
class NeuronConfig:
    modes: Iterable[ProfileMode] = field(
        default_factory=lambda: (ProfileMode.DEVICE, ProfileMode.RUNTIME)
    )
    output_dir: "str | None" = None  # where export() writes when given no path


class NeuronProfiler(torch.profiler.profile):
    """``torch.profiler.profile`` with CPU and neuron activities by default."""

    def __init__(
        self,
        activities: "Iterable[ProfilerActivity] | None" = None,
        config: "NeuronConfig | None" = None,
        **kwargs: Any,
    ):
        self.neuron_config = config or NeuronConfig()
        modes = set(self.neuron_config.modes)
        if activities is None:
            activities = [ProfilerActivity.CPU]
            if ProfileMode.DEVICE in modes:
                activities.append(ProfilerActivity.PrivateUse1)
        kwargs.setdefault("record_shapes", ProfileMode.RUNTIME in modes)
        kwargs.setdefault("profile_memory", ProfileMode.HOST_MEMORY in modes)
        super().__init__(activities=list(activities), **kwargs)

    def export(self, path: "str | None" = None) -> str:
        """Write the Chrome trace (to ``path`` or ``output_dir``); returns the path."""
        if path is None:
            import os
            import time

            base = self.neuron_config.output_dir or "."
            os.makedirs(base, exist_ok=True)
            path = os.path.join(base, f"neuron_trace_{os.getpid()}_{int(time.time())}.json")
        self.export_chrome_trace(path)
        return path
