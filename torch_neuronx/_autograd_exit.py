"""Autograd's neuron device threads: backward on the calling thread, and
draining the device threads at interpreter exit.

Backward on the calling thread: for a non-CPU device PyTorch's engine runs
the backward on a per-device thread, for GPUs whose work it overlaps. Our
device is the host CPU and its kernels run on the launching thread, so that
thread buys no overlap: the caller only waits, and each backward pays two
thread hand-offs (a trivial ``y.sum().backward()``: 65 us against 26 us on
the calling thread, best of 20 rounds on a loaded 2-core machine). So the importing
thread runs backward itself (autograd's ``set_multithreading_enabled(False)``,
thread-local; ``torch.autograd.set_multithreading_enabled(True)`` restores
PyTorch's default).

Draining at exit, why: every backward stashes a Python object (a ``contextvars.Context``, see
``torch/autograd/graph.py``) in the thread-local state its GraphTask captures.
A device thread drops its last reference to a GraphTask just after the caller
waiting on it was released, so when a script ends right after
``loss.backward()`` that drop can need the GIL while Python is finalizing: the
thread is then exited from inside C++ and the process aborts with "terminate
called without an active exception" (2 of 15 runs of a small CNN training
script on a loaded machine; PyTorch's race, not ours, and any non-CPU device
can hit it). One tiny backward per device, run through the C++ engine directly
(nothing stashed), makes each device thread finish - and drop - its previous
GraphTask first; the one it drops last holds no Python object.
"""

from __future__ import annotations

import atexit

import torch
from torch.autograd import Variable

from . import _C


def run_backward_on_calling_thread() -> None:
    torch.autograd.set_multithreading_enabled(False)


def _drain_device_threads() -> None:
    if not _C._is_initialized() or _C._is_in_bad_fork():
        return
    # Through the device threads, whichever thread exits.
    with torch.enable_grad(), torch.autograd.set_multithreading_enabled(True):
        for index in range(_C._device_count()):
            x = torch.ones(1, device=torch.device("neuron", index), requires_grad=True)
            y = (x * 2).sum()
            Variable._execution_engine.run_backward(
                (y,), (torch.ones_like(y),), False, False, (), True, True
            )


def install() -> None:
    atexit.register(_drain_device_threads)
