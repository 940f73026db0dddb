"""ADD beyond COPY: local tar archives (plain, gzip, xz, bzip2, zstd;
recognised by content, not name) extracted into DEST, hostile archives
refused naming the entry, URLs downloaded from a server on 127.0.0.1
(mode 0600, Last-Modified as mtime, the URL's file name, --checksum
checked, content part of the cache key).  FROM scratch + busybox."""
import hashlib
import http.server
import io
import os
import shutil
import subprocess
import tarfile
import threading

import pytest

from conftest import imgbuild, write


def run(store, ref, *cmd):
    r = imgbuild("run", ref, "--", "/bin/busybox", *cmd, store=store)
    assert r.rc == 0, r
    return r.out


def make_tar(path, members, mode="w"):
    with tarfile.open(path, mode) as t:
        for name, data in members:
            info = tarfile.TarInfo(name)
            if data is None:
                info.type = tarfile.DIRTYPE
                info.mode = 0o755
                t.addfile(info)
            elif isinstance(data, tuple):  # ("symlink", target)
                info.type = tarfile.SYMTYPE
                info.linkname = data[1]
                t.addfile(info)
            else:
                info.size = len(data)
                info.mode = 0o640
                info.mtime = 1000000000
                t.addfile(info, io.BytesIO(data))


@pytest.fixture
def ctx(tmp_path):
    c = tmp_path / "ctx"
    c.mkdir()
    shutil.copy("/bin/busybox", c / "busybox")
    return c


def test_add_local_archives(tmp_path, ctx):
    store = tmp_path / "store"
    members = [("pkg", None), ("pkg/a.txt", b"alpha\n"), ("pkg/sub", None), ("pkg/sub/b.txt", b"beta\n")]
    make_tar(ctx / "plain.tar", members)
    make_tar(ctx / "g.tgz", members, "w:gz")
    make_tar(ctx / "x.tar.xz", members, "w:xz")
    make_tar(ctx / "b.tar.bz2", members, "w:bz2")
    subprocess.run(["zstd", "-q", "-f", str(ctx / "plain.tar"), "-o", str(ctx / "z.tar.zst")], check=True)
    shutil.copy(ctx / "g.tgz", ctx / "misnamed.bin")    # content decides, not the name
    write(ctx / "notatar.tar.gz", b"just text, not an archive\n")
    write(ctx / "r.recipe", """FROM scratch
COPY busybox /bin/busybox
ADD plain.tar /t/plain/
ADD g.tgz /t/gz/
ADD x.tar.xz /t/xz/
ADD b.tar.bz2 /t/bz2/
ADD z.tar.zst /t/zst/
ADD misnamed.bin /t/misnamed/
ADD notatar.tar.gz /t/copied/
COPY g.tgz /t/notextracted/
OUTPUT type=image,name=add-local:latest
""")
    r = imgbuild("build", ctx / "r.recipe", store=store)
    assert r.rc == 0, r
    for d in ("plain", "gz", "xz", "bz2", "zst", "misnamed"):
        assert run(store, "add-local:latest", "cat", f"/t/{d}/pkg/a.txt", f"/t/{d}/pkg/sub/b.txt") == "alpha\nbeta\n", d
    out = run(store, "add-local:latest", "stat", "-c", "%a %Y", "/t/gz/pkg/a.txt")
    assert out == "640 1000000000\n"                  # modes and times from the archive
    assert run(store, "add-local:latest", "cat", "/t/copied/notatar.tar.gz") == "just text, not an archive\n"
    assert run(store, "add-local:latest", "ls", "/t/notextracted") == "g.tgz\n"


@pytest.mark.parametrize("members,what", [
    ([("../escape.txt", b"x")], "../escape.txt"),
    ([("/abs.txt", b"x")], "/abs.txt"),
])
def test_add_hostile_archive_is_refused(tmp_path, ctx, members, what):
    store = tmp_path / "store"
    make_tar(ctx / "evil.tar", members)
    write(ctx / "r.recipe", "FROM scratch\nADD evil.tar /t/\n")
    r = imgbuild("build", ctx / "r.recipe", store=store)
    assert r.rc == 1, r
    assert "r.recipe:2: ADD: extract" in r.err and what in r.err, r.err
    assert not (tmp_path / "escape.txt").exists()


def test_add_archive_symlink_in_path_stays_inside(tmp_path, ctx):
    """A member under a symlink the archive made (link -> /) is not written
    through it: libarchive replaces the symlink by a directory
    (ARCHIVE_EXTRACT_SECURE_SYMLINKS with UNLINK), so the file stays in DEST."""
    store = tmp_path / "store"
    make_tar(ctx / "evil.tar", [("link", ("sym", "/")), ("link/owned", b"x")])
    write(ctx / "r.recipe", "FROM scratch\nCOPY busybox /bin/busybox\nADD evil.tar /t/\n"
                            "OUTPUT type=image,name=add-sym:latest\n")
    r = imgbuild("build", ctx / "r.recipe", store=store)
    assert r.rc == 0, r
    assert run(store, "add-sym:latest", "find", "/t") == "/t\n/t/link\n/t/link/owned\n"
    assert "owned" not in run(store, "add-sym:latest", "ls", "/")


class Server:
    def __init__(self, files):
        self.files = files
        self.hits = 0
        srv = self

        class H(http.server.BaseHTTPRequestHandler):
            def do_GET(self):
                srv.hits += 1
                body = srv.files.get(self.path.split("?")[0])
                if body is None:
                    self.send_response(404)
                    self.end_headers()
                    return
                self.send_response(200)
                self.send_header("Content-Length", str(len(body)))
                self.send_header("Last-Modified", "Wed, 01 Jan 2020 00:00:00 GMT")
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *a):
                pass

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), H)
        self.port = self.httpd.server_address[1]
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def url(self, path):
        return f"http://127.0.0.1:{self.port}{path}"


def test_add_url(tmp_path, ctx):
    store = tmp_path / "store"
    body = b"downloaded content\n"
    srv = Server({"/files/tool.sh": body, "/files/archive.tar.gz": b"not extracted"})
    try:
        good = "sha256:" + hashlib.sha256(body).hexdigest()
        write(ctx / "r.recipe", f"""FROM scratch
COPY busybox /bin/busybox
ADD --checksum={good} {srv.url("/files/tool.sh?x=1")} /opt/renamed.sh
ADD {srv.url("/files/tool.sh")} /opt/
ADD {srv.url("/files/archive.tar.gz")} /opt/
ADD {srv.url("/files/tool.sh")} /bin
OUTPUT type=image,name=add-url:latest
""")
        r = imgbuild("build", ctx / "r.recipe", store=store)
        assert r.rc == 0, r
        assert run(store, "add-url:latest", "cat", "/opt/tool.sh", "/opt/renamed.sh") == body.decode() * 2
        assert run(store, "add-url:latest", "stat", "-c", "%a %Y", "/opt/tool.sh") == "600 1577836800\n"
        assert run(store, "add-url:latest", "cat", "/opt/archive.tar.gz") == "not extracted"
        # an existing directory without '/': the file in it, by the URL's name
        assert run(store, "add-url:latest", "cat", "/bin/tool.sh") == body.decode()
        # the same content: cached (the URLs without --checksum are fetched to know)
        r = imgbuild("build", ctx / "r.recipe", store=store)
        assert r.rc == 0 and ", 0 run)" in r.err, r.err
        # new content behind the same URL: the step without --checksum
        # reruns; the one with it is keyed on its checksum and not fetched
        srv.files["/files/tool.sh"] = b"version 2\n"
        hits = srv.hits
        r = imgbuild("build", ctx / "r.recipe", store=store)
        assert r.rc == 0, r
        lines = [l for l in r.err.splitlines() if "] ADD " in l]
        assert lines[0].endswith("CACHED") and not lines[1].endswith("CACHED"), lines
        assert srv.hits - hits == 3  # tool.sh (twice) and archive.tar.gz, not tool.sh?x=1
        assert run(store, "add-url:latest", "cat", "/opt/tool.sh") == "version 2\n"
        # a wrong checksum fails, naming both digests
        bad = "sha256:" + "0" * 64
        write(ctx / "bad.recipe", f"FROM scratch\nADD --checksum={bad} {srv.url('/files/tool.sh')} /x\n")
        r = imgbuild("build", ctx / "bad.recipe", store=store)
        assert r.rc == 1 and "checksum mismatch: --checksum=" + bad in r.err, r.err
        write(ctx / "bad2.recipe", f"FROM scratch\nADD --checksum=md5:abc {srv.url('/files/tool.sh')} /x\n")
        r = imgbuild("build", ctx / "bad2.recipe", store=store)
        assert r.rc == 1 and "--checksum=md5:abc: expected sha256:<64 hex digits>" in r.err, r.err
        write(ctx / "missing.recipe", f"FROM scratch\nADD {srv.url('/nothing')} /x\n")
        r = imgbuild("build", ctx / "missing.recipe", store=store)
        assert r.rc == 1 and "HTTP status 404" in r.err and "/nothing" in r.err, r.err
    finally:
        srv.httpd.shutdown()
