"""Per-device random generators for ``torch.neuron`` (mirrors ``torch.cuda.random``).

Random ops on neuron draw from the device's default generator, so
``torch.manual_seed`` / ``torch.neuron.manual_seed`` make them reproducible,
independently of the CPU generator.
"""

from __future__ import annotations

from typing import Any, Iterable

import torch

from . import _C
from ._device import _get_device_index, device_count


def _generator(device: Any = None) -> torch.Generator:
    return _C._get_default_generator(_get_device_index(device))


class _DefaultGenerators:
    """``torch.neuron.default_generators[i]``, created on first access."""

    def __getitem__(self, index: int) -> torch.Generator:
        return _generator(index)

    def __len__(self) -> int:
        return device_count()

    def __iter__(self):
        return (_generator(i) for i in range(device_count()))


default_generators = _DefaultGenerators()


def manual_seed(seed: int) -> None:
    """Seed the current device's generator."""
    _generator().manual_seed(int(seed))


def manual_seed_all(seed: int) -> None:
    for gen in default_generators:
        gen.manual_seed(int(seed))


def seed() -> None:
    """Seed the current device's generator with a non-deterministic value."""
    _generator().seed()


def seed_all() -> None:
    value = _generator(0).seed()
    for gen in default_generators:
        gen.manual_seed(value)


def initial_seed() -> int:
    return _generator().initial_seed()


def get_rng_state(device: Any = "neuron") -> torch.Tensor:
    return _generator(device).get_state()


def set_rng_state(new_state: torch.Tensor, device: Any = "neuron") -> None:
    _generator(device).set_state(new_state.clone())


def get_rng_state_all() -> list[torch.Tensor]:
    return [gen.get_state() for gen in default_generators]


def set_rng_state_all(new_states: Iterable[torch.Tensor]) -> None:
    for i, state in enumerate(new_states):
        set_rng_state(state, i)
