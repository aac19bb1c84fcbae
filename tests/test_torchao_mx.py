"""TorchAO MX (MXFP8 linear) training of a small bfloat16 transformer on
neuron vs the same on CPU from one seed, eager and compiled.

torchao 0.18's MXFP8 training op is `mx_mm` (torchao.prototype.
moe_training.mxfp8_linear): e4m3fn elements, one e8m0 scale per 32 (RCEIL)
for the three GEMMs of a linear (forward, grad input, grad weight). Its
`MXFP8Linear` module hard-wires the Triton/CUDA cast kernels, so the layers
here call `mx_mm` with torchao's TORCH cast choice (the same recipe, in
PyTorch ops). On neuron it runs with KernelPreference.AUTO: the real MX
GEMM, torch._scaled_mm with swizzled e8m0 scales (native, libtrn
scaled_mm.c). PyTorch CPU has no MX _scaled_mm, so CPU runs torchao's
EMULATED preference: the same quantization, dequantized, then a bfloat16
mm with float32 accumulation. Nothing falls back on neuron."""

import copy

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import torch_neuronx

pytest.importorskip("torchao.prototype.moe_training", reason="torchao (requirements-dev.txt)")
from torchao.prototype.moe_training.mxfp8_linear import mx_mm  # noqa: E402
from torchao.prototype.mx_formats.config import (  # noqa: E402
    MXFP8Dim0CastKernelChoice,
    MXFP8Dim1CastKernelChoice,
    ScaleCalculationMode,
)
from torchao.quantization.quantize_.common.kernel_preference import (  # noqa: E402
    KernelPreference,
)

DEV = "neuron"


class MXLinear(nn.Linear):
    """nn.Linear whose three GEMMs are MXFP8 (torchao mx_mm, block 32)."""

    kernel = KernelPreference.AUTO

    def forward(self, x):
        f8 = torch.float8_e4m3fn
        return mx_mm.apply(
            x,
            self.weight,
            f8,
            f8,
            f8,
            32,
            self.kernel,
            MXFP8Dim0CastKernelChoice.TORCH,
            MXFP8Dim1CastKernelChoice.TORCH,
            ScaleCalculationMode.RCEIL,
            False,
        )


class Block(nn.Module):
    """Pre-norm attention + MLP; every K a multiple of 32 (MX blocks)."""

    def __init__(self, dim=64, heads=4, hidden=128):
        super().__init__()
        self.heads = heads
        self.n1, self.n2 = nn.RMSNorm(dim), nn.RMSNorm(dim)
        self.qkv = MXLinear(dim, 3 * dim, bias=False)
        self.proj = MXLinear(dim, dim, bias=False)
        self.up = MXLinear(dim, hidden, bias=False)
        self.down = MXLinear(hidden, dim, bias=False)

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = self.qkv(self.n1(x)).view(b, t, 3, self.heads, d // self.heads).unbind(2)
        a = F.scaled_dot_product_attention(
            q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), is_causal=True
        )
        x = x + self.proj(a.transpose(1, 2).reshape(b, t, d))
        return x + self.down(F.gelu(self.up(self.n2(x))))


def _train(model, device, kernel, compile_it):
    model = model.to(device)
    for mod in model.modules():
        if isinstance(mod, MXLinear):
            mod.kernel = kernel
    fwd = torch.compile(model, backend="neuron") if compile_it else model
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    g = torch.Generator().manual_seed(1)
    losses = []
    for _ in range(4):
        x = torch.randn(2, 16, 64, generator=g).to(torch.bfloat16).to(device)
        loss = fwd(x).float().pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses, {k: v.detach().cpu() for k, v in model.state_dict().items()}


@pytest.mark.parametrize("compile_it", [False, True], ids=["eager", "compiled"])
def test_mx_training_like_cpu_emulation(compile_it):
    torch.manual_seed(0)
    base = nn.Sequential(Block(), Block()).to(torch.bfloat16)
    if compile_it:
        torch._dynamo.reset()
    cpu_losses, cpu_params = _train(copy.deepcopy(base), "cpu", KernelPreference.EMULATED, False)
    torch_neuronx.clear_op_tracking()
    torch.neuron.reset_dynamo_metrics()
    dev_losses, dev_params = _train(copy.deepcopy(base), DEV, KernelPreference.AUTO, compile_it)
    assert torch_neuronx.get_fallback_ops() == []
    executed = torch_neuronx.get_executed_ops()
    if compile_it:
        # The float8 matmuls are extern steps of the compiled programs
        # (lower_scaled_mm.py), not eager _scaled_mm calls.
        m = torch.neuron.get_dynamo_metrics()
        assert m["extern_kernels"] > 0 and m["fallback_graphs"] == 0, m
        assert not any("_scaled_mm" in op for op in executed), executed
    else:
        assert any("_scaled_mm" in op for op in executed), executed
    # Tolerances: bfloat16 activations (attention, norms); a value moved
    # across an e4m3 or bfloat16 rounding boundary by a float32 sum in
    # another order changes by one step there, so losses agree to ~1e-3
    # (measured: 8e-4 eager, 6e-4 compiled) and parameters to bfloat16
    # steps (measured: max 1.5e-3).
    torch.testing.assert_close(
        torch.tensor(dev_losses), torch.tensor(cpu_losses), rtol=3e-3, atol=1e-4
    )
    for name, p in cpu_params.items():
        torch.testing.assert_close(
            dev_params[name].float(),
            p.float(),
            rtol=2e-2,
            atol=2e-3,
            msg=lambda m, name=name: f"{name}: {m}",
        )


# ---- the user API: quantize_(model, MXFP8TrainingOpConfig) --------------------
# torchao 0.18's MXFP8 training entry point (it has no MXLinearConfig) swaps
# each weight for an MXFP8TrainingWeightWrapperTensor whose linear calls
# mxfp8_linear._to_mxfp8_then_scaled_mm, and that function fixes the cast
# kernels to MXFP8Dim0CastKernelChoice.TRITON / MXFP8Dim1CastKernelChoice.CUDA
# (mxfp8_linear.py:65-66): with KernelPreference.AUTO (the MXFP8_RCEIL
# recipes) the forward cast raises "needs triton" (mx_formats/kernels.py:1002)
# off CUDA, on neuron as on CPU. The MXFP8_EMULATED_RCEIL recipe is the same
# quantization in PyTorch ops (to_mx: block amax, e8m0 scale, float8 cast),
# dequantized into a bfloat16 mm: it trains on neuron natively, checked here
# against the same recipe on CPU.


class PlainBlock(Block):
    def __init__(self, dim=64, heads=4, hidden=128):
        super().__init__(dim, heads, hidden)
        for name in ("qkv", "proj", "up", "down"):
            old = getattr(self, name)
            setattr(self, name, nn.Linear(old.in_features, old.out_features, bias=False))


def _train_quantized(model, device, compile_it):
    from torchao.prototype.moe_training.config import MXFP8TrainingOpConfig, MXFP8TrainingRecipe
    from torchao.quantization import quantize_

    model = model.to(device)
    config = MXFP8TrainingOpConfig.from_recipe(MXFP8TrainingRecipe.MXFP8_EMULATED_RCEIL)
    quantize_(model, config, filter_fn=lambda m, fqn: isinstance(m, nn.Linear))
    fwd = torch.compile(model, backend="neuron") if compile_it else model
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    g = torch.Generator().manual_seed(1)
    losses = []
    for _ in range(4):
        x = torch.randn(2, 16, 64, generator=g).to(torch.bfloat16).to(device)
        loss = fwd(x).float().pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses, {k: v.detach().cpu().float() for k, v in model.state_dict().items()}


@pytest.mark.parametrize("compile_it", [False, True], ids=["eager", "compiled"])
def test_quantize_mxfp8_training_op_config_like_cpu(compile_it):
    torch.manual_seed(0)
    base = nn.Sequential(PlainBlock(), PlainBlock()).to(torch.bfloat16)
    torch._dynamo.reset()
    cpu_losses, cpu_params = _train_quantized(copy.deepcopy(base), "cpu", False)
    torch_neuronx.clear_op_tracking()
    dev_losses, dev_params = _train_quantized(copy.deepcopy(base), DEV, compile_it)
    assert torch_neuronx.get_fallback_ops() == []
    torch.testing.assert_close(
        torch.tensor(dev_losses), torch.tensor(cpu_losses), rtol=3e-3, atol=1e-4
    )
    for name, p in cpu_params.items():
        torch.testing.assert_close(
            dev_params[name], p, rtol=2e-2, atol=2e-3, msg=lambda m, name=name: f"{name}: {m}"
        )
