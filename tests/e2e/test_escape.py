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


def test_bind_onto_an_image_symlink(esc):
    """run -v onto a target that is a symlink of the image: a directory
    bind follows it inside the rootfs, creating what is missing there
    (never on the host), and the mount points it made are gone after; a
    file bind onto a symlink is refused."""
    root = esc["rootfs"]
    link = root / "escape-link"
    link.symlink_to(f"{esc['canary']}/made")      # dangling in the rootfs; on the host, the canary
    try:
        out = attempt(esc, "write", "/escape-link/sub/x", extra=("-v", f"{esc['bindsrc']}:/escape-link/sub"))
        assert out == "OK", out
        assert (esc["bindsrc"] / "x").read_text() == "escaped\n"   # through the bind, into its source
        assert canary_untouched(esc)
        assert not (root / str(esc["canary"]).lstrip("/")).exists()  # made in the rootfs, removed after
        hostfile = esc["canary"].parent / "hostfile"
        hostfile.write_text("host\n")
        (root / "file-link").symlink_to("/etc/hostname")
        r = imgbuild("run", "-v", f"{hostfile}:/file-link", "--rootfs", root, "--", "/try", "pids",
                     store=esc["store"])
        assert r.rc != 0 and "/file-link is a symlink in the rootfs" in r.err, r
    finally:
        link.unlink()
        (esc["bindsrc"] / "x").unlink(missing_ok=True)
        (root / "file-link").unlink(missing_ok=True)


# --- the host's inodes behind the sandbox's own binds ---------------------

# In root mode the step's uid 0 is the host's: through a writable bind of
# the host's /dev/null it could chown or chmod the machine's /dev/null
# (issue 38, hole 1).  Every such bind is read-only (docs/security.md,
# "Every bind"): the kernel answers EROFS before it looks at who asks, so
# the answer is the same in all three modes (in single-id mode the chown
# goes through the supervisor, which passes the kernel's answer on).
# A masked /proc file (runc's list, the first this kernel has) is the
# host's /dev/null bound over it.
HOST_NODES = ["/dev/null", "/dev/zero", "/dev/full", "/dev/random", "/dev/urandom", "/dev/tty",
              "masked /proc file"]


def masked_proc_file():
    for p in ("/proc/kcore", "/proc/keys", "/proc/timer_list", "/proc/latency_stats"):
        if os.path.exists(p):
            return p
    pytest.fail("this kernel has none of runc's masked /proc files")


@pytest.mark.parametrize("call", ["chown", "chmod", "utimes"])
@pytest.mark.parametrize("path", HOST_NODES)
def test_host_device_nodes_unchangeable(esc, path, call):
    if path.startswith("masked"):
        path, host = masked_proc_file(), "/dev/null"
    else:
        host = path
    if not os.path.exists(host):
        pytest.fail(f"this host has no {host}")
    before = os.stat(host)
    assert attempt(esc, call, path) == "ERRNO EROFS"
    after = os.stat(host)
    assert (after.st_mode, after.st_uid, after.st_gid) == (before.st_mode, before.st_uid, before.st_gid)
    if host != "/dev/tty":  # (a tty's times move with its use)
        assert after.st_mtime_ns == before.st_mtime_ns and after.st_ctime_ns == before.st_ctime_ns


def test_host_device_nodes_still_work(esc):
    """Read-only binds of device nodes still read and write."""
    r = imgbuild("run", "--rootfs", esc["rootfs"], "--", "/bin/sh", "-c",
                 "echo x > /dev/null && head -c 4 /dev/zero | od -An -tx1 && "
                 "head -c 8 /dev/urandom | wc -c",
                 store=esc["store"])
    assert r.rc == 0, r
    assert [l.strip() for l in r.out.splitlines()] == ["00 00 00 00", "8"], r
    assert attempt(esc, "write", "/dev/null") == "OK"
    assert attempt(esc, "write", "/dev/full") == "ERRNO No space left on device"


def test_recipe_cannot_change_host_devices(esc, base_image, tmp_path):
    """The probe's recipe, with changes that would leave the host as it
    was had they succeeded: each is refused."""
    before = {d: os.stat(d) for d in ("/dev/null", "/dev/full", "/dev/zero")}
    (tmp_path / "Dockerfile").write_text(
        f"FROM {base_image}\n"
        "RUN for c in 'chown 0:0 /dev/null' 'chmod 0666 /dev/full' 'touch /dev/zero'; do "
        "$c 2>>/errors && echo \"$c: changed\" >> /errors; done; cat /errors; "
        "test $(grep -c 'Read-only file system' /errors) = 3\n")
    r = imgbuild("build", "--progress", "plain", ".", store=esc["store"], cwd=tmp_path)
    assert r.rc == 0, r
    for d, st in before.items():
        now = os.stat(d)
        assert (now.st_mode, now.st_uid, now.st_gid, now.st_mtime_ns) == \
            (st.st_mode, st.st_uid, st.st_gid, st.st_mtime_ns), d


@pytest.mark.parametrize("which", ["self", "thread"])
def test_chown_through_proc_self_fd(esc, which):
    """chown("/proc/self/fd/N") of an O_PATH descriptor, as
    systemd-tmpfiles does: the owner changes in every mode (in single-id
    mode the supervisor used to resolve "self" as itself: ENOENT; issue
    38, hole 8)."""
    f = esc["rootfs"] / "tmp" / f"owned-through-{which}"
    f.write_text("x")
    assert attempt(esc, "chown-self-fd", f"/tmp/{f.name}", which) == "OK 1234:1234"


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


def test_pid1_shows_no_host_command_line(tmp_path, registry, base_image):
    """/proc/1/cmdline is any step's to read, and pid 1 is a fork of
    imgbuild: it used to show imgbuild's own command line, with host
    paths, the store, build arguments and secret sources (issue 38, hole
    6).  Now it reads "imgbuild-init" and NULs; no file of /proc/1 a step
    may read names a host path or a build argument."""
    store = tmp_path / "store-of-a-telling-name"
    r = imgbuild("run", base_image, "--", "cat", "/proc/1/cmdline", store=store)
    assert r.rc == 0, r
    assert r.out.rstrip("\0") == "imgbuild-init", repr(r.out)
    ctx = tmp_path / "ctx"
    secret = tmp_path / "secret-source-mark"
    secret.write_text("the secret\n")
    ctx.mkdir()
    (ctx / "Dockerfile").write_text(
        f"FROM {base_image} AS b\nARG TOKEN\n"
        "RUN --mount=type=secret,id=s tr '\\0' '\\n' < /proc/1/cmdline > /cmdline && "
        "for f in /proc/1/* /proc/1/task/1/*; do [ -f \"$f\" ] && cat \"$f\"; done > /all 2>/dev/null; "
        "test -s /all\n"
        "FROM scratch\nCOPY --from=b /cmdline /all /\n")
    r = imgbuild("build", "--build-arg", "TOKEN=build-arg-mark", "--secret", f"id=s,src={secret}",
                 "-o", "type=local,dest=out", ctx, cwd=ctx, store=store)
    assert r.rc == 0, r
    assert (ctx / "out" / "cmdline").read_text().strip("\n") == "imgbuild-init"
    everything = (ctx / "out" / "all").read_bytes()
    for mark in (b"telling-name", b"build-arg-mark", b"secret-source-mark", str(tmp_path).encode()):
        assert mark not in everything, mark


# --- entitlements (BuildKit's --allow) --------------------------------------

def test_network_host_needs_the_entitlement(tmp_path, registry, base_image):
    """A recipe cannot give itself the host's network: RUN --network=host
    needs the user's --allow network.host, as in BuildKit
    (solver/llbsolver/vertex.go, ValidateEntitlements: "network.host is
    not allowed"), cached or not, and above all not past --network none
    (issue 38, hole 3: the step reached a server on the host's
    127.0.0.1)."""
    import socket
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(4)
    port = server.getsockname()[1]
    store = tmp_path / "store"
    (tmp_path / "Dockerfile").write_text(
        f"FROM {base_image}\n"
        f"RUN --network=host bash -c 'exec 3<>/dev/tcp/127.0.0.1/{port}' && echo reached > /r\n")
    refused = ("RUN --network=host needs the network.host entitlement: build with "
               "--allow network.host to grant it")
    try:
        for net in ((), ("--network", "none"), ("--network", "host")):
            r = imgbuild("build", *net, ".", store=store, cwd=tmp_path)
            assert r.rc == 1 and refused in r.err, r
        r = imgbuild("build", "--network", "none", "--allow", "network.host", "-t", "reached", ".",
                     store=store, cwd=tmp_path)
        assert r.rc == 0, r
        assert imgbuild("run", "reached", "--", "cat", "/r", store=store).out == "reached\n"
        # its result in the cache does not grant it either
        r = imgbuild("build", "--network", "none", ".", store=store, cwd=tmp_path)
        assert r.rc == 1 and refused in r.err, r
        # --network none without a --network of the step's own: loopback only
        (tmp_path / "Dockerfile").write_text(
            f"FROM {base_image}\n"
            f"RUN ! bash -c 'exec 3<>/dev/tcp/127.0.0.1/{port}' 2>/dev/null\n")
        r = imgbuild("build", "--network", "none", ".", store=store, cwd=tmp_path)
        assert r.rc == 0, r
    finally:
        server.close()
    r = imgbuild("build", "--allow", "network.hostt", ".", store=store, cwd=tmp_path)
    assert r.rc == 2 and "--allow network.hostt: expected network.host or security.insecure" in r.err, r
    (tmp_path / "Dockerfile").write_text(f"FROM {base_image}\nRUN --security=insecure true\n")
    r = imgbuild("build", "--allow", "security.insecure", ".", store=store, cwd=tmp_path)
    assert r.rc == 1 and "--allow security.insecure or not" in r.err, r
