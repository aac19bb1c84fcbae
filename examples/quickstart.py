"""OpenNeuron quickstart: the neuron device, a checked matmul, a tiny training
loop and the fallback report (which ops ran on the CPU, and how often)."""

import collections

import torch

import torch_neuronx


def check_device() -> None:
    print(f"torch {torch.__version__}, torch_neuronx {torch_neuronx.__version__}")
    print("accelerator:", torch.accelerator.current_accelerator())
    print("neuron devices:", torch.neuron.device_count(), "-", torch.neuron.get_device_name(0))


def check_matmul() -> None:
    # TorchNeuron's install check: the same matmul on neuron and on CPU.
    a, b = torch.randn(256, 256), torch.randn(256, 256)
    on_neuron = (a.to("neuron") @ b.to("neuron")).cpu()
    ok = torch.allclose(on_neuron, a @ b, atol=1e-4, rtol=1e-4)
    print(f"matmul on neuron matches CPU: {ok}")
    if not ok:
        raise SystemExit("matmul mismatch")


def train() -> None:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 32), torch.nn.GELU(), torch.nn.Linear(32, 1)).to(
        "neuron"
    )
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    x = torch.randn(128, 8, device="neuron")
    y = (x[:, :1] * 2 - x[:, 1:2]).detach()
    for step in range(5):
        opt.zero_grad()
        loss = torch.nn.functional.mse_loss(model(x), y)
        loss.backward()
        opt.step()
        print(f"step {step}: loss {loss.item():.4f}")


def fallback_report() -> None:
    torch.neuron.synchronize()
    fallback = collections.Counter(torch_neuronx.get_fallback_ops())
    executed = collections.Counter(torch_neuronx.get_executed_ops())
    print(
        f"native neuron ops: {sum(executed.values())} invocations of "
        f"{len(executed)} ops: {dict(executed)}"
    )
    print(f"CPU fallback: {sum(fallback.values())} invocations of {len(fallback)} ops")
    for op, n in fallback.most_common():
        print(f"  {op:40s} {n}")


if __name__ == "__main__":
    import warnings

    warnings.filterwarnings("ignore", message="neuron: ")  # the report below says it all
    check_device()
    torch_neuronx.clear_op_tracking()
    check_matmul()
    train()
    fallback_report()
