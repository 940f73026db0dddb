"""OUTPUT type=docker (and --output type=docker): a `docker save` tarball
that skopeo's docker-archive transport reads (the same reader podman load
uses), layers uncompressed with their diff_ids, RepoTags in Docker's short
form, and the same bytes for the same image."""
import hashlib
import json
import shutil
import subprocess
import tarfile

from conftest import imgbuild, sh, write


def test_docker_archive(tmp_path):
    store = tmp_path / "store"
    c = tmp_path / "ctx"
    c.mkdir()
    shutil.copy("/bin/busybox", c / "busybox")
    write(c / "hello.txt", "hello from the archive\n")
    write(c / "r.recipe", """FROM scratch
COPY busybox /bin/busybox
COPY hello.txt /srv/hello.txt
ENV GREETING=hi
CMD ["/bin/busybox", "cat", "/srv/hello.txt"]
OUTPUT type=docker,dest=out/app.tar,name=app:1
OUTPUT type=docker,dest=out/untagged.tar
""")
    r = imgbuild("build", c / "r.recipe", "--output", "type=docker,dest=out/reg.tar,name=127.0.0.1:5000/team/app:2",
                 store=store, cwd=c)
    assert r.rc == 0, r
    tar = c / "out/app.tar"
    with tarfile.open(tar) as t:
        names = t.getnames()
        manifest = json.load(t.extractfile("manifest.json"))
        repos = json.load(t.extractfile("repositories"))
        cfg = json.load(t.extractfile(manifest[0]["Config"]))
        # every layer is an uncompressed tar whose sha256 is its diff_id
        for layer, diff in zip(manifest[0]["Layers"], cfg["rootfs"]["diff_ids"]):
            data = t.extractfile(layer).read()
            assert hashlib.sha256(data).hexdigest() == diff.split(":")[1]
            assert layer == diff.split(":")[1] + "/layer.tar"
            assert data[257:262] == b"ustar"
    assert manifest[0]["RepoTags"] == ["app:1"]
    assert list(repos) == ["app"] and list(repos["app"]) == ["1"]
    assert cfg["config"]["Env"][-1] == "GREETING=hi"
    with tarfile.open(c / "out/untagged.tar") as t:
        assert json.load(t.extractfile("manifest.json"))[0]["RepoTags"] == []
    with tarfile.open(c / "out/reg.tar") as t:
        assert json.load(t.extractfile("manifest.json"))[0]["RepoTags"] == ["127.0.0.1:5000/team/app:2"]

    # skopeo reads it as Docker's format, and the image is the one stored
    info = json.loads(sh("skopeo", "inspect", f"docker-archive:{tar}").stdout)
    assert info["Env"][-1] == "GREETING=hi"
    sh("skopeo", "copy", "-q", f"docker-archive:{tar}", f"oci:{tmp_path / 'oci'}:x")
    sh("umoci", "unpack", "--rootless", "--image", f"{tmp_path / 'oci'}:x", str(tmp_path / "bundle"))
    assert (tmp_path / "bundle/rootfs/srv/hello.txt").read_text() == "hello from the archive\n"

    # the same image gives the same bytes
    first = tar.read_bytes()
    r = imgbuild("build", c / "r.recipe", store=store, cwd=c)
    assert r.rc == 0, r
    assert tar.read_bytes() == first


def test_annotations_in_the_manifest(tmp_path):
    store = tmp_path / "store"
    c = tmp_path / "ctx"
    c.mkdir()
    shutil.copy("/bin/busybox", c / "busybox")
    write(c / "r.recipe", "FROM scratch\nCOPY busybox /bin/busybox\nOUTPUT type=oci,dest=out/oci/\n")
    r = imgbuild("build", c / "r.recipe", "-t", "ann:1",
                 "--annotation", "org.opencontainers.image.source=https://example.org/app",
                 "--annotation", "manifest:org.example.team=ml", store=store, cwd=c)
    assert r.rc == 0, r
    m = json.loads(imgbuild("inspect", "ann:1", store=store).out)["manifest"]
    assert m["annotations"] == {"org.opencontainers.image.source": "https://example.org/app",
                                "org.example.team": "ml"}
    raw = json.loads(sh("skopeo", "inspect", "--raw", f"oci:{c / 'out/oci'}").stdout)
    assert raw["annotations"]["org.example.team"] == "ml"
    r = imgbuild("build", c / "r.recipe", "--annotation", "novalue", store=store, cwd=c)
    assert r.rc == 1 and "--annotation novalue: expected KEY=VALUE" in r.err
