"""Faults between client and registry (tests/lib/faultproxy.py): each pull
either completes with correct digests or fails with a clear message naming
the blob and the cause, and the store never holds a wrong or partial blob.
"""
import hashlib
import json
import time

import pytest

from conftest import imgbuild, stored_names, walk_blobs


def blob_gets(proxy, digest):
    return [e for e in proxy.log() if e["method"] == "GET" and e["path"].endswith(f"/blobs/{digest}")]


def manifest_gets(proxy):
    return [e for e in proxy.log() if e["method"] == "GET" and "/manifests/" in e["path"]]


def ref_via(proxy, formats):
    return f"{proxy.host}/faults/small:1"


def assert_pulled_correctly(formats, store, ref, tmp_path):
    """Every blob of the image is stored, hashes to its name, and the rootfs
    has the files the image was made from."""
    blobs = walk_blobs(store)
    info = json.loads(imgbuild("inspect", ref, store=store).out)
    for d in [info["manifest"]["config"], *info["manifest"]["layers"]]:
        assert blobs.get(d["digest"]) == d["size"], d
    root = tmp_path / "rootfs"
    r = imgbuild("unpack", ref, root, store=store)
    assert r.rc == 0, r
    for path, sha in formats["small_files"].items():
        assert hashlib.sha256((root / path).read_bytes()).hexdigest() == sha, path


def pull(ref, store, env=None, timeout=120):
    t0 = time.monotonic()
    r = imgbuild("pull", ref, store=store, env=env, timeout=timeout)
    return r, time.monotonic() - t0


def test_dropped_connection_resumes_with_range(formats, faultproxy, tmp_path):
    layer = formats["small_layer"]
    p = faultproxy([{"match": f"/blobs/{layer}$", "fault": "drop", "after_bytes": 300000}])
    store = tmp_path / "store"
    r, _ = pull(ref_via(p, formats), store)
    assert r.rc == 0, r
    gets = blob_gets(p, layer)
    assert [g["fault"] for g in gets] == ["drop", None], gets
    assert gets[0]["range"] is None and gets[0]["sent"] == 300000
    assert gets[1]["range"] == "bytes=300000-", gets  # resumed, not restarted from 0
    assert gets[1]["status"] == 206
    assert_pulled_correctly(formats, store, ref_via(p, formats), tmp_path)


@pytest.mark.parametrize("what", ["blob", "manifest"])
def test_503_is_retried(formats, faultproxy, tmp_path, what):
    match = f"/blobs/{formats['small_layer']}$" if what == "blob" else "/manifests/1$"
    p = faultproxy([{"match": match, "fault": "status", "code": 503, "times": 2}])
    store = tmp_path / "store"
    r, _ = pull(ref_via(p, formats), store)
    assert r.rc == 0, r
    gets = blob_gets(p, formats["small_layer"]) if what == "blob" else manifest_gets(p)
    assert [g["status"] for g in gets] == [503, 503, 200], gets
    if what == "blob":
        # the blob's progress line says it waits, then it completes
        short = formats["small_layer"].split(":")[1][:12]
        mine = [l for l in r.err.splitlines() if l.startswith(f"{short}: ")]
        assert [l for l in mine if l.startswith(f"{short}: Retrying in ")] \
            and all(l.endswith("s (HTTP 503)") for l in mine if "Retrying" in l), r
        assert mine[-1].startswith(f"{short}: Download complete"), r
    assert_pulled_correctly(formats, store, ref_via(p, formats), tmp_path)


def test_persistent_503_fails_clearly_and_stores_no_partial_blob(formats, faultproxy, tmp_path):
    layer = formats["small_layer"]
    p = faultproxy([{"match": f"/blobs/{layer}$", "fault": "status", "code": 503, "times": 1000}])
    store = tmp_path / "store"
    r, took = pull(ref_via(p, formats), store)
    assert r.rc == 1
    last = r.err.strip().splitlines()[-1]
    assert last.startswith(f"imgbuild: pull {ref_via(p, formats)}: blob {layer}: "), r
    assert "503" in last or "unavailable" in last, r
    assert took < 60
    assert layer not in walk_blobs(store)
    assert stored_names(store) == []


@pytest.mark.parametrize("what", ["blob", "manifest"])
def test_429_retry_after_seconds_is_waited_for(formats, faultproxy, tmp_path, what):
    match = f"/blobs/{formats['small_layer']}$" if what == "blob" else "/manifests/1$"
    p = faultproxy([{"match": match, "fault": "status", "code": 429, "retry_after": "1"}])
    store = tmp_path / "store"
    r, _ = pull(ref_via(p, formats), store)
    assert r.rc == 0, r
    gets = blob_gets(p, formats["small_layer"]) if what == "blob" else manifest_gets(p)
    assert [g["status"] for g in gets] == [429, 200], gets
    assert gets[1]["t"] - gets[0]["t"] >= 0.95, gets  # Retry-After: 1 (second)
    assert_pulled_correctly(formats, store, ref_via(p, formats), tmp_path)


@pytest.mark.parametrize("what", ["blob", "manifest"])
def test_429_retry_after_http_date_is_waited_for(formats, faultproxy, tmp_path, what):
    match = f"/blobs/{formats['small_layer']}$" if what == "blob" else "/manifests/1$"
    # an HTTP-date 3 s ahead, which has whole seconds: more than 2 s to wait
    p = faultproxy([{"match": match, "fault": "status", "code": 429, "retry_after": "date:+3"}])
    store = tmp_path / "store"
    r, _ = pull(ref_via(p, formats), store)
    assert r.rc == 0, r
    gets = blob_gets(p, formats["small_layer"]) if what == "blob" else manifest_gets(p)
    assert [g["status"] for g in gets] == [429, 200], gets
    assert gets[1]["t"] - gets[0]["t"] >= 1.9, gets
    assert_pulled_correctly(formats, store, ref_via(p, formats), tmp_path)


def test_corrupted_blob_is_never_stored(formats, faultproxy, tmp_path):
    layer = formats["small_layer"]
    p = faultproxy([{"match": f"/blobs/{layer}$", "fault": "corrupt"}])
    store = tmp_path / "store"
    r, _ = pull(ref_via(p, formats), store)
    walk_blobs(store)  # whatever happened, every stored blob hashes to its name
    if r.rc == 0:
        assert_pulled_correctly(formats, store, ref_via(p, formats), tmp_path)
    else:
        last = r.err.strip().splitlines()[-1]
        assert f"blob {layer}: digest mismatch" in last, r
        assert layer not in walk_blobs(store) and stored_names(store) == []


def test_corrupted_blob_is_downloaded_again(formats, faultproxy, tmp_path):
    layer = formats["small_layer"]
    p = faultproxy([{"match": f"/blobs/{layer}$", "fault": "corrupt"}])
    store = tmp_path / "store"
    r, _ = pull(ref_via(p, formats), store)
    assert r.rc == 0, r
    gets = blob_gets(p, layer)
    assert [g["fault"] for g in gets] == ["corrupt", None], gets
    assert gets[1]["range"] is None  # the bad bytes were thrown away, all of them
    assert_pulled_correctly(formats, store, ref_via(p, formats), tmp_path)


@pytest.mark.parametrize("what", ["blob", "manifest"])
def test_stall_times_out_and_is_retried(formats, faultproxy, tmp_path, what):
    match = f"/blobs/{formats['small_layer']}$" if what == "blob" else "/manifests/1$"
    p = faultproxy([{"match": match, "fault": "stall", "seconds": 60}])
    store = tmp_path / "store"
    r, took = pull(ref_via(p, formats), store, env={"IMGBUILD_STALL_TIMEOUT": "2"})
    assert took < 30, (took, r)  # the 60 s stall was cut short
    gets = blob_gets(p, formats["small_layer"]) if what == "blob" else manifest_gets(p)
    if r.rc == 0:
        assert [g["fault"] for g in gets] == ["stall", None], gets
        assert gets[1]["t"] - gets[0]["t"] >= 1.9  # after the 2 s stall timeout
        assert_pulled_correctly(formats, store, ref_via(p, formats), tmp_path)
    else:
        assert "timed out" in r.err, r
        walk_blobs(store)
        assert stored_names(store) == []


def test_stall_without_retry_fails_with_a_timeout(formats, faultproxy, tmp_path):
    layer = formats["small_layer"]
    p = faultproxy([{"match": f"/blobs/{layer}$", "fault": "stall", "seconds": 60, "times": 100}])
    store = tmp_path / "store"
    r, took = pull(ref_via(p, formats), store, env={"IMGBUILD_STALL_TIMEOUT": "1"})
    assert r.rc == 1
    assert took < 40, took
    last = r.err.strip().splitlines()[-1]
    assert f"blob {layer}" in last and "timed out" in last, r
    assert layer not in walk_blobs(store) and stored_names(store) == []


@pytest.mark.parametrize("what", ["blob", "manifest"])
def test_reset_mid_headers_is_retried(formats, faultproxy, tmp_path, what):
    match = f"/blobs/{formats['small_layer']}$" if what == "blob" else "/manifests/1$"
    p = faultproxy([{"match": match, "fault": "reset_headers"}])
    store = tmp_path / "store"
    r, _ = pull(ref_via(p, formats), store)
    assert r.rc == 0, r
    gets = blob_gets(p, formats["small_layer"]) if what == "blob" else manifest_gets(p)
    assert [g["fault"] for g in gets] == ["reset_headers", None], gets
    assert_pulled_correctly(formats, store, ref_via(p, formats), tmp_path)


def test_proxy_log_records_requests(formats, faultproxy, tmp_path):
    """The proxy itself: a clean pull through it is logged request by request."""
    p = faultproxy([])
    store = tmp_path / "store"
    r, _ = pull(ref_via(p, formats), store)
    assert r.rc == 0, r
    log = p.log()
    assert log[0]["path"] == "/v2/" and log[0]["auth"] is False
    assert [e["path"] for e in manifest_gets(p)] == ["/v2/faults/small/manifests/1"]
    assert all(e["fault"] is None and e["status"] in (200, 206) for e in log)
    assert_pulled_correctly(formats, store, ref_via(p, formats), tmp_path)
