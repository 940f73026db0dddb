"""Signals: SIGINT/SIGTERM sent to imgbuild reach the command in the
sandbox (run and build steps), and nothing the command started survives
it, even when imgbuild itself is killed with SIGKILL."""
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from conftest import IMGBUILD


def processes_with(marker):
    """pids whose command line contains `marker`."""
    found = []
    for p in Path("/proc").iterdir():
        if not p.name.isdigit():
            continue
        try:
            cmd = (p / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if marker in cmd:
            found.append(int(p.name))
    return found


def wait_for(cond, timeout=60):
    end = time.time() + timeout
    while time.time() < end:
        if cond():
            return True
        time.sleep(0.1)
    return False


@pytest.fixture(scope="module")
def srootfs(tmp_path_factory, registry, base_image):
    store = tmp_path_factory.mktemp("signals-store")
    d = tmp_path_factory.mktemp("signals-rootfs") / "r"
    r = subprocess.run([str(IMGBUILD), "--store", str(store), "unpack", base_image, str(d)],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    return store, d


def start_run(store, rootfs, outdir, script):
    return subprocess.Popen([str(IMGBUILD), "--store", str(store), "-q", "run", "-v",
                             f"{outdir}:/out", "--rootfs", str(rootfs), "--", "sh", "-c", script],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


@pytest.mark.parametrize("sig,name", [(signal.SIGTERM, "TERM"), (signal.SIGINT, "INT")])
def test_signal_reaches_the_command_and_nothing_survives(srootfs, tmp_path, sig, name):
    store, rootfs = srootfs
    out = tmp_path / "out"
    out.mkdir(mode=0o777)
    out.chmod(0o777)
    marker = f"98765{sig}"
    p = start_run(store, rootfs, out,
                  f"trap 'echo got-{name} > /out/trapped; exit 42' {name}; "
                  f"sleep {marker} & echo started > /out/started; wait")
    assert wait_for(lambda: (out / "started").exists() and processes_with(f"sleep {marker}"))
    p.send_signal(sig)
    rc = p.wait(timeout=60)
    assert rc == 42, p.stderr.read()
    assert (out / "trapped").read_text() == f"got-{name}\n"
    assert wait_for(lambda: not processes_with(f"sleep {marker}"), 10), "the background sleep survived"


def test_sigkill_of_imgbuild_leaves_no_process(srootfs, tmp_path):
    store, rootfs = srootfs
    out = tmp_path / "out"
    out.mkdir()
    out.chmod(0o777)
    marker = "87654321"
    p = start_run(store, rootfs, out, f"sleep {marker} & echo started > /out/started; wait")
    assert wait_for(lambda: (out / "started").exists() and processes_with(f"sleep {marker}"))
    p.kill()
    p.wait(timeout=60)
    assert wait_for(lambda: not processes_with(f"sleep {marker}"), 10), "the sleep survived SIGKILL of imgbuild"


def test_sigterm_stops_a_build_step(srootfs, base_image, tmp_path):
    store, _ = srootfs
    marker = "76543219"
    recipe = tmp_path / "r.recipe"
    recipe.write_text(f"FROM {base_image}\nRUN sleep {marker}\nOUTPUT type=image,name=never:built\n")
    p = subprocess.Popen([str(IMGBUILD), "--store", str(store), "build", str(recipe)],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=tmp_path)
    assert wait_for(lambda: processes_with(f"sleep {marker}"), 300)
    p.send_signal(signal.SIGTERM)
    rc = p.wait(timeout=60)
    err = p.stderr.read()
    assert rc != 0, err
    assert wait_for(lambda: not processes_with(f"sleep {marker}"), 10)
    r = subprocess.run([str(IMGBUILD), "--store", str(store), "images"], capture_output=True, text=True)
    assert "never:built" not in r.stdout
