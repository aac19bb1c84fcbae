"""Builds the two native libraries with CMake and places them in the package.

`pip install --no-build-isolation -e .` and `setup.py build_ext --inplace`
(development) build libtrn's kernels for this machine (-march=native) plus the
x86-64-v3 baseline (so `make test` checks the run-time choice between CPU
levels) and keep the CMake build directory (build/cmake), so rebuilds are
incremental. A wheel or a regular install (`pip wheel .`, `pip install .`,
from the sdist too) builds libtrn for any x86-64-v3 CPU, with its kernels
twice: AVX2 (x86-64-v3) and AVX-512 (x86-64-v4), chosen when libtrn loads
(docs/compile.md). OPENNEURON_CPU_LEVELS overrides the levels (e.g.
`avx2;avx512;native`). A wheel also gets libtrn's public headers:
torch.compile's generated C includes them at run time. The libtrn C tests
are never built here (`make test-c` builds them on its own).
"""

import os
import shutil
import subprocess
import sys
from pathlib import Path

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

ROOT = Path(__file__).resolve().parent


class CMakeBuild(build_ext):
    def run(self):
        # setuptools clears `inplace` while building extensions (it copies
        # them into the source afterwards), and `pip install -e` sets
        # `editable_mode` instead: read both before they change.
        self._development = bool(self.inplace or getattr(self, "editable_mode", False))
        super().run()

    def build_extension(self, ext):
        # A wheel stages in its own build tree: its CMake directory must not
        # be the development one (other flags, other -march).
        dev = getattr(self, "_development", False)
        build_dir = ROOT / "build" / ("cmake" if dev else "cmake-wheel")
        build_dir.mkdir(parents=True, exist_ok=True)
        env = dict(os.environ, TORCH_DEVICE_BACKEND_AUTOLOAD="0")
        levels = os.environ.get("OPENNEURON_CPU_LEVELS") or (
            "avx2;native" if dev else "avx2;avx512"
        )
        flags = ["-DTRN_BUILD_TESTS=OFF", f"-DTRN_CPU_LEVELS={levels}"]
        if not dev:
            # The rest of libtrn (runtime, compiler, collectives) at the baseline.
            flags.append("-DTRN_BASE_ARCH=x86-64-v3")
        generator = ["-G", "Ninja"] if shutil.which("ninja") else []
        subprocess.check_call(
            [
                "cmake",
                "-S",
                str(ROOT),
                "-B",
                str(build_dir),
                *generator,
                f"-DPython3_EXECUTABLE={sys.executable}",
                "-DCMAKE_BUILD_TYPE=Release",
                *flags,
            ],
            env=env,
        )
        subprocess.check_call(
            ["cmake", "--build", str(build_dir), "-j", str(os.cpu_count() or 2)], env=env
        )
        built = next(build_dir.glob("_C.*.so"))
        libtrn = build_dir / "libtrn" / "libtrn.so"
        janitor = build_dir / "libtrn" / "trn-janitor"  # libtrn runs it from beside itself
        # The package itself (editable installs import from here) and the
        # wheel staging area (regular installs) both get a copy.
        staging = Path(self.get_ext_fullpath(ext.name)).parent
        for pkg in {ROOT / "torch_neuronx", staging}:
            (pkg / "lib").mkdir(parents=True, exist_ok=True)
            shutil.copy2(built, pkg / built.name)
            shutil.copy2(libtrn, pkg / "lib" / "libtrn.so")
            shutil.copy2(janitor, pkg / "lib" / "trn-janitor")
        if staging.resolve() != (ROOT / "torch_neuronx").resolve():
            # The headers generated C includes (the source tree finds them in
            # libtrn/include; config._include_dir looks here first).
            include = staging / "include" / "trn"
            shutil.rmtree(include, ignore_errors=True)
            include.mkdir(parents=True)
            for h in (ROOT / "libtrn" / "include" / "trn").glob("*.h"):
                shutil.copy2(h, include / h.name)


setup(ext_modules=[Extension("torch_neuronx._C", sources=[])], cmdclass={"build_ext": CMakeBuild})
