"""``generate()`` on neuron (issue 24): greedy decoding of a tiny
random-weight Llama (tests/_ecosystem.py) eagerly with the dynamic cache,
and with ``cache_implementation="static"``, which transformers compiles
itself on neuron (``backend="neuron"``, ``dynamic=False``, from 5.23): the
tokens equal the CPU's and nothing falls back (the static cache writes
with index_copy_, native since issue 24).
"""

import torch
import torch._dynamo

import torch_neuronx
import _ecosystem as eco

KW = dict(max_new_tokens=6, do_sample=False, pad_token_id=0)


def models():
    cpu = eco.llama().eval()
    neuron = eco.llama().eval().to("neuron")
    return cpu, neuron


def test_generate_eager_matches_cpu():
    cpu, neuron = models()
    ids = torch.randint(2, eco.VOCAB, (2, 5), generator=torch.Generator().manual_seed(3))
    ref = cpu.generate(ids, **KW)
    out = neuron.generate(ids.to("neuron"), **KW)
    assert out.device.type == "neuron"
    assert torch.equal(out.cpu(), ref)
    assert torch_neuronx.get_fallback_ops() == []


def test_generate_static_cache_is_compiled_and_matches_cpu():
    cpu, neuron = models()
    ids = torch.randint(2, eco.VOCAB, (2, 5), generator=torch.Generator().manual_seed(4))
    ref = cpu.generate(ids, **KW)
    torch._dynamo.reset()
    torch._dynamo.utils.counters.clear()
    out = neuron.generate(ids.to("neuron"), cache_implementation="static", **KW)
    assert torch.equal(out.cpu(), ref)
    # transformers compiled the decoding step itself (one static graph).
    assert torch._dynamo.utils.counters["stats"]["unique_graphs"] >= 1
    assert torch_neuronx.get_fallback_ops() == []
