"""The Hugging Face Trainer on neuron (issue 24), as its docs run it: the
Trainer picks neuron itself (transformers >= 5.4 detects torch_neuronx),
trains a tiny random-weight GPT-2 (tests/_ecosystem.py) a few steps in
float32, with ``bf16=True`` and with ``torch_compile=True`` (backend
"neuron", the Trainer's default on neuron), saves a checkpoint and resumes
from it, and evaluates; each against the same Trainer with ``use_cpu=True``.
No op may fall back to the CPU.

Tolerances: float32 on both sides, different summation order: losses to
2e-4 relative over 4 AdamW steps; bf16 autocast 3e-2 (8 mantissa bits).
"""

import os

import pytest
import torch

import torch_neuronx
import _ecosystem as eco


def run(tmp_path, name, cpu, **kw):
    tr = eco.trainer(str(tmp_path / name), cpu, **kw)
    tr.train()
    return tr


def test_trainer_float32_matches_cpu_and_evaluates(tmp_path):
    n, c = run(tmp_path, "n", False), run(tmp_path, "c", True)
    assert n.args.device == torch.device("neuron:0") and c.args.device.type == "cpu"
    assert next(n.model.parameters()).device.type == "neuron"
    assert len(eco.losses(n)) == 4
    torch.testing.assert_close(eco.losses(n), eco.losses(c), rtol=2e-4, atol=0)
    ne, ce = n.evaluate(), c.evaluate()
    torch.testing.assert_close(ne["eval_loss"], ce["eval_loss"], rtol=2e-4, atol=0)
    assert torch_neuronx.get_fallback_ops() == []


def test_trainer_bf16_matches_cpu(tmp_path):
    n, c = run(tmp_path, "n", False, bf16=True), run(tmp_path, "c", True, bf16=True)
    torch.testing.assert_close(eco.losses(n), eco.losses(c), rtol=3e-2, atol=0)
    assert torch_neuronx.get_fallback_ops() == []


def test_trainer_torch_compile_uses_neuron_backend(tmp_path):
    n = run(tmp_path, "n", False, torch_compile=True, max_steps=3)
    assert n.args.torch_compile_backend == "neuron"
    c = run(tmp_path, "c", True, max_steps=3)
    torch.testing.assert_close(eco.losses(n), eco.losses(c), rtol=2e-4, atol=0)
    assert torch_neuronx.get_fallback_ops() == []


def test_trainer_checkpoint_resume_continues_the_run(tmp_path):
    # save_steps=2: checkpoint-2 holds the weights, the optimizer and
    # scheduler states and the RNG states; a fresh Trainer resumed from it
    # logs the same losses for steps 3 and 4 as the uninterrupted run.
    full = run(tmp_path, "full", False, save_strategy="steps", save_steps=2)
    ckpt = tmp_path / "full" / "checkpoint-2"
    assert {
        "model.safetensors",
        "optimizer.pt",
        "scheduler.pt",
        "rng_state.pth",
        "trainer_state.json",
    } <= set(os.listdir(ckpt))
    resumed = eco.trainer(str(tmp_path / "resumed"), False)
    resumed.train(resume_from_checkpoint=str(ckpt))
    assert next(resumed.model.parameters()).device.type == "neuron"
    # The resumed Trainer's log starts with the checkpoint's (steps 1-2).
    steps = [h["step"] for h in resumed.state.log_history if "loss" in h]
    assert steps == [1, 2, 3, 4]
    torch.testing.assert_close(eco.losses(resumed), eco.losses(full), rtol=1e-6, atol=0)
    for (k, a), b in zip(full.model.state_dict().items(), resumed.model.state_dict().values()):
        torch.testing.assert_close(a.cpu(), b.cpu(), rtol=1e-6, atol=1e-7, msg=k)
    assert torch_neuronx.get_fallback_ops() == []
