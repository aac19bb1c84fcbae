"""Instructions per generate() token, neuron vs PyTorch CPU, counted by valgrind (callgrind).

Wall and process time on a shared 2-vCPU machine move by 10-70 % between runs
(docs/performance.md, host33 / lone34); an instruction count does not: two runs
of the same build agree to ~0.1 %. This runs greedy generate() (tests/model_zoo.py
"small", batch 1, 32 tokens, one thread) under callgrind for each side - PyTorch
CPU, neuron from this checkout and, with --baseline TREE, neuron from TREE's
build - collecting only over --calls calls after two warm-up calls, and prints
instructions per token by library (the products apart). Instructions are not
time (a locked instruction's store-buffer drain or a cache miss costs no
count), but a host-path change that removes work shows here at any load.

valgrind does not decode AVX-512, so every side runs its AVX2 kernels
(TORCH_NEURONX_CPU_CAPABILITY=avx2, ATEN_CPU_CAPABILITY=avx2; MKL picks AVX2
itself) and Adaptive Eager's compiled groups are built with -march=x86-64-v3
(a CC wrapper) into a private graph cache. The products' counts are therefore
not those of the native build; compare the other rows. Adaptive Eager is off
unless --fusion: its trials time groups, and valgrind's timings change which
patterns it keeps from run to run (GPT-2's `_C` row read 168 vs 351 thousand
for two builds with the same eager path). Needs valgrind, its
headers (valgrind/callgrind.h) and gcc. ~1.5 min per side and model:

    .venv/bin/python bench/bench_generate_instr.py [--models llama,gpt2] [--baseline ../main]
"""

import argparse
import collections
import os
import re
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
TOKENS = 32

TOGGLE_C = r"""
#include <valgrind/callgrind.h>
void cg_on(void) { CALLGRIND_ZERO_STATS; CALLGRIND_START_INSTRUMENTATION; CALLGRIND_TOGGLE_COLLECT; }
void cg_off(void) { CALLGRIND_TOGGLE_COLLECT; CALLGRIND_STOP_INSTRUMENTATION; CALLGRIND_DUMP_STATS; }
"""

CC_WRAPPER = """#!/bin/sh
# -march=native would emit AVX-512, which valgrind cannot run.
for a do
  shift
  [ "$a" = "-march=native" ] && a="-march=x86-64-v3"
  set -- "$@" "$a"
done
exec gcc "$@"
"""

PRODUCTS = ("gemv", "sgemm", "wc_", "mm_run", "tile_mm", "brgemm", "gemm_kernel")
CATEGORIES = ("python", "torch_python", "aten/c10", "products", "libtrn", "_C", "libc", "other")


def child(device, model, calls, toggle):
    import ctypes

    sys.path.insert(0, os.path.join(HERE, "..", "tests"))
    sys.path.insert(0, HERE)
    import torch

    if device == "neuron":
        import torch_neuronx  # noqa: F401
    import model_zoo as zoo
    from bench_models import make_generate

    torch.set_num_threads(1)
    torch.manual_seed(0)
    m = zoo.MODELS[model]("small").eval().to(device)
    ids = torch.randint(0, zoo.VOCAB, (1, 8), generator=torch.Generator().manual_seed(0))
    run = make_generate(m, device, ids, TOKENS)
    for _ in range(2):
        run()
    lib = ctypes.CDLL(toggle)
    lib.cg_on()
    for _ in range(calls):
        run()
    lib.cg_off()


def category(obj, fn):
    # JIT code (oneDNN's product kernels here) has no object file.
    if any(k in fn for k in PRODUCTS) or obj in ("???", ""):
        return "products"
    if "python3" in obj:
        return "python"
    if "torch_python" in obj:
        return "torch_python"
    if obj.startswith(("libtorch_cpu", "libc10")):
        return "aten/c10"
    if obj.startswith("libtrn"):
        return "libtrn"
    if obj.startswith("_C."):
        return "_C"
    if obj.startswith("libc."):
        return "libc"
    return "other"


def count(tree, device, model, calls, work, fusion):
    out = os.path.join(work, f"cg.{device}.{model}.{abs(hash(tree))}")
    env = {
        **os.environ,
        "PYTHONPATH": tree,
        "TORCH_NEURONX_CPU_CAPABILITY": "avx2",
        "ATEN_CPU_CAPABILITY": "avx2",
        "TORCH_NEURONX_NUM_THREADS": "1",
        "OMP_NUM_THREADS": "1",
        "CC": os.path.join(work, "cc.sh"),
        "TORCH_NEURONX_NEFF_CACHE_DIR": os.path.join(work, "graphs"),
        "TORCH_NEURONX_EAGER_FUSION": "1" if fusion else "0",
    }
    cmd = [
        "valgrind",
        "--tool=callgrind",
        "--instr-atstart=no",
        "--collect-atstart=no",
        f"--callgrind-out-file={out}",
        sys.executable,
        os.path.join(tree, "bench", os.path.basename(__file__)),
        "--child",
        device,
        model,
        str(calls),
        os.path.join(work, "libcgtoggle.so"),
    ]
    if not os.path.exists(cmd[6]):  # a baseline tree without this script
        cmd[6] = os.path.abspath(__file__)
    r = subprocess.run(cmd, env=env, cwd=tree, capture_output=True, text=True)
    dumps = [f for f in os.listdir(work) if f.startswith(os.path.basename(out) + ".")]
    if r.returncode != 0 or not dumps:
        sys.exit(f"callgrind run failed ({device} {model}):\n{r.stderr[-3000:]}")
    report = subprocess.run(
        ["callgrind_annotate", "--threshold=100", os.path.join(work, dumps[0])],
        capture_output=True,
        text=True,
    ).stdout
    per = collections.Counter()
    for line in report.splitlines():
        m = re.match(r"\s*([\d,]+) \([\s\d.]+%\)\s+(.*?):(.*) \[(.*)\]$", line)
        if m:
            obj = os.path.basename(m.group(4))
            per[category(obj, m.group(3))] += int(m.group(1).replace(",", ""))
        elif line.strip().startswith(tuple("0123456789")) and "???:0x" in line:
            per["products"] += int(line.split()[0].replace(",", ""))
    return {k: v / (calls * TOKENS) for k, v in per.items()}


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default="llama,gpt2")
    ap.add_argument("--baseline", help="also neuron from this tree's build")
    ap.add_argument("--calls", type=int, default=1, help="generate() calls counted per side")
    ap.add_argument("--fusion", action="store_true", help="leave Adaptive Eager on")
    ap.add_argument("--child", nargs=4, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        child(args.child[0], args.child[1], int(args.child[2]), args.child[3])
        return
    sides = [("cpu", ROOT, "cpu"), ("neuron", ROOT, "neuron")]
    if args.baseline:
        sides.append(("baseline", os.path.abspath(args.baseline), "neuron"))
    with tempfile.TemporaryDirectory(prefix="gen_instr_") as work:
        with open(os.path.join(work, "toggle.c"), "w") as f:
            f.write(TOGGLE_C)
        subprocess.run(
            ["gcc", "-O2", "-shared", "-fPIC", "-o", os.path.join(work, "libcgtoggle.so")]
            + [os.path.join(work, "toggle.c")],
            check=True,
        )
        with open(os.path.join(work, "cc.sh"), "w") as f:
            f.write(CC_WRAPPER)
        os.chmod(os.path.join(work, "cc.sh"), 0o755)
        os.mkdir(os.path.join(work, "graphs"), 0o700)
        print("thousand instructions per token (callgrind, one thread, AVX2 kernels)")
        for model in args.models.split(","):
            res = {
                name: count(tree, dev, model, args.calls, work, args.fusion)
                for name, tree, dev in sides
            }
            names = [name for name, _, _ in sides]
            print(f"{model}:")
            print(f"  {'category':14s}" + "".join(f"{n:>10s}" for n in names))
            for c in CATEGORIES + ("all", "all but products"):
                vals = []
                for n in names:
                    r = res[n]
                    if c == "all":
                        vals.append(sum(r.values()))
                    elif c == "all but products":
                        vals.append(sum(r.values()) - r.get("products", 0))
                    else:
                        vals.append(r.get(c, 0))
                print(f"  {c:14s}" + "".join(f"{v / 1e3:10.1f}" for v in vals))


if __name__ == "__main__":
    main()
