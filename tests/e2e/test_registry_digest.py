"""A pulled image's digest is the registry's: a Docker schema 2 manifest is
tagged in the store as its OCI rendering (what skopeo/umoci read in an
image layout), but pull, images, inspect and push show and send the bytes
the registry served; NAME@<served digest> and NAME@<index digest> resolve
from the store without a request; images imgbuild builds are unchanged."""
import hashlib
import json
import re
import urllib.request
from pathlib import Path

import pytest

from conftest import imgbuild, sh, write
from regutil import Registry, copy_base

DOCKER_MANIFEST = "application/vnd.docker.distribution.manifest.v2+json"
OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
ACCEPT = f"{DOCKER_MANIFEST}, {OCI_MANIFEST}"
REGISTRY_ANNOTATIONS = ("org.imgbuild.registry.digest", "org.imgbuild.registry.mediaType",
                        "org.imgbuild.registry.index")


def served(host, repo, ref):
    """(bytes, Content-Type) of the manifest the registry serves for repo:ref."""
    req = urllib.request.Request(f"http://{host}/v2/{repo}/manifests/{ref}", headers={"Accept": ACCEPT})
    with urllib.request.urlopen(req, timeout=60) as r:
        return r.read(), r.headers["Content-Type"]


def sha256(data):
    return "sha256:" + hashlib.sha256(data).hexdigest()


def inspect(store, ref):
    r = imgbuild("inspect", ref, store=store)
    assert r.rc == 0, r
    return json.loads(r.out)


def index_entry(store, name):
    index = json.loads((Path(store) / "index.json").read_text())
    found = [m for m in index["manifests"]
             if m.get("annotations", {}).get("org.opencontainers.image.ref.name") == name]
    assert len(found) == 1, index
    return found[0]


@pytest.fixture(scope="module")
def v2s2(tmp_path_factory, base_image):
    """A registry of our own holding the base image as a Docker schema 2
    manifest (skopeo --format v2s2), and the digest of the bytes it serves."""
    reg = Registry(tmp_path_factory.mktemp("v2s2-registry"))
    host = f"127.0.0.1:{reg.port}"
    copy_base(f"{host}/debian:bookworm", "--format", "v2s2", "--dest-tls-verify=false")
    data, ctype = served(host, "debian", "bookworm")
    assert ctype == DOCKER_MANIFEST and json.loads(data)["mediaType"] == DOCKER_MANIFEST
    yield reg, host, sha256(data), data
    reg.stop()


def test_pull_images_inspect_show_the_registry_digest(v2s2, tmp_path):
    reg, host, digest, data = v2s2
    store = tmp_path / "s"
    ref = f"{host}/debian:bookworm"
    r = imgbuild("--progress", "plain", "pull", ref, store=store)
    assert r.rc == 0, r
    assert r.out.strip() == digest
    assert r.err.splitlines()[-1] == f"Digest: {digest}"
    remote = json.loads(sh("skopeo", "inspect", "--tls-verify=false", f"docker://{ref}").stdout)
    assert remote["Digest"] == digest

    info = inspect(store, ref)
    assert info["digest"] == digest
    assert info["manifest"] == json.loads(data)  # the served manifest, Docker media types
    assert "index_digest" not in info
    # the layout's tag is the OCI rendering of the same config and layers ...
    entry = index_entry(store, ref)
    assert entry["mediaType"] == OCI_MANIFEST and entry["digest"] == info["stored_digest"] != digest
    assert entry["annotations"]["org.imgbuild.registry.digest"] == digest
    assert entry["annotations"]["org.imgbuild.registry.mediaType"] == DOCKER_MANIFEST
    oci = json.loads((store / "blobs/sha256" / entry["digest"][7:]).read_bytes())
    assert oci["config"]["digest"] == info["manifest"]["config"]["digest"]
    assert [l["digest"] for l in oci["layers"]] == [l["digest"] for l in info["manifest"]["layers"]]
    # ... which peers still read as oci:STORE:NAME
    peer = json.loads(sh("skopeo", "inspect", f"oci:{store}:{ref}").stdout)
    assert peer["Digest"] == entry["digest"]
    # the served bytes are a blob, byte for byte
    assert (store / "blobs/sha256" / digest[7:]).read_bytes() == data

    line = [l for l in imgbuild("images", store=store).out.splitlines() if l.startswith(ref + " ")]
    assert len(line) == 1 and line[0].split()[1] == digest[:19], line
    # the served digest finds the image, bare and with its name
    for name in (digest, f"{host}/debian@{digest}", f"{host}/debian:other@{digest}"):
        assert inspect(store, name)["digest"] == digest, name
    r = imgbuild("inspect", f"{host}/elsewhere@{digest}", store=store)
    assert r.rc == 1 and f"image {host}/elsewhere@{digest} not found" in r.err, r


def test_push_serves_the_same_digest_after_prune(v2s2, tmp_path):
    reg, host, digest, data = v2s2
    store = tmp_path / "s"
    ref = f"{host}/debian:bookworm"
    assert imgbuild("pull", ref, store=store).rc == 0
    r = imgbuild("prune", store=store)  # keeps the served bytes: a tag names them
    assert r.rc == 0, r
    assert (store / "blobs/sha256" / digest[7:]).read_bytes() == data
    other = Registry(tmp_path / "other")
    try:
        dst = f"127.0.0.1:{other.port}/copy/debian:1"
        r = imgbuild("push", ref, dst, f"{host}/pushed:1", store=store)
        assert r.rc == 0, r
        for h, repo in ((f"127.0.0.1:{other.port}", "copy/debian"), (host, "pushed")):
            got, ctype = served(h, repo, "1")
            assert sha256(got) == digest and got == data and ctype == DOCKER_MANIFEST
        # by digest too: the registry's digest is the one it accepts
        r = imgbuild("push", ref, f"127.0.0.1:{other.port}/bydigest@{digest}", store=store)
        assert r.rc == 0, r
        assert sha256(served(f"127.0.0.1:{other.port}", "bydigest", digest)[0]) == digest
    finally:
        other.stop()


def test_from_the_registry_digest_with_the_registry_down(base_image, tmp_path):
    """FROM NAME@<served digest> after a pull of the tag: no request (the
    registry is stopped), and the same cache keys as FROM NAME:TAG."""
    reg = Registry(tmp_path / "reg")
    host = f"127.0.0.1:{reg.port}"
    try:
        copy_base(f"{host}/debian:bookworm", "--format", "v2s2", "--dest-tls-verify=false")
        digest = sha256(served(host, "debian", "bookworm")[0])
        store = tmp_path / "s"
        ctx = tmp_path / "ctx"
        write(ctx / "tag.recipe", f"FROM {host}/debian:bookworm\nRUN cat /etc/debian_version > /v\n")
        r = imgbuild("build", ctx / "tag.recipe", "-t", "bytag:1", store=store)
        assert r.rc == 0, r
    finally:
        reg.stop()
    write(ctx / "pin.recipe", f"FROM {host}/debian@{digest}\nRUN cat /etc/debian_version > /v\n")
    r = imgbuild("build", ctx / "pin.recipe", "-t", "bydigest:1", store=store)
    assert r.rc == 0, r
    assert re.search(r"\] RUN .* CACHED$", r.err, re.M), r.err
    assert inspect(store, "bydigest:1")["digest"] == inspect(store, "bytag:1")["digest"]
    # a step that runs: the tree is made from the store
    write(ctx / "run.recipe", f"FROM {host}/debian@{digest}\nRUN cp /etc/debian_version /w\n")
    r = imgbuild("build", ctx / "run.recipe", "-t", "ran:1", store=store)
    assert r.rc == 0, r
    r = imgbuild("run", "ran:1", "--", "cat", "/w", store=store)
    assert r.rc == 0 and r.out.startswith("12"), r
    # another repository's name with that digest is not this image: a pull, refused
    write(ctx / "other.recipe", f"FROM {host}/other@{digest}\nRUN true\n")
    r = imgbuild("build", ctx / "other.recipe", store=store)
    assert r.rc != 0 and host in r.err, r


def test_index_digest_resolves_from_the_store(formats, faultproxy, tmp_path):
    """An image pulled from an index shows its platform manifest's digest
    (what push sends); NAME@<index digest> finds it without a request."""
    store = tmp_path / "s"
    p = faultproxy([])
    ref = f"{p.host}/formats/multi:1"
    r = imgbuild("pull", "--platform", "linux/arm64", ref, store=store)
    assert r.rc == 0, r
    platform_digest = formats["multi_platforms"]["linux/arm64/v8"]
    assert r.out.strip() == platform_digest
    p.stop()
    info = inspect(store, f"{p.host}/formats/multi@{formats['multi_digest']}")
    assert info["digest"] == info["stored_digest"] == platform_digest
    assert info["index_digest"] == formats["multi_digest"]
    assert info["config"]["architecture"] == "arm64"
    assert index_entry(store, ref)["annotations"]["org.imgbuild.registry.index"] == formats["multi_digest"]


def test_a_store_written_before_keeps_working(v2s2, tmp_path):
    """A tag without the annotations (a store that an earlier imgbuild
    wrote) shows the digest it points at; a pull again records the
    registry's."""
    reg, host, digest, data = v2s2
    store = tmp_path / "s"
    ref = f"{host}/debian:bookworm"
    assert imgbuild("pull", ref, store=store).rc == 0
    index = json.loads((store / "index.json").read_text())
    for m in index["manifests"]:
        for k in REGISTRY_ANNOTATIONS:
            m["annotations"].pop(k, None)
    (store / "index.json").write_text(json.dumps(index))
    stored = index_entry(store, ref)["digest"]
    info = inspect(store, ref)
    assert info["digest"] == info["stored_digest"] == stored
    assert info["manifest"]["mediaType"] == OCI_MANIFEST
    assert imgbuild("pull", ref, store=store).out.strip() == digest
    info = inspect(store, ref)
    assert info["digest"] == digest and info["stored_digest"] == stored


def test_built_images_are_unchanged(v2s2, tmp_path):
    """An image imgbuild builds is tagged as itself: no registry
    annotations, inspect's digest is the tagged manifest's, and a push
    serves that digest."""
    reg, host, digest, data = v2s2
    store = tmp_path / "s"
    ctx = tmp_path / "ctx"
    write(ctx / "r.recipe", f"FROM {host}/debian:bookworm\nCOPY r.recipe /\n")
    r = imgbuild("build", "--reproducible", ctx / "r.recipe", "-t", "mine:1", store=store)
    assert r.rc == 0, r
    entry = index_entry(store, "docker.io/library/mine:1")
    assert not set(entry["annotations"]) & set(REGISTRY_ANNOTATIONS), entry
    raw = (store / "blobs/sha256" / entry["digest"][7:]).read_bytes()
    assert sha256(raw) == entry["digest"]
    info = inspect(store, "mine:1")
    assert info["digest"] == info["stored_digest"] == entry["digest"]
    assert info["manifest"] == json.loads(raw) and info["manifest"]["mediaType"] == OCI_MANIFEST
    r = imgbuild("push", "mine:1", f"{host}/mine:1", store=store)
    assert r.rc == 0, r
    got, ctype = served(host, "mine", "1")
    assert got == raw and ctype == OCI_MANIFEST
