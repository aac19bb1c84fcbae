"""Which ops ran natively on neuron and which fell back to the CPU.

Each list has one entry per invocation, in order, e.g. ``['aten::mm', ...]``.
Execution is asynchronous: call ``torch.neuron.synchronize()`` first.
"""

from . import _C


def get_fallback_ops() -> list[str]:
    """Ops that ran on the CPU through the fallback, one entry per invocation."""
    return _C._fallback_ops()


def get_executed_ops() -> list[str]:
    """Ops that ran natively on the neuron device, one entry per invocation."""
    return _C._executed_ops()


def clear_op_tracking() -> None:
    """Empty both lists."""
    _C._clear_op_tracking()
