"""The CLI on real parts: pull/push against the local registry, unpack, run,
small recipes, and every user mistake giving one clear message."""
import gzip
import io
import json
import socket
import tarfile
from pathlib import Path

import pytest

from conftest import imgbuild, sh, write


def test_version(store):
    r = imgbuild("version", store=store)
    assert r.rc == 0 and r.out.startswith("imgbuild ")


def test_pull_then_inspect_docker_schema2_and_oci(registry, base_image, store):
    for tag in ("bookworm", "bookworm-oci"):
        r = imgbuild("pull", f"{registry}/debian:{tag}", store=store)
        assert r.rc == 0, r
        remote = json.loads(sh("skopeo", "inspect", "--tls-verify=false",
                               f"docker://{registry}/debian:{tag}").stdout)
        info = json.loads(imgbuild("inspect", f"{registry}/debian:{tag}", store=store).out)
        # the registry's digest, whatever the store tags (Docker schema 2 is
        # tagged as its OCI rendering, the served bytes kept beside it)
        assert r.out.strip() == remote["Digest"]
        if tag == "bookworm-oci":  # stored byte for byte
            assert info["stored_digest"] == remote["Digest"]
        else:
            assert info["manifest"]["mediaType"] == "application/vnd.docker.distribution.manifest.v2+json"
            assert info["stored_digest"] != remote["Digest"]
        assert r.out.strip() == info["digest"]
        assert info["config"]["rootfs"]["diff_ids"]
        assert [l["digest"] for l in info["manifest"]["layers"]] == remote["Layers"]
    assert f"{registry}/debian:bookworm" in imgbuild("images", store=store).out


def test_pull_missing_tag_says_so(registry, base_image, store):
    r = imgbuild("pull", f"{registry}/debian:no-such-tag", store=store)
    assert r.rc != 0
    assert "no-such-tag" in r.err and "unknown" in r.err.lower()
    assert len(r.err.strip().splitlines()) == 1


def test_pull_unreachable_registry_says_so(store):
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    r = imgbuild("pull", f"127.0.0.1:{port}/x:1", store=store)
    assert r.rc != 0
    assert f"127.0.0.1:{port}" in r.err
    assert "refused" in r.err.lower() or "connect" in r.err.lower()


def test_unpack_and_run(registry, base_image, store, tmp_path):
    r = imgbuild("unpack", f"{registry}/debian:bookworm", tmp_path / "rootfs", store=store)
    assert r.rc == 0, r
    assert (tmp_path / "rootfs/etc/debian_version").read_text().startswith("12")
    r = imgbuild("run", f"{registry}/debian:bookworm", "--", "sh", "-c",
                 "echo $FOO; cat /etc/debian_version; exit 7", "-e", "FOO=bar", store=store)
    # "-e" after "--" is part of the command, not an option
    assert r.rc == 7, r
    r = imgbuild("run", "-e", "FOO=bar", f"{registry}/debian:bookworm", "--", "sh", "-c",
                 "echo $FOO; id -u; cat /proc/1/cmdline | tr '\\0' ' '; exit 3", store=store)
    assert r.rc == 3, r
    lines = r.out.splitlines()
    assert lines[0] == "bar" and lines[1] == "0"


def test_run_rootfs_dir_and_missing_command(registry, base_image, store, tmp_path):
    r = imgbuild("unpack", f"{registry}/debian:bookworm", tmp_path / "r", store=store)
    assert r.rc == 0, r
    r = imgbuild("run", "--rootfs", tmp_path / "r", "--", "cat", "/etc/os-release", store=store)
    assert r.rc == 0 and "bookworm" in r.out
    r = imgbuild("run", "--rootfs", tmp_path / "r", "--", "no-such-command", store=store)
    assert r.rc == 127 and "command not found: no-such-command" in r.err, r
    r = imgbuild("run", "--rootfs", tmp_path / "r", "--", "/etc/os-release", store=store)
    assert r.rc == 126 and "/etc/os-release" in r.err, r
    r = imgbuild("run", "--rootfs", tmp_path / "r", "-w", "/", "--", "sh", "-c", "exit 3",
                 store=store)
    assert r.rc == 3, r


def test_small_recipe_copy_env_workdir_user_whiteout(registry, base_image, store, tmp_path):
    ctx = tmp_path / "ctx"
    write(ctx / "hello.txt", "hello from the context\n")
    write(ctx / "sub/dir/a.txt", "a\n")
    recipe = write(ctx / "small.recipe", f"""
ARG BASE={registry}/debian:bookworm
FROM $BASE AS one
ENV GREETING="hi there" OTHER=x
WORKDIR /work
COPY hello.txt sub ./
RUN echo "$GREETING" > greeting && rm /etc/issue && mkdir -p /var/empty-me && rm -rf /usr/share/doc
USER nobody
CMD ["cat", "/work/greeting"]
OUTPUT type=image,name=small:one
""")
    r = imgbuild(recipe, store=store, cwd=tmp_path)
    assert r.rc == 0, r
    info = json.loads(imgbuild("inspect", "small:one", store=store).out)
    cfg = info["config"]["config"]
    assert "GREETING=hi there" in cfg["Env"]
    assert cfg["WorkingDir"] == "/work" and cfg["User"] == "nobody"
    assert cfg["Cmd"] == ["cat", "/work/greeting"]
    # the RUN layer records the deletions as whiteouts
    run_layer = info["manifest"]["layers"][-1]["digest"]
    blob = Path(store) / "blobs/sha256" / run_layer.split(":")[1]
    with tarfile.open(fileobj=io.BytesIO(gzip.decompress(blob.read_bytes()))) as t:
        names = t.getnames()
    assert "etc/.wh.issue" in names and "usr/share/.wh.doc" in names
    assert "work/greeting" in names
    out = tmp_path / "unpacked"
    assert imgbuild("unpack", "small:one", out, store=store).rc == 0
    assert (out / "work/hello.txt").read_text() == "hello from the context\n"
    assert (out / "work/dir/a.txt").read_text() == "a\n"  # directory contents copied
    assert (out / "work/greeting").read_text() == "hi there\n"
    assert not (out / "etc/issue").exists() and not (out / "usr/share/doc").exists()
    r = imgbuild("run", "small:one", store=store)
    assert r.rc == 0 and r.out == "hi there\n", r


def test_reproducible_with_source_date_epoch(registry, base_image, tmp_path):
    ctx = tmp_path / "ctx"
    write(ctx / "f.txt", "same\n")
    recipe = write(ctx / "r.recipe", f"""
FROM {registry}/debian:bookworm
COPY f.txt /f.txt
RUN echo built > /built && chmod 600 /built
OUTPUT type=image,name=repro:1
""")
    digests = []
    for i in range(2):
        store = tmp_path / f"store{i}"
        r = imgbuild(recipe, store=store, cwd=tmp_path, env={"SOURCE_DATE_EPOCH": "1700000000"})
        assert r.rc == 0, r
        digests.append(json.loads(imgbuild("inspect", "repro:1", store=store).out)["digest"])
    assert digests[0] == digests[1]


def test_bad_recipe_names_file_and_line(store, tmp_path):
    recipe = write(tmp_path / "bad.recipe", "FROM scratch\nRUN true\nFROB something\n")
    r = imgbuild(recipe, store=store, cwd=tmp_path)
    assert r.rc != 0
    assert f"{recipe}:3" in r.err and "FROB" in r.err


def test_failing_run_shows_last_output_lines(registry, base_image, store, tmp_path):
    recipe = write(tmp_path / "fail.recipe", f"""FROM {registry}/debian:bookworm
RUN echo first-line; echo the-last-words >&2; exit 42
""")
    r = imgbuild(recipe, store=store, cwd=tmp_path)
    assert r.rc != 0
    assert f"{recipe}:2" in r.err and "42" in r.err
    assert "the-last-words" in r.err.split("exit status")[1]


def test_missing_base_image_says_so(registry, store, tmp_path):
    recipe = write(tmp_path / "m.recipe", f"FROM {registry}/nothing-here:1\nRUN true\n")
    r = imgbuild(recipe, store=store, cwd=tmp_path)
    assert r.rc != 0 and "nothing-here" in r.err


def test_push_to_another_name(registry, base_image, store):
    assert imgbuild("pull", f"{registry}/debian:bookworm", store=store).rc == 0
    r = imgbuild("push", f"{registry}/debian:bookworm", f"{registry}/copied/debian:pushed", store=store)
    assert r.rc == 0, r
    a = json.loads(sh("skopeo", "inspect", "--tls-verify=false", f"docker://{registry}/debian:bookworm").stdout)
    b = json.loads(sh("skopeo", "inspect", "--tls-verify=false", f"docker://{registry}/copied/debian:pushed").stdout)
    assert a["Layers"] == b["Layers"]


def test_unsupported_features_fail_clearly(registry, base_image, store, tmp_path):
    ctx = tmp_path / "ctx"
    write(ctx / "a.tar.gz", "not really\n")
    # (ADD of archives and URLs works now: tests/e2e/test_add.py)
    for line, words in [("ADD --keep-git-dir=true a.tar.gz /x/", ["--keep-git-dir", "not supported"]),
                        ("ADD http://example.invalid/f /f", ["download http://example.invalid/f"]),
                        ("RUN --mount=type=secret,id=s,target=/c,required true", ["secret s: not given"])]:
        recipe = write(ctx / "u.recipe", f"FROM {registry}/debian:bookworm\n{line}\n")
        r = imgbuild(recipe, store=store, cwd=tmp_path)
        assert r.rc != 0, line
        assert f"{recipe}:2" in r.err, r
        for w in words:
            assert w in r.err, (line, r.err)


def test_cli_tag_output_and_target(registry, base_image, store, tmp_path):
    ctx = tmp_path / "ctx"
    write(ctx / "f", "hi\n")
    recipe = write(ctx / "t.recipe", f"""FROM {registry}/debian:bookworm AS a
COPY f /data/f
RUN echo made > /data/g
FROM a AS b
RUN echo never > /data/h
""")
    r = imgbuild("build", recipe, "--target", "a", "-t", "mytag:1",
                 "--output", "type=local,dest=outdir,src=/data", store=store, cwd=tmp_path)
    assert r.rc == 0, r
    assert sorted(p.name for p in (tmp_path / "outdir").iterdir()) == ["f", "g"]
    assert (tmp_path / "outdir/g").read_text() == "made\n"
    info = json.loads(imgbuild("inspect", "mytag:1", store=store).out)
    assert len(info["manifest"]["layers"]) == 2 + 1  # base + COPY + RUN; stage b not built
    r = imgbuild("build", recipe, "--target", "nope", store=store, cwd=tmp_path)
    assert r.rc != 0 and "nope" in r.err
    r = imgbuild("build", recipe, "--output", "type=bogus,dest=x", store=store, cwd=tmp_path)
    assert r.rc != 0 and "bogus" in r.err


def test_healthcheck_in_image_config(registry, base_image, store, tmp_path):
    """HEALTHCHECK as Docker records it: Test CMD-SHELL / CMD / NONE,
    durations in nanoseconds, retries; history says what it was."""
    recipe = write(tmp_path / "h.recipe", f"""FROM {base_image} AS checked
ARG EVERY=1m30s
HEALTHCHECK --interval=${{EVERY}} --timeout=3s --start-period=500ms --retries=4 \\
  CMD test -e /etc/os-release || exit 1
OUTPUT type=image,name=health:shell

FROM checked AS exec
HEALTHCHECK CMD ["/bin/true", "--quick"]
OUTPUT type=image,name=health:exec

FROM checked
HEALTHCHECK NONE
OUTPUT type=image,name=health:none
""")
    r = imgbuild(recipe, store=store, cwd=tmp_path)
    assert r.rc == 0, r

    def hc(ref):
        info = json.loads(imgbuild("inspect", ref, store=store).out)
        return info["config"]["config"].get("Healthcheck"), info["config"]["history"][-1]

    h, hist = hc("health:shell")
    assert h == {"Test": ["CMD-SHELL", "test -e /etc/os-release || exit 1"],
                 "Interval": 90_000_000_000, "Timeout": 3_000_000_000,
                 "StartPeriod": 500_000_000, "Retries": 4}, h
    assert hist["created_by"] == "HEALTHCHECK CMD test -e /etc/os-release || exit 1"
    assert hist.get("empty_layer") is True
    h, _ = hc("health:exec")
    assert h == {"Test": ["CMD", "/bin/true", "--quick"]}, h
    h, hist = hc("health:none")
    assert h == {"Test": ["NONE"]}, h
    assert hist["created_by"] == "HEALTHCHECK NONE"


@pytest.mark.parametrize("flag,message", [
    ("--interval=soon", "HEALTHCHECK --interval=soon: expected a duration such as 30s"),
    ("--timeout=10us", "HEALTHCHECK --timeout=10us: at least 1ms, or 0"),
    ("--retries=-1", "HEALTHCHECK --retries=-1: expected a number"),
])
def test_healthcheck_errors_name_the_line(registry, base_image, store, tmp_path, flag, message):
    recipe = write(tmp_path / "h.recipe", f"FROM {base_image}\nHEALTHCHECK {flag} CMD true\n")
    r = imgbuild(recipe, store=store, cwd=tmp_path)
    assert r.rc != 0
    assert f"{recipe}:2" in r.err and message in r.err, r
