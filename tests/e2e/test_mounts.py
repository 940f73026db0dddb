"""RUN --mount (bind, cache, tmpfs), RUN --security, and `imgbuild run`'s
-v / --mount / --tmpfs / --env-file / exit status, on the Debian base image:
what the step sees, what reaches the host, and what the image keeps."""
import os
import tarfile
from pathlib import Path

import pytest

from conftest import imgbuild, write


@pytest.fixture(scope="module")
def mstore(tmp_path_factory, registry, base_image):
    store = tmp_path_factory.mktemp("mounts-store")
    assert imgbuild("pull", base_image, store=store).rc == 0
    return store


@pytest.fixture(scope="module")
def rootfs(tmp_path_factory, mstore, base_image):
    d = tmp_path_factory.mktemp("mounts-rootfs") / "r"
    r = imgbuild("unpack", base_image, d, store=mstore)
    assert r.rc == 0, r
    return d


def layer_names(store, ref):
    """Every path in the image's last layer."""
    import json
    m = json.loads(imgbuild("inspect", ref, store=store).out)
    last = m["manifest"]["layers"][-1]["digest"].split(":")[1]
    with tarfile.open(Path(store) / "blobs/sha256" / last) as t:
        return set(n.rstrip("/") for n in t.getnames())


def test_run_mounts_bind_cache_tmpfs(mstore, base_image, tmp_path):
    ctx = tmp_path / "ctx"
    write(ctx / "data/hello", "hello from the context\n")
    out = tmp_path / "out"
    recipe = write(ctx / "r.recipe", f"""
FROM {base_image} AS first
RUN echo from-first > /made-in-first

FROM {base_image}
RUN --mount=type=cache,target=/root/.ccache,id=test-ccache \\
    sh -c 'n=$(cat /root/.ccache/count 2>/dev/null || echo 0); echo $((n+1)) > /root/.ccache/count; cp /root/.ccache/count /result-cache'
RUN --mount=type=bind,source=data,target=/ctx \\
    sh -c 'cat /ctx/hello > /result-bind; (touch /ctx/x) 2>/dev/null && echo writable > /result-bind-ro || echo read-only > /result-bind-ro'
RUN --mount=type=bind,source=data,target=/ctx,rw \\
    sh -c 'touch /ctx/new && ls /ctx > /result-bind-rw'
RUN --mount=type=bind,from=first,source=/made-in-first,target=/from-first \\
    cp /from-first /result-from
RUN --mount=type=tmpfs,target=/scratch,size=1m \\
    sh -c 'echo x > /scratch/file && grep " /scratch " /proc/mounts | cut -d" " -f3 > /result-tmpfs'
OUTPUT type=image,name=mounts:one
OUTPUT type=local,dest={out}
""")
    r = imgbuild("build", recipe, store=mstore, cwd=ctx)
    assert r.rc == 0, r
    assert (out / "result-cache").read_text() == "1\n"
    assert (out / "result-bind").read_text() == "hello from the context\n"
    assert (out / "result-bind-ro").read_text() == "read-only\n"
    assert (out / "result-bind-rw").read_text() == "hello\nnew\n"
    assert (out / "result-from").read_text() == "from-first\n"
    assert (out / "result-tmpfs").read_text() == "tmpfs\n"
    # writes to a rw bind went to a copy; the context is as it was
    assert sorted(os.listdir(ctx / "data")) == ["hello"]
    # mount points made for the steps are not in the image
    for p in ("ctx", "from-first", "scratch", "root/.ccache"):
        assert not (out / p).exists(), p
    names = set()
    for ref in ("mounts:one",):
        names |= layer_names(mstore, ref)
    assert "result-tmpfs" in names and "scratch" not in names

    # The cache persists across builds in the store: the count goes on
    # (--no-cache: the build cache would otherwise take the step's result
    # without running it).
    out2 = tmp_path / "out2"
    recipe.write_text(recipe.read_text().replace(str(out), str(out2)))
    r = imgbuild("build", recipe, "--no-cache", store=mstore, cwd=ctx)
    assert r.rc == 0, r
    assert (out2 / "result-cache").read_text() == "2\n"
    ids = list((Path(mstore) / "cache/mounts").glob("*.id"))
    assert "test-ccache" in [p.read_text() for p in ids]


def test_bind_from_the_context_leaves_out_what_dockerignore_excludes(mstore, base_image, tmp_path):
    """BuildKit binds the context it received, which lacks what
    .dockerignore excludes: so does a RUN --mount=type=bind from the
    context, read-only or rw, and an excluded source is not found."""
    ctx = tmp_path / "ctx"
    write(ctx / "src/main.c", "int main;\n")
    write(ctx / "src/secret.key", "do not ship\n")
    write(ctx / "src/logs/a.log", "a\n")
    write(ctx / "src/logs/keep.log", "keep\n")
    write(ctx / "notes/x", "x\n")
    write(ctx / ".dockerignore", "**/*.key\nsrc/logs\n!src/logs/keep.log\nnotes\n")
    out = tmp_path / "out"
    recipe = write(ctx / "r.recipe", f"""
FROM {base_image}
RUN --mount=type=bind,target=/ctx cd /ctx && find . | sort > /listing-root
RUN --mount=type=bind,source=src,target=/s,rw cd /s && touch new && find . | sort > /listing-rw
OUTPUT type=local,dest={out}
""")
    r = imgbuild("build", recipe, store=mstore, cwd=ctx)
    assert r.rc == 0, r
    assert (out / "listing-root").read_text() == "\n".join([
        ".", "./.dockerignore", "./r.recipe", "./src", "./src/logs", "./src/logs/keep.log",
        "./src/main.c"]) + "\n"
    assert (out / "listing-rw").read_text() == "\n".join([
        ".", "./logs", "./logs/keep.log", "./main.c", "./new"]) + "\n"
    # the context is as it was
    assert (ctx / "src/secret.key").read_text() == "do not ship\n"
    assert not (ctx / "src/new").exists()
    recipe.write_text(f"FROM {base_image}\nRUN --mount=type=bind,source=notes,target=/n ls /n\n")
    r = imgbuild("build", recipe, store=mstore, cwd=ctx)
    assert r.rc == 1, r
    assert "--mount=type=bind,source=notes,target=/n: source notes is excluded by .dockerignore" \
        in r.err, r.err


def test_cache_mount_from_a_stage(mstore, base_image, tmp_path):
    """RUN --mount=type=cache,from=STAGE[,source=P] (BuildKit: "build stage,
    context, or image name to use as a base of the cache mount"; source:
    "subpath in the from to mount"): a new cache starts as a copy of that
    tree, the step's writes stay in it for the next build, and a change of
    the stage is another base, so another cache."""
    out = tmp_path / "out"

    def recipe(seed):
        return write(tmp_path / "r.recipe", f"""
FROM {base_image} AS seed
RUN mkdir -p /opt/s/sub && echo {seed} > /opt/s/sub/seed && chown 5:6 /opt/s/sub/seed
FROM {base_image} AS use
RUN --mount=type=cache,target=/c,from=seed,source=/opt/s,id=seeded \
    sh -c 'cat /c/sub/seed > /got; stat -c %u:%g /c/sub/seed >> /got; ls /c >> /got; \
           n=$(cat /c/count 2>/dev/null || echo 0); echo $((n+1)) > /c/count; echo $n >> /got'
RUN --mount=type=cache,target=/w,from=seed,id=whole cat /w/opt/s/sub/seed > /got-whole
OUTPUT type=local,dest={out}
""")

    owner = "0:0" if os.environ.get("IMGBUILD_USERNS") == "single" and os.geteuid() != 0 \
        else "5:6"
    r = imgbuild("build", recipe("one"), store=mstore, cwd=tmp_path)
    assert r.rc == 0, r
    assert (out / "got").read_text() == f"one\n{owner}\nsub\n0\n"
    assert (out / "got-whole").read_text() == "one\n"
    # the step's write stays in that cache (the seed stage from the build
    # cache: the same base)
    r = imgbuild("build", recipe("one"), "--no-cache-filter", "use", store=mstore, cwd=tmp_path)
    assert r.rc == 0, r
    assert (out / "got").read_text() == f"one\n{owner}\ncount\nsub\n1\n"
    # another seed: another base, a fresh cache from it
    r = imgbuild("build", recipe("two"), store=mstore, cwd=tmp_path)
    assert r.rc == 0, r
    assert (out / "got").read_text() == f"two\n{owner}\nsub\n0\n"
    # an unknown stage is an error naming it
    bad = write(tmp_path / "bad.recipe",
                f"FROM {base_image}\nRUN --mount=type=cache,target=/c,from=nope true\n")
    r = imgbuild("build", bad, store=mstore, cwd=tmp_path)
    assert r.rc != 0 and "from=nope: no earlier stage of that name" in r.err, r


@pytest.mark.parametrize("flag,message", [
    ("--security=insecure", "--security=insecure is not supported"),
    ("--mount=type=secret,id=x,target=/s,required", "secret x: not given"),
    ("--mount=type=nope,target=/x", "unknown mount type 'nope' (bind, cache, tmpfs, secret, ssh)"),
    ("--mount=type=bind,source=missing,target=/x", "missing"),
    ("--mount=type=cache", "target= is missing"),
    ("--mount=type=tmpfs,target=/t,size=lots", "bad size 'lots'"),
])
def test_run_flag_errors_name_the_line(mstore, base_image, tmp_path, flag, message):
    recipe = write(tmp_path / "r.recipe", f"FROM {base_image}\nRUN {flag} true\n")
    r = imgbuild("build", recipe, store=mstore, cwd=tmp_path)
    assert r.rc != 0
    assert message in r.err, r
    assert ":2" in r.err, r  # the recipe line


def test_imgbuild_run_volumes_env_file_and_status(mstore, rootfs, tmp_path):
    src = tmp_path / "src"
    write(src / "f", "host file\n")
    (src).chmod(0o777)
    ro = tmp_path / "ro"
    write(ro / "g", "read only\n")
    envf = write(tmp_path / "env", "# comment\nA=from-file\n\nB\nC=x=y\n")
    r = imgbuild("run", "-v", f"{src}:/data", "-v", f"{ro}:/ro:ro", "--tmpfs", "/t:size=1m",
                 "--mount", "type=cache,target=/cache,id=run-cache", "--env-file", envf,
                 "-e", "D=1", "--rootfs", rootfs, "--", "sh", "-c",
                 "cat /data/f /ro/g; echo $A $B $C $D; echo made > /data/new; "
                 "(touch /ro/x) 2>/dev/null || echo ro-refused; "
                 "grep ' /t ' /proc/mounts | cut -d' ' -f3; echo c > /cache/c; exit 7",
                 store=mstore, env={"B": "from-host"})
    assert r.rc == 7, r
    assert r.out == "host file\nread only\nfrom-file from-host x=y 1\nro-refused\ntmpfs\n", r
    assert (src / "new").read_text() == "made\n"
    assert not (ro / "x").exists()
    for p in ("data", "ro", "t", "cache"):
        assert not (rootfs / p).exists(), p


@pytest.mark.parametrize("args,message", [
    (["-v", "relative:/x"], "the source must be a host path"),
    (["-v", "/tmp"], "expected SRC:DST"),
    (["-v", "/tmp:/x:zz"], "options are ro, rw, z or Z, got 'zz'"),
    (["--tmpfs", "rel"], "the target must be absolute"),
    (["--env-file", "/nonexistent/env"], "/nonexistent/env"),
    (["-v", "/nonexistent-src:/x"], "/nonexistent-src"),
])
def test_imgbuild_run_option_errors(mstore, rootfs, args, message):
    r = imgbuild("run", *args, "--rootfs", rootfs, "--", "true", store=mstore)
    assert r.rc in (2, 125), r
    assert message in r.err, r


def test_scratch_rootfs_gets_dev_and_proc_for_the_run_only(mstore, tmp_path):
    """FROM scratch plus a static binary: RUN (and a heredoc's #! script,
    run as /dev/pipes/NAME) gets /dev and /proc as mount points made for
    the run, as runc makes them; the layers hold only what the step wrote."""
    import json
    import subprocess
    ctx = tmp_path / "ctx"
    write(ctx / "prog.c", r'''#include <stdio.h>
#include <unistd.h>
int main (int argc, char **argv) {
  FILE *f = fopen ("/out", "a");
  fprintf (f, "%s dev-null=%d proc-self=%d\n", argc > 1 ? argv[1] : "-",
           access ("/dev/null", W_OK) == 0, access ("/proc/self/exe", F_OK) == 0);
  return fclose (f);
}
''')
    subprocess.run(["cc", "-static", "-O2", "-o", str(ctx / "prog"), str(ctx / "prog.c")], check=True)
    recipe = write(ctx / "r.recipe", 'FROM scratch\nCOPY prog /prog\nRUN ["/prog"]\nRUN <<EOF\n#!/prog\nEOF\n')
    r = imgbuild("build", recipe, "-t", "scratch-dev:1", store=mstore, cwd=ctx)
    assert r.rc == 0, r
    m = json.loads(imgbuild("inspect", "scratch-dev:1", store=mstore).out)
    layers = [l["digest"].split(":")[1] for l in m["manifest"]["layers"]]
    assert len(layers) == 3
    for digest in layers[1:]:
        with tarfile.open(Path(mstore) / "blobs/sha256" / digest) as t:
            assert t.getnames() == ["out"], t.getnames()
    with tarfile.open(Path(mstore) / "blobs/sha256" / layers[2]) as t:
        assert t.extractfile("out").read().decode() == \
            "- dev-null=1 proc-self=1\n/dev/pipes/EOF dev-null=1 proc-self=1\n"


def test_locked_cache_mount_is_one_user_at_a_time_in_run_and_build(mstore, rootfs, base_image,
                                                                   tmp_path):
    """sharing=locked: `imgbuild run` and a build's RUN take the same lock
    (one implementation of the mounts for both): the second user waits,
    says so, and runs only after the first has ended."""
    import subprocess
    import threading
    import time
    from conftest import IMGBUILD
    sig = tmp_path / "sig"
    sig.mkdir()
    sig.chmod(0o777)
    mount = "type=cache,id=locked-one,target=/c,sharing=locked"
    # whatever happens, every holder is let go after a minute
    timer = threading.Timer(60, lambda: [(sig / f"go-{t}").touch() for t in ("run1", "run2")])
    timer.start()

    def hold(tag):
        """`imgbuild run` with the cache mount, holding it until /sig/go-TAG."""
        return subprocess.Popen(
            [str(IMGBUILD), "--store", str(mstore), "run", "-v", f"{sig}:/sig", "--mount", mount,
             "--rootfs", str(rootfs), "--", "sh", "-c",
             f"echo {tag}-start >> /c/log; touch /sig/{tag}; "
             f"while [ ! -e /sig/go-{tag} ]; do sleep 0.05; done; echo {tag}-end >> /c/log"],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

    def wait_for(path):
        for _ in range(1200):
            if path.exists():
                return
            time.sleep(0.05)
        raise AssertionError(f"{path} never appeared")

    def wait_line(proc, text):
        """stderr lines of proc up to the one holding text (all of them if none does)."""
        seen = []
        for line in proc.stderr:
            seen.append(line)
            if text in line:
                break
        return "".join(seen)

    waiting = "waiting for the cache mount locked-one (sharing=locked)"
    try:
        first = hold("run1")
        wait_for(sig / "run1")
        # a second `imgbuild run` waits for the first
        second = hold("run2")
        assert waiting in wait_line(second, waiting)
        assert not (sig / "run2").exists()
        (sig / "go-run1").touch()
        assert first.wait(60) == 0
        wait_for(sig / "run2")
        # a build's RUN waits for an `imgbuild run`
        out = tmp_path / "out"
        recipe = write(tmp_path / "r.recipe", f"FROM {base_image}\n"
                       f"RUN --mount={mount} cp /c/log /log\nOUTPUT type=local,dest={out}\n")
        build = subprocess.Popen([str(IMGBUILD), "--store", str(mstore), "build", str(recipe)],
                                 cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                 text=True)
        err = wait_line(build, waiting)
        assert waiting in err, err
        (sig / "go-run2").touch()
        assert second.wait(60) == 0
        assert build.wait(600) == 0, err + build.stderr.read()
        assert (out / "log").read_text() == "run1-start\nrun1-end\nrun2-start\nrun2-end\n"
    finally:
        timer.cancel()
        for t in ("run1", "run2"):
            (sig / f"go-{t}").touch()
