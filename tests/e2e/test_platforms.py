"""Steps of another platform: an arm64 stage's RUN runs through qemu-user,
which the kernel starts for arm64 binaries (binfmt_misc, registered by
Debian's qemu-user-static: tests/lib/binfmt.sh), in every identity mode,
still under the step's seccomp filter; where nothing can run a platform's
binaries the error names what is missing.  What the steps saw is read back
from the images' files and configs."""
import json
import tarfile

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
    import io
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
