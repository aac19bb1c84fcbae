"""Neuron tensors through ``torch.multiprocessing`` queues and pipes (and so
DataLoader workers): pickling a neuron tensor moves its storage into shared
device memory once (csrc/runtime/ipc.cpp, trn/ipc.h) and sends a file
descriptor; the receiver maps the same memory, so both see each other's
writes. Each process's tensors hold a reference; the memory is freed when
the last holder lets go. The memory is an anonymous memory file, so nothing
can be left in /dev/shm.

Any start method works: a child forked after the parent used the device
keeps using it (libtrn's fork handlers, libtrn/src/runtime/fork.c), so
DataLoader workers with the default ``fork`` method return neuron tensors.
"""

from __future__ import annotations

from multiprocessing import reduction

import torch
import torch.multiprocessing  # noqa: F401  (installs torch's reducers first; ours wrap them)
from torch.multiprocessing import reductions as _torch_reductions

from . import _C


def _rebuild_storage(dupfd, nbytes: int, device: int) -> torch.UntypedStorage:
    fd = dupfd.detach()
    try:
        return _C._open_shared_storage(fd, nbytes, device)
    finally:
        import os

        os.close(fd)


def _storage_args(storage: torch.UntypedStorage):
    import os
    from multiprocessing import util
    from multiprocessing.context import get_spawning_popen

    fd, nbytes, device = _C._share_storage(storage)
    popen = get_spawning_popen()
    if popen is not None:
        # Pickled as a new process's argument (spawn): the fd itself is
        # handed to the child at exec, so it stays open as long as the
        # process object does.
        util.Finalize(popen, os.close, args=(fd,))
        return (reduction.DupFd(fd), nbytes, device)
    try:
        return (reduction.DupFd(fd), nbytes, device)
    finally:
        os.close(fd)  # DupFd keeps its own duplicate until the receiver takes it


def _rebuild_tensor(storage_args, dtype, size, stride, offset, requires_grad, cls):
    storage = _rebuild_storage(*storage_args)
    t = torch.empty(0, dtype=dtype, device=storage.device)
    t.set_(storage, offset, size, stride)
    if cls is torch.nn.Parameter:
        return torch.nn.Parameter(t, requires_grad=requires_grad)
    t.requires_grad_(requires_grad)
    return t


def _reduce_tensor(tensor: torch.Tensor):
    if tensor.device.type != "neuron":
        return _torch_reductions.reduce_tensor(tensor)
    if tensor.requires_grad and not tensor.is_leaf:
        raise RuntimeError(
            "Cowardly refusing to serialize non-leaf tensor which requires_grad, "
            "since autograd does not support crossing process boundaries.  "
            "If you just want to transfer the data, call detach() on the tensor "
            "before serializing (e.g., putting it on the queue)."
        )
    storage = tensor.untyped_storage()
    if storage.nbytes() == 0:
        return (_empty, (tuple(tensor.shape), tensor.dtype, str(tensor.device)))
    cls = torch.nn.Parameter if isinstance(tensor, torch.nn.Parameter) else torch.Tensor
    return (
        _rebuild_tensor,
        (
            _storage_args(storage),
            tensor.dtype,
            tuple(tensor.size()),
            tuple(tensor.stride()),
            tensor.storage_offset(),
            tensor.requires_grad,
            cls,
        ),
    )


def _reduce_storage(storage):
    if storage.device.type != "neuron":
        return _torch_reductions.reduce_storage(storage)
    return (_rebuild_storage, _storage_args(storage))


def _empty(shape, dtype, device):
    return torch.empty(shape, dtype=dtype, device=device)


def install() -> None:
    """Register the neuron-aware reducers (idempotent)."""
    reduction.register(torch.Tensor, _reduce_tensor)
    reduction.register(torch.nn.Parameter, _reduce_tensor)
    reduction.register(torch.UntypedStorage, _reduce_storage)


install()
