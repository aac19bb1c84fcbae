"""The ``neuron`` c10d backend (TorchNeuron's ``init_process_group("neuron")``).

Owns the backend's registration and its factory: the factory decides the
transport (libtrn's shared-memory engine when every rank of the group is on
this host, Gloo on CPU aliases of device memory otherwise or when forced with
TORCH_NEURONX_DIST_TRANSPORT=gloo) and hands the shared region's descriptor
from rank 0 to the others through the group's store. The collectives
themselves are C++ (distributed/process_group.cpp) and C (libtrn/src/collectives).
"""
import os
import socket

import torch

from .. import _C

_TRANSPORT_ENV = "TORCH_NEURONX_DIST_TRANSPORT"
_registered = False


def _host_identity() -> str:
    # Same hostname is not enough inside containers; boot_id tells kernels apart.
    try:
        with open("/proc/sys/kernel/random/boot_id") as f:
            boot = f.read().strip()
    except OSError:
        boot = ""
    return f"{socket.gethostname()}|{boot}"


def _transport_choice() -> str:
    value = os.environ.get(_TRANSPORT_ENV, "auto").strip().lower() or "auto"
    if value not in ("auto", "shm", "gloo"):
        raise ValueError(f"{_TRANSPORT_ENV}={value!r} is invalid: expected "
                         "'auto', 'shm' or 'gloo'")
    return value


def _open_region(store, rank: int, size: int) -> int:
    """Rank 0 creates the memfd; the others open it through /proc. Returns
    this rank's descriptor, or -1 where it could not be opened (then every
    rank falls back to Gloo, decided alike from the store)."""
    if rank == 0:
        fd = _C._trn_comm_region_create(size)
        store.set("neuron/region", f"{os.getpid()}:{fd}")
        mine = fd
    else:
        pid, fd = store.get("neuron/region").decode().split(":")
        try:
            mine = os.open(f"/proc/{pid}/fd/{fd}", os.O_RDWR)
        except OSError:
            mine = -1
    store.set(f"neuron/opened/{rank}", "1" if mine >= 0 else "0")
    # Rank 0 keeps its descriptor until every rank reported here.
    opened = [store.get(f"neuron/opened/{r}") == b"1" for r in range(size)]
    if all(opened):
        return mine
    if mine >= 0:
        os.close(mine)
    return -1


def _create_backend(opts, pg_options=None):
    return _make_backend(opts.store, opts.group_rank, opts.group_size, opts.timeout)


def _split_backend(store, rank: int, size: int, timeout_ms: int):
    """Called by ProcessGroupNeuron::split (dist.split_group) on each member
    of the new group: `store` is already prefixed with the group's unique
    name, so its region rendezvous never meets another group's keys."""
    from datetime import timedelta
    return _make_backend(store, rank, size, timedelta(milliseconds=timeout_ms))


def _make_backend(store, rank: int, size: int, timeout):
    timeout_ms = int(timeout.total_seconds() * 1000)
    choice = _transport_choice()
    fd = -1
    if choice != "gloo" and size > 0:
        store.set(f"neuron/host/{rank}", _host_identity())
        hosts = {store.get(f"neuron/host/{r}") for r in range(size)}
        if len(hosts) == 1:
            fd = _open_region(store, rank, size)
        if fd < 0 and choice == "shm":
            raise RuntimeError(f"{_TRANSPORT_ENV}=shm, but the ranks of this "
                               "group are not on one host (or cannot share "
                               "memory)")
    gloo = None
    if fd < 0:
        import torch.distributed as dist
        gloo = dist.ProcessGroupGloo(dist.PrefixStore("neuron/gloo/", store),
                                     rank, size, timeout)
    try:
        return _C.ProcessGroupNeuron(rank, size, timeout_ms, fd, gloo)
    finally:
        if fd >= 0:
            os.close(fd)  # the mapping keeps the region alive


def _default_device_count_for_launcher() -> None:
    """Under torchrun each rank uses device LOCAL_RANK. With more local ranks
    than the default core count and no explicit core settings, the device
    count follows the launcher (TorchNeuron's one-process-per-core model)."""
    if "NEURON_RT_VISIBLE_CORES" in os.environ or "NEURON_RT_NUM_CORES" in os.environ:
        return
    try:
        local = int(os.environ.get("LOCAL_WORLD_SIZE", "0"))
    except ValueError:
        return
    if local > 2:
        os.environ["NEURON_RT_NUM_CORES"] = str(local)


def _register() -> None:
    global _registered
    if _registered:
        return
    import torch.distributed as dist
    if not dist.is_available():
        return
    _C._init_distributed()
    if "neuron" not in dist.Backend.backend_list:
        dist.Backend.register_backend("neuron", _create_backend,
                                      extended_api=True, devices=["neuron"])
    _registered = True


__all__ = ["ProcessGroupNeuron"]


def __getattr__(name):
    if name == "ProcessGroupNeuron":
        return _C.ProcessGroupNeuron
    raise AttributeError(name)
