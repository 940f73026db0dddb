"""Registry authentication on real parts: Debian's docker-registry with
htpasswd Basic auth and with token auth (tests/lib/token-server.py), a
small image pushed there by skopeo, credentials from every source imgbuild
reads, login/logout, wrong passwords, token expiry, and a stub registry that
redirects blobs to another host (which must not see Authorization)."""
import base64
import gzip
import hashlib
import http.client
import io
import json
import os
import select
import stat
import subprocess
import tarfile
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from conftest import ROOT, imgbuild, sh

USER, PASSWORD = "tester", "tester-secret-1"
REFRESH_TOKEN = "tester-refresh-1"
REGISTRY_SH = ROOT / "tests/lib/registry.sh"


def start_registry(d, mode, env=None):
    e = dict(os.environ)
    e.update(env or {})
    port = subprocess.run(["bash", str(REGISTRY_SH), "start", str(d), mode], env=e,
                          capture_output=True, text=True, check=True).stdout.strip()
    return f"127.0.0.1:{port}"


def stop_registry(d):
    subprocess.run(["bash", str(REGISTRY_SH), "stop", str(d)])


@pytest.fixture(scope="session")
def tiny_layout(tmp_path_factory):
    """An OCI layout with a small image of four layers (umoci)."""
    d = tmp_path_factory.mktemp("tiny")
    layout = d / "layout"
    sh("umoci", "init", "--layout", layout)
    sh("umoci", "new", "--image", f"{layout}:t")
    for i in range(4):
        tar = d / f"layer{i}.tar"
        with tarfile.open(tar, "w") as t:
            data = (f"layer {i}\n" * (1000 * (i + 1))).encode()
            info = tarfile.TarInfo(f"file{i}.txt")
            info.size = len(data)
            t.addfile(info, io.BytesIO(data))
        sh("umoci", "raw", "add-layer", "--image", f"{layout}:t", tar)
    sh("umoci", "config", "--image", f"{layout}:t", "--os", "linux", "--architecture", "amd64",
       "--config.cmd", "true")
    return layout


def push_tiny(layout, host, repo):
    sh("skopeo", "copy", "--quiet", "--dest-tls-verify=false", "--dest-creds", f"{USER}:{PASSWORD}",
       f"oci:{layout}:t", f"docker://{host}/{repo}")


def remote_layers(host, repo):
    return json.loads(sh("skopeo", "inspect", "--tls-verify=false", "--creds", f"{USER}:{PASSWORD}",
                         f"docker://{host}/{repo}").stdout)["Layers"]


@pytest.fixture(scope="session")
def basic_registry(tmp_path_factory, tiny_layout):
    d = tmp_path_factory.mktemp("basic-registry")
    host = start_registry(d, "basic")
    push_tiny(tiny_layout, host, "private/tiny:1")
    yield host
    stop_registry(d)


@pytest.fixture(scope="session")
def token_registry(tmp_path_factory, tiny_layout):
    d = tmp_path_factory.mktemp("token-registry")
    host = start_registry(d, "token")
    push_tiny(tiny_layout, host, "private/tiny:1")
    push_tiny(tiny_layout, host, "public/tiny:1")
    yield host, d / "token-log"
    stop_registry(d)


def token_log(path):
    return [json.loads(l) for l in path.read_text().splitlines()]


@pytest.fixture(autouse=True)
def clean_auth_env(monkeypatch, tmp_path):
    """No credentials from the caller's environment; HOME is a fresh dir."""
    for v in ("REGISTRY_AUTH_FILE", "XDG_RUNTIME_DIR", "DOCKER_CONFIG"):
        monkeypatch.delenv(v, raising=False)
    (tmp_path / "home").mkdir()
    monkeypatch.setenv("HOME", str(tmp_path / "home"))


def b64(s):
    return base64.b64encode(s.encode()).decode()


def write_json(path, obj):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(obj))
    return path


def fake_helper(tmp_path, monkeypatch, host, user=USER, password=PASSWORD):
    """docker-credential-imgbuildfake on PATH: knows `host`, logs its calls."""
    bindir = tmp_path / "bin"
    bindir.mkdir(exist_ok=True)
    log = tmp_path / "helper.log"
    script = bindir / "docker-credential-imgbuildfake"
    script.write_text(f"""#!/bin/sh
in=$(cat)
echo "$1 $in" >> {log}
if [ "$1" = get ] && [ "$in" = "{host}" ]; then
  echo '{{"ServerURL":"{host}","Username":"{user}","Secret":"{password}"}}'
  exit 0
fi
echo "credentials not found in native keychain"
exit 1
""")
    script.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bindir}:{os.environ['PATH']}")
    return log


SOURCES = ["registry_auth_file", "xdg_runtime_dir", "xdg_config_home", "docker_config",
           "home_docker_url_key",
           "cred_helper", "creds_store", "authfile_option", "creds_option"]


def configure(source, host, tmp_path, monkeypatch, password=PASSWORD):
    """Put credentials for `host` where `source` says; -> extra CLI options."""
    auth = {"auths": {host: {"auth": b64(f"{USER}:{password}")}}}
    if source == "registry_auth_file":
        monkeypatch.setenv("REGISTRY_AUTH_FILE", str(write_json(tmp_path / "auth.json", auth)))
    elif source == "xdg_runtime_dir":
        # a repository-scoped key (containers-auth.json) beats the registry's own
        scoped = {"auths": {host: {"auth": b64(f"{USER}:not-this-one")},
                            f"{host}/private": {"auth": b64(f"{USER}:{password}")}}}
        write_json(tmp_path / "xdg/containers/auth.json", scoped)
        monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path / "xdg"))
    elif source == "xdg_config_home":
        # containers-auth.json(5)'s second place: ~/.config/containers/auth.json
        write_json(tmp_path / "home/.config/containers/auth.json", auth)
    elif source == "docker_config":
        write_json(tmp_path / "dc/config.json", auth)
        monkeypatch.setenv("DOCKER_CONFIG", str(tmp_path / "dc"))
    elif source == "home_docker_url_key":
        write_json(tmp_path / "home/.docker/config.json",
                   {"auths": {f"http://{host}/v2/": {"auth": b64(f"{USER}:{password}")}}})
    elif source == "cred_helper":
        fake_helper(tmp_path, monkeypatch, host, password=password)
        write_json(tmp_path / "home/.docker/config.json",
                   {"credHelpers": {host: "imgbuildfake"}, "auths": {}})
    elif source == "creds_store":
        fake_helper(tmp_path, monkeypatch, host, password=password)
        write_json(tmp_path / "home/.docker/config.json",
                   {"credsStore": "imgbuildfake", "auths": {host: {}}})
    elif source == "authfile_option":
        return ["--authfile", write_json(tmp_path / "elsewhere.json", auth)]
    elif source == "creds_option":
        return ["--creds", f"{USER}:{password}"]
    return []


def test_skopeo_login_then_imgbuild_pull(basic_registry, tmp_path, monkeypatch):
    """A CI script's `skopeo login` (podman's code: containers/image) writes
    $XDG_RUNTIME_DIR/containers/auth.json; imgbuild pull then just works."""
    host = basic_registry
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path / "run"))
    (tmp_path / "run").mkdir(mode=0o700)
    p = subprocess.run(["skopeo", "login", "--tls-verify=false", "-u", USER, "--password-stdin",
                        host], input=PASSWORD, capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    assert (tmp_path / "run/containers/auth.json").exists()
    r = imgbuild("pull", f"{host}/private/tiny:1", store=tmp_path / "s")
    assert r.rc == 0, r
    assert stored_layers(tmp_path / "s", f"{host}/private/tiny:1") == remote_layers(host, "private/tiny:1")


def stored_layers(store, name):
    r = imgbuild("inspect", name, store=store)
    assert r.rc == 0, r
    return [l["digest"] for l in json.loads(r.out)["manifest"]["layers"]]


@pytest.mark.parametrize("source", SOURCES)
def test_pull_basic_registry_with_credentials_from(source, basic_registry, tmp_path, monkeypatch):
    host = basic_registry
    opts = configure(source, host, tmp_path, monkeypatch)
    r = imgbuild("pull", *opts, f"{host}/private/tiny:1", store=tmp_path / "s")
    assert r.rc == 0, r
    assert stored_layers(tmp_path / "s", f"{host}/private/tiny:1") == remote_layers(host, "private/tiny:1")


@pytest.mark.parametrize("source", SOURCES)
def test_pull_token_registry_with_credentials_from(source, token_registry, tmp_path, monkeypatch):
    host, log = token_registry
    opts = configure(source, host, tmp_path, monkeypatch)
    before = len(token_log(log))
    r = imgbuild("pull", *opts, f"{host}/private/tiny:1", store=tmp_path / "s")
    assert r.rc == 0, r
    ours = token_log(log)[before:]
    assert stored_layers(tmp_path / "s", f"{host}/private/tiny:1") == remote_layers(host, "private/tiny:1")
    assert ours[0]["user"] == USER and ours[0]["how"] == "basic"
    assert ours[0]["scopes"] == ["repository:private/tiny:pull"]
    # one token for the whole pull (manifest, config and four layers)
    assert len([e for e in ours if e["scopes"] == ["repository:private/tiny:pull"]]) == 1


@pytest.mark.parametrize("kind", ["basic", "token"])
@pytest.mark.parametrize("source", ["registry_auth_file", "creds_option", "cred_helper"])
def test_push_with_credentials(kind, source, basic_registry, token_registry, tmp_path, monkeypatch):
    host = basic_registry if kind == "basic" else token_registry[0]
    opts = configure(source, host, tmp_path, monkeypatch)
    s = tmp_path / "s"
    assert imgbuild("pull", *opts, f"{host}/private/tiny:1", store=s).rc == 0
    dst = f"pushed/{kind}-{source.replace('_', '-')}:2"
    r = imgbuild("push", *opts, f"{host}/private/tiny:1", f"{host}/{dst}", store=s)
    assert r.rc == 0, r
    assert remote_layers(host, dst) == remote_layers(host, "private/tiny:1")


@pytest.mark.parametrize("kind", ["basic", "token"])
def test_login_pull_logout(kind, basic_registry, token_registry, tmp_path, monkeypatch):
    host = basic_registry if kind == "basic" else token_registry[0]
    authfile = write_json(tmp_path / "auth.json", {"auths": {"other.example": {"auth": b64("a:b")}},
                                                   "credHelpers": {"x.example": "none"}})
    monkeypatch.setenv("REGISTRY_AUTH_FILE", str(authfile))
    s = tmp_path / "s"
    r = imgbuild("login", "-u", USER, "--password-stdin", host, store=s, input=PASSWORD + "\n")
    assert r.rc == 0, r
    assert "login succeeded" in r.out.lower()
    saved = json.loads(authfile.read_text())
    assert saved["auths"][host] == {"auth": b64(f"{USER}:{PASSWORD}")}
    assert saved["auths"]["other.example"] == {"auth": b64("a:b")}
    assert saved["credHelpers"] == {"x.example": "none"}
    assert stat.S_IMODE(authfile.stat().st_mode) == 0o600
    r = imgbuild("pull", f"{host}/private/tiny:1", store=s)
    assert r.rc == 0, r
    r = imgbuild("logout", host, store=s)
    assert r.rc == 0, r
    saved = json.loads(authfile.read_text())
    assert host not in saved["auths"] and "other.example" in saved["auths"]
    r = imgbuild("pull", f"{host}/private/tiny:1", store=tmp_path / "s2")
    assert r.rc != 0
    assert f"{host} requires authentication: run imgbuild login {host}" in r.err, r
    assert len(r.err.strip().splitlines()) == 1
    assert not (tmp_path / "s2/index.json").exists() or \
        "private/tiny" not in (tmp_path / "s2/index.json").read_text()
    r = imgbuild("logout", host, store=s)
    assert r.rc != 0 and "not logged in" in r.err
    r = imgbuild("logout", "--all", store=s)
    assert r.rc == 0, r
    assert json.loads(authfile.read_text())["auths"] == {}


def test_login_default_file_is_xdg_then_docker(basic_registry, tmp_path, monkeypatch):
    host = basic_registry
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path / "xdg"))
    r = imgbuild("login", "-u", USER, "-p", PASSWORD, host, store=tmp_path / "s")
    assert r.rc == 0, r
    f = tmp_path / "xdg/containers/auth.json"
    assert json.loads(f.read_text())["auths"][host]["auth"] == b64(f"{USER}:{PASSWORD}")
    monkeypatch.delenv("XDG_RUNTIME_DIR")
    r = imgbuild("login", "--password-stdin", "-u", USER, host, store=tmp_path / "s", input=PASSWORD)
    assert r.rc == 0, r
    f = tmp_path / "home/.docker/config.json"
    assert json.loads(f.read_text())["auths"][host]["auth"] == b64(f"{USER}:{PASSWORD}")
    assert stat.S_IMODE(f.stat().st_mode) == 0o600


@pytest.mark.parametrize("kind", ["basic", "token"])
def test_login_wrong_password_leaves_file_alone(kind, basic_registry, token_registry, tmp_path):
    host = basic_registry if kind == "basic" else token_registry[0]
    authfile = write_json(tmp_path / "auth.json", {"auths": {host: {"auth": b64(f"{USER}:{PASSWORD}")}}})
    before = authfile.read_bytes()
    r = imgbuild("login", "--authfile", authfile, "-u", USER, "--password-stdin", host,
                 store=tmp_path / "s", input="wrong\n")
    assert r.rc != 0
    assert f"login {host}: wrong username or password" in r.err, r
    assert "succeeded" not in r.out.lower()
    assert authfile.read_bytes() == before


def test_login_without_a_terminal_is_a_usage_error(basic_registry, tmp_path):
    r = imgbuild("login", basic_registry, store=tmp_path / "s", input="")
    assert r.rc == 2
    assert "not a terminal" in r.err and "--password-stdin" in r.err
    assert not (tmp_path / "home/.docker").exists()


@pytest.mark.parametrize("kind", ["basic", "token"])
def test_pull_wrong_password_says_so(kind, basic_registry, token_registry, tmp_path, monkeypatch):
    host = basic_registry if kind == "basic" else token_registry[0]
    configure("registry_auth_file", host, tmp_path, monkeypatch, password="wrong")
    r = imgbuild("pull", f"{host}/private/tiny:1", store=tmp_path / "s")
    assert r.rc != 0
    assert f"wrong username or password for {host}" in r.err, r
    assert str(tmp_path / "auth.json") in r.err  # says where the credentials came from
    assert len(r.err.strip().splitlines()) == 1


def test_missing_cred_helper_is_a_clear_error(basic_registry, tmp_path):
    host = basic_registry
    write_json(tmp_path / "home/.docker/config.json", {"credHelpers": {host: "imgbuild-no-such"}})
    r = imgbuild("pull", f"{host}/private/tiny:1", store=tmp_path / "s")
    assert r.rc != 0
    assert "docker-credential-imgbuild-no-such not found" in r.err, r


def test_cred_helper_not_found_means_anonymous(token_registry, tmp_path, monkeypatch):
    host, _ = token_registry
    log = fake_helper(tmp_path, monkeypatch, "some-other-host")
    write_json(tmp_path / "home/.docker/config.json", {"credHelpers": {host: "imgbuildfake"}})
    r = imgbuild("pull", f"{host}/public/tiny:1", store=tmp_path / "s")
    assert r.rc == 0, r
    assert log.read_text() == f"get {host}\n"
    r = imgbuild("pull", f"{host}/private/tiny:1", store=tmp_path / "s")
    assert r.rc != 0 and f"run imgbuild login {host}" in r.err


def test_anonymous_pull_of_public_repository(token_registry, tmp_path):
    host, log = token_registry
    before = len(token_log(log))
    r = imgbuild("pull", f"{host}/public/tiny:1", store=tmp_path / "s")
    assert r.rc == 0, r
    ours = token_log(log)[before:]
    assert stored_layers(tmp_path / "s", f"{host}/public/tiny:1") == remote_layers(host, "public/tiny:1")
    assert ours and all(e["user"] is None and e["how"] == "anonymous" for e in ours)
    # a missing repository is "not found or access denied" to an anonymous user
    r = imgbuild("pull", f"{host}/nothing/here:1", store=tmp_path / "s")
    assert r.rc != 0
    assert "not found or access denied" in r.err and "imgbuild login" in r.err, r


def test_missing_tag_with_credentials_says_manifest_unknown(token_registry, tmp_path, monkeypatch):
    host, _ = token_registry
    opts = configure("creds_option", host, tmp_path, monkeypatch)
    r = imgbuild("pull", *opts, f"{host}/private/tiny:no-such-tag", store=tmp_path / "s")
    assert r.rc != 0
    assert "no-such-tag" in r.err and "manifest unknown" in r.err, r


def test_identity_token_uses_oauth2_refresh(token_registry, tmp_path, monkeypatch):
    host, log = token_registry
    write_json(tmp_path / "auth.json", {"auths": {host: {"auth": b64(f"{USER}:"),
                                                         "identitytoken": REFRESH_TOKEN}}})
    monkeypatch.setenv("REGISTRY_AUTH_FILE", str(tmp_path / "auth.json"))
    before = len(token_log(log))
    r = imgbuild("pull", f"{host}/private/tiny:1", store=tmp_path / "s")
    assert r.rc == 0, r
    ours = token_log(log)[before:]
    assert ours and all(e["method"] == "POST" and e["how"] == "refresh_token" for e in ours)
    write_json(tmp_path / "auth.json", {"auths": {host: {"identitytoken": "revoked"}}})
    r = imgbuild("pull", f"{host}/private/tiny:1", store=tmp_path / "s2")
    assert r.rc != 0
    assert "identity token" in r.err and f"imgbuild login {host}" in r.err, r


class DelayProxy:
    """A plain HTTP proxy in front of a registry that delays every request,
    so that a push outlives short-lived tokens."""

    def __init__(self, upstream, delay):
        up_host, up_port = upstream.rsplit(":", 1)
        outer = self
        self.requests = 0
        self.unauthorized = 0

        class H(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *a):
                pass

            def handle_one(self):
                time.sleep(delay)
                outer.requests += 1
                n = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(n) if n else None
                c = http.client.HTTPConnection(up_host, int(up_port), timeout=60)
                hdrs = {k: v for k, v in self.headers.items() if k.lower() != "connection"}
                c.request(self.command, self.path, body=body, headers=hdrs)
                resp = c.getresponse()
                data = resp.read()
                outer.unauthorized += resp.status == 401
                self.send_response(resp.status)
                for k, v in resp.getheaders():
                    if k.lower() not in ("connection", "transfer-encoding", "content-length"):
                        self.send_header(k, v)
                self.send_header("Content-Length", resp.getheader("Content-Length", str(len(data)))
                                 if self.command == "HEAD" else str(len(data)))
                self.end_headers()
                if self.command != "HEAD":
                    self.wfile.write(data)
                c.close()

            do_GET = do_HEAD = do_POST = do_PUT = do_PATCH = do_DELETE = handle_one

        self.srv = ThreadingHTTPServer(("127.0.0.1", 0), H)
        self.srv.daemon_threads = True
        self.host = f"127.0.0.1:{self.srv.server_address[1]}"
        threading.Thread(target=self.srv.serve_forever, daemon=True).start()

    def close(self):
        self.srv.shutdown()
        self.srv.server_close()


def test_token_expiry_refresh_during_push(tmp_path_factory, tiny_layout, tmp_path, monkeypatch):
    d = tmp_path_factory.mktemp("short-token-registry")
    host = start_registry(d, "token", {"IMGBUILD_TOKEN_EXPIRES_IN": "2"})
    proxy = DelayProxy(host, 0.25)
    try:
        push_tiny(tiny_layout, host, "private/tiny:1")
        opts = configure("creds_option", proxy.host, tmp_path, monkeypatch)
        s = tmp_path / "s"
        r = imgbuild("pull", *opts, f"{host}/private/tiny:1", store=s)
        assert r.rc == 0, r
        before = len(token_log(d / "token-log"))
        t0 = time.monotonic()
        r = imgbuild("push", *opts, f"{host}/private/tiny:1", f"{proxy.host}/copy/tiny:1", store=s)
        took = time.monotonic() - t0
        assert r.rc == 0, r
        assert took > 4, f"the push took {took:.1f} s: too short to outlive a 2 s token"
        assert remote_layers(host, "copy/tiny:1") == remote_layers(host, "private/tiny:1")
        push_tokens = [e for e in token_log(d / "token-log")[before:]
                       if e["scopes"] == ["repository:copy/tiny:pull,push"]]
        # the registry refuses a token 2-3 s after it was issued (token-server.py):
        # success over more than 4 s needs fresh tokens ...
        assert len(push_tokens) >= 2, push_tokens
        # ... fetched before expiry: no request was refused but the first ping
        assert proxy.unauthorized == 1
    finally:
        proxy.close()
        stop_registry(d)


class StubRegistry:
    """Basic-auth registry stub whose blobs answer 307 to a second server on
    another port (another origin, like S3/CDN blob storage)."""

    def __init__(self):
        layer_tar = io.BytesIO()
        with tarfile.open(fileobj=layer_tar, mode="w") as t:
            data = b"redirected\n"
            info = tarfile.TarInfo("hello.txt")
            info.size = len(data)
            t.addfile(info, io.BytesIO(data))
        layer = gzip.compress(layer_tar.getvalue(), mtime=0)
        diff_id = "sha256:" + hashlib.sha256(layer_tar.getvalue()).hexdigest()
        config = json.dumps({"architecture": "amd64", "os": "linux", "config": {},
                             "rootfs": {"type": "layers", "diff_ids": [diff_id]}}).encode()
        dig = lambda b: "sha256:" + hashlib.sha256(b).hexdigest()
        self.blobs = {dig(layer): layer, dig(config): config}
        self.manifest = json.dumps({
            "schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json",
            "config": {"mediaType": "application/vnd.oci.image.config.v1+json",
                       "digest": dig(config), "size": len(config)},
            "layers": [{"mediaType": "application/vnd.oci.image.layer.v1.tar+gzip",
                        "digest": dig(layer), "size": len(layer)}]}).encode()
        self.cdn_auth_headers = []
        self.registry_auth_headers = []
        outer = self
        want = "Basic " + b64(f"{USER}:{PASSWORD}")

        def reply(h, status, body=b"", headers=()):
            h.send_response(status)
            for k, v in headers:
                h.send_header(k, v)
            h.send_header("Content-Length", str(len(body)))
            h.end_headers()
            if h.command != "HEAD":
                h.wfile.write(body)

        class CDN(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *a):
                pass

            def do_GET(self):
                outer.cdn_auth_headers.append(self.headers.get("Authorization"))
                blob = outer.blobs.get(self.path.rsplit("/", 1)[-1])
                reply(self, 200 if blob else 404, blob or b"")

        class Reg(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *a):
                pass

            def do_GET(self):
                outer.registry_auth_headers.append(self.headers.get("Authorization"))
                if self.headers.get("Authorization") != want:
                    return reply(self, 401, b'{"errors":[{"code":"UNAUTHORIZED"}]}',
                                 [("WWW-Authenticate", 'Basic realm="stub"')])
                if self.path == "/v2/":
                    return reply(self, 200, b"{}")
                if "/manifests/" in self.path:
                    return reply(self, 200, outer.manifest,
                                 [("Content-Type", "application/vnd.oci.image.manifest.v1+json")])
                if "/blobs/" in self.path:
                    d = self.path.rsplit("/", 1)[-1]
                    return reply(self, 307, b"", [("Location", f"http://{outer.cdn_host}/store/{d}")])
                reply(self, 404)

            do_HEAD = do_GET

        self.cdn = ThreadingHTTPServer(("127.0.0.1", 0), CDN)
        self.reg = ThreadingHTTPServer(("127.0.0.1", 0), Reg)
        self.cdn_host = f"127.0.0.1:{self.cdn.server_address[1]}"
        self.host = f"127.0.0.1:{self.reg.server_address[1]}"
        for s in (self.cdn, self.reg):
            s.daemon_threads = True
            threading.Thread(target=s.serve_forever, daemon=True).start()

    def close(self):
        for s in (self.cdn, self.reg):
            s.shutdown()
            s.server_close()


def test_no_authorization_to_another_host_after_redirect(tmp_path, monkeypatch):
    stub = StubRegistry()
    try:
        opts = configure("registry_auth_file", stub.host, tmp_path, monkeypatch)
        r = imgbuild("pull", *opts, f"{stub.host}/redir/img:1", store=tmp_path / "s")
        assert r.rc == 0, r
        assert len(stub.cdn_auth_headers) == 2  # config and layer, both from the other host
        assert stub.cdn_auth_headers == [None, None]
        assert "Basic " + b64(f"{USER}:{PASSWORD}") in stub.registry_auth_headers
        for d, blob in stub.blobs.items():
            assert (tmp_path / "s/blobs/sha256" / d.split(":")[1]).read_bytes() == blob
    finally:
        stub.close()


def test_login_prompts_on_a_terminal_without_echo(basic_registry, tmp_path):
    import pty
    from conftest import IMGBUILD
    host = basic_registry
    authfile = tmp_path / "auth.json"
    pid, fd = pty.fork()
    if pid == 0:
        os.execv(str(IMGBUILD), ["imgbuild", "--store", str(tmp_path / "s"), "login",
                                 "--authfile", str(authfile), host])
    out = b""

    def read_until(s):
        nonlocal out
        deadline = time.monotonic() + 30
        while s not in out and time.monotonic() < deadline:
            if select.select([fd], [], [], max(0, deadline - time.monotonic()))[0]:
                out += os.read(fd, 1024)
        assert s in out, out

    read_until(b"Username: ")
    os.write(fd, f"{USER}\n".encode())
    read_until(b"Password: ")
    os.write(fd, f"{PASSWORD}\n".encode())
    deadline = time.monotonic() + 60
    try:
        while time.monotonic() < deadline:
            if not select.select([fd], [], [], 1)[0]:
                continue
            chunk = os.read(fd, 1024)
            if not chunk:
                break
            out += chunk
    except OSError:  # EIO once the child has closed the terminal
        pass
    if time.monotonic() >= deadline:
        os.kill(pid, 9)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0, out
    assert b"Login Succeeded" in out
    assert PASSWORD.encode() not in out  # not echoed
    assert json.loads(authfile.read_text())["auths"][host]["auth"] == b64(f"{USER}:{PASSWORD}")
