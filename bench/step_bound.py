"""Where a training step's time goes, and the best ratio any kernel work can reach.

For each model of tests/model_zoo.py ("small" configs, as bench_models.py)
and each side (neuron, PyTorch CPU) a child process runs AdamW training
steps on one thread under `perf record` (Debian's `linux-perf`), starting
the recording after the warm-up. Each sample is put in one bucket:

- matrix: oneDNN's JIT code and libdnnl, MKL's BLAS, libtrn's own GEMM tiles
  (GEMM and convolution; at this core's FMA peak on both sides);
- kernels: every other compute kernel (libtrn and fused-group code on neuron;
  ATen's vectorised loops, Sleef and MKL VML on the CPU);
- gc: Python's cyclic garbage collector;
- python: the rest of the interpreter;
- host: dispatcher, autograd engine, adapters, allocator, libc, the OS.

The step time is process CPU time per step (robust to other load). One thread
each side: with two, PyTorch's OpenMP workers spin between kernels and that
spin is CPU time too (5-10x the step on a loaded machine). The
bound assumes every non-matrix kernel of neuron's step took no time at all
while matrix, Python, GC and host stayed as measured: `CPU step ÷ (neuron
step - neuron kernels)`. When that is below a target, no kernel work on this
machine can reach it; only less matrix, Python, GC or host time can.

    .venv/bin/python bench/step_bound.py [--models gpt2,llama] [--secs 12] [--no-autocast]
"""

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests"))

BUCKETS = ("matrix", "kernels", "gc", "python", "host")

# Interpreter symbols of the cyclic collector (CPython 3.10-3.12).
GC_SYMBOLS = re.compile(
    r"gc_collect|visit_reachable|visit_decref|subtract_refs|update_refs|move_unreachable"
    r"|PyObject_IS_GC|_traverse$|_traverse\.|VisitInstanceAttributes|MaybeUntrack"
    r"|move_legacy_finalizer|untrack_tuples|untrack_dicts|deduce_unreachable"
)
MATRIX_SYMBOLS = re.compile(r"gemm|brgemm|tile_mm|mkl_blas|dnnl|jit_|winograd", re.I)
CPU_KERNEL_SYMBOLS = re.compile(
    r"at::native::.*(kernel|Loop|loop|flash_attention|softmax|norm|reduce|vec)|Sleef_|mkl_vml"
    r"|cpu_kernel|VectorizedLoop|serial_for_each|batch_norm|max_pool|embedding",
)


def bucket_of(dso: str, sym: str) -> str:
    if dso.startswith("[JIT]") or dso.startswith("libdnnl") or MATRIX_SYMBOLS.search(sym):
        return "matrix"
    if dso.startswith("libpython"):
        return "gc" if GC_SYMBOLS.search(sym) else "python"
    if dso.startswith("libtrn") or dso == "graph.so":  # graph.so: fused groups
        return "kernels"
    if dso.startswith("libtorch_cpu") and CPU_KERNEL_SYMBOLS.search(sym):
        return "kernels"
    return "host"


def child(name: str, device: str, autocast: bool, secs: float, ready: str) -> None:
    import torch

    import model_zoo as zoo

    sys.path.insert(0, HERE)
    from bench_models import make_step, zoo_batch

    torch.set_num_threads(1)
    torch.manual_seed(0)
    step = make_step(name, zoo.MODELS[name]("small").to(device), device, zoo_batch(name), autocast)
    for _ in range(4):
        step()
    if device == "neuron":
        import torch_neuronx

        torch_neuronx.eager_fusion.wait_for_compiles()
        step()
    with open(ready, "w") as f:  # perf starts counting once this file exists
        f.write("1")
    time.sleep(0.3)
    n, t0, w0 = 0, time.process_time(), time.perf_counter()
    while time.perf_counter() - w0 < secs:
        step()
        n += 1
    print(f"STEP_MS {(time.process_time() - t0) / n * 1e3:.3f} {n}", flush=True)
    # Interpreter shutdown runs full garbage collections over every imported
    # module (a few hundred ms); under perf that read as "GC is 10-19 % of a
    # step" in earlier profiles. Leave without it.
    os._exit(0)


def measure(name: str, device: str, autocast: bool, secs: float) -> tuple[float, dict, list]:
    env = dict(os.environ, OMP_NUM_THREADS="1", TORCH_NEURONX_NUM_THREADS="1")
    with tempfile.TemporaryDirectory() as tmp:
        data, ready = os.path.join(tmp, "perf.data"), os.path.join(tmp, "ready")
        cmd = [sys.executable, os.path.abspath(__file__), "--child", name, device, ready]
        cmd += ["--secs", str(secs)] + (["--autocast"] if autocast else [])
        # perf's --control lets the child's warm-up (imports, first steps,
        # background compiles) stay out of the profile.
        ctl = os.path.join(tmp, "ctl")
        os.mkfifo(ctl)
        perf = ["perf", "record", "-F", "999", "-q", "-D", "-1", "--control", f"fifo:{ctl}"]
        proc = subprocess.Popen(
            perf + ["-o", data, "--"] + cmd, env=env, stdout=subprocess.PIPE, text=True
        )
        fd = os.open(ctl, os.O_WRONLY)
        while not os.path.exists(ready) and proc.poll() is None:
            time.sleep(0.05)
        os.write(fd, b"enable\n")
        out, _ = proc.communicate()
        os.close(fd)
        if proc.returncode != 0:
            raise SystemExit(f"{name} {device}: child failed ({proc.returncode})")
        step_ms = float(re.search(r"STEP_MS (\S+)", out).group(1))
        report = subprocess.run(
            ["perf", "report", "-i", data, "--stdio", "--no-children", "--sort", "dso,sym"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
    shares = dict.fromkeys(BUCKETS, 0.0)
    symbols = []  # (share, bucket, dso, symbol), largest first as perf prints them
    line = re.compile(r"^\s*([\d.]+)%\s+(\S+(?: tid \d+)?)\s+\[.\]\s+(.*)$")
    for row in report.splitlines():
        m = line.match(row)
        if m:
            share, dso, sym = float(m.group(1)) / 100, m.group(2), m.group(3).strip()
            bucket = bucket_of(dso, sym)
            shares[bucket] += share
            symbols.append((share, bucket, dso, sym))
    total = sum(shares.values()) or 1.0
    top = [(sh / total * step_ms, b, d, s) for sh, b, d, s in symbols]
    return step_ms, {k: v / total * step_ms for k, v in shares.items()}, top


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default="gpt2,llama,bert,resnet")
    ap.add_argument("--secs", type=float, default=12.0, help="profiled seconds per side")
    ap.add_argument("--no-autocast", action="store_true")
    ap.add_argument("--top", type=int, default=0, help="also list each side's N largest symbols")
    ap.add_argument(
        "--child", nargs=3, metavar=("MODEL", "DEVICE", "READY"), help=argparse.SUPPRESS
    )
    ap.add_argument("--autocast", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        child(*args.child[:2], args.autocast, args.secs, args.child[2])
        return
    if shutil.which("perf") is None:
        raise SystemExit("step_bound.py needs perf (Debian: apt-get install linux-perf)")
    print("ms per step, one thread, process CPU time; buckets from perf samples")
    head = "| model | side | step | " + " | ".join(BUCKETS) + " |"
    print(head + " CPU ÷ neuron | bound (kernels free) |")
    print("|" + "---|" * (len(BUCKETS) + 5))
    for name in args.models.split(","):
        for autocast in (False,) if args.no_autocast else (False, True):
            label = f"{name} {'bf16' if autocast else 'f32'}"
            res = {d: measure(name, d, autocast, args.secs) for d in ("neuron", "cpu")}
            cpu_ms, neu_ms = res["cpu"][0], res["neuron"][0]
            bound = cpu_ms / max(neu_ms - res["neuron"][1]["kernels"], 1e-9)
            for d in ("neuron", "cpu"):
                ms, b, _ = res[d]
                cells = " | ".join(f"{b[k]:.1f}" for k in BUCKETS)
                tail = f" {cpu_ms / neu_ms:.2f} | {bound:.2f} |" if d == "neuron" else " | |"
                print(f"| {label} | {d} | {ms:.1f} | {cells} |{tail}", flush=True)
            for d in ("neuron", "cpu") if args.top else ():
                for ms, bucket, dso, sym in res[d][2][: args.top]:
                    print(f"    {label} {d:6} {ms:6.2f} ms  {bucket:7} {dso[:24]:24} {sym[:90]}")


if __name__ == "__main__":
    main()
