"""Drains autograd's neuron device threads at interpreter exit.

Why: every backward stashes a Python object (a ``contextvars.Context``, see
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


def _drain_device_threads() -> None:
    if not _C._is_initialized() or _C._is_in_bad_fork():
        return
    with torch.enable_grad():
        for index in range(_C._device_count()):
            x = torch.ones(1, device=torch.device("neuron", index), requires_grad=True)
            y = (x * 2).sum()
            Variable._execution_engine.run_backward(
                (y,), (torch.ones_like(y),), False, False, (), True, True)


def install() -> None:
    atexit.register(_drain_device_threads)
