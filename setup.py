"""Builds the two native libraries with CMake and places them in the package.

`pip install --no-build-isolation -e .` runs this; the CMake build directory
(build/cmake) is kept, so rebuilds are incremental.
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
    def build_extension(self, ext):
        build_dir = ROOT / "build" / "cmake"
        build_dir.mkdir(parents=True, exist_ok=True)
        env = dict(os.environ, TORCH_DEVICE_BACKEND_AUTOLOAD="0")
        subprocess.check_call(
            ["cmake", "-S", str(ROOT), "-B", str(build_dir), "-G", "Ninja",
             f"-DPython3_EXECUTABLE={sys.executable}", "-DCMAKE_BUILD_TYPE=Release"],
            env=env)
        subprocess.check_call(["cmake", "--build", str(build_dir), "-j", str(os.cpu_count() or 2)],
                              env=env)
        built = next(build_dir.glob("_C.*.so"))
        libtrn = build_dir / "libtrn" / "libtrn.so"
        janitor = build_dir / "libtrn" / "trn-janitor"  # libtrn runs it from beside itself
        # The package itself (editable installs import from here) and the
        # wheel staging area (regular installs) both get a copy.
        for pkg in {ROOT / "torch_neuronx", Path(self.get_ext_fullpath(ext.name)).parent}:
            (pkg / "lib").mkdir(parents=True, exist_ok=True)
            shutil.copy2(built, pkg / built.name)
            shutil.copy2(libtrn, pkg / "lib" / "libtrn.so")
            shutil.copy2(janitor, pkg / "lib" / "trn-janitor")


setup(ext_modules=[Extension("torch_neuronx._C", sources=[])],
      cmdclass={"build_ext": CMakeBuild})
