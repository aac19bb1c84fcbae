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
        raise ValueError(f"{_TRANSPORT_ENV}={value!r} is invalid: expected 'auto', 'shm' or 'gloo'")
    return value


def _open_region(store, rank: int, size: int) -> int:
    """Rank 0 creates the memfd; the others open it through /proc. Returns
    this rank's descriptor, or -1 where it could not be opened (then every
    rank falls back to Gloo, decided alike from the store). `store` is this
    incarnation's own (see _incarnation_store)."""
    if rank == 0:
        fd = _C._trn_comm_region_create(size)
        store.set("region", f"{os.getpid()}:{fd}")
        mine = fd
    else:
        pid, fd = store.get("region").decode().split(":")
        try:
            mine = os.open(f"/proc/{pid}/fd/{fd}", os.O_RDWR)
        except OSError:
            mine = -1
    store.set(f"opened/{rank}", "1" if mine >= 0 else "0")
    # Rank 0 keeps its descriptor until every rank reported here.
    opened = [store.get(f"opened/{r}") == b"1" for r in range(size)]
    if all(opened):
        return mine
    if mine >= 0:
        os.close(mine)
    return -1


def _incarnation_store(store, rank: int, size: int):
    """The keys of this incarnation of the group, never another's.

    c10d prefixes a group's store with its name only, and the name repeats:
    the world group is "0" after every destroy_process_group(), and under
    torchrun the agent's store outlives them all. Reusing the keys made a
    rank read the last incarnation's region address (a descriptor number
    that now names another file: "reading the collective region header
    failed: Illegal seek") or Gloo's old addresses (a connect hang). Each
    group rank counts the incarnations it joined, per group size, in the
    store; every member of one incarnation makes the same number of joins,
    so all agree on the count without talking to each other, and the
    incarnation's keys live under it."""
    import torch.distributed as dist

    n = store.add(f"neuron/incarnation/{size}/{rank}", 1)
    return dist.PrefixStore(f"neuron/{size}.{n}/", store)


def _release_keys(store, rank: int, size: int, keys) -> None:
    """Every rank calls this once it read all it needs from this
    incarnation's keys, before it builds the backend; the last one deletes
    them (a rank that lost count then waits and times out instead of
    reading stale values). This is each rank's last use of the store: the
    backend's construction then waits for every rank (the shared region's
    attach, Gloo's connections), so the rank that hosts the store cannot
    return from init_process_group and exit (accelerate's notebook_launcher
    checks the environment with processes that only build the group) while
    a peer still talks to its store."""
    if store.add("left", 1) != size:
        return
    for key in list(keys) + ["left"]:
        try:
            store.delete_key(key)
        except Exception:  # noqa: BLE001 - a store without deletion keeps them
            return


def _create_backend(opts, pg_options=None):
    # A forked child of a process that started the runtime fails here, on
    # every rank at once and before any store traffic, with the error
    # accelerate's notebook_launcher looks for ("Cannot re-initialize
    # NEURON in forked subprocess"), not with a peer's connection reset.
    from .._device import _lazy_init

    _lazy_init()
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
    store = _incarnation_store(store, rank, size)
    keys = []
    fd = -1
    if choice != "gloo" and size > 0:
        store.set(f"host/{rank}", _host_identity())
        hosts = {store.get(f"host/{r}") for r in range(size)}
        keys += [f"host/{r}" for r in range(size)]
        if len(hosts) == 1:
            fd = _open_region(store, rank, size)
            keys += ["region"] + [f"opened/{r}" for r in range(size)]
        if fd < 0 and choice == "shm":
            raise RuntimeError(
                f"{_TRANSPORT_ENV}=shm, but the ranks of this "
                "group are not on one host (or cannot share "
                "memory)"
            )
    _release_keys(store, rank, size, keys)
    gloo = None
    try:
        if fd < 0:
            import torch.distributed as dist

            # Gloo's own rendezvous keys stay (their names are Gloo's); they
            # are under this incarnation's prefix, so never read again.
            gloo = dist.ProcessGroupGloo(dist.PrefixStore("gloo/", store), rank, size, timeout)
            # Gloo's mesh can be up on rank 0 while a peer still finishes
            # its connections: as the region's attach, nobody leaves first.
            gloo.barrier().wait()
        backend = _C.ProcessGroupNeuron(rank, size, timeout_ms, fd, gloo)
    finally:
        if fd >= 0:
            os.close(fd)  # the mapping keeps the region alive
    return backend


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
        dist.Backend.register_backend(
            "neuron", _create_backend, extended_api=True, devices=["neuron"]
        )
    _registered = True


__all__ = ["ProcessGroupNeuron"]


def __getattr__(name):
    if name == "ProcessGroupNeuron":
        return _C.ProcessGroupNeuron
    raise AttributeError(name)
