"""recipes/mxnet-cu100.recipe: its plan pinned, and RECIPE PLUMBING TESTS
WITH STAND-IN SOURCES.

The plumbing tests do not build MXNet: they run the recipe unchanged with
its source ARGs pointed at stand-ins made here, which proves the recipe's
own plumbing end to end, not that MXNet builds for CUDA 10.0:
  - incubator-mxnet, simpledet, cocoapi: local git repositories served over
    plain HTTP on 127.0.0.1 (a build step cannot see the host's paths).
    The MXNet stand-in has a tag 1.6.0 (and a commit after it, so a clone
    of the wrong revision shows) with a Makefile holding MXNet's
    KNOWN_CUDA_ARCHS line, src/operator/nn/group_norm*, a
    tools/staticbuild/build.sh that records its arguments and the tree it
    was given and compiles lib/libmxnet.so from a C file, and a
    tools/pip/setup.py that loads that library (as MXNet's does) and makes
    the wheel mxnet_<variant> tagged manylinux2014_x86_64; a branch
    too-new whose library needs reallocarray (glibc 2.26) shows the
    manylinux2014 gate failing the build;
  - CMake 3.15.2: a tarball whose bootstrap/Makefile install a `cmake`
    script printing its version;
  - the ubuntu:14.04 base: the suite's Debian bookworm base with python3,
    setuptools, wheel, git, gcc, make and curl (built here by a small
    recipe; its apt step cached in $IMGBUILD_TEST_CACHE);
  - APT_PACKAGES and PIP_PACKAGES empty (those steps skip).
Checked: the wheel in ./dist, repaired/retagged to manylinux2014 with the
audit's line in the build log, lib/libmxnet.so + licenses + commit, the
KNOWN_CUDA_ARCHS edit, group_norm gone, SimpleDet's operators and cocoapi
in the tree build.sh got, `build.sh cu100 pip`, mxnet_variant=CU100 and
staticdeps' LD_LIBRARY_PATH in setup.py, VARIANT=cu101 reaching both, an
unknown VARIANT refused, the artifact push script and the push itself (to
the suite's registry, read back with `artifact pull`)."""
import functools
import http.server
import io
import json
import os
import re
import tarfile
import threading
import zipfile

import pytest

from conftest import ROOT, cache_dir, imgbuild, local_cache_args
from test_recipe_torch110 import git, norm

RECIPE = ROOT / "recipes/mxnet-cu100.recipe"
STANDIN_BASE = "localhost/mxnet-standin:bookworm"
MXDIR = "/src/incubator-mxnet"


# ---------------------------------------------------------------- plan

def plan(tmp_path, *args):
    r = imgbuild("plan", RECIPE, "--platform", "linux/amd64", *args, store=tmp_path / "store")
    assert r.rc == 0, r
    assert "warning:" not in r.out + r.err
    return norm(r.out)


def test_mxnet_plan_is_pinned(tmp_path):
    out = plan(tmp_path)
    assert "target: stage 0 build\n" in out
    assert "global ARG BASE=ubuntu:14.04\n" in out
    assert "stage 0 build\nfrom: image ubuntu:14.04\ndepends on: none\n" in out
    # the toolchain: gcc 4.8 first in PATH, checked
    assert ("apt-get install -y -q git libcurl4-openssl-dev unzip gcc-4.8 g++-4.8 gfortran gfortran-4.8 "
            "binutils nasm libtool curl wget sudo gnupg gnupg2 gnupg-agent pandoc python3-pip automake "
            "pkg-config make python3-dev python3-setuptools libssl-dev ca-certificates ") in out
    assert 'ln -sf "/usr/bin/$t-4.8" "/usr/local/bin/$t"' in out
    assert 'gcc --version | head -1 | grep -F " 4.8."' in out
    # CMake 3.15.2 from source
    assert ('curl -fsSL "https://github.com/Kitware/CMake/releases/download/v3.15.2/cmake-3.15.2.tar.gz"'
            " | tar -xz -C /src/cmake --strip-components=1") in out
    assert "./bootstrap --prefix=/usr/local" in out
    assert 'cmake --version | head -1 | grep -F " 3.15.2"' in out
    # the sources, expanded
    assert ('RUN git clone --recursive --branch "1.6.0" "https://github.com/apache/incubator-mxnet.git" '
            '/src/incubator-mxnet && git clone --branch "master" "https://github.com/tusen-ai/simpledet.git" '
            '/src/simpledet && git clone --branch "master" "https://github.com/RogerChern/cocoapi.git" '
            "/src/cocoapi\n") in out
    # pip for python 3.4, then the pins
    assert ('python3 -m pip install --index-url "https://pypi.org/simple" "pip==19.1.1" && python3 -m pip '
            'install --no-cache-dir --index-url "https://pypi.org/simple" wheel==0.33.6 numpy==1.15.4 '
            "requests==2.21.0 graphviz==0.8.4;") in out
    # SimpleDet's operators and cocoapi in, MXNet's group_norm out, the CUDA archs
    assert ("RUN cp -r /src/simpledet/operator_cxx/* src/operator/ && mkdir -p src/coco_api "
            "&& cp -r /src/cocoapi/common src/coco_api/ "
            "&& ls src/operator/nn/group_norm* >/dev/null && rm src/operator/nn/group_norm* "
            '&& sed -i "s/KNOWN_CUDA_ARCHS :=.*/KNOWN_CUDA_ARCHS := 35 50 60 70/" Makefile '
            '&& grep -E "^[[:space:]]*KNOWN_CUDA_ARCHS := 35 50 60 70$" Makefile\n') in out
    # the static build and the wheel
    assert '&& tools/staticbuild/build.sh "cu100" pip\n' in out
    assert ('RUN case "cu100" in cu100) mxnet_variant=CU100 cuda=10.0 driver=410 ;; '
            "cu101) mxnet_variant=CU101 cuda=10.1 driver=418 ;; esac && deps=/src/incubator-mxnet/staticdeps "
            '&& export LD_LIBRARY_PATH="$deps/usr/local/cuda-$cuda/lib64:$deps/usr/lib/x86_64-linux-gnu:'
            '$deps/usr/lib/nvidia-$driver" && cd tools/pip '
            "&& { [ -e mxnet-build ] || ln -s /src/incubator-mxnet mxnet-build; } "
            "&& mxnet_variant=${mxnet_variant} python3 setup.py bdist_wheel") in out
    # outputs: the wheel, held to manylinux2014; libmxnet.so and its licenses
    assert out.rstrip().endswith(
        "output: type=local dest=dist src=/wheels repair=manylinux2014_x86_64\n"
        "output: type=local dest=lib src=/artifact")
    assert 'RUN if [ -n "" ]; then . /etc/os-release' in out  # no ARTIFACT_REPO: no push script


def test_mxnet_plan_cu101_and_mirrors(tmp_path):
    out = plan(tmp_path, "--build-arg", "VARIANT=cu101",
               "--build-arg", "MXNET_REPO=https://git.example/mirror/incubator-mxnet.git",
               "--build-arg", "CMAKE_VERSION=3.15.3", "--build-arg", "ARTIFACT_REPO=s3://bucket")
    assert '&& tools/staticbuild/build.sh "cu101" pip\n' in out
    assert 'RUN case "cu101" in cu100) mxnet_variant=CU100 cuda=10.0 driver=410 ;;' in out
    # the variant is in the key of the static build and what follows, not before
    assert re.search(r"\nargs: those of line \d+, and VARIANT=cu101\n", out), out
    assert '"https://git.example/mirror/incubator-mxnet.git" /src/incubator-mxnet' in out
    # the URL follows the version
    assert '"https://github.com/Kitware/CMake/releases/download/v3.15.3/cmake-3.15.3.tar.gz"' in out
    assert "--repository 's3://bucket' --git-sha" in out and "--variant cu101 --libtype static" in out


# ------------------------------------------- plumbing with stand-in sources

STANDIN_BASE_RECIPE = """\
# The stand-in for ubuntu:14.04 with MXNet's toolchain: bookworm with what
# the recipe's later steps and the stand-in sources use.
ARG BASE
FROM ${BASE}
ENV DEBIAN_FRONTEND=noninteractive
RUN apt-get update -q \\
 && apt-get install -y -q --no-install-recommends python3 python3-setuptools python3-wheel \\
      git gcc libc6-dev make curl \\
 && rm -rf /var/lib/apt/lists/* /var/log/apt /var/log/dpkg.log /var/log/alternatives.log \\
      /var/cache/apt/*.bin /var/cache/ldconfig/aux-cache
OUTPUT type=image,name=%s
""" % STANDIN_BASE

BUILD_SH = """\
#!/bin/sh
# Stand-in for MXNet's tools/staticbuild/build.sh VARIANT PACKAGE_TYPE:
# records what it was given, makes staticdeps/, lib/libmxnet.so, licenses/.
set -e
mkdir -p staticdeps/lib lib licenses
python3 tools/staticbuild/record.py "$@" > lib/build_record.json
gcc -shared -fPIC -O2 -DSTANDIN_VARIANT="\\"$1\\"" -o lib/libmxnet.so src/standin.c
cp LICENSE NOTICE licenses/
"""

RECORD_PY = """\
import json, os, subprocess, sys
def files(top):
    return sorted(os.path.relpath(os.path.join(d, f), top)
                  for d, _, fs in os.walk(top) for f in fs) if os.path.isdir(top) else None
cmake = subprocess.run(["sh", "-c", "cmake --version | head -1"], capture_output=True, text=True)
json.dump({
    "argv": sys.argv[1:],
    "cwd": os.getcwd(),
    "known_cuda_archs": [l.rstrip("\\n") for l in open("Makefile") if "KNOWN_CUDA_ARCHS" in l],
    "operator": files("src/operator"),
    "coco_api": files("src/coco_api"),
    "cmake": cmake.stdout.strip(),
    "cmake_bootstrap": open("/usr/local/share/cmake-standin/bootstrap.args").read().split()
        if os.path.exists("/usr/local/share/cmake-standin/bootstrap.args") else None,
}, sys.stdout, sort_keys=True)
"""

PIP_SETUP = """\
# Stand-in for MXNet's tools/pip/setup.py: the tree is mxnet-build/, the
# package name follows mxnet_variant, the library is loaded at setup time.
import ctypes, json, os, shutil, sys
from setuptools import setup
sys.argv += ["--python-tag", "py3", "--plat-name=manylinux2014_x86_64"]
HERE = os.path.dirname(os.path.abspath(__file__))
BUILD = os.path.join(HERE, "mxnet-build")
variant = os.environ["mxnet_variant"].upper()
pkg = os.path.join(HERE, "mxnet")
shutil.rmtree(pkg, ignore_errors=True)
shutil.copytree(os.path.join(BUILD, "python", "mxnet"), pkg)
shutil.copy(os.path.join(BUILD, "lib", "libmxnet.so"), pkg)
shutil.copy(os.path.join(BUILD, "lib", "build_record.json"), pkg)
f = ctypes.CDLL(os.path.join(pkg, "libmxnet.so")).MXStandinVariant
f.restype = ctypes.c_char_p
with open(os.path.join(pkg, "setup_env.json"), "w") as out:
    json.dump({"mxnet_variant": os.environ.get("mxnet_variant"),
               "LD_LIBRARY_PATH": os.environ.get("LD_LIBRARY_PATH"),
               "lib_variant": f().decode()}, out, sort_keys=True)
setup(name="mxnet" if variant == "CPU" else "mxnet_" + variant.lower(), version="1.6.0",
      packages=["mxnet"], zip_safe=False,
      package_data={"mxnet": ["libmxnet.so", "build_record.json", "setup_env.json"]})
"""

STANDIN_C = 'const char *MXStandinVariant(void) { return STANDIN_VARIANT; }\n'
# glibc 2.26's reallocarray: above manylinux2014's glibc 2.17
TOO_NEW_C = """\
#include <stdlib.h>
const char *MXStandinVariant(void) { return STANDIN_VARIANT; }
void *MXStandinAlloc(void *p, size_t n) { return reallocarray(p, n, 16); }
"""

MXNET_FILES = {
    # MXNet 1.x's line is indented by a tab, inside the CUDA_ARCH test
    "Makefile": "# stand-in of MXNet's Makefile\nifeq ($(USE_CUDA), 1)\nifeq ($(CUDA_ARCH),)\n"
                "\tKNOWN_CUDA_ARCHS := 30 35 50 52 60 61 70 75\n"
                "\tCUDA_ARCH := $(foreach arch,$(KNOWN_CUDA_ARCHS),-gencode arch=compute_$(arch))\n"
                "endif\nendif\nall:\n\ttrue\n",
    "LICENSE": "Apache License 2.0 (stand-in)\n",
    "NOTICE": "Apache MXNet (incubating) stand-in\n",
    "src/standin.c": STANDIN_C,
    "src/operator/nn/group_norm.cc": "// MXNet's GroupNorm (stand-in)\n",
    "src/operator/nn/group_norm-inl.h": "// MXNet's GroupNorm (stand-in)\n",
    "src/operator/nn/batch_norm.cc": "// stays\n",
    "python/mxnet/__init__.py": '__version__ = "1.6.0"\n',
    "tools/staticbuild/build.sh": BUILD_SH,
    "tools/staticbuild/record.py": RECORD_PY,
    "tools/pip/setup.py": PIP_SETUP,
}
SIMPLEDET_FILES = {
    "operator_cxx/contrib/decode_bbox.cc": "// SimpleDet's DecodeBBox (stand-in)\n",
    "operator_cxx/contrib/decode_bbox-inl.h": "// SimpleDet's DecodeBBox (stand-in)\n",
    "operator_cxx/contrib/roi_align_v2.cc": "// SimpleDet's ROIAlign v2 (stand-in)\n",
    "README.md": "not copied\n",
}
COCOAPI_FILES = {
    "common/maskApi.c": "/* cocoapi (stand-in) */\n",
    "common/maskApi.h": "/* cocoapi (stand-in) */\n",
    "common/gason.cpp": "// cocoapi (stand-in)\n",
    "PythonAPI/setup.py": "# not copied\n",
}

CMAKE_BOOTSTRAP = """\
#!/bin/sh
# Stand-in for CMake's bootstrap: records its arguments, writes the Makefile.
set -e
prefix=/usr/local
for a; do case $a in --prefix=*) prefix=${a#--prefix=} ;; esac; done
echo "$@" > bootstrap.args
printf 'all:\\n\\ttrue\\ninstall:\\n\\tmkdir -p %s/bin %s/share/cmake-standin\\n\\tinstall -m 755 cmake.standin %s/bin/cmake\\n\\tcp bootstrap.args %s/share/cmake-standin/\\n' \\
  "$prefix" "$prefix" "$prefix" "$prefix" > Makefile
"""


def make_repo(work, served, name, files, tag=None, after=None, branches=None, main="main"):
    """A repository with `files` committed on branch `main` (tagged
    `tag`), then, when `after`, one more commit on it; `branches` {name: files} off the
    first commit.  Executables: paths ending in .sh.  Pushed bare to
    served/NAME.git for the dumb HTTP protocol."""
    src = work / name
    src.mkdir()
    git("init", "-q", "-b", main, cwd=src)

    def write(fs):
        for path, text in fs.items():
            (src / path).parent.mkdir(parents=True, exist_ok=True)
            (src / path).write_text(text)
            (src / path).chmod(0o755 if path.endswith(".sh") else 0o644)
    write(files)
    git("add", "-A", cwd=src)
    git("commit", "-q", "-m", f"{name} stand-in", cwd=src)
    if tag:
        git("tag", tag, cwd=src)
    for b, fs in (branches or {}).items():
        git("checkout", "-q", "-b", b, cwd=src)
        write(fs)
        git("commit", "-q", "-am", b, cwd=src)
        git("checkout", "-q", main, cwd=src)
    if after:
        write(after)
        git("commit", "-q", "-am", "after the tag", cwd=src)
    bare = served / f"{name}.git"
    git("clone", "-q", "--bare", str(src), str(bare), cwd=work)
    git("update-server-info", cwd=bare)


def cmake_tarball(path):
    with tarfile.open(path, "w:gz") as t:
        for name, text, mode in [("bootstrap", CMAKE_BOOTSTRAP, 0o755),
                                 ("cmake.standin", '#!/bin/sh\necho "cmake version 3.15.2"\n', 0o755)]:
            data = text.encode()
            ti = tarfile.TarInfo(f"cmake-3.15.2/{name}")
            ti.size, ti.mode = len(data), mode
            t.addfile(ti, io.BytesIO(data))


@pytest.fixture(scope="module")
def standin_src(tmp_path_factory):
    work = tmp_path_factory.mktemp("mxnet-src")
    served = work / "served"
    served.mkdir()
    make_repo(work, served, "incubator-mxnet", MXNET_FILES, tag="1.6.0",
              after={"python/mxnet/__init__.py": '__version__ = "after-the-tag"\n'},
              branches={"too-new": {"src/standin.c": TOO_NEW_C}})
    make_repo(work, served, "simpledet", SIMPLEDET_FILES, main="master")  # their default branch
    make_repo(work, served, "cocoapi", COCOAPI_FILES, main="master")
    cmake_tarball(served / "cmake-3.15.2.tar.gz")

    class Quiet(http.server.SimpleHTTPRequestHandler):
        def log_message(self, *a):
            pass

    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0),
                                            functools.partial(Quiet, directory=str(served)))
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()


@pytest.fixture(scope="module")
def standin(base_image, standin_src, tmp_path_factory):
    """The store with the stand-in base, and the recipe's --build-args for
    the stand-in sources."""
    store = tmp_path_factory.mktemp("mxnet-store")
    work = tmp_path_factory.mktemp("mxnet-base")
    (work / "standin-base.recipe").write_text(STANDIN_BASE_RECIPE)
    cache = cache_dir() / "mxnet-standin-cache"
    args = local_cache_args(cache)
    r = imgbuild(work / "standin-base.recipe", "--build-arg", f"BASE={base_image}", *args,
                 store=store, cwd=work)
    (work / "build.log").write_text(r.out + r.err)
    assert r.rc == 0, r
    build_args = []
    for k, v in {"BASE": STANDIN_BASE, "APT_PACKAGES": "", "PIP_PACKAGES": "",
                 "CMAKE_URL": f"{standin_src}/cmake-3.15.2.tar.gz",
                 "MXNET_REPO": f"{standin_src}/incubator-mxnet.git",
                 "SIMPLEDET_REPO": f"{standin_src}/simpledet.git",
                 "COCOAPI_REPO": f"{standin_src}/cocoapi.git"}.items():
        build_args += ["--build-arg", f"{k}={v}"]
    return {"store": store, "args": build_args, "tmp": tmp_path_factory}


def build(standin, name, *extra):
    work = standin["tmp"].mktemp(name)
    r = imgbuild(RECIPE, *standin["args"], *extra, store=standin["store"], cwd=work)
    (work / "build.log").write_text(r.out + r.err)  # kept with IMGBUILD_KEEP_TMP=1
    return work, r


def wheel_json(wheel, member):
    with zipfile.ZipFile(wheel) as z:
        return json.loads(z.read(member))


@pytest.fixture(scope="module")
def cu100(standin, registry):
    work, r = build(standin, "cu100", "--build-arg", f"ARTIFACT_REPO={registry}/mxnet/cd")
    assert r.rc == 0, r
    return work, r


def test_plumbing_standin_wheel_audited_to_manylinux2014(cu100):
    work, r = cu100
    wheels = sorted((work / "dist").glob("*.whl"))
    assert len(wheels) == 1, wheels
    name = wheels[0].name
    assert name.startswith("mxnet_cu100-1.6.0-py3-none-") and "manylinux2014_x86_64" in name, name
    assert "manylinux_2_17_x86_64" in name, name  # retagged by the repair
    log = r.out + r.err
    # the audit's and the repair's lines
    assert "wheel mxnet_cu100-1.6.0-py3-none-manylinux2014_x86_64.whl: verified," in log, log
    assert "platform tag manylinux" in log, log
    assert f"repaired as {name}" in log, log
    rp = subprocess_audit(wheels[0])
    assert rp["overall_tag"].startswith("manylinux"), rp
    with zipfile.ZipFile(wheels[0]) as z:
        assert z.read("mxnet/__init__.py").decode() == '__version__ = "1.6.0"\n'  # the tag, not main
        assert "mxnet/libmxnet.so" in z.namelist()


def subprocess_audit(wheel):
    r = imgbuild("wheel", "audit", wheel, "--json", store=wheel.parent / "unused-store")
    assert r.rc == 0, r
    return json.loads(r.out)


def test_plumbing_standin_tree_given_to_build_sh(cu100):
    work, _ = cu100
    wheel = next((work / "dist").glob("*.whl"))
    rec = wheel_json(wheel, "mxnet/build_record.json")
    assert rec["argv"] == ["cu100", "pip"]
    assert rec["cwd"] == MXDIR
    # the Makefile's line edited
    assert rec["known_cuda_archs"] == [
        "\tKNOWN_CUDA_ARCHS := 35 50 60 70",
        "\tCUDA_ARCH := $(foreach arch,$(KNOWN_CUDA_ARCHS),-gencode arch=compute_$(arch))"]
    # MXNet's group_norm gone, SimpleDet's operators in, cocoapi's common/ in
    assert rec["operator"] == ["contrib/decode_bbox-inl.h", "contrib/decode_bbox.cc",
                               "contrib/roi_align_v2.cc", "nn/batch_norm.cc"]
    assert rec["coco_api"] == ["common/gason.cpp", "common/maskApi.c", "common/maskApi.h"]
    # CMake from the tarball, bootstrapped into /usr/local, on PATH
    assert rec["cmake"] == "cmake version 3.15.2"
    assert rec["cmake_bootstrap"][0] == "--prefix=/usr/local"
    assert rec["cmake_bootstrap"][2:] == ["--", "-DCMAKE_USE_OPENSSL=ON"]


def test_plumbing_standin_setup_py_variant_and_staticdeps(cu100):
    work, _ = cu100
    wheel = next((work / "dist").glob("*.whl"))
    env = wheel_json(wheel, "mxnet/setup_env.json")
    deps = f"{MXDIR}/staticdeps"
    assert env == {"mxnet_variant": "CU100", "lib_variant": "cu100",
                   "LD_LIBRARY_PATH": f"{deps}/usr/local/cuda-10.0/lib64:{deps}/usr/lib/x86_64-linux-gnu:"
                                      f"{deps}/usr/lib/nvidia-410"}


def test_plumbing_standin_libmxnet_and_artifact_push(cu100, registry, tmp_path):
    work, _ = cu100
    lib = work / "lib"
    assert sorted(p.relative_to(lib).as_posix() for p in lib.rglob("*")) == [
        "artifact-push.sh", "libmxnet.so", "licenses", "licenses/LICENSE", "licenses/NOTICE",
        "mxnet.commit"]
    with zipfile.ZipFile(next((work / "dist").glob("*.whl"))) as z:
        assert z.read("mxnet/libmxnet.so") == (lib / "libmxnet.so").read_bytes()
    commit = (lib / "mxnet.commit").read_text().strip()
    assert len(commit) == 40
    script = (lib / "artifact-push.sh").read_text()
    assert (f"exec imgbuild artifact push --repository '{registry}/mxnet/cd' --git-sha {commit} "
            "--os debian12 --variant cu100 --libtype static --lib lib/libmxnet.so "
            "--licenses 'lib/licenses/*' \"$@\"\n") in script
    # the host post-step: run it, read the artifact back
    store = tmp_path / "store"
    env = dict(os.environ, PATH=f"{ROOT / 'bin'}:{os.environ['PATH']}", IMGBUILD_STORE=str(store),
               HOME=str(tmp_path), MXNET_SHA="", GIT_COMMIT="", IMGBUILD_ARTIFACT_REPOSITORY="")
    import subprocess
    p = subprocess.run(["sh", "lib/artifact-push.sh"], cwd=work, env=env, capture_output=True,
                       text=True, timeout=120)
    assert p.returncode == 0, p
    dest = tmp_path / "pulled"
    r = imgbuild("artifact", "pull", "--repository", f"{registry}/mxnet/cd", "--git-sha", commit,
                 "--os", "debian12", "--variant", "cu100", "--libtype", "static",
                 "--destination", dest, store=tmp_path / "store2", env={"HOME": str(tmp_path)})
    assert r.rc == 0, r
    assert (dest / "libmxnet.so").read_bytes() == (lib / "libmxnet.so").read_bytes()
    assert (dest / "licenses/NOTICE").read_text() == "Apache MXNet (incubating) stand-in\n"
    assert "variant: cu100" in (dest / "libmxnet.meta").read_text()


def test_plumbing_standin_cu101(standin):
    work, r = build(standin, "cu101", "--build-arg", "VARIANT=cu101")
    assert r.rc == 0, r
    wheels = sorted((work / "dist").glob("*.whl"))
    assert len(wheels) == 1 and wheels[0].name.startswith("mxnet_cu101-1.6.0-py3-none-"), wheels
    assert wheel_json(wheels[0], "mxnet/build_record.json")["argv"] == ["cu101", "pip"]
    env = wheel_json(wheels[0], "mxnet/setup_env.json")
    assert env["mxnet_variant"] == "CU101" and env["lib_variant"] == "cu101"
    deps = f"{MXDIR}/staticdeps"
    assert env["LD_LIBRARY_PATH"] == (f"{deps}/usr/local/cuda-10.1/lib64:{deps}/usr/lib/x86_64-linux-gnu:"
                                      f"{deps}/usr/lib/nvidia-418")
    # no ARTIFACT_REPO: no push script
    assert not (work / "lib/artifact-push.sh").exists()
    assert (work / "lib/libmxnet.so").exists()


def test_plumbing_standin_unknown_variant_refused(standin):
    work, r = build(standin, "cu92", "--build-arg", "VARIANT=cu92")
    assert r.rc != 0, r
    assert "VARIANT=cu92: only cu100 and cu101 are supported" in r.out + r.err
    assert not (work / "dist").exists()


@pytest.fixture(scope="module")
def too_new(standin):
    return build(standin, "too-new", "--build-arg", "MXNET_REF=too-new")


def test_plumbing_standin_not_manylinux2014_fails_the_build(too_new):
    """The gate: a library that needs glibc 2.26 cannot be manylinux2014."""
    work, r = too_new
    assert r.rc != 0, r
    log = r.out + r.err
    assert ("wheel mxnet_cu100-1.6.0-py3-none-manylinux2014_x86_64.whl: verified, 8 files; "
            "platform tag manylinux_2_26_x86_64") in log, log
    assert ("cannot repair to manylinux_2_17_x86_64 because of too-recent versioned symbols "
            "(the symbols allow manylinux_2_26_x86_64 at most") in log, log


def test_plumbing_standin_rejected_wheel_not_left_in_dist(too_new):
    work, r = too_new
    assert r.rc != 0, r
    assert not list(work.rglob("*.whl"))
