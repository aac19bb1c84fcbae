"""Shared pieces of the ecosystem tests (tests/test_ecosystem_*.py): tiny
random-weight Hugging Face models, a word-level tokenizer and token datasets
built in code (no hub access), and the Trainer / Accelerator runs that
tests/_ecosystem_launch.py repeats under ``accelerate launch``.

Every run takes ``cpu`` (bool): the same library call with the CPU chosen
the library's own way (``use_cpu=True`` / ``Accelerator(cpu=True)``), so the
neuron run is compared with what the library computes on the CPU. Nothing
here calls ``torch.neuron.set_device``: the libraries pick the device
themselves, as they do for a user.
"""

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # never reach the hub
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_NO_ADVISORY_WARNINGS", "1")
os.environ.setdefault("DISABLE_TQDM", "1")

import torch

VOCAB = 128
FULL = os.environ.get("OPENNEURON_FULL_TESTS") == "1"


def gpt2(dropout: float = 0.0):
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(0)
    cfg = GPT2Config(
        vocab_size=VOCAB,
        n_positions=64,
        n_embd=32,
        n_layer=2,
        n_head=4,
        resid_pdrop=dropout,
        embd_pdrop=dropout,
        attn_pdrop=dropout,
        bos_token_id=1,
        eos_token_id=1,
        pad_token_id=0,
    )
    return GPT2LMHeadModel(cfg)


def llama():
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    cfg = LlamaConfig(
        vocab_size=VOCAB,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=64,
        pad_token_id=0,
        bos_token_id=1,
        eos_token_id=1,
    )
    return LlamaForCausalLM(cfg)


def tokenizer():
    """A word-level fast tokenizer over ``w2 .. w127`` (ids 2..127), pad 0, eos 1."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {"<pad>": 0, "</s>": 1, **{f"w{i}": i for i in range(2, VOCAB)}}
    tk = Tokenizer(models.WordLevel(vocab, unk_token="<pad>"))
    tk.pre_tokenizer = pre_tokenizers.Whitespace()
    return PreTrainedTokenizerFast(tokenizer_object=tk, pad_token="<pad>", eos_token="</s>")


class TokenDataset(torch.utils.data.Dataset):
    """``n`` fixed random sequences for causal-LM training (labels = inputs)."""

    def __init__(self, n: int = 32, seq: int = 16, seed: int = 0):
        g = torch.Generator().manual_seed(seed)
        self.ids = torch.randint(2, VOCAB, (n, seq), generator=g)

    def __len__(self):
        return len(self.ids)

    def __getitem__(self, i):
        return {"input_ids": self.ids[i], "labels": self.ids[i]}


def training_args(out_dir: str, cpu: bool, **kw):
    from transformers import TrainingArguments

    base = dict(
        output_dir=out_dir,
        use_cpu=cpu,
        per_device_train_batch_size=4,
        per_device_eval_batch_size=4,
        max_steps=4,
        logging_steps=1,
        report_to=[],
        save_strategy="no",
        learning_rate=1e-3,
        seed=0,
        dataloader_num_workers=0,
        disable_tqdm=True,
    )
    base.update(kw)
    return TrainingArguments(**base)


def trainer(out_dir: str, cpu: bool, dropout: float = 0.0, **kw):
    from transformers import Trainer

    args = training_args(out_dir, cpu, **kw)
    return Trainer(
        model=gpt2(dropout),
        args=args,
        train_dataset=TokenDataset(),
        eval_dataset=TokenDataset(8, seed=1),
    )


def losses(tr) -> list[float]:
    """The training losses the Trainer logged, one per step."""
    return [h["loss"] for h in tr.state.log_history if "loss" in h]


def accelerator_loop(cpu: bool, state_dir: str, mixed_precision: str = "no", steps: int = 3):
    """A plain ``Accelerator`` loop as accelerate's docs write it: prepare,
    backward, step, ``gather`` of the per-process losses, then ``save_state``
    and ``load_state``. Returns a dict of what the test compares."""
    from accelerate import Accelerator
    from accelerate.state import AcceleratorState
    from accelerate.utils import set_seed

    AcceleratorState._reset_state(reset_partial_state=True)  # a fresh choice of device per run
    acc = Accelerator(cpu=cpu, mixed_precision=mixed_precision)
    set_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 32), torch.nn.GELU(), torch.nn.Linear(32, 1))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    g = torch.Generator().manual_seed(1)
    data = torch.utils.data.TensorDataset(
        torch.randn(16, 8, generator=g), torch.randn(16, 1, generator=g)
    )
    loader = torch.utils.data.DataLoader(data, batch_size=4)
    model, opt, loader = acc.prepare(model, opt, loader)
    model.train()
    gathered = []
    for step, (x, y) in enumerate(loader):
        if step == steps:
            break
        loss = torch.nn.functional.mse_loss(model(x), y)
        acc.backward(loss)
        opt.step()
        opt.zero_grad()
        gathered.append(acc.gather(loss.detach()[None]).float().cpu().tolist())
    acc.save_state(state_dir)
    acc.wait_for_everyone()  # the main process writes the files the others load
    after_save = torch.rand(4, device=acc.device).cpu()  # the device RNG, as dropout uses it
    saved = {k: v.detach().cpu().clone() for k, v in acc.unwrap_model(model).state_dict().items()}
    with torch.no_grad():
        for p in model.parameters():
            p.add_(1.0)
    # map_location="cpu": with more than one process accelerate loads the
    # weights straight onto the rank's device through safetensors, whose
    # device parser (0.8.0) knows cuda/xpu/npu/hpu/mlu/musa but not neuron
    # ("device neuron:0 is invalid"); through the CPU it is the same state.
    # docs/ecosystem.md lists this.
    acc.load_state(state_dir, map_location="cpu")
    after_load = torch.rand(4, device=acc.device).cpu()
    restored = all(
        torch.equal(saved[k], v.detach().cpu())
        for k, v in acc.unwrap_model(model).state_dict().items()
    )
    rng_file = os.path.join(state_dir, f"random_states_{acc.process_index}.pkl")
    out = {
        "device": str(acc.device),
        "gathered": gathered,
        "rng_keys": sorted(torch.load(rng_file, weights_only=False)),
        "rng_restored": bool(torch.equal(after_save, after_load)),
        "params_restored": restored,
        "scaler": type(acc.scaler).__name__,
        "files": sorted(os.listdir(state_dir)),
    }
    acc.wait_for_everyone()
    return out
