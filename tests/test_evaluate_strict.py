"""Strict mode's device and process-group emulation (docs/evaluate.md,
"Strict mode"): ``neuron-evaluate --strict`` on
tests/evaluate_programs/planted_strict_dist.py, one case per emulated
TorchNeuron behaviour, each reported as the run's error at the line marked
``PLANT-<kind>``; the "clean" case (the TorchNeuron way, two ranks) reports
nothing. Each run is a fresh process: the device count is read once, and the
launcher's variables (LOCAL_RANK, ...) are per process."""

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from test_evaluate import plant

PROGRAM = Path(__file__).resolve().parent / "evaluate_programs" / "planted_strict_dist.py"
ROOT = Path(__file__).resolve().parent.parent
_CLEARED = (
    "TORCH_NEURONX_STRICT",
    "NEURON_RT_VISIBLE_CORES",
    "NEURON_RT_NUM_CORES",
    "NEURON_LOGICAL_NC_CONFIG",
    "LOCAL_RANK",
    "LOCAL_WORLD_SIZE",
    "RANK",
    "WORLD_SIZE",
    "MASTER_PORT",
)
RANK1 = {"RANK": "1", "WORLD_SIZE": "2", "LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "2"}


def _port() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return str(s.getsockname()[1])


def _env(extra: dict) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in _CLEARED}
    env.update(PYTHONPATH=str(ROOT), MASTER_ADDR="127.0.0.1", **extra)
    return env


def _evaluate(case: str, tmp_path, env: dict, strict: bool = True) -> subprocess.Popen:
    cmd = [sys.executable, "-m", "torch_neuronx.evaluate", "--quiet", "--no-shadow"]
    cmd += ["--no-compile", "--no-cpu", "--json", str(tmp_path / f"{case}.json")]
    cmd += (["--strict"] if strict else []) + [str(PROGRAM), case]
    return subprocess.Popen(
        cmd, env=_env(env), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )


def _peer(case: str, env: dict) -> subprocess.Popen:
    """Another rank, plain python under TORCH_NEURONX_STRICT=1."""
    return subprocess.Popen(
        [sys.executable, str(PROGRAM), case],
        env=_env(dict(env, TORCH_NEURONX_STRICT="1")),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def _report(proc: subprocess.Popen, case: str, tmp_path) -> tuple[int, dict, str]:
    out, _ = proc.communicate(timeout=240)
    return proc.returncode, json.loads((tmp_path / f"{case}.json").read_text()), out


# case -> (environment, planted kind, error type, words the message must hold)
CASES = {
    "device_index": (
        RANK1,
        "device_index",
        "NeuronStrictError",
        ["neuron:1 is not a visible device", "1 NeuronCore", "one core per distributed rank"],
    ),
    "set_device": (RANK1, "set_device", "NeuronStrictError", ["neuron:1 is not a visible"]),
    "device_count": (
        {},
        "device_count",
        "NeuronStrictError",
        ["neuron:4 is not a visible device", "NEURON_LOGICAL_NC_CONFIG=2", "0..3"],
    ),
    "runtime_init": (
        {"MASTER_PORT": None},
        "runtime_init",
        "NeuronStrictError",
        ["Neuron runtime should not be initialized before the init_process_group"],
    ),
    "one_core": (
        {"MASTER_PORT": None, "NEURON_RT_VISIBLE_CORES": "0-1"},
        "one_core",
        "NeuronStrictError",
        ["more than one device per process"],
    ),
    "nccl": (
        {"MASTER_PORT": None},
        "nccl",
        "NeuronStrictError",
        ["init_process_group(backend='nccl'): nccl does not exist on Trainium"],
    ),
    "alltoall": (
        {"MASTER_PORT": None},
        "alltoall",
        "NeuronStrictNotImplementedError",
        ["all_to_all_single(split sizes [2] / [2])", "Only even split sizes"],
    ),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_strict_trips_at_the_planted_line(case, tmp_path):
    env, kind, etype, words = CASES[case]
    env = {k: (_port() if v is None else v) for k, v in env.items()}
    rc, report, out = _report(_evaluate(case, tmp_path, env), case, tmp_path)
    assert rc == 1, out
    err = report["runs"]["error"]
    assert err["type"] == etype and err["location"] == plant(PROGRAM, kind), err
    for w in words:
        assert w in err["message"], (w, err["message"])
    assert "TorchNeuron:" in err["message"]  # the documented limit is cited
    # (A process-group call TorchNeuron lacks is also a fidelity finding.)
    also = {"alltoall": ["pg_alltoall"], "nccl": ["pg_backend"]}.get(case, [])
    assert sorted((f["kind"], f["location"]) for f in report["findings"]) == sorted(
        (k, plant(PROGRAM, kind)) for k in ["error"] + also
    )


def test_strict_device_count_follows_the_logical_core_configuration(tmp_path, python):
    """torch.neuron.device_count() / torch.accelerator: a Trn2 chip's logical
    cores (4 at LNC=2, 8 at LNC=1), the listed cores, one per launched rank."""
    code = "import torch; print(torch.neuron.device_count(), torch.accelerator.device_count())"
    for extra, want in (
        ({}, "4 4"),
        ({"NEURON_LOGICAL_NC_CONFIG": "1"}, "8 8"),
        ({"NEURON_RT_VISIBLE_CORES": "2-4"}, "3 3"),
        (RANK1, "1 1"),
    ):
        r = python(code, env=_env(dict(extra, TORCH_NEURONX_STRICT="1")))
        assert r.returncode == 0 and r.stdout.split("\n")[-2] == want, (extra, r.stdout, r.stderr)
    # LNC=1 has the 8 cores the planted program touches: nothing to report.
    rc, report, out = _report(
        _evaluate("device_count", tmp_path, {"NEURON_LOGICAL_NC_CONFIG": "1"}),
        "device_count",
        tmp_path,
    )
    assert rc == 0 and report["findings"] == [], out
    # Not a Trn2 configuration: the first device use fails, at its line.
    r = python(
        "import torch\nx = torch.ones(1, device='neuron')\n",
        env=_env({"TORCH_NEURONX_STRICT": "1", "NEURON_LOGICAL_NC_CONFIG": "3"}),
    )
    assert r.returncode == 1 and "NEURON_LOGICAL_NC_CONFIG='3' is invalid" in r.stderr
    assert "at <string>:2" in r.stderr


def test_strict_barrier_on_a_subgroup_two_ranks(tmp_path):
    port = _port()
    peer = _peer("barrier", dict(RANK1, MASTER_PORT=port))
    env = {"RANK": "0", "WORLD_SIZE": "2", "LOCAL_RANK": "0", "LOCAL_WORLD_SIZE": "2"}
    rc, report, out = _report(
        _evaluate("barrier", tmp_path, dict(env, MASTER_PORT=port)), "barrier", tmp_path
    )
    peer_out, _ = peer.communicate(timeout=240)
    assert peer.returncode == 0, peer_out  # rank 1 is not in the group: no barrier
    err = report["runs"]["error"]
    assert rc == 1 and err["type"] == "NeuronStrictNotImplementedError", out
    assert err["location"] == plant(PROGRAM, "barrier")
    assert "implemented only for the default group" in err["message"]


def test_strict_clean_two_ranks_reports_nothing(tmp_path):
    """The TorchNeuron way (init first, torch.device("neuron"), default-group
    barrier, even all-to-all): nothing reported, and the collectives are right
    with one visible core per rank."""
    port = _port()
    peer = _peer("clean", dict(RANK1, MASTER_PORT=port))
    env = {"RANK": "0", "WORLD_SIZE": "2", "LOCAL_RANK": "0", "LOCAL_WORLD_SIZE": "2"}
    rc, report, out = _report(
        _evaluate("clean", tmp_path, dict(env, MASTER_PORT=port)), "clean", tmp_path
    )
    peer_out, _ = peer.communicate(timeout=240)
    assert rc == 0 and report["runs"]["ok"] and report["findings"] == [], out
    assert "clean 0 12.0 12.0" in out and "clean 1 12.0 12.0" in peer_out, peer_out


def test_not_strict_reports_process_group_limits_at_their_lines(tmp_path):
    """Without --strict the same all_to_all_single runs (OpenNeuron supports
    it) and is a fidelity finding at its line, with the documented limit."""
    rc, report, out = _report(
        _evaluate("alltoall", tmp_path, {"MASTER_PORT": _port()}, strict=False),
        "alltoall",
        tmp_path,
    )
    assert rc == 0 and report["runs"]["ok"], out
    (f,) = report["findings"]
    assert (f["kind"], f["location"]) == ("pg_alltoall", plant(PROGRAM, "alltoall"))
    assert "Only even split sizes" in f["limit"]
