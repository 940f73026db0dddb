"""imgbuild push against Debian's docker-registry with its access log on:
cross-repository blob mounts, several destinations uploading each blob
once, chunked uploads, and an index with its platform manifests."""
import hashlib
import json
import math
import urllib.parse
from pathlib import Path

import pytest

from conftest import imgbuild, sh
from regutil import Registry, copy_base


def sha256_file(p):
    h = hashlib.sha256()
    with open(p, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return "sha256:" + h.hexdigest()


def stored_image(store, name):
    return json.loads(imgbuild("inspect", name, store=store).out)


def blob_digests(info):
    return [info["manifest"]["config"]["digest"]] + [l["digest"] for l in info["manifest"]["layers"]]


def remote_raw(ref):
    return sh("skopeo", "inspect", "--raw", "--tls-verify=false", f"docker://{ref}").stdout.encode()


def blob_uploads(reqs, repo):
    """Requests that carry blob bytes into `repo` (PATCH, or PUT of an upload)."""
    return [r for r in reqs if r[0] in ("PATCH", "PUT") and r[1].startswith(f"/v2/{repo}/blobs/uploads/")]


def assert_pulls_back_identical(ref, store, name, tmp_path):
    """skopeo copies `ref` to an OCI layout: its blobs hash to their names
    and equal the stored blobs of `name`."""
    out = tmp_path / "copied"
    sh("skopeo", "copy", "--quiet", "--src-tls-verify=false", f"docker://{ref}", f"oci:{out}:x")
    info = stored_image(store, name)
    for d in blob_digests(info):
        copied = out / "blobs/sha256" / d.split(":")[1]
        assert sha256_file(copied) == d
        assert copied.read_bytes() == (Path(store) / "blobs/sha256" / d.split(":")[1]).read_bytes()


@pytest.fixture(scope="module")
def logged(tmp_path_factory, base_image):
    """A registry with an access log, holding the base image as debian:bookworm."""
    reg = Registry(tmp_path_factory.mktemp("logged-registry"))
    copy_base(f"127.0.0.1:{reg.port}/debian:bookworm", "--dest-tls-verify=false")
    yield reg
    reg.stop()


@pytest.fixture(scope="module")
def pulled(logged, tmp_path_factory):
    """A store that pulled debian:bookworm from the logged registry."""
    store = tmp_path_factory.mktemp("push-store")
    r = imgbuild("pull", f"127.0.0.1:{logged.port}/debian:bookworm", store=store)
    assert r.rc == 0, r
    return store


def test_pull_records_its_source(logged, pulled):
    index = json.loads((Path(pulled) / "index.json").read_text())
    ann = index["manifests"][0]["annotations"]
    assert ann["org.opencontainers.image.ref.name"] == f"127.0.0.1:{logged.port}/debian:bookworm"
    assert ann["org.imgbuild.source"] == f"127.0.0.1:{logged.port}/debian"


def test_push_to_another_repo_mounts_the_blobs(logged, pulled, tmp_path):
    src = f"127.0.0.1:{logged.port}/debian:bookworm"
    info = stored_image(pulled, src)
    logged.mark()
    r = imgbuild("push", src, f"127.0.0.1:{logged.port}/mounted:1", store=pulled)
    assert r.rc == 0, r
    reqs = logged.requests()
    for d in blob_digests(info):
        mount = f"/v2/mounted/blobs/uploads/?mount={urllib.parse.quote(d, safe='')}&from=debian"
        assert ("POST", mount, 201) in reqs, reqs
        assert f"{d.split(':')[1][:12]}: Mounted from debian" in r.err.splitlines()
    assert blob_uploads(reqs, "mounted") == []
    assert ("PUT", "/v2/mounted/manifests/1", 201) in reqs
    assert hashlib.sha256(remote_raw(f"127.0.0.1:{logged.port}/mounted:1")).hexdigest() \
        == info["digest"].split(":")[1]
    # pushing again finds everything there (HEAD), uploads and mounts nothing
    logged.mark()
    r = imgbuild("push", src, f"127.0.0.1:{logged.port}/mounted:1", store=pulled)
    assert r.rc == 0, r
    reqs = logged.requests()
    assert [q for q in reqs if q[0] in ("POST", "PATCH")] == [] and blob_uploads(reqs, "mounted") == []
    assert sorted(l.split(": ", 1)[1] for l in r.err.splitlines() if l.endswith("lready exists")) \
        == ["Already exists"] + ["Layer already exists"] * (len(blob_digests(info)) - 1)


def test_several_destinations_upload_each_blob_once(logged, pulled, tmp_path):
    """To a registry the image did not come from: the first repository gets
    the uploads, the second mounts from it, extra tags upload nothing."""
    fresh = Registry(tmp_path / "fresh")
    try:
        src = f"127.0.0.1:{logged.port}/debian:bookworm"
        info = stored_image(pulled, src)
        r = imgbuild("push", src, f"127.0.0.1:{fresh.port}/one:1", f"127.0.0.1:{fresh.port}/two:1",
                     "-t", "latest", store=pulled)
        assert r.rc == 0, r
        reqs = fresh.requests()
        puts = [q for q in reqs if q[0] == "PUT" and "/blobs/uploads/" in q[1]]
        assert len(puts) == len(blob_digests(info)) and all(q[1].startswith("/v2/one/") for q in puts)
        assert [q for q in reqs if q[0] == "PATCH"] == []
        for d in blob_digests(info):
            mount = f"/v2/two/blobs/uploads/?mount={urllib.parse.quote(d, safe='')}&from=one"
            assert ("POST", mount, 201) in reqs, reqs
        for repo, tag in (("one", "1"), ("two", "1"), ("one", "latest")):
            assert ("PUT", f"/v2/{repo}/manifests/{tag}", 201) in reqs
            raw = remote_raw(f"127.0.0.1:{fresh.port}/{repo}:{tag}")
            assert "sha256:" + hashlib.sha256(raw).hexdigest() == info["digest"]
    finally:
        fresh.stop()


def test_chunked_push_same_digests_and_pulls_back_identical(logged, pulled, tmp_path):
    fresh = Registry(tmp_path / "chunks")
    try:
        src = f"127.0.0.1:{logged.port}/debian:bookworm"
        info = stored_image(pulled, src)
        dst = f"127.0.0.1:{fresh.port}/chunked:1"
        r = imgbuild("push", "--chunk-size", "1M", src, dst, store=pulled)
        assert r.rc == 0, r
        reqs = fresh.requests()
        layer = info["manifest"]["layers"][0]
        patches = [q for q in reqs if q[0] == "PATCH"]
        assert len(patches) == math.ceil(layer["size"] / (1 << 20)), patches[:3]
        assert all(q[2] == 202 for q in patches)
        # the config (499 bytes) goes in one PUT; the layer ends with PUT ?digest=
        finals = [q for q in reqs if q[0] == "PUT" and "/blobs/uploads/" in q[1]]
        assert len(finals) == 2 and all(q[2] == 201 for q in finals)
        assert any(urllib.parse.quote(layer["digest"], safe="") in q[1] for q in finals)
        assert f"{layer['digest'].split(':')[1][:12]}: Pushed ({len(patches)} chunks)" in r.err
        raw = remote_raw(dst)
        assert "sha256:" + hashlib.sha256(raw).hexdigest() == info["digest"]
        assert_pulls_back_identical(dst, pulled, src, tmp_path)
    finally:
        fresh.stop()


def test_bad_chunk_size_is_a_usage_error(pulled, logged):
    r = imgbuild("push", "--chunk-size", "lots", f"127.0.0.1:{logged.port}/debian:bookworm",
                 f"127.0.0.1:{logged.port}/x:1", store=pulled)
    assert r.rc == 2 and "lots" in r.err
    r = imgbuild("push", f"127.0.0.1:{logged.port}/debian:bookworm", f"127.0.0.1:{logged.port}/x:1",
                 store=pulled, env={"IMGBUILD_PUSH_CHUNK_SIZE": "1T"})
    assert r.rc == 2 and "IMGBUILD_PUSH_CHUNK_SIZE" in r.err


def put_blob(store, data):
    d = hashlib.sha256(data).hexdigest()
    p = Path(store) / "blobs/sha256" / d
    if not p.exists():
        p.write_bytes(data)
    return {"digest": "sha256:" + d, "size": len(data)}


def test_push_index_platform_manifests_first(logged, tmp_path):
    """A two-platform index made in the store (the amd64 image and an arm64
    variant of it) is pushed: both manifests by digest, then the index;
    chunked through IMGBUILD_PUSH_CHUNK_SIZE; skopeo copies it all back."""
    store = tmp_path / "store"
    src = f"127.0.0.1:{logged.port}/debian:bookworm"
    r = imgbuild("pull", src, store=store)
    assert r.rc == 0, r
    info = stored_image(store, src)
    amd64 = {"mediaType": "application/vnd.oci.image.manifest.v1+json", **put_blob(
        store, (Path(store) / "blobs/sha256" / info["digest"].split(":")[1]).read_bytes()),
        "platform": {"os": "linux", "architecture": "amd64"}}
    config = dict(info["config"], architecture="arm64")
    cdesc = put_blob(store, json.dumps(config).encode())
    manifest = dict(info["manifest"], config=dict(info["manifest"]["config"], **cdesc))
    arm64 = {"mediaType": "application/vnd.oci.image.manifest.v1+json",
             **put_blob(store, json.dumps(manifest).encode()),
             "platform": {"os": "linux", "architecture": "arm64", "variant": "v8"}}
    index = {"schemaVersion": 2, "mediaType": "application/vnd.oci.image.index.v1+json",
             "manifests": [amd64, arm64]}
    idesc = put_blob(store, json.dumps(index).encode())
    layout = json.loads((store / "index.json").read_text())
    layout["manifests"].append({"mediaType": "application/vnd.oci.image.index.v1+json", **idesc,
                                "annotations": {"org.opencontainers.image.ref.name": "local/multi:1"}})
    (store / "index.json").write_text(json.dumps(layout))

    fresh = Registry(tmp_path / "idx")
    try:
        dst = f"127.0.0.1:{fresh.port}/multi:1"
        r = imgbuild("push", "local/multi:1", dst, store=store,
                     env={"IMGBUILD_PUSH_CHUNK_SIZE": "16M"})
        assert r.rc == 0, r
        reqs = [q for q in fresh.requests() if "/manifests/" in q[1] and q[0] == "PUT"]
        assert reqs == [("PUT", f"/v2/multi/manifests/{amd64['digest']}", 201),
                        ("PUT", f"/v2/multi/manifests/{arm64['digest']}", 201),
                        ("PUT", "/v2/multi/manifests/1", 201)]
        layer = info["manifest"]["layers"][0]
        assert len([q for q in fresh.requests() if q[0] == "PATCH"]) \
            == math.ceil(layer["size"] / (16 << 20))
        raw = remote_raw(dst)
        assert "sha256:" + hashlib.sha256(raw).hexdigest() == idesc["digest"]
        out = tmp_path / "back"
        sh("skopeo", "copy", "--quiet", "--all", "--src-tls-verify=false", f"docker://{dst}", f"oci:{out}:x")
        for d in [amd64, arm64, cdesc, layer, info["manifest"]["config"]]:
            assert sha256_file(out / "blobs/sha256" / d["digest"].split(":")[1]) == d["digest"]
        # and imgbuild pulls the arm64 manifest from it
        r = imgbuild("pull", "--platform", "linux/arm64/v8", dst, store=tmp_path / "store2")
        assert r.rc == 0, r
        assert r.out.strip() == arm64["digest"]
    finally:
        fresh.stop()


class FakeRegistry:
    """A small distribution-spec registry for what Debian's docker-registry
    does not do: it asks for a minimum chunk length (OCI-Chunk-Min-Length),
    moves the upload to a new Location after each chunk, and answers a
    mount request with 202 (an upload session instead).  It checks that
    every request goes to the last Location it gave and that the bytes hash
    to the digest of the final PUT."""

    CHUNK_MIN = 3_000_000

    def __init__(self):
        import threading
        from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
        fake = self
        self.log = []  # (method, path, content-range or None, body length, status)
        self.uploads = {}  # upload id -> [bytearray, expected path]
        self.blobs = set()  # (repository, digest)

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *a):
                pass

            def reply(self, status, headers=None):
                fake.log.append((self.command, self.path, self.headers.get("Content-Range"),
                                 int(self.headers.get("Content-Length") or 0), status))
                self.send_response(status)
                for k, v in (headers or {}).items():
                    self.send_header(k, v)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def body(self):
                return self.rfile.read(int(self.headers.get("Content-Length") or 0))

            def new_location(self, uid):
                n = len(fake.log)
                loc = f"{self.path.split('?')[0].rsplit('/uploads/', 1)[0]}/uploads/{uid}?state={n}"
                fake.uploads[uid][1] = loc
                return loc

            def do_GET(self):
                self.reply(200 if self.path == "/v2/" else 404)

            def do_HEAD(self):
                repo, _, d = self.path[len("/v2/"):].rpartition("/blobs/")
                self.reply(200 if (repo, d) in fake.blobs else 404)

            def do_POST(self):
                self.body()
                uid = f"u{len(fake.uploads)}"
                fake.uploads[uid] = [bytearray(), None]
                loc = self.new_location(uid)
                self.reply(202, {"Location": loc, "OCI-Chunk-Min-Length": str(fake.CHUNK_MIN)})

            def upload(self):
                uid = self.path.split("?")[0].rsplit("/", 1)[1]
                if uid not in fake.uploads or fake.uploads[uid][1] != self.path.split("&digest=")[0].split("?digest=")[0]:
                    self.body()
                    self.reply(404)
                    return None
                return uid

            def do_PATCH(self):
                uid = self.upload()
                if uid is None:
                    return
                data = self.body()
                buf = fake.uploads[uid][0]
                start, end = map(int, self.headers["Content-Range"].split("-"))
                if start != len(buf) or end != start + len(data) - 1:
                    self.reply(416)
                    return
                buf += data
                self.reply(202, {"Location": self.new_location(uid), "Range": f"0-{len(buf) - 1}"})

            def do_PUT(self):
                if "/manifests/" in self.path:
                    self.body()
                    self.reply(201)
                    return
                uid = self.upload()
                if uid is None:
                    return
                buf = fake.uploads[uid][0] + self.body()
                digest = urllib.parse.unquote(self.path.split("digest=")[1])
                if "sha256:" + hashlib.sha256(buf).hexdigest() != digest:
                    self.reply(400)
                    return
                fake.blobs.add((self.path[len("/v2/"):].split("/blobs/")[0], digest))
                self.reply(201, {"Location": f"/v2/x/blobs/{digest}"})

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def stop(self):
        self.server.shutdown()
        self.server.server_close()


def test_chunk_min_length_moving_location_and_mount_answered_202(logged, pulled):
    fake = FakeRegistry()
    try:
        src = f"127.0.0.1:{logged.port}/debian:bookworm"
        info = stored_image(pulled, src)
        layer = info["manifest"]["layers"][0]
        r = imgbuild("push", "--chunk-size", "1M", src, f"127.0.0.1:{fake.port}/one:1",
                     f"127.0.0.1:{fake.port}/two:1", store=pulled)
        assert r.rc == 0, r
        assert all(status in (200, 201, 202, 404) for *_, status in fake.log), fake.log
        assert not [q for q in fake.log if q[-1] in (400, 416) or (q[-1] == 404 and q[0] != "HEAD")]
        for repo in ("one", "two"):
            patches = [q for q in fake.log if q[0] == "PATCH" and q[1].startswith(f"/v2/{repo}/")]
            sizes = [q[3] for q in patches]
            # chunks of the registry's minimum (3 MB), not of --chunk-size (1 MiB)
            assert sizes[:-1] == [FakeRegistry.CHUNK_MIN] * (len(sizes) - 1)
            assert sum(sizes) == layer["size"] and 0 < sizes[-1] <= FakeRegistry.CHUNK_MIN
            assert [q[2] for q in patches][:2] == ["0-2999999", "3000000-5999999"]
        # "two": mount from "one" asked, answered 202, and that upload used (no second POST)
        posts = [q for q in fake.log if q[0] == "POST" and q[1].startswith("/v2/two/")]
        assert len(posts) == 2 and all("mount=" in q[1] and "from=one" in q[1] for q in posts)
        for repo in ("one", "two"):
            assert {(repo, layer["digest"]), (repo, info["manifest"]["config"]["digest"])} <= fake.blobs
    finally:
        fake.stop()
