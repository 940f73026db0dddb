"""recipes/torch110.recipe: its plan pinned, and RECIPE PLUMBING TESTS WITH
STAND-IN SOURCES.

The plumbing tests do not build PyTorch: they run the recipe unchanged with
its source ARGs pointed at stand-ins made here, which proves the recipe's
own plumbing end to end, not that PyTorch 1.1.0 builds for CUDA 9.0:
  - PyTorch and TorchVision: local git repositories (served over plain
    HTTP on 127.0.0.1, as a mirror would be: a build step cannot see the
    host's paths, so file:// URLs would not reach it) with tags v1.1.0 and
    v0.3.0 holding tiny setup.py projects named torch and torchvision, a
    commit after each tag (so a clone of the wrong revision shows), and a
    submodule in torch (so `git clone --recursive` shows);
  - the CUDA devel and client bases: the suite's Debian bookworm base with
    python3, pip, setuptools, wheel and git added (built here from the
    minbase image by a small recipe; its apt step cached in
    $IMGBUILD_TEST_CACHE with --cache-to/--cache-from);
  - APT_PACKAGES, PIP_PACKAGES, NCCL_VERSION, CLIENT_APT_PACKAGES and
    CLIENT_PIP_PACKAGES empty (those steps skip), PY_DIST bookworm's.
Checked: the clone at the tag (with its submodule), the build flags
reaching setup.py, both wheels in ./dist, the torch and torchvision
wheels (the latter the bytes of ./dist's, through COPY --repair) and the
Orion files under /opt, both installed in dist-packages, the client image
tagged, and `import torch, torchvision` inside it."""
import functools
import hashlib
import http.server
import json
import os
import subprocess
import threading
import zipfile
from pathlib import Path

import pytest

from conftest import ROOT, cache_dir, imgbuild, local_cache_args, stored_names, norm

RECIPE = ROOT / "recipes/torch110.recipe"
CLIENT = "virtaitech/orion-client:cu9.0-torch1.1.0-py3"
STANDIN_BASE = "localhost/torch110-standin:bookworm"
PY_DIST = "/usr/local/lib/python3.11/dist-packages"  # bookworm's python3 (pip's site dir)
FLAGS = ["NO_TEST", "NO_FBGEMM", "NO_MIOPEN", "NO_MKLDNN", "NO_NNPACK", "NO_QNNPACK", "USE_NCCL",
         "USE_SYSTEM_NCCL", "NCCL_INCLUDE_DIR", "NCCL_LIB_DIR", "NCCL_ROOT_DIR",
         "TORCH_CUDA_ARCH_LIST", "MAX_JOBS", "FORCE_CUDA"]


# ---------------------------------------------------------------- plan

def test_torch110_plan_is_pinned(tmp_path):
    r = imgbuild("plan", RECIPE, "--platform", "linux/amd64", store=tmp_path / "store")
    assert r.rc == 0, r
    out = norm(r.out)
    # the stage graph: build, then client which reads it
    assert "target: stage 1 client\n" in out
    assert "stage 0 build\nfrom: image nvidia/cuda:9.0-cudnn7-devel-ubuntu16.04\n" \
           "depends on: none\n" in out
    assert "stage 1 client\nfrom: image nvidia/cuda:9.0-cudnn7-runtime-ubuntu16.04\n" \
           "depends on: 0 build\n" in out
    # the clone, expanded, at the tag, with its submodules
    assert ('RUN git clone --recursive --branch "v1.1.0" "https://github.com/pytorch/pytorch.git" '
            "/src/pytorch && cd /src/pytorch && git submodule sync "
            "&& git submodule update --init --recursive\n") in out
    assert 'git clone --branch "v0.3.0" "https://github.com/pytorch/vision.git" /src/vision\n' in out
    # NCCL 2.4 from NVIDIA's repository
    assert '"libnccl2=2.4.8-1+cuda9.0" "libnccl-dev=2.4.8-1+cuda9.0"' in out
    # the build flags
    assert ("ENV NO_TEST=1 NO_FBGEMM=1 NO_MIOPEN=1 NO_MKLDNN=1 NO_NNPACK=1 NO_QNNPACK=1 "
            "USE_NCCL=1 USE_SYSTEM_NCCL=1 NCCL_ROOT_DIR=/usr NCCL_INCLUDE_DIR=/usr/include "
            "NCCL_LIB_DIR=/usr/lib/x86_64-linux-gnu TORCH_CUDA_ARCH_LIST='3.5;6.0;6.1;7.0+PTX'\n") in out
    # bdist_wheel with the ccache mount; torchvision built with FORCE_CUDA=1
    assert "RUN --mount=type=cache,target=/root/.ccache export PATH=" in out
    assert "python3 setup.py bdist_wheel" in out
    assert ('CC=gcc CXX=g++ FORCE_CUDA="1" ' in out and "&& python3 setup.py build "
            "&& python3 setup.py bdist_wheel && mkdir -p /vision-wheels" in out)
    # the client's files
    assert "COPY --from=build /wheels/ /opt/\n" in out
    assert "COPY --chmod=755 torch110/oriond torch110/install-client-9.0 /opt/\n" in out
    excl = ("libc10.so*:libc10_cuda.so*:libtorch*.so*:libshm.so*:libcaffe2*.so*:libcudart.so.*:"
            "libnvrtc*.so*:libnvToolsExt.so.*:libcuda.so.*")
    assert (f"COPY --from=build --repair=manylinux_2_17_x86_64 '--repair-exclude={excl}' "
            "/vision-wheels/ /opt/\n") in out
    assert 'test -d "/usr/local/lib/python3.5/dist-packages/torchvision"' not in out
    assert 'if [ ! -d "/usr/local/lib/python3.5/dist-packages/torchvision" ]' in out
    # the outputs, in their stages
    build, client = out.split("\nstage 1 client\n")
    assert "output: type=local dest=dist src=/wheels\n" in build
    assert (f"output: type=local dest=dist src=/vision-wheels repair=manylinux_2_17_x86_64 "
            f"repair-exclude='{excl}'\n") in build
    assert client.rstrip().endswith("output: type=image name=virtaitech/orion-client:cu9.0-torch1.1.0-py3")


def test_torch110_plan_follows_mirror_args(tmp_path):
    r = imgbuild("plan", RECIPE, "--build-arg", "TORCH_REPO=https://git.example/mirror/pytorch.git",
                 "--build-arg", "TORCH_VERSION=v1.1.0-fork", "--build-arg", "NCCL_VERSION=",
                 "--build-arg", "BASE=mirror.example/cuda:9.0-devel", store=tmp_path / "store")
    assert r.rc == 0, r
    out = norm(r.out)
    assert "from: image mirror.example/cuda:9.0-devel\n" in out
    assert 'git clone --recursive --branch "v1.1.0-fork" "https://git.example/mirror/pytorch.git"' in out
    assert "args: those of line" in out and "TORCH_VERSION=v1.1.0-fork" in out
    assert 'RUN if [ -n "" ]; then curl' in out  # the NCCL step skips
    assert "warning:" not in out


# ------------------------------------------- plumbing with stand-in sources

TORCH_SETUP = """\
import json, os
from setuptools import setup
FLAGS = %r
# What the build handed setup.py, kept in the package for the test to read.
with open(os.path.join("torch", "build_env.json"), "w") as f:
    json.dump({k: os.environ.get(k) for k in FLAGS}, f, sort_keys=True)
# A file of the submodule: proves git clone --recursive.
with open("third_party/pybind11/VERSION") as src, open("torch/pybind11_version.txt", "w") as dst:
    dst.write(src.read())
setup(name="torch", version="1.1.0", packages=["torch"],
      package_data={"torch": ["build_env.json", "pybind11_version.txt"]})
""" % FLAGS

VISION_SETUP = """\
import os
import torch  # as the real one: its CUDA extensions build against the installed torch
from setuptools import setup
with open(os.path.join("torchvision", "build_info.py"), "w") as f:
    f.write("FORCE_CUDA = %r\\nTORCH_VERSION = %r\\n" % (os.environ.get("FORCE_CUDA"), torch.__version__))
setup(name="torchvision", version="0.3.0", packages=["torchvision"])
"""

STANDIN_BASE_RECIPE = """\
# The stand-in for the CUDA devel and client bases: bookworm with what the
# recipe's later steps use (python3, pip, setuptools, wheel, git); pip may
# install into the system python as on Ubuntu 16.04 (no PEP 668 marker).
ARG BASE
FROM ${BASE}
ENV DEBIAN_FRONTEND=noninteractive
RUN apt-get update -q \\
 && apt-get install -y -q --no-install-recommends python3 python3-pip python3-setuptools \\
      python3-wheel git \\
 && rm -rf /var/lib/apt/lists/* /var/log/apt /var/log/dpkg.log /var/log/alternatives.log \\
      /var/cache/apt/*.bin /var/cache/ldconfig/aux-cache \\
 && rm -f /usr/lib/python3*/EXTERNALLY-MANAGED
OUTPUT type=image,name=%s
""" % STANDIN_BASE


def git(*args, cwd):
    subprocess.run(["git", "-c", "user.name=stand-in", "-c", "user.email=standin@localhost",
                    "-c", "init.defaultBranch=main", "-c", "protocol.file.allow=always", *args],
                   cwd=cwd, check=True, capture_output=True, text=True,
                   env={**os.environ, "GIT_CONFIG_NOSYSTEM": "1", "HOME": str(cwd)})


def make_repo(work, served, name, files, tag, after_tag, gitlinks=()):
    """A repository with `files` committed and tagged `tag`, then one more
    commit (`after_tag`) on main; pushed bare to served/NAME.git for the
    dumb HTTP protocol."""
    src = work / name
    src.mkdir()
    git("init", "-q", cwd=src)
    for path, text in files.items():
        (src / path).parent.mkdir(parents=True, exist_ok=True)
        (src / path).write_text(text)
    git("add", "-A", cwd=src)
    for path, sha in gitlinks:
        git("update-index", "--add", "--cacheinfo", f"160000,{sha},{path}", cwd=src)
    git("commit", "-q", "-m", f"{name} {tag}", cwd=src)
    git("tag", tag, cwd=src)
    for path, text in after_tag.items():
        (src / path).write_text(text)
    git("commit", "-q", "-am", "after the tag", cwd=src)
    bare = served / f"{name}.git"
    git("clone", "-q", "--bare", str(src), str(bare), cwd=work)
    git("update-server-info", cwd=bare)
    return subprocess.run(["git", "rev-parse", f"{tag}^{{commit}}"], cwd=src, check=True,
                          capture_output=True, text=True).stdout.strip()


@pytest.fixture(scope="module")
def standin_git(tmp_path_factory):
    work = tmp_path_factory.mktemp("torch110-src")
    served = work / "served"
    served.mkdir()
    pb = make_repo(work, served, "pybind11", {"VERSION": "pybind11-standin 2.2\n"}, "v2.2.4",
                   {"VERSION": "pybind11 after the tag\n"})
    make_repo(work, served, "pytorch", {
        "setup.py": TORCH_SETUP,
        "torch/__init__.py": '__version__ = "1.1.0"\n',
        ".gitmodules": '[submodule "third_party/pybind11"]\n\tpath = third_party/pybind11\n'
                       "\turl = ../pybind11.git\n",
    }, "v1.1.0", {"torch/__init__.py": '__version__ = "after-the-tag"\n'},
        gitlinks=[("third_party/pybind11", pb)])
    make_repo(work, served, "vision", {
        "setup.py": VISION_SETUP,
        "torchvision/__init__.py": 'import torch\n__version__ = "0.3.0"\n',
    }, "v0.3.0", {"torchvision/__init__.py": '__version__ = "after-the-tag"\n'})

    class Quiet(http.server.SimpleHTTPRequestHandler):
        def log_message(self, *a):
            pass

    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0),
                                            functools.partial(Quiet, directory=str(served)))
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()


@pytest.fixture(scope="module")
def plumbing(base_image, standin_git, tmp_path_factory):
    store = tmp_path_factory.mktemp("torch110-store")
    work = tmp_path_factory.mktemp("torch110-work")
    (work / "standin-base.recipe").write_text(STANDIN_BASE_RECIPE)
    # the stand-in base's apt step: from the suite's cache when a pass
    # before this one (or an earlier run) recorded it
    cache = cache_dir() / "torch110-standin-cache"
    args = local_cache_args(cache)
    r = imgbuild(work / "standin-base.recipe", "--build-arg", f"BASE={base_image}", *args,
                 store=store, cwd=work)
    assert r.rc == 0, r
    r = imgbuild(RECIPE,
                 "--build-arg", f"BASE={STANDIN_BASE}", "--build-arg", f"CLIENT_BASE={STANDIN_BASE}",
                 "--build-arg", "APT_PACKAGES=", "--build-arg", "PIP_PACKAGES=",
                 "--build-arg", "NCCL_VERSION=",
                 "--build-arg", f"TORCH_REPO={standin_git}/pytorch.git",
                 "--build-arg", f"VISION_REPO={standin_git}/vision.git",
                 "--build-arg", "CLIENT_APT_PACKAGES=", "--build-arg", "CLIENT_PIP_PACKAGES=",
                 "--build-arg", f"PY_DIST={PY_DIST}",
                 store=store, cwd=work)
    assert r.rc == 0, r
    return {"store": store, "work": work, "build": r}


def test_plumbing_standin_wheel_in_dist_built_from_the_tag(plumbing):
    wheels = sorted((plumbing["work"] / "dist").glob("*.whl"))
    assert [w.name for w in wheels] == ["torch-1.1.0-py3-none-any.whl", "torchvision-0.3.0-py3-none-any.whl"]
    with zipfile.ZipFile(wheels[0]) as z:
        assert z.read("torch/__init__.py").decode() == '__version__ = "1.1.0"\n'  # the tag, not main
        # the submodule came with the clone, at the commit the tag records
        assert z.read("torch/pybind11_version.txt").decode() == "pybind11-standin 2.2\n"
        env = json.loads(z.read("torch/build_env.json"))
    # the recipe's build flags reached setup.py
    assert env == {
        "NO_TEST": "1", "NO_FBGEMM": "1", "NO_MIOPEN": "1", "NO_MKLDNN": "1", "NO_NNPACK": "1",
        "NO_QNNPACK": "1", "USE_NCCL": "1", "USE_SYSTEM_NCCL": "1",
        "NCCL_ROOT_DIR": "/usr", "NCCL_INCLUDE_DIR": "/usr/include",
        "NCCL_LIB_DIR": "/usr/lib/x86_64-linux-gnu",
        "TORCH_CUDA_ARCH_LIST": "3.5;6.0;6.1;7.0+PTX",
        "MAX_JOBS": None,  # an empty MAX_JOBS is unset, not handed over as ""
        "FORCE_CUDA": None,  # torchvision's flag only
    }


def test_plumbing_standin_client_image_tagged(plumbing):
    names = stored_names(plumbing["store"])
    assert any(n and n.endswith(CLIENT) for n in names), names


def run_in_client(plumbing, *cmd):
    r = imgbuild("run", CLIENT, "--", *cmd, store=plumbing["store"])
    assert r.rc == 0, r
    return r.out


def test_plumbing_standin_opt_holds_wheel_and_orion_files(plumbing):
    out = run_in_client(plumbing, "sh", "-c", "cd /opt && ls && test -x oriond && test -x install-client-9.0"
                        " && head -2 oriond")
    assert out.split("#!/bin/sh")[0].split() == ["install-client-9.0", "oriond",
                                                 "torch-1.1.0-py3-none-any.whl",
                                                 "torchvision-0.3.0-py3-none-any.whl"]
    # the torchvision wheel under /opt is the one in ./dist, byte for byte
    r = imgbuild("run", CLIENT, "--", "sha256sum", "/opt/torchvision-0.3.0-py3-none-any.whl",
                 store=plumbing["store"])
    assert r.rc == 0, r
    want = hashlib.sha256((plumbing["work"] / "dist/torchvision-0.3.0-py3-none-any.whl").read_bytes())
    assert r.out.split()[0] == want.hexdigest()
    assert "PLACEHOLDER" in out


def test_plumbing_standin_imports_torch_and_torchvision(plumbing):
    out = run_in_client(plumbing, "python3", "-c",
                        "import json, torch, torchvision, torchvision.build_info as b; "
                        "print(json.dumps([torch.__version__, torch.__file__, torchvision.__version__,"
                        " torchvision.__file__, b.FORCE_CUDA, b.TORCH_VERSION]))")
    tv, tfile, vv, vfile, force_cuda, built_against = json.loads(out)
    assert tv == "1.1.0" and vv == "0.3.0"
    # both pip-installed from their wheels into PY_DIST
    assert tfile == f"{PY_DIST}/torch/__init__.py"
    assert vfile == f"{PY_DIST}/torchvision/__init__.py"
    assert force_cuda == "1" and built_against == "1.1.0"
    out = run_in_client(plumbing, "sh", "-c", f"ls {PY_DIST}")
    assert "torchvision" in out.split() and "torch" in out.split()
    assert any(x.startswith("torch-1.1.0.dist-info") for x in out.split())
    assert any(x.startswith("torchvision-0.3.0.dist-info") for x in out.split())
