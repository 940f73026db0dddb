"""Image management without a build (issue 21, item 10): tag, rmi, save,
load, and skopeo's transports in pull and push (oci:DIR, oci-archive:FILE,
docker-archive:FILE, docker://REF).  Archives are checked by skopeo (an
independent reader) and archives skopeo writes are loaded; hostile
archives are refused without touching anything outside the store."""
import io
import json
import os
import subprocess
import tarfile

import pytest

from conftest import IMGBUILD, imgbuild, sh, write


@pytest.fixture(scope="module")
def built(registry, base_image, tmp_path_factory):
    """A store with a small image of our own: (store, name, manifest digest,
    config digest)."""
    d = tmp_path_factory.mktemp("saveload")
    store = d / "store"
    recipe = write(d / "ctx/r.recipe", f"""
FROM {base_image}
RUN echo saved-and-loaded > /marker && ln /marker /marker.hard
ENV WHERE=archive
""")
    r = imgbuild("build", recipe, "-t", "sl/app:1", store=store)
    assert r.rc == 0, r
    info = inspect(store, "sl/app:1")
    return store, "docker.io/sl/app:1", info["digest"], info["manifest"]["config"]["digest"]


def inspect(store, name):
    r = imgbuild("inspect", name, store=store)
    assert r.rc == 0, r
    return json.loads(r.out)


def names(store):
    r = imgbuild("images", "--noheading", store=store)
    assert r.rc == 0, r
    return [l.split()[0] for l in r.out.splitlines()]


def skopeo_inspect(src):
    return json.loads(sh("skopeo", "inspect", src).stdout)


def test_tag_and_rmi(built, tmp_path):
    store, name, digest, _ = built
    r = imgbuild("tag", name, "sl/other:2", "localhost:5000/team/app:3", store=store)
    assert r.rc == 0, r
    assert {"docker.io/sl/other:2", "localhost:5000/team/app:3"} <= set(names(store))
    assert inspect(store, "sl/other:2")["digest"] == digest
    # a bad target is a usage error, said before anything is tagged
    r = imgbuild("tag", name, "sl/ok:1", "Bad:1", store=store)
    assert r.rc == 2 and "tag: invalid reference \"Bad:1\"" in r.err, r
    assert "docker.io/sl/ok:1" not in names(store)
    r = imgbuild("tag", "sl/missing:1", "sl/x:1", store=store)
    assert r.rc == 1 and "image sl/missing:1 not found" in r.err, r
    # rmi: each name found is removed; one missing is reported, exit 1
    r = imgbuild("rmi", "sl/other:2", "sl/nope:1", "localhost:5000/team/app:3", store=store)
    assert r.rc == 1, r
    assert r.out.splitlines() == ["Untagged: docker.io/sl/other:2",
                                  "Untagged: localhost:5000/team/app:3"], r
    assert "rmi: image sl/nope:1 not found" in r.err and "1 of 3 images not removed" in r.err
    left = names(store)
    assert "docker.io/sl/other:2" not in left and name in left
    # the blobs stay until prune: the manifest is still there by digest
    assert inspect(store, digest)["digest"] == digest


def test_tag_of_a_pulled_image_keeps_the_registry_digest(base_image, tmp_path):
    store = tmp_path / "s"
    r = imgbuild("pull", base_image, store=store)
    assert r.rc == 0, r
    served = r.out.strip().splitlines()[-1]
    r = imgbuild("tag", base_image, "mine/base:1", store=store)
    assert r.rc == 0, r
    rows = {l.split()[0]: l.split()[1] for l in imgbuild("images", "-n", store=store).out.splitlines()}
    assert served.startswith(rows["docker.io/mine/base:1"]) and rows[base_image] == rows["docker.io/mine/base:1"], rows
    assert inspect(store, "mine/base:1")["digest"] == served


def test_save_docker_archive_loads_back_and_in_skopeo(built, tmp_path):
    store, name, digest, config = built
    out = tmp_path / "app.tar"
    r = imgbuild("save", "-o", out, "sl/app:1", store=store)
    assert r.rc == 0, r
    with tarfile.open(out) as t:
        manifest = json.load(t.extractfile("manifest.json"))
    assert manifest[0]["RepoTags"] == ["sl/app:1"]
    sk = json.loads(sh("skopeo", "inspect", "--config", f"docker-archive:{out}").stdout)
    assert sk["config"]["Env"][-1] == "WHERE=archive"
    # load into a fresh store: same config (the image ID), the files inside
    fresh = tmp_path / "fresh"
    r = imgbuild("load", "-i", out, store=fresh)
    assert r.rc == 0, r
    assert r.out.strip() == f"Loaded image: {name}"
    loaded = inspect(fresh, name)
    assert loaded["manifest"]["config"]["digest"] == config
    assert loaded["config"]["rootfs"]["diff_ids"] == inspect(store, name)["config"]["rootfs"]["diff_ids"]
    run = imgbuild("run", name, "--", "sh", "-c", "cat /marker; stat -c %h /marker", store=fresh)
    assert run.rc == 0 and run.out.split() == ["saved-and-loaded", "2"], run
    # from stdin, and save to stdout
    r = subprocess.run([str(IMGBUILD), "--store",
                        str(tmp_path / "s2"), "load"], stdin=open(out, "rb"),
                       capture_output=True, text=True)
    assert r.returncode == 0 and r.stdout.strip() == f"Loaded image: {name}", r.stderr
    with open(tmp_path / "stdout.tar", "wb") as f:
        p = subprocess.run([str(IMGBUILD), "--store", str(store),
                            "save", "sl/app:1"], stdout=f, stderr=subprocess.PIPE)
    assert p.returncode == 0, p.stderr
    assert (tmp_path / "stdout.tar").read_bytes() == out.read_bytes()


def test_push_and_pull_with_transports(built, tmp_path):
    store, name, digest, config = built
    lay, arch = tmp_path / "layout", tmp_path / "d.tar"
    r = imgbuild("push", "sl/app:1", f"oci:{lay}:app:7", f"docker-archive:{arch}", store=store)
    assert r.rc == 0, r
    # the layout holds our manifest unchanged; skopeo finds it by its name
    assert skopeo_inspect(f"oci:{lay}:app:7")["Digest"] == digest
    assert skopeo_inspect(f"docker-archive:{arch}")["Layers"]
    # pull back, naming it
    s2 = tmp_path / "s2"
    r = imgbuild("pull", f"oci:{lay}:sl/back:2", store=s2)
    assert r.rc == 0 and r.out.strip() == "Loaded image: docker.io/sl/back:2", r
    assert inspect(s2, "sl/back:2")["digest"] == digest
    r = imgbuild("pull", f"docker-archive:{arch}", store=s2)
    assert r.rc == 0, r
    assert inspect(s2, name)["manifest"]["config"]["digest"] == config
    # a name that is no reference: refused before anything is read
    r = imgbuild("pull", f"oci:{lay}:Bad Name", store=s2)
    assert r.rc == 1 and "name Bad Name: not an image reference" in r.err, r
    # docker://REF is a registry reference
    r = imgbuild("pull", "docker://127.0.0.1:1/nothing:1", store=s2)
    assert r.rc == 1 and "127.0.0.1:1" in r.err, r


def test_load_archives_skopeo_wrote(base_image, tmp_path):
    oa, da = tmp_path / "o.tar", tmp_path / "d.tar"
    sh("skopeo", "copy", "-q", "--src-tls-verify=false", f"docker://{base_image}",
       f"oci-archive:{oa}:sk/deb:1")
    sh("skopeo", "copy", "-q", "--src-tls-verify=false", f"docker://{base_image}",
       f"docker-archive:{da}:sk/deb:2")
    want = skopeo_inspect(f"oci-archive:{oa}:sk/deb:1")["Digest"]
    store = tmp_path / "s"
    r = imgbuild("load", oa, store=store)
    assert r.rc == 0 and r.out.strip() == "Loaded image: docker.io/sk/deb:1", r
    assert inspect(store, "sk/deb:1")["digest"] == want
    r = imgbuild("load", "-i", da, store=store)
    assert r.rc == 0 and r.out.strip() == "Loaded image: docker.io/sk/deb:2", r
    run = imgbuild("run", "sk/deb:2", "--", "cat", "/etc/debian_version", store=store)
    assert run.rc == 0 and run.out.startswith("12."), run


def tar_with(path, members):
    """A tar of (name, bytes | ("symlink", target) | ("hardlink", target))."""
    with tarfile.open(path, "w") as t:
        for name, data in members:
            ti = tarfile.TarInfo(name)
            if isinstance(data, tuple):
                ti.type = tarfile.SYMTYPE if data[0] == "symlink" else tarfile.LNKTYPE
                ti.linkname = data[1]
                t.addfile(ti)
            else:
                ti.size = len(data)
                t.addfile(ti, io.BytesIO(data))
    return path


def test_hostile_archives_are_refused(built, tmp_path):
    store, name, digest, _ = built
    before = sorted(names(store))
    outside = tmp_path / "outside"
    cases = {
        "dotdot": ([("../outside", b"x"), ("manifest.json", b"[]")], "member ../outside"),
        "absolute": ([(f"{outside}", b"x")], "an absolute path"),
        "no-format": ([("hello.txt", b"hi")], "neither an OCI image layout"),
        # a layer path out of the archive: resolved inside it, so not found
        "layer-escape": ([("manifest.json", json.dumps([{
            "Config": "c.json", "RepoTags": ["evil:1"],
            "Layers": ["../../../../etc/passwd"]}]).encode()),
            ("c.json", json.dumps({"rootfs": {"type": "layers", "diff_ids": [
                "sha256:" + "0" * 64]}}).encode())], "etc/passwd"),
        # a link to a host file: resolved inside the archive as well
        "symlink-escape": ([("manifest.json", json.dumps([{
            "Config": "c.json", "RepoTags": ["evil:2"], "Layers": ["l.tar"]}]).encode()),
            ("c.json", json.dumps({"rootfs": {"type": "layers", "diff_ids": [
                "sha256:" + "0" * 64]}}).encode()),
            ("l.tar", ("symlink", "/etc/passwd"))], "l.tar"),
        # a layer whose bytes are not the config's diff_id
        "corrupt-layer": ([("manifest.json", json.dumps([{
            "Config": "c.json", "RepoTags": ["evil:3"], "Layers": ["l.tar"]}]).encode()),
            ("c.json", json.dumps({"rootfs": {"type": "layers", "diff_ids": [
                "sha256:" + "0" * 64]}}).encode()),
            ("l.tar", b"\0" * 1024)], "is not the config's diff_id"),
        # an OCI blob that is not what its name says
        "corrupt-blob": ([("oci-layout", b'{"imageLayoutVersion":"1.0.0"}'),
                          ("index.json", json.dumps({"schemaVersion": 2, "manifests": [{
                              "mediaType": "application/vnd.oci.image.manifest.v1+json",
                              "digest": "sha256:" + "a" * 64, "size": 3}]}).encode()),
                          ("blobs/sha256/" + "a" * 64, b"{}\n")], "digest mismatch"),
    }
    for case, (members, message) in cases.items():
        arch = tar_with(tmp_path / f"{case}.tar", members)
        r = imgbuild("load", "-i", arch, store=store)
        assert r.rc == 1, (case, r)
        assert f"load {arch}" in r.err and message in r.err, (case, r.err)
        assert not outside.exists(), case
        assert sorted(names(store)) == before, case
    # nothing of the archives is left in the store's tmp/
    assert not [p for p in (store / "tmp").iterdir() if p.name.startswith("load-")]
    r = imgbuild("load", "-i", tmp_path / "nope.tar", store=store)
    assert r.rc == 1 and "nope.tar" in r.err, r
