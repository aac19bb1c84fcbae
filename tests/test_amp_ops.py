"""GradScaler's ops run natively on neuron and match the CPU:
_amp_foreach_non_finite_check_and_unscale_ (dtypes, non-contiguous grads,
inf/NaN anywhere, a set flag never cleared) and _amp_update_scale_ (growth,
backoff, overflow-safe growth), with the CPU's error messages."""

import pytest
import torch

import torch_neuronx


def unscale_both(grads, inv):
    out = []
    for device in ("cpu", "neuron"):
        gs = [g.clone().to(device) if device == "cpu" else g.to(device) for g in grads]
        found = torch.zeros(1, device=device)
        torch._amp_foreach_non_finite_check_and_unscale_(
            gs, found, torch.tensor([inv], device=device)
        )
        out.append(([g.cpu() for g in gs], found.cpu()))
    return out


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_unscale_matches_cpu(dtype):
    gen = torch.Generator().manual_seed(0)
    grads = [
        torch.randn(300, 70, generator=gen).to(dtype),
        torch.randn(70, 300, generator=gen).to(dtype).t(),  # non-contiguous
        torch.randn(5, generator=gen).to(dtype),
    ]
    torch_neuronx.clear_op_tracking()
    (cg, cf), (ng, nf) = unscale_both(grads, 0.125)
    assert "aten::_amp_foreach_non_finite_check_and_unscale_" in torch_neuronx.get_executed_ops()
    assert torch_neuronx.get_fallback_ops() == []
    assert nf.item() == cf.item() == 0.0
    for a, b in zip(ng, cg):
        assert torch.equal(a, b)
    for bad in (float("inf"), float("-inf"), float("nan")):
        g2 = [g.clone() for g in grads]
        g2[1][17, 3] = bad
        (cg, cf), (ng, nf) = unscale_both(g2, 0.5)
        assert nf.item() == cf.item() == 1.0
        for a, b in zip(ng, cg):
            torch.testing.assert_close(a, b, rtol=0, atol=0, equal_nan=True)


def test_unscale_keeps_found_flag_and_errors():
    g = [torch.ones(4, device="neuron")]
    found = torch.ones(1, device="neuron")
    torch._amp_foreach_non_finite_check_and_unscale_(g, found, torch.ones(1, device="neuron"))
    assert found.item() == 1.0 and torch.equal(g[0].cpu(), torch.ones(4))
    with pytest.raises(RuntimeError, match="inv_scale must be a 1-element tensor"):
        torch._amp_foreach_non_finite_check_and_unscale_(g, found, torch.ones(2, device="neuron"))
    with pytest.raises(RuntimeError, match="found_inf must be a float tensor"):
        torch._amp_foreach_non_finite_check_and_unscale_(
            g, torch.zeros(1, device="neuron", dtype=torch.float64), torch.ones(1, device="neuron")
        )


@pytest.mark.parametrize("found_seq", [[0, 0, 0, 0, 1, 0], [1, 1, 0, 0, 0], [0] * 7])
def test_update_scale_matches_cpu(found_seq):
    results = []
    for device in ("cpu", "neuron"):
        scale = torch.tensor([65536.0], device=device)
        tracker = torch.zeros(1, dtype=torch.int32, device=device)
        hist = []
        for f in found_seq:
            torch._amp_update_scale_(
                scale, tracker, torch.tensor([float(f)], device=device), 2.0, 0.5, 3
            )
            hist.append((scale.item(), tracker.item()))
        results.append(hist)
    assert results[0] == results[1]


def test_update_scale_overflow_and_errors():
    scale = torch.tensor([3e38], device="neuron")
    tracker = torch.zeros(1, dtype=torch.int32, device="neuron")
    torch._amp_update_scale_(scale, tracker, torch.zeros(1, device="neuron"), 2.0, 0.5, 1)
    assert scale.item() == pytest.approx(3e38) and tracker.item() == 0
    with pytest.raises(RuntimeError, match="growth_tracker must be an int tensor"):
        torch._amp_update_scale_(
            scale, tracker.float(), torch.zeros(1, device="neuron"), 2.0, 0.5, 1
        )
