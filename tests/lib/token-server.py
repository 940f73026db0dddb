#!/usr/bin/env python3
"""A small token server for tests: the distribution token spec
(https://distribution.github.io/distribution/spec/auth/token/ and
spec/auth/oauth/), enough for Debian's docker-registry 2.8 with
`auth: token:` to accept what it issues.

  GET  /token?service=S&scope=A&scope=B[&account=U]   (Basic auth or anonymous)
  POST /token  grant_type=refresh_token|password, service, client_id, scope,
               refresh_token | username+password (OAuth2 form)

Users and grants (a simple rule set):
  - the users of --user NAME:PASSWORD get every action they ask for on any
    repository;
  - anonymous requests get `pull` on repositories under `public/` only;
  - anything else is left out of the token (the registry then answers 401
    insufficient_scope), as real token servers do.
Wrong Basic credentials -> 401.  --refresh-token NAME:TOKEN accepts TOKEN as
an OAuth2 refresh token (a Docker "identitytoken") for NAME.

JWTs are RS256, signed with --key; the header carries the certificate
(--cert, self-signed, also the registry's rootcertbundle) as `x5c`, which is
how distribution 2.8 finds the signing key.  distribution accepts a token
up to 60 s after its `exp` (leeway), so `exp` is set to
iat + expires_in + 1 - 60: the registry refuses a token expires_in to
expires_in + 1 seconds after it was issued (iat and issued_at are whole
seconds, rounded down), which lets a test see expiry.

Every request is appended as one JSON line to --log (method, user, scopes
asked, actions granted).  Listens on 127.0.0.1 on a free port (written to
--port-file) and exits by itself after --lifetime seconds.
"""
import argparse
import base64
import datetime
import json
import os
import secrets
import threading
import time
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import padding

LEEWAY = 60  # seconds distribution adds to exp


def b64url(data):
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


class Config:
    pass


CFG = Config()
LOG_LOCK = threading.Lock()


def grant(user, scope):
    """-> {"type","name","actions"} or None for one scope string."""
    parts = scope.split(":")
    if len(parts) < 3:
        return None
    typ, name, actions = parts[0], ":".join(parts[1:-1]), parts[-1].split(",")
    if typ != "repository":
        return None
    if user is not None:
        allowed = actions
    elif name.startswith("public/"):
        allowed = [a for a in actions if a == "pull"]
    else:
        allowed = []
    return {"type": typ, "name": name, "actions": allowed}


def make_jwt(user, access):
    now = int(time.time())
    header = {"typ": "JWT", "alg": "RS256", "x5c": [CFG.cert_b64]}
    claims = {"iss": CFG.issuer, "sub": user or "", "aud": CFG.service,
              "exp": now + CFG.expires_in + 1 - LEEWAY, "nbf": now - 1, "iat": now,
              "jti": secrets.token_hex(16), "access": access}
    signing_input = (b64url(json.dumps(header).encode()) + "." +
                     b64url(json.dumps(claims).encode())).encode()
    sig = CFG.key.sign(signing_input, padding.PKCS1v15(), hashes.SHA256())
    return signing_input.decode() + "." + b64url(sig)


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, fmt, *args):  # quiet
        pass

    def reply(self, status, obj, extra=None):
        body = json.dumps(obj).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        for k, v in (extra or {}).items():
            self.send_header(k, v)
        self.end_headers()
        self.wfile.write(body)

    def record(self, **kw):
        kw["time"] = time.time()
        with LOG_LOCK, open(CFG.log, "a") as f:
            f.write(json.dumps(kw) + "\n")

    def issue(self, method, user, scopes, how, oauth):
        access = [g for g in (grant(user, s) for s in scopes) if g is not None]
        token = make_jwt(user, access)
        self.record(method=method, user=user, how=how, scopes=scopes,
                    granted=[f"{a['name']}:{','.join(a['actions'])}" for a in access])
        issued = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
        if oauth:  # OAuth2 answers name it access_token
            ans = {"access_token": token, "expires_in": CFG.expires_in, "issued_at": issued,
                   "scope": " ".join(scopes)}
        else:
            ans = {"token": token, "expires_in": CFG.expires_in, "issued_at": issued}
        self.reply(200, ans)

    def do_GET(self):
        u = urllib.parse.urlparse(self.path)
        if u.path != "/token":
            return self.reply(404, {"errors": [{"code": "NOT_FOUND"}]})
        q = urllib.parse.parse_qs(u.query)
        if q.get("service", [None])[0] != CFG.service:
            return self.reply(400, {"errors": [{"code": "INVALID_SERVICE"}]})
        user = None
        auth = self.headers.get("Authorization")
        if auth:
            if not auth.startswith("Basic "):
                return self.reply(400, {"errors": [{"code": "UNSUPPORTED"}]})
            try:
                name, _, pw = base64.b64decode(auth[6:]).decode().partition(":")
            except Exception:
                name, pw = "", None
            if CFG.users.get(name) != pw:
                self.record(method="GET", user=name, how="basic-refused", scopes=q.get("scope", []),
                            granted=[])
                return self.reply(401, {"errors": [{"code": "UNAUTHORIZED",
                                                    "message": "authentication failed"}]},
                                  {"WWW-Authenticate": 'Basic realm="imgbuild-test-token"'})
            user = name
        elif CFG.deny_anonymous:
            return self.reply(401, {"errors": [{"code": "UNAUTHORIZED"}]},
                              {"WWW-Authenticate": 'Basic realm="imgbuild-test-token"'})
        self.issue("GET", user, q.get("scope", []), "basic" if user else "anonymous", False)

    def do_POST(self):
        u = urllib.parse.urlparse(self.path)
        n = int(self.headers.get("Content-Length") or 0)
        form = urllib.parse.parse_qs(self.rfile.read(n).decode())
        if u.path != "/token":
            return self.reply(404, {"errors": [{"code": "NOT_FOUND"}]})
        f = {k: v[0] for k, v in form.items()}
        if f.get("service") != CFG.service:
            return self.reply(400, {"error": "invalid_request"})
        scopes = f.get("scope", "").split()
        if f.get("grant_type") == "refresh_token":
            user = CFG.refresh.get(f.get("refresh_token"))
            if user is None:
                self.record(method="POST", user=None, how="refresh-refused", scopes=scopes,
                            granted=[])
                return self.reply(401, {"error": "invalid_grant"})
            return self.issue("POST", user, scopes, "refresh_token", True)
        if f.get("grant_type") == "password":
            if CFG.users.get(f.get("username")) != f.get("password"):
                return self.reply(401, {"error": "invalid_grant"})
            return self.issue("POST", f["username"], scopes, "password", True)
        return self.reply(400, {"error": "unsupported_grant_type"})


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--key", required=True)
    ap.add_argument("--cert", required=True)
    ap.add_argument("--issuer", required=True)
    ap.add_argument("--service", required=True)
    ap.add_argument("--user", action="append", default=[], help="NAME:PASSWORD")
    ap.add_argument("--refresh-token", action="append", default=[], help="NAME:TOKEN")
    ap.add_argument("--expires-in", type=int, default=300)
    ap.add_argument("--deny-anonymous", action="store_true")
    ap.add_argument("--lifetime", type=float, default=3 * 3600)
    ap.add_argument("--port-file", required=True)
    ap.add_argument("--log", required=True)
    a = ap.parse_args()
    with open(a.key, "rb") as f:
        CFG.key = serialization.load_pem_private_key(f.read(), password=None)
    with open(a.cert, "rb") as f:
        cert = x509.load_pem_x509_certificate(f.read())
    CFG.cert_b64 = base64.b64encode(cert.public_bytes(serialization.Encoding.DER)).decode()
    CFG.issuer, CFG.service, CFG.expires_in = a.issuer, a.service, a.expires_in
    CFG.users = dict(u.split(":", 1) for u in a.user)
    CFG.refresh = {t.split(":", 1)[1]: t.split(":", 1)[0] for t in a.refresh_token}
    CFG.deny_anonymous = a.deny_anonymous
    CFG.log = a.log
    srv = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    srv.daemon_threads = True
    tmp = a.port_file + ".tmp"
    with open(tmp, "w") as f:
        f.write(str(srv.server_address[1]))
    os.rename(tmp, a.port_file)
    t = threading.Timer(a.lifetime, lambda: os._exit(0))
    t.daemon = True
    t.start()
    srv.serve_forever()


if __name__ == "__main__":
    main()
