#!/usr/bin/env python3
"""A fault-injecting reverse proxy in front of a registry, for tests.

    faultproxy.py --upstream 127.0.0.1:PORT --spec SPEC --log FILE [--lifetime SECONDS]

Listens on 127.0.0.1 on a free port, prints "PORT\\n" on stdout when ready,
forwards every request to the upstream registry (Range and Authorization
included, Location headers rewritten to point back here) and exits by
itself after --lifetime seconds (default 600).

SPEC is JSON (or @FILE holding it): a list of faults, each applied to the
first `times` (default 1) requests whose path matches the regex `match`
(re.search) and, when given, whose method is `method`:

  {"fault": "drop", "after_bytes": K}      send the status line, headers and K bytes
                                           of the body, then close the connection
  {"fault": "status", "code": 503}         answer this status instead of forwarding;
        "retry_after": "1"                 with a Retry-After header (seconds), or
        "retry_after": "date:+2"           an HTTP-date 2 s from now
  {"fault": "corrupt", "offset": N}        flip one byte of the body (default: its middle)
  {"fault": "stall", "seconds": S}         send the headers, then nothing for S seconds,
                                           then close the connection
  {"fault": "drip", "rate": 4}             send the status line and headers, then the
                                           body at `rate` bytes a second (a slow-loris
                                           registry, or a slow link when the rate is high)
  {"fault": "silent", "seconds": S}        read the request, answer nothing for S seconds
                                           (default 600), then close the connection
  {"fault": "reset_headers"}               send half a status line and headers, then
                                           reset the connection (RST)
  {"fault": "paginate", "n": 1}            a tag list (GET .../tags/list) served in pages
                                           of n tags as distribution-spec "Listing Tags"
                                           says: the upstream's whole list cut after the
                                           `last` query parameter, with a Link header
                                           `<PATH?n=N&last=TAG>; rel="next"` while more
                                           remain (the registry here has no pagination)

The log FILE (JSON, rewritten when a request arrives, before its answer is
sent -- so a client that has its answer finds it logged -- and when it is done)
is a list, in order of arrival, of
{"t", "method", "path", "range", "auth", "status", "fault", "sent"}:
the time the request arrived (seconds since the epoch), its Range header
or null, whether it carried Authorization, the status sent (null when
none was), the fault applied (null) and the body bytes sent.
Python standard library only.
"""
import argparse
import email.utils
import http.client
import http.server
import json
import os
import re
import socket
import struct
import sys
import threading
import time

HOP = {"connection", "keep-alive", "proxy-connection", "transfer-encoding", "te", "trailer",
       "upgrade", "content-length", "host"}


class State:
    def __init__(self, upstream, faults, log_path):
        self.upstream = upstream
        self.faults = faults
        for f in self.faults:
            f.setdefault("times", 1)
            f["used"] = 0
            f["re"] = re.compile(f["match"])
        self.log_path = log_path
        self.log = []
        self.lock = threading.Lock()
        self.base = None

    def pick(self, method, path):
        with self.lock:
            for f in self.faults:
                if f.get("method") and f["method"] != method:
                    continue
                if f["re"].search(path) and f["used"] < f["times"]:
                    f["used"] += 1
                    return f
        return None

    def record(self, entry, new):
        with self.lock:
            if new:
                self.log.append(entry)
            tmp = f"{self.log_path}.tmp"
            with open(tmp, "w") as fp:
                json.dump(self.log, fp, indent=1)
            os.replace(tmp, self.log_path)


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    state = None

    def log_message(self, fmt, *args):
        pass

    def _handle(self):
        st = self.state
        entry = {"t": time.time(), "method": self.command, "path": self.path,
                 "range": self.headers.get("Range"), "auth": "Authorization" in self.headers,
                 "status": None, "fault": None, "sent": 0}
        st.record(entry, True)  # at once: a stalled request shows up while it stalls
        try:
            self._serve(st, entry)
        finally:
            st.record(entry, False)

    def _serve(self, st, entry):
        n = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(n) if n else None
        fault = st.pick(self.command, self.path)
        kind = fault["fault"] if fault else None
        entry["fault"] = kind

        if kind == "status":
            code = int(fault["code"])
            payload = json.dumps({"errors": [{"code": "TOOMANYREQUESTS" if code == 429 else "UNAVAILABLE",
                                              "message": "injected by faultproxy"}]}).encode()
            # logged before it is sent: the log is up to date when the client has it
            entry["status"], entry["sent"] = code, len(payload)
            st.record(entry, False)
            self.send_response(code)
            ra = fault.get("retry_after")
            if ra is not None:
                if str(ra).startswith("date:"):
                    ra = email.utils.formatdate(time.time() + float(ra[5:]), usegmt=True)
                self.send_header("Retry-After", str(ra))
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)
            return
        if kind == "silent":
            time.sleep(float(fault.get("seconds", 600)))
            self._close()
            return
        if kind == "reset_headers":
            self.wfile.write(b"HTTP/1.1 200 OK\r\nContent-Ty")
            self.wfile.flush()
            self._reset()
            return

        conn = http.client.HTTPConnection(st.upstream, timeout=120)
        headers = {k: v for k, v in self.headers.items() if k.lower() not in HOP}
        headers["Host"] = st.upstream
        path = self.path
        if kind == "paginate":
            path, _, query = self.path.partition("?")
        conn.request(self.command, path, body=body, headers=headers)
        resp = conn.getresponse()
        data = resp.read()
        conn.close()
        if kind == "corrupt" and data:
            data = bytearray(data)
            off = int(fault.get("offset", len(data) // 2)) % len(data)
            data[off] ^= 0xFF
            data = bytes(data)

        extra = []
        if kind == "paginate" and resp.status == 200:
            import urllib.parse
            q = urllib.parse.parse_qs(query)
            doc = json.loads(data)
            tags = sorted(doc.get("tags") or [])
            if "last" in q:
                tags = [t for t in tags if t > q["last"][0]]
            n = int(fault.get("n", 1))
            page, rest = tags[:n], tags[n:]
            doc["tags"] = page
            data = json.dumps(doc).encode()
            if rest:
                extra.append(("Link", f'<{path}?n={n}&last={urllib.parse.quote(page[-1])}>; rel="next"'))
        entry["status"] = resp.status
        if self.command == "HEAD" or kind not in ("drop", "drip", "stall"):
            entry["sent"] = 0 if self.command == "HEAD" else len(data)
        elif kind == "drop":
            entry["sent"] = min(int(fault.get("after_bytes", 0)), len(data))
        st.record(entry, False)  # before the client can have it
        self.send_response(resp.status)
        for k, v in extra:
            self.send_header(k, v)
        for k, v in resp.getheaders():
            if k.lower() in HOP:
                continue
            if k.lower() == "location" and v.startswith(f"http://{st.upstream}"):
                v = st.base + v[len(f"http://{st.upstream}"):]
            self.send_header(k, v)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        if self.command == "HEAD":
            return
        if kind == "drop":
            k = min(int(fault.get("after_bytes", 0)), len(data))
            self.wfile.write(data[:k])
            self.wfile.flush()
            self._close()
            return
        if kind == "drip":
            self.wfile.flush()
            self._drip(data, float(fault.get("rate", 4)), entry)
            return
        if kind == "stall":
            self.wfile.flush()
            time.sleep(float(fault.get("seconds", 30)))
            self._close()
            return
        try:
            self.wfile.write(data)
        except OSError:
            entry["sent"] = 0  # the client hung up: how much it got is unknown
            raise

    def _drip(self, data, rate, entry):
        """Send `data` at `rate` bytes/s: a piece every 0.1 s (one byte every
        1/rate s when that is slower); stop when the client hangs up.  The
        log's "sent" counts the piece being sent (at most one piece more than
        the client got when it hung up)."""
        piece = max(1, int(rate / 10))
        start = time.monotonic()
        for off in range(0, len(data), piece):
            chunk = data[off:off + piece]
            # logged before it is sent: the log is up to date when the client has it
            entry["sent"] = off + len(chunk)
            self.state.record(entry, False)
            try:
                self.wfile.write(chunk)
                self.wfile.flush()
            except OSError:
                entry["sent"] = off
                self.close_connection = True
                return
            delay = start + (off + piece) / rate - time.monotonic()
            if delay > 0 and off + piece < len(data):
                time.sleep(delay)

    def _close(self):
        self.close_connection = True
        try:
            self.connection.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass

    def _reset(self):
        self.close_connection = True
        self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        self.connection.close()

    do_GET = do_HEAD = do_POST = do_PUT = do_PATCH = do_DELETE = _handle


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--upstream", required=True, help="HOST:PORT of the registry")
    ap.add_argument("--spec", default="[]", help="JSON list of faults, or @FILE")
    ap.add_argument("--log", required=True, help="JSON request log to write")
    ap.add_argument("--lifetime", type=float, default=600, help="exit after this many seconds")
    a = ap.parse_args()
    spec = a.spec
    if spec.startswith("@"):
        with open(spec[1:]) as fp:
            spec = fp.read()
    state = State(a.upstream, json.loads(spec), a.log)
    with open(a.log, "w") as fp:
        json.dump([], fp)
    Handler.state = state
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    srv.daemon_threads = True
    port = srv.server_address[1]
    state.base = f"http://127.0.0.1:{port}"
    t = threading.Timer(a.lifetime, lambda: os._exit(0))
    t.daemon = True
    t.start()
    print(port, flush=True)
    srv.serve_forever()


if __name__ == "__main__":
    sys.exit(main())
