"""Copy and host-overhead benchmark: neuron vs PyTorch CPU, side by side.

Prints ratios (neuron / CPU, higher is better for bandwidth; lower is better
for overhead). Run: .venv/bin/python bench/bench_copy.py
"""

import time

import torch

import torch_neuronx  # noqa: F401


def _time(fn, reps: int) -> float:
    fn()
    best = float("inf")
    for _ in range(3):
        t0 = time.perf_counter()
        for _ in range(reps):
            fn()
        best = min(best, (time.perf_counter() - t0) / reps)
    return best


def bandwidth() -> None:
    print(f"{'copy (64 MiB fp32)':32}{'neuron GB/s':>14}{'cpu GB/s':>12}{'ratio':>8}")
    n = 16 * 2**20
    host = torch.randn(n)
    dev = host.to("neuron")
    dev2 = torch.empty_like(dev)
    cpu2 = torch.empty_like(host)
    nbytes = n * 4
    cases = [
        ("host->device", lambda: dev2.copy_(host), lambda: cpu2.copy_(host)),
        ("device->host", lambda: cpu2.copy_(dev), lambda: cpu2.copy_(host)),
        (
            "device->device",
            lambda: (dev2.copy_(dev), torch.neuron.synchronize()),
            lambda: cpu2.copy_(host),
        ),
        (
            "transpose 4096x4096",
            lambda: (
                dev2.view(4096, 4096).copy_(dev.view(4096, 4096).t()),
                torch.neuron.synchronize(),
            ),
            lambda: cpu2.view(4096, 4096).copy_(host.view(4096, 4096).t()),
        ),
        (
            "fp32->bf16",
            lambda: (dev.to(torch.bfloat16), torch.neuron.synchronize()),
            lambda: host.to(torch.bfloat16),
        ),
    ]
    for name, neuron_fn, cpu_fn in cases:
        tn, tc = _time(neuron_fn, 5), _time(cpu_fn, 5)
        gn, gc = 2 * nbytes / tn / 1e9, 2 * nbytes / tc / 1e9
        print(f"{name:32}{gn:14.1f}{gc:12.1f}{gn / gc:8.2f}")


def overhead() -> None:
    print(f"\n{'tiny-tensor overhead':32}{'neuron us':>14}{'cpu us':>12}{'ratio':>8}")
    h = torch.ones(4)
    d = h.to("neuron")
    cases = [
        ("empty(4)", lambda: torch.empty(4, device="neuron"), lambda: torch.empty(4)),
        ("clone (native copy)", lambda: d.clone(), lambda: h.clone()),
        ("view", lambda: d.view(2, 2), lambda: h.view(2, 2)),
        (".item()", lambda: d[0].item(), lambda: h[0].item()),
        ("add (CPU fallback)", lambda: d + d, lambda: h + h),
    ]
    import warnings

    warnings.filterwarnings("ignore", message="neuron: ")
    for name, neuron_fn, cpu_fn in cases:
        tn, tc = _time(neuron_fn, 2000) * 1e6, _time(cpu_fn, 2000) * 1e6
        print(f"{name:32}{tn:14.2f}{tc:12.2f}{tn / tc:8.2f}")


if __name__ == "__main__":
    bandwidth()
    overhead()
