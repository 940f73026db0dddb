"""Conformance with buildah: a set of small recipes is built by imgbuild and by
`buildah bud` on the same Debian base image, and the two images are compared
(1) config field by field (and the history's shape), (2) root filesystem as
the layers record it (paths, types, modes, ids, sizes, content digests,
symlink targets, hard-link groups, xattrs).

buildah runs with its own --root/--runroot, the vfs storage driver (works as
root and rootless without fuse-overlayfs) and chroot isolation (runc/crun
fail on some cgroup setups).  As an unprivileged user it needs subordinate id
ranges (/etc/subuid, /etc/subgid) and newuidmap; without them the tests skip,
saying why.  Every difference between the two that is not a bug is
normalized below, each with the reason; anything else fails."""
import copy
import hashlib
import json
import os
import posixpath
import pwd
import shutil
import subprocess
import tarfile
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from conftest import imgbuild, write

BUILDAH = shutil.which("buildah")


# --------------------------------------------------------------------------
# Recipes.  Each: the recipe text (with {base}) and its build args.
# buildah builds without --layers (with vfs every committed step copies the
# whole rootfs: about 4 s a step here), so its image has one layer for the
# whole build and its history's empty_layer flags say nothing; imgbuild's
# are checked against BuildKit's rule instead.

RECIPES = {
    # Config instructions, with variable expansion everywhere Docker does it.
    "config": ("""
FROM {base}
ARG FLAVOUR=plain
ARG VERSION=1.0
ARG UNUSED=unused
ENV APP_HOME=/opt/app PATH=/opt/app/bin:$PATH
ENV GREETING hello world
ENV MSG="${{GREETING}} from $APP_HOME" FLAV=${{FLAVOUR}}-${{VERSION}} DEF=${{NOPE:-fallback}} ALT=${{APP_HOME:+set}} ESC=\\$APP_HOME
ENV EMPTY=
ENV APP_HOME=/opt/app2
LABEL org.example.name="compat test" org.example.flavour=$FLAVOUR
LABEL "org.example.quoted"="a b" version=${{VERSION}}
WORKDIR /srv
WORKDIR data
WORKDIR sub/dir
WORKDIR $APP_HOME/work
USER nobody:nogroup
EXPOSE 80 443/tcp 53/udp
EXPOSE ${{PORT:-8080}}
VOLUME /data /scratch
VOLUME ["/var/log/app"]
STOPSIGNAL SIGUSR1
HEALTHCHECK --interval=30s --timeout=5s --start-period=1m --retries=3 CMD test -e /tmp/ok || exit 1
SHELL ["/bin/bash", "-eu", "-c"]
RUN [[ -n "$BASH_VERSION" ]] && echo "$FLAVOUR $MSG $(pwd) $(id -un)" > /tmp/shell-out
CMD echo "shell form $MSG"
ENTRYPOINT ["/bin/echo", "exec"]
""", {"FLAVOUR": "spicy"}),

    # Files: COPY from the context (--chown, --chmod), RUN making and removing
    # files, directories, symlinks, hard links, a fifo; files of the base
    # removed (whiteouts) and a base directory replaced (opaque or not).
    "files": ("""
FROM {base}
COPY files/ /opt/files/
COPY --chown=1234:2345 files/sub /opt/owned/
COPY --chmod=0640 single.conf /etc/single.conf
COPY --chown=nobody:nogroup --chmod=0750 files/run.sh single.conf /usr/local/bin/
RUN set -e; \\
    mkdir -p /srv/made/inner; echo made > /srv/made/inner/f; chmod 0711 /srv/made; \\
    ln -s ../made/inner/f /srv/made/rel-link; ln -s /etc/os-release /srv/abs-link; \\
    echo shared > /srv/hard1; ln /srv/hard1 /srv/hard2; ln /usr/bin/sed /srv/sed-hard; \\
    mkfifo -m 0620 /srv/fifo; touch /srv/setuid; chmod 4755 /srv/setuid; \\
    rm /etc/issue.net /etc/motd; rm -r /usr/share/doc/debconf
RUN set -e; \\
    rm /opt/files/a.txt /srv/hard2; echo replaced > /opt/files/sub/deep/b.txt; \\
    rm -r /etc/apt/sources.list.d; mkdir /etc/apt/sources.list.d; echo new > /etc/apt/sources.list.d/new.list; \\
    echo appended >> /etc/issue; chmod 0700 /usr/share/doc/sed
COPY --chown=1234:2345 files/a.txt /new/deeper/
USER 1234:2345
WORKDIR /srv/userdir
RUN id -u > /tmp/user-run
ENTRYPOINT echo shell form entrypoint "$@"
""", {}),

    # Multi-stage: global ARG in FROM, --build-arg, COPY --from by name and
    # by index, with --chown; an ENTRYPOINT-less final stage keeps the base's
    # Cmd until CMD replaces it.
    "multistage": ("""
ARG BASE={base}
ARG GREETING=hi
FROM $BASE AS builder
ARG GREETING
ARG TARGET=/out
RUN set -e; mkdir -p $TARGET/bin; echo "$GREETING" > $TARGET/greeting; \\
    printf '#!/bin/sh\\necho tool\\n' > $TARGET/bin/tool; chmod 755 $TARGET/bin/tool; \\
    ln -s tool $TARGET/bin/tool-link; chown -R 5:60 $TARGET/bin

FROM $BASE
COPY --from=builder /out/ /opt/out/
COPY --from=0 --chown=4321:4321 /out/greeting /opt/greeting-owned
COPY --from=builder /etc/os-release /opt/os-release
LABEL stage=final greeting=hello
CMD ["/opt/out/bin/tool", "--flag"]
""", {"GREETING": "hello"}),

    # COPY as BuildKit does it, where buildah 1.28 agrees (issue 21; the
    # rest is in test_copy_sources.py): a whole stage root with its dev/,
    # proc/, sys/ and hard links (perl, perl5.36.0); hard links made by
    # RUN, in the context, in another stage; a symlink source named after
    # the link (its content the target's), from the context and a stage;
    # a wildcard of several files to a destination without '/' (one file,
    # the last match's content).
    "copysem": ("""
FROM {base} AS root

FROM {base} AS linked
RUN set -e; mkdir -p /opt/bin /opt/m; echo exe > /opt/bin/myexe.1; ln -s myexe.1 /opt/bin/myexe; \\
    echo m > /opt/m/f; ln /opt/m/f /opt/m/g; ln -s f /opt/m/s

FROM {base}
COPY --from=root / /rootcopy/
RUN set -e; mkdir /srv/hl; echo x > /srv/hl/one; ln /srv/hl/one /srv/hl/two
COPY links/ /ctxlinks/
COPY --from=linked /opt/m /stagelinks/
COPY hello_world.sh /tmp/
COPY --from=linked /opt/bin/myexe /usr/bin/
COPY pair/* /onefile
""", {}),

    # (A stage name used twice is not compared here: for FROM NAME buildah
    # 1.28 took the last stage of the name before it, as BuildKit does, when
    # run as root, but the first one when run unprivileged; test_dropin.py
    # holds BuildKit's answer.)

    # COPY --from=IMAGE (an image reference, not a stage): the image's files.
    "copy-from-image": ("""
FROM {base}
COPY --from={base} /etc/os-release /opt/os-release-copy
COPY --from={base} /usr/share/doc/sed/ /opt/sed-doc/
""", {}),

    # USER's supplementary groups: the groups of /etc/group listing the
    # user, when USER names no group (runc's GetExecUser, which BuildKit
    # uses for a step's additional gids), found by name or by uid; none with
    # an explicit group or for a user no group lists.
    "user-groups": ("""
FROM {base}
RUN groupadd -g 1500 extra && groupadd -g 1600 other \\
    && useradd -u 1500 -g 1500 -G extra,audio,other u1 && useradd -u 1700 solo
USER u1
RUN id -G > /tmp/g-name
USER 1500
RUN id -G > /tmp/g-uid
USER u1:other
RUN id -G > /tmp/g-explicit
USER solo
RUN id -G > /tmp/g-solo
USER root
RUN id -G > /tmp/g-root
""", {}),
}


@pytest.fixture(scope="module")
def ctx(tmp_path_factory, base_image):
    c = tmp_path_factory.mktemp("compat-ctx")
    c.chmod(0o755)
    write(c / "files/a.txt", "alpha\n", 0o644)
    write(c / "files/run.sh", "#!/bin/sh\necho run\n", 0o755)
    write(c / "files/secret", "s3cret\n", 0o600)
    write(c / "files/sub/deep/b.txt", "beta\n", 0o644)
    (c / "files/sub/empty").mkdir()
    os.symlink("a.txt", c / "files/link")
    write(c / "single.conf", "key=value\n", 0o640)
    for d in ("files", "files/sub", "files/sub/deep"):
        (c / d).chmod(0o755)
    (c / "files/sub/empty").chmod(0o750)
    write(c / "links/a", "linked\n", 0o644)
    for n in ("b", "c", "d"):
        os.link(c / "links/a", c / f"links/{n}")
    write(c / "links/other", "other\n", 0o644)
    write(c / "hello.sh", "#!/bin/sh\necho hello\n", 0o755)
    os.symlink("hello.sh", c / "hello_world.sh")
    write(c / "pair/1.txt", "first\n", 0o644)
    write(c / "pair/2.txt", "second\n", 0o644)
    for d in ("links", "pair"):
        (c / d).chmod(0o755)
    for name, (text, _) in RECIPES.items():
        write(c / f"{name}.recipe", text.format(base=base_image), 0o644)
    return c


# --------------------------------------------------------------------------
# buildah

def buildah_skip_reason():
    """Why buildah cannot run here, or None."""
    if BUILDAH is None:
        return "buildah is not installed (tests/install-deps.sh installs it)"
    if os.geteuid() == 0:
        return None
    user = pwd.getpwuid(os.geteuid()).pw_name
    for f in ("/etc/subuid", "/etc/subgid"):
        try:
            lines = Path(f).read_text().splitlines()
        except OSError:
            lines = []
        if not any(l.split(":")[0] in (user, str(os.geteuid())) for l in lines):
            return (f"rootless buildah needs subordinate ids and user {user} has no range "
                    f"in {f}; the comparison runs as root and in map mode")
    if not shutil.which("newuidmap"):
        return "rootless buildah needs newuidmap (package uidmap)"
    return None


# Decided at collection, before any fixture (the registry and base image
# are session fixtures, set up first otherwise).
SKIP_REASON = buildah_skip_reason()
pytestmark = pytest.mark.skipif(SKIP_REASON is not None, reason=SKIP_REASON or "")


class Buildah:
    def __init__(self, root):
        self.root = root
        # buildah refuses a runroot path over 50 characters: a short one in /tmp.
        self.runroot = tempfile.mkdtemp(prefix="bah.", dir="/tmp")
        self.argv = [BUILDAH, "--root", str(root), "--runroot", self.runroot,
                     "--storage-driver", "vfs"]

    def __call__(self, *args, cwd=None, timeout=600):
        p = subprocess.run(self.argv + list(map(str, args)), cwd=cwd, capture_output=True,
                           text=True, timeout=timeout)
        assert p.returncode == 0, f"buildah {' '.join(map(str, args))}: rc={p.returncode}\n{p.stderr[-3000:]}"
        return p.stdout

    def close(self):
        subprocess.run(self.argv + ["rmi", "--all", "--force"], capture_output=True)
        if os.geteuid() != 0:
            # vfs layers hold files owned by subordinate ids: remove them in
            # buildah's user namespace, where this user is root.
            subprocess.run([BUILDAH, "unshare", "rm", "-rf", str(self.root), self.runroot],
                           capture_output=True)
        shutil.rmtree(self.root, ignore_errors=True)
        shutil.rmtree(self.runroot, ignore_errors=True)


@pytest.fixture(scope="module")
def buildah(tmp_path_factory):
    b = Buildah(tmp_path_factory.mktemp("buildah-root"))
    yield b
    b.close()


@pytest.fixture(scope="module")
def cstore(tmp_path_factory, registry, base_image):
    store = tmp_path_factory.mktemp("compat-store")
    r = imgbuild("pull", base_image, store=store)
    assert r.rc == 0, r
    return store


class Image:
    """One built image: its Docker-style config (dict) and its layers, each
    an uncompressed-or-compressed tar file path with its diff_id."""

    def __init__(self, config, layers):
        self.config = config
        self.layers = layers


def buildah_build(buildah, ctx, out, name):
    """Build RECIPES[name] with buildah: its Image."""
    _, args = RECIPES[name]
    tag = f"compat-{name}"
    bargs = [a for k, v in args.items() for a in ("--build-arg", f"{k}={v}")]
    # --format docker: buildah's OCI format drops HEALTHCHECK and SHELL,
    # which Docker and BuildKit keep in the config.
    buildah("bud", "--format", "docker", "--isolation", "chroot", "--tls-verify=false",
            *bargs, "-t", tag,
            "-f", ctx / f"{name}.recipe", ctx)
    cfg = json.loads(buildah("inspect", "--type", "image", tag))["Docker"]
    # The layers, uncompressed, through an OCI layout (the config there is
    # the one above less the Docker-only fields).
    lay = out / name
    buildah("push", "--disable-compression", tag, f"oci:{lay}:{tag}")
    idx = json.loads((lay / "index.json").read_text())
    man = json.loads(blob(lay, idx["manifests"][0]["digest"]).read_text())
    ocfg = json.loads(blob(lay, man["config"]["digest"]).read_text())
    assert ocfg["rootfs"]["diff_ids"] == cfg["rootfs"]["diff_ids"]
    return Image(cfg, [(blob(lay, l["digest"]), d)
                       for l, d in zip(man["layers"], ocfg["rootfs"]["diff_ids"])])


def imgbuild_build(cstore, ctx, name):
    """Build RECIPES[name] with imgbuild: its Image."""
    _, args = RECIPES[name]
    tag = f"compat-{name}"
    bargs = [a for k, v in args.items() for a in ("--build-arg", f"{k}={v}")]
    r = imgbuild("build", ctx / f"{name}.recipe", "--context", ctx, "-t", tag, *bargs,
                 store=cstore)
    assert r.rc == 0, r
    r = imgbuild("inspect", tag, store=cstore)
    assert r.rc == 0, r
    ins = json.loads(r.out)
    return Image(ins["config"], [(Path(cstore) / "blobs/sha256" / l["digest"].split(":")[1], d)
                                 for l, d in zip(ins["manifest"]["layers"],
                                                 ins["config"]["rootfs"]["diff_ids"])])


@pytest.fixture(scope="module")
def built(buildah, ctx, cstore, tmp_path_factory):
    """name -> (imgbuild's Image, buildah's Image).  buildah's builds (vfs
    copies the whole rootfs at each commit: the slow part) all start at
    once in two threads, imgbuild's run meanwhile, one per first use."""
    out = tmp_path_factory.mktemp("compat-oci")
    pool = ThreadPoolExecutor(max_workers=2)
    futures = {n: pool.submit(buildah_build, buildah, ctx, out, n) for n in RECIPES}
    cache = {}

    def get(name):
        if name not in cache:
            cache[name] = (imgbuild_build(cstore, ctx, name), futures[name].result())
        return cache[name]

    yield get
    pool.shutdown(cancel_futures=True)


def blob(layout, digest):
    return Path(layout) / "blobs/sha256" / digest.split(":")[1]


# --------------------------------------------------------------------------
# Config comparison

# The fields of "config" compared; all but these must be absent or empty on
# both sides (checked below, so that a field one tool sets is never missed).
CONFIG_FIELDS = ["Env", "Entrypoint", "Cmd", "WorkingDir", "User", "Labels", "ExposedPorts",
                 "Volumes", "StopSignal", "Healthcheck", "Shell", "OnBuild"]
# Docker's container-config fields that buildah's Docker-format config
# always writes with zero values (Hostname "", AttachStdin false, Image "",
# ...); zero values mean the same as absent.
ZERO = (None, "", False, [], {}, 0)


def norm_config(c, buildah):
    c = copy.deepcopy(c.get("config") or {})
    labels = c.get("Labels") or {}
    if buildah:
        # buildah stamps its own version into every image it commits.
        labels.pop("io.buildah.version", None)
        # buildah's Docker-format config records the build container's
        # hostname, as Docker's classic builder did; no runtime uses it.
        c.pop("Hostname", None)
        # buildah 1.28 wraps shell-form CMD and ENTRYPOINT in /bin/sh -c
        # even after SHELL; Docker and BuildKit use the SHELL there, as for
        # RUN.  buildah's prefix is replaced by the Shell it records.
        for k in ("Cmd", "Entrypoint"):
            v = c.get(k)
            if c.get("Shell") and v and len(v) == 3 and v[:2] == ["/bin/sh", "-c"]:
                c[k] = c["Shell"] + v[2:]
    c["Labels"] = labels
    # Env as a mapping: when ENV replaces a variable, Docker and BuildKit
    # keep its place in the list, buildah (imagebuilder) moves it to the
    # end; the environment a process gets is the same.  Keys are unique
    # on both sides (checked), so nothing is lost.
    env = c.get("Env") or []
    keys = [e.split("=", 1)[0] for e in env]
    assert len(keys) == len(set(keys)), f"duplicate Env keys: {env}"
    c["Env"] = dict(e.split("=", 1) for e in env)
    out = {k: c.get(k) for k in CONFIG_FIELDS}
    for k in CONFIG_FIELDS:
        if out[k] in ZERO:
            out[k] = None  # absent, null and empty are the same to a runtime
    extra = {k: v for k, v in c.items() if k not in CONFIG_FIELDS and v not in ZERO}
    return out, extra


def history_shape(cfg, base_len):
    """The build's own history entries as (instruction keyword, argument
    text where comparable, empty_layer)."""
    out = []
    for h in cfg.get("history", [])[base_len:]:
        cb = h.get("created_by", "")
        # buildah writes Docker's classic-builder text: "/bin/sh -c #(nop) KEYWORD args"
        # for instructions that do not run, and the command line itself
        # ("/bin/sh -c CMD", or the SHELL's argv) for RUN; imgbuild writes
        # BuildKit's "KEYWORD args" / "RUN /bin/sh -c CMD".
        if cb.startswith("/bin/sh -c #(nop) "):
            cb = cb[len("/bin/sh -c #(nop) "):]
        elif not cb.split(" ", 1)[0].isupper():
            cb = "RUN " + cb
        kw, _, arg = cb.partition(" ")
        if kw == "ARG":
            # One empty-layer entry per ARG instruction in both, in other
            # words: BuildKit's (and imgbuild's) "ARG A=1 B" (each name with
            # its default) against buildah's cumulative "ARG A B" (every name
            # so far, no values).  Compared by keyword.
            out.append((kw, None, bool(h.get("empty_layer"))))
            continue
        if kw == "RUN" and arg.startswith("|"):
            # Both prefix RUN's text with the build args ("|2 A=1 B=2 /bin/sh
            # -c ..."): BuildKit and imgbuild with every ARG of the stage (an
            # ENV of the same name wins), buildah with those that have a
            # value.  tests/e2e/test_args_env.py checks imgbuild's; the
            # command after the prefix is compared here.
            n = int(arg.split(" ", 1)[0][1:])
            arg = arg.split(" ", n + 1)[n + 1]
        # Texts that differ by design, compared by keyword only:
        # COPY/ADD: buildah "COPY file:<digest> in /dst", BuildKit "COPY src /dst";
        # WORKDIR: buildah the argument as written ("data", "$HOME/x"),
        #   BuildKit (and imgbuild) the resolved absolute path, which the
        #   config's WorkingDir compares;
        # HEALTHCHECK: buildah the instruction as written, BuildKit a Go
        #   dump of the Healthcheck struct, imgbuild "HEALTHCHECK CMD ...";
        #   the config's Healthcheck compares its meaning.
        arg = arg.strip() if kw not in ("COPY", "ADD", "WORKDIR", "HEALTHCHECK") else None
        out.append((kw, arg, bool(h.get("empty_layer"))))
    return out


@pytest.mark.parametrize("name", list(RECIPES))
def test_config_matches_buildah(built, base_image, cstore, name):
    ib, bh = built(name)
    a, a_extra = norm_config(ib.config, buildah=False)
    b, b_extra = norm_config(bh.config, buildah=True)
    diffs = [f"config.{k}: imgbuild {a[k]!r} != buildah {b[k]!r}"
             for k in CONFIG_FIELDS if a[k] != b[k]]
    if a_extra != b_extra:
        diffs.append(f"other config fields: imgbuild {a_extra!r} != buildah {b_extra!r}")
    diffs += [f"{k}: imgbuild {ib.config.get(k)!r} != buildah {bh.config.get(k)!r}"
              for k in ("os", "architecture", "variant") if ib.config.get(k) != bh.config.get(k)]
    assert not diffs, f"{name}:\n" + "\n".join(diffs)

    # The base's history and layers come first, unchanged, in both.
    base = json.loads(imgbuild("inspect", base_image, store=cstore).out)["config"]
    n = len(base.get("history", []))
    strip = lambda hs: [{k: h.get(k) for k in ("created_by", "empty_layer", "comment")} for h in hs]
    assert strip(ib.config["history"][:n]) == strip(base["history"])
    # buildah puts "FROM <base>" in the comment of its first own entry, not
    # of the base's: compare the base entries without comments there.
    nocomment = lambda hs: [{**h, "comment": None} for h in strip(hs)]
    assert nocomment(bh.config["history"][:n]) == nocomment(base["history"])
    nb = len(base["rootfs"]["diff_ids"])
    assert ib.config["rootfs"]["diff_ids"][:nb] == base["rootfs"]["diff_ids"]
    assert bh.config["rootfs"]["diff_ids"][:nb] == base["rootfs"]["diff_ids"]

    # The build's own entries: one per instruction, same keyword and text.
    ha = history_shape(ib.config, n)
    hb = history_shape(bh.config, n)
    strip_empty = lambda hs: [(kw, arg) for kw, arg, _ in hs]
    assert strip_empty(ha) == strip_empty(hb), f"{name}: history\nimgbuild: {ha}\nbuildah:  {hb}"
    # empty_layer: buildah (without --layers) puts the build's one layer on
    # its last entry, so imgbuild's flags are checked against BuildKit's
    # rule: only RUN, COPY, ADD and WORKDIR make a layer (and an empty one
    # is left out, as WORKDIR of an existing directory).
    for kw, arg, empty in ha:
        assert empty or kw in ("RUN", "COPY", "ADD", "WORKDIR"), \
            f"{name}: imgbuild's history entry {kw} {arg} has a layer"
    # every RUN of these recipes changes files
    assert all(not e for kw, _, e in ha if kw == "RUN"), f"{name}: RUN without a layer: {ha}"
    # Each image's layers are its non-empty history entries, in both.
    for who, cfg in (("imgbuild", ib.config), ("buildah", bh.config)):
        assert sum(not h.get("empty_layer") for h in cfg["history"]) == len(cfg["rootfs"]["diff_ids"]), who


# --------------------------------------------------------------------------
# Tree comparison, from the layers' tar headers (ownership as recorded, so
# no rootless id mapping is involved).  mtimes are ignored: both tools stamp
# build times.  uname/gname are ignored: numeric ids are what a runtime uses.

TYPES = {tarfile.REGTYPE: "file", tarfile.AREGTYPE: "file", tarfile.DIRTYPE: "dir",
         tarfile.SYMTYPE: "symlink", tarfile.CHRTYPE: "char", tarfile.BLKTYPE: "block",
         tarfile.FIFOTYPE: "fifo", tarfile.CONTTYPE: "file"}


def clean(name):
    """"./etc/x", "etc/x/", "/etc/x" -> "/etc/x"."""
    return posixpath.normpath("/" + name.lstrip("/"))


class Tree:
    def __init__(self):
        self.entries = {}   # path -> dict of metadata
        self.inode = {}     # path -> inode number (regular files; hard links share one)
        self.next_inode = 1

    def copy(self):
        t = Tree()
        t.entries = dict(self.entries)
        t.inode = dict(self.inode)
        t.next_inode = self.next_inode
        return t

    def remove(self, path, children_only=False):
        prefix = path.rstrip("/") + "/"
        for p in [p for p in self.entries if p.startswith(prefix) or (p == path and not children_only)]:
            del self.entries[p]
            self.inode.pop(p, None)

    def apply(self, layer_path):
        with tarfile.open(layer_path) as t:
            members = []
            opaque, whiteouts = [], []
            for m in t:
                path = clean(m.name)
                base = posixpath.basename(path)
                if base == ".wh..wh..opq":
                    opaque.append(posixpath.dirname(path))
                    continue
                if base.startswith(".wh."):
                    whiteouts.append(posixpath.join(posixpath.dirname(path), base[4:]))
                    continue
                e = {"type": TYPES.get(m.type, f"type-{m.type!r}"), "mode": oct(m.mode & 0o7777),
                     "uid": m.uid, "gid": m.gid,
                     "xattrs": sorted((k, v) for k, v in m.pax_headers.items()
                                      if k.startswith("SCHILY.xattr."))}
                if m.isreg():
                    h = hashlib.sha256()
                    f = t.extractfile(m)
                    for chunk in iter(lambda: f.read(1 << 20), b""):
                        h.update(chunk)
                    e.update(size=m.size, sha256=h.hexdigest())
                elif m.issym():
                    e["target"] = m.linkname
                elif m.ischr() or m.isblk():
                    e["dev"] = (m.devmajor, m.devminor)
                members.append((path, m, e))
        # Whiteouts hide what the lower layers have, not this layer's entries.
        for d in opaque:
            self.remove(d, children_only=True)
        for p in whiteouts:
            self.remove(p)
        for path, m, e in members:
            if path == "/":
                continue  # the root's own metadata: not set by a recipe
            old = self.entries.get(path)
            if old is not None and not (old["type"] == "dir" and e["type"] == "dir"):
                self.remove(path)
            if m.islnk():
                target = clean(m.linkname)
                assert target in self.entries, f"{layer_path}: hard link {path} to missing {target}"
                self.entries[path] = self.entries[target]
                self.inode[path] = self.inode[target]
                continue
            self.entries[path] = e
            if e["type"] == "file":
                self.inode[path] = self.next_inode
                self.next_inode += 1

    def final(self):
        """{path: metadata}, with each hard-linked file's group of paths."""
        groups = {}
        for p, i in self.inode.items():
            groups.setdefault(i, []).append(p)
        out = {}
        for p, e in self.entries.items():
            e = dict(e)
            g = groups.get(self.inode.get(p), [])
            if len(g) > 1:
                e["links"] = sorted(g)
            out[p] = e
        return out


_layer_cache = {}


def image_tree(img):
    """The image's tree; a prefix of layers already read (the base, shared
    by every image here) is read once."""
    tree = Tree()
    key = ()
    for path, diff_id in img.layers:
        key = key + (diff_id,)
        if key in _layer_cache:
            tree = _layer_cache[key].copy()
            continue
        tree.apply(path)
        _layer_cache[key] = tree.copy()
    return tree.final()


def tree_diff(a, b):
    out = []
    for p in sorted(set(a) | set(b)):
        if p not in b:
            out.append(f"{p}: only in imgbuild's image: {a[p]}")
        elif p not in a:
            out.append(f"{p}: only in buildah's image: {b[p]}")
        elif a[p] != b[p]:
            fields = sorted(k for k in set(a[p]) | set(b[p]) if a[p].get(k) != b[p].get(k))
            out.append(f"{p}: " + "; ".join(f"{k} imgbuild {a[p].get(k)!r} buildah {b[p].get(k)!r}"
                                            for k in fields))
    return out


# Files whose content is the output of `id` (or `pwd`, `id -un`) in a RUN
# under USER.
USER_DEPENDENT = ("/tmp/shell-out", "/tmp/user-run", "/tmp/g-name", "/tmp/g-uid",
                  "/tmp/g-explicit", "/tmp/g-solo", "/tmp/g-root")


def single_id_mode():
    """imgbuild runs in the single-id mode (one id mapped: docs/security.md)."""
    return os.environ.get("IMGBUILD_USERNS") == "single"


def normalize_trees(a, b, base, volumes, single):
    """The differences that are not bugs, removed from imgbuild's tree a and
    buildah's tree b in place (final() made these dicts for us)."""
    if single:
        # The single-id mode keeps the owners that unpacked layers, COPY and
        # a RUN step's chown give (recorded where it lacks the ids:
        # rootfs/owner.h, rootfs/chown_notify.h), but runs RUN under USER
        # as root (docs/security.md): the files such a step writes are
        # root's and name root.  Their owner and content are not compared;
        # nor the owner of a symlink where imgbuild says 0:0 (a symlink
        # cannot carry the record); everything else is.
        for p, e in a.items():
            if e["type"] == "symlink" and p in b and (e["uid"], e["gid"]) == (0, 0):
                e["uid"] = e["gid"] = b[p]["uid"] = b[p]["gid"] = None
        for t in (a, b):
            for p in USER_DEPENDENT:
                if p in t:
                    for k in ("sha256", "size", "uid", "gid"):
                        t[p].pop(k, None)
    for v in volumes:
        # buildah creates each VOLUME's directory in the image; Docker's
        # BuildKit records VOLUME in the config only (a runtime makes the
        # mount point).  Dropped only when imgbuild has no such path and
        # buildah's is an empty directory.
        p = clean(v)
        if p not in a and b.get(p, {}).get("type") == "dir" \
                and not any(q.startswith(p + "/") for q in b):
            del b[p]
    for p in ("/etc/hosts", "/etc/resolv.conf", "/etc/hostname", "/run/.containerenv"):
        # buildah's chroot isolation bind-mounts these during RUN and leaves
        # an empty file as the mount point when the base has none; BuildKit
        # removes such mount stubs.  Dropped only when the base lacks the
        # path, imgbuild's image too, and buildah's is an empty file.
        if p not in base and p not in a and b.get(p, {}).get("size") == 0:
            del b[p]
    for p in [p for p, e in b.items() if e["type"] in ("char", "block") and p not in a
              and p not in base]:
        # A device node copied from a stage (COPY --from=root / /rootcopy/):
        # buildah as root makes it; imgbuild works in a user namespace,
        # where the kernel refuses mknod of a device, and leaves it out
        # with a warning (as when it unpacks a layer; rootless BuildKit
        # cannot make one either).
        del b[p]
    for t in (a, b):
        # A hard link made by RUN to a file of the base: buildah's vfs
        # driver finds changes by comparing trees, the base file is
        # unchanged, so its layer holds the new name as a copy (same
        # content and metadata, compared); overlay-based builders (BuildKit)
        # copy the target up and keep the link.  Link groups are compared
        # where no member comes from the base.
        for e in t.values():
            if "links" in e and any(q in base for q in e["links"]):
                del e["links"]


@pytest.mark.parametrize("name", list(RECIPES))
def test_tree_matches_buildah(built, cstore, base_image, name):
    ib, bh = built(name)
    nb = len(json.loads(imgbuild("inspect", base_image, store=cstore).out)
             ["config"]["rootfs"]["diff_ids"])
    base = image_tree(Image(None, ib.layers[:nb]))
    a, b = image_tree(ib), image_tree(bh)
    volumes = set((ib.config["config"].get("Volumes") or {})) | set((bh.config["config"].get("Volumes") or {}))
    normalize_trees(a, b, base, volumes, single_id_mode())
    diff = tree_diff(a, b)
    assert not diff, f"{name}: {len(diff)} differences:\n" + "\n".join(diff[:60])
