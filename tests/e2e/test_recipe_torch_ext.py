"""recipes/torch-cuda-ext.recipe: its plan pinned, with the default args
(PyTorch's manylinux_2_28 CUDA 12.8 builder, torch 2.7.1 from PyTorch's
cu128 index, every /opt/python Python) and with the args of the real
build on the Debian stand-in base (tests/torch, `make e2e-torch`).  The
expected lines are the recipe's, expanded by hand.  The build itself is
tested by `make e2e-torch` (minutes: it compiles against libtorch), not
here."""
from conftest import ROOT, imgbuild, norm

RECIPE = ROOT / "recipes/torch-cuda-ext.recipe"
EXCLUDE = ("libc10.so*:libc10_cuda.so*:libtorch.so*:libtorch_cpu.so*:libtorch_cuda.so*:"
           "libtorch_python.so*:libshm.so*:libcudart.so.*")


def install_line(pythons, build_packages, torch_version, index="https://download.pytorch.org/whl/cu128",
                 pip_index="https://pypi.org/simple"):
    """Line 54 expanded by hand (an empty ARG leaves its blanks, which norm makes one)."""
    return norm(
        "line 54: RUN --mount=type=cache,target=/root/.cache/pip set -e; n=0; "
        f"for d in {pythons}; do "
        'py="$d/python"; [ -x "$py" ] || py="$d/python3"; '
        '[ -x "$py" ] || { echo "PYTHONS: no python in $d" >&2; exit 1; }; '
        "n=$((n + 1)); "
        f'if [ -n "{build_packages}" ]; then "$py" -m pip install --index-url "{pip_index}" {build_packages}; fi; '
        f'if [ -n "{torch_version}" ]; then "$py" -m pip install --index-url "{index}" '
        f'--extra-index-url "{pip_index}" "torch=={torch_version}" '
        f'|| {{ echo "$py: no torch {torch_version} from {index}: narrow PYTHONS" >&2; exit 1; }}; fi; '
        '"$py" -c \'import sys, torch; print(sys.executable, "torch", torch.__version__, "cuda", torch.version.cuda)\'; '
        'done; [ "$n" -gt 0 ] || { echo "PYTHONS matched no Python" >&2; exit 1; }') + "\n"


def build_line(pythons):
    return (
        f"line 82: RUN set -e; mkdir -p /wheels; for d in {pythons}; do "
        'py="$d/python"; [ -x "$py" ] || py="$d/python3"; '
        "rm -rf /tmp/ibtorch_ext && cp -a /src/ibtorch_ext /tmp/ibtorch_ext; "
        'PATH="$d:$PATH" "$py" -m pip wheel --no-deps --no-build-isolation --no-index '
        "-w /wheels /tmp/ibtorch_ext; done; rm -rf /tmp/ibtorch_ext; ls -l /wheels\n")


def test_torch_ext_plan_is_pinned(tmp_path):
    r = imgbuild("plan", RECIPE, "--platform", "linux/amd64", store=tmp_path / "store")
    assert r.rc == 0, r
    out = norm(r.out)
    assert "target: stage 0 build\n" in out
    assert "global ARG BASE=pytorch/manylinux2_28-builder:cuda12.8\n" in out
    assert "stage 0 build\nfrom: image pytorch/manylinux2_28-builder:cuda12.8\ndepends on: none\n" in out
    assert "line 47: ARG PYTHONS='/opt/python/*/bin'\n" in out
    assert "line 49: ARG TORCH_INDEX=https://download.pytorch.org/whl/cu128\n" in out
    assert "line 51: ARG TORCH_VERSION=2.7.1\n" in out
    # torch (and the build tools) for every Python of the base
    assert install_line("/opt/python/*/bin", "setuptools wheel cmake<4", "2.7.1") in out
    assert ("args: PYTHONS='/opt/python/*/bin' PIP_INDEX=https://pypi.org/simple "
            "TORCH_INDEX=https://download.pytorch.org/whl/cu128 TORCH_VERSION=2.7.1 "
            "BUILD_PACKAGES='setuptools wheel cmake<4'\n") in out
    # the extension's source from the context, the CUDA switches, a wheel per Python
    assert "line 72: COPY torch-cuda-ext/ /src/ibtorch_ext/\n" in out
    assert ("line 77: ENV WITH_CUDA=auto TORCH_CUDA_ARCH_LIST='7.0;7.5;8.0;8.6;8.9;9.0;10.0;12.0+PTX' "
            "MAX_JOBS=2\n") in out
    assert build_line("/opt/python/*/bin") in out
    # the output: repaired to the base's manylinux_2_28, libtorch and the CUDA runtime kept out
    assert out.rstrip().endswith(
        f"output: type=local dest=dist src=/wheels repair=manylinux_2_28_x86_64 repair-exclude='{EXCLUDE}'")
    assert "warning:" not in out


def test_torch_ext_plan_on_the_debian_standin(tmp_path):
    """The args of `make e2e-torch` (tests/torch/test_torch_ext.py)."""
    r = imgbuild("plan", RECIPE, "--build-arg", "BASE=localhost/torch-ext-standin:bookworm",
                 "--build-arg", "PYTHONS=/usr/bin", "--build-arg", "TORCH_VERSION=",
                 "--build-arg", "BUILD_PACKAGES=", "--build-arg", "REPAIR=manylinux_2_36_x86_64",
                 store=tmp_path / "store")
    assert r.rc == 0, r
    out = norm(r.out)
    assert ("build args: BASE=localhost/torch-ext-standin:bookworm PYTHONS=/usr/bin TORCH_VERSION='' "
            "BUILD_PACKAGES='' REPAIR=manylinux_2_36_x86_64\n") in out
    assert "stage 0 build\nfrom: image localhost/torch-ext-standin:bookworm\n" in out
    # torch and the tools come with the base: both installs skip
    assert install_line("/usr/bin", "", "") in out
    assert build_line("/usr/bin") in out
    assert out.rstrip().endswith(
        f"output: type=local dest=dist src=/wheels repair=manylinux_2_36_x86_64 repair-exclude='{EXCLUDE}'")
    assert "warning:" not in out
