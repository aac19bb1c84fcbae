"""A Hugging Face MoE model on neuron: a tiny random-weight Mixtral (built
from a config, nothing downloaded) trains on neuron as on CPU from one seed,
eagerly and compiled with backend="neuron": router top-2, experts through
transformers' grouped path (histc on the expert ids, torch._grouped_mm), the
router's load-balancing loss, AdamW. Losses and final parameters match
within stated tolerances and nothing falls back to the CPU."""

import copy

import pytest
import torch

import torch_neuronx

transformers = pytest.importorskip("transformers")


def _model():
    cfg = transformers.MixtralConfig(
        vocab_size=64,
        hidden_size=32,
        intermediate_size=48,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        num_local_experts=4,
        num_experts_per_tok=2,
        max_position_embeddings=64,
        output_router_logits=True,
        router_aux_loss_coef=0.02,
    )
    torch.manual_seed(0)
    return transformers.MixtralForCausalLM(cfg)


def _train(model, device, compiled, steps=3):
    model = model.to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    fwd = torch.compile(model, backend="neuron") if compiled else model
    g = torch.Generator().manual_seed(1)
    losses = []
    for _ in range(steps):
        ids = torch.randint(0, 64, (2, 24), generator=g).to(device)
        loss = fwd(input_ids=ids, labels=ids).loss
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses, {k: v.detach().cpu() for k, v in model.state_dict().items()}


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
def test_mixtral_trains_like_cpu(compiled):
    base = _model()
    torch._dynamo.reset()
    ref_losses, ref_params = _train(copy.deepcopy(base), "cpu", False)
    torch_neuronx.clear_op_tracking()
    torch_neuronx.reset_dynamo_metrics()
    losses, params = _train(copy.deepcopy(base), "neuron", compiled)
    assert torch_neuronx.get_fallback_ops() == []
    if compiled:
        # Every graph compiled (none ran eagerly as a fallback).
        m = torch_neuronx.get_dynamo_metrics()
        assert m["graphs"] > 0 and m["fallback_graphs"] == 0, m
    else:
        # transformers' grouped-experts path: histc on the expert ids, _grouped_mm.
        executed = set(torch_neuronx.get_executed_ops())
        assert "aten::_grouped_mm" in executed and "aten::histc" in executed, sorted(executed)
    torch.testing.assert_close(torch.tensor(losses), torch.tensor(ref_losses), atol=1e-4, rtol=1e-4)
    for name, p in ref_params.items():
        torch.testing.assert_close(params[name], p, atol=1e-4, rtol=1e-3, msg=name)
