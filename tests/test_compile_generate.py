"""Compiled inference as users write it (issue 21, item 6): Hugging Face
``generate()`` with ``cache_implementation="static"``, whose decoding steps
transformers compiles itself (here with ``backend="neuron"``), gives the
same tokens as eager on the device; each new prompt length compiles its
graphs once, a prompt length met again compiles nothing."""

import pytest
import torch
import torch._dynamo

import torch_neuronx  # noqa: F401
from torch_neuronx._compile import jobs

transformers = pytest.importorskip("transformers")
from transformers import CompileConfig  # noqa: E402

import model_zoo  # noqa: E402


@pytest.fixture(autouse=True)
def _fresh(tmp_path, monkeypatch):
    monkeypatch.setenv("TORCH_NEURONX_NEFF_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("TORCH_NEURONX_NEFF_DISABLE_CACHE", raising=False)
    torch._dynamo.reset()
    jobs._memory_cache.clear()
    torch.neuron.reset_dynamo_metrics()
    yield
    torch._dynamo.reset()


def _generate(model, ids, compile_config=None):
    kw = dict(max_new_tokens=6, do_sample=False, cache_implementation="static", pad_token_id=0)
    if compile_config is None:
        kw["disable_compile"] = True
    else:
        kw["compile_config"] = compile_config
    with torch.no_grad():
        return model.generate(ids, attention_mask=torch.ones_like(ids), **kw).cpu()


@pytest.mark.parametrize("name", ["llama", "gpt2"])
def test_static_cache_generate_compiled_matches_eager(name):
    torch.manual_seed(0)
    model = getattr(model_zoo, name)().eval().to("neuron")
    cc = CompileConfig(backend="neuron", mode="default", fullgraph=True)
    cc._compile_all_devices = True  # transformers compiles on CUDA only unless told
    gen = torch.Generator().manual_seed(3)
    prompts = [
        torch.randint(1, model_zoo.VOCAB, (2, n), generator=gen).to("neuron") for n in (5, 5, 7)
    ]
    graphs = []
    for ids in prompts:
        eager = _generate(model, ids)
        compiled = _generate(model, ids, cc)
        assert torch.equal(compiled, eager), (compiled, eager)
        graphs.append(torch.neuron.get_dynamo_metrics()["compiles"])
    m = torch.neuron.get_dynamo_metrics()
    assert graphs[0] >= 1 and m["fallback_graphs"] == 0, m
    assert graphs[1] == graphs[0], graphs  # the same prompt length again: nothing compiled
    assert graphs[2] > graphs[1], graphs  # a new prompt length: its own C compiles
