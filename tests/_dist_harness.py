"""Runs a worker function of tests/_dist_workers.py in `world` fresh
processes, as torchrun would (RANK, WORLD_SIZE, LOCAL_RANK, MASTER_*), with a
hard timeout: on expiry every rank's process group is killed, so a hung rank
can never hang the suite. Returns {rank: CompletedProcess-like}."""

import os
import signal
import socket
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_ranks(
    fn: str,
    world: int,
    env: dict | None = None,
    timeout: float = 90,
    args: str = "",
    module: str = "_dist_workers",
):
    port = free_port()
    procs = []
    for rank in range(world):
        e = dict(os.environ)
        e.update(
            {
                "MASTER_ADDR": "127.0.0.1",
                "MASTER_PORT": str(port),
                "RANK": str(rank),
                "WORLD_SIZE": str(world),
                "LOCAL_RANK": str(rank),
                "LOCAL_WORLD_SIZE": str(world),
                "OMP_NUM_THREADS": "1",
                "TORCH_NEURONX_NUM_THREADS": "1",
                "DIST_FN": fn,
                "DIST_ARGS": args,
            }
        )
        e.update(env or {})
        procs.append(
            subprocess.Popen(
                [
                    sys.executable,
                    "-c",
                    f"import sys; sys.path.insert(0, {HERE!r}); import {module}; {module}.main()",
                ],
                env=e,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
                start_new_session=True,
            )
        )
    deadline = time.monotonic() + timeout
    outs = {}
    try:
        for rank, p in enumerate(procs):
            left = max(0.1, deadline - time.monotonic())
            out, _ = p.communicate(timeout=left)
            outs[rank] = (p.returncode, out)
    except subprocess.TimeoutExpired:
        for p in procs:
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGKILL)
        for rank, p in enumerate(procs):
            out, _ = p.communicate()
            outs[rank] = (p.returncode, out)
        raise AssertionError(
            f"{fn} (world {world}) timed out after {timeout}s:\n"
            + "\n".join(f"--- rank {r} ---\n{o[1][-3000:]}" for r, o in outs.items())
        )
    return outs


def check_ranks(
    fn: str,
    world: int,
    env: dict | None = None,
    timeout: float = 90,
    args: str = "",
    module: str = "_dist_workers",
):
    outs = run_ranks(fn, world, env, timeout, args, module)
    bad = {r: o for r, o in outs.items() if o[0] != 0}
    assert not bad, f"{fn} (world {world}) failed:\n" + "\n".join(
        f"--- rank {r} (exit {o[0]}) ---\n{o[1][-4000:]}" for r, o in bad.items()
    )
    return outs


def run_torchrun(
    fn: str, nproc: int, env: dict | None = None, timeout: float = 120, args: str = ""
):
    """Runs DIST_FN under `torchrun --standalone` (its agent's store outlives
    every process group, unlike run_ranks' per-group store), with the same
    hard timeout. Returns (returncode, combined output); raises on timeout."""
    e = dict(os.environ)
    e.update(
        {"OMP_NUM_THREADS": "1", "TORCH_NEURONX_NUM_THREADS": "1", "DIST_FN": fn, "DIST_ARGS": args}
    )
    e.update(env or {})
    cmd = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        f"--nproc-per-node={nproc}",
        os.path.join(HERE, "_dist_torchrun.py"),
    ]
    p = subprocess.Popen(
        cmd,
        env=e,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    try:
        out, _ = p.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGKILL)
        out, _ = p.communicate()
        raise AssertionError(
            f"torchrun {fn} ({nproc} ranks) timed out after {timeout}s:\n" + out[-6000:]
        )
    return p.returncode, out
