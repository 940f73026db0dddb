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


# ---- network deadlines (docs/cli.md "Network deadlines"), set small by their
# environment variables so that each test takes seconds ----

def last_line(r):
    return r.err.strip().splitlines()[-1]


def only_config_stored(formats, store):
    """No image tagged, no layer visible: at most the verified config blob,
    which the pull stores before the layers."""
    assert stored_names(store) == []
    assert set(walk_blobs(store)) <= {formats["small_config"]}, walk_blobs(store)


def test_dripped_manifest_fails_at_the_request_deadline(formats, faultproxy, tmp_path):
    """A registry that sends the manifest at 4 bytes/s never stalls, but the
    request's total deadline ends it, once, with the limit named."""
    p = faultproxy([{"match": "/manifests/1$", "fault": "drip", "rate": 4, "times": 100}])
    store = tmp_path / "store"
    ref = ref_via(p, formats)
    r, took = pull(ref, store, env={"IMGBUILD_REQUEST_TIMEOUT": "3"})
    assert r.rc == 1, r
    assert 2.9 <= took < 15, (took, r)
    assert last_line(r) == (
        f"imgbuild: pull {ref}: GET {p.host}/v2/faults/small/manifests/1: timed out: no complete "
        "answer within the 3 s deadline of one request (retries included; set "
        "IMGBUILD_REQUEST_TIMEOUT=SECONDS to allow more)"), r
    gets = manifest_gets(p)
    assert len(gets) == 1 and gets[0]["fault"] == "drip", gets  # no retry past the deadline
    assert walk_blobs(store) == {} and stored_names(store) == []


@pytest.mark.parametrize("stall", [None, "1"])
def test_silent_registry_fails_at_the_request_deadline(formats, faultproxy, tmp_path, stall):
    """A registry that takes the connection and never answers: the first
    request (GET /v2/) ends at its deadline, stalls retried within it."""
    p = faultproxy([{"match": ".", "fault": "silent", "seconds": 120, "times": 1000}])
    store = tmp_path / "store"
    ref = ref_via(p, formats)
    env = {"IMGBUILD_REQUEST_TIMEOUT": "3"}
    if stall:
        env["IMGBUILD_STALL_TIMEOUT"] = stall
    r, took = pull(ref, store, env=env)
    assert r.rc == 1, r
    # a retry whose wait would end past the deadline is not made: maybe done early
    assert (2.9 if stall is None else 2) <= took < 15, (took, r)
    last = last_line(r)
    assert last.startswith(f"imgbuild: pull {ref}: GET {p.host}/v2/: timed out"), r
    assert "within the 3 s deadline of one request" in last, r
    assert "set IMGBUILD_REQUEST_TIMEOUT=SECONDS to allow more" in last, r
    log = p.log()
    assert {e["path"] for e in log} == {"/v2/"}, log
    assert len(log) == 1 if stall is None else len(log) >= 2, log  # stalls: cut and tried again
    assert walk_blobs(store) == {} and stored_names(store) == []


def test_retries_stop_at_the_request_deadline(formats, faultproxy, tmp_path):
    """503 with Retry-After: 3 for ever: without a deadline 5 tries (12 s);
    with a 5 s one the second try (at 3 s, 2 s left for its answer, even on
    a loaded machine) is the last: a third would start past the deadline."""
    p = faultproxy([{"match": "/manifests/1$", "fault": "status", "code": 503, "retry_after": "3",
                     "times": 1000}])
    store = tmp_path / "store"
    ref = ref_via(p, formats)
    r, took = pull(ref, store, env={"IMGBUILD_REQUEST_TIMEOUT": "5"})
    assert r.rc == 1, r
    assert took < 9, (took, r)
    assert [g["status"] for g in manifest_gets(p)] == [503, 503], manifest_gets(p)
    assert "past the 5 s deadline of one request (IMGBUILD_REQUEST_TIMEOUT)" in r.err, r
    assert last_line(r).startswith(f"imgbuild: pull {ref}: "), r
    assert walk_blobs(store) == {} and stored_names(store) == []


@pytest.mark.parametrize("stall", [None, "1"])
def test_silent_blob_fails_after_no_progress(formats, faultproxy, tmp_path, stall):
    """Blob requests that are never answered: the pull fails once no blob
    received a byte for IMGBUILD_PROGRESS_TIMEOUT seconds, retries included
    (the stall limit alone would allow 6 tries of 60 s)."""
    layer = formats["small_layer"]
    p = faultproxy([{"match": f"/blobs/{layer}$", "fault": "silent", "seconds": 120,
                     "times": 1000}])
    store = tmp_path / "store"
    ref = ref_via(p, formats)
    env = {"IMGBUILD_PROGRESS_TIMEOUT": "3"}
    if stall:
        env["IMGBUILD_STALL_TIMEOUT"] = stall
    r, took = pull(ref, store, env=env)
    assert r.rc == 1, r
    assert 2.9 <= took < 15, (took, r)
    last = last_line(r)
    assert last.startswith(
        f"imgbuild: pull {ref}: blob {layer}: timed out: no progress for 3 s (no blob received a "
        f"byte from {p.host}; set IMGBUILD_PROGRESS_TIMEOUT=SECONDS to allow more)"), r
    if stall:  # a retry was waiting or running: why the last attempt failed
        assert "; the last attempt: " in last and "stalled" in last, r
    assert len(blob_gets(p, layer)) >= (2 if stall else 1)
    only_config_stored(formats, store)


def test_dripped_blob_is_cut_by_the_minimum_speed(formats, faultproxy, tmp_path):
    """A blob sent at 4 bytes/s is slower than 1 KiB/s for the stall limit:
    cut, and resumed from the bytes it got."""
    layer = formats["small_layer"]
    p = faultproxy([{"match": f"/blobs/{layer}$", "fault": "drip", "rate": 4}])
    store = tmp_path / "store"
    r, took = pull(ref_via(p, formats), store, env={"IMGBUILD_STALL_TIMEOUT": "1"})
    assert r.rc == 0, r
    assert took < 20, took
    gets = blob_gets(p, layer)
    assert [g["fault"] for g in gets] == ["drip", None], gets
    assert 0 < gets[0]["sent"] < 64, gets
    # resumed from what arrived (a last byte may have been in flight at the cut)
    assert gets[1]["range"].startswith("bytes=") and gets[1]["range"].endswith("-"), gets
    assert 0 < int(gets[1]["range"][6:-1]) <= gets[0]["sent"], gets
    assert_pulled_correctly(formats, store, ref_via(p, formats), tmp_path)


def test_slow_progressing_blob_outlives_the_request_deadline(formats, faultproxy, tmp_path):
    """The 2 MiB layer at 384 KiB/s takes over 5 s, more than twice the 2 s
    deadline of small requests and than the 2 s progress limit: blob
    downloads have no total deadline, and while bytes flow they progress."""
    layer = formats["small_layer"]
    p = faultproxy([{"match": f"/blobs/{layer}$", "fault": "drip", "rate": 384 << 10}])
    store = tmp_path / "store"
    env = {"IMGBUILD_REQUEST_TIMEOUT": "2", "IMGBUILD_STALL_TIMEOUT": "2",
           "IMGBUILD_PROGRESS_TIMEOUT": "2"}
    r, took = pull(ref_via(p, formats), store, env=env)
    assert r.rc == 0, r
    assert took > 4.5, took
    gets = blob_gets(p, layer)
    assert [g["fault"] for g in gets] == ["drip"], gets  # one transfer, never cut
    assert_pulled_correctly(formats, store, ref_via(p, formats), tmp_path)


def test_bad_deadline_value_is_warned_about(formats, faultproxy, tmp_path):
    p = faultproxy([])
    store = tmp_path / "store"
    r, _ = pull(ref_via(p, formats), store, env={"IMGBUILD_REQUEST_TIMEOUT": "soon"})
    assert r.rc == 0, r
    assert ('imgbuild: warning: IMGBUILD_REQUEST_TIMEOUT "soon": expected a number of seconds '
            '(like 60); using the default, 60 s') in r.err, r
