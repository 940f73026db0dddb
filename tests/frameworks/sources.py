"""What the framework tests build from, made locally: the stand-in base
(bookworm with Debian's torch 1.13.1), torchvision 0.14.1's real source
(Debian's copy of the upstream release tarball, from the Debian mirror,
checked by its sha256) as a git repository tagged v0.14.1, and the
stand-in torch source; both repositories served over plain HTTP on
127.0.0.1, as a mirror of GitHub would be (a build step cannot see the
host's paths)."""
import functools
import hashlib
import http.server
import os
import shutil
import subprocess
import threading
import urllib.request
from conftest import e2e

cache_dir, local_cache_args = e2e.cache_dir, e2e.local_cache_args

VISION_URL = ("http://deb.debian.org/debian/pool/main/p/pytorch-vision/"
              "pytorch-vision_0.14.1.orig.tar.gz")
VISION_SHA256 = "ced67e1cf1f97e168cdf271851a4d0b6d382ab7936e7bcbb39aaa87239c324b6"
STANDIN = "localhost/frameworks-standin:bookworm"
# Debian's torch and what torchvision's build and its checks use: the C++
# compiler and ninja (torch's extension builder), ccache (the recipes'
# cache mounts), libjpeg and libpng (torchvision's image I/O), pillow and
# numpy (torchvision imports them), git (the recipes clone).
APT = ("python3-torch libtorch-dev python3-dev g++ make ninja-build ccache git ca-certificates "
       "libjpeg-dev libpng-dev python3-numpy python3-pil python3-requests python3-pip "
       "python3-setuptools python3-wheel")
STANDIN_RECIPE = """\
# The stand-in for the CUDA devel and client bases: bookworm with Debian's
# torch 1.13.1 (CPU; libtorch-dev: headers and CMake files) and the build
# tools; pip may install into the system python (no PEP 668 marker).
ARG BASE
FROM ${BASE}
ENV DEBIAN_FRONTEND=noninteractive
RUN apt-get update -q \\
 && apt-get install -y -q --no-install-recommends %s \\
 && rm -rf /var/lib/apt/lists/* /var/log/apt /var/log/dpkg.log /var/log/alternatives.log \\
      /var/cache/apt/*.bin /var/cache/ldconfig/aux-cache \\
 && rm -f /usr/lib/python3*/EXTERNALLY-MANAGED
OUTPUT type=image,name=%s
""" % (APT, STANDIN)

# The stand-in for PyTorch's own source (a build of it is hours): a wheel
# named torch 1.13.1 that holds only its metadata, so that `pip install
# torch-*.whl` works as in the recipes and `import torch` still finds
# Debian's torch, the real one, in /usr/lib/python3/dist-packages.
TORCH_SETUP = """\
from setuptools import setup
setup(name="torch", version="1.13.1", packages=[],
      description="stand-in: Debian's python3-torch 1.13.1 is the torch imported")
"""


def vision_tarball():
    """Debian's pytorch-vision_0.14.1.orig.tar.gz (torchvision's upstream
    v0.14.1 tarball), downloaded once into the test cache."""
    path = cache_dir() / "sources" / "pytorch-vision_0.14.1.orig.tar.gz"
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".part%d" % os.getpid())
        with urllib.request.urlopen(VISION_URL, timeout=120) as r, open(tmp, "wb") as f:
            shutil.copyfileobj(r, f)
        os.replace(tmp, path)
    got = hashlib.sha256(path.read_bytes()).hexdigest()
    assert got == VISION_SHA256, f"{path}: sha256 {got}, expected {VISION_SHA256}"
    return path


def git(*args, cwd):
    # fixed dates: the same tree gives the same commit, so the version
    # torchvision's setup.py derives from it (0.14.1a0+SHA) is stable
    env = {**os.environ, "GIT_CONFIG_NOSYSTEM": "1", "HOME": str(cwd),
           "GIT_AUTHOR_DATE": "2022-12-15T00:00:00Z", "GIT_COMMITTER_DATE": "2022-12-15T00:00:00Z"}
    return subprocess.run(["git", "-c", "user.name=stand-in", "-c", "user.email=standin@localhost",
                           "-c", "init.defaultBranch=main", *args],
                          cwd=cwd, check=True, capture_output=True, text=True, env=env).stdout


def make_repo(src, served, name, tag):
    git("init", "-q", cwd=src)
    git("add", "-A", cwd=src)
    git("commit", "-q", "-m", f"{name} {tag}", cwd=src)
    git("tag", tag, cwd=src)
    bare = served / f"{name}.git"
    git("clone", "-q", "--bare", str(src), str(bare), cwd=src.parent)
    git("update-server-info", cwd=bare)
    return git("rev-parse", "HEAD", cwd=src).strip()


class Served:
    """The two repositories over HTTP; .url, .vision_sha, .shutdown()."""

    def __init__(self, work):
        served = work / "served"
        served.mkdir()
        vision = work / "vision"
        subprocess.run(["tar", "-xzf", vision_tarball(), "-C", work, "--no-same-owner"], check=True)
        (work / "vision-0.14.1").rename(vision)
        self.vision_sha = make_repo(vision, served, "vision", "v0.14.1")
        torch = work / "pytorch"
        torch.mkdir()
        (torch / "setup.py").write_text(TORCH_SETUP)
        make_repo(torch, served, "pytorch", "v1.13.1")

        class Quiet(http.server.SimpleHTTPRequestHandler):
            def log_message(self, *a):
                pass

        self.httpd = http.server.ThreadingHTTPServer(
            ("127.0.0.1", 0), functools.partial(Quiet, directory=str(served)))
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"

    def shutdown(self):
        self.httpd.shutdown()


def standin_args(imgbuild, base_image, store, work):
    """Build the stand-in base into `store`; its apt step from (and to) a
    cache per user and identity mode (the mode is part of the key)."""
    (work / "standin.recipe").write_text(STANDIN_RECIPE)
    cache = (cache_dir() / f"frameworks.uid{os.getuid()}"
             / f"standin-{os.environ.get('IMGBUILD_USERNS') or 'auto'}")
    r = imgbuild(work / "standin.recipe", "--build-arg", f"BASE={base_image}",
                 *local_cache_args(cache), store=store, cwd=work)
    assert r.rc == 0, r
