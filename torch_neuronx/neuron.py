"""``torch.neuron``: the device module of the neuron device (plays ``torch.cuda``'s role)."""

import torch

from ._device import (
    _get_device_index,
    _is_in_bad_fork,
    _lazy_init,
    current_device,
    device,
    device_count,
    device_of,
    get_device_capability,
    get_device_name,
    get_device_properties,
    init,
    is_available,
    is_initialized,
    set_device,
    synchronize,
)
from . import memory
from .memory import (
    _dump_snapshot,
    _record_memory_history,
    _snapshot,
    get_per_process_memory_fraction,
    memory_snapshot,
    set_per_process_memory_fraction,
    empty_cache,
    max_memory_allocated,
    max_memory_reserved,
    mem_get_info,
    memory_allocated,
    memory_reserved,
    memory_stats,
    memory_summary,
    reset_accumulated_memory_stats,
    reset_peak_memory_stats,
)
from .random import (
    default_generators,
    get_rng_state,
    get_rng_state_all,
    initial_seed,
    manual_seed,
    manual_seed_all,
    seed,
    seed_all,
    set_rng_state,
    set_rng_state_all,
)
from .streams import (
    Event,
    Stream,
    StreamContext,
    current_stream,
    default_stream,
    set_stream,
    stream,
)


def get_amp_supported_dtype() -> list[torch.dtype]:
    """Dtypes ``torch.autocast("neuron", dtype=...)`` accepts."""
    return [torch.float16, torch.bfloat16, torch.float32]


def is_bf16_supported(including_emulation: bool = True) -> bool:
    return True


def wait_stream(stream: torch.Stream) -> None:  # noqa: F811 - torch.cuda's parameter name
    """Make the current stream wait for all work queued on ``stream``."""
    current_stream(stream.device_index).wait_stream(stream)


def record_event(event: "Event | None" = None) -> "Event":
    """Record ``event`` (a new one if None) on the current stream."""
    event = Event() if event is None else event
    event.record()
    return event


def wait_event(event: torch.Event) -> None:
    """Make the current stream wait for ``event``."""
    event.wait(current_stream())


def query() -> bool:
    """True when the current stream has finished all its work."""
    return current_stream().query()
