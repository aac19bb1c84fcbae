"""``neuron-evaluate [options] script.py [args]`` (also ``python -m
torch_neuronx.evaluate``): evaluate a script, print the summary, write the
JSON / HTML reports; the exit status is 0 when the program ran on neuron and
every threshold given holds, 1 otherwise, 2 for a usage error.
"""

from __future__ import annotations

import argparse
import os
import sys

from .report import THRESHOLDS


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(
        prog="neuron-evaluate",
        description="Run a PyTorch training script for N steps on the neuron device and report whether it runs, "
        "its CPU fallbacks, numerics vs the CPU, torch.compile behaviour, time, memory and what "
        "will differ on real TorchNeuron.",
    )
    ap.add_argument("--json", metavar="PATH", help="write the report as JSON")
    ap.add_argument("--html", metavar="PATH", help="write a self-contained HTML report")
    ap.add_argument("--steps", type=int, default=4, help="optimizer steps to evaluate (default 4)")
    ap.add_argument(
        "--map-device",
        metavar="SRC=DST[,...]",
        help="run a script written for another device: cuda=neuron",
    )
    ap.add_argument(
        "--strict",
        action="store_true",
        help="TorchNeuron strict mode (TORCH_NEURONX_STRICT=1): fail where real TorchNeuron would",
    )
    ap.add_argument("--no-shadow", action="store_true", help="skip shadow numerics")
    ap.add_argument(
        "--shadow-steps", type=int, default=1, help="steps run in shadow mode (default 1)"
    )
    ap.add_argument(
        "--shadow-float64-all",
        action="store_true",
        help="run the float64 reference for every op (default: only for ops that differ from the CPU "
        "beyond tolerance, where it decides the verdict)",
    )
    ap.add_argument("--no-compile", action="store_true", help="skip the torch.compile phases")
    ap.add_argument(
        "--no-cpu", action="store_true", help="skip the CPU reference run (loss curves)"
    )
    ap.add_argument("--quiet", action="store_true", help="no progress display")
    for name, (help_, _) in THRESHOLDS.items():
        ap.add_argument(
            "--" + name.replace("_", "-"),
            type=float,
            default=None,
            metavar="X",
            help=f"fail (exit 1) when {help_} exceeds X",
        )
    ap.add_argument("script", help="the Python script to evaluate")
    ap.add_argument("args", nargs=argparse.REMAINDER, help="the script's own arguments")
    return ap


def main(argv=None) -> int:
    ns = parser().parse_args(argv)
    if ns.strict:
        # (Before the device starts: it reads these once.)
        os.environ["TORCH_NEURONX_STRICT"] = "1"
        os.environ["TORCH_NEURONX_NATIVE_FLOAT64"] = "0"
        os.environ["TORCH_NEURONX_DISABLE_FALLBACK_EXECUTION"] = "1"
        from . import strict_devices

        strict_devices.configure()  # the device count of a Trn2 under this environment
    try:
        from . import devmap

        mapping = devmap.parse(ns.map_device)
    except ValueError as e:
        print(f"neuron-evaluate: {e}", file=sys.stderr)
        return 2
    if not os.path.isfile(ns.script):
        print(f"neuron-evaluate: no such script: {ns.script}", file=sys.stderr)
        return 2
    from . import evaluate_script

    report = evaluate_script(
        ns.script,
        ns.args,
        steps=ns.steps,
        map_device=ns.map_device or None,
        shadow=not ns.no_shadow,
        shadow_steps=ns.shadow_steps,
        shadow_float64="all" if ns.shadow_float64_all else "divergent",
        compile=not ns.no_compile,
        cpu_reference=not ns.no_cpu,
        strict=ns.strict,
        progress=not ns.quiet,
    )
    del mapping
    failures = report.check(**{k: getattr(ns, k) for k in THRESHOLDS})
    print(report.summary())
    if ns.json:
        report.to_json(ns.json)
    if ns.html:
        report.to_html(ns.html)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
