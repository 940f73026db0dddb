"""Manifest formats, platforms and digest-pinned references against images
made by skopeo/umoci (tests/lib/formats.py) in the local registry."""
import http.server
import json
import platform
import threading

import pytest

from conftest import imgbuild, stored_names, walk_blobs

OCI_ZSTD = "application/vnd.oci.image.layer.v1.tar+zstd"
OCI_GZIP = "application/vnd.oci.image.layer.v1.tar+gzip"
DOCKER_GZIP = "application/vnd.docker.image.rootfs.diff.tar.gzip"
amd64_only = pytest.mark.skipif(platform.machine() != "x86_64",
                                reason="the test images' runnable platform is linux/amd64")


@pytest.fixture(scope="module")
def fstore(tmp_path_factory):
    return tmp_path_factory.mktemp("formats-store")


@amd64_only
@pytest.mark.parametrize("fmt,layer_type", [("v2s2", DOCKER_GZIP), ("oci_gzip", OCI_GZIP),
                                            ("oci_zstd", OCI_ZSTD), ("multi", OCI_GZIP),
                                            ("nested", OCI_GZIP)])
def test_each_format_pulls_and_unpacks(formats, fstore, tmp_path, fmt, layer_type):
    ref = formats[fmt]
    r = imgbuild("pull", ref, store=fstore)
    assert r.rc == 0, r
    info = json.loads(imgbuild("inspect", ref, store=fstore).out)
    assert info["digest"] == r.out.strip()
    assert [l["mediaType"] for l in info["manifest"]["layers"]] == [layer_type]
    assert info["config"]["architecture"] == "amd64" and info["config"]["os"] == "linux"
    if fmt in ("multi", "nested"):
        assert info["digest"] == formats["multi_platforms"]["linux/amd64"]
    r = imgbuild("unpack", ref, tmp_path / "rootfs", store=fstore)
    assert r.rc == 0, r
    assert (tmp_path / "rootfs/etc/debian_version").read_text().startswith("12")
    walk_blobs(fstore)


@pytest.mark.parametrize("ref_key", ["multi", "nested"])
@pytest.mark.parametrize("asked,chosen", [("linux/arm64", "linux/arm64/v8"),
                                          ("linux/arm64/v8", "linux/arm64/v8"),
                                          ("linux/aarch64", "linux/arm64/v8"),
                                          ("linux/arm/v7", "linux/arm/v7"),
                                          ("linux/arm", "linux/arm/v7"),
                                          ("linux/amd64", "linux/amd64")])
def test_platform_picks_the_manifest(formats, tmp_path, ref_key, asked, chosen):
    store = tmp_path / "store"
    ref = formats[ref_key]
    r = imgbuild("pull", "--platform", asked, ref, store=store)
    assert r.rc == 0, r
    assert r.out.strip() == formats["multi_platforms"][chosen]
    info = json.loads(imgbuild("inspect", ref, store=store).out)
    assert info["config"]["architecture"] == chosen.split("/")[1]
    if chosen != "linux/amd64":
        assert imgbuild("unpack", ref, tmp_path / "r", store=store).rc == 0
        assert (tmp_path / "r/etc/platform").read_text() == chosen + "\n"
    # the indexes walked are kept, verified, beside the manifest
    blobs = walk_blobs(store)
    assert formats["multi_digest"] in blobs
    if ref_key == "nested":
        assert formats["nested_digest"] in blobs


def test_images_shows_the_platform_the_tag_points_to(formats, tmp_path):
    store = tmp_path / "store"
    ref = formats["multi"]
    assert imgbuild("pull", "--platform", "linux/arm64", ref, store=store).rc == 0
    line = [l for l in imgbuild("images", store=store).out.splitlines() if l.startswith(ref)]
    assert len(line) == 1 and "linux/arm64" in line[0], line
    assert imgbuild("pull", "--platform", "linux/amd64", ref, store=store).rc == 0
    line = [l for l in imgbuild("images", store=store).out.splitlines() if l.startswith(ref)]
    assert len(line) == 1 and "linux/amd64" in line[0], line


@pytest.mark.parametrize("ref_key", ["multi", "nested"])
def test_no_matching_platform_lists_the_offered_ones(formats, tmp_path, ref_key):
    store = tmp_path / "store"
    r = imgbuild("pull", "--platform", "linux/s390x", formats[ref_key], store=store)
    assert r.rc == 1
    assert r.err.strip().splitlines()[-1] == (f"imgbuild: pull {formats[ref_key]}: no image for linux/s390x; "
                             "the index offers linux/amd64, linux/arm64/v8, linux/arm/v7"), r
    assert "unknown" not in r.err
    assert walk_blobs(store) == {} and stored_names(store) == []
    r = imgbuild("pull", "--platform", "linux/arm/v6", formats[ref_key], store=store)
    assert r.rc == 1 and "no image for linux/arm/v6" in r.err, r


def test_bad_platform_is_a_usage_error(formats, tmp_path):
    r = imgbuild("pull", "--platform", "linux", formats["multi"], store=tmp_path / "s")
    assert r.rc == 2 and "OS/ARCH" in r.err


def test_single_platform_image_for_another_platform(formats, tmp_path):
    store = tmp_path / "store"
    r = imgbuild("pull", "--platform", "linux/arm64", formats["oci_gzip"], store=store)
    assert r.rc == 1
    assert "the image is for linux/amd64, not linux/arm64" in r.err, r
    assert walk_blobs(store) == {} and stored_names(store) == []


SCHEMA1 = {"schemaVersion": 1, "name": "old/app", "tag": "1", "architecture": "amd64",
           "fsLayers": [{"blobSum": "sha256:" + "a" * 64}],
           "history": [{"v1Compatibility": "{}"}]}


@pytest.fixture
def schema1_registry():
    """A stub registry on 127.0.0.1 whose manifests are Docker schema 1, signed
    (application/vnd.docker.distribution.manifest.v1+prettyjws) and not."""
    class H(http.server.BaseHTTPRequestHandler):
        def log_message(self, *a):
            pass

        def do_GET(self):
            if self.path == "/v2/":
                body, ctype = b"{}", "application/json"
            elif self.path == "/v2/old/app/manifests/signed":
                doc = dict(SCHEMA1, signatures=[{"header": {"alg": "ES256"}, "signature": "x",
                                                 "protected": "e30"}])
                body = json.dumps(doc, indent=3).encode()
                ctype = "application/vnd.docker.distribution.manifest.v1+prettyjws"
            elif self.path == "/v2/old/app/manifests/unsigned":
                body = json.dumps(SCHEMA1).encode()
                ctype = "application/vnd.docker.distribution.manifest.v1+json"
            else:
                self.send_response(404)
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            self.send_response(200)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), H)
    t = threading.Thread(target=srv.serve_forever, daemon=True)
    t.start()
    yield f"127.0.0.1:{srv.server_address[1]}"
    srv.shutdown()
    srv.server_close()


@pytest.mark.parametrize("tag", ["signed", "unsigned"])
def test_schema1_is_refused_clearly(schema1_registry, tmp_path, tag):
    store = tmp_path / "store"
    r = imgbuild("pull", f"{schema1_registry}/old/app:{tag}", store=store)
    assert r.rc == 1
    assert len(r.err.strip().splitlines()) == 1, r
    assert f"pull {schema1_registry}/old/app:{tag}" in r.err
    assert "schema 1 is not supported" in r.err and "push the image again" in r.err, r
    assert walk_blobs(store) == {} and stored_names(store) == []


def test_digest_pinned_references(formats, registry, tmp_path):
    store = tmp_path / "store"
    repo = formats["oci_gzip"].rsplit(":", 1)[0]
    digest = imgbuild("pull", formats["oci_gzip"], store=tmp_path / "first").out.strip()
    for ref in (f"{repo}@{digest}", f"{formats['oci_gzip']}@{digest}"):
        r = imgbuild("pull", ref, store=store)
        assert r.rc == 0, r
        assert r.out.strip() == digest
        assert json.loads(imgbuild("inspect", ref, store=store).out)["digest"] == digest
    assert f"{repo}@{digest}" in stored_names(store)
    # an index by digest, then the platform's manifest from it
    multi_repo = formats["multi"].rsplit(":", 1)[0]
    r = imgbuild("pull", "--platform", "linux/arm64", f"{multi_repo}@{formats['multi_digest']}",
                 store=store)
    assert r.rc == 0, r
    assert r.out.strip() == formats["multi_platforms"]["linux/arm64/v8"]


def test_digest_pinned_unknown_digest(formats, tmp_path):
    store = tmp_path / "store"
    repo = formats["oci_gzip"].rsplit(":", 1)[0]
    r = imgbuild("pull", f"{repo}@sha256:{'0' * 64}", store=store)
    assert r.rc == 1 and "manifest unknown" in r.err and "0" * 64 in r.err, r
    assert walk_blobs(store) == {} and stored_names(store) == []


def test_digest_pinned_wrong_bytes_store_nothing(formats, faultproxy, tmp_path):
    """The registry (through the proxy) answers a digest-pinned GET with bytes
    that hash to something else: refused, nothing stored."""
    store = tmp_path / "store"
    digest = formats["multi_platforms"]["linux/amd64"]
    p = faultproxy([{"match": f"/manifests/{digest}$", "fault": "corrupt", "times": 100}])
    ref = f"{p.host}/formats/debian@{digest}"
    r = imgbuild("pull", ref, store=store)
    assert r.rc == 1
    assert f"manifest {digest}: digest mismatch" in r.err, r
    assert walk_blobs(store) == {} and stored_names(store) == []


def test_index_child_with_wrong_bytes_stores_nothing(formats, faultproxy, tmp_path):
    """A platform manifest that does not hash to the index's descriptor."""
    store = tmp_path / "store"
    child = formats["multi_platforms"]["linux/arm64/v8"]
    p = faultproxy([{"match": f"/manifests/{child}$", "fault": "corrupt", "times": 100}])
    r = imgbuild("pull", "--platform", "linux/arm64", f"{p.host}/formats/multi:1", store=store)
    assert r.rc == 1
    assert f"manifest {child}: digest mismatch" in r.err, r
    assert walk_blobs(store) == {} and stored_names(store) == []


@amd64_only
def test_from_platform_copy_and_run(formats, registry, base_image, tmp_path):
    """An arm64 stage of the synthetic index: COPY into it and from it.
    Its RUN goes through binfmt_misc (tests/e2e/test_platforms.py runs real
    arm64 steps); this image has no shell, which the error says."""
    store = tmp_path / "store"
    ctx = tmp_path / "ctx"
    ctx.mkdir()
    (ctx / "note.txt").write_text("copied into the arm64 stage\n")
    (ctx / "ok.recipe").write_text(f"""
FROM --platform=linux/arm64 {formats['multi']} AS arm
COPY note.txt /note.txt
FROM {formats['multi']}
COPY --from=arm /etc/platform /arm-platform
COPY --from=arm /note.txt /note.txt
RUN cat /etc/debian_version > /debian-version
OUTPUT type=image,name=fromplat:1
""")
    r = imgbuild(ctx / "ok.recipe", store=store, cwd=tmp_path)
    assert r.rc == 0, r
    info = json.loads(imgbuild("inspect", "fromplat:1", store=store).out)
    assert info["config"]["architecture"] == "amd64"
    assert imgbuild("unpack", "fromplat:1", tmp_path / "r", store=store).rc == 0
    assert (tmp_path / "r/arm-platform").read_text() == "linux/arm64/v8\n"
    assert (tmp_path / "r/note.txt").read_text() == "copied into the arm64 stage\n"
    assert (tmp_path / "r/debian-version").read_text().startswith("12")

    (ctx / "bad.recipe").write_text(f"""FROM --platform=linux/arm64 {formats['multi']}
RUN true
""")
    r = imgbuild(ctx / "bad.recipe", store=store, cwd=tmp_path)
    assert r.rc == 1
    assert f"{ctx / 'bad.recipe'}:2: RUN: command not found: /bin/sh" in r.err, r
