"""Fixtures for the e2e suite: a local registry with a Debian base image,
and a helper that runs bin/imgbuild.  Everything listens on 127.0.0.1."""
import json
import os
import re
import shutil
import stat
import subprocess
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
IMGBUILD = Path(os.environ.get("IMGBUILD", ROOT / "bin" / "imgbuild"))


class Result:
    def __init__(self, proc):
        self.rc = proc.returncode
        self.out = proc.stdout
        self.err = proc.stderr

    def __repr__(self):
        return f"rc={self.rc}\nstdout:\n{self.out[-3000:]}\nstderr:\n{self.err[-3000:]}"


def cache_dir():
    """What the suites keep between runs: $IMGBUILD_TEST_CACHE, else the
    user's ~/.cache/imgbuild-tests."""
    c = os.environ.get("IMGBUILD_TEST_CACHE")
    if c:
        return Path(c)
    return Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "imgbuild-tests"


def local_cache_args(cache):
    """--cache-from the local build cache directory `cache` and, when this
    user may write there, --cache-to it: a stand-in base's apt step made
    once and imported by the next run (or by another user, read-only)."""
    try:
        cache.parent.mkdir(parents=True, exist_ok=True)
    except PermissionError:
        pass  # read-only for this user: the cache is imported, not written
    args = ["--cache-from", f"type=local,src={cache}"]
    if os.access(cache.parent, os.W_OK) and (not cache.exists() or os.access(cache, os.W_OK)):
        args += ["--cache-to", f"type=local,dest={cache}"]
    return args


def untimed(summary):
    """A --matrix summary without each combination's " in N.N s"."""
    return re.sub(r"(: (?:ok|FAILED)) in \d+\.\d s", r"\1", summary)


def imgbuild(*args, store, cwd=None, env=None, timeout=1800, input=None):
    e = dict(os.environ)
    e.update(env or {})
    proc = subprocess.run([str(IMGBUILD), "--store", str(store), *map(str, args)],
                          cwd=cwd, env=e, capture_output=True, text=True,
                          timeout=timeout, input=input)
    return Result(proc)


def write(path, data, mode=None):
    """Write `data` (str or bytes) to `path`, making its parents; chmod to
    `mode` when given.  Returns the path."""
    path.parent.mkdir(parents=True, exist_ok=True)
    (path.write_bytes if isinstance(data, bytes) else path.write_text)(data)
    if mode is not None:
        path.chmod(mode)
    return path


def norm(text):
    """Each line with runs of blanks made one (continuation lines join with
    their indentation)."""
    return "\n".join(" ".join(l.split()) for l in text.splitlines())


def sh(*args, **kw):
    return subprocess.run(list(map(str, args)), capture_output=True, text=True, check=True, **kw)


def remove_tree(path):
    """rm -rf PATH as far as this user can: read-only directories are made
    writable first; what stays (files owned by subordinate ids in map mode)
    is left for tests/run-e2e.sh, which removes the whole base temp as root."""
    def onerror(func, p, exc):
        try:
            parent = os.path.dirname(p)
            os.chmod(parent, stat.S_IRWXU)
            if os.path.isdir(p) and not os.path.islink(p):
                os.chmod(p, stat.S_IRWXU)
                shutil.rmtree(p, onerror=lambda *a: None)
            else:
                func(p)
        except OSError:
            pass
    shutil.rmtree(path, onerror=onerror)


@pytest.fixture(autouse=True)
def _remove_tmp_path(request):
    """Each test's tmp_path goes when the test ends: the suite writes tens of
    GB of rootfs trees and stores, and CI's disk is not that large.
    IMGBUILD_KEEP_TMP=1 keeps them for a look after a failure."""
    path = request.getfixturevalue("tmp_path") if "tmp_path" in request.fixturenames else None
    yield
    if path is not None and not os.environ.get("IMGBUILD_KEEP_TMP"):
        remove_tree(path)


def _session_tmp_names():
    """The names session-scoped fixtures give tmp_path_factory.mktemp, read
    from the suite's sources: their directories live until the pass ends
    (a later module may use them); a regex matching them with mktemp's
    number."""
    import ast
    names = set()
    for f in sorted(Path(__file__).parent.glob("*.py")):
        for fn in ast.walk(ast.parse(f.read_text(), str(f))):
            if not isinstance(fn, ast.FunctionDef) or not any(
                    isinstance(d, ast.Call) and any(k.arg == "scope" and getattr(k.value, "value", None) == "session"
                                                    for k in d.keywords)
                    for d in fn.decorator_list):
                continue
            for c in ast.walk(fn):
                if isinstance(c, ast.Call) and getattr(c.func, "attr", None) == "mktemp":
                    assert c.args and isinstance(c.args[0], ast.Constant), \
                        f"{f.name}:{c.lineno}: a session fixture's mktemp needs a literal name"
                    names.add(c.args[0].value)
    return re.compile("(%s)[0-9]+" % "|".join(map(re.escape, sorted(names))) if names else "(?!)")


_SESSION_TMP = _session_tmp_names()


@pytest.fixture(scope="module", autouse=True)
def _remove_module_tmp(tmp_path_factory):
    """What a module's fixtures made under the base temp (stores, rootfs
    trees, registries) goes when the module ends, not when the pass does:
    a pass kept 8-10 GB to its end, and the two unprivileged passes run at
    once (tests/run-e2e.sh), which filled CI's disk.  Session fixtures'
    directories stay.  IMGBUILD_KEEP_TMP=1 keeps everything."""
    base = tmp_path_factory.getbasetemp()
    before = set(os.listdir(base))
    yield
    if os.environ.get("IMGBUILD_KEEP_TMP"):
        return
    for name in sorted(set(os.listdir(base)) - before):
        p = base / name  # (mktemp's "<name>current" links stay)
        if not _SESSION_TMP.fullmatch(name) and p.is_dir() and not p.is_symlink():
            remove_tree(p)


@pytest.fixture(scope="session")
def registry(tmp_path_factory):
    d = tmp_path_factory.mktemp("registry")
    port = sh("bash", ROOT / "tests/lib/registry.sh", "start", d).stdout.strip()
    yield f"127.0.0.1:{port}"
    subprocess.run(["bash", str(ROOT / "tests/lib/registry.sh"), "stop", str(d)])


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    """A one-host Slurm cluster (tests/lib/slurm.sh: nodes n1 and n2, the
    partition gpu with 2 fake GPUs on n2), started by this user; the
    environment its clients need."""
    d = tmp_path_factory.mktemp("slurm")
    os.chmod(d, 0o755)
    sh("bash", ROOT / "tests/lib/slurm.sh", "start", d)
    yield {"SLURM_CONF": str(d / "slurm.conf"), "IMGBUILD_SLURM_POLL": "0.3"}
    subprocess.run(["bash", str(ROOT / "tests/lib/slurm.sh"), "stop", str(d)])


def slurm_states(cluster, job):
    """{task index: state} of array job `job` (squeue -r -t all)."""
    out = subprocess.run(["squeue", "-h", "-r", "-t", "all", "-j", str(job), "-o", "%i|%T"],
                         env={**os.environ, **cluster}, check=True, capture_output=True,
                         text=True).stdout
    return {int(i.split("_")[1]): s for i, s in (l.split("|") for l in out.split()) if "_" in i}


def wait_for(what, timeout=120):
    """Poll what() every 0.2 s until it is true; fail after `timeout` s."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if what():
            return
        time.sleep(0.2)
    raise AssertionError("timed out waiting")


@pytest.fixture(scope="session")
def base_image(registry):
    return sh("bash", ROOT / "tests/lib/base-image.sh", registry).stdout.strip()


@pytest.fixture(scope="session")
def multiarch(registry, base_image):
    """Debian bookworm for linux/arm64 alone ("arm64") and an OCI index of
    it beside the amd64 base image ("multi"), from tests/lib/multiarch-image.sh."""
    arm64, multi = sh("bash", ROOT / "tests/lib/multiarch-image.sh", registry).stdout.split()
    return {"arm64": arm64, "multi": multi}


@pytest.fixture(scope="session")
def store(tmp_path_factory):
    return tmp_path_factory.mktemp("store")


@pytest.fixture(scope="session")
def formats(registry, base_image):
    """Images in every format (tests/lib/formats.py): a dict of references."""
    out = json.loads(sh("/usr/bin/python3", ROOT / "tests/lib/formats.py", registry).stdout)
    out["v2s2"] = base_image
    return out


class FaultProxy:
    """tests/lib/faultproxy.py in front of the registry, with its request log."""

    def __init__(self, upstream, spec, logfile):
        self.logfile = logfile
        self.proc = subprocess.Popen(
            ["/usr/bin/python3", str(ROOT / "tests/lib/faultproxy.py"), "--upstream", upstream,
             "--spec", json.dumps(spec), "--log", str(logfile), "--lifetime", "600"],
            stdout=subprocess.PIPE, text=True, start_new_session=True)
        self.port = int(self.proc.stdout.readline())
        self.host = f"127.0.0.1:{self.port}"

    def log(self):
        """Requests seen so far, in order of arrival."""
        return json.loads(self.logfile.read_text())

    def stop(self):
        self.proc.terminate()
        self.proc.wait(timeout=10)


@pytest.fixture
def faultproxy(registry, tmp_path):
    """faultproxy(spec) starts a proxy with that fault list; stopped after the test."""
    started = []

    def start(spec):
        p = FaultProxy(registry, spec, tmp_path / f"proxy-log-{len(started)}.json")
        started.append(p)
        return p

    yield start
    for p in started:
        p.stop()


def walk_blobs(store):
    """{digest: size} of every file under blobs/sha256, each checked to hash to its name."""
    import hashlib
    found = {}
    d = Path(store) / "blobs/sha256"
    for f in d.iterdir() if d.is_dir() else []:
        h = hashlib.sha256()
        with open(f, "rb") as fp:
            for chunk in iter(lambda: fp.read(1 << 20), b""):
                h.update(chunk)
        assert h.hexdigest() == f.name, f"store {store} holds a wrong blob {f.name}"
        found["sha256:" + f.name] = f.stat().st_size
    return found


def stored_names(store):
    """Names tagged in the store's index.json (empty when it has none)."""
    p = Path(store) / "index.json"
    if not p.exists():
        return []
    return [m.get("annotations", {}).get("org.opencontainers.image.ref.name")
            for m in json.loads(p.read_text()).get("manifests", [])]


def tiny_wheel(dest, name, version, tag="py3-none-any", files=None):
    """Write a minimal PEP 427 wheel DEST/NAME-VERSION-TAG.whl holding the
    package NAME (__init__.py with __version__, plus `files`: {path: str or
    bytes})
    and its .dist-info (METADATA, WHEEL, RECORD with sha256 digests), as
    bdist_wheel would; returns its path."""
    import base64
    import hashlib
    import zipfile
    pure = tag.endswith("-any")
    info = f"{name}-{version}.dist-info"
    members = {f"{name}/__init__.py": f'__version__ = "{version}"\n', **(files or {})}
    members[f"{info}/METADATA"] = f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n"
    members[f"{info}/WHEEL"] = ("Wheel-Version: 1.0\nGenerator: imgbuild-tests\n"
                                f"Root-Is-Purelib: {'true' if pure else 'false'}\nTag: {tag}\n")
    record = []
    for path, text in members.items():
        data = text if isinstance(text, bytes) else text.encode()
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        record.append(f"{path},sha256={digest},{len(data)}")
    record.append(f"{info}/RECORD,,")
    members[f"{info}/RECORD"] = "\n".join(record) + "\n"
    path = Path(dest) / f"{name}-{version}-{tag}.whl"
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as z:
        for p, text in members.items():
            z.writestr(p, text)
    return path
