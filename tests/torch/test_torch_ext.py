"""make e2e-torch: THE REAL TORCH BUILD.  recipes/torch-cuda-ext.recipe
runs unchanged with build args pointing at a Debian bookworm stand-in for
its manylinux-cuda base: bookworm with python3-torch 1.13.1 (CPU),
libtorch-dev, g++, cmake, pip, setuptools, wheel from the Debian mirror (a
small recipe here; its apt step cached in $IMGBUILD_TEST_CACHE with
--cache-to/--cache-from, one cache per identity mode, so a rerun does not
install it again).  The
recipe compiles the real extension (recipes/torch-cuda-ext: C++ operators
registered with TORCH_LIBRARY, CMake against Debian's libtorch) and makes a
wheel; OUTPUT copies it to ./dist, verifies, audits and repairs it to
manylinux_2_36 with libtorch's libraries excluded.  A client image (the
stand-in, so torch is apt's, in /usr/lib/python3/dist-packages) gets the
repaired wheel under /opt, pip-installed; `imgbuild run` imports torch and
ibtorch_ext there and computes with the extension's operators, checked
against torch's own.  Not in `make test`: tests/torch/run.sh says why."""
import base64
import hashlib
import json
import os
import re
import subprocess
import zipfile
from pathlib import Path

import pytest

from conftest import e2e

ROOT = e2e.ROOT
imgbuild = e2e.imgbuild
RECIPE = ROOT / "recipes/torch-cuda-ext.recipe"
STANDIN = "localhost/torch-ext-standin:bookworm"
CLIENT = "localhost/ibtorch-client:bookworm"
PLAT = "manylinux_2_36_x86_64"  # bookworm's glibc, the policy asked for
# The extension's versioned symbols need no more than glibc 2.34: as
# auditwheel does, the repair adds that higher-priority tag.
TAGS = "manylinux_2_34_x86_64.manylinux_2_36_x86_64"
WHEEL = f"ibtorch_ext-0.1.0-cp311-cp311-{TAGS}.whl"
APT = "python3-torch libtorch-dev python3-dev g++ make cmake python3-pip python3-setuptools python3-wheel"

STANDIN_RECIPE = """\
# The stand-in for the manylinux-cuda base: bookworm with Debian's torch
# 1.13.1 (CPU; libtorch-dev has the headers and TorchConfig.cmake) and the
# build tools; pip may install into the system python (no PEP 668 marker).
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

CLIENT_RECIPE = """\
# The client: torch from apt (dist-packages), the repaired wheel under /opt.
ARG BASE
FROM ${BASE}
COPY dist/ /opt/
RUN python3 -m pip install --no-deps --no-index /opt/ibtorch_ext-*.whl
OUTPUT type=image,name=%s
""" % CLIENT

# Run in the client: the operators on fixed inputs and on random ones,
# against torch's own ops; a shape mismatch must raise.
CHECK = r"""
import json, math, torch, ibtorch_ext
torch.manual_seed(0)
a, b = torch.randn(64, 33), torch.randn(64, 33)
x = torch.randn(17, 129) * 20
try:
    ibtorch_ext.scaled_add(a, torch.zeros(3), 1.0)
    err = None
except RuntimeError as e:
    err = str(e).splitlines()[0]
print(json.dumps({
    "torch": torch.__version__, "torch_file": torch.__file__, "ext_file": ibtorch_ext.__file__,
    "built_against": ibtorch_ext.TORCH_VERSION, "with_cuda": ibtorch_ext.WITH_CUDA,
    "schemas": [str(s) for op in ("scaled_add", "row_softmax")
                for s in torch._C._jit_get_schemas_for_operator("ibtorch_ext::" + op)],
    "fixed_add": ibtorch_ext.scaled_add(torch.tensor([1., 2., 3.]), torch.tensor([10., 20., 30.]), 0.5).tolist(),
    "fixed_softmax": ibtorch_ext.row_softmax(torch.tensor([[0., math.log(3.)], [5., 5.]])).tolist(),
    "add_diff": (ibtorch_ext.scaled_add(a, b, -1.75) - torch.add(a, b, alpha=-1.75)).abs().max().item(),
    "softmax_diff": (ibtorch_ext.row_softmax(x) - torch.softmax(x, dim=1)).abs().max().item(),
    "row_sums": ibtorch_ext.row_softmax(x).sum(dim=1).tolist(),
    "noncontig_diff": (ibtorch_ext.scaled_add(a.t(), b.t(), 2.0) - (a.t() + 2.0 * b.t())).abs().max().item(),
    "error": err,
}))
"""


def standin_cache_name():
    """The identity mode is part of a step's cache key (docs/cli.md): one
    cache of the stand-in's apt step per user and IMGBUILD_USERNS value, so
    that each mode's rerun hits its own; in a directory of the user's own
    (the export writes beside its destination; tests/torch/run.sh makes the
    unprivileged user's)."""
    return Path(f"torch-ext.uid{os.getuid()}") / f"standin-{os.environ.get('IMGBUILD_USERNS') or 'auto'}"


@pytest.fixture(scope="module")
def built(base_image, tmp_path_factory):
    store = tmp_path_factory.mktemp("torch-store")
    work = tmp_path_factory.mktemp("torch-work")
    (work / "standin.recipe").write_text(STANDIN_RECIPE)
    cache = e2e.cache_dir() / standin_cache_name()
    r = imgbuild(work / "standin.recipe", "--build-arg", f"BASE={base_image}",
                 *e2e.local_cache_args(cache), store=store, cwd=work)
    assert r.rc == 0, r
    r = imgbuild(RECIPE, "--build-arg", f"BASE={STANDIN}", "--build-arg", "PYTHONS=/usr/bin",
                 "--build-arg", "TORCH_VERSION=", "--build-arg", "BUILD_PACKAGES=",
                 "--build-arg", f"REPAIR={PLAT}", store=store, cwd=work)
    assert r.rc == 0, r
    build = r
    (work / "client.recipe").write_text(CLIENT_RECIPE)
    r = imgbuild(work / "client.recipe", "--build-arg", f"BASE={STANDIN}", store=store, cwd=work)
    assert r.rc == 0, r
    return {"store": store, "work": work, "build": build}


def test_one_repaired_wheel_in_dist(built):
    assert sorted(p.name for p in (built["work"] / "dist").iterdir()) == [WHEEL]
    log = built["build"].err + built["build"].out
    # audited (verified: RECORD checked) as it was copied, then repaired and retagged
    assert "wheel ibtorch_ext-0.1.0-cp311-cp311-linux_x86_64.whl: verified," in log, log
    assert f"eligible for manylinux_2_34_x86_64, above the requested {PLAT}" in log, log
    assert f"repaired as {WHEEL}" in log, log


def test_wheel_holds_the_operator_library_and_no_torch(built):
    with zipfile.ZipFile(built["work"] / "dist" / WHEEL) as z:
        names = z.namelist()
        wheel = z.read("ibtorch_ext-0.1.0.dist-info/WHEEL").decode()
    assert "ibtorch_ext/_C.cpython-311-x86_64-linux-gnu.so" in names
    assert "ibtorch_ext/__init__.py" in names and "ibtorch_ext/_build_info.py" in names
    # nothing grafted: libtorch and libc10 are the imported torch's
    assert not [n for n in names if ".libs/" in n or "libtorch" in n or "libc10" in n], names
    assert "Tag: cp311-cp311-manylinux_2_34_x86_64\nTag: cp311-cp311-manylinux_2_36_x86_64\n" in wheel, wheel


def test_wheel_record_verifies(built, tmp_path):
    whl = built["work"] / "dist" / WHEEL
    # by hand: every member but RECORD listed with its sha256 and size
    with zipfile.ZipFile(whl) as z:
        record = z.read("ibtorch_ext-0.1.0.dist-info/RECORD").decode().splitlines()
        rows = {p: (h, s) for p, h, s in (l.rsplit(",", 2) for l in record if l)}
        assert set(rows) == set(z.namelist())
        for name in z.namelist():
            if name.endswith("/RECORD"):
                continue
            data = z.read(name)
            digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
            assert rows[name] == (f"sha256={digest}", str(len(data))), name
    # and by imgbuild's audit (which opens and verifies the wheel first)
    # against an empty root: what this host has installed (Debian's torch,
    # after tests/bench/torchvision.sh) does not change the answer
    (tmp_path / "empty-root").mkdir()
    r = imgbuild("wheel", "audit", whl, "--json", "--root", tmp_path / "empty-root",
                 store=tmp_path / "s")
    assert r.rc == 0, r
    audit = json.loads(r.out)
    # its symbols allow manylinux_2_34; what it needs outside the policy
    # is libtorch's, unresolved there and not in the wheel: auditwheel's
    # `show` (no --exclude) holds it at linux_x86_64
    assert not audit["pure"] and audit["sym_tag"] == "manylinux_2_34_x86_64", audit
    assert audit["external_libs"] == {"libc10.so.1.13": None, "libtorch.so.1.13": None,
                                      "libtorch_cpu.so.1.13": None}, audit
    assert audit["overall_tag"] == "linux_x86_64", audit


def test_extension_links_the_imported_libtorch(built, tmp_path):
    with zipfile.ZipFile(built["work"] / "dist" / WHEEL) as z:
        z.extract("ibtorch_ext/_C.cpython-311-x86_64-linux-gnu.so", tmp_path)
    out = subprocess.run(["readelf", "-d", tmp_path / "ibtorch_ext/_C.cpython-311-x86_64-linux-gnu.so"],
                         capture_output=True, text=True, check=True).stdout
    needed = [l.split("[")[1].rstrip("]") for l in out.splitlines() if "(NEEDED)" in l]
    assert "libc10.so.1.13" in needed and any(n.startswith("libtorch") for n in needed), needed
    assert "RPATH" not in out and "RUNPATH" not in out, out  # no path to the build's torch


def run_in_client(built, *cmd):
    r = imgbuild("run", CLIENT, "--", *cmd, store=built["store"])
    assert r.rc == 0, r
    return r.out


def test_client_has_wheel_under_opt_and_torch_in_dist_packages(built):
    out = run_in_client(built, "sh", "-c", "ls /opt; python3 -m pip show ibtorch_ext | head -2; "
                        "dpkg-query -W -f '${Package} ${Version}\\n' python3-torch")
    assert WHEEL in out.split()
    # pip's METADATA name (setuptools writes it PEP 503-normalized)
    assert re.search(r"^Name: ibtorch[-_]ext\nVersion: 0\.1\.0$", out, re.M), out
    # torch from the Debian package
    assert "python3-torch 1.13.1+dfsg-4" in out.splitlines(), out


def test_client_imports_torch_and_the_extension_and_computes(built):
    res = json.loads(run_in_client(built, "python3", "-c", CHECK).strip().splitlines()[-1])
    # Debian's 1.13.1 package reports torch.__version__ 1.13.0a0
    assert res["torch"].startswith("1.13.") and res["built_against"] == res["torch"], res
    assert res["torch_file"] == "/usr/lib/python3/dist-packages/torch/__init__.py"
    assert res["ext_file"] == "/usr/local/lib/python3.11/dist-packages/ibtorch_ext/__init__.py"
    assert res["with_cuda"] is False  # Debian's torch is a CPU build
    # the schemas csrc/ops.cpp registers with TORCH_LIBRARY
    assert res["schemas"] == ["ibtorch_ext::scaled_add(Tensor a, Tensor b, float alpha) -> Tensor",
                              "ibtorch_ext::row_softmax(Tensor x) -> Tensor"], res
    assert res["fixed_add"] == [6.0, 12.0, 18.0]
    assert [v for row in res["fixed_softmax"] for v in row] == pytest.approx([0.25, 0.75, 0.5, 0.5], abs=1e-6)
    assert res["add_diff"] < 1e-5 and res["noncontig_diff"] < 1e-5, res
    assert res["softmax_diff"] < 1e-6, res
    assert res["row_sums"] == pytest.approx([1.0] * 17, abs=1e-5)
    assert res["error"] and "shapes differ" in res["error"], res


def test_pythons_matching_nothing_fails_the_build(built):
    """The default PYTHONS (/opt/python/*/bin) on a base without
    /opt/python: the step fails and says so, no empty dist."""
    r = imgbuild(RECIPE, "--build-arg", f"BASE={STANDIN}", "--build-arg", "TORCH_VERSION=",
                 "--build-arg", "BUILD_PACKAGES=", store=built["store"], cwd=built["work"])
    assert r.rc != 0, r
    assert "PYTHONS: no python in /opt/python/*/bin" in r.err, r
