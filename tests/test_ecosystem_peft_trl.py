"""PEFT LoRA fine-tuning and TRL's SFTTrainer on neuron (issue 24), a few
steps of a tiny random-weight Llama (tests/_ecosystem.py) against the same
calls on the CPU; no op falls back. Tolerance: float32 on both sides,
different summation order: 2e-4 relative on the losses.
"""

import torch

import torch_neuronx
import _ecosystem as eco


def lora_losses(device: str) -> tuple[list[float], int]:
    from peft import LoraConfig, get_peft_model

    model = get_peft_model(
        eco.llama(),
        LoraConfig(
            r=4,
            lora_alpha=8,
            lora_dropout=0.0,
            target_modules=["q_proj", "v_proj"],
            init_lora_weights=False,
        ),
    )
    model = model.to(device)
    trainable = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(trainable, lr=1e-2)
    g = torch.Generator().manual_seed(1)
    losses = []
    for _ in range(3):
        ids = torch.randint(2, eco.VOCAB, (2, 12), generator=g).to(device)
        loss = model(input_ids=ids, labels=ids).loss
        loss.backward()
        opt.step()
        opt.zero_grad()
        losses.append(loss.item())
    return losses, len(trainable)


def test_peft_lora_matches_cpu():
    (n, count), (c, _) = lora_losses("neuron"), lora_losses("cpu")
    assert count == 8  # q_proj and v_proj adapters (A and B) in 2 layers; the rest frozen
    torch.testing.assert_close(n, c, rtol=2e-4, atol=0)
    assert torch_neuronx.get_fallback_ops() == []


def sft(tmp_path, cpu: bool):
    from datasets import Dataset
    from trl import SFTConfig, SFTTrainer

    g = torch.Generator().manual_seed(1)
    ds = Dataset.from_dict(
        {"input_ids": torch.randint(2, eco.VOCAB, (16, 12), generator=g).tolist()}
    )
    args = SFTConfig(
        output_dir=str(tmp_path / ("c" if cpu else "n")),
        use_cpu=cpu,
        max_steps=3,
        per_device_train_batch_size=4,
        logging_steps=1,
        report_to=[],
        save_strategy="no",
        learning_rate=1e-3,
        disable_tqdm=True,
        seed=0,
    )
    tr = SFTTrainer(
        model=eco.llama(), args=args, train_dataset=ds, processing_class=eco.tokenizer()
    )
    tr.train()
    return tr


def test_trl_sft_trainer_matches_cpu(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_DATASETS_CACHE", str(tmp_path / "datasets"))
    n, c = sft(tmp_path, False), sft(tmp_path, True)
    assert n.args.device.type == "neuron"
    assert len(eco.losses(n)) == 3
    torch.testing.assert_close(eco.losses(n), eco.losses(c), rtol=2e-4, atol=0)
    assert torch_neuronx.get_fallback_ops() == []
