"""imgbuild as a drop-in for `docker build` / `buildah bud` in a CI script
(issue 21): the command lines those scripts use, run as a script would,
judged by exit codes, stdout and what lands in the store."""
import json
import subprocess

import pytest

from conftest import IMGBUILD, imgbuild, sh, write

DEFAULT_PATH = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


@pytest.fixture(scope="module")
def dstore(tmp_path_factory, registry, base_image):
    store = tmp_path_factory.mktemp("dropin-store")
    assert imgbuild("pull", base_image, store=store).rc == 0
    return store


@pytest.fixture(scope="module")
def rootfs_dir(tmp_path_factory, dstore, base_image):
    d = tmp_path_factory.mktemp("dropin-rootfs") / "r"
    r = imgbuild("unpack", base_image, d, store=dstore)
    assert r.rc == 0, r
    return d


def config_of(store, ref):
    r = imgbuild("inspect", ref, store=store)
    assert r.rc == 0, r
    return json.loads(r.out)["config"]


def test_a_directory_operand_is_the_context(dstore, base_image, tmp_path):
    """`build -t app:1 .`: the directory is the context and its Dockerfile
    the recipe (then Containerfile); -f names another; -f - reads stdin."""
    ctx = tmp_path / "ctx"
    write(ctx / "hello.txt", "from the context\n")
    write(ctx / "Dockerfile", f"FROM {base_image}\nCOPY hello.txt /hello\nLABEL from=dockerfile\n")
    write(ctx / "Containerfile", f"FROM {base_image}\nLABEL from=containerfile\n")
    write(tmp_path / "other.df", f"FROM {base_image}\nCOPY hello.txt /other\nLABEL from=other\n")

    r = imgbuild("build", "-t", "app:1", ".", store=dstore, cwd=ctx)
    assert r.rc == 0, r
    assert config_of(dstore, "app:1")["config"]["Labels"] == {"from": "dockerfile"}

    (ctx / "Dockerfile").unlink()
    r = imgbuild("build", "-t", "app:2", ctx, store=dstore, cwd=tmp_path)
    assert r.rc == 0, r
    assert config_of(dstore, "app:2")["config"]["Labels"] == {"from": "containerfile"}

    # -f FILE relative to the current directory, the context elsewhere
    r = imgbuild("build", "-f", "other.df", "-t", "app:3", "ctx", store=dstore, cwd=tmp_path)
    assert r.rc == 0, r
    assert config_of(dstore, "app:3")["config"]["Labels"] == {"from": "other"}

    # -f -: the recipe from stdin, named "stdin" in messages
    r = imgbuild("build", "-f", "-", "-t", "app:4", ctx, store=dstore, cwd=tmp_path,
                 input=f"FROM {base_image}\nCOPY hello.txt /stdin\nLABEL from=stdin\n")
    assert r.rc == 0, r
    assert config_of(dstore, "app:4")["config"]["Labels"] == {"from": "stdin"}
    r = imgbuild("build", "-f", "-", ctx, store=dstore, cwd=tmp_path, input="FROM x\nNOPE\n")
    assert r.rc == 1 and "stdin:2:1: unknown instruction 'NOPE'" in r.err, r
    r = imgbuild("plan", "-f", "-", ctx, store=dstore, cwd=tmp_path, input="FROM scratch\n")
    assert r.rc == 0 and r.out.startswith("recipe: stdin\n"), r


@pytest.mark.parametrize("args,message", [
    (["-f", "other.df", "missing-ctx"], "build: the build context missing-ctx does not exist"),
    (["-f", "other.df", "other.df"], "build: the build context other.df is not a directory"),
    (["empty"], "build: no Dockerfile or Containerfile in empty (give -f FILE)"),
    (["missing"], "build: missing: no such recipe file or context directory"),
    (["-f", "-"], "build: -f - reads the recipe from stdin: give the context directory too"),
    (["-t", "UPPER:1", "ctx"], "build: -t UPPER:1: invalid reference \"UPPER:1\": repository "
                               "name \"UPPER\" must be lowercase"),
    (["--build-arg", "=x", "ctx"], "--build-arg '=x': expected NAME=VALUE, or NAME"),
])
def test_command_line_mistakes_fail_before_the_build(dstore, base_image, tmp_path, args, message):
    """Usage errors (exit 2) naming the operand or flag, before any step."""
    write(tmp_path / "other.df", f"FROM {base_image}\n")
    write(tmp_path / "ctx/Dockerfile", f"FROM {base_image}\nRUN true\n")
    (tmp_path / "empty").mkdir()
    r = imgbuild("build", *args, store=dstore, cwd=tmp_path)
    assert r.rc == 2, r
    assert message in r.err, r
    assert "[stage" not in r.err and "FROM" not in r.err, r


def test_global_options_after_the_command(registry, base_image, tmp_path):
    """--store, --progress, -q and the rest work after the command too, as
    docker's and podman's flags do; the last --store wins."""
    ctx = tmp_path / "ctx"
    write(ctx / "Dockerfile", f"FROM {base_image}\nLABEL k=v\n")
    first, second = tmp_path / "s1", tmp_path / "s2"
    cmd = [str(IMGBUILD), "build", str(ctx), "--progress=plain", "-q", "-t", "late:1",
           "--store", str(first), "--userns", "auto", "--store", str(second)]
    p = subprocess.run(cmd, capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    assert not first.exists()
    # -q: only warnings and errors (no step lines, no summary)
    assert "LABEL" not in p.stderr and "done" not in p.stderr, p.stderr
    for args in (["images", "--store", str(second)], ["inspect", "late:1", "--store", str(second)],
                 ["--store", str(second), "inspect", "--quiet", "late:1"]):
        p = subprocess.run([str(IMGBUILD), *args], capture_output=True, text=True)
        assert p.returncode == 0, (args, p.stderr)
        if args[0] == "images":
            assert "late:1" in p.stdout, p.stdout
        else:
            assert json.loads(p.stdout)["config"]["config"]["Labels"] == {"k": "v"}


@pytest.mark.parametrize("command,line", [
    ("build", "  [build] RECIPE"), ("run", "  run [-e K=V]"), ("inspect", "  inspect REF"),
    ("pull", "  pull REF"), ("images", "  images"), ("prune", "  prune [--cache]"),
])
def test_every_command_has_help(command, line):
    p = subprocess.run([str(IMGBUILD), command, "--help"], capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    assert p.stdout.startswith("Usage: imgbuild"), p.stdout
    assert line in p.stdout, p.stdout
    assert "  wheel audit" not in p.stdout  # only the command's own lines


def test_run_e_replaces_the_images_variable(dstore, base_image, tmp_path):
    """docker run -e K=V replaces what the image sets (one PATH, the
    caller's); --rm and -it are accepted as docker's."""
    ctx = tmp_path / "ctx"
    write(ctx / "Dockerfile", f"FROM {base_image}\nENV PATH=/opt/venv/bin:/usr/bin:/bin A=image\n")
    assert imgbuild("build", "-t", "envimg:1", ctx, store=dstore).rc == 0
    r = imgbuild("run", "--rm", "-e", "PATH=/usr/bin:/bin", "-e", "A=caller", "envimg:1", "--",
                 "/usr/bin/env", store=dstore)
    assert r.rc == 0, r
    got = [v for v in r.out.splitlines() if v.split("=")[0] in ("PATH", "A")]
    assert got == ["PATH=/usr/bin:/bin", "A=caller"], r.out


def test_from_scratch_has_buildkits_empty_image_config(dstore, tmp_path):
    """FROM scratch starts from BuildKit's empty image (dockerfile2llb's
    emptyImage): Env holds the default PATH, WorkingDir is "/"."""
    ctx = tmp_path / "ctx"
    write(ctx / "f", "x\n")
    write(ctx / "Dockerfile", "FROM scratch\nCOPY f /f\n")
    assert imgbuild("build", "-t", "scratchy:1", ctx, store=dstore).rc == 0
    c = config_of(dstore, "scratchy:1")["config"]
    assert c["Env"] == [DEFAULT_PATH], c
    assert c["WorkingDir"] == "/", c
    # ENV in a scratch stage adds to it, as on any base
    write(ctx / "Dockerfile", "FROM scratch\nENV A=1\nCOPY f /f\n")
    assert imgbuild("build", "-t", "scratchy:2", ctx, store=dstore).rc == 0
    assert config_of(dstore, "scratchy:2")["config"]["Env"] == [DEFAULT_PATH, "A=1"]


def test_relabel_options_are_accepted_and_do_nothing(dstore, base_image, rootfs_dir, tmp_path):
    """Containerfiles written for podman put z/Z on their mounts: RUN
    --mount and `run -v` accept them, say they are ignored, and mount."""
    ctx = tmp_path / "ctx"
    write(ctx / "data/f", "bound\n")
    out = tmp_path / "out"
    write(ctx / "Dockerfile", f"FROM {base_image}\n"
          "RUN --mount=type=bind,source=data,target=/d,Z cp /d/f /copied\n"
          f"OUTPUT type=local,dest={out},src=/copied\n")
    r = imgbuild("build", ctx, store=dstore)
    assert r.rc == 0, r
    assert (out / "copied").read_text() == "bound\n"
    assert "z/Z ignored: imgbuild applies no SELinux labels" in r.err, r
    host = tmp_path / "host"
    write(host / "g", "from the host\n")
    r = imgbuild("run", "-v", f"{host}:/h:ro,z", "--rootfs", rootfs_dir, "--", "cat", "/h/g",
                 store=dstore)
    assert r.rc == 0 and r.out == "from the host\n", r


def test_copy_from_a_stage_named_by_an_arg_builds_it(dstore, base_image, tmp_path):
    """COPY --from=${STAGE} (a global ARG) depends on that stage: plan says
    so and the build builds it first, with -j too."""
    ctx = tmp_path / "ctx"
    out = tmp_path / "out"
    write(ctx / "Dockerfile", f"""ARG STAGE=maker
FROM {base_image} AS maker
RUN echo made > /made
FROM {base_image}
COPY --from=${{STAGE}} /made /got
OUTPUT type=local,dest={out},src=/got
""")
    r = imgbuild("plan", ctx, store=dstore)
    assert r.rc == 0, r
    assert "depends on: 0 maker" in r.out, r.out
    for jobs in ("1", "2"):
        r = imgbuild("build", "-j", jobs, "--no-cache", ctx, store=dstore)
        assert r.rc == 0, r
        assert (out / "got").read_text() == "made\n"


def test_a_stage_name_used_twice_warns_and_builds(dstore, base_image, tmp_path):
    """A stage name given twice (here in two cases: BuildKit lower-cases stage
    names) is BuildKit's DuplicateStageName warning, not an error; as in
    dockerfile2llb (addState, findStateByName), FROM finds the last stage of
    the name before it, COPY --from and --target the last of the file."""
    ctx = tmp_path / "ctx"
    out = tmp_path / "out"
    write(ctx / "Dockerfile", f"""FROM {base_image} AS base
RUN echo one > /which
FROM {base_image} AS Base
RUN echo two > /which
FROM BASE AS mid
RUN cp /which /from-base
FROM {base_image} AS base
RUN echo three > /which
FROM mid
COPY --from=base /which /copied
OUTPUT type=local,dest={out}/final,src=/from-base
OUTPUT type=local,dest={out}/final,src=/copied
""")
    for jobs in ("1", "2"):
        r = imgbuild("build", "-j", jobs, "--no-cache", ctx, store=dstore)
        assert r.rc == 0, r
        assert "Dockerfile:3: the stage name 'base' is also used on line 1" in r.err, r.err
        assert "Dockerfile:7: the stage name 'base' is also used on line 3" in r.err, r.err
        assert (out / "final/from-base").read_text() == "two\n"
        assert (out / "final/copied").read_text() == "three\n"
    r = imgbuild("plan", ctx, store=dstore)
    assert r.rc == 0, r
    assert "stage 2 mid\n  from: stage 1 base\n" in r.out, r.out
    assert "depends on: 2 mid, 3 base" in r.out, r.out
    r = imgbuild("build", "--target", "base", "-t", "dup:target", ctx, store=dstore)
    assert r.rc == 0, r
    layers = config_of(dstore, "dup:target")["rootfs"]["diff_ids"]
    r = imgbuild("build", "--target", "3", "-t", "dup:third", ctx, store=dstore)
    assert r.rc == 0, r
    assert config_of(dstore, "dup:third")["rootfs"]["diff_ids"] == layers


@pytest.mark.parametrize("recipe,message", [
    ("ARG BASE\nFROM ${BASE}\n", "Dockerfile:2: FROM: ${BASE}: BASE is not set (give --build-arg "
                                 "BASE=..., or a default: ARG BASE=... before the first FROM)"),
    ("ARG TAG=1\nFROM ${REG}/app:$TAG\n", "FROM: ${REG}/app:$TAG: REG is not set"),
    ("FROM x\nRUNN make\n", "Dockerfile:2:1: unknown instruction 'RUNN' (did you mean RUN?)"),
])
def test_mistakes_in_the_recipe_say_what_to_do(dstore, tmp_path, recipe, message):
    write(tmp_path / "Dockerfile", recipe)
    r = imgbuild("build", ".", store=dstore, cwd=tmp_path)
    assert r.rc == 1, r
    assert message in r.err, r
    assert len(r.err.strip().splitlines()) == 1, r  # one line, before any step


def test_single_id_mode_by_default_says_what_is_lost(dstore, tmp_path):
    """Without what map mode needs (here: newuidmap not on PATH), auto
    falls back to single-id mode: the build says once that owners are
    not recorded, why, and what to do."""
    import os
    if os.geteuid() == 0:
        pytest.skip("as root, auto is root mode; the map and single-id passes run this")
    write(tmp_path / "f", "x\n")
    write(tmp_path / "Dockerfile", "FROM scratch\nCOPY f /f\n")
    r = imgbuild("build", ".", store=tmp_path / "s", cwd=tmp_path,
                 env={"IMGBUILD_USERNS": "", "PATH": "/nonexistent"})
    assert r.rc == 0, r
    assert r.err.count("single-id mode: newuidmap and newgidmap are not installed") == 1, r
    assert "usermod --add-subuids 100000-165535 --add-subgids 100000-165535" in r.err, r
    # asked for by name: no warning
    r = imgbuild("build", "--no-cache", ".", store=tmp_path / "s", cwd=tmp_path,
                 env={"IMGBUILD_USERNS": "single"})
    assert r.rc == 0 and "single-id mode:" not in r.err, r


def test_copy_from_an_image(dstore, registry, base_image, tmp_path):
    """COPY --from=IMAGE (BuildKit: "--from: image, stage or context name"):
    the image is pulled when the store lacks it and its files copied;
    `imgbuild plan` names it.  A stage defined after the step is not taken
    for an image."""
    ctx = tmp_path / "ctx"
    out = tmp_path / "out"
    # an image of our own in the registry, not in the store
    src = tmp_path / "src"
    write(src / "Dockerfile", f"FROM {base_image}\nRUN echo from-the-image > /made && chown 7:8 /made\n")
    ref = f"{registry}/copy-src:1"
    sstore = tmp_path / "src-store"
    r = imgbuild("build", "-t", ref, src, store=sstore)
    assert r.rc == 0, r
    r = imgbuild("push", ref, ref, store=sstore)
    assert r.rc == 0, r
    write(ctx / "Dockerfile", f"""FROM scratch
COPY --from={ref} /made /got
COPY --from={base_image} /etc/os-release /os-release
OUTPUT type=local,dest={out}
""")
    r = imgbuild("build", ctx, store=dstore)
    assert r.rc == 0, r
    assert (out / "got").read_text() == "from-the-image\n"
    assert "Debian" in (out / "os-release").read_text()
    r = imgbuild("plan", ctx, store=dstore)
    assert r.rc == 0, r
    assert f"copies from image {ref}" in r.out, r.out
    # a stage defined later is no image
    write(ctx / "Dockerfile", f"FROM scratch\nCOPY --from=later /x /x\nFROM {base_image} AS later\n")
    r = imgbuild("build", "--target", "0", ctx, store=dstore)
    assert r.rc != 0
    assert "Dockerfile:2: COPY: --from=later: the stage is defined after this step (line 3)" \
        in r.err, r.err


def test_map_mode_without_a_range_names_the_fix(tmp_path):
    """Item 13: --userns map for a user without subordinate ids says how
    to give it a range.  Run as `nobody` (no range in /etc/subuid), which
    needs root to switch to; the unprivileged passes have a range."""
    import os
    import pwd
    import subprocess
    from conftest import IMGBUILD
    if os.geteuid() != 0:
        pytest.skip("needs root to run as nobody, a user without a range")
    for f in ("/etc/subuid", "/etc/subgid"):
        if os.path.exists(f):
            assert not any(l.startswith("nobody:") for l in open(f)), f
    uid = pwd.getpwnam("nobody").pw_uid
    p = subprocess.run(["runuser", "-u", "nobody", "--", str(IMGBUILD), "--userns", "map",
                        "unpack", "x:1", "/nonexistent/root"],
                       capture_output=True, text=True, cwd="/")
    assert p.returncode == 1, p
    assert (f"user namespace mode map: no range for nobody (uid {uid}) in both /etc/subuid "
            "and /etc/subgid; as root: usermod --add-subuids 100000-165535 --add-subgids "
            "100000-165535 nobody (or add 'nobody:100000:65536' to both files)") in p.stderr, p


def test_from_without_a_network_says_what_would_do(dstore, registry, tmp_path):
    """Item 13: a FROM whose registry cannot be reached (its name does not
    resolve: no network) names the ways that need none; a registry that
    answers (the image is not there) gets no such hint."""
    write(tmp_path / "Dockerfile", "ARG BASE=registry.invalid/debian:12\nFROM $BASE\nRUN true\n")
    r = imgbuild("build", ".", store=dstore, cwd=tmp_path)
    assert r.rc == 1, r
    err = r.err.strip().splitlines()[-1]
    assert "resolve registry.invalid: unknown host name" in err, r
    assert "(no network? the image can come from a mirror in registries.conf" in err, r
    assert "--build-arg when the recipe takes registry.invalid/debian:12 from an ARG" in err, r
    r = imgbuild("build", "--build-arg", f"BASE={registry}/not-there:1", ".", store=dstore,
                 cwd=tmp_path)
    assert r.rc == 1 and "not-there" in r.err and "no network?" not in r.err, r


def test_build_network_none_for_every_run(dstore, base_image, tmp_path):
    """Item 9: `build --network none` runs every RUN without a network
    (loopback only) unless the RUN says otherwise; its key says so, so the
    default build does not take its result; host is the default."""
    write(tmp_path / "Dockerfile", f"FROM {base_image}\n"
          "RUN sed -n 's/^ *\\([a-z0-9]*\\):.*/\\1/p' /proc/net/dev | sort > /ifaces\n"
          "RUN --network=default sed -n 's/^ *\\([a-z0-9]*\\):.*/\\1/p' /proc/net/dev | sort > /own\n"
          "RUN cat /ifaces /own\n")
    store = tmp_path / "s"
    r = imgbuild("build", "--network", "none", "--progress", "plain", "-t", "net:none", ".",
                 store=store, cwd=tmp_path)
    assert r.rc == 0, r
    run = imgbuild("run", "net:none", "--", "cat", "/ifaces", store=store)
    assert run.out.split() == ["lo"], run
    r = imgbuild("build", "--progress", "plain", "-t", "net:default", ".", store=store, cwd=tmp_path)
    assert r.rc == 0, r
    first_run = [l for l in r.err.splitlines() if "RUN sed" in l and "/ifaces" in l]
    assert first_run and not first_run[0].endswith("CACHED"), r.err
    r = imgbuild("build", "--network", "host", "--progress", "plain", ".", store=store, cwd=tmp_path)
    assert r.rc == 0 and "(3 steps cached, 0 run)" in r.err, r
    r = imgbuild("build", "--network", "bridge", ".", store=store, cwd=tmp_path)
    assert r.rc == 2 and "--network takes host, none or default, got 'bridge'" in r.err, r


def test_build_pull_policy(registry, base_image, tmp_path):
    """Item 9: --pull (always), --pull=missing (the default), --pull=never,
    against a tag that moves in the registry."""
    moving = f"{registry}/dropin-moving:1"
    sh("skopeo", "copy", "--quiet", "--src-tls-verify=false", "--dest-tls-verify=false",
       f"docker://{base_image}", f"docker://{moving}")
    write(tmp_path / "ctx/Dockerfile", f"FROM {moving}\n"
          "RUN (cat /marker 2>/dev/null || echo none) > /seen\n")
    store = tmp_path / "s"
    def seen(*flags):
        r = imgbuild("build", *flags, "-t", "pulled:1", tmp_path / "ctx", store=store)
        assert r.rc == 0, r
        out = imgbuild("run", "pulled:1", "--", "cat", "/seen", store=store)
        assert out.rc == 0, out
        return out.out.strip()
    assert seen() == "none"
    # the tag moves to an image with /marker
    write(tmp_path / "b/Dockerfile", f"FROM {base_image}\nRUN echo moved > /marker\n")
    other = tmp_path / "s-other"
    r = imgbuild("build", "-t", "b:1", tmp_path / "b", store=other)
    assert r.rc == 0, r
    r = imgbuild("push", "b:1", moving, store=other)
    assert r.rc == 0, r
    assert seen() == "none"                 # missing: the stored image
    assert seen("--pull=missing") == "none"
    assert seen("--pull") == "moved"        # always: the tag as the registry has it now
    r = imgbuild("build", "--pull=never", tmp_path / "ctx", store=tmp_path / "empty")
    assert r.rc == 1 and f"FROM {moving} (--pull=never)" in r.err and "not found" in r.err, r
    r = imgbuild("build", "--pull=sometimes", tmp_path / "ctx", store=store)
    assert r.rc == 2 and "--pull takes always, missing or never" in r.err, r


def test_add_host_shm_size_ulimit(dstore, base_image, tmp_path):
    """Item 9: docker build's (and run's) --add-host, --shm-size and --ulimit
    reach every RUN; they are part of the step's key only when given."""
    write(tmp_path / "Dockerfile", f"FROM {base_image}\n"
          "RUN (grep -E 'myhost|v6host' /etc/hosts; df -k /dev/shm | awk 'NR==2 {print $2}';"
          " ulimit -Sn; ulimit -Hn) > /seen\n")
    store = tmp_path / "s"
    flags = ["--add-host", "myhost:10.1.2.3", "--add-host", "v6host=[fd00::1]",
             "--shm-size", "16m", "--ulimit", "nofile=512:1024"]
    r = imgbuild("build", *flags, "-t", "extras:1", ".", store=store, cwd=tmp_path)
    assert r.rc == 0, r
    seen = imgbuild("run", "extras:1", "--", "cat", "/seen", store=store)
    assert seen.out.split("\n")[:5] == ["10.1.2.3\tmyhost", "fd00::1\tv6host", "16384", "512",
                                        "1024"], seen
    # the same flags: cached; none: another step
    r = imgbuild("build", *flags, ".", store=store, cwd=tmp_path)
    assert r.rc == 0 and "(1 steps cached, 0 run)" in r.err, r
    r = imgbuild("build", ".", store=store, cwd=tmp_path)
    assert r.rc == 0 and "(0 steps cached, 1 run)" in r.err, r
    # imgbuild run takes them too
    r = imgbuild("run", "--add-host", "db:192.0.2.7", "--shm-size", "8m", "--ulimit", "nproc=4000",
                 base_image, "--", "bash", "-c",
                 "grep db /etc/hosts; df -k /dev/shm | awk 'NR==2 {print $2}'; ulimit -u",
                 store=store)
    assert r.rc == 0 and r.out.split("\n")[:3] == ["192.0.2.7\tdb", "8192", "4000"], r
    for bad, msg in [(["--add-host", "nohost"], "--add-host nohost: expected NAME:IP"),
                     (["--add-host", "h:999.1.1.1"], "expected NAME:IP"),
                     (["--ulimit", "files=1"], "--ulimit files=1: expected NAME=SOFT[:HARD]"),
                     (["--ulimit", "nofile=2048:1024"], "the soft limit is above the hard one"),
                     (["--shm-size", "0"], "--shm-size 0: expected a size above 0")]:
        r = imgbuild("build", *bad, ".", store=store, cwd=tmp_path)
        assert r.rc == 2 and msg in r.err, (bad, r)


def test_build_label(dstore, base_image, tmp_path):
    """Item 9: --label KEY=VALUE sets the stored image's config labels over
    the recipe's LABELs, without touching any step's key."""
    write(tmp_path / "Dockerfile", f"FROM {base_image}\nLABEL a=recipe b=recipe\nRUN echo x > /x\n")
    store = tmp_path / "s"
    r = imgbuild("build", "--label", "b=cli", "--label", "org.example.c=with spaces", "-t", "lab:1",
                 ".", store=store, cwd=tmp_path)
    assert r.rc == 0, r
    import json
    cfg = json.loads(imgbuild("inspect", "lab:1", store=store).out)["config"]
    assert cfg["config"]["Labels"] == {"a": "recipe", "b": "cli", "org.example.c": "with spaces"}
    r = imgbuild("build", "--label", "b=other", "-t", "lab:2", ".", store=store, cwd=tmp_path)
    assert r.rc == 0 and "(2 steps cached, 0 run)" in r.err, r
    cfg2 = json.loads(imgbuild("inspect", "lab:2", store=store).out)["config"]
    assert cfg2["config"]["Labels"]["b"] == "other"
    assert cfg2["rootfs"] == cfg["rootfs"]
    r = imgbuild("build", "--label", "novalue", ".", store=store, cwd=tmp_path)
    assert r.rc == 2 and "--label novalue: expected KEY=VALUE" in r.err, r


def test_build_context_image_and_directory(dstore, base_image, tmp_path):
    """Item 9: buildx's --build-context NAME=docker-image://REF (FROM NAME,
    COPY --from=NAME) and NAME=DIR (COPY --from=NAME copies from DIR as from
    the build context: 0:0, links kept; its content in the step's key; the
    directory untouched)."""
    import os
    other = tmp_path / "other"
    write(other / "sub/f", "hello\n")
    os.symlink("sub/f", other / "l")
    write(tmp_path / "ctx/Dockerfile", "FROM base\nCOPY --from=extra / /extra/\n"
          "COPY --from=img /etc/debian_version /dv\n")
    flags = ["--build-context", f"base=docker-image://{base_image}",
             "--build-context", f"extra={other}", "--build-context", f"img=docker-image://{base_image}"]
    store = tmp_path / "s"
    r = imgbuild("build", *flags, "-t", "bc:1", tmp_path / "ctx", store=store)
    assert r.rc == 0, r
    out = imgbuild("run", "bc:1", "--", "sh", "-c",
                   "stat -c '%u:%g %N' /extra/sub/f /extra/l; cat /extra/sub/f /dv", store=store)
    assert out.rc == 0, out
    lines = out.out.splitlines()
    assert lines[0] == "0:0 '/extra/sub/f'" and lines[1] == "0:0 '/extra/l' -> 'sub/f'", out
    assert lines[2] == "hello" and lines[3].startswith("12."), out
    r = imgbuild("build", *flags, tmp_path / "ctx", store=store)
    assert r.rc == 0 and "(2 steps cached, 0 run)" in r.err, r
    write(other / "sub/f", "changed\n")
    r = imgbuild("build", *flags, "-t", "bc:2", tmp_path / "ctx", store=store)
    assert r.rc == 0 and "(0 steps cached, 2 run)" in r.err, r
    assert imgbuild("run", "bc:2", "--", "cat", "/extra/sub/f", store=store).out == "changed\n"
    assert (other / "sub/f").read_text() == "changed\n" and os.path.islink(other / "l")
    for bad, rc, msg in [
            ([f"extra={tmp_path}/nope"], 1, f"--build-context extra={tmp_path}/nope: "
                                            f"{tmp_path}/nope is not a directory"),
            (["extra=git://x/y"], 1, "only docker-image://REF and a directory are supported"),
            (["noequals"], 2, "--build-context noequals: expected NAME=DIR"),
            ([f"base={other}", f"extra={other}", f"img={other}"], 1,
             "the build context base is a directory; FROM takes an image")]:
        args = [a for v in bad for a in ("--build-context", v)]
        r = imgbuild("build", *args, tmp_path / "ctx", store=store)
        assert r.rc == rc and msg in r.err, (bad, r)


def test_image_id_from_build_q_names_the_image(dstore, base_image, tmp_path):
    """`docker run $(docker build -q .)`: the image ID that -q and --iidfile
    print (the config's digest) names the image for run, inspect and tag."""
    write(tmp_path / "Dockerfile", f"FROM {base_image}\nRUN echo by-id > /id\n")
    store = tmp_path / "s"
    r = imgbuild("build", "-q", "-t", "byid:1", ".", store=store, cwd=tmp_path)
    assert r.rc == 0, r
    image_id = r.out.strip()
    assert image_id.startswith("sha256:") and len(image_id) == 71, r
    out = imgbuild("run", image_id, "--", "cat", "/id", store=store)
    assert out.rc == 0 and out.out == "by-id\n", out
    import json
    info = json.loads(imgbuild("inspect", image_id, store=store).out)
    assert info["manifest"]["config"]["digest"] == image_id
    assert imgbuild("tag", image_id, "byid:2", store=store).rc == 0
    assert json.loads(imgbuild("inspect", "byid:2", store=store).out)["digest"] == info["digest"]
    r = imgbuild("run", "sha256:" + "0" * 64, "--", "true", store=store)
    assert r.rc != 0 and "not found" in r.err, r
