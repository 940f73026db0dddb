"""Pull through the parallel download engine: a cold `imgbuild unpack`
unpacks layers while they download, multi-layer images keep OCI layer
order (whiteouts), and interrupted downloads resume from the partial file
in the store."""
import hashlib
import io
import json
import tarfile
import urllib.request
from pathlib import Path

import pytest

from conftest import imgbuild, sh


def blobs_ok(store):
    """Every stored blob hashes to its name; no partial download left."""
    blobs = list((Path(store) / "blobs" / "sha256").iterdir())
    assert blobs
    for b in blobs:
        assert hashlib.sha256(b.read_bytes()).hexdigest() == b.name, b
    return {b.name for b in blobs}


def layer_digests(registry, ref):
    info = json.loads(sh("skopeo", "inspect", "--tls-verify=false", f"docker://{registry}/{ref}").stdout)
    return info["Layers"]


def fetch_blob(registry, repo, digest):
    with urllib.request.urlopen(f"http://{registry}/v2/{repo}/blobs/{digest}") as r:
        return r.read()


def test_cold_unpack_streams_into_rootfs(registry, base_image, tmp_path):
    store = tmp_path / "store"
    dest = tmp_path / "rootfs"
    r = imgbuild("unpack", f"{registry}/debian:bookworm", dest, store=store)
    assert r.rc == 0, r
    assert (dest / "etc" / "debian_version").read_text().startswith("12")
    names = blobs_ok(store)
    for d in layer_digests(registry, "debian:bookworm"):
        assert d.split(":")[1] in names
    assert not list((store / "tmp").glob("*.partial"))
    assert f"{registry}/debian:bookworm" in imgbuild("images", store=store).out
    # a second unpack comes from the store, same tree
    r = imgbuild("unpack", f"{registry}/debian:bookworm", tmp_path / "again", store=store)
    assert r.rc == 0, r
    assert sorted(p.name for p in (tmp_path / "again" / "etc").iterdir()) == \
        sorted(p.name for p in (dest / "etc").iterdir())


def tar_layer(entries):
    """A gzip'ed tar of (name, content-or-None-for-dir) pairs."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as t:
        for name, data in entries:
            ti = tarfile.TarInfo(name)
            ti.mtime = 1700000000
            if data is None:
                ti.type = tarfile.DIRTYPE
                ti.mode = 0o755
                t.addfile(ti)
            else:
                ti.size = len(data)
                ti.mode = 0o644
                t.addfile(ti, io.BytesIO(data))
    raw = buf.getvalue()
    return raw, hashlib.sha256(gzip_decompress(raw)).hexdigest()


def gzip_decompress(b):
    import gzip
    return gzip.decompress(b)


def oci_layout(path, layers):
    """An OCI image layout with these (blob, diff_id) layers and a minimal config."""
    blobs = path / "blobs" / "sha256"
    blobs.mkdir(parents=True)

    def put(data):
        h = hashlib.sha256(data).hexdigest()
        (blobs / h).write_bytes(data)
        return f"sha256:{h}", len(data)

    descs = []
    for blob, _ in layers:
        d, n = put(blob)
        descs.append({"mediaType": "application/vnd.oci.image.layer.v1.tar+gzip", "digest": d, "size": n})
    config = json.dumps({"architecture": "amd64", "os": "linux", "config": {},
                         "rootfs": {"type": "layers", "diff_ids": [f"sha256:{i}" for _, i in layers]}}).encode()
    cd, cn = put(config)
    manifest = json.dumps({"schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json",
                           "config": {"mediaType": "application/vnd.oci.image.config.v1+json", "digest": cd, "size": cn},
                           "layers": descs}).encode()
    md, mn = put(manifest)
    (path / "oci-layout").write_text('{"imageLayoutVersion":"1.0.0"}')
    (path / "index.json").write_text(json.dumps({"schemaVersion": 2, "manifests": [
        {"mediaType": "application/vnd.oci.image.manifest.v1+json", "digest": md, "size": mn,
         "annotations": {"org.opencontainers.image.ref.name": "latest"}}]}))


def test_multi_layer_order_and_whiteouts(registry, tmp_path):
    big = bytes(range(256)) * 8192  # 2 MiB, so that layers overlap in time
    l1 = tar_layer([("a/", None), ("a/one", b"1"), ("b/", None), ("b/x", b"x"), ("big1", big)])
    l2 = tar_layer([("b/", None), ("b/.wh.x", b""), ("a/", None), ("a/two", b"2"), ("big2", big)])
    l3 = tar_layer([("a/", None), ("a/.wh..wh..opq", b""), ("a/three", b"3"), ("big1", b"small")])
    oci_layout(tmp_path / "layout", [l1, l2, l3])
    sh("skopeo", "copy", "--dest-tls-verify=false", f"oci:{tmp_path / 'layout'}:latest",
       f"docker://{registry}/layers:three")
    store = tmp_path / "store"
    dest = tmp_path / "rootfs"
    r = imgbuild("unpack", f"{registry}/layers:three", dest, store=store)
    assert r.rc == 0, r
    assert sorted(p.name for p in (dest / "a").iterdir()) == ["three"]
    assert list((dest / "b").iterdir()) == []
    assert (dest / "big1").read_bytes() == b"small"
    assert (dest / "big2").read_bytes() == big
    blobs_ok(store)


def test_interrupted_download_resumes_from_partial(registry, base_image, tmp_path):
    layer = layer_digests(registry, "debian:bookworm")[0]
    data = fetch_blob(registry, "debian", layer)
    store = tmp_path / "store"
    # creates the store (images does not: a listing of a missing store is empty)
    assert imgbuild("prune", store=store).rc == 0
    partial = store / "tmp" / f"blob-{layer.split(':')[1]}.partial"
    half = len(data) // 2
    partial.write_bytes(data[:half])
    r = imgbuild("-v", "pull", f"{registry}/debian:bookworm", store=store)
    assert r.rc == 0, r
    assert f"resuming at byte {half}" in r.err
    blobs_ok(store)
    assert not partial.exists()


@pytest.mark.parametrize("whole", ["intact", "corrupted"])
def test_whole_partial_left_before_its_commit(registry, base_image, tmp_path, whole):
    """A run killed between a blob's last byte and its commit (a Slurm
    scancel during the fsync) leaves the partial file at the blob's full
    size.  Resuming from there asked for a Range past the end, which
    docker-registry answers 416 with the whole blob's Content-Length and a
    33-byte body: every later pull on that store gave up after 6 attempts.
    Now an intact one is committed without a request, a corrupted one
    downloaded again."""
    layer = layer_digests(registry, "debian:bookworm")[0]
    data = fetch_blob(registry, "debian", layer)
    store = tmp_path / "store"
    assert imgbuild("prune", store=store).rc == 0
    partial = store / "tmp" / f"blob-{layer.split(':')[1]}.partial"
    partial.write_bytes(data if whole == "intact" else b"\0" * len(data))
    r = imgbuild("-v", "pull", f"{registry}/debian:bookworm", store=store)
    assert r.rc == 0, r
    if whole == "intact":
        assert "Already exists" in r.err, r
    else:
        assert "does not match its digest; downloading it again" in r.err, r
    blobs_ok(store)
    assert not partial.exists()


def test_bad_partial_is_discarded_and_downloaded_again(registry, base_image, tmp_path):
    layer = layer_digests(registry, "debian:bookworm")[0]
    store = tmp_path / "store"
    assert imgbuild("prune", store=store).rc == 0
    partial = store / "tmp" / f"blob-{layer.split(':')[1]}.partial"
    partial.write_bytes(b"\0" * 100000)
    dest = tmp_path / "rootfs"
    r = imgbuild("unpack", f"{registry}/debian:bookworm", dest, store=store)
    assert r.rc == 0, r
    assert "does not match its digest; downloading it again" in r.err
    assert (dest / "etc" / "debian_version").exists()
    blobs_ok(store)


def test_missing_layer_fails_cleanly(registry, base_image, tmp_path):
    """A manifest naming a blob the registry lacks: a clear error, no rootfs,
    no tag, no wrong blob."""
    blob, diff = tar_layer([("f", b"data")])
    oci_layout(tmp_path / "layout", [(blob, diff)])
    sh("skopeo", "copy", "--dest-tls-verify=false", f"oci:{tmp_path / 'layout'}:latest",
       f"docker://{registry}/gone:latest")
    digest = "sha256:" + hashlib.sha256(blob).hexdigest()
    req = urllib.request.Request(f"http://{registry}/v2/gone/blobs/{digest}", method="DELETE")
    urllib.request.urlopen(req).read()
    store = tmp_path / "store"
    dest = tmp_path / "rootfs"
    r = imgbuild("unpack", f"{registry}/gone:latest", dest, store=store)
    assert r.rc != 0
    assert "blob unknown" in r.err and digest in r.err, r
    assert not dest.exists()
    assert f"{registry}/gone:latest" not in imgbuild("images", store=store).out
    blobs_ok(store)


def test_blob_longer_than_its_descriptor_is_refused(registry, tmp_path):
    """A registry sending more bytes than the manifest's size: the download
    stops there (it could fill the disk otherwise), clear error, no blob."""
    blob, diff = tar_layer([("f", b"x" * 100000)])
    oci_layout(tmp_path / "layout", [(blob, diff)])
    sh("skopeo", "copy", "--dest-tls-verify=false", f"oci:{tmp_path / 'layout'}:latest",
       f"docker://{registry}/short:ok")
    index = json.loads((tmp_path / "layout" / "index.json").read_text())
    mdigest = index["manifests"][0]["digest"].split(":")[1]
    manifest = json.loads((tmp_path / "layout" / "blobs" / "sha256" / mdigest).read_bytes())
    manifest["layers"][0]["size"] -= 100
    req = urllib.request.Request(f"http://{registry}/v2/short/manifests/lies",
                                 data=json.dumps(manifest).encode(), method="PUT",
                                 headers={"Content-Type": manifest["mediaType"]})
    urllib.request.urlopen(req).read()
    store = tmp_path / "store"
    r = imgbuild("unpack", f"{registry}/short:lies", tmp_path / "rootfs", store=store,
                 env={"IMGBUILD_STALL_TIMEOUT": "5"})
    assert r.rc != 0
    assert f"more than the {len(blob) - 100} bytes its descriptor gives" in r.err, r
    assert not (tmp_path / "rootfs").exists()
    layer = hashlib.sha256(blob).hexdigest()
    assert not (store / "blobs" / "sha256" / layer).exists()
    blobs_ok(store)
