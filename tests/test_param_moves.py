"""Moving parameters between CPU and neuron keeps their identity, as on CUDA:
model.to("neuron"), .cpu() and back, p.data = p.data.to(...), tied weights
stay tied, optimizers built before the move keep training the moved
parameters. (PyTorch asks the backend through
aten::_has_compatible_shallow_copy_type; see aten/shallow_copy.cpp.)"""

import copy

import torch
import torch.nn as nn
import torch.nn.functional as F

import torch_neuronx  # noqa: F401


class TiedLM(nn.Module):
    """GPT-2 style: the output projection shares the embedding's weight."""

    def __init__(self, vocab=23, dim=8):
        super().__init__()
        self.wte = nn.Embedding(vocab, dim)
        self.ln = nn.LayerNorm(dim)
        self.lm_head = nn.Linear(dim, vocab, bias=False)
        self.lm_head.weight = self.wte.weight

    def forward(self, ids):
        return self.lm_head(self.ln(self.wte(ids)))


def _ids(seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, 23, (4, 6), generator=g)


def test_to_neuron_keeps_parameter_objects():
    torch.manual_seed(0)
    m = nn.Sequential(nn.Linear(4, 5), nn.ReLU(), nn.Linear(5, 3))
    before = [id(p) for p in m.parameters()]
    values = [p.detach().clone() for p in m.parameters()]
    m.to("neuron")
    after = list(m.parameters())
    assert [id(p) for p in after] == before
    for p, v in zip(after, values):
        assert p.device.type == "neuron"
        assert isinstance(p, nn.Parameter) and p.requires_grad
        torch.testing.assert_close(p.detach().cpu(), v, rtol=0, atol=0)


def test_cpu_round_trip_keeps_identity_and_values():
    torch.manual_seed(0)
    m = nn.Linear(6, 4)
    w, b = m.weight, m.bias
    ref = copy.deepcopy(m)
    m.to("neuron")
    m.cpu()
    assert m.weight is w and m.bias is b and w.device.type == "cpu"
    m.neuron()
    assert m.weight is w and w.device.type == "neuron"
    torch.testing.assert_close(w.detach().cpu(), ref.weight.detach(), rtol=0, atol=0)
    # The moved module still computes (and differentiates) correctly.
    x = torch.randn(3, 6)
    out = m(x.to("neuron"))
    out.sum().backward()
    exp = ref(x)
    exp.sum().backward()
    torch.testing.assert_close(out.detach().cpu(), exp.detach())
    torch.testing.assert_close(w.grad.cpu(), ref.weight.grad)


def test_grad_moves_with_parameter():
    m = nn.Linear(3, 2)
    m(torch.randn(5, 3)).sum().backward()
    g = m.weight.grad.clone()
    m.to("neuron")
    assert m.weight.grad.device.type == "neuron"
    torch.testing.assert_close(m.weight.grad.cpu(), g, rtol=0, atol=0)


def test_data_assignment():
    p = nn.Parameter(torch.randn(4, 3))
    pid = id(p)
    p.data = p.data.to("neuron")
    assert id(p) == pid and p.device.type == "neuron" and p.requires_grad
    (p * 2).sum().backward()
    assert p.grad.device.type == "neuron"
    torch.testing.assert_close(p.grad.cpu(), torch.full((4, 3), 2.0))
    p.data = p.data.cpu()
    assert p.device.type == "cpu"
    # Plain tensors too.
    t = torch.zeros(2)
    t.data = torch.ones(2, device="neuron")
    assert t.device.type == "neuron" and t.cpu().tolist() == [1.0, 1.0]


def test_tied_weights_stay_tied():
    torch.manual_seed(0)
    m = TiedLM()
    m.to("neuron")
    assert m.lm_head.weight is m.wte.weight
    assert len(list(m.parameters())) == 3  # wte (shared), ln.weight, ln.bias
    # Gradient of the shared weight is the sum of both uses, as on CPU.
    torch.manual_seed(0)
    ref = TiedLM()
    ids = _ids()
    F.cross_entropy(ref(ids).flatten(0, 1), ids.flatten()).backward()
    F.cross_entropy(m(ids.to("neuron")).flatten(0, 1), ids.to("neuron").flatten()).backward()
    torch.testing.assert_close(m.wte.weight.grad.cpu(), ref.wte.weight.grad, rtol=1e-4, atol=1e-5)


def test_optimizer_built_before_move_trains_and_matches_cpu():
    torch.manual_seed(0)
    ref = TiedLM()
    dev = copy.deepcopy(ref)
    opt_ref = torch.optim.AdamW(ref.parameters(), lr=1e-2)
    opt_dev = torch.optim.AdamW(dev.parameters(), lr=1e-2)  # built BEFORE the move
    init = {k: v.detach().clone() for k, v in ref.named_parameters()}
    dev.to("neuron")
    for step in range(4):
        ids = _ids(step)
        for model, opt, d in ((ref, opt_ref, "cpu"), (dev, opt_dev, "neuron")):
            opt.zero_grad()
            logits = model(ids.to(d))
            F.cross_entropy(logits.flatten(0, 1), ids.to(d).flatten()).backward()
            opt.step()
    for (name, a), (_, b) in zip(dev.named_parameters(), ref.named_parameters()):
        assert a.device.type == "neuron", name
        assert not torch.equal(a.detach().cpu(), init[name]), name  # it trained
        torch.testing.assert_close(a.detach().cpu(), b.detach(), rtol=1e-4, atol=1e-5, msg=name)
    # Optimizer state lives with the (moved) parameters.
    for p in dev.parameters():
        st = opt_dev.state[p]
        assert st["exp_avg"].device.type == "neuron"


def test_state_after_training_moves_back():
    torch.manual_seed(0)
    m = nn.Sequential(nn.Linear(4, 4), nn.BatchNorm1d(4))
    m.to("neuron")
    opt = torch.optim.SGD(m.parameters(), lr=0.1)
    x = torch.randn(8, 4, device="neuron")
    m(x).pow(2).mean().backward()
    opt.step()
    trained = {k: v.detach().cpu().clone() for k, v in m.state_dict().items()}
    params = list(m.parameters())
    m.cpu()
    assert list(m.parameters()) == params
    for k, v in m.state_dict().items():
        assert v.device.type == "cpu"
        torch.testing.assert_close(v, trained[k], rtol=0, atol=0)
