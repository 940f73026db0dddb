"""Nobody leaves: escape attempts from inside the sandbox, each asserting
the exact answer (tests/fixtures/escape/try.c, built static and copied into
a Debian rootfs), and host-side checks that nothing outside the rootfs and
the declared mounts changed.  Runs in every identity mode the pass has
(root; unprivileged map; IMGBUILD_USERNS=single): the answers are the
same in all three, because the seccomp filter answers first."""
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from conftest import ROOT, imgbuild


@pytest.fixture(scope="module")
def esc(tmp_path_factory, registry, base_image):
    d = tmp_path_factory.mktemp("escape")
    store = d / "store"
    rootfs = d / "rootfs"
    r = imgbuild("unpack", base_image, rootfs, store=store)
    assert r.rc == 0, r
    subprocess.run(["cc", "-static", "-O2", "-o", str(rootfs / "try"),
                    str(ROOT / "tests/fixtures/escape/try.c")], check=True)
    canary = d / "canary"
    canary.mkdir()
    (canary / "keep").write_text("host file\n")
    (rootfs / "evil").symlink_to(canary)          # absolute: the host path
    bindsrc = d / "bindsrc"
    bindsrc.mkdir()
    bindsrc.chmod(0o777)
    (bindsrc / "link").symlink_to(canary)
    return {"store": store, "rootfs": rootfs, "canary": canary, "bindsrc": bindsrc}


def attempt(esc, *args, extra=()):
    r = imgbuild("run", *extra, "--rootfs", esc["rootfs"], "--", "/try", *args, store=esc["store"])
    assert r.rc == 0, r
    return r.out.strip()


def canary_untouched(esc):
    return sorted(p.name for p in esc["canary"].iterdir()) == ["keep"] \
        and (esc["canary"] / "keep").read_text() == "host file\n"


@pytest.mark.parametrize("call,expected", [
    ("kexec_load", "ERRNO EPERM"), ("kexec_file_load", "ERRNO EPERM"),
    ("init_module", "ERRNO EPERM"), ("finit_module", "ERRNO EPERM"),
    ("delete_module", "ERRNO EPERM"),
    ("keyctl", "ERRNO EPERM"), ("add_key", "ERRNO EPERM"), ("request_key", "ERRNO EPERM"),
    ("open_by_handle_at", "ERRNO EPERM"), ("name_to_handle_at", "ERRNO EPERM"),
    ("unshare-user", "ERRNO EPERM"), ("clone-newuser", "ERRNO EPERM"),
    ("clone3", "ERRNO ENOSYS"),          # so that libc falls back to clone, which is checked
    ("pivot_root", "ERRNO EPERM"), ("setns", "ERRNO EPERM"),
    ("bpf", "ERRNO EPERM"), ("perf_event_open", "ERRNO EPERM"), ("userfaultfd", "ERRNO EPERM"),
    ("x32-getpid", "ERRNO EPERM"),       # the x32 ABI is refused by the filter (bad arch)
    ("capset-after-drop", "ERRNO EPERM"),
    ("io_uring_setup", "ERRNO EPERM"), ("vsock", "ERRNO EPERM"),
])
def test_denied_calls(esc, call, expected):
    assert attempt(esc, call) == expected


@pytest.mark.parametrize("target", ["/mnt", "/"])
def test_no_mount_over_anything(esc, target):
    assert attempt(esc, "mount-tmpfs", target) == "ERRNO EPERM"
    assert attempt(esc, "umount", "/proc") == "ERRNO EPERM"


def test_cannot_see_or_trace_host_processes(esc):
    pids = [int(p) for p in attempt(esc, "pids").split()]
    assert pids and pids[0] == 1 and max(pids) < 50, pids  # the sandbox's own pid namespace
    assert os.getpid() not in pids or os.getpid() < 50
    assert attempt(esc, "ptrace-attach", str(os.getpid())) == "ERRNO ESRCH"


def test_no_descriptor_leaks_in(esc):
    assert attempt(esc, "fds") == "OK"


@pytest.mark.parametrize("path", [
    "/evil/pwned",                                   # an absolute symlink to a host path
    "/proc/self/root/../../../..{canary}/pwned",     # /proc/self/root is the sandbox's root
    "/proc/1/cwd/../../../..{canary}/pwned",
    "../../../../../..{canary}/pwned",
    "/proc/1/root{canary}/pwned",
])
def test_writes_stay_inside(esc, path):
    out = attempt(esc, "write", path.replace("{canary}", str(esc["canary"])))
    assert out in ("OK", "ERRNO ENOENT"), out      # inside the rootfs, or nowhere
    assert canary_untouched(esc)


def test_bind_mount_escapes(esc):
    extra = ("-v", f"{esc['bindsrc']}:/mnt/src")
    # '..' from the bind mount is the sandbox's parent directory, not the host's
    out = attempt(esc, "write", f"/mnt/src/../../../..{esc['canary']}/pwned", extra=extra)
    assert out in ("OK", "ERRNO ENOENT"), out
    # a symlink in the bind source resolves inside the sandbox
    out = attempt(esc, "write", "/mnt/src/link/pwned", extra=extra)
    assert out in ("OK", "ERRNO ENOENT"), out
    assert canary_untouched(esc)
    # a read-only bind stays read-only
    out = attempt(esc, "write", "/mnt/src/new", extra=("-v", f"{esc['bindsrc']}:/mnt/src:ro"))
    assert out == "ERRNO EROFS", out
    assert not (esc["bindsrc"] / "new").exists()
