"""ibtorch_ext: a PyTorch C++/CUDA extension (two operators, see csrc/ops.cpp)
built by CMake against the libtorch of the torch installed for the Python
that runs this file.

    python -m pip wheel --no-deps --no-build-isolation -w DIR .

Environment: WITH_CUDA=auto (default: CUDA kernels when torch is a CUDA
build and torch.utils.cpp_extension finds a CUDA toolkit), 1 or 0;
MAX_JOBS (default 2) parallel compile jobs; TORCH_CUDA_ARCH_LIST (read by
torch's CMake files) the GPU architectures."""
import os
import subprocess
import sys

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

HERE = os.path.dirname(os.path.abspath(__file__))


class CMakeExtension(Extension):
    def __init__(self, name):
        super().__init__(name, sources=[])


class CMakeBuild(build_ext):
    def build_extension(self, ext):
        import torch
        import torch.utils
        from torch.utils.cpp_extension import CUDA_HOME

        want = os.environ.get("WITH_CUDA", "auto")
        if want == "auto":
            with_cuda = torch.version.cuda is not None and CUDA_HOME is not None
        elif want in ("0", "1"):
            with_cuda = want == "1"
        else:
            sys.exit(f"setup.py: WITH_CUDA={want!r}: use auto, 0 or 1")
        if with_cuda and CUDA_HOME is None:
            sys.exit("setup.py: WITH_CUDA=1 but torch.utils.cpp_extension finds no CUDA toolkit")
        out = os.path.abspath(self.get_ext_fullpath(ext.name))
        os.makedirs(os.path.dirname(out), exist_ok=True)
        tmp = os.path.abspath(os.path.join(self.build_temp, "cmake"))
        prefix = torch.utils.cmake_prefix_path  # <torch>/share/cmake (pip's torch)
        args = ["cmake", "-S", HERE, "-B", tmp, "-DCMAKE_BUILD_TYPE=Release",
                f"-DCMAKE_PREFIX_PATH={prefix}", f"-DIBTORCH_OUTPUT={out}",
                f"-DWITH_CUDA={'ON' if with_cuda else 'OFF'}"]
        if os.path.isdir(os.path.join(prefix, "Torch")):
            args.append(f"-DTorch_DIR={os.path.join(prefix, 'Torch')}")
        # else (Debian's python3-torch): CMake finds libtorch-dev's
        # /usr/lib/<triplet>/cmake/Torch by itself
        if with_cuda:
            args.append(f"-DCMAKE_CUDA_COMPILER={os.path.join(CUDA_HOME, 'bin', 'nvcc')}")
        subprocess.check_call(args)
        subprocess.check_call(["cmake", "--build", tmp, "--parallel", os.environ.get("MAX_JOBS") or "2"])
        # what it was built against, for `ibtorch_ext.build_info`
        with open(os.path.join(os.path.dirname(out), "_build_info.py"), "w") as f:
            f.write(f"TORCH_VERSION = {torch.__version__!r}\nWITH_CUDA = {with_cuda!r}\n"
                    f"CUDA_VERSION = {torch.version.cuda!r}\n")


setup(
    name="ibtorch_ext",
    version="0.1.0",
    description="imgbuild's example PyTorch C++/CUDA extension (scaled_add, row_softmax)",
    packages=["ibtorch_ext"],
    ext_modules=[CMakeExtension("ibtorch_ext._C")],
    cmdclass={"build_ext": CMakeBuild},
    python_requires=">=3.8",
    zip_safe=False,
)
