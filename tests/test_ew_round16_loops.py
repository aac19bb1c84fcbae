"""Elementwise ops whose float math rounds an intermediate to the 16-bit
storage type (pow(x, 3) and pow(x, -2), logit, div's floor and trunc modes)
run one loop copy per storage type (elementwise.c BLK1_16 / BLK2_16): every
bfloat16 and float16 value gives CPU's bits, in one launch and split over
the pool (a launch of 65536 elements at TORCH_NEURONX_NUM_THREADS=1 and 2)."""

import pytest
import torch

import torch_neuronx  # noqa: F401

from _thread_counts import outputs_at_thread_counts

DTYPES = [torch.bfloat16, torch.float16]


def every_value(dtype):
    """All 65536 bit patterns of a 16-bit float dtype, NaNs included."""
    return torch.arange(65536, dtype=torch.int32).to(torch.int16).view(dtype)


CASES = {
    "pow3": lambda a, b: torch.pow(a, 3.0),
    "pow_minus2": lambda a, b: torch.pow(a, -2.0),
    "logit": lambda a, b: torch.logit(a),
    "logit_eps": lambda a, b: torch.logit(a, eps=1e-3),
    "div_floor": lambda a, b: torch.div(a, b, rounding_mode="floor"),
    "div_trunc": lambda a, b: torch.div(a, b, rounding_mode="trunc"),
}


def same_bits_as_cpu(got, want):
    """Bit-equal, except that any NaN equals any NaN (payloads may differ)."""
    g, w = got.cpu(), want
    nan = torch.isnan(g) & torch.isnan(w)
    return bool(((g.view(torch.int16) == w.view(torch.int16)) | nan).all())


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("case", sorted(CASES))
def test_every_16bit_value_matches_cpu(dtype, case):
    x = every_value(dtype)
    y = x.flip(0).clone()  # every value as a divisor too, zeros and NaNs included
    f = CASES[case]
    assert same_bits_as_cpu(f(x.to("neuron"), y.to("neuron")), f(x, y))


def test_strided_and_in_place_bfloat16():
    x = every_value(torch.bfloat16).reshape(256, 256)
    xd = x.to("neuron")
    assert same_bits_as_cpu(torch.pow(xd.t(), 3.0), torch.pow(x.t(), 3.0))
    xc, xdc = x.clone(), xd.clone()
    xc.pow_(3.0)
    xdc.pow_(3.0)
    assert same_bits_as_cpu(xdc, xc)


def test_same_bits_at_thread_counts():
    code = (
        "import torch, torch_neuronx, hashlib\n"
        "h = hashlib.sha1()\n"
        "for dt in (torch.bfloat16, torch.float16):\n"
        "    x = torch.arange(65536, dtype=torch.int32).to(torch.int16).view(dt).to('neuron')\n"
        "    y = x.flip(0).clone()\n"
        "    for r in (x.pow(3.0), x.pow(-2.0), torch.logit(x),\n"
        "              torch.div(x, y, rounding_mode='floor'), torch.div(x, y, rounding_mode='trunc')):\n"
        "        h.update(r.cpu().view(torch.int16).numpy().tobytes())\n"
        "print(h.hexdigest())\n"
    )
    assert len(outputs_at_thread_counts(code, ("1", "2"))) == 1
