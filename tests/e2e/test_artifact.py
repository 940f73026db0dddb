"""The artifact repository (`imgbuild artifact push|pull`, builder/artifact.h),
against real servers on 127.0.0.1: an S3-compatible server that checks
SigV4 signatures (tests/lib/s3.sh) and Debian's docker-registry.

What is checked comes from outside the code under test: objects are
listed and read back with curl's own SigV4 signer, the registry's manifest
and blobs with plain HTTP, digests with hashlib, the os from Python's
os-release parser, the commit from git, the meta file with PyYAML.
Equivalents of MXNet CD's test_artifact_repository.py (apache/mxnet
cd/utils/, at 3027296b38cc055e9748c604869b3f1aed3c4172) that need a
server or a library: missing licenses, missing files, empty listing,
nested keys on pull, variant derivation from a library's features."""
import base64
import hashlib
import json
import os
import platform
import subprocess
import urllib.parse
import urllib.request
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
import yaml

from conftest import ROOT, imgbuild, sh

BUCKET = "artifacts"
KEY_ID = SECRET = "S3RVER"
ARTIFACT_TYPE = "application/vnd.imgbuild.artifact.v1"

# `nvcc --version` of CUDA 10.0, as it prints it.
NVCC_10_0 = """nvcc: NVIDIA (R) Cuda compiler driver
Copyright (c) 2005-2018 NVIDIA Corporation
Built on Sat_Aug_25_21:08:01_CDT_2018
Cuda compilation tools, release 10.0, V10.0.130
"""

# A library with MXNet's feature query (include/mxnet/c_api.h: struct
# LibFeature, MXLibInfoFeatures); -DHAS_QUERY=0 leaves it out.
LIB_C = r"""
#include <stdbool.h>
#include <stddef.h>
struct LibFeature { const char *name; bool enabled; };
#if HAS_QUERY
static const struct LibFeature features[] = {
  { "CUDA", CUDA_ON }, { "CUDNN", CUDA_ON }, { "ONEDNN", DNN_ON }, { "OPENMP", true },
};
int MXLibInfoFeatures (const struct LibFeature **f, size_t *n)
{
  *f = features;
  *n = sizeof features / sizeof features[0];
  return 0;
}
#endif
int mx_placeholder (void) { return 42; }
"""


@pytest.fixture(scope="session")
def s3(tmp_path_factory):
    d = tmp_path_factory.mktemp("s3")
    p = subprocess.run(["bash", str(ROOT / "tests/lib/s3.sh"), "start", str(d), BUCKET],
                       capture_output=True, text=True)
    if p.returncode != 0:
        pytest.fail(f"the S3 test server did not start (tests/lib/s3.sh): {p.stderr[-2000:]}")
    port = p.stdout.strip()
    yield {"endpoint": f"http://127.0.0.1:{port}", "dir": d}
    subprocess.run(["bash", str(ROOT / "tests/lib/s3.sh"), "stop", str(d)])


@pytest.fixture
def env(tmp_path):
    """Credentials for the S3 server, nothing from the user's ~/.aws or
    the characteristics' environment variables."""
    home = tmp_path / "home"
    home.mkdir()
    e = {"HOME": str(home), "AWS_ACCESS_KEY_ID": KEY_ID, "AWS_SECRET_ACCESS_KEY": SECRET,
         "AWS_REGION": "us-east-1", "AWS_SHARED_CREDENTIALS_FILE": str(home / "none"),
         "AWS_CONFIG_FILE": str(home / "none"), "MXNET_SHA": "", "GIT_COMMIT": "",
         "IMGBUILD_ARTIFACT_REPOSITORY": "", "ARTIFACT_REPOSITORY_BUCKET": "",
         "AWS_ENDPOINT_URL": "", "AWS_ENDPOINT_URL_S3": "", "AWS_PROFILE": "",
         "AWS_SESSION_TOKEN": ""}
    return e


def art(*args, tmp_path, env, cwd=None):
    return imgbuild("artifact", *args, store=tmp_path / "store", env=env, cwd=cwd, timeout=120)


def sha(p):
    return hashlib.sha256(Path(p).read_bytes()).hexdigest()


# -- S3 seen through curl's own signer -----------------------------------------

def curl_s3(s3, method, path, query="", data=None, path_as_is=False):
    url = f"{s3['endpoint']}/{BUCKET}" + (f"/{urllib.parse.quote(path)}" if path else "")
    if query:
        url += "?" + query
    cmd = ["curl", "-sS", "--aws-sigv4", "aws:amz:us-east-1:s3", "--user", f"{KEY_ID}:{SECRET}",
           "-w", "\n%{http_code}", "-X", method]
    if path_as_is:
        cmd.append("--path-as-is")
    if data is not None:
        h = hashlib.sha256(data).hexdigest()
        cmd += ["-H", f"x-amz-content-sha256: {h}", "--data-binary", "@-"]
    else:
        cmd += ["-H", "x-amz-content-sha256: " + hashlib.sha256(b"").hexdigest()]
    p = subprocess.run(cmd + [url], input=data, capture_output=True, check=True)
    body, _, code = p.stdout.rpartition(b"\n")
    return int(code), body


def s3_keys(s3, prefix=""):
    q = "list-type=2&prefix=" + urllib.parse.quote(prefix, safe="")
    code, body = curl_s3(s3, "GET", "", q)
    assert code == 200, body
    ns = {"s": "http://s3.amazonaws.com/doc/2006-03-01/"}
    root = ET.fromstring(body)
    keys = [e.text for e in root.iter() if e.tag.endswith("}Key") or e.tag == "Key"]
    return sorted(keys)


def s3_get(s3, key):
    code, body = curl_s3(s3, "GET", key)
    assert code == 200, body
    return body


def s3_put(s3, key, data):
    code, body = curl_s3(s3, "PUT", key, data=data)
    assert code == 200, body


# -- the registry seen through plain HTTP --------------------------------------

def reg_get(registry, path, accept=None):
    req = urllib.request.Request(f"http://{registry}/v2/{path}")
    if accept:
        req.add_header("Accept", accept)
    with urllib.request.urlopen(req, timeout=30) as r:
        return r.read()


# -- inputs --------------------------------------------------------------------

@pytest.fixture
def build(tmp_path):
    """A library (random bytes), two licenses, two dependencies and a
    directory among them."""
    d = tmp_path / "build"
    (d / "lib").mkdir(parents=True)
    (d / "licenses").mkdir()
    (d / "deps").mkdir()
    (d / "lib/libmxnet.so").write_bytes(os.urandom(300_000))
    (d / "licenses/LICENSE").write_text("Apache License 2.0\n")
    (d / "licenses/NOTICE.txt").write_text("notice\n")
    (d / "licenses/subdir").mkdir()
    (d / "deps/libgfortran.so.4").write_bytes(os.urandom(5000))
    (d / "deps/libquadmath.so.0").write_bytes(os.urandom(3000))
    (d / "deps/libstdc++.so.6").write_bytes(os.urandom(4000))  # '+' in a key
    return d


def expected_files(b):
    return {
        "libmxnet.so": b / "lib/libmxnet.so",
        "licenses/LICENSE": b / "licenses/LICENSE",
        "licenses/NOTICE.txt": b / "licenses/NOTICE.txt",
        "dependencies/libgfortran.so.4": b / "deps/libgfortran.so.4",
        "dependencies/libquadmath.so.0": b / "deps/libquadmath.so.0",
        "dependencies/libstdc++.so.6": b / "deps/libstdc++.so.6",
    }


PUSH_ARGS = ["--git-sha", "abc123", "--os", "ubuntu16.04", "--variant", "cu100",
             "--libtype", "static"]
KEY = "abc123/static/ubuntu16.04/cu100/"


def push_args(b):
    # licenses: a glob that also matches a directory (dropped); dependencies
    # as the tool's nargs list: a glob, a blank pattern (dropped), files
    return ["--lib", b / "lib/libmxnet.so", "--licenses", f"{b}/licenses/*",
            "--dependencies", f"{b}/deps/libgfortran*", " ", f"{b}/deps/libquadmath.so.0",
            "--dependencies", f"{b}/deps/libstdc++.so.6"]


def tree(d):
    return sorted(str(p.relative_to(d)) for p in Path(d).rglob("*") if p.is_file())


def check_pulled(dest, files, meta):
    assert tree(dest) == sorted(list(files) + ["libmxnet.meta"])
    for rel, src in files.items():
        assert sha(dest / rel) == sha(src), rel
    assert yaml.safe_load((dest / "libmxnet.meta").read_text()) == meta
    # nothing half-written left beside
    assert [p.name for p in dest.iterdir() if p.name.startswith(".")] == []


META = {"commit_id": "abc123", "dependency_linking": "static", "os": "ubuntu16.04",
        "variant": "cu100"}


# -- S3 ------------------------------------------------------------------------

def test_s3_push_then_pull(s3, env, tmp_path, build):
    repo = f"s3://{BUCKET}/mxnet-cd"
    r = art("push", "--repository", repo, "--s3-endpoint", s3["endpoint"], *PUSH_ARGS,
            *push_args(build), tmp_path=tmp_path, env=env)
    assert r.rc == 0, r
    files = expected_files(build)
    assert s3_keys(s3, "mxnet-cd/") == sorted(f"mxnet-cd/{KEY}{rel}" for rel in files)
    for rel, src in files.items():
        assert s3_get(s3, f"mxnet-cd/{KEY}{rel}") == src.read_bytes()

    # another variant of the commit: nothing, and the error says what there is
    r = art("pull", "--repository", repo, "--s3-endpoint", s3["endpoint"], "--git-sha", "abc123",
            "--os", "ubuntu16.04", "--destination", tmp_path / "none", tmp_path=tmp_path, env=env)
    assert r.rc == 1, r
    assert "no artifact found for abc123/dynamic/ubuntu16.04/cpu/" in r.err, r
    assert "stored for commit abc123: static/ubuntu16.04/cu100" in r.err, r

    dest = tmp_path / "dest"
    e = dict(env, AWS_ENDPOINT_URL=s3["endpoint"])  # the endpoint from the environment
    r = art("pull", "--repository", repo, *PUSH_ARGS, "--destination", dest,
            tmp_path=tmp_path, env=e)
    assert r.rc == 0, r
    check_pulled(dest, files, META)


def test_s3_credentials_from_profile_file(s3, env, tmp_path, build):
    creds = tmp_path / "credentials"
    creds.write_text(f"[default]\naws_access_key_id = wrong\naws_secret_access_key = wrong\n\n"
                     f"[ci]\naws_access_key_id = {KEY_ID}\naws_secret_access_key = {SECRET}\n")
    conf = tmp_path / "config"
    conf.write_text("[profile ci]\nregion = eu-west-1\n")
    e = dict(env, AWS_ACCESS_KEY_ID="", AWS_SECRET_ACCESS_KEY="", AWS_REGION="",
             AWS_SHARED_CREDENTIALS_FILE=str(creds), AWS_CONFIG_FILE=str(conf), AWS_PROFILE="ci")
    r = art("push", "--bucket", BUCKET, "--s3-endpoint", s3["endpoint"], "--git-sha", "profile1",
            "--os", "linux", "--variant", "cpu", "--lib", build / "lib/libmxnet.so",
            "--licenses", build / "licenses/LICENSE", tmp_path=tmp_path, env=e)
    assert r.rc == 0, r
    assert s3_keys(s3, "profile1/") == ["profile1/dynamic/linux/cpu/libmxnet.so",
                                        "profile1/dynamic/linux/cpu/licenses/LICENSE"]


@pytest.mark.parametrize("override, says", [
    ({"AWS_SECRET_ACCESS_KEY": "not-the-secret"}, "SignatureDoesNotMatch"),
    ({"AWS_ACCESS_KEY_ID": "NOBODY"}, "InvalidAccessKeyId"),
    ({"AWS_ACCESS_KEY_ID": "", "AWS_SECRET_ACCESS_KEY": ""}, "no credentials"),
])
def test_s3_wrong_credentials_fail_clearly(s3, env, tmp_path, build, override, says):
    e = dict(env, **override)
    r = art("push", "--repository", f"s3://{BUCKET}/wrongcreds", "--s3-endpoint", s3["endpoint"],
            *PUSH_ARGS, "--lib", build / "lib/libmxnet.so", "--licenses", build / "licenses/LICENSE",
            tmp_path=tmp_path, env=e)
    assert r.rc == 1, r
    assert says in r.err, r
    assert s3_keys(s3, "wrongcreds/") == []
    r = art("pull", "--repository", f"s3://{BUCKET}/wrongcreds", "--s3-endpoint", s3["endpoint"],
            *PUSH_ARGS, "--destination", tmp_path / "dest", tmp_path=tmp_path, env=e)
    assert r.rc == 1, r
    assert says in r.err, r


def test_s3_pull_nested_keys(s3, env, tmp_path):
    """Objects under the prefix at any depth land at the same relative
    paths (the tool's test_try_s3_download_with_destination)."""
    prefix = "nested/dynamic/centos7/native/"
    objs = {"file.txt": b"top\n", "subdir/other.txt": b"other\n",
            "another/sub/dir/f.txt": os.urandom(2000)}
    for rel, data in objs.items():
        s3_put(s3, prefix + rel, data)
    # a key that only shares the text prefix is not part of it
    s3_put(s3, "nested/dynamic/centos7/native-other/x", b"x")
    dest = tmp_path / "dest"
    r = art("pull", "--bucket", BUCKET, "--s3-endpoint", s3["endpoint"], "--git-sha", "nested",
            "--os", "centos7", "--variant", "native", "--destination", dest,
            tmp_path=tmp_path, env=env)
    assert r.rc == 0, r
    assert tree(dest) == sorted(list(objs) + ["file.txt.meta"])
    for rel, data in objs.items():
        assert (dest / rel).read_bytes() == data
    assert yaml.safe_load((dest / "file.txt.meta").read_text()) == {
        "commit_id": "nested", "dependency_linking": "dynamic", "os": "centos7",
        "variant": "native"}


def test_s3_pull_detects_changed_bytes(s3, env, tmp_path, build):
    r = art("push", "--bucket", BUCKET, "--s3-endpoint", s3["endpoint"], "--git-sha", "tamper",
            "--os", "linux", "--variant", "cpu", "--lib", build / "lib/libmxnet.so",
            "--licenses", build / "licenses/LICENSE", tmp_path=tmp_path, env=env)
    assert r.rc == 0, r
    # the server keeps each object in a file of its own; flip one byte there
    objs = list(Path(s3["dir"], "data", BUCKET, "tamper").rglob("libmxnet.so._S3rver_object"))
    assert len(objs) == 1, objs
    data = bytearray(objs[0].read_bytes())
    data[1000] ^= 0xFF
    objs[0].write_bytes(bytes(data))
    dest = tmp_path / "dest"
    r = art("pull", "--bucket", BUCKET, "--s3-endpoint", s3["endpoint"], "--git-sha", "tamper",
            "--os", "linux", "--variant", "cpu", "--destination", dest, tmp_path=tmp_path, env=env)
    assert r.rc == 1, r
    assert "digest mismatch" in r.err, r
    assert tree(dest) == []


# -- push errors (test_push_artifact_throws_no_license_error, test_is_file_not_found)

def test_push_without_licenses_fails(s3, env, tmp_path, build):
    for extra in ([], ["--licenses", " "], ["--licenses", f"{build}/licenses/subdir"]):
        r = art("push", "--bucket", BUCKET, "--s3-endpoint", s3["endpoint"], "--git-sha", "nolic",
                "--os", "linux", "--variant", "cpu", "--lib", build / "lib/libmxnet.so", *extra,
                tmp_path=tmp_path, env=env)
        assert r.rc == 1, r
        assert "No licenses defined" in r.err, r
    assert s3_keys(s3, "nolic/") == []


def test_push_names_a_missing_file(s3, env, tmp_path, build):
    missing = build / "deps/libopenblas.so.0"
    r = art("push", "--bucket", BUCKET, "--s3-endpoint", s3["endpoint"], "--git-sha", "missing",
            "--os", "linux", "--variant", "cpu", "--lib", build / "lib/libmxnet.so",
            "--licenses", build / "licenses/LICENSE", "--dependencies", missing,
            tmp_path=tmp_path, env=env)
    assert r.rc == 1, r
    assert f"'{missing}' not found" in r.err, r
    r = art("push", "--bucket", BUCKET, "--s3-endpoint", s3["endpoint"], "--git-sha", "missing",
            "--os", "linux", "--variant", "cpu", "--lib", build / "lib/nothere.so",
            "--licenses", build / "licenses/LICENSE", tmp_path=tmp_path, env=env)
    assert r.rc == 1, r
    assert "nothere.so" in r.err, r
    assert s3_keys(s3, "missing/") == []


def test_pull_says_when_nothing_matches(s3, registry, env, tmp_path):
    for repo in (f"s3://{BUCKET}/empty", f"{registry}/artifacts/empty"):
        dest = tmp_path / "dest"
        r = art("pull", "--repository", repo, "--s3-endpoint", s3["endpoint"],
                "--git-sha", "0000", "--os", "linux", "--variant", "cpu", "--destination", dest,
                tmp_path=tmp_path, env=env)
        assert r.rc == 1, r
        assert "no artifact found for 0000/dynamic/linux/cpu/" in r.err, r
        assert "stored for commit" not in r.err, r
        assert tree(dest) == []


# -- derived characteristics -----------------------------------------------------

def make_lib(d, name, has_query=True, cuda=False, dnn=False):
    src = d / "lib.c"
    src.write_text(LIB_C)
    out = d / name
    sh("cc", "-shared", "-fPIC", f"-DHAS_QUERY={int(has_query)}", f"-DCUDA_ON={int(cuda)}",
       f"-DDNN_ON={int(dnn)}", "-o", out, src)
    return out


def host_os():
    rel = platform.freedesktop_os_release()
    return rel["ID"] + rel.get("VERSION_ID", "")


@pytest.mark.parametrize("cuda, dnn, variant", [
    (True, True, "cu100"), (False, True, "cpu"), (False, False, "native")])
def test_push_derives_commit_os_and_variant(s3, env, tmp_path, cuda, dnn, variant):
    """No --git-sha, --os or --variant: the commit from `git rev-parse HEAD`
    in the current directory, the os from /etc/os-release, the variant
    from the library's MXLibInfoFeatures and a fake nvcc of CUDA 10.0."""
    work = tmp_path / "checkout"
    work.mkdir()
    sh("git", "init", "-q", work)
    sh("git", "-C", work, "-c", "user.name=t", "-c", "user.email=t@e", "commit", "-q",
       "--allow-empty", "-m", f"checkout of {variant}")
    head = sh("git", "-C", work, "rev-parse", "HEAD").stdout.strip()
    lib = make_lib(work, "libmxnet.so", cuda=cuda, dnn=dnn)
    (work / "LICENSE").write_text("license\n")
    bindir = tmp_path / "bin"
    bindir.mkdir()
    nvcc = bindir / "nvcc"
    nvcc.write_text("#!/bin/sh\ncat <<'EOF'\n" + NVCC_10_0 + "EOF\n")
    nvcc.chmod(0o755)
    e = dict(env, PATH=f"{bindir}:{os.environ['PATH']}")
    r = art("push", "--bucket", BUCKET, "--s3-endpoint", s3["endpoint"], "--lib", "libmxnet.so",
            "--licenses", "LICENSE", tmp_path=tmp_path, env=e, cwd=work)
    assert r.rc == 0, r
    prefix = f"{head}/dynamic/{host_os()}/{variant}/"
    assert s3_keys(s3, head + "/") == [prefix + "libmxnet.so", prefix + "licenses/LICENSE"]
    assert s3_get(s3, prefix + "libmxnet.so") == lib.read_bytes()

    # MXNET_SHA wins over GIT_COMMIT, which wins over git
    e2 = dict(e, MXNET_SHA=f"{head}-mx", GIT_COMMIT=f"{head}-git")
    r = art("push", "--bucket", BUCKET, "--s3-endpoint", s3["endpoint"], "--lib", "libmxnet.so",
            "--licenses", "LICENSE", "--variant", "x", tmp_path=tmp_path, env=e2, cwd=work)
    assert r.rc == 0, r
    assert s3_keys(s3, f"{head}-") == [f"{head}-mx/dynamic/{host_os()}/x/libmxnet.so",
                                       f"{head}-mx/dynamic/{host_os()}/x/licenses/LICENSE"]

    # a pull without --variant asks for cpu
    dest = tmp_path / "dest"
    r = art("pull", "--bucket", BUCKET, "--s3-endpoint", s3["endpoint"], "--destination", dest,
            tmp_path=tmp_path, env=e, cwd=work)
    if variant == "cpu":
        assert r.rc == 0, r
        assert (dest / "libmxnet.so").read_bytes() == lib.read_bytes()
    else:
        assert r.rc == 1, r
        assert f"no artifact found for {head}/dynamic/{host_os()}/cpu/" in r.err, r
    assert "variant not set" in r.err, r


def test_variant_needs_nvcc_or_the_feature_query(s3, env, tmp_path):
    work = tmp_path / "w"
    work.mkdir()
    (work / "LICENSE").write_text("l\n")
    common = ["--bucket", BUCKET, "--s3-endpoint", s3["endpoint"], "--git-sha", "novariant",
              "--os", "linux", "--licenses", work / "LICENSE"]
    plain = make_lib(work, "libplain.so", has_query=False)
    r = art("push", *common, "--lib", plain, tmp_path=tmp_path, env=env)
    assert r.rc == 1, r
    assert "no MXLibInfoFeatures" in r.err and "--variant" in r.err, r
    cuda = make_lib(work, "libcuda.so", cuda=True, dnn=True)
    e = dict(env, PATH=f"{tmp_path / 'empty'}:/usr/bin:/bin")  # no nvcc
    r = art("push", *common, "--lib", cuda, tmp_path=tmp_path, env=e)
    assert r.rc == 1, r
    assert "nvcc" in r.err and "--variant" in r.err, r
    assert s3_keys(s3, "novariant/") == []


# -- OCI registry ----------------------------------------------------------------

def test_registry_push_then_pull(registry, env, tmp_path, build):
    repo = f"{registry}/mxnet/artifacts"
    r = art("push", "--repository", repo, *PUSH_ARGS, *push_args(build),
            tmp_path=tmp_path, env=env)
    assert r.rc == 0, r
    files = expected_files(build)
    tags = json.loads(reg_get(registry, "mxnet/artifacts/tags/list"))["tags"]
    tag = "abc123_static_ubuntu16.04_cu100"
    assert tag in tags
    m = json.loads(reg_get(registry, f"mxnet/artifacts/manifests/{tag}",
                           "application/vnd.oci.image.manifest.v1+json"))
    assert m["mediaType"] == "application/vnd.oci.image.manifest.v1+json"
    assert m["artifactType"] == ARTIFACT_TYPE
    assert m["annotations"]["org.imgbuild.artifact.key"] == KEY
    titles = {l["annotations"]["org.opencontainers.image.title"]: l for l in m["layers"]}
    assert sorted(titles) == sorted(files)
    for rel, src in files.items():
        assert titles[rel]["digest"] == "sha256:" + sha(src)
        assert titles[rel]["size"] == src.stat().st_size
        blob = reg_get(registry, f"mxnet/artifacts/blobs/{titles[rel]['digest']}")
        assert blob == src.read_bytes()
    config = json.loads(reg_get(registry, f"mxnet/artifacts/blobs/{m['config']['digest']}"))
    assert config == META

    # another OCI tool reads it
    p = subprocess.run(["skopeo", "inspect", "--raw", "--tls-verify=false",
                        f"docker://{repo}:{tag}"], capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    assert json.loads(p.stdout)["artifactType"] == ARTIFACT_TYPE

    r = art("pull", "--repository", repo, "--git-sha", "abc123", "--os", "ubuntu16.04",
            "--destination", tmp_path / "none", tmp_path=tmp_path, env=env)
    assert r.rc == 1, r
    assert "no artifact found for abc123/dynamic/ubuntu16.04/cpu/" in r.err, r
    assert "stored for commit abc123: static/ubuntu16.04/cu100" in r.err, r

    dest = tmp_path / "dest"
    (tmp_path / "store").rename(tmp_path / "store-push")  # a fresh store pulls
    r = art("pull", "--repository", repo, *PUSH_ARGS, "--destination", dest,
            tmp_path=tmp_path, env=env)
    assert r.rc == 0, r
    check_pulled(dest, files, META)


def test_registry_key_with_odd_characters_gets_a_hashed_tag(registry, env, tmp_path, build):
    repo = f"{registry}/mxnet/odd"
    args = ["--git-sha", "feature_branch", "--os", "ubuntu16.04", "--variant", "cpu"]
    r = art("push", "--repository", repo, *args, "--lib", build / "lib/libmxnet.so",
            "--licenses", build / "licenses/LICENSE", tmp_path=tmp_path, env=env)
    assert r.rc == 0, r
    key = "feature_branch/dynamic/ubuntu16.04/cpu/"
    tag = "sha256_" + hashlib.sha256(key.encode()).hexdigest()
    assert json.loads(reg_get(registry, "mxnet/odd/tags/list"))["tags"] == [tag]
    dest = tmp_path / "dest"
    r = art("pull", "--repository", repo, *args, "--destination", dest,
            tmp_path=tmp_path, env=env)
    assert r.rc == 0, r
    assert tree(dest) == ["libmxnet.meta", "libmxnet.so", "licenses/LICENSE"]


def test_registry_hint_reads_every_page_of_tags(registry, env, tmp_path, build, faultproxy):
    """The "stored for commit" hint lists tags from every page of a
    paginated tag list (distribution-spec Link rel="next"): the proxy serves
    the registry's list in pages of one tag."""
    repo = f"{registry}/mxnet/paged"
    for variant in ("cu100", "cu101", "cpu"):
        r = art("push", "--repository", repo, "--git-sha", "abc123", "--os", "ubuntu16.04",
                "--variant", variant, "--libtype", "static", *push_args(build),
                tmp_path=tmp_path, env=env)
        assert r.rc == 0, r
    proxy = faultproxy([{"fault": "paginate", "n": 1, "match": "/tags/list", "times": 100}])
    r = art("pull", "--repository", f"127.0.0.1:{proxy.port}/mxnet/paged", "--git-sha", "abc123",
            "--os", "ubuntu16.04", "--variant", "cu102", "--libtype", "static",
            "--destination", tmp_path / "none", tmp_path=tmp_path, env=env)
    assert r.rc == 1, r
    assert ("stored for commit abc123: static/ubuntu16.04/cpu, static/ubuntu16.04/cu100, "
            "static/ubuntu16.04/cu101") in r.err, r
    pages = [e["path"] for e in proxy.log() if "/tags/list" in e["path"]]
    assert pages == ["/v2/mxnet/paged/tags/list",
                     "/v2/mxnet/paged/tags/list?n=1&last=abc123_static_ubuntu16.04_cpu",
                     "/v2/mxnet/paged/tags/list?n=1&last=abc123_static_ubuntu16.04_cu100"], pages


# -- MXNet CD's own command line (the tool's --push/--pull, --libmxnet; its
# README's --static/--dynamic and operand destination) ---------------------------

def test_s3_tool_form_push_then_pull(s3, env, tmp_path, build):
    """A Jenkins line of MXNet CD (cd/Jenkinsfile_utils.groovy push_artifact:
    `--push --verbose --libtype ... --dependencies` with no dependencies)
    and the README's `--pull --static --variant=cu102 ./dist`, against the
    server: the keys say static, the files come back at the operand."""
    repo = f"s3://{BUCKET}/toolform"
    common = ["--repository", repo, "--s3-endpoint", s3["endpoint"], "--git-sha", "tool1",
              "--os", "ubuntu16.04"]
    r = art("--push", "--verbose", "--libtype", "static", "--variant", "cu100", *common,
            "--libmxnet", build / "lib/libmxnet.so", "--licenses", build / "licenses/LICENSE",
            build / "licenses/NOTICE.txt", "--dependencies", tmp_path=tmp_path, env=env)
    assert r.rc == 0, r
    prefix = "toolform/tool1/static/ubuntu16.04/cu100/"
    assert s3_keys(s3, "toolform/") == [prefix + "libmxnet.so", prefix + "licenses/LICENSE",
                                        prefix + "licenses/NOTICE.txt"]
    # the README's push: --static, the action flag after other options
    r = art(*common, "--static", "--variant", "cu101", "--push",
            "--libmxnet", build / "lib/libmxnet.so", "--licenses", build / "licenses/LICENSE",
            "--dependencies", build / "deps/libgfortran.so.4", tmp_path=tmp_path, env=env)
    assert r.rc == 0, r
    assert s3_keys(s3, "toolform/tool1/static/ubuntu16.04/cu101/") == [
        "toolform/tool1/static/ubuntu16.04/cu101/" + rel
        for rel in ("dependencies/libgfortran.so.4", "libmxnet.so", "licenses/LICENSE")]
    assert s3_get(s3, "toolform/tool1/static/ubuntu16.04/cu101/dependencies/libgfortran.so.4") \
        == (build / "deps/libgfortran.so.4").read_bytes()

    dist = tmp_path / "work" / "dist"
    (tmp_path / "work").mkdir()
    r = art("--pull", "--static", "--variant=cu100", *common, "./dist",
            tmp_path=tmp_path, env=env, cwd=tmp_path / "work")
    assert r.rc == 0, r
    check_pulled(dist, {"libmxnet.so": build / "lib/libmxnet.so",
                        "licenses/LICENSE": build / "licenses/LICENSE",
                        "licenses/NOTICE.txt": build / "licenses/NOTICE.txt"},
                 dict(META, commit_id="tool1"))

    # the subcommand word with a positional destination, --libtype static
    # and --static agreeing, --pull repeating the word
    dest = tmp_path / "dest2"
    r = art("pull", "--pull", "--libtype", "static", "--static", "--variant", "cu101", *common,
            dest, tmp_path=tmp_path, env=env)
    assert r.rc == 0, r
    assert tree(dest) == ["dependencies/libgfortran.so.4", "libmxnet.meta", "libmxnet.so",
                          "licenses/LICENSE"]
    assert sha(dest / "libmxnet.so") == sha(build / "lib/libmxnet.so")
    assert yaml.safe_load((dest / "libmxnet.meta").read_text())["variant"] == "cu101"


def test_registry_tool_form_push_then_pull(registry, env, tmp_path, build):
    """--dynamic, --libmxnet and a destination given twice (as the
    operand and as --destination, the same directory spelt two ways),
    against the registry."""
    repo = f"{registry}/mxnet/toolform"
    common = ["--repository", repo, "--git-sha", "tool2", "--os", "centos7", "--variant", "cpu"]
    r = art("--push", "--dynamic", *common, "--libmxnet", build / "lib/libmxnet.so",
            "--licenses", f"{build}/licenses/*", tmp_path=tmp_path, env=env)
    assert r.rc == 0, r
    tags = json.loads(reg_get(registry, "mxnet/toolform/tags/list"))["tags"]
    assert tags == ["tool2_dynamic_centos7_cpu"]
    (tmp_path / "work").mkdir()
    r = art("--pull", "--dynamic", *common, "--destination", "out/", "./out",
            tmp_path=tmp_path, env=env, cwd=tmp_path / "work")
    assert r.rc == 0, r
    check_pulled(tmp_path / "work/out", {"libmxnet.so": build / "lib/libmxnet.so",
                                          "licenses/LICENSE": build / "licenses/LICENSE",
                                          "licenses/NOTICE.txt": build / "licenses/NOTICE.txt"},
                 {"commit_id": "tool2", "dependency_linking": "dynamic", "os": "centos7",
                  "variant": "cpu"})


@pytest.mark.parametrize("args, says", [
    (["--push", "--pull"], "--push and --pull cannot be used together"),
    (["--pull", "--destination", "d", "--push"], "--push and --pull cannot be used together"),
    (["push", "--pull"], "artifact push: --pull conflicts with the subcommand 'push'"),
    (["pull", "--push"], "artifact pull: --push conflicts with the subcommand 'pull'"),
    (["--push", "--static", "--dynamic"], "--static and --dynamic cannot be used together"),
    (["--push", "--dynamic", "--libtype", "static"],
     "artifact push: --dynamic conflicts with --libtype static"),
    (["pull", "--libtype", "dynamic", "--static"],
     "artifact pull: --static conflicts with --libtype dynamic"),
    (["--pull", "--destination", "one", "two"],
     "artifact pull: destination 'two' conflicts with --destination 'one'"),
    (["--pull", "one", "two"], "artifact pull: unexpected argument 'two' (one destination only)"),
    (["--push", "somewhere"], "artifact push: unexpected argument 'somewhere'"),
    (["--static", "--libmxnet", "x.so"], "artifact: expected push or pull"),
])
def test_tool_form_conflicts_are_usage_errors(s3, env, tmp_path, build, args, says):
    """Each contradictory line: exit 2, a message naming both sides, and
    nothing pushed or pulled (every other argument would succeed)."""
    common = ["--bucket", BUCKET, "--s3-endpoint", s3["endpoint"], "--git-sha", "conflict",
              "--os", "linux", "--variant", "cpu"]
    push_only = ["--libmxnet", build / "lib/libmxnet.so", "--licenses",
                 build / "licenses/LICENSE"]
    is_push = "push" in args or "--push" in args
    (tmp_path / "work").mkdir()
    r = art(*args, *common, *(push_only if is_push and "--libmxnet" not in args else []),
            tmp_path=tmp_path, env=env, cwd=tmp_path / "work")
    assert r.rc == 2, r
    assert says in r.err, r
    assert s3_keys(s3, "conflict/") == []
    assert list((tmp_path / "work").iterdir()) == []


@pytest.fixture(scope="module")
def basic_registry(tmp_path_factory):
    d = tmp_path_factory.mktemp("artifact-basic-registry")
    port = sh("bash", ROOT / "tests/lib/registry.sh", "start", d, "basic",
              env=dict(os.environ, IMGBUILD_TEST_USER_NAME="arti",
                       IMGBUILD_TEST_PASSWORD="arti-secret")).stdout.strip()
    yield f"127.0.0.1:{port}"
    subprocess.run(["bash", str(ROOT / "tests/lib/registry.sh"), "stop", str(d)])


def test_registry_credentials_from_authfile(basic_registry, env, tmp_path, build):
    """The registry's own authentication applies to artifacts as to images."""
    repo = f"{basic_registry}/private/artifacts"
    args = ["--repository", repo, "--git-sha", "auth1", "--os", "linux", "--variant", "cpu"]
    push = ["--lib", build / "lib/libmxnet.so", "--licenses", build / "licenses/LICENSE"]
    r = art("push", *args, *push, tmp_path=tmp_path, env=env)
    assert r.rc == 1, r
    assert "requires authentication" in r.err, r
    authfile = tmp_path / "auth.json"
    token = base64.b64encode(b"arti:arti-secret").decode()
    authfile.write_text(json.dumps({"auths": {basic_registry: {"auth": token}}}))
    r = art("push", *args, *push, "--authfile", authfile, tmp_path=tmp_path, env=env)
    assert r.rc == 0, r
    dest = tmp_path / "dest"
    r = art("pull", *args, "--destination", dest, tmp_path=tmp_path, env=env)
    assert r.rc == 1 and "requires authentication" in r.err, r
    r = art("pull", *args, "--authfile", authfile, "--destination", dest, tmp_path=tmp_path, env=env)
    assert r.rc == 0, r
    assert tree(dest) == ["libmxnet.meta", "libmxnet.so", "licenses/LICENSE"]
    assert sha(dest / "libmxnet.so") == sha(build / "lib/libmxnet.so")
