"""What package managers and friends need, in the identity mode this pass
runs in (root; unprivileged with subordinate ids = map; IMGBUILD_USERNS=
single): apt-get update + install from the Debian mirror, dpkg -i of a
local .deb, useradd, chown -R, pip install of a local wheel, make -j; and
what the layer records of ownership in each mode (docs/security.md)."""
import base64
import hashlib
import json
import os
import shutil
import subprocess
import tarfile
import tempfile
import zipfile
from pathlib import Path

from conftest import IMGBUILD, imgbuild, remove_tree


def mode_in_force():
    if os.geteuid() == 0:
        return "root"
    return "single" if os.environ.get("IMGBUILD_USERNS") == "single" else "map"


def make_wheel(path):
    """A pure-Python wheel (PEP 427): one module, dist-info with RECORD."""
    files = {
        "idprobe.py": b"VALUE = 'installed from a local wheel'\n",
        "idprobe-1.0.dist-info/METADATA": b"Metadata-Version: 2.1\nName: idprobe\nVersion: 1.0\n",
        "idprobe-1.0.dist-info/WHEEL": b"Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\n"
                                       b"Tag: py3-none-any\n",
    }
    record = []
    for name, data in files.items():
        h = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        record.append(f"{name},sha256={h},{len(data)}")
    record.append("idprobe-1.0.dist-info/RECORD,,")
    files["idprobe-1.0.dist-info/RECORD"] = ("\n".join(record) + "\n").encode()
    with zipfile.ZipFile(path, "w") as z:
        for name, data in files.items():
            z.writestr(name, data)


def test_package_managers_and_ownership(registry, base_image, store, tmp_path):
    ctx = tmp_path / "ctx"
    ctx.mkdir()
    make_wheel(ctx / "idprobe-1.0-py3-none-any.whl")
    (ctx / "Makefile").write_text("all: a b c d\n%:\n\techo $@ > $@.out\n")
    out = tmp_path / "out"
    recipe = ctx / "r.recipe"
    recipe.write_text(f"""
FROM {base_image}
ENV DEBIAN_FRONTEND=noninteractive
RUN apt-get update -q && apt-get install -y -q --no-install-recommends make python3-pip \\
 && rm -rf /var/lib/apt/lists/*
# a local .deb, built and installed with dpkg
RUN mkdir -p /tmp/pkg/DEBIAN /tmp/pkg/usr/share/idprobe \\
 && printf 'Package: idprobe\\nVersion: 1.0\\nArchitecture: all\\nMaintainer: t <t@t>\\nDescription: t\\n' > /tmp/pkg/DEBIAN/control \\
 && echo deb > /tmp/pkg/usr/share/idprobe/marker \\
 && dpkg-deb --root-owner-group --build /tmp/pkg /tmp/idprobe.deb && dpkg -i /tmp/idprobe.deb \\
 && dpkg -s idprobe | grep -q 'Status: install ok installed' && rm -rf /tmp/pkg /tmp/idprobe.deb
RUN useradd -m -u 1234 builder && mkdir -p /home/builder/tree/sub && touch /home/builder/tree/sub/f \\
 && chown -R builder:builder /home/builder/tree && id builder > /id.txt
COPY idprobe-1.0-py3-none-any.whl Makefile /src/
RUN pip install --break-system-packages --no-index /src/idprobe-1.0-py3-none-any.whl \\
 && python3 -c 'import idprobe; print(idprobe.VALUE)' > /pip.txt
RUN cd /src && make -j4 && cat a.out b.out c.out d.out > /make.txt
OUTPUT type=image,name=identity:probe
OUTPUT type=local,dest={out}
""")
    r = imgbuild("build", recipe, store=store, cwd=ctx, timeout=1200)
    assert r.rc == 0, r
    assert (out / "usr/share/idprobe/marker").read_text() == "deb\n"
    assert (out / "id.txt").read_text().startswith("uid=1234(builder) gid=1234(builder)")
    assert (out / "pip.txt").read_text() == "installed from a local wheel\n"
    assert (out / "make.txt").read_text() == "a\nb\nc\nd\n"

    # Ownership as the layer records it (the useradd/chown step's layer).
    m = json.loads(imgbuild("inspect", "identity:probe", store=store).out)
    owners = {}
    for layer in m["manifest"]["layers"][1:]:
        with tarfile.open(Path(store) / "blobs/sha256" / layer["digest"].split(":")[1]) as t:
            for ti in t.getmembers():
                if ti.name.startswith("home/builder/tree"):
                    owners[ti.name.rstrip("/")] = (ti.uid, ti.gid)
    assert set(owners) == {"home/builder/tree", "home/builder/tree/sub",
                           "home/builder/tree/sub/f"}, owners
    assert set(owners.values()) == {(1234, 1234)}, (mode_in_force(), owners)


def test_user_gets_its_supplementary_groups(registry, base_image, store, tmp_path):
    """A RUN under USER gets the groups /etc/group lists the user in, as
    runc's GetExecUser gives BuildKit's steps (additional gids): when USER
    names no group, found by name or by uid; none with USER user:group.
    In the single-id mode only one gid is mapped and setgroups(2) is denied:
    the step runs as 0:0 with the groups imgbuild was started with, seen as
    0 (the caller's own group) or the overflow gid 65534
    (docs/security.md)."""
    out = tmp_path / "out"
    recipe = tmp_path / "groups.recipe"
    recipe.write_text(f"""
FROM {base_image}
RUN groupadd -g 1500 extra && groupadd -g 1600 other \\
    && useradd -u 1500 -g 1500 -G extra,audio,other u1 && useradd -u 1700 solo \\
    && mkdir /g && chmod 1777 /g
USER u1
RUN id -G > /g/name
USER 1500
RUN id -G > /g/uid
USER u1:other
RUN id -G > /g/explicit
USER solo
RUN id -G > /g/solo
USER root
RUN id -G > /g/root
OUTPUT type=local,dest={out},src=/g
""")
    r = imgbuild("build", recipe, store=store, cwd=tmp_path)
    assert r.rc == 0, r
    got = {f: (out / f).read_text().split() for f in ("name", "uid", "explicit", "solo", "root")}
    if mode_in_force() == "single":
        for f, ids in got.items():
            assert ids[0] == "0" and set(ids) <= {"0", "65534"}, (f, got)
    else:
        # `id -G`: the effective gid first, then the supplementary groups
        # (audio is gid 29 in Debian's base-passwd)
        assert got == {"name": ["1500", "29", "1600"], "uid": ["1500", "29", "1600"],
                       "explicit": ["1600"], "solo": ["1700"], "root": ["0"]}, got


def base_owners(tarball):
    """{path: (uid, gid, mode)} of the regular files and directories of the
    base image's own tarball (mmdebstrap's, which tests/lib/base-image.sh
    pushed): the owners a root unpack gives."""
    owners = {}
    with tarfile.open(tarball) as t:
        for ti in t.getmembers():
            if ti.isfile() or ti.isdir():
                owners[ti.name.lstrip("./").rstrip("/")] = (ti.uid, ti.gid, ti.mode)
    owners.pop("", None)
    return owners


def tar_owners(tarball):
    with tarfile.open(tarball) as t:
        return {ti.name.rstrip("/"): (ti.uid, ti.gid, ti.mode)
                for ti in t.getmembers() if ti.isfile() or ti.isdir()}


def tarballs_in_modes(recipe, tmp_path):
    """{mode: path of OUTPUT type=tar's rootfs.tar}: `recipe` built with
    --reproducible in this pass's mode and, unless that is it, forced to
    the single-id mode, each in a store and directory of its own."""
    modes = [mode_in_force()] + (["single"] if mode_in_force() != "single" else [])
    out = {}
    for mode in modes:
        work = tmp_path / mode
        work.mkdir()
        r = imgbuild("build", "--reproducible", recipe, store=tmp_path / f"store-{mode}",
                     cwd=work, env={"SOURCE_DATE_EPOCH": "1700000000", "IMGBUILD_USERNS": mode})
        assert r.rc == 0, (mode, r)
        out[mode] = work / "rootfs.tar"
    return out


def same_bytes(tarballs):
    digests = {m: hashlib.sha256(t.read_bytes()).hexdigest() for m, t in tarballs.items()}
    assert len(set(digests.values())) == 1, digests


def test_base_image_owners_kept_in_every_mode(registry, base_image, tmp_path):
    """The base's files keep the owners its layer gives in every identity
    mode: where the kernel cannot give a file its owner (the single-id
    mode: one id), unpack records it (user.rootlesscontainers, rootfs/
    owner.h) and OUTPUT type=tar writes it. The tarball is the same bytes
    built in this pass's mode and forced to the single-id mode."""
    from conftest import cache_dir
    want = base_owners(cache_dir() / "bookworm-minbase.tar")
    # what the issue found lost in the single-id mode, among them
    assert want["etc/shadow"][:2] == (0, 42) and want["usr/bin/chage"][1] == 42
    assert want["usr/bin/chage"][2] & 0o2000 and want["var/mail"][1] == 8
    assert any(u not in (0,) for u, _, _ in want.values())  # _apt's partial directories
    recipe = tmp_path / "base.recipe"
    recipe.write_text(f"FROM {base_image}\nOUTPUT type=tar,dest=rootfs.tar\n")
    tarballs = tarballs_in_modes(recipe, tmp_path)
    for mode, tarball in tarballs.items():
        got = tar_owners(tarball)
        # (the sandbox provides /dev: its directories are not in an export)
        lost = {p: (got.get(p), w) for p, w in want.items()
                if got.get(p) != w and not p.startswith("dev/")}
        assert not lost, (mode, dict(list(lost.items())[:12]))
    same_bytes(tarballs)


def test_copy_owners_same_in_every_mode(registry, base_image, tmp_path):
    """COPY --chown to ids the single-id mode lacks, and COPY --from of
    files whose owner only a record holds there (/etc/shadow 0:42, the
    setgid chage), give the owners root mode gives, and the same OUTPUT
    type=tar bytes."""
    ctx = tmp_path / "ctx"
    ctx.mkdir()
    (ctx / "f").write_text("f\n")
    (ctx / "d").mkdir()
    (ctx / "d" / "g").write_text("g\n")
    recipe = ctx / "copy.recipe"
    recipe.write_text(f"""
FROM {base_image} AS src
FROM {base_image}
COPY --chown=1234:1235 f /x
COPY --chown=1234:1235 d /deep/in/d
COPY --from=src /etc/shadow /shadow-copy
COPY --from=src /usr/bin/chage /chage-copy
OUTPUT type=tar,dest=rootfs.tar
""")
    tarballs = tarballs_in_modes(recipe, tmp_path)
    for mode, tarball in tarballs.items():
        got = tar_owners(tarball)
        assert got["x"][:2] == (1234, 1235), (mode, got["x"])
        assert got["deep/in/d"][:2] == got["deep/in/d/g"][:2] == (1234, 1235), mode
        assert got["shadow-copy"][:2] == (0, 42), (mode, got["shadow-copy"])
        assert got["chage-copy"] == (0, 42, 0o2755), (mode, oct(got["chage-copy"][2]))
    same_bytes(tarballs)


UNPRIV = os.environ.get("IMGBUILD_TEST_USER", "imgbuild-test")


def build_as_unprivileged(recipe, tag, mode):
    """`recipe` built by the unprivileged test user in `mode` (the root
    pass reaches the map mode this way; tests/run-e2e.sh makes the user and
    its subordinate ids before that pass).  Returns (rootfs.tar bytes, the
    image's digest)."""
    try:
        subprocess.run(["id", UNPRIV], check=True, capture_output=True)
    except subprocess.CalledProcessError:
        raise AssertionError(f"no user {UNPRIV}: run the suite with tests/run-e2e.sh, "
                             "which makes it (with subordinate ids) for the map mode")
    top = Path(tempfile.mkdtemp(prefix="ib-modes-", dir="/tmp"))
    try:
        shutil.copy(recipe, top / "r.recipe")
        shutil.chown(top, UNPRIV)
        top.chmod(0o755)
        base = ["runuser", "-u", UNPRIV, "--", "env", "SOURCE_DATE_EPOCH=1700000000",
                f"IMGBUILD_USERNS={mode}", str(IMGBUILD), "--store", str(top / "store")]
        p = subprocess.run(base + ["build", "--reproducible", "r.recipe"], cwd=top,
                           capture_output=True, text=True, timeout=1800)
        assert p.returncode == 0, (mode, p.stdout[-3000:], p.stderr[-3000:])
        p = subprocess.run(base + ["inspect", tag], cwd=top, capture_output=True, text=True)
        assert p.returncode == 0, p.stderr
        return (top / "rootfs.tar").read_bytes(), json.loads(p.stdout)["digest"]
    finally:
        remove_tree(top)
        shutil.rmtree(top, ignore_errors=True)


def builds_in_every_mode(recipe, tag, tmp_path):
    """{mode: (rootfs.tar path, image digest)}: `recipe` built with
    --reproducible in every identity mode this pass can reach: as root all
    three (map through the unprivileged user), unprivileged with
    subordinate ids map and single, forced single only single."""
    me = mode_in_force()
    modes = {"root": ["root", "map", "single"], "map": ["map", "single"],
             "single": ["single"]}[me]
    out = {}
    for mode in modes:
        work = tmp_path / mode
        work.mkdir()
        if me == "root" and mode == "map":
            data, digest = build_as_unprivileged(recipe, tag, mode)
            (work / "rootfs.tar").write_bytes(data)
            out[mode] = (work / "rootfs.tar", digest)
            continue
        store = tmp_path / f"store-{mode}"
        env = {"SOURCE_DATE_EPOCH": "1700000000", "IMGBUILD_USERNS": mode}
        r = imgbuild("build", "--reproducible", recipe, store=store, cwd=work, env=env)
        assert r.rc == 0, (mode, r)
        digest = json.loads(imgbuild("inspect", tag, store=store).out)["digest"]
        out[mode] = (work / "rootfs.tar", digest)
    return out


def tar_entries(tarball):
    """{name: (type, uid, gid, mode, mtime, linkname, sha256 of the data)}"""
    out = {}
    with tarfile.open(tarball) as t:
        for ti in t.getmembers():
            data = t.extractfile(ti).read() if ti.isfile() else b""
            out[ti.name] = (ti.type, ti.uid, ti.gid, ti.mode, ti.mtime, ti.linkname,
                            hashlib.sha256(data).hexdigest()[:12])
    return out


def tar_diff(a, b):
    """{name: (entry in a, entry in b)} where two tarballs differ."""
    ea, eb = tar_entries(a), tar_entries(b)
    return {n: (ea.get(n), eb.get(n)) for n in sorted(set(ea) | set(eb)) if ea.get(n) != eb.get(n)}


def passwd_ids(tarball, name):
    with tarfile.open(tarball) as t:
        for line in t.extractfile("etc/passwd").read().decode().splitlines():
            f = line.split(":")
            if f[0] == name:
                return int(f[2]), int(f[3])
    raise AssertionError(f"no {name} in etc/passwd")


def test_step_owners_same_in_every_mode(registry, base_image, tmp_path):
    """The issue's recipe: a package that makes its own system user and
    chowns its directory to it (uuid-runtime: uuidd, /var/lib/libuuid
    2775), useradd + chown -R, groupadd + chgrp + chmod g+s, a chown that
    clears set-user-ID.  Built with --reproducible in every mode: the
    owners are root mode's, and the image digests and the OUTPUT type=tar
    bytes are the same.  In the single-id mode the step's chown calls reach
    imgbuild's supervisor (rootfs/chown_notify.h), which records them."""
    recipe = tmp_path / "owners.recipe"
    recipe.write_text(f"""
FROM {base_image}
ENV DEBIAN_FRONTEND=noninteractive
RUN apt-get update -q && apt-get install -y -q --no-install-recommends uuid-runtime \\
 && apt-get clean && rm -rf /var/lib/apt/lists/* /var/log/apt /var/log/dpkg.log \\
    /var/log/alternatives.log /var/cache/ldconfig/aux-cache /var/cache/debconf/*-old
RUN useradd -m -u 1234 svc && mkdir -p /data/sub /srv/shared && touch /data/sub/f \\
 && chown -R svc:svc /data && groupadd -g 2000 team && chgrp team /srv/shared \\
 && chmod g+s /srv/shared && touch /srv/tool && chmod 4755 /srv/tool && chown svc /srv/tool \\
 && rm -f /var/cache/ldconfig/aux-cache
OUTPUT type=image,name=owners:probe
OUTPUT type=tar,dest=rootfs.tar
""")
    builds = builds_in_every_mode(recipe, "owners:probe", tmp_path)
    first = next(iter(builds))
    for mode, (tarball, _) in builds.items():
        diff = tar_diff(builds[first][0], tarball)
        assert not diff, (first, mode, dict(list(diff.items())[:8]))
    for mode, (tarball, _) in builds.items():
        got = tar_owners(tarball)
        uuidd = passwd_ids(tarball, "uuidd")
        assert uuidd[0] != 0
        assert got["var/lib/libuuid"] == (*uuidd, 0o2775), (mode, got["var/lib/libuuid"])
        for p in ("data", "data/sub", "data/sub/f", "home/svc"):
            assert got[p][:2] == (1234, 1234), (mode, p, got[p])
        assert got["srv/shared"] == (0, 2000, 0o2755), (mode, got["srv/shared"])
        assert got["srv/tool"] == (1234, 0, 0o755), (mode, got["srv/tool"])  # set-user-ID gone
        # useradd rewrites it as a new file chowned to the ids fstat gave
        # the old one: the single-id mode's fstat must show the record
        assert got["etc/shadow"][:2] == (0, 42), mode
    same_bytes({m: t for m, (t, _) in builds.items()})
    digests = {m: d for m, (_, d) in builds.items()}
    assert len(set(digests.values())) == 1, digests


def test_step_sees_recorded_owner_through_fstat(registry, base_image, tmp_path):
    """What a step sees of an owner only a record holds (the single-id
    mode; docs/security.md): the stat of an open file (fstat) shows it, as
    in root mode; a stat by path shows the kernel's 0. /etc/shadow is 0:42
    in the base."""
    out = tmp_path / "out"
    recipe = tmp_path / "seen.recipe"
    recipe.write_text(f"""
FROM {base_image}
RUN perl -e 'open(F, "<", "/etc/shadow") or die; my @f = stat(F); my @p = stat("/etc/shadow"); \\
      print "fstat=$f[4]:$f[5] path=$p[4]:$p[5]\\n"' > /seen
OUTPUT type=local,dest={out},src=/seen
""")
    r = imgbuild("build", recipe, store=tmp_path / "store", cwd=tmp_path)
    assert r.rc == 0, r
    path = "0:0" if mode_in_force() == "single" else "0:42"
    assert (out / "seen").read_text() == f"fstat=0:42 path={path}\n"
