"""Compiled optimizer steps keep their step counters on the device.

Owner: the one Dynamo hook this needs. When Dynamo traces ``opt.step()``
before the optimizer state exists, it turns on ``capturable`` for groups
whose parameters are all CUDA/XPU tensors, so ``state["step"]`` is created
on the device and the whole update (bias corrections included) compiles.
Neuron tensors get the same here; without it the counters are CPU scalars
and every op touching them is a host step. PyTorch's optimizers support
capturable on the PrivateUse1 device (``_get_capturable_supported_devices``).
"""

from __future__ import annotations


def _neuron_group(opt, group) -> bool:
    params = group.get("params", [])
    return (
        "capturable" in group
        and bool(params)
        and all(p.device.type == "neuron" and p not in opt.state for p in params)
    )


def install() -> None:
    from torch._dynamo.variables import optimizer as ov

    original = ov.OptimizerVariable._set_capturable
    if getattr(original, "_neuron", False):
        return

    def _set_capturable(self, tx):
        for group in self.value.param_groups:
            if _neuron_group(self.value, group):
                group["capturable"] = True
        return original(self, tx)

    _set_capturable._neuron = True
    ov.OptimizerVariable._set_capturable = _set_capturable
