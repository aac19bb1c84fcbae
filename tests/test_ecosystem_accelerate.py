"""accelerate on neuron, as its docs run it (issue 24): ``accelerate launch
--num_processes 2`` of an unchanged Trainer script and Accelerator loop
(tests/_ecosystem_launch.py), and a single-process Accelerator loop in
float32, bf16 and fp16 (GradScaler("neuron")), each against the same call
with the CPU. No test calls ``torch.neuron.set_device``: each rank's device
is its own core because LOCAL_RANK picks the default device
(libtrn/src/runtime/device.c), as each rank sees only its core on
TorchNeuron.

Tolerances: float32 on both sides, different summation order (GEMM
blocking, threaded reductions): losses to 2e-4 relative over a few AdamW
steps; bf16 autocast 3e-2 (8 mantissa bits).
"""

import json
import os
import socket
import subprocess
import sys

import pytest
import torch

import torch_neuronx
import _ecosystem as eco
from conftest import run_python

HERE = os.path.dirname(os.path.abspath(__file__))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def launch(out: str, *extra: str) -> subprocess.Popen:
    """``accelerate launch --num_processes 2 tests/_ecosystem_launch.py OUT``,
    the command docs/ecosystem.md gives (plus a free port)."""
    env = dict(os.environ, OMP_NUM_THREADS="1", HF_HOME=os.path.join(out, "hf"))
    cmd = [
        sys.executable,
        "-m",
        "accelerate.commands.launch",
        "--num_processes",
        "2",
        "--main_process_port",
        str(free_port()),
        os.path.join(HERE, "_ecosystem_launch.py"),
        out,
        *extra,
    ]
    return subprocess.Popen(
        cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )


def finish(p: subprocess.Popen, out: str) -> list[dict]:
    log, _ = p.communicate(timeout=600)
    assert p.returncode == 0, log[-6000:]
    return [json.load(open(os.path.join(out, f"rank{r}.json"))) for r in range(2)]


def test_accelerate_launch_two_processes_matches_cpu(tmp_path):
    # Both launches at once: the CPU run (use_cpu / Accelerator(cpu=True),
    # gloo) is the reference for the neuron run (backend "neuron").
    nd, cd = str(tmp_path / "neuron"), str(tmp_path / "cpu")
    os.makedirs(nd)
    os.makedirs(cd)
    pn, pc = launch(nd), launch(cd, "cpu")
    neuron, cpu = finish(pn, nd), finish(pc, cd)
    for rank, (n, c) in enumerate(zip(neuron, cpu)):
        # Each rank trains on its own core without any set_device call.
        assert n["trainer_device"] == f"neuron:{rank}" == n["model_device"] == n["device"]
        assert n["current_device"] == rank
        assert n["world_size"] == 2 and c["world_size"] == 2
        assert n["fallbacks"] == []
        assert len(n["losses"]) == 4
        torch.testing.assert_close(n["losses"], c["losses"], rtol=2e-4, atol=0)
        torch.testing.assert_close(n["eval_loss"], c["eval_loss"], rtol=2e-4, atol=0)
        # gather: one loss per rank per step (16 samples, batch 4, 2 ranks:
        # 2 steps), the same on every rank.
        assert [len(g) for g in n["gathered"]] == [2, 2]
        assert n["gathered"] == neuron[0]["gathered"]
        torch.testing.assert_close(n["gathered"], c["gathered"], rtol=2e-4, atol=1e-6)
        # save_state / load_state: weights, and the neuron RNG state of each rank.
        assert "torch_neuron_manual_seed" in n["rng_keys"]
        assert n["rng_restored"] and n["params_restored"]
        assert f"random_states_{rank}.pkl" in n["files"]


@pytest.mark.parametrize("precision", ["no", "bf16", "fp16"])
def test_accelerator_loop_matches_cpu(tmp_path, precision):
    n = eco.accelerator_loop(False, str(tmp_path / "n"), precision)
    c = eco.accelerator_loop(True, str(tmp_path / "c"), precision)
    assert n["device"].startswith("neuron")
    # fp16 on neuron scales the loss with torch.amp.GradScaler("neuron"),
    # as on CUDA; bf16 needs none.
    assert n["scaler"] == ("GradScaler" if precision == "fp16" else "NoneType")
    tol = dict(rtol=2e-4, atol=1e-6) if precision == "no" else dict(rtol=3e-2, atol=1e-3)
    torch.testing.assert_close(n["gathered"], c["gathered"], **tol)
    assert "torch_neuron_manual_seed" in n["rng_keys"]
    assert n["rng_restored"] and n["params_restored"]
    assert torch_neuronx.get_fallback_ops() == []


def test_accelerate_probes():
    """What accelerate and transformers ask the device module before they pick it."""
    from accelerate.utils import get_torch_accelerator_backend, is_neuron_available
    from transformers.utils import is_torch_neuron_available

    assert is_neuron_available() and is_torch_neuron_available()
    assert get_torch_accelerator_backend() == ("neuron", torch.neuron)
    free, total = torch.neuron.mem_get_info()
    assert 0 < free <= total
    assert torch.neuron.is_bf16_supported()
    with torch.autocast("neuron", dtype=torch.bfloat16):
        y = torch.ones(2, 2, device="neuron") @ torch.ones(2, 2, device="neuron")
    assert y.dtype == torch.bfloat16


def test_device_map_auto_spreads_over_cores(tmp_path):
    """``from_pretrained(device_map="auto")`` sizes each core with
    torch.neuron.mem_get_info and places the layers there."""
    from transformers import LlamaForCausalLM

    eco.llama().save_pretrained(tmp_path)
    m = LlamaForCausalLM.from_pretrained(tmp_path, device_map="auto")
    assert {p.device.type for p in m.parameters()} == {"neuron"}
    ids = torch.randint(2, eco.VOCAB, (1, 6))
    ref = LlamaForCausalLM.from_pretrained(tmp_path)(ids).logits
    torch.testing.assert_close(m(ids.to("neuron")).logits.cpu(), ref, rtol=1e-4, atol=1e-5)
    assert torch_neuronx.get_fallback_ops() == []


def test_notebook_launcher_forks_one_core_per_process():
    """``notebook_launcher`` forks its processes, then sets each one's
    LOCAL_RANK. The parent here used the device first (a notebook cell did):
    each forked child still lands on its own core (a child starts on the
    default device, as a spawned one), with accelerate's own environment
    check (ACCELERATE_DEBUG_MODE) passing first."""
    r = run_python(
        f"""
        import os
        import torch
        from accelerate import notebook_launcher

        def train():
            from accelerate import Accelerator
            acc = Accelerator()
            x = torch.full((2,), float(acc.process_index + 1), device=acc.device)
            g = acc.gather(x)
            # One write(2) per line: the two forked ranks share stdout, and
            # print's pieces from both interleave.
            line = f"rank {{acc.process_index}} {{acc.device}} {{torch.neuron.current_device()}} {{g.cpu().tolist()}}\\n"
            os.write(1, line.encode())

        torch.ones(1, device="neuron")
        notebook_launcher(train, num_processes=2, use_port="{free_port()}")
    """,
        env={"ACCELERATE_DEBUG_MODE": "true", "OMP_NUM_THREADS": "1"},
        timeout=300,
    )
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    lines = sorted(l for l in r.stdout.splitlines() if l.startswith("rank "))
    assert lines == [
        "rank 0 neuron:0 0 [1.0, 1.0, 2.0, 2.0]",
        "rank 1 neuron:1 1 [1.0, 1.0, 2.0, 2.0]",
    ], r.stdout
