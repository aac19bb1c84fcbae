"""Strict mode's model of the NeuronCores one process sees on a Trn2, and the
device and process-group checks that follow from it.

Owner: the device count TorchNeuron reports under the logical core
configuration, one visible core per distributed rank, and the documented
process-group errors. strict.py installs these checks; apis.py wraps the
``torch.distributed`` calls they apply to.

What TorchNeuron does (torchneuron.md §2 and §4; [R]
``torch_neuronx/distributed/backend.py``):
- ``device_count()`` counts logical NeuronCores. A Trainium2 chip has 8
  physical cores; ``NEURON_LOGICAL_NC_CONFIG=2`` (the Trn2 default) groups two
  per logical core (4 per chip), ``=1`` none (8 per chip). A trn2.48xlarge has
  16 chips. ``NEURON_RT_VISIBLE_CORES`` lists the logical cores a process
  sees (renumbered from 0); ``NEURON_RT_NUM_CORES`` asks for a count.
- ``init_process_group(backend="neuron")`` sets ``NEURON_RT_VISIBLE_CORES`` to
  the local rank when it is unset, asserts that the runtime was not started
  before ("Neuron runtime should not be initialized before the
  init_process_group") and that the process sees exactly one core
  ("Attempted to have more than one device per process in distributed
  setup"): from then on each rank is ``neuron:0`` and ``device_count()`` is 1.
- ``barrier`` works on the default group only (NotImplementedError);
  ``all_to_all_single`` takes no split sizes but None or all ones
  (NotImplementedError "Only even split sizes are supported").

OpenNeuron is more permissive: a rank sees every local core (``neuron:1`` works
in rank 1), the default count is 2 whatever the configuration, and the
process group accepts all of the above. Without a launcher and without core
variables the model is one chip (trn2.3xlarge, the smallest Trn2).
"""

from __future__ import annotations

import os

PHYSICAL_CORES_PER_CHIP = 8
CHIPS_LARGEST = 16  # trn2.48xlarge
_UNAVAILABLE_BACKENDS = ("nccl", "mpi", "ucc", "xccl")


def _parse_cores(text: str) -> "list[int] | None":
    """``'0-1,3'`` -> [0, 1, 3]; None when malformed (the runtime reports that)."""
    out: list[int] = []
    try:
        for part in text.split(","):
            lo, _, hi = part.strip().partition("-")
            a, b = int(lo), int(hi) if hi else int(lo)
            if a < 0 or b < a:
                return None
            out.extend(range(a, b + 1))
    except ValueError:
        return None
    return out


class DeviceModel:
    """What ``device_count()`` is on a Trn2 under this process's environment
    (``count``), why (``why``), or the configuration error real Neuron
    reports (``error``)."""

    def __init__(self, environ=None):
        env = os.environ if environ is None else environ
        self.error: "str | None" = None
        self.launcher = bool(env.get("LOCAL_RANK")) and bool(
            env.get("LOCAL_WORLD_SIZE") or env.get("WORLD_SIZE")
        )
        self.user_visible = bool(env.get("NEURON_RT_VISIBLE_CORES", "").strip())
        self.distributed = False  # init_process_group(backend="neuron") ran
        self.first_use: "str | None" = None  # where the program first used the device
        lnc_text = env.get("NEURON_LOGICAL_NC_CONFIG", "").strip() or "2"
        if lnc_text not in ("1", "2"):
            self.lnc = 2
            self.error = (
                f"NEURON_LOGICAL_NC_CONFIG={lnc_text!r} is invalid: a Trn2 groups 1 or 2 physical "
                f"NeuronCores per logical core"
            )
        else:
            self.lnc = int(lnc_text)
        per_chip = PHYSICAL_CORES_PER_CHIP // self.lnc
        self.max_cores = per_chip * CHIPS_LARGEST
        visible = env.get("NEURON_RT_VISIBLE_CORES", "").strip()
        num = env.get("NEURON_RT_NUM_CORES", "").strip()
        self.count: "int | None" = None
        self.why = ""
        if visible:
            cores = _parse_cores(visible)
            if cores is not None:
                self.count = len(cores)
                self.why = f"NEURON_RT_VISIBLE_CORES={visible!r}"
                too_big = [c for c in cores if c >= self.max_cores]
                if too_big and self.error is None:
                    self.error = (
                        f"NEURON_RT_VISIBLE_CORES={visible!r} names logical core {too_big[0]}: a "
                        f"Trn2 has at most {self.max_cores} at NEURON_LOGICAL_NC_CONFIG={self.lnc} "
                        f"(trn2.48xlarge, {CHIPS_LARGEST} chips x {per_chip})"
                    )
        elif self.launcher:
            self.count = 1
            self.why = (
                f"one core per distributed rank: TorchNeuron's init_process_group sets "
                f"NEURON_RT_VISIBLE_CORES to LOCAL_RANK ({env.get('LOCAL_RANK')}), which is "
                f"neuron:0 in the rank"
            )
        elif num.isdigit() and int(num) > 0:
            self.count = int(num)
            self.why = f"NEURON_RT_NUM_CORES={num}"
            if self.count > self.max_cores and self.error is None:
                self.error = (
                    f"NEURON_RT_NUM_CORES={num} is more than the {self.max_cores} logical cores of "
                    f"the largest Trn2 at NEURON_LOGICAL_NC_CONFIG={self.lnc}"
                )
        else:
            self.count = per_chip
            self.why = (
                f"one Trn2 chip at NEURON_LOGICAL_NC_CONFIG={self.lnc}: {per_chip} logical "
                f"NeuronCores of {PHYSICAL_CORES_PER_CHIP} physical"
            )

        self._initial = (self.count, getattr(self, "why", None))

    def restart(self) -> "DeviceModel":
        """The state of a program that has not started (a new evaluation)."""
        self.count, self.why = self._initial
        self.distributed = False
        self.first_use = None
        return self

    def configure(self, environ=None) -> None:
        """Sets what the runtime reads its device count from, so
        ``torch.neuron.device_count()`` agrees (effective only before the
        runtime first reads it: at import, or in ``neuron-evaluate --strict``
        before the program runs)."""
        env = os.environ if environ is None else environ
        if self.error is not None or self.count is None or self.user_visible:
            return
        if self.launcher:
            env["NEURON_RT_VISIBLE_CORES"] = env["LOCAL_RANK"]
        elif not env.get("NEURON_RT_NUM_CORES", "").strip():
            env["NEURON_RT_NUM_CORES"] = str(self.count)

    # ---- checks (each returns the failure's message, or None) ------------------------------

    def check_index(self, index: "int | None") -> "str | None":
        if self.error is not None:
            return self.error
        if self.count is None:
            return None
        if index is None:
            from .. import _C

            index = _C._get_device()
        if index >= self.count:
            return (
                f"neuron:{index} is not a visible device: the process sees {self.count} "
                f"NeuronCore{'s' if self.count != 1 else ''} ({self.why}); on Trainium the "
                f"indices are 0..{self.count - 1}"
                + ("; use torch.device('neuron')" if self.count == 1 else "")
            )
        return None

    def check_process_group(self, backend: "str | None") -> "tuple[str, str] | None":
        """(limit key, message) when TorchNeuron's init_process_group fails."""
        b = (backend or "").lower()
        bad = [u for u in _UNAVAILABLE_BACKENDS if u in b]
        if bad:
            return (
                "pg_backend_unavailable",
                f"init_process_group(backend={backend!r}): {bad[0]} does not exist on Trainium",
            )
        if backend is not None and "neuron" not in b:
            return None  # gloo: CPU tensors, as anywhere
        if self.first_use is not None:
            return (
                "pg_runtime_init",
                f"init_process_group(backend={backend or 'neuron'!r}) after the program used the "
                f"device (first at {self.first_use}): Neuron runtime should not be initialized "
                f"before the init_process_group",
            )
        if self.user_visible and (self.count or 0) > 1:
            return (
                "pg_one_core",
                f"init_process_group with {self.why} ({self.count} cores): Attempted to have more "
                f"than one device per process in distributed setup",
            )
        return None

    def joined_process_group(self) -> None:
        self.distributed = True
        self.count = 1
        if not self.user_visible:
            self.why = (
                "one core per distributed rank: init_process_group set NEURON_RT_VISIBLE_CORES to "
                "the local rank"
            )


def barrier_unsupported(group) -> bool:
    """TorchNeuron's barrier works on the default group only."""
    import torch.distributed as dist

    if (
        group is None
        or group is dist.GroupMember.WORLD
        or group is dist.GroupMember.NON_GROUP_MEMBER
    ):
        return False
    try:
        if "neuron" not in str(dist.get_backend(group)).lower():
            return False
        return dist.get_world_size() != dist.get_world_size(group)
    except (RuntimeError, ValueError):
        return False


def uneven_split(sizes) -> bool:
    """all_to_all_single split sizes TorchNeuron rejects (only None or all 1s)."""
    return bool(sizes) and not all(int(s) == 1 for s in sizes)


def neuron_group(group) -> bool:
    import torch.distributed as dist

    try:
        return "neuron" in str(dist.get_backend(group)).lower()
    except (RuntimeError, ValueError):
        return False


_model: "DeviceModel | None" = None


def model() -> DeviceModel:
    """The process's model (made on first use from the environment)."""
    global _model
    if _model is None:
        _model = DeviceModel()
    return _model


def configure() -> DeviceModel:
    """A fresh model from the environment, applied to it (strict mode's start)."""
    global _model
    _model = DeviceModel()
    _model.configure()
    return _model
