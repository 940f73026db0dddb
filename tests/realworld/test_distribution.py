"""Recipe plumbing of a real-world multi-stage Dockerfile, built unchanged:
the Dockerfile of CNCF distribution 2.8.2 (Debian's docker-registry
2.8.2+ds1-1 source, with Debian's patches, tests/realworld/source.sh). Its
base images are stand-ins built from Debian packages (tests/realworld/
standins.sh: Go 1.19 and the Go libraries Debian builds it with, stand-in
apk and xx scripts), reached under their Docker Hub names through a
registries.conf that points docker.io at the local registry. What it
exercises: `# syntax` directive, global ARGs in FROM, `FROM
--platform=$BUILDPLATFORM`, `COPY --from=` an image stage over `/`, `RUN
--mount=target=.` (relative to WORKDIR), `--mount=type=cache`,
`--mount=...,from=STAGE` and `--mount=from=STAGE`, TARGETOS/TARGETARCH,
`FROM scratch` stages, `--target` with `--output type=local`, a Go build of
the registry that then answers `--version` with the version the `version`
stage computed from `git describe`."""
import hashlib
import json
import subprocess
import tarfile

import pytest
from conftest import e2e

imgbuild, sh, ROOT = e2e.imgbuild, e2e.sh, e2e.ROOT


@pytest.fixture(scope="session")
def world(tmp_path_factory, registry):
    d = tmp_path_factory.mktemp("world")
    sh("bash", ROOT / "tests/realworld/standins.sh", registry)
    src = d / "distribution"
    sh("bash", ROOT / "tests/realworld/source.sh", src)
    conf = d / "registries.conf"
    conf.write_text(f'[[registry]]\nprefix = "docker.io"\nlocation = "{registry}"\ninsecure = true\n')
    return {"src": src, "conf": conf, "store": d / "store"}


def build(world, *args):
    r = imgbuild("--registries-conf", world["conf"], "--progress=plain", "build",
                 "-f", world["src"] / "Dockerfile", *args, world["src"],
                 store=world["store"], timeout=3600)
    assert r.rc == 0, r
    return r


def test_registry_image(world):
    r = build(world, "-t", "registry:realworld")
    assert "[version 2/2] RUN" in r.err
    ins = json.loads(imgbuild("inspect", "registry:realworld", store=world["store"]).out)
    c = ins["config"]["config"]
    assert c["Entrypoint"] == ["registry"]
    assert c["Cmd"] == ["serve", "/etc/docker/registry/config.yml"]
    assert c["ExposedPorts"] == {"5000/tcp": {}}
    assert c["Volumes"] == {"/var/lib/registry": {}}
    # the binary built by the Go toolchain, with the version from git describe
    v = imgbuild("run", "registry:realworld", "--version", store=world["store"])
    assert (v.rc, v.out) == (0, "registry github.com/docker/distribution 2.8.2\n"), v
    cfg = imgbuild("run", "--entrypoint", "cat", "registry:realworld",
                   "/etc/docker/registry/config.yml", store=world["store"])
    assert cfg.out == (world["src"] / "cmd/registry/config-dev.yml").read_text()
    st = subprocess.run([str(e2e.IMGBUILD), "--store", str(world["store"]), "run",
                         "--entrypoint", "cat", "registry:realworld", "/bin/registry"],
                        capture_output=True, timeout=600)
    assert st.returncode == 0, st.stderr
    assert is_static_elf(st.stdout)


def is_static_elf(data):
    """An x86-64 ELF executable without a PT_INTERP program header (what
    xx-verify --static checked in the build, read here independently)."""
    import struct
    if data[:4] != b"\x7fELF" or data[4] != 2:
        return False
    phoff, = struct.unpack_from("<Q", data, 0x20)
    phentsize, phnum = struct.unpack_from("<HH", data, 0x36)
    types = [struct.unpack_from("<I", data, phoff + i * phentsize)[0] for i in range(phnum)]
    return 3 not in types and 1 in types  # no PT_INTERP, some PT_LOAD


def test_release_artifact(world, tmp_path):
    """--target artifact: the releaser stage's tarball and checksum, through
    two bind mounts from other stages; the stages the image build made come
    from the cache."""
    out = tmp_path / "out"
    r = build(world, "--target", "artifact", "--output", f"type=local,dest={out}")
    assert "[build 2/2] RUN" in r.err and "CACHED" in r.err, r
    assert sorted(p.name for p in out.iterdir()) == [
        "registry_2.8.2_linux_amd64.tar.gz", "registry_2.8.2_linux_amd64.tar.gz.sha256"]
    tgz = out / "registry_2.8.2_linux_amd64.tar.gz"
    assert (out / (tgz.name + ".sha256")).read_text() == \
        hashlib.sha256(tgz.read_bytes()).hexdigest() + "\n"
    with tarfile.open(tgz) as t:
        assert sorted(t.getnames()) == ["LICENSE", "README.md", "registry"]
        assert t.extractfile("LICENSE").read() == (world["src"] / "LICENSE").read_bytes()
        head = t.extractfile("registry").read(4)
    assert head == b"\x7fELF"
