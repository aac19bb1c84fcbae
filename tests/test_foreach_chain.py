"""Chained foreach ops (aten/foreach_chain.cpp, trn_foreach_chain_launch in
libtrn/src/kernels/train/foreach.c): consecutive _foreach_* ops are held and
run chunk-major in one task. The default (foreach) optimizer steps must give
the bits of the ops run one by one: AdamW / Adam / SGD over several steps,
every state compared bit for bit with chaining on and off, over float32 /
bfloat16 / float16 lists with 0-, 1-element, odd and multi-chunk tensors.
Also: aliased operands run op by op, the chain ends before other ops read
its results, errors raise at the call, the switches turn it off."""

import pytest
import torch

import torch_neuronx
from torch_neuronx import _C, eager_fusion, metrics

DEV = "neuron"
# 0 and 1 element, odd sizes, one tensor over several chain chunks (16 Ki elements)
SHAPES = [(0,), (1,), (7,), (33, 65), (40001,), (3, 0, 2), (129, 257)]


def _data(dtype, step, seed):
    g = torch.Generator().manual_seed(seed * 1000 + step)
    return [torch.randn(s, generator=g).to(dtype) for s in SHAPES]


def _train(make_opt, dtype, chain, steps=3, noncontig=False):
    _C._foreach_chain_set_enabled(chain)
    try:
        params = [p.to(DEV).requires_grad_() for p in _data(dtype, 0, 1)]
        if noncontig:
            # A parameter that is a non-contiguous view takes the per-tensor path.
            base = torch.randn(9, 12, generator=torch.Generator().manual_seed(5)).to(dtype).to(DEV)
            params.append(base.t().detach().requires_grad_())
        opt = make_opt(params)
        for step in range(steps):
            grads = _data(dtype, step, 2)
            if noncontig:
                gen = torch.Generator().manual_seed(6 + step)
                grads.append(torch.randn(12, 9, generator=gen).to(dtype))
            for p, g in zip(params, grads):
                p.grad = g.to(DEV)
            opt.step()
        torch_neuronx.synchronize()
        return params, opt
    finally:
        _C._foreach_chain_set_enabled(True)


def _states(params, opt):
    out = []
    for p in params:
        out.append(p.detach().cpu())
        for key, v in sorted(opt.state[p].items()):
            if isinstance(v, torch.Tensor):
                out.append(v.detach().cpu())
    return out


def _assert_bits(a, b):
    assert len(a) == len(b)
    for x, y in zip(a, b):
        assert x.dtype == y.dtype and x.shape == y.shape
        # bit for bit, NaN-safe: the raw bytes
        assert torch.equal(x.reshape(-1).view(torch.uint8), y.reshape(-1).view(torch.uint8))


OPTS = {
    "adamw": lambda ps: torch.optim.AdamW(ps, lr=1e-2, weight_decay=0.1),
    "adamw_default": lambda ps: torch.optim.AdamW(ps),
    "adam_wd_amsgrad": lambda ps: torch.optim.Adam(ps, lr=1e-2, weight_decay=0.1, amsgrad=True),
    "adam_maximize": lambda ps: torch.optim.Adam(ps, lr=1e-2, maximize=True, betas=(0.8, 0.95)),
    "adamw_amsgrad_maximize": lambda ps: torch.optim.AdamW(
        ps, lr=1e-2, weight_decay=0.05, amsgrad=True, maximize=True
    ),
    # beta1 0.4: lerp's weight 0.6 takes its second form
    "adam_beta1_low": lambda ps: torch.optim.Adam(ps, lr=1e-2, betas=(0.4, 0.9)),
    "adam_capturable": lambda ps: torch.optim.Adam(ps, lr=1e-2, weight_decay=0.1, capturable=True),
    "sgd_momentum": lambda ps: torch.optim.SGD(ps, lr=0.1, momentum=0.9, weight_decay=0.01),
    "sgd_nesterov": lambda ps: torch.optim.SGD(
        ps, lr=0.1, momentum=0.9, nesterov=True, weight_decay=0.01, maximize=True
    ),
    "sgd_dampening": lambda ps: torch.optim.SGD(ps, lr=0.1, momentum=0.5, dampening=0.3),
}


def _counter(name):
    names = set(metrics.get_counter_names())
    return metrics.get_counter_value(name) if name in names else 0


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
@pytest.mark.parametrize("name", sorted(OPTS))
def test_optimizer_step_bits_chain_on_vs_off(name, dtype):
    make = OPTS[name]
    fused0, _ = _C._foreach_chain_counts()
    scratch0 = _counter("ForeachChainScratchLists")
    loops0 = _counter("ForeachChainAdamLoops")
    on = _states(*_train(make, dtype, chain=True))
    fused1, _ = _C._foreach_chain_counts()
    off = _states(*_train(make, dtype, chain=False))
    assert fused1 > fused0  # the steps did run as chains
    if name.startswith("adam") and "capturable" not in name:
        # sqrt(exp_avg_sq), dropped before the step ends, lived in scratch
        assert _counter("ForeachChainScratchLists") > scratch0
    if dtype == torch.float32 and name in ("adamw", "adamw_default", "adam_beta1_low"):
        # float32 Adam / AdamW ran as one loop (foreach_adam_chain.h): same bits
        assert _counter("ForeachChainAdamLoops") > loops0
    _assert_bits(on, off)


def test_noncontiguous_param_bits():
    make = OPTS["adamw"]
    on = _states(*_train(make, torch.float32, chain=True, noncontig=True))
    off = _states(*_train(make, torch.float32, chain=False, noncontig=True))
    _assert_bits(on, off)


def test_adamw_matches_fusion_off_and_cpu_close():
    make = OPTS["adamw"]
    on = _states(*_train(make, torch.float32, chain=True))
    eager_fusion.set_enabled(False)
    try:
        f0 = _C._foreach_chain_counts()[0]
        off = _states(*_train(make, torch.float32, chain=True))
        assert _C._foreach_chain_counts()[0] == f0  # fusion off: no chains
    finally:
        eager_fusion.set_enabled(True)
    _assert_bits(on, off)
    # and CPU's single-tensor loop agrees to rounding
    params = [p.requires_grad_() for p in _data(torch.float32, 0, 1)]
    opt = torch.optim.AdamW(params, lr=1e-2, weight_decay=0.1, foreach=False)
    for step in range(3):
        for p, g in zip(params, _data(torch.float32, step, 2)):
            p.grad = g
        opt.step()
    ref = _states(params, opt)
    for a, b in zip(on, ref):
        torch.testing.assert_close(a, b, atol=1e-6, rtol=1e-5)


def _train_clipped(chain, steps=3):
    """AdamW steps back to back, each after clip_grad_norm_ (foreach) and with
    zero_grad(set_to_none=False): the chain holds the clip's _foreach_mul_,
    the steps and _foreach_zero_ around Adam's ops."""
    _C._foreach_chain_set_enabled(chain)
    try:
        params = [p.to(DEV).requires_grad_() for p in _data(torch.float32, 0, 1)]
        opt = torch.optim.AdamW(params, lr=1e-2, weight_decay=0.1)
        for step in range(steps):
            for p, g in zip(params, _data(torch.float32, step, 2)):
                if p.grad is None:
                    p.grad = g.to(DEV)
                else:
                    p.grad.copy_(g)
            torch.nn.utils.clip_grad_norm_(params, 0.5, foreach=True)
            opt.step()
            opt.zero_grad(set_to_none=False)
        torch_neuronx.synchronize()
        return params, opt
    finally:
        _C._foreach_chain_set_enabled(True)


def test_adam_loop_inside_longer_chains_bits():
    loops0 = _counter("ForeachChainAdamLoops")
    on = _states(*_train_clipped(chain=True))
    assert _counter("ForeachChainAdamLoops") >= loops0 + 3  # each step ran as one loop
    off = _states(*_train_clipped(chain=False))
    _assert_bits(on, off)


def test_deterministic_turns_chains_off():
    torch.use_deterministic_algorithms(True)
    try:
        f0 = _C._foreach_chain_counts()[0]
        _train(OPTS["adamw"], torch.float32, chain=True)
        assert _C._foreach_chain_counts()[0] == f0
    finally:
        torch.use_deterministic_algorithms(False)


def _chains_off(fn):
    """fn() with foreach chains switched off (Adaptive Eager stays on)."""
    _C._foreach_chain_set_enabled(False)
    try:
        return fn()
    finally:
        _C._foreach_chain_set_enabled(True)


def _lists(n=3, size=5000):
    return [torch.randn(size).to(DEV) for _ in range(n)]


def _reads_after_chain():
    torch.manual_seed(3)
    a, b = _lists(), _lists()
    torch._foreach_mul_(a, 3.0)
    torch._foreach_add_(a, b, alpha=0.5)
    # a non-foreach op reads the chain's result: the chain runs first
    s = (a[1] * 2).cpu()
    # out-of-place results read right away
    r = torch._foreach_sqrt(torch._foreach_abs(a))
    return [s, r[2].cpu(), a[0].cpu()]


def test_chain_ends_before_a_read():
    f0 = _C._foreach_chain_counts()[0]
    on = _reads_after_chain()
    assert _C._foreach_chain_counts()[0] >= f0 + 2
    _assert_bits(on, _chains_off(_reads_after_chain))
    torch.manual_seed(3)
    ca, cb = [t.cpu() for t in _lists()], [t.cpu() for t in _lists()]
    torch._foreach_mul_(ca, 3.0)
    torch._foreach_add_(ca, cb, alpha=0.5)
    assert torch.equal(on[0], ca[1] * 2)


def _shared_reads():
    torch.manual_seed(8)
    base = torch.randn(40000).to(DEV)
    shared = [base[:20000], base[10000:30000]]
    a = _lists(2, 20000)
    torch._foreach_add_(a, shared)
    torch._foreach_mul_(a, 1.5)
    torch._foreach_addcmul_(a, shared, shared, -0.25)
    return [t.cpu() for t in a]


def test_aliased_positions_run_op_by_op():
    # One storage read at two positions: chunk-major could only be right if
    # no op wrote it, which the chain does not try to prove (a write to memory
    # reached from two positions is a race for a single foreach launch too),
    # so the chain task runs the ops one by one: the same bytes.
    _, unfused0 = _C._foreach_chain_counts()
    on = _shared_reads()
    _, unfused1 = _C._foreach_chain_counts()
    assert unfused1 > unfused0
    _assert_bits(on, _chains_off(_shared_reads))


def test_errors_raise_at_the_call():
    a = _lists(2)
    torch._foreach_mul_(a, 2.0)  # held
    with pytest.raises(RuntimeError):
        torch._foreach_add_(a, _lists(3))  # list sizes differ
    with pytest.raises(RuntimeError):
        torch._foreach_add_(a, [torch.randn(7).to(DEV), torch.randn(7).to(DEV)])
    ca = [t.cpu() for t in a]
    assert len(ca) == 2


def test_profiler_shows_each_foreach_op():
    a, b = _lists(), _lists()
    with torch.profiler.profile() as prof:
        torch._foreach_mul_(a, 0.9)
        torch._foreach_addcmul_(a, b, b, 0.1)
        torch._foreach_sqrt(a)
        torch_neuronx.synchronize()
    names = {e.name for e in prof.events()}
    for op in ("aten::_foreach_mul_", "aten::_foreach_addcmul_", "aten::_foreach_sqrt"):
        assert op in names


def _two_streams():
    torch.manual_seed(4)
    a, b = _lists(), _lists()
    torch._foreach_mul_(a, 1.25)  # held on the default stream
    s = torch.neuron.Stream()
    s.wait_stream(torch.neuron.current_stream())  # an event wait: the chain runs first
    with torch.neuron.stream(s):
        torch._foreach_add_(b, a, alpha=0.5)  # another stream: a chain of its own
        torch._foreach_mul_(b, 3.0)
    torch.neuron.current_stream().wait_stream(s)
    torch._foreach_addcmul_(a, b, b, 0.1)
    return [t.cpu() for t in a + b]


def test_chains_across_streams():
    on = _two_streams()
    _assert_bits(on, _chains_off(_two_streams))


def test_eager_fusion_flush_runs_held_ops():
    """torch_neuronx.eager_fusion.flush() leaves nothing queued, foreach chains included."""
    a = _lists()
    torch.neuron.synchronize()
    assert not _C._foreach_chain_held()
    torch._foreach_mul_(a, 2.0)  # held
    assert _C._foreach_chain_held()
    torch_neuronx.eager_fusion.flush()
    assert not _C._foreach_chain_held()
