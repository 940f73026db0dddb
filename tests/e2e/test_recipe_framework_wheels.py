"""recipes/framework-wheels.recipe: its plan pinned, and RECIPE PLUMBING
TESTS WITH STAND-IN SOURCES.

The plumbing tests do not download PyTorch: they run the recipe unchanged,
with `imgbuild build --matrix`, its source ARGs pointed at stand-ins made
here, which proves the recipe's own plumbing end to end, not that the real
wheels install:
  - conda: tests/e2e/standin/conda in a Debian bookworm base (built here
    from the suite's minbase image by a small recipe; its apt step cached
    in $IMGBUILD_TEST_CACHE with --cache-to/--cache-from).  It makes the
    environment as a venv of bookworm's python3 (3.11) whatever python=X
    asks, and records the request: the tests read it back;
  - PyTorch's wheel index and the Python package index: a simple index
    served over HTTP on 127.0.0.1 holding tiny wheels named torch,
    torchvision, torchaudio, torchtext and torchdata at the versions of
    every row of the recipe's version table (so a wrong pin picks a wrong
    version), in the release and test channels; torch is a platform wheel
    (linux_x86_64, a small ELF library compiled here; linux_aarch64 beside
    it, compiled by Debian's cross gcc) so the repair to manylinux_2_31 has
    work to do, the others pure.
Checked: per combination of a 2x2 matrix the dest directory holds the
table's versions (torch repaired), the summary lists them and the image,
the conda step is a cache hit for the second combination of a Python
version, the environment recorded the Python version asked for, and the
recipe's refusals (a version outside the table, CUDA builds a release does
not have, IS_ARM64 on x86_64) with the matrix's keep-going and --fail-fast.
An arm64 cell (IS_ARM64=1, --platform linux/arm64) runs on this amd64 host
through qemu-user: the stand-in base built for arm64 (tests/lib/
multiarch-image.sh's image, its apt step cached too), the aarch64 torch
repaired to manylinux_2_31_aarch64."""
import functools
import http.server
import json
import os
import platform
import shutil
import threading
from pathlib import Path

import pytest

from conftest import (ROOT, cache_dir, imgbuild, local_cache_args, norm, sh, stored_names,
                      tiny_wheel, untimed)

RECIPE = ROOT / "recipes/framework-wheels.recipe"
STANDIN_BASE = "localhost/framework-wheels-standin:bookworm"
EXCLUDE = ("libc10.so*:libc10_cuda.so*:libtorch*.so*:libshm.so*:libcaffe2*.so*:libcudart.so.*:"
           "libnvrtc*.so*:libnvToolsExt.so.*:libcublas*.so.*:libcudnn*.so.*:libcuda.so.*")

# The recipe's version table, written again here from PyTorch's release
# compatibility matrix (not read from the recipe).
TABLE = {
    "1.13.1": {"torch": "1.13.1", "torchvision": "0.14.1", "torchaudio": "0.13.1",
               "torchtext": "0.14.1", "torchdata": "0.5.1"},
    "1.12.1": {"torch": "1.12.1", "torchvision": "0.13.1", "torchaudio": "0.12.1",
               "torchtext": "0.13.1", "torchdata": "0.4.1"},
    "2.0.0-rc2": {"torch": "2.0.0", "torchvision": "0.15.0", "torchaudio": "2.0.0",
                  "torchtext": "0.15.0", "torchdata": "0.6.0"},
}
PACKAGES = ["torch", "torchvision", "torchaudio", "torchtext", "torchdata"]


# ---------------------------------------------------------------- plan

def test_framework_wheels_plan_is_pinned(tmp_path):
    r = imgbuild("plan", RECIPE, "--platform", "linux/amd64", store=tmp_path / "store")
    assert r.rc == 0, r
    out = norm(r.out)
    assert "target: stage 0 build\n" in out
    assert "stage 0 build\nfrom: image continuumio/miniconda3:23.3.1-0\ndepends on: none\n" in out
    # the conda environment: the Python version, Open MPI, pip, wheel
    assert ('RUN "/opt/conda/bin/conda" create -y -q -n build --override-channels -c "conda-forge" '
            '"python=3.10" openmpi=4.1 pip wheel && "/opt/conda/bin/conda" clean -afy '
            '&& "/opt/conda/envs/build/bin/mpirun" --version\n') in out
    assert ("args: CONDA_DIR=/opt/conda CONDA_CHANNEL=conda-forge "
            "CONDA_PACKAGES='openmpi=4.1 pip wheel' PYTHON_VERSION=3.10\n") in out
    # the build switches
    assert "ENV USE_MKLDNN=1 USE_CUDA=0 USE_MPI=1\n" in out
    # the version table step, with the defaults in
    assert 'case "0" in 0) arch=x86_64 ;; 1) arch=aarch64 ;;' in out
    assert 'case "1.13.1" in master|nightly) pre=--pre; channel=nightly/;' in out
    assert ('1.13.1) cudas="11.6 11.7"; torch=torch==1.13.1; vision=torchvision==0.14.1; '
            'audio=torchaudio==0.13.1; text=torchtext==0.14.1; data=torchdata==0.5.1 ;;') in out
    assert ('1.12.1) cudas="10.2 11.3 11.6"; torch=torch==1.12.1; vision=torchvision==0.13.1; '
            'audio=torchaudio==0.12.1; text=torchtext==0.13.1; data=torchdata==0.4.1 ;;') in out
    assert ('2.0.0-rc2) channel=test/; cudas="11.7 11.8"; torch=torch==2.0.0; '
            'vision=torchvision==0.15.0; audio=torchaudio==2.0.0; text=torchtext==0.15.0; '
            'data=torchdata==0.6.0 ;;') in out
    assert 'index="https://download.pytorch.org/whl/${channel}${variant}";' in out
    assert ('--index-url "$index" --extra-index-url "https://pypi.org/simple" $pkgs;') in out
    assert "args: those of line 72, and PYTORCH_VERSION=1.13.1 CUDA_VERSION=11.7 ENABLE_CUDA=0 " \
           "IS_ARM64=0 ENABLE_MKLDNN=1 TORCH_ONLY=0 " \
           "TORCH_INDEX=https://download.pytorch.org/whl PIP_INDEX=https://pypi.org/simple " \
           "BUILD_FROM=index FRAMEWORK=torch\n" in out
    # index mode: the source steps do nothing
    assert 'RUN if [ "index" = source ]; then' in out
    assert 'RUN --mount=type=cache,target=/root/.ccache if [ "index" = source ]; then' in out
    # the repair platform picked by IS_ARM64, the outputs named by the versions
    assert "ARG WHEEL_ARCH=x86_64\n" in out
    assert out.rstrip().endswith(
        "output: type=local dest=dist/torch1.13.1-py3.10 src=/wheels repair=manylinux_2_31_x86_64 "
        f"repair-exclude='{EXCLUDE}'\n"
        "output: type=image name=framework-build:torch1.13.1-py3.10")
    assert "warning" not in r.err


def test_framework_wheels_plan_matrix_and_other_args(tmp_path):
    r = imgbuild("plan", RECIPE, "--matrix", "PYTORCH_VERSION=2.0.0-rc2,1.12.1",
                 "--matrix", "PYTHON_VERSION=3.9", "--build-arg", "IS_ARM64=1",
                 "--build-arg", "ENABLE_MKLDNN=0", "--build-arg", "DIST_DIR=out",
                 "--build-arg", "TORCH_INDEX=https://mirror.example/whl",
                 "--build-arg", "BASE=mirror.example/miniconda3:23.3.1-0",
                 store=tmp_path / "store")
    assert r.rc == 0, r
    one, two = norm(r.out).split("\nmatrix 2/2: PYTORCH_VERSION=1.12.1 PYTHON_VERSION=3.9\n\n")
    assert one.startswith("matrix 1/2: PYTORCH_VERSION=2.0.0-rc2 PYTHON_VERSION=3.9\n\n")
    for text, version in ((one, "2.0.0-rc2"), (two, "1.12.1")):
        assert "from: image mirror.example/miniconda3:23.3.1-0\n" in text
        assert '"python=3.9" openmpi=4.1 pip wheel' in text
        assert "ENV USE_MKLDNN=0 USE_CUDA=0 USE_MPI=1\n" in text
        assert f'case "{version}" in master|nightly)' in text
        assert 'case "1" in 0) arch=x86_64 ;; 1) arch=aarch64 ;;' in text
        assert 'index="https://mirror.example/whl/${channel}${variant}";' in text
        assert "ARG WHEEL_ARCH=aarch64\n" in text
        assert text.rstrip().endswith(
            f"output: type=local dest=out/torch{version}-py3.9 src=/wheels "
            f"repair=manylinux_2_31_aarch64 repair-exclude='{EXCLUDE}'\n"
            f"output: type=image name=framework-build:torch{version}-py3.9")
    assert "warning" not in r.err


def test_framework_wheels_plan_source_mode_cells(tmp_path):
    """BUILD_FROM=source with --matrix over FRAMEWORK: one cell per
    framework, each with the seed's switches; the PyTorch cell clones
    PyTorch's own source (recursively) and builds it with USE_CUDA,
    USE_CUDNN, TORCH_CUDA_ARCH_LIST, MAX_JOBS; CUDA_VERSION may be the
    seed's three-part form (11.6.0 is the variant cu116)."""
    r = imgbuild("plan", RECIPE, "--build-arg", "BUILD_FROM=source",
                 "--matrix", "FRAMEWORK=torch,torchvision", "--build-arg", "ENABLE_CUDA=1",
                 "--build-arg", "CUDA_VERSION=11.6.0", "--build-arg", "MAX_JOBS=16",
                 "--build-arg", "TORCH_CUDA_ARCH_LIST=7.0;8.0+PTX",
                 "--build-arg", "TORCH_REPO=https://git.example/pytorch.git",
                 store=tmp_path / "store")
    assert r.rc == 0, r
    one, two = norm(r.out).split("\nmatrix 2/2: FRAMEWORK=torchvision\n\n")
    assert one.startswith("matrix 1/2: FRAMEWORK=torch\n\n")
    for text, fw in ((one, "torch"), (two, "torchvision")):
        assert f"ARG FRAMEWORK={fw}\n" in text
        assert "ENV USE_MKLDNN=1 USE_CUDA=1 USE_MPI=1\n" in text
        # the three-part CUDA version cut to major.minor for the variant
        assert 'cuda=$(echo "11.6.0" | cut -d. -f1,2);' in text
        assert 'if [ "source" = source ]; then case "' + fw + '" in' in text
        assert 'torch) repo="https://git.example/pytorch.git" ;;' in text
        assert 'git clone --recursive --branch "$tag" "$repo" "/src/$dir";' in text
        flat = " ".join(text.split())
        assert ('CC=gcc CXX=g++ USE_CUDNN="1" FORCE_CUDA="1" TORCH_CUDA_ARCH_LIST="7.0;8.0+PTX";'
                in flat), flat
        assert 'if [ -n "16" ]; then export MAX_JOBS="16"' in text
        assert 'if [ "$arch" = aarch64 ]; then export BLAS=OpenBLAS; fi;' in text
        assert "python setup.py build; python setup.py bdist_wheel; cp dist/*.whl /wheels/;" in text
        assert 'build-info-$framework.txt' in text
        assert text.rstrip().endswith(
            "output: type=local dest=dist/torch1.13.1-py3.10 src=/wheels repair=manylinux_2_31_x86_64 "
        f"repair-exclude='{EXCLUDE}'\n"
            "output: type=image name=framework-build:torch1.13.1-py3.10")
    assert "warning" not in r.err


# ------------------------------------------- plumbing with stand-in sources

STANDIN_BASE_RECIPE = """\
# The stand-in for the conda base: bookworm's python3 with pip and venv,
# and the stand-in conda as CONDA_DIR/bin/conda.
ARG BASE
FROM ${BASE}
ENV DEBIAN_FRONTEND=noninteractive \\
    PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
RUN apt-get update -q \\
 && apt-get install -y -q --no-install-recommends python3 python3-pip python3-venv \\
 && rm -rf /var/lib/apt/lists/* /var/log/apt /var/log/dpkg.log /var/log/alternatives.log \\
      /var/cache/apt/*.bin /var/cache/ldconfig/aux-cache
COPY --chmod=755 conda /opt/conda/bin/conda
OUTPUT type=image,name=%s
""" % STANDIN_BASE


@pytest.fixture(scope="module")
def index(tmp_path_factory):
    """The stand-in indexes: /whl/cpu and /whl/test/cpu (PyTorch's release
    and test channels, PEP 503 pages: the server's directory listings),
    /simple (the Python package index, empty: the tiny wheels need
    nothing)."""
    root = tmp_path_factory.mktemp("fw-index")
    work = root / "work"
    work.mkdir()
    (work / "c.c").write_text("int torch_standin (void) { return 42; }\n")
    sh("gcc", "-shared", "-fPIC", "-o", work / "_C.so", work / "c.c")
    so = (work / "_C.so").read_bytes()
    # the arm64 cells' torch: the same library for aarch64 (Debian's cross gcc)
    sh("aarch64-linux-gnu-gcc", "-shared", "-fPIC", "-o", work / "_C_arm64.so", work / "c.c")
    so_arm64 = (work / "_C_arm64.so").read_bytes()
    for channel in ("whl/cpu", "whl/test/cpu"):
        for row in TABLE.values():
            for pkg in PACKAGES:
                d = root / "served" / channel / pkg
                d.mkdir(parents=True, exist_ok=True)
                if pkg == "torch":
                    tiny_wheel(d, pkg, row[pkg], "py3-none-linux_x86_64", {"torch/_C.so": so})
                    tiny_wheel(d, pkg, row[pkg], "py3-none-linux_aarch64",
                               {"torch/_C.so": so_arm64})
                else:
                    tiny_wheel(d, pkg, row[pkg])
    (root / "served/simple").mkdir()

    class Quiet(http.server.SimpleHTTPRequestHandler):
        def log_message(self, *a):
            pass

    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0),
                                            functools.partial(Quiet, directory=str(root / "served")))
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()


@pytest.fixture(scope="module")
def plumbing(base_image, index, tmp_path_factory):
    store = tmp_path_factory.mktemp("fw-store")
    work = tmp_path_factory.mktemp("fw-work")
    (work / "standin-base.recipe").write_text(STANDIN_BASE_RECIPE)
    shutil.copy(ROOT / "tests/e2e/standin/conda", work / "conda")
    cache = cache_dir() / "framework-wheels-standin-cache"
    args = local_cache_args(cache)
    r = imgbuild(work / "standin-base.recipe", "--build-arg", f"BASE={base_image}", *args,
                 store=store, cwd=work)
    assert r.rc == 0, r
    common = ["--build-arg", f"BASE={STANDIN_BASE}", "--build-arg", f"TORCH_INDEX={index}/whl",
              "--build-arg", f"PIP_INDEX={index}/simple"]
    r = imgbuild(RECIPE, "--matrix", "PYTORCH_VERSION=1.13.1,1.12.1",
                 "--matrix", "PYTHON_VERSION=3.9,3.10", *common, store=store, cwd=work)
    return {"store": store, "work": work, "build": r, "common": common, "index": index}


COMBOS = [("1.13.1", "3.9"), ("1.13.1", "3.10"), ("1.12.1", "3.9"), ("1.12.1", "3.10")]


# The repaired torch: tagged manylinux_2_31 as asked, and (as auditwheel
# does) with the older policies its library also meets: the stand-in's
# _C.so needs no glibc symbol newer than 2.5 (manylinux1's alias with it).
TORCH_PLAT = "manylinux1_x86_64.manylinux_2_31_x86_64.manylinux_2_5_x86_64"


def wheel_names(version):
    row = TABLE[version]
    return sorted(f"{p}-{row[p]}-py3-none-" + (TORCH_PLAT if p == "torch" else "any") + ".whl"
                  for p in PACKAGES)


def test_plumbing_standin_matrix_wheels_per_combination(plumbing):
    r = plumbing["build"]
    assert r.rc == 0, r
    for version, py in COMBOS:
        d = plumbing["work"] / "dist" / f"torch{version}-py{py}"
        # the table's versions; torch repaired from linux_x86_64
        assert sorted(p.name for p in d.glob("*.whl")) == wheel_names(version)
        assert sorted(p.name for p in d.iterdir()) == sorted(wheel_names(version) + ["build-info.txt"])
        row = TABLE[version]
        info = (d / "build-info.txt").read_text().splitlines()
        assert info[0] == f"PYTORCH_VERSION={version}"
        assert info[1].startswith("python=3.11.")  # the stand-in's python, whatever was asked
        assert info[2:] == [
            "arch=x86_64", "variant=cpu", f"index={plumbing['index']}/whl/cpu",
            "packages=" + " ".join(f"{p}=={row[p]}" for p in PACKAGES),
            "USE_MKLDNN=1 USE_CUDA=0 USE_MPI=1"]


def stored_digest(store, name):
    return json.loads(imgbuild("inspect", name, store=store).out)["digest"]


def test_plumbing_standin_matrix_summary(plumbing):
    r = plumbing["build"]
    assert r.rc == 0, r
    expected = "matrix summary: 4 of 4 combinations built, 0 failed\n"
    for i, (version, py) in enumerate(COMBOS):
        expected += f"matrix {i + 1}/4: PYTORCH_VERSION={version} PYTHON_VERSION={py}: ok\n"
        expected += "".join(f"  wheel dist/torch{version}-py{py}/{w}\n" for w in wheel_names(version))
        name = f"framework-build:torch{version}-py{py}"
        expected += f"  image {name} {stored_digest(plumbing['store'], name)}\n"
    assert untimed(r.out) == expected
    names = stored_names(plumbing["store"])
    for version, py in COMBOS:
        assert any(n and n.endswith(f"framework-build:torch{version}-py{py}") for n in names), names


def test_plumbing_standin_matrix_shares_the_conda_step(plumbing):
    r = plumbing["build"]
    assert r.rc == 0, r
    parts = {}
    for chunk in r.err.split("==> matrix ")[1:]:
        head, _, rest = chunk.partition("\n")
        parts[head] = rest
    heads = [f"{i + 1}/4: PYTORCH_VERSION={v} PYTHON_VERSION={p}" for i, (v, p) in enumerate(COMBOS)]
    assert list(parts) == heads

    def step(text, needle):
        lines = [l for l in text.splitlines() if "] RUN " in l and needle in l]
        assert len(lines) == 1, (needle, text)
        return lines[0]

    # the conda environment of a Python version is made once: the second
    # PyTorch version's combinations take it from the cache
    conda = [step(parts[h], "conda") for h in heads]
    assert [l.endswith(" CACHED") for l in conda] == [False, False, True, True]
    # the version-table step reads PYTORCH_VERSION: it runs in every combination
    table = [step(parts[h], "case \"${IS_ARM64}\"") for h in heads]
    assert not any(l.endswith(" CACHED") for l in table)
    assert "stand-in conda: created /opt/conda/envs/build: python=3.9 asked" in parts[heads[0]]
    assert "stand-in conda: created" not in parts[heads[2]]


def test_plumbing_standin_environment_records_the_python_asked(plumbing):
    assert plumbing["build"].rc == 0, plumbing["build"]
    for version, py in (COMBOS[0], COMBOS[3]):
        r = imgbuild("run", f"framework-build:torch{version}-py{py}", "--", "sh", "-c",
                     "cat /opt/conda/envs/build/conda-meta/standin-create && mpirun --version && "
                     "python -c 'import sys, json, importlib.metadata as m; print(json.dumps("
                     "[sys.prefix] + [m.version(d) for d in sys.argv[1:]]))' " + " ".join(PACKAGES),
                     store=plumbing["store"])
        assert r.rc == 0, r
        lines = r.out.splitlines()
        assert lines[:3] == [f"python={py}", "channels=conda-forge",
                             f"packages=python={py} openmpi=4.1 pip wheel"]
        assert lines[3] == "mpirun (Open MPI) stand-in for openmpi=4.1"
        # the wheels installed in the environment (its python first in PATH)
        prefix, *versions = json.loads(lines[4])
        assert prefix == "/opt/conda/envs/build"
        assert versions == [TABLE[version][p] for p in PACKAGES]


def test_plumbing_standin_refusals_and_keep_going(plumbing):
    """A version outside the table fails its combination, the next one
    (a release candidate from the test channel, TORCH_ONLY=1) is built."""
    r = imgbuild(RECIPE, "--matrix", "PYTORCH_VERSION=9.9,2.0.0-rc2", "--matrix", "PYTHON_VERSION=3.9",
                 "--build-arg", "TORCH_ONLY=1", "--build-arg", "DIST_DIR=only", *plumbing["common"],
                 store=plumbing["store"], cwd=plumbing["work"])
    assert r.rc == 1, r
    assert ("framework-wheels: PYTORCH_VERSION=9.9 is not in the version table "
            "(master nightly 2.0.0-rc2 1.13.1 1.12.1)") in r.err
    lines = untimed(r.out).splitlines()
    assert lines[0] == "matrix summary: 1 of 2 combinations built, 1 failed"
    assert lines[1].startswith("matrix 1/2: PYTORCH_VERSION=9.9 PYTHON_VERSION=3.9: FAILED: ")
    name = "framework-build:torch2.0.0-rc2-py3.9"
    assert lines[2:] == ["matrix 2/2: PYTORCH_VERSION=2.0.0-rc2 PYTHON_VERSION=3.9: ok",
                         f"  wheel only/torch2.0.0-rc2-py3.9/torch-2.0.0-py3-none-{TORCH_PLAT}.whl",
                         f"  image {name} {stored_digest(plumbing['store'], name)}"]
    info = (plumbing["work"] / "only/torch2.0.0-rc2-py3.9/build-info.txt").read_text()
    assert f"index={plumbing['index']}/whl/test/cpu\n" in info
    assert "packages=torch==2.0.0\n" in info
    assert not (plumbing["work"] / "only/torch9.9-py3.9").exists()


def test_plumbing_standin_cuda_refused_fail_fast(plumbing):
    """PyTorch 1.12.1 had no CUDA 11.7 build: refused, and --fail-fast
    builds nothing after it."""
    r = imgbuild(RECIPE, "--fail-fast", "--matrix", "PYTORCH_VERSION=1.12.1,1.13.1",
                 "--build-arg", "ENABLE_CUDA=1", "--build-arg", "CUDA_VERSION=11.7",
                 "--build-arg", "PYTHON_VERSION=3.9", *plumbing["common"],
                 store=plumbing["store"], cwd=plumbing["work"])
    assert r.rc == 1, r
    assert "framework-wheels: PyTorch 1.12.1 has CUDA builds for 10.2 11.3 11.6, not 11.7" in r.err
    assert r.out.splitlines()[2] == \
        "matrix 2/2: PYTORCH_VERSION=1.13.1: not built (--fail-fast)"
    assert "==> matrix 2/2" not in r.err


@pytest.mark.skipif(platform.machine() != "x86_64", reason="the refusal names x86_64")
def test_plumbing_standin_arm64_needs_an_arm64_stage(plumbing):
    r = imgbuild(RECIPE, "--matrix", "IS_ARM64=1,yes", "--build-arg", "PYTHON_VERSION=3.9",
                 *plumbing["common"], store=plumbing["store"], cwd=plumbing["work"])
    assert r.rc == 1, r
    assert ("framework-wheels: IS_ARM64=1 collects aarch64 wheels, but this stage runs on x86_64 "
            "(IS_ARM64=1: --platform linux/arm64)") in r.err
    assert "framework-wheels: IS_ARM64 must be 0 or 1, got 'yes'" in r.err
    assert r.out.startswith("matrix summary: 0 of 2 combinations built, 2 failed\n")


# ------------------------------------------- an arm64 cell on this amd64 host

@pytest.fixture(scope="module")
def arm64_cell(multiarch, index, tmp_path_factory):
    """The stand-in base for linux/arm64, then one IS_ARM64=1 cell, every
    RUN through qemu-user."""
    store = tmp_path_factory.mktemp("fw-arm64-store")
    work = tmp_path_factory.mktemp("fw-arm64-work")
    (work / "standin-base.recipe").write_text(STANDIN_BASE_RECIPE)
    shutil.copy(ROOT / "tests/e2e/standin/conda", work / "conda")
    args = local_cache_args(cache_dir() / "framework-wheels-standin-arm64-cache")
    r = imgbuild(work / "standin-base.recipe", "--platform", "linux/arm64",
                 "--build-arg", f"BASE={multiarch['multi']}", *args, store=store, cwd=work)
    assert r.rc == 0, r
    r = imgbuild(RECIPE, "--platform", "linux/arm64", "--build-arg", "IS_ARM64=1",
                 "--build-arg", "PYTORCH_VERSION=1.13.1", "--build-arg", "PYTHON_VERSION=3.9",
                 "--build-arg", f"BASE={STANDIN_BASE}", "--build-arg", f"TORCH_INDEX={index}/whl",
                 "--build-arg", f"PIP_INDEX={index}/simple", store=store, cwd=work)
    return {"store": store, "work": work, "build": r, "index": index}


def test_plumbing_standin_arm64_cell_on_amd64(arm64_cell):
    r = arm64_cell["build"]
    assert r.rc == 0, r
    d = arm64_cell["work"] / "dist/torch1.13.1-py3.9"
    row = TABLE["1.13.1"]
    # torch's aarch64 wheel repaired to manylinux_2_31, tagged (as
    # auditwheel tags) with the lowest policy it meets too: aarch64's start
    # at manylinux_2_17, alias manylinux2014 (x86_64's at 2_5, manylinux1)
    plat = "manylinux2014_aarch64.manylinux_2_17_aarch64.manylinux_2_31_aarch64"
    assert sorted(p.name for p in d.glob("*.whl")) == sorted(
        f"{p}-{row[p]}-py3-none-" + (plat if p == "torch" else "any") + ".whl" for p in PACKAGES)
    info = (d / "build-info.txt").read_text().splitlines()
    assert info[0] == "PYTORCH_VERSION=1.13.1"
    assert info[2:] == [
        "arch=aarch64", "variant=cpu", f"index={arm64_cell['index']}/whl/cpu",
        "packages=" + " ".join(f"{p}=={row[p]}" for p in PACKAGES),
        "USE_MKLDNN=1 USE_CUDA=0 USE_MPI=1"]
    assert f"wheel torch-{row['torch']}-py3-none-linux_aarch64.whl: " in r.err
