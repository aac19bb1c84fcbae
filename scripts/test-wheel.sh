#!/usr/bin/env bash
# Installability check (issue 21, item 5), as a new user meets the package:
#   1. `pip wheel` the source tree (no build isolation: the build needs the
#      torch it will run with; no download);
#   2. install the wheel into a fresh venv in a temporary directory, away from
#      the source tree, with torch 2.13.0 borrowed from an existing install
#      (TORCH_SITE: a site-packages holding torch and its dependencies;
#      default: this Python's) or installed from TORCH_WHEEL (a torch 2.13.0
#      CPU wheel on disk) - never downloaded;
#   3. from outside the tree: a compiled training step (torch.compile with
#      backend "neuron": gcc, the packaged libtrn headers, the disk cache),
#      `neuron-ls`, and the clear error a missing C compiler gives;
#   4. with FROM_SDIST=1: the same from a wheel built out of the sdist.
# Usage: scripts/test-wheel.sh [python]   (exit status 0: all passed)
set -euo pipefail
unset PYTHONPATH  # the installed package, never the source tree (pytest runs set it)
PY=${1:-${PYTHON:-python3}}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
WORK=$(mktemp -d "${TMPDIR:-/tmp}/openneuron-wheel-XXXXXX")
trap 'rm -rf "$WORK"' EXIT
t0=$(date +%s)
say() { echo "[test-wheel $(( $(date +%s) - t0 ))s] $*"; }

build_wheel() {  # $1: source dir, $2: output dir
    (cd "$1" && TORCH_DEVICE_BACKEND_AUTOLOAD=0 "$PY" -m pip wheel -q --no-build-isolation --no-deps -w "$2" .)
}

say "building the wheel from $ROOT"
build_wheel "$ROOT" "$WORK/dist"
WHEEL=$(ls "$WORK"/dist/openneuron-*.whl)
# The wheel build must not have built libtrn's C tests.
if ls "$ROOT"/build/cmake-wheel/libtrn/trn_test_* > /dev/null 2>&1; then
    echo "the wheel build built the C tests"; exit 1
fi
say "wheel: $(basename "$WHEEL") ($(du -h "$WHEEL" | cut -f1))"
# What the wheel must hold: the native libraries and the headers generated C includes.
"$PY" - "$WHEEL" <<'PYEOF'
import sys, zipfile
names = set(zipfile.ZipFile(sys.argv[1]).namelist())
need = ["torch_neuronx/include/trn/scalar.h", "torch_neuronx/include/trn/kernel_abi.h",
        "torch_neuronx/include/trn/convert.h", "torch_neuronx/lib/libtrn.so", "torch_neuronx/lib/trn-janitor"]
missing = [n for n in need if n not in names]
assert not missing, f"wheel lacks {missing}"
assert any(n.startswith("torch_neuronx/_C.") for n in names), "wheel lacks _C"
assert not any("/tests/" in n or n.startswith("tests/") for n in names), "wheel holds tests"
meta = next(n for n in names if n.endswith(".dist-info/METADATA"))
text = zipfile.ZipFile(sys.argv[1]).read(meta).decode()
assert "Requires-Dist: numpy" in text and "Requires-Dist: torch==2.13.0" in text, text
PYEOF

install_and_run() {  # $1: wheel
    local venv="$WORK/venv"
    rm -rf "$venv"
    "$PY" -m venv "$venv"
    if [ -n "${TORCH_WHEEL:-}" ]; then
        "$venv/bin/python" -m pip install -q --no-index "$TORCH_WHEEL" numpy 2>/dev/null || \
            "$venv/bin/python" -m pip install -q "$TORCH_WHEEL" numpy
    else
        # Borrow torch and its dependencies: only their directories (not
        # this environment's own .pth files, so no editable OpenNeuron leaks in).
        local site=${TORCH_SITE:-$("$PY" -c 'import os, torch; print(os.path.dirname(os.path.dirname(torch.__file__)))')}
        local borrowed="$WORK/borrowed"
        mkdir -p "$borrowed"
        for p in "$site"/*; do
            case "$(basename "$p")" in
                openneuron*|torch_neuronx*|__editable__*|pip|pip-*|*.pth) ;;
                *) ln -s "$p" "$borrowed/" ;;
            esac
        done
        local vsite
        vsite=$("$venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
        # The venv's own (older) setuptools would shadow the one torch requires.
        rm -rf "$vsite"/setuptools "$vsite"/setuptools-* "$vsite"/_distutils_hack "$vsite"/distutils-precedence.pth
        echo "$borrowed" > "$vsite/borrowed-torch.pth"
    fi
    "$venv/bin/python" -m pip install -q --no-index --no-build-isolation "$1"
    cd "$WORK"  # away from the source tree
    export TORCH_NEURONX_NEFF_CACHE_DIR="$WORK/cache" XDG_CONFIG_HOME="$WORK/config"
    say "compiled training step from $("$venv/bin/python" -c 'import torch_neuronx, os; print(os.path.dirname(torch_neuronx.__file__))')"
    "$venv/bin/python" - "$ROOT" <<'PYEOF'
import sys, torch
import torch_neuronx
root = sys.argv[1]
assert not torch_neuronx.__file__.startswith(root), torch_neuronx.__file__
from torch_neuronx._compile.config import _include_dir
assert not _include_dir().startswith(root), _include_dir()
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.GELU(), torch.nn.Linear(16, 2))
ref = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.GELU(), torch.nn.Linear(16, 2))
ref.load_state_dict(model.state_dict())
model = model.to("neuron")
opt, ref_opt = torch.optim.SGD(model.parameters(), lr=0.1), torch.optim.SGD(ref.parameters(), lr=0.1)

@torch.compile(backend="neuron")
def step(x):
    loss = model(x).square().mean()
    loss.backward()
    return loss.detach()

x = torch.randn(4, 8)
for _ in range(2):
    loss = step(x.to("neuron")); opt.step(); opt.zero_grad()
    ref_loss = ref(x).square().mean(); ref_loss.backward(); ref_opt.step(); ref_opt.zero_grad()
    torch.testing.assert_close(loss.cpu(), ref_loss.detach(), rtol=1e-5, atol=1e-6)
m = torch.neuron.get_dynamo_metrics()
assert m["compiles"] >= 2 and m["fallback_graphs"] == 0, m
print("compiled step ok:", {k: m[k] for k in ("graphs", "compiles", "kernels")})
PYEOF
    "$venv/bin/neuron-ls" > "$WORK/neuron-ls.txt"
    grep -q "OpenNeuron" "$WORK/neuron-ls.txt"
    say "neuron-ls ok"
    # Per-ISA kernels: both levels in the wheel, the best this CPU runs chosen
    # (avx512 where the CPU has x86-64-v4), avx2 forced gives the same values.
    "$venv/bin/python" - <<'PYEOF'
import os, subprocess, sys
import torch, torch_neuronx
assert torch_neuronx.cpu_capabilities() == ["avx2", "avx512"], torch_neuronx.cpu_capabilities()
flags = next(l for l in open("/proc/cpuinfo") if l.startswith("flags")).split()
v4 = all(f in flags for f in ("avx512f", "avx512bw", "avx512cd", "avx512dq", "avx512vl"))
assert torch_neuronx.cpu_capability() == ("avx512" if v4 else "avx2"), torch_neuronx.cpu_capability()
code = ("import torch, torch_neuronx\n"
        "x = torch.linspace(-3, 3, 10000)\n"
        "y = torch.nn.functional.gelu(x.to('neuron')).softmax(0).cumsum(0)\n"
        "torch.save((torch_neuronx.cpu_capability(), y.cpu()), 'level.pt')\n")
got = {}
for level in ["avx2", "avx512"] if v4 else ["avx2"]:
    subprocess.run([sys.executable, "-c", code], check=True,
                   env=dict(os.environ, TORCH_NEURONX_CPU_CAPABILITY=level))
    name, y = torch.load("level.pt")
    assert name == level, (name, level)
    got[level] = y
x = torch.linspace(-3, 3, 10000)
ref = torch.nn.functional.gelu(x).softmax(0).cumsum(0)
for level, y in got.items():
    torch.testing.assert_close(y, ref, msg=lambda m: f"{level}: {m}")
r = subprocess.run([sys.executable, "-c", "import torch; torch.ones(1, device='neuron')"],
                   env=dict(os.environ, TORCH_NEURONX_CPU_CAPABILITY="amx"), capture_output=True, text=True)
assert r.returncode != 0 and "TORCH_NEURONX_CPU_CAPABILITY='amx' is not a CPU level" in r.stderr, r.stderr
print("cpu levels ok:", torch_neuronx.cpu_capabilities(), "chosen", torch_neuronx.cpu_capability())
PYEOF
    grep -q "^cpu kernels: $("$venv/bin/python" -c 'import torch_neuronx; print(torch_neuronx.cpu_capability())') (built: avx2, avx512)" "$WORK/neuron-ls.txt" || {
        cat "$WORK/neuron-ls.txt"; echo "neuron-ls does not show the CPU level"; exit 1; }
    say "cpu levels ok"
    # No C compiler: a clear error naming gcc and how to install it.
    set +e
    CC=openneuron-no-such-cc TORCH_NEURONX_NEFF_DISABLE_CACHE=1 "$venv/bin/python" -c '
import torch
f = torch.compile(lambda x: x.exp() + 1, backend="neuron")
f(torch.ones(3, device="neuron"))' > "$WORK/nocc.txt" 2>&1
    rc=$?
    set -e
    [ $rc -ne 0 ] && grep -q "install gcc" "$WORK/nocc.txt" && grep -q "apt-get install gcc" "$WORK/nocc.txt" || {
        cat "$WORK/nocc.txt"; echo "no clear missing-compiler error"; exit 1; }
    say "missing C compiler error ok"
    cd "$ROOT"
}

install_and_run "$WHEEL"

say "building the sdist"
(cd "$ROOT" && TORCH_DEVICE_BACKEND_AUTOLOAD=0 "$PY" setup.py -q sdist -d "$WORK/sdist" > /dev/null 2>&1)
SDIST=$(ls "$WORK"/sdist/openneuron-*.tar.gz)
tar -tzf "$SDIST" > "$WORK/sdist.txt"
for f in CMakeLists.txt libtrn/CMakeLists.txt libtrn/include/trn/scalar.h libtrn/src/compiler/jit/jit.c \
         libtrn/tools/trn_janitor.c torch_neuronx/csrc/compile/compiler.cpp setup.py pyproject.toml; do
    grep -q "^openneuron-[^/]*/$f\$" "$WORK/sdist.txt" || { echo "sdist lacks $f"; exit 1; }
done
say "sdist contents ok"
if [ "${FROM_SDIST:-0}" = 1 ]; then
    mkdir -p "$WORK/src" && tar -xzf "$SDIST" -C "$WORK/src"
    build_wheel "$(ls -d "$WORK"/src/openneuron-*)" "$WORK/dist-sdist"
    install_and_run "$(ls "$WORK"/dist-sdist/openneuron-*.whl)"
    say "wheel from the sdist ok"
fi
say "all passed"
