"""Progress output of `imgbuild push`, `pull` and `unpack` (common/progress.c):
JSON lines, plain lines, quiet, and TTY bars on a pseudo-terminal."""
import fcntl
import json
import os
import pty
import re
import select
import socket
import struct
import subprocess
import termios
import time
import uuid

import pytest

from conftest import IMGBUILD, imgbuild, sh
from regutil import Registry

RFC3339_MS = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$")
PUSH_DONE = {"Pushed", "Layer already exists", "Already exists"}


@pytest.fixture(scope="module")
def pushed_src(registry, base_image, store):
    """The base image in the store, and the short ids of its blobs."""
    r = imgbuild("pull", base_image, store=store)
    assert r.rc == 0, r
    info = json.loads(imgbuild("inspect", base_image, store=store).out)
    blobs = [info["manifest"]["config"]] + info["manifest"]["layers"]
    return base_image, {b["digest"].split(":")[1][:12]: b["size"] for b in blobs}


@pytest.fixture(scope="module")
def target(tmp_path_factory):
    """A second registry: pushes there upload (nothing to mount from)."""
    reg = Registry(tmp_path_factory.mktemp("progress-target"))
    yield f"127.0.0.1:{reg.port}"
    reg.stop()


def fresh(target):
    return f"{target}/progress/{uuid.uuid4().hex[:8]}:v1"


def remote_layers(ref):
    out = sh("skopeo", "inspect", "--tls-verify=false", f"docker://{ref}").stdout
    return json.loads(out)["Layers"]


def test_push_json_lines(target, pushed_src, store):
    src, blobs = pushed_src
    dst = fresh(target)
    r = imgbuild("--progress=json", "push", src, dst, store=store)
    assert r.rc == 0, r
    assert r.out == ""
    events = [json.loads(line) for line in r.err.splitlines()]  # every line is JSON
    assert events
    for e in events:
        assert RFC3339_MS.match(e["time"]), e
        assert e["title"] == f"push {dst}"
        assert e["event"] in ("add", "update", "status", "done", "message")
    done = {e["id"]: e for e in events if e["event"] == "done"}
    assert set(done) == set(blobs)
    for i, size in blobs.items():
        d = done[i]
        assert d["ok"] is True and d["status"] == "Pushed", d
        assert d["current"] == size and d["total"] == size
        mine = [e["event"] for e in events if e.get("id") == i]
        assert mine[0] == "add" and mine[-1] == "done" and mine.count("done") == 1
        assert "status" in mine  # Preparing -> Pushing
    msg = [e for e in events if e["event"] == "message"]
    assert len(msg) == 1 and msg[0]["message"].startswith("v1: digest: sha256:")
    assert events[-1]["event"] == "message"
    assert remote_layers(dst) == remote_layers(src)

    # Again: the registry has every blob now.  IMGBUILD_PROGRESS says json.
    r = imgbuild("push", src, dst, store=store, env={"IMGBUILD_PROGRESS": "json"})
    assert r.rc == 0, r
    events = [json.loads(line) for line in r.err.splitlines()]
    done = [e for e in events if e["event"] == "done"]
    assert sorted(e["status"] for e in done) == ["Already exists"] + ["Layer already exists"] * (len(blobs) - 1)
    assert all(e["ok"] for e in done)
    assert not [e for e in events if e["event"] == "update"]


def test_push_plain_lines(target, pushed_src, store):
    src, blobs = pushed_src
    dst = fresh(target)
    r = imgbuild("--progress", "plain", "push", src, dst, store=store)
    assert r.rc == 0, r
    lines = r.err.splitlines()
    assert lines[0] == f"push {dst}"
    assert "\x1b" not in r.err
    for i in blobs:
        mine = [l for l in lines if l.startswith(f"{i}: ")]
        assert re.fullmatch(rf"{i}: Preparing [0-9.]+k?M?G?B", mine[0]), mine
        assert mine[1] == f"{i}: Pushing"
        assert re.fullmatch(rf"{i}: Pushed \([0-9.]+k?M?G?B in [0-9.]+s(, [0-9.]+k?M?G?B/s)?\)", mine[-1]), mine
    assert re.fullmatch(r"v1: digest: sha256:[0-9a-f]{64} size: \d+", lines[-1])


def test_push_quiet_prints_nothing(target, pushed_src, store):
    src, _ = pushed_src
    dst = fresh(target)
    r = imgbuild("-q", "push", src, dst, store=store)
    assert r.rc == 0, r
    assert r.err == "" and r.out == ""
    assert remote_layers(dst) == remote_layers(src)
    # -q wins over the environment, --progress over -q
    r = imgbuild("-q", "push", src, dst, store=store, env={"IMGBUILD_PROGRESS": "plain"})
    assert r.rc == 0 and r.err == "", r
    r = imgbuild("-q", "--progress=json", "push", src, dst, store=store)
    assert r.rc == 0 and all(json.loads(l) for l in r.err.splitlines()) and r.err, r


def test_push_failure_ends_with_one_error_line(pushed_src, store):
    src, _ = pushed_src
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    r = imgbuild("-q", "push", src, f"127.0.0.1:{port}/x:1", store=store)
    assert r.rc == 1
    assert len(r.err.splitlines()) == 1 and r.err.startswith("imgbuild: push "), r
    assert f"127.0.0.1:{port}" in r.err
    r = imgbuild("--progress=json", "push", src, f"127.0.0.1:{port}/x:1", store=store)
    assert r.rc == 1
    *events, last = r.err.splitlines()
    assert last.startswith("imgbuild: push ")
    done = [json.loads(l) for l in events if json.loads(l)["event"] == "done"]
    assert len(done) == 1 and done[0]["ok"] is False and f"127.0.0.1:{port}" in done[0]["status"]


def test_bad_progress_mode_is_a_usage_error(store):
    r = imgbuild("--progress=fancy", "images", store=store)
    assert r.rc == 2 and "--progress" in r.err and "fancy" in r.err
    r = imgbuild("images", store=store, env={"IMGBUILD_PROGRESS": "fancy"})
    assert r.rc == 2 and "IMGBUILD_PROGRESS" in r.err


def run_on_pty(args, cols=100, rows=24, term="xterm", timeout=600, raw=False):
    """Run imgbuild with stderr on a pseudo-terminal; (rc, stdout, terminal
    bytes).  raw: the bytes exactly as imgbuild wrote them (no output
    processing by the terminal), for an emulator to read."""
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))
    if raw:
        attrs = termios.tcgetattr(slave)
        attrs[1] &= ~termios.OPOST
        termios.tcsetattr(slave, termios.TCSANOW, attrs)
    env = dict(os.environ, TERM=term)
    env.pop("IMGBUILD_PROGRESS", None)
    p = subprocess.Popen([str(IMGBUILD), *map(str, args)], stdin=subprocess.DEVNULL,
                         stdout=subprocess.PIPE, stderr=slave, env=env)
    os.close(slave)
    out = b""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        ready, _, _ = select.select([master], [], [], 1)
        if not ready:
            if p.poll() is not None:
                break
            continue
        try:
            data = os.read(master, 65536)
        except OSError:  # EIO: the last holder of the terminal closed it
            break
        if not data:
            break
        out += data
    os.close(master)
    stdout = p.stdout.read()
    p.stdout.close()
    text = out.decode()
    return p.wait(timeout=60), stdout, text if raw else text.replace("\r\n", "\n")


def test_push_tty_bars(target, pushed_src, store):
    src, blobs = pushed_src
    dst = fresh(target)
    rc, _, term = run_on_pty(["--store", store, "push", src, dst])
    assert rc == 0, term
    assert term.startswith(f"push {dst}\n")
    assert re.search(r"\x1b\[\dA\r", term), term  # redrawn in place
    # a bar while the layer was being sent: "id: Pushing [===>   ]  12.3MB/63.4MB"
    layer = max(blobs, key=blobs.get)
    assert re.search(rf"{layer}: Pushing \[=*>? *\]  [0-9.]+[kMG]?B/[0-9.]+MB", term), term
    # each item's final line stays; the digest line comes last
    final = term[term.rfind("A\r") + 2:] if "A\r" in term else term
    for i in blobs:
        assert f"{i}: Pushed\x1b[K\n" in final, final
    assert re.search(r"v1: digest: sha256:[0-9a-f]{64} size: \d+\x1b\[K\n$", term), final
    # every line fits in the 100 columns
    for line in re.sub(r"\x1b\[(\d+A|K)|\r", "", term).splitlines():
        assert len(line) <= 99, line


def test_push_on_dumb_terminal_is_plain(target, pushed_src, store):
    src, _ = pushed_src
    rc, _, term = run_on_pty(["--store", store, "push", src, fresh(target)], term="dumb")
    assert rc == 0, term
    assert "\x1b" not in term and ": Pushing\n" in term


# ---------- pull and unpack ----------

def base_blobs(base_image, store):
    info = json.loads(imgbuild("inspect", base_image, store=store).out)
    return {l["digest"].split(":")[1][:12]: l["size"] for l in info["manifest"]["layers"]}, info["digest"]


def test_pull_json_lines(registry, base_image, store, tmp_path):
    fresh_store = tmp_path / "s"
    r = imgbuild("--progress=json", "pull", base_image, store=fresh_store)
    assert r.rc == 0, r
    layers, digest = base_blobs(base_image, fresh_store)
    assert r.out.strip() == digest
    events = [json.loads(line) for line in r.err.splitlines()]  # every line is JSON
    for e in events:
        assert RFC3339_MS.match(e["time"]) and e["title"] == f"pull {base_image}", e
    done = {e["id"]: e for e in events if e["event"] == "done"}
    assert set(done) == set(layers)
    for i, size in layers.items():
        d = done[i]
        assert d["ok"] is True and d["status"] == "Download complete", d
        assert d["current"] == size and d["total"] == size
        mine = [e["event"] for e in events if e.get("id") == i]
        assert mine[0] == "add" and mine[-1] == "done" and mine.count("done") == 1
    msg = [e["message"] for e in events if e["event"] == "message"]
    assert msg[-1] == f"Digest: {digest}"

    # again: every layer is in the store, nothing moves
    r = imgbuild("--progress=json", "pull", base_image, store=fresh_store)
    assert r.rc == 0, r
    events = [json.loads(line) for line in r.err.splitlines()]
    assert sorted(e["status"] for e in events if e["event"] == "done") == ["Already exists"] * len(layers)
    assert not [e for e in events if e["event"] == "update"]


def test_pull_plain_lines_and_quiet(registry, base_image, tmp_path):
    r = imgbuild("--progress", "plain", "pull", base_image, store=tmp_path / "s")
    assert r.rc == 0, r
    lines = r.err.splitlines()
    assert lines[0] == f"pull {base_image}" and "\x1b" not in r.err
    layers, digest = base_blobs(base_image, tmp_path / "s")
    for i in layers:
        mine = [l for l in lines if l.startswith(f"{i}: ")]
        assert re.fullmatch(rf"{i}: Downloading [0-9.]+k?M?G?B", mine[0]), mine
        assert re.fullmatch(rf"{i}: Download complete \([0-9.]+k?M?G?B in [0-9.]+s(, [0-9.]+k?M?G?B/s)?\)",
                            mine[-1]), mine
    assert lines[-1] == f"Digest: {digest}"
    r = imgbuild("-q", "pull", base_image, store=tmp_path / "q")
    assert r.rc == 0 and r.err == "" and r.out.strip() == digest, r


def test_unpack_tty_bars_then_pull_complete(registry, base_image, tmp_path):
    """imgbuild unpack of an image not in the store: downloads and unpacks in
    one pass; each layer's bar ends as "Pull complete"."""
    rc, out, term = run_on_pty(["--store", tmp_path / "s", "unpack", base_image, tmp_path / "root"])
    assert rc == 0, term
    assert (tmp_path / "root" / "etc" / "os-release").is_file()
    layers, _ = base_blobs(base_image, tmp_path / "s")
    assert term.startswith(f"pull {base_image}\n"), term
    final = term[term.rfind("A\r") + 2:] if "A\r" in term else term
    for i in layers:
        assert f"{i}: Pull complete\x1b[K\n" in final, final
    assert re.search(r"Digest: sha256:[0-9a-f]{64}\x1b\[K\n", term), term
    # bars fit the 100 columns; log lines (the unpack's warnings) come whole,
    # on lines of their own above the bars
    lines = re.sub(r"\x1b\[(\d+A|K)|\r", "", term).splitlines()
    for line in lines:
        assert len(line) <= 99 or line.startswith("imgbuild: warning: "), line
    assert any(l.startswith("imgbuild: warning: unpack layer 0 ") for l in lines) \
        or "imgbuild: warning:" not in term, term


# ---------- build -j N on a terminal: one display for every stage ----------

def tty_text(term):
    """The terminal bytes without the redraw escapes: what was drawn, line by line."""
    return re.sub(r"\x1b\[(\d+A|K)|\r", "", term)


def write_recipe(path, text):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def image_digest(store, ref):
    r = imgbuild("inspect", ref, store=store)
    assert r.rc == 0, r
    return json.loads(r.out)["digest"]


def test_build_jobs_tty_one_display(registry, base_image, tmp_path):
    """-j 2 on a terminal: the parent draws both stages' steps (redrawn in
    place), each RUN's last output lines under it while it runs, then DONE; the image is
    the one a build of one stage at a time makes."""
    store = tmp_path / "s"
    c = tmp_path / "ctx"
    # b starts from another name of the base image: its own process pulls it
    other = f"{registry}/tty-jobs-other:1"
    sh("skopeo", "copy", "--quiet", "--src-tls-verify=false", "--dest-tls-verify=false",
       f"docker://{base_image}", f"docker://{other}")
    recipe = write_recipe(c / "j.recipe", f"""
FROM {base_image} AS a
RUN echo alpha-1; sleep 1; echo alpha-2 >&2; sleep 1; echo a >/a
FROM {other} AS b
RUN echo beta-1; sleep 2; echo b >/b
FROM {base_image} AS final
COPY --from=a /a /t/
COPY --from=b /b /t/
OUTPUT type=image,name=tty-jobs:latest
""")
    rc, _, term = run_on_pty(["--store", store, "build", "--reproducible", "-j", "2", recipe])
    assert rc == 0, term
    assert term.startswith(f"build {recipe}\n"), term
    assert re.search(r"\x1b\[\d+A\r", term), term  # redrawn in place by one display
    text = tty_text(term)
    lines = text.splitlines()
    # the running steps' output lines were shown under their step's line
    run_a = "[a 2/2] RUN echo alpha-1; sleep 1; echo alpha-2 >&2; sleep 1; echo a >/a"
    run_b = "[b 2/2] RUN echo beta-1; sleep 2; echo b >/b"
    def shown(step, out):  # the step's row while it ran (the seconds so far), `out` under it
        secs = []
        for i, l in enumerate(lines):
            if (m := re.fullmatch(rf"{re.escape(step)}: Running  (\d+)s", l)):
                tail = []
                for t in lines[i + 1:]:
                    if not t.startswith("  > "):
                        break
                    tail.append(t[4:])
                if out in tail:
                    secs.append(int(m.group(1)))
        return secs
    assert shown(run_a, "alpha-1") and shown(run_a, "alpha-2"), text
    assert shown(run_b, "beta-1"), text
    assert max(shown(run_b, "beta-1")) >= 1, text  # redrawn as the seconds went by
    # the base a and final start from was pulled once, before the stages
    # (a fresh store); b's process pulled its image: that pull shows in the
    # same display, its title and blobs marked with the stage
    assert f"pull {base_image}" in lines and f"[a] pull {base_image}" not in lines, text
    assert f"[b] pull {other}" in lines, text
    assert any(re.fullmatch(r"\[b\] [0-9a-f]{12}: (Pull complete|Already exists)", l)
               for l in lines), text
    # every step of the three stages ends with its mark, which stays on screen
    for stage, n, image in (("a", 2, base_image), ("b", 2, other), ("final", 3, base_image)):
        assert f"[{stage} 1/{n}] FROM {image}: DONE" in lines, text
    for step in (run_a, run_b, "[final 2/3] COPY --from=a /a /t/", "[final 3/3] COPY --from=b /b /t/"):
        assert any(re.fullmatch(rf"{re.escape(step)}: DONE [0-9.]+s", l) for l in lines), (step, text)
    final = term[term.rfind("A\r") + 2:]
    assert re.search(r"\[final 3/3\] COPY --from=b /b /t/: DONE [0-9.]+s\x1b\[K\n", final), final
    # not the plain lines of a child that would write to the terminal itself
    assert "[a 2/2] DONE" not in text and "\nalpha-1\n" not in text, text
    # log lines (the OUTPUT, the summary) come whole, above or below the steps
    assert re.search(r"^\[final\] OUTPUT image \S*tty-jobs:latest", text, re.M), text
    assert "(0 steps cached, 4 run)" in text, text
    for line in lines:
        assert len(line) <= 99 or line.startswith(("[final] OUTPUT", "build ", "imgbuild: warning: ")), line
    digest = image_digest(store, "tty-jobs:latest")
    # one stage at a time, from scratch, without a terminal: the same image
    r = imgbuild("build", "--reproducible", "--no-cache", c / "j.recipe", store=store)
    assert r.rc == 0 and "(0 steps cached, 4 run)" in r.err, r
    assert image_digest(store, "tty-jobs:latest") == digest
    # one stage at a time on a terminal: the same lines, the same image
    rc, _, term = run_on_pty(["--store", store, "build", "--reproducible", "--no-cache", recipe])
    assert rc == 0, term
    lines = tty_text(term).splitlines()
    assert shown(run_a, "alpha-2") and shown(run_b, "beta-1"), term
    assert any(re.fullmatch(rf"{re.escape(run_b)}: DONE [0-9.]+s", l) for l in lines), term
    assert image_digest(store, "tty-jobs:latest") == digest
    # and -j 2 again on a terminal: every step from the cache
    rc, _, term = run_on_pty(["--store", store, "build", "--reproducible", "-j", "2", recipe])
    assert rc == 0, term
    assert f"{run_b}: CACHED" in tty_text(term).splitlines(), term
    assert "(4 steps cached, 0 run)" in term, term
    assert image_digest(store, "tty-jobs:latest") == digest


def test_build_jobs_tty_failure_shows_output_tail(registry, base_image, tmp_path):
    """A step failing in one stage of -j 2 on a terminal: its line ends in
    ERROR, the error names it with its last output lines, the other stage
    is stopped, the exit status is 1."""
    c = tmp_path / "ctx"
    recipe = write_recipe(c / "bad.recipe", f"""
FROM {base_image} AS a
RUN echo doomed-1 && echo doomed-2 && sleep 3 && exit 3
FROM {base_image} AS b
RUN echo patient && sleep 30
FROM {base_image}
COPY --from=a / /a
COPY --from=b / /b
""")
    t0 = time.monotonic()
    rc, _, term = run_on_pty(["--store", tmp_path / "s", "build", "-j", "2", recipe], timeout=120)
    assert rc == 1, term
    assert time.monotonic() - t0 < 25, term  # b was stopped, not waited for
    text = tty_text(term)
    run_a = "[a 2/2] RUN echo doomed-1 && echo doomed-2 && sleep 3 && exit 3"
    # its output lines under its row while it ran
    assert re.search(rf"^{re.escape(run_a)}: Running  \d+s\n  > doomed-1\n  > doomed-2$", text, re.M), text
    assert re.search(rf"^{re.escape(run_a)}: ERROR after [0-9.]+s$", text, re.M), text
    # b's running step (when b got that far: its tree may still have been
    # in the making) does not stay "running": stopped with the build
    b_run = [l for l in text.splitlines() if l.startswith("[b 2/2] RUN echo patient && sleep 30: ")]
    assert not b_run or re.search(r": (ERROR after [0-9.]+s|CANCELED)$", b_run[-1]), text
    assert "[stage-2" not in text
    # the error, after the display: the step, its status and its last output lines
    err = text[text.index("imgbuild: "):]
    assert "bad.recipe:3: RUN: echo doomed-1 && echo doomed-2 && sleep 3 && exit 3: exit status 3" in err, err
    assert "last output lines:" in err and "doomed-1\ndoomed-2" in err, err


def test_build_jobs_pipe_output_unchanged(registry, base_image, tmp_path):
    """Without a terminal -j 2 stays plain lines; no escape sequences."""
    c = tmp_path / "ctx"
    recipe = write_recipe(c / "p.recipe", f"""
FROM {base_image} AS a
RUN echo plain-a
FROM {base_image} AS b
RUN echo plain-b
FROM {base_image}
COPY --from=a /etc/hostname /x
COPY --from=b /etc/hostname /y
""")
    r = imgbuild("build", "-j", "2", recipe, store=tmp_path / "s")
    assert r.rc == 0, r
    assert "\x1b" not in r.err
    lines = r.err.splitlines()
    assert "[a 2/2] RUN echo plain-a" in lines and "plain-a" in lines, r.err
    assert "[b 2/2] RUN echo plain-b" in lines and "plain-b" in lines, r.err
    assert any(re.fullmatch(r"\[a 2/2\] DONE [0-9.]+s", l) for l in lines), r.err


def screen(term_bytes, cols, rows):
    """What a terminal of cols x rows shows after these bytes, scrolled-off
    rows first (pyte, a VT100 emulator): one string a row."""
    import pyte
    s = pyte.HistoryScreen(cols, rows, history=100000)
    s.set_mode(pyte.modes.LNM)
    pyte.Stream(s).feed(term_bytes)
    top = ["".join(l[x].data for x in range(cols)) for l in s.history.top]
    shown = top + list(s.display)
    while shown and not shown[-1].strip():
        shown.pop()
    return [l.rstrip() for l in shown]


def test_build_tty_at_80_columns(registry, base_image, tmp_path):
    """Issue 21, item 12: on an 80-column terminal, a step whose command is
    wider than the row keeps its state (the command is cut, "DONE 1.2s"
    stays); the build's header is printed once, though a pull's display
    comes in between; in plain logs each layer line names its step."""
    ctx = tmp_path / "ctx"
    long_cmd = ("for i in 1 2 3; do echo \"line $i of a step whose command is longer than "
                "the terminal is wide\"; sleep 0.2; done; echo x > /long")
    recipe = write_recipe(ctx / "w.recipe", f"""
FROM {base_image} AS build
RUN {long_cmd}
RUN false || echo "another command line that goes on past the edge of an 80-column row" > /other
FROM build
RUN echo short > /short
""")
    store = tmp_path / "s"
    rc, _, term = run_on_pty(["--store", store, "build", recipe], cols=80, raw=True)
    assert rc == 0, term
    rows = screen(term, 80, 24)
    assert sum(r == f"build {recipe}" for r in rows) == 1, rows
    steps = [r for r in rows if re.match(r"\[(build|stage-1) \d/\d\] (FROM|RUN) ", r)]
    assert len(steps) == 5, rows
    for r in steps:
        assert len(r) <= 79, r
        assert re.search(r": (DONE( [0-9.]+s)?|CACHED)$", r), r
    cut = [r for r in steps if r.startswith("[build 2/3] RUN for i in 1 2 3;")]
    assert len(cut) == 1 and re.search(r"\.\.\.: DONE [0-9.]+s$", cut[0]), rows
    # plain: the layer lines carry their step's label
    r = imgbuild("build", "--no-cache", recipe, store=store, env={"IMGBUILD_PROGRESS": "plain"})
    assert r.rc == 0, r
    layer_lines = [l for l in r.err.splitlines() if " layer sha256:" in l]
    assert len(layer_lines) == 3, r.err
    for l in layer_lines:
        assert re.match(r"\[(build [23]/3|stage-1 2/2)\] layer sha256:[0-9a-f]{12}  1 entries", l), l
