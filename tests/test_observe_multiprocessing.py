"""Neuron tensors through torch.multiprocessing queues and pipes (shared
device memory, both directions) and DataLoader workers returning neuron
tensors. Nothing may be left in /dev/shm."""

import os
import re

import torch
import torch.multiprocessing as mp

import observe_mp_helpers as helpers


import pytest

FULL = os.environ.get("OPENNEURON_FULL_TESTS") == "1"


def _shm_files():
    return set(os.listdir("/dev/shm"))


def _leaked(before):
    """New /dev/shm entries, except Python's semaphores of queues still alive.
    libtrn's stats pages and shared device memory are memfds, never here;
    trn-stats-<pid> files of other processes come from older builds running
    on the same machine."""

    def other_page(f):
        m = re.fullmatch(r"trn-stats-(\d+)", f)
        return m is not None and int(m.group(1)) != os.getpid()

    return {f for f in _shm_files() - before if not f.startswith("sem.mp-") and not other_page(f)}


def test_queue_and_pipe_share_device_memory():
    before = _shm_files()
    ctx = mp.get_context("spawn")
    inq, outq = ctx.Queue(), ctx.Queue()
    parent_conn, child_conn = ctx.Pipe()
    t = torch.ones(4, 5, device="neuron")
    p = ctx.Process(target=helpers.child_roundtrip, args=(inq, outq, child_conn))
    p.start()
    try:
        inq.put(t)
        assert outq.get(timeout=120) == 20.0
        theirs = outq.get(timeout=60)
        column = parent_conn.recv()
        assert outq.get(timeout=60) == "done"
        # the child's in-place add is visible here: same device memory
        assert torch.equal(t.cpu(), torch.full((4, 5), 2.0))
        assert theirs.device.type == "neuron"
        assert torch.equal(theirs.cpu(), torch.arange(6.0).reshape(2, 3))
        assert torch.equal(column.cpu(), torch.tensor([1.0, 4.0]))
        inq.put("bye")
        p.join(60)
        assert p.exitcode == 0
        from torch_neuronx.cli import stats_pages

        assert p.pid not in dict(stats_pages.page_files())
        # the child is gone; its tensors' memory lives on while held here
        assert torch.equal((theirs * 2).cpu(), torch.arange(6.0).reshape(2, 3) * 2)
        del theirs, column
    finally:
        if p.is_alive():
            p.kill()
    assert _leaked(before) == set()


def _check_loader(**kwargs):
    before = _shm_files()
    loader = torch.utils.data.DataLoader(
        helpers.NeuronDataset(), batch_size=2, num_workers=2, **kwargs
    )
    batches = [b for b in loader]
    assert len(batches) == 4
    assert all(b.device.type == "neuron" for b in batches)
    got = torch.cat([b.cpu() for b in batches])
    assert torch.equal(got[:, 0], torch.arange(8.0))
    # the workers computed with the parent's weight (inherited by fork / pickled)
    assert torch.equal(got[:, 1], torch.arange(8.0) * 3 + 1)
    del loader, batches
    assert _leaked(before) == set()


def test_dataloader_workers_return_neuron_tensors_default_fork():
    # The parent used the device (kernels, the thread pool) before forking.
    w = torch.nn.Linear(16, 16).to("neuron")
    assert w(torch.ones(2, 16, device="neuron")).shape == (2, 16)
    _check_loader()


@pytest.mark.skipif(
    not FULL, reason="spawns two workers (~20 s here); OPENNEURON_FULL_TESTS=1 runs it"
)
def test_dataloader_workers_return_neuron_tensors_spawn():
    _check_loader(multiprocessing_context="spawn")
