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
    if path.startswith("/proc/1/"):
        assert out == "ERRNO EACCES", out          # pid 1 is not the step's to look into
    else:
        assert out in ("OK", "ERRNO ENOENT"), out  # inside the rootfs, or nowhere
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


# --- imgbuild's own processes in the sandbox (pid 1) ----------------------

def test_pid1_cannot_be_traced(esc):
    # every process the step sees but itself: pid 1 only here
    assert attempt(esc, "ptrace-visible") == "1 EPERM"
    # in a step's shell too: pid 1 refuses, the step's own shell is its own
    r = imgbuild("run", "--rootfs", esc["rootfs"], "--", "/bin/sh", "-c", "/try ptrace-visible; true",
                 store=esc["store"])
    assert r.rc == 0, r
    lines = sorted(r.out.split("\n")[:-1])
    assert lines[0] == "1 EPERM" and all(l.endswith(" OK") for l in lines[1:]), lines


@pytest.mark.parametrize("path", ["/proc/1/exe", "/proc/1/cwd", "/proc/1/root"])
def test_pid1_links_closed(esc, path):
    # /proc/1/exe would lead to the host's imgbuild binary (runc's CVE-2019-5736)
    assert attempt(esc, "readlink", path) == "ERRNO EACCES"
    assert attempt(esc, "open-read", path) == "ERRNO EACCES"


@pytest.mark.parametrize("path", ["/proc/1/fd", "/proc/1/map_files"])
def test_pid1_descriptors_hidden(esc, path):
    out = attempt(esc, "list", path)
    if os.getuid() == 0 and path == "/proc/1/fd":
        # the directory is the host root's, which the step is in root
        # mode: it may list it, and pid 1 holds nothing
        assert out == "OK 0"
    else:
        assert out == "ERRNO EACCES"


@pytest.mark.parametrize("path", ["/proc/1/mem", "/proc/1/environ", "/proc/1/auxv"])
def test_pid1_memory_closed(esc, path):
    assert attempt(esc, "read", path) == "ERRNO EACCES"


def _children(pid):
    out = []
    for p in os.listdir("/proc"):
        if p.isdigit():
            try:
                fields = Path(f"/proc/{p}/stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[1]) == pid:
                out.append(int(p))
    return out


def _status(pid):
    return dict(l.split(":\t", 1) for l in Path(f"/proc/{pid}/status").read_text().splitlines()
                if ":\t" in l)


def test_pid1_holds_nothing_from_the_host(esc):
    """From the host, while a step runs: pid 1 of the sandbox is under
    seccomp with no_new_privs, keeps CAP_KILL only, holds no descriptor,
    and the command leads a session of its own."""
    import conftest
    proc = subprocess.Popen([str(conftest.IMGBUILD), "--store", str(esc["store"]), "run",
                             "--rootfs", str(esc["rootfs"]), "--", "/try", "hold"],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == "READY"
        (setup,) = _children(proc.pid)
        (pid1,) = _children(setup)
        (cmd,) = _children(pid1)
        st = _status(pid1)
        assert st["NSpid"].split()[-1] == "1", st["NSpid"]
        assert st["Seccomp"].strip() == "2"
        assert st["NoNewPrivs"].strip() == "1"
        assert int(st["CapEff"], 16) == 1 << 5          # CAP_KILL, to forward signals
        assert int(st["CapBnd"], 16) == 1 << 5
        if os.getuid() == 0:
            assert os.listdir(f"/proc/{pid1}/fd") == []
        else:
            # non-dumpable: even its owner cannot look (nor can a step)
            with pytest.raises(PermissionError):
                os.listdir(f"/proc/{pid1}/fd")
        # the command: its own session, its own process group
        fields = Path(f"/proc/{cmd}/stat").read_text().rsplit(")", 1)[1].split()
        assert int(fields[3]) == cmd and int(fields[2]) == cmd  # session, pgrp
        assert _status(cmd)["Seccomp"].strip() == "2"
    finally:
        proc.stdin.close()
        proc.wait(timeout=30)
    assert proc.returncode == 0


# --- the caller's terminal ---------------------------------------------------

def test_own_session_without_terminal(esc):
    assert attempt(esc, "session") == "sid=own tty=ENXIO"


@pytest.mark.parametrize("relayed", [False, True], ids=["stdin-only", "stdin-stdout"])
@pytest.mark.parametrize("call", [["tiocsti", "0"], ["tiocsti", "1"], ["tiocsti", "2"],
                                  ["tiocsti", "0", "hi"], ["tiocsti", "tty"],
                                  ["tioclinux", "0"]])
def test_no_keystrokes_into_the_callers_terminal(esc, call, relayed):
    """imgbuild run with the caller's terminal (a pty here, the caller's
    controlling terminal) as stdin, and as stdout too (then the command
    gets a pty of its own, relayed): the step can neither type into the
    caller's terminal (TIOCSTI; CVE-2017-5226) nor paste (TIOCLINUX), and
    nothing is waiting as input once imgbuild has exited."""
    import conftest
    import fcntl
    import pty
    import termios
    master, slave = pty.openpty()
    try:
        attr = termios.tcgetattr(slave)
        attr[3] &= ~(termios.ICANON | termios.ECHO)     # injected bytes readable at once
        termios.tcsetattr(slave, termios.TCSANOW, attr)

        def as_session_leader():
            os.setsid()
            fcntl.ioctl(0, termios.TIOCSCTTY, 0)         # the pty is the caller's terminal
        out = subprocess.PIPE if not relayed else slave
        proc = subprocess.Popen([str(conftest.IMGBUILD), "--store", str(esc["store"]), "run",
                                 "--rootfs", str(esc["rootfs"]), "--", "/try", *call],
                                stdin=slave, stdout=out, stderr=subprocess.PIPE,
                                preexec_fn=as_session_leader)
        if relayed:
            # the command's output comes through the caller's terminal
            got = b""
            while proc.poll() is None or b"\n" not in got:
                import select
                r, _, _ = select.select([master], [], [], 1)
                if r:
                    got += os.read(master, 4096)
            stdout = got.decode()
        else:
            stdout = proc.stdout.read().decode()
        proc.wait(timeout=120)
        assert proc.returncode == 0, proc.stderr.read()
        expected = "ERRNO ENXIO" if call == ["tiocsti", "tty"] and not relayed else "ERRNO EPERM"
        assert stdout.strip().splitlines()[-1] == expected, stdout
        # what the terminal's reader (the caller's shell) would get next
        os.set_blocking(slave, False)
        try:
            pending = os.read(slave, 4096)
        except BlockingIOError:
            pending = b""
        assert b"#" not in pending, pending
    finally:
        os.close(master)
        os.close(slave)


def test_interactive_run_gets_its_own_terminal(esc):
    """On a terminal, `imgbuild run` gives the command a pty of the
    sandbox (its controlling terminal, with the caller's window size) and
    relays keystrokes and output, as podman run -t does."""
    import conftest
    import fcntl
    import pty
    import select
    import struct
    import termios
    pid, fd = pty.fork()
    if pid == 0:
        fcntl.ioctl(0, termios.TIOCSWINSZ, struct.pack("HHHH", 33, 111, 0, 0))
        os.execv(str(conftest.IMGBUILD), [str(conftest.IMGBUILD), "--store", str(esc["store"]),
                                          "run", "--rootfs", str(esc["rootfs"]), "--", "/bin/sh"])
    os.write(fd, b"tty; stty size; /try session; exit 7\n")
    got = b""
    while True:
        r, _, _ = select.select([fd], [], [], 60)
        if not r:
            break
        try:
            chunk = os.read(fd, 4096)
        except OSError:
            break
        if not chunk:
            break
        got += chunk
    _, status = os.waitpid(pid, 0)
    text = got.decode(errors="replace")
    assert os.waitstatus_to_exitcode(status) == 7, text
    assert "/dev/pts/0" in text and "33 111" in text, text
    # the shell's child is in the shell's session, whose terminal is the pty
    assert "sid=caller's tty=OK" in text, text


# --- /proc and /sys: runc's masked and read-only paths ---------------------

@pytest.mark.parametrize("path", [
    "/proc/sys/kernel/core_pattern", "/proc/sys/kernel/modprobe", "/proc/sys/vm/drop_caches",
    "/proc/sys/kernel/hostname", "/proc/sys/kernel/sched_child_runs_first", "/proc/sysrq-trigger",
    "/proc/sys/fs/binfmt_misc/register", "/proc/fs/nfsd/threads", "/proc/irq/default_smp_affinity",
])
def test_kernel_settings_read_only(esc, path):
    if not os.path.exists(path):
        # absent from this kernel: nothing to write to, nor to create
        assert attempt(esc, "write", path) in ("ERRNO ENOENT", "ERRNO EROFS")
        return
    # binfmt_misc's register is write-only (reading it fails even for
    # root): what a write would change there is the handlers beside it
    readable = os.access(path, os.R_OK) and not path.endswith("/register")
    before = Path(path).read_text() if readable else None
    siblings = sorted(os.listdir(os.path.dirname(path)))
    # the step's own /proc has no binfmt_misc mounted (the host's mount on
    # its /proc is not in the sandbox): nothing there to write to
    allowed = ("ERRNO EROFS", "ERRNO ENOENT") if "/binfmt_misc/" in path else ("ERRNO EROFS",)
    try:
        assert attempt(esc, "write", path) in allowed
    finally:
        # a broken sandbox in root mode writes the host's setting: put
        # it back before anything crashes with it
        after = Path(path).read_text() if before is not None else None
        if after != before and os.getuid() == 0:
            Path(path).write_text(before)
    assert after == before
    assert sorted(os.listdir(os.path.dirname(path))) == siblings


CGROUP_V1 = sorted(str(p) for p in Path("/sys/fs/cgroup").glob("*/release_agent"))


@pytest.mark.parametrize("path", [
    "/sys/kernel/uevent_helper", "/sys/kernel/mm/transparent_hugepage/enabled",
    "/sys/fs/cgroup/cgroup.procs", "/sys/fs/cgroup/release_agent",
    "/sys/fs/cgroup/memory/notify_on_release", "/sys/power/state",
    "/sys/module/kernel/parameters/panic", *CGROUP_V1,
])
def test_sys_read_only(esc, path):
    """/sys is read-only all the way down: the cgroup v1 release_agent
    (CVE-2022-0492) and uevent_helper would run a program as host root."""
    expected = "ERRNO EROFS" if os.path.isdir(os.path.dirname(path)) else "ERRNO ENOENT"
    assert attempt(esc, "write", path) == expected


@pytest.mark.parametrize("path", ["/proc/kcore", "/proc/keys", "/proc/timer_list",
                                  "/proc/sched_debug", "/proc/latency_stats"])
def test_masked_files_read_empty(esc, path):
    if not os.path.exists(path):
        assert attempt(esc, "read", path) == "ERRNO ENOENT"
    else:
        assert attempt(esc, "read", path) == "OK 0"


@pytest.mark.parametrize("path", ["/proc/acpi", "/proc/scsi", "/proc/asound", "/sys/firmware",
                                  "/sys/devices/virtual/powercap"])
def test_masked_directories_empty(esc, path):
    if not os.path.isdir(path):
        assert attempt(esc, "list", path) == "ERRNO ENOENT"
        return
    assert attempt(esc, "list", path) == "OK 0"
    assert attempt(esc, "write", path + "/x") == "ERRNO EROFS"


@pytest.mark.parametrize("fstype,target", [("proc", "/mnt"), ("sysfs", "/mnt"),
                                           ("cgroup2", "/mnt"), ("cgroup", "/mnt"),
                                           ("proc", "/proc")])
def test_no_new_kernel_filesystems(esc, fstype, target):
    assert attempt(esc, "mount-fs", fstype, target) == "ERRNO EPERM"


# --- descriptors and working directories into the host (CVE-2024-21626) ---

@pytest.mark.parametrize("fd", [3, 4, 5, 7, 8])
def test_workdir_through_leaked_descriptor(esc, fd):
    # runc leaked a host directory descriptor into the container, and
    # WORKDIR /proc/self/fd/N put the process in the host's tree
    r = imgbuild("run", "--rootfs", esc["rootfs"], "-w", f"/proc/self/fd/{fd}", "--",
                 "/try", "write", "../../../../../..{}/pwned".format(esc["canary"]),
                 store=esc["store"])
    assert r.rc != 0 or r.out.strip() in ("OK", "ERRNO ENOENT"), r
    assert canary_untouched(esc)


def test_mountinfo_names_no_host_path(tmp_path, registry, base_image):
    """The step's overlay names its layers through descriptors
    (/proc/self/fd/N at mount time): /proc/self/mountinfo shows no path of
    the store (which holds the user's name), in a run and in a build."""
    store = tmp_path / "store-of-a-telling-name"
    r = imgbuild("run", base_image, "--", "cat", "/proc/self/mountinfo", store=store)
    assert r.rc == 0, r
    root = [l for l in r.out.splitlines() if l.split()[4] == "/"]
    assert root and " overlay " in root[0] and "lowerdir=/proc/self/fd/" in root[0], r.out
    assert "telling-name" not in r.out and str(tmp_path) not in r.out, r.out
    ctx = tmp_path / "ctx"
    ctx.mkdir()
    (ctx / "Dockerfile").write_text(
        f"FROM {base_image}\nRUN echo one > /one\n"
        "RUN cat /proc/self/mountinfo > /mi && grep -q 'lowerdir=/proc/self/fd/' /mi\n"
        "OUTPUT type=local,dest=out,src=/mi\n")
    r = imgbuild("build", "-f", ctx / "Dockerfile", ctx, cwd=ctx, store=store)
    assert r.rc == 0, r
    mi = (ctx / "out" / "mi").read_text()
    assert "telling-name" not in mi and str(tmp_path) not in mi, mi
