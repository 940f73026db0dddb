"""Fixtures for the e2e suite: a local registry with a Debian base image,
and a helper that runs bin/imgbuild.  Everything listens on 127.0.0.1."""
import os
import subprocess
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


def imgbuild(*args, store, cwd=None, env=None, timeout=1800, input=None):
    e = dict(os.environ)
    e.update(env or {})
    proc = subprocess.run([str(IMGBUILD), "--store", str(store), *map(str, args)],
                          cwd=cwd, env=e, capture_output=True, text=True,
                          timeout=timeout, input=input)
    return Result(proc)


def sh(*args, **kw):
    return subprocess.run(list(map(str, args)), capture_output=True, text=True, check=True, **kw)


@pytest.fixture(scope="session")
def registry(tmp_path_factory):
    d = tmp_path_factory.mktemp("registry")
    port = sh("bash", ROOT / "tests/lib/registry.sh", "start", d).stdout.strip()
    yield f"127.0.0.1:{port}"
    subprocess.run(["bash", str(ROOT / "tests/lib/registry.sh"), "stop", str(d)])


@pytest.fixture(scope="session")
def base_image(registry):
    return sh("bash", ROOT / "tests/lib/base-image.sh", registry).stdout.strip()


@pytest.fixture(scope="session")
def store(tmp_path_factory):
    return tmp_path_factory.mktemp("store")
