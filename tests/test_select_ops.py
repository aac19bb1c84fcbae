"""kthvalue / median / nanmedian on neuron (libtrn select.c,
csrc/aten/select.cpp), natively, against PyTorch CPU: values, indices that
select those values, keepdim, NaN rules, integer and 16-bit dtypes, long
rows (quickselect, not a sort), gradients, out= forms, and ATen's errors."""

import pytest
import torch

import torch_neuronx


def _native(fn):
    torch_neuronx.clear_op_tracking()
    out = fn()
    assert torch_neuronx.get_fallback_ops() == [], torch_neuronx.get_fallback_ops()
    return out


def _check_pair(x, got, want, dim, keepdim):
    torch.testing.assert_close(got[0].cpu(), want[0], equal_nan=True)
    idx = got[1].cpu()
    assert idx.shape == want[1].shape
    picked = x.gather(dim, idx if keepdim else idx.unsqueeze(dim))
    torch.testing.assert_close(picked if keepdim else picked.squeeze(dim), want[0], equal_nan=True)


@pytest.mark.parametrize(
    "dtype", [torch.float32, torch.bfloat16, torch.int64, torch.uint8], ids=str
)
def test_matches_cpu(dtype):
    g = torch.Generator().manual_seed(0)
    x = (torch.randn(6, 50, 7, generator=g) * 20).to(dtype)  # integer rows repeat values
    d = x.to("neuron")
    for dim in (0, 1, -1):
        for keepdim in (False, True):
            for k in (1, 4, x.size(dim)):
                _check_pair(
                    x,
                    _native(lambda: d.kthvalue(k, dim, keepdim)),
                    x.kthvalue(k, dim, keepdim),
                    dim,
                    keepdim,
                )
            _check_pair(
                x, _native(lambda: d.median(dim, keepdim)), x.median(dim, keepdim), dim, keepdim
            )
            _check_pair(
                x,
                _native(lambda: d.nanmedian(dim, keepdim)),
                x.nanmedian(dim, keepdim),
                dim,
                keepdim,
            )
    assert _native(lambda: d.median()).cpu().item() == x.median().item()
    assert _native(lambda: d.nanmedian()).cpu().item() == x.nanmedian().item()


def test_nan_rules_and_long_rows():
    x = torch.randn(4, 20_001)
    x[1, 7] = x[1, 9] = float("nan")
    x[2] = float("nan")
    d = x.to("neuron")
    _check_pair(x, _native(lambda: d.median(1)), x.median(1), 1, False)
    assert _native(lambda: d.median(1)).indices.cpu()[1].item() == 7  # the first NaN
    _check_pair(x, _native(lambda: d.nanmedian(1)), x.nanmedian(1), 1, False)
    _check_pair(x, _native(lambda: d.kthvalue(20_000, 1)), x.kthvalue(20_000, 1), 1, False)
    assert torch.isnan(_native(lambda: d.median()).cpu())
    torch.testing.assert_close(_native(lambda: d.nanmedian()).cpu(), x.nanmedian())
    e = torch.empty(0, device="neuron")
    assert torch.isnan(e.median().cpu())


def test_gradients_and_out():
    x = torch.randn(5, 9)
    xc, xd = x.clone().requires_grad_(), x.to("neuron").requires_grad_()
    (xc.kthvalue(3, 1).values.sum() + xc.median(0).values.sum() + xc.median() * 2).backward()
    (xd.kthvalue(3, 1).values.sum() + xd.median(0).values.sum() + xd.median() * 2).backward()
    torch.testing.assert_close(xd.grad.cpu(), xc.grad)
    v = torch.empty(0, device="neuron")
    i = torch.empty(0, dtype=torch.long, device="neuron")
    _native(lambda: torch.kthvalue(x.to("neuron"), 2, 0, out=(v, i)))
    _check_pair(x, (v, i), x.kthvalue(2, 0), 0, False)
    v, i = v.new_empty(0), i.new_empty(0)
    _native(lambda: torch.median(x.to("neuron"), 1, True, out=(v, i)))
    _check_pair(x, (v, i), x.median(1, True), 1, True)


def test_argument_errors():
    d = torch.randn(3, 4, device="neuron")
    with pytest.raises(RuntimeError, match="selected number k out of range for dimension 1"):
        d.kthvalue(5, 1)
    with pytest.raises(RuntimeError, match="selected number k out of range"):
        d.kthvalue(0)
    with pytest.raises(IndexError, match="Expected reduction dim 1 to have non-zero size"):
        torch.empty(2, 0, device="neuron").median(1)
    with pytest.raises(IndexError, match="Dimension out of range"):
        d.median(2)
