"""Builds the extension depot._core through this repository's CMake project (pyproject.toml says
how to call it).

The pure-Python package is python/depot. The extension is the CMake target depot_python, built
in a CMake build directory of its own under setuptools' build directory, or in an already
configured one named by $DEPOT_BUILD_DIR (a developer's or CI's tree: only what changed is
rebuilt). CMake needs the build dependencies scripts/deps installs (a compiler, Boost, fmt,
spdlog, FlatBuffers, pybind11 and the interpreter's headers).
"""

import os
import shutil
import subprocess
import sys

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

SOURCE = os.path.dirname(os.path.abspath(__file__))


class CMakeBuild(build_ext):
    """Builds depot._core with CMake for the interpreter running setup.py."""

    def build_extension(self, ext):
        build_dir = os.environ.get("DEPOT_BUILD_DIR") or os.path.join(
            os.path.abspath(self.build_temp), "cmake")
        if not os.path.exists(os.path.join(build_dir, "CMakeCache.txt")):
            os.makedirs(build_dir, exist_ok=True)
            subprocess.run(
                ["cmake", "-S", SOURCE, "-B", build_dir, "-DCMAKE_BUILD_TYPE=Release",
                 "-DDEPOT_PYTHON=ON", "-DBUILD_TESTING=OFF", "-DDEPOT_FUZZ=OFF",
                 f"-DPython3_EXECUTABLE={sys.executable}"]
                + (["-G", "Ninja"] if shutil.which("ninja") else []),
                check=True)
        subprocess.run(["cmake", "--build", build_dir, "--target", "depot_python",
                        "--parallel", str(os.cpu_count() or 1)], check=True)
        built = os.path.join(build_dir, "python", "depot")
        name = next(f for f in os.listdir(built) if f.startswith("_core.") and f.endswith(".so"))
        target = self.get_ext_fullpath(ext.name)
        os.makedirs(os.path.dirname(target), exist_ok=True)
        shutil.copyfile(os.path.join(built, name), target)


setup(
    packages=["depot"],
    package_dir={"": "python"},
    package_data={"depot": ["_core.pyi", "py.typed"]},
    ext_modules=[Extension("depot._core", sources=[])],
    cmdclass={"build_ext": CMakeBuild},
    # setuptools' own build directory beside CMake's, not inside the repository's build/.
    options={"build": {"build_base": os.path.join("build", "setuptools")},
             "egg_info": {"egg_base": os.path.join("build", "setuptools")}},
    zip_safe=False,
)
