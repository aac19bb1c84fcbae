"""Distributed programs compiled with backend="neuron" (issue 21 item 3)."""

import pytest

from _dist_harness import check_ranks


def _run(fn, world, timeout=240):
    return check_ranks(fn, world, timeout=timeout, module="_compile_dist_workers")


def test_ddp_compiled():
    _run("ddp_compiled", 2)


def test_fsdp2_compiled_blocks():
    _run("fsdp2_compiled", 2)
