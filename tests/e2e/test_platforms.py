"""Steps of another platform: an arm64 stage's RUN runs through qemu-user,
which the kernel starts for arm64 binaries (binfmt_misc, registered by
Debian's qemu-user-static: tests/lib/binfmt.sh), in every identity mode,
still under the step's seccomp filter; where nothing can run a platform's
binaries the error names what is missing.  What the steps saw is read back
from the images' files and configs."""
import hashlib
import io
import json
import os
import re
import shutil
import subprocess
import tarfile
import tempfile

import pytest

import test_buildah_compat as compat
from conftest import imgbuild, write


def oci_files(path):
    """{blob name: bytes} of an OCI layout tarball."""
    with tarfile.open(path) as t:
        return {m.name: t.extractfile(m).read() for m in t.getmembers() if m.isfile()}


def image_of(layout, manifest_digest):
    """(config, {path: (uid, gid, bytes)}) of an image in a layout's files."""
    blob = lambda d: layout["blobs/sha256/" + d.split(":", 1)[1]]  # noqa: E731
    man = json.loads(blob(manifest_digest))
    config = json.loads(blob(man["config"]["digest"]))
    files = {}
    for layer in man["layers"]:
        with tarfile.open(fileobj=io.BytesIO(blob(layer["digest"]))) as t:
            for m in t.getmembers():
                name = m.name.lstrip("./")
                files[name] = (m.uid, m.gid, t.extractfile(m).read() if m.isfile() else None)
    return config, files


ARM64_STEPS = """FROM {base}
RUN uname -m > /arch && dpkg --print-architecture >> /arch
# the seccomp filter still holds what qemu asks of the kernel for the step
RUN if unshare -U true 2>/dev/null; then echo escaped; else echo confined; fi > /userns
RUN useradd -m -u 1234 bob && chown bob:bob /arch && ls -ln /home | awk '{{print $3}}' > /home-owner
"""


def test_arm64_steps_run_through_qemu(tmp_path, multiarch):
    """build --platform linux/arm64 of the two-platform index: every RUN
    runs arm64 binaries; a chown is recorded (single-id mode: through the
    supervisor, which answers qemu's host-side calls) as in the other modes."""
    store = tmp_path / "store"
    write(tmp_path / "ctx/R", ARM64_STEPS.format(base=multiarch["multi"]))
    out = tmp_path / "img.tar"
    r = imgbuild("build", tmp_path / "ctx/R", "--platform", "linux/arm64",
                 "--output", f"type=oci,dest={out}", store=store)
    assert r.rc == 0, r
    layout = oci_files(out)
    index = json.loads(layout["index.json"])
    config, files = image_of(layout, index["manifests"][0]["digest"])
    assert (config["os"], config["architecture"]) == ("linux", "arm64")
    assert files["arch"] == (1234, 1234, b"aarch64\narm64\n")
    assert files["userns"][2] == b"confined\n"
    assert files["home/bob"][:2] == (1234, 1234)
    # an arm64 step of an amd64 build's image is the same thing, named by
    # FROM --platform instead
    write(tmp_path / "ctx2/R", f"FROM --platform=linux/arm64 {multiarch['arm64']}\n"
                               "RUN uname -m > /arch\n")
    r = imgbuild("build", tmp_path / "ctx2/R", "--output", f"type=local,dest={tmp_path}/l,src=/arch",
                 store=store)
    assert r.rc == 0, r
    assert (tmp_path / "l/arch").read_text() == "aarch64\n"


def test_no_emulation_is_named(tmp_path, base_image):
    """A platform nothing here runs: RUN fails naming it, before any step
    of that stage runs; COPY in such a stage still works."""
    store = tmp_path / "store"
    write(tmp_path / "ctx/f", "x\n")
    write(tmp_path / "ctx/R", "FROM --platform=windows/amd64 scratch\nCOPY f /f\nRUN dir\n")
    r = imgbuild("build", tmp_path / "ctx/R", store=store)
    assert r.rc == 1, r
    assert "R:3: RUN: cannot run windows/amd64 binaries on " \
           "linux/amd64: no emulation is known for them" in r.err, r


# --------------------------------------------------------------------------
# One build for two platforms: an index

TWO_STAGES = """FROM --platform=$BUILDPLATFORM {multi} AS build
ARG TARGETARCH
RUN echo "built on $(uname -m) for $TARGETARCH" > /note
FROM {multi}
ARG TARGETPLATFORM TARGETARCH TARGETVARIANT BUILDPLATFORM
COPY --from=build /note /note
RUN uname -m > /arch && echo "$TARGETPLATFORM $TARGETARCH [$TARGETVARIANT] $BUILDPLATFORM" > /args
LABEL org.example.arch=$TARGETARCH
"""
PLATFORMS = "linux/amd64,linux/arm64"
UNAME = {"amd64": "x86_64", "arm64": "aarch64"}


def layout_image(layout, index, arch):
    """(config, files) of the image `index` lists for `arch`."""
    entry = [m for m in index["manifests"] if m["platform"]["architecture"] == arch]
    assert len(entry) == 1, index
    return image_of(layout, entry[0]["digest"])


@pytest.fixture(scope="module")
def two(tmp_path_factory, multiarch, registry):
    """The recipe built for both platforms with -j 2: its OCI tarball, its
    local outputs, the reference it was pushed to and the build's log."""
    d = tmp_path_factory.mktemp("two-platforms")
    write(d / "ctx/R", TWO_STAGES.format(multi=multiarch["multi"]))
    ref = f"{registry}/platforms/two:{os.getpid()}"
    r = imgbuild("build", d / "ctx/R", "-j", "2", "--platform", PLATFORMS, "--reproducible",
                 "-t", ref, "--iidfile", d / "iid",
                 "--output", f"type=oci,dest={d}/img.tar",
                 "--output", f"type=registry,name={ref}",
                 "--output", f"type=local,dest={d}/out,src=/arch", store=d / "store")
    assert r.rc == 0, r
    return {"dir": d, "ref": ref, "log": r.err, "iid": (d / "iid").read_text().strip()}


def test_each_platform_step_runs_its_own_binaries(two):
    """Every stage is built once per platform; the BUILDPLATFORM stage runs
    amd64 binaries for both; the platform ARGs are BuildKit's."""
    d = two["dir"]
    assert (d / "out/linux_amd64/arch").read_text() == "x86_64\n"
    assert (d / "out/linux_arm64/arch").read_text() == "aarch64\n"
    assert sorted(p.name for p in (d / "out").iterdir()) == ["linux_amd64", "linux_arm64"]
    layout = oci_files(d / "img.tar")
    index = json.loads(layout["blobs/sha256/" + json.loads(layout["index.json"])
                              ["manifests"][0]["digest"].split(":")[1]])
    assert index["mediaType"] == "application/vnd.oci.image.index.v1+json"
    assert [m["platform"] for m in index["manifests"]] == \
        [{"os": "linux", "architecture": "amd64"}, {"os": "linux", "architecture": "arm64"}]
    for arch in ("amd64", "arm64"):
        config, files = layout_image(layout, index, arch)
        assert (config["os"], config["architecture"]) == ("linux", arch)
        assert config["config"]["Labels"] == {"org.example.arch": arch}
        assert files["arch"][2] == f"{UNAME[arch]}\n".encode()
        assert files["note"][2] == f"built on x86_64 for {arch}\n".encode()
        assert files["args"][2] == f"linux/{arch} {arch} [] linux/amd64\n".encode()
    # the steps' lines say which platform they are of
    assert re.search(r"^\[linux/arm64 stage-1 \d/\d\] RUN uname -m", two["log"], re.M), two["log"]
    assert re.search(r"^\[linux/amd64 build \d/\d\] RUN echo", two["log"], re.M), two["log"]


def test_index_is_pushed_tagged_and_the_image_id(two, tmp_path):
    d = two["dir"]
    layout = oci_files(d / "img.tar")
    index_digest = json.loads(layout["index.json"])["manifests"][0]["digest"]
    raw = subprocess.run(["skopeo", "inspect", "--tls-verify=false", "--raw",
                          f"docker://{two['ref']}"], capture_output=True, check=True).stdout
    assert "sha256:" + hashlib.sha256(raw).hexdigest() == index_digest
    assert raw == layout["blobs/sha256/" + index_digest.split(":")[1]]
    # skopeo picks each platform's image from it
    for arch in ("amd64", "arm64"):
        cfg = json.loads(subprocess.run(
            ["skopeo", "inspect", "--tls-verify=false", "--override-arch", arch, "--config",
             f"docker://{two['ref']}"], capture_output=True, check=True, text=True).stdout)
        assert cfg["architecture"] == arch
    assert two["iid"] == index_digest  # buildx: a multi-platform image's ID is its index
    # the tag in the store is the index; inspect and run take the host's image
    r = imgbuild("inspect", two["ref"], store=d / "store")
    assert r.rc == 0, r
    index = json.loads(raw)
    assert json.loads(r.out)["digest"] == index["manifests"][0]["digest"]


def test_same_index_again_one_after_the_other(two, multiarch, tmp_path):
    """--reproducible: a fresh store, the platforms built one after the
    other (no -j), the same index digest."""
    write(tmp_path / "ctx/R", TWO_STAGES.format(multi=multiarch["multi"]))
    r = imgbuild("build", tmp_path / "ctx/R", "--platform", PLATFORMS, "--reproducible",
                 "--iidfile", tmp_path / "iid", store=tmp_path / "store")
    assert r.rc == 0, r
    assert (tmp_path / "iid").read_text().strip() == two["iid"]


def test_one_platform_outputs_are_refused(tmp_path, multiarch):
    write(tmp_path / "ctx/R", f"FROM {multiarch['multi']}\nRUN true\n")
    for out in ("type=docker,dest=x.tar", "type=tar,dest=x.tar"):
        r = imgbuild("build", tmp_path / "ctx/R", "--platform", PLATFORMS, "--output", out,
                     store=tmp_path / "store")
        assert r.rc == 1, r
        assert "holds one platform's image or tree, and this build is for several platforms" \
            in r.err, r
        assert "RUN true" not in r.err  # refused before anything ran
    r = imgbuild("build", tmp_path / "ctx/R", "--platform", "linux/arm64,linux/arm64",
                 store=tmp_path / "store")
    assert r.rc == 1 and "linux/arm64 is given twice" in r.err, r


@pytest.mark.skipif(os.geteuid() != 0, reason="podman runs the image as root only here "
                    "(rootless podman is not what this checks)")
def test_podman_runs_the_arm64_image(two, tmp_path):
    """podman run --arch arm64 of the pushed index: the arm64 image, through
    the same qemu handler.  runc (crun refuses hybrid cgroup hierarchies);
    rlimits podman asks for by default may exceed the runner's."""
    import resource
    nofile = min(resource.getrlimit(resource.RLIMIT_NOFILE)[1], 1024)
    nproc = min(resource.getrlimit(resource.RLIMIT_NPROC)[1], 1024)
    # (podman refuses a runroot path over 50 characters)
    runroot = tempfile.mkdtemp(prefix="pm.", dir="/tmp")
    p = subprocess.run(["podman", "--root", tmp_path / "root", "--runroot", runroot,
                        "--storage-driver", "vfs", "--runtime", "runc", "run", "--rm",
                        "--tls-verify=false", "--arch", "arm64",
                        "--ulimit", f"nofile={nofile}:{nofile}", "--ulimit", f"nproc={nproc}:{nproc}",
                        two["ref"], "sh", "-c", "uname -m; cat /arch"],
                       capture_output=True, text=True, timeout=300)
    subprocess.run(["podman", "--root", tmp_path / "root", "--runroot", runroot,
                    "--storage-driver", "vfs", "rmi", "--all", "--force"], capture_output=True)
    shutil.rmtree(runroot, ignore_errors=True)
    assert p.returncode == 0, p.stderr
    assert p.stdout == "aarch64\naarch64\n"


@pytest.mark.skipif(compat.SKIP_REASON is not None, reason=compat.SKIP_REASON or "")
def test_arm64_image_matches_buildah(tmp_path, multiarch, registry):
    """buildah bud --platform linux/arm64 of the same recipe: the same
    config fields and file tree (tests/e2e/test_buildah_compat.py's
    comparison, with its normalizations)."""
    write(tmp_path / "ctx/R", TWO_STAGES.format(multi=multiarch["multi"]))
    r = imgbuild("build", tmp_path / "ctx/R", "--platform", "linux/arm64", "-t", "arm:1",
                 store=tmp_path / "store")
    assert r.rc == 0, r
    ins = json.loads(imgbuild("inspect", "arm:1", store=tmp_path / "store").out)
    ib = compat.Image(ins["config"],
                      [(tmp_path / "store/blobs/sha256" / l["digest"].split(":")[1], d)
                       for l, d in zip(ins["manifest"]["layers"], ins["config"]["rootfs"]["diff_ids"])])
    bah = compat.Buildah(tmp_path / "buildah-root")
    try:
        bah("bud", "--format", "docker", "--isolation", "chroot", "--tls-verify=false",
            "--platform", "linux/arm64", "-t", "arm", "-f", tmp_path / "ctx/R", tmp_path / "ctx")
        cfg = json.loads(bah("inspect", "--type", "image", "arm"))["Docker"]
        lay = tmp_path / "bah-oci"
        bah("push", "--disable-compression", "arm", f"oci:{lay}:arm")
        idx = json.loads((lay / "index.json").read_text())
        man = json.loads(compat.blob(lay, idx["manifests"][0]["digest"]).read_text())
        bh = compat.Image(cfg, [(compat.blob(lay, l["digest"]), d)
                                for l, d in zip(man["layers"], cfg["rootfs"]["diff_ids"])])
        a, a_extra = compat.norm_config(ib.config, buildah=False)
        b, b_extra = compat.norm_config(bh.config, buildah=True)
        assert a == b and a_extra == b_extra, (a, b, a_extra, b_extra)
        assert (ib.config["os"], ib.config["architecture"]) == \
            (bh.config["os"], bh.config["architecture"]) == ("linux", "arm64")
        ta, tb = compat.image_tree(ib), compat.image_tree(bh)
        base = compat.image_tree(compat.Image(None, ib.layers[:1]))
        compat.normalize_trees(ta, tb, base, set(), compat.single_id_mode())
        assert ta["/arch"]["sha256"] == hashlib.sha256(b"aarch64\n").hexdigest()
        # buildah 1.28 builds a FROM --platform=$BUILDPLATFORM stage for
        # the --platform value, so its build stage ran arm64 binaries too
        # (buildah pull request 3899, "BUILDPLATFORM always native to host",
        # not merged); BuildKit, and imgbuild, run it on the host's.
        sha = lambda t: hashlib.sha256(t.encode()).hexdigest()  # noqa: E731
        assert ta["/note"]["sha256"] == sha("built on x86_64 for arm64\n")
        assert tb["/note"]["sha256"] == sha("built on aarch64 for arm64\n")
        for t in (ta, tb):
            del t["/note"]
        diff = compat.tree_diff(ta, tb)
        assert not diff, f"{len(diff)} differences:\n" + "\n".join(diff[:60])
    finally:
        bah.close()
