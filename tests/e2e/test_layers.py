"""The layers a build writes: compression choices read back by peers
(skopeo, umoci, zstd, gzip), reproducibility across stores, and the
options' errors."""
import gzip
import hashlib
import io
import json
import subprocess
import tarfile
from pathlib import Path

import pytest

from conftest import imgbuild, sh, write

GZIP = "application/vnd.oci.image.layer.v1.tar+gzip"
ZSTD = "application/vnd.oci.image.layer.v1.tar+zstd"
TAR = "application/vnd.oci.image.layer.v1.tar"


def small_recipe(ctx, registry, name):
    write(ctx / "f.txt", "from the context\n")
    return write(ctx / "r.recipe", f"""
FROM {registry}/debian:bookworm
COPY f.txt /data/f.txt
RUN echo "epoch=${{SOURCE_DATE_EPOCH:-unset}}" > /data/built && chmod 4755 /data/built \\
 && ln -s ../data/f.txt /data/link && rm -rf /usr/share/doc
OUTPUT type=image,name={name}
""")


def blob(store, digest):
    return (Path(store) / "blobs/sha256" / digest.split(":")[1]).read_bytes()


def inspect(store, ref):
    r = imgbuild("inspect", ref, store=store)
    assert r.rc == 0, r
    return json.loads(r.out)


def tar_of(data, media_type):
    if media_type == GZIP:
        return gzip.decompress(data)
    if media_type == ZSTD:
        return subprocess.run(["zstd", "-qdc"], input=data, capture_output=True, check=True).stdout
    assert media_type == TAR
    return data


@pytest.mark.parametrize("compression,level,media_type,magic", [
    ("gzip", None, GZIP, b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\x03"),
    ("gzip", "9", GZIP, b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\x03"),
    ("zstd", None, ZSTD, b"\x28\xb5\x2f\xfd"),
    ("zstd", "12", ZSTD, b"\x28\xb5\x2f\xfd"),
    ("none", None, TAR, b""),
])
def test_compression_is_read_back_by_peers(registry, base_image, tmp_path, compression, level,
                                           media_type, magic):
    ctx = tmp_path / "ctx"
    recipe = small_recipe(ctx, registry, "layers:c")
    store = tmp_path / "store"
    args = ["--compression", compression] + (["--compression-level", level] if level else [])
    r = imgbuild(recipe, *args, store=store, cwd=tmp_path)
    assert r.rc == 0, r
    info = inspect(store, "layers:c")
    base_layers = len(info["manifest"]["layers"]) - 2
    ours = info["manifest"]["layers"][base_layers:]
    diff_ids = info["config"]["rootfs"]["diff_ids"][base_layers:]
    assert [d["mediaType"] for d in ours] == [media_type, media_type]
    for desc, diff_id in zip(ours, diff_ids):
        data = blob(store, desc["digest"])
        assert data.startswith(magic)
        assert len(data) == desc["size"]
        t = tar_of(data, media_type)
        assert "sha256:" + hashlib.sha256(t).hexdigest() == diff_id
        if media_type == TAR:
            assert desc["digest"] == diff_id
    # independent readers: skopeo copies it out of the store (Debian's umoci
    # 0.4.7 reads no zstd: skopeo decompresses those and writes gzip), umoci
    # unpacks
    convert = ["--dest-compress", "--dest-compress-format", "gzip"] if compression == "zstd" else []
    sh("skopeo", "copy", *convert, f"oci:{store}:docker.io/library/layers:c",
       f"oci:{tmp_path}/copy:c")
    sh("umoci", "unpack", "--rootless", "--image", f"{tmp_path}/copy:c", tmp_path / "bundle")
    root = tmp_path / "bundle" / "rootfs"
    assert (root / "data/f.txt").read_text() == "from the context\n"
    assert (root / "data/built").read_text() == "epoch=unset\n"
    assert (root / "data/built").stat().st_mode & 0o7777 == 0o4755
    assert (root / "data/link").readlink() == Path("../data/f.txt")
    assert not (root / "usr/share/doc").exists()


def test_reproducible_across_stores_without_source_date_epoch(registry, base_image, tmp_path):
    ctx = tmp_path / "ctx"
    recipe = small_recipe(ctx, registry, "layers:r")
    results = []
    for i in range(2):
        store = tmp_path / f"store{i}"
        r = imgbuild(recipe, "--reproducible", store=store, cwd=tmp_path)
        assert r.rc == 0, r
        results.append(inspect(store, "layers:r"))
    a, b = results
    assert a["digest"] == b["digest"]
    assert a["manifest"] == b["manifest"]
    cfg = a["config"]
    assert cfg["created"] == "1970-01-01T00:00:00Z"
    assert [h["created"] for h in cfg["history"][-2:]] == ["1970-01-01T00:00:00Z"] * 2
    store = tmp_path / "store0"
    layer = a["manifest"]["layers"][-1]
    with tarfile.open(fileobj=io.BytesIO(gzip.decompress(blob(store, layer["digest"])))) as t:
        members = {m.name: m for m in t.getmembers()}
        # the RUN saw SOURCE_DATE_EPOCH=0, and every mtime is clamped to it
        assert t.extractfile("data/built").read() == b"epoch=0\n"
        assert {m.mtime for m in members.values()} == {0}
        assert "usr/share/.wh.doc" in members


def test_without_reproducible_mtimes_and_dates_are_kept(registry, base_image, tmp_path):
    ctx = tmp_path / "ctx"
    recipe = small_recipe(ctx, registry, "layers:n")
    store = tmp_path / "store"
    r = imgbuild(recipe, store=store, cwd=tmp_path, env={"SOURCE_DATE_EPOCH": ""})
    assert r.rc == 0, r
    info = inspect(store, "layers:n")
    assert not info["config"]["created"].startswith("1970")
    layer = info["manifest"]["layers"][-1]
    with tarfile.open(fileobj=io.BytesIO(gzip.decompress(blob(store, layer["digest"])))) as t:
        assert t.extractfile("data/built").read() == b"epoch=unset\n"
        assert t.getmember("data/built").mtime > 1700000000


@pytest.mark.parametrize("args,words", [
    (["--compression", "xz"], ["--compression", "gzip, zstd or none", "xz"]),
    (["--compression-level", "10"], ["--compression-level 10", "0-9 for gzip"]),
    (["--compression", "zstd", "--compression-level", "0"], ["0", "1-19 for zstd"]),
    (["--compression", "none", "--compression-level", "3"], ["--compression-level 3"]),
    (["--compression-level", "fast"], ["--compression-level", "fast"]),
])
def test_bad_compression_options_are_usage_errors(tmp_path, args, words):
    recipe = write(tmp_path / "r.recipe", "FROM scratch\n")
    store = tmp_path / "store"
    r = imgbuild(recipe, *args, store=store, cwd=tmp_path)
    assert r.rc == 2, r
    for w in words:
        assert w in r.err, (w, r.err)
    assert not (store / "blobs").exists() or not any((store / "blobs/sha256").iterdir())


def sysroot_recipe(ctx, registry):
    write(ctx / "hdr/zlib-lite.h", "#define ZL 1\n")
    return write(ctx / "s.recipe", f"""
FROM {registry}/debian:bookworm AS sysroot
COPY hdr/ /usr/include/lite/
RUN mkdir -p /opt/tc/lib && echo "toolchain" > /opt/tc/VERSION && date > /opt/tc/built-at-mtime-only \\
 && ln -s VERSION /opt/tc/V && ln /opt/tc/VERSION /opt/tc/VERSION.hard && touch /opt/tc/lib/libx.a \\
 && cp /etc/os-release /opt/tc/ && rm /opt/tc/built-at-mtime-only
OUTPUT type=tar,dest=out/sysroot.tar
OUTPUT type=tar,dest=out/tc.tar.zst,src=/opt/tc,compression=zstd
""")


def test_sysroot_tar_is_byte_identical_across_builds(registry, base_image, tmp_path):
    ctx = tmp_path / "ctx"
    recipe = sysroot_recipe(ctx, registry)
    outs = []
    for i in range(2):
        work = tmp_path / f"w{i}"
        work.mkdir()
        r = imgbuild(recipe, "--reproducible", store=tmp_path / f"store{i}", cwd=work)
        assert r.rc == 0, r
        outs.append(work / "out")
    for name in ("sysroot.tar", "tc.tar.zst"):
        a, b = (outs[0] / name).read_bytes(), (outs[1] / name).read_bytes()
        assert a == b, name
    with tarfile.open(outs[0] / "sysroot.tar") as t:
        members = {m.name: m for m in t.getmembers()}
        names = t.getnames()
    assert names == sorted(names, key=lambda n: n.rstrip("/").encode())
    assert members["opt/tc/VERSION"].isfile() and members["opt/tc/V"].issym()
    assert members["opt/tc/V"].linkname == "VERSION"
    assert members["opt/tc/VERSION.hard"].islnk()
    assert members["opt/tc/VERSION.hard"].linkname == "opt/tc/VERSION"
    assert "usr/include/lite/zlib-lite.h" in members and "usr/bin/bash" in members
    assert "opt/tc/built-at-mtime-only" not in members
    assert {m.mtime for m in members.values()} == {0}
    # the sandbox's mount points are there, empty
    assert not any(n.startswith(("proc/", "sys/", "dev/")) for n in names)
    assert all(members[d].isdir() for d in ("proc", "sys", "dev"))
    # the base image's own files are all there: same count as the base layer's entries
    zst = subprocess.run(["zstd", "-qdc", outs[0] / "tc.tar.zst"], capture_output=True,
                         check=True).stdout
    with tarfile.open(fileobj=io.BytesIO(zst)) as t:
        assert sorted(t.getnames()) == ["V", "VERSION", "VERSION.hard", "lib", "lib/libx.a",
                                        "os-release"]
        assert t.extractfile("VERSION").read() == b"toolchain\n"
    # no temporary file left beside the outputs
    assert sorted(p.name for p in outs[0].iterdir()) == ["sysroot.tar", "tc.tar.zst"]


def test_tar_output_errors_name_the_output(registry, base_image, tmp_path):
    write(tmp_path / "afile", "a file, not a directory\n")
    recipe = write(tmp_path / "e.recipe", f"""
FROM {registry}/debian:bookworm
OUTPUT type=tar,dest=afile/x.tar
""")
    r = imgbuild(recipe, store=tmp_path / "store", cwd=tmp_path)
    assert r.rc == 1, r
    assert "type=tar,dest=afile/x.tar" in r.err and "not a directory" in r.err
    recipe = write(tmp_path / "e2.recipe", f"""
FROM {registry}/debian:bookworm
OUTPUT type=tar,dest=x.tar,src=/etc/os-release
""")
    r = imgbuild(recipe, store=tmp_path / "store", cwd=tmp_path)
    assert r.rc == 1 and "not a directory" in r.err, r
    assert not (tmp_path / "x.tar").exists()
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".x.tar")] == []


def test_unpack_of_a_stored_image_records_no_snapshot(registry, base_image, tmp_path):
    store = tmp_path / "store"
    assert imgbuild("pull", f"{registry}/debian:bookworm", store=store).rc == 0
    r = imgbuild("unpack", f"{registry}/debian:bookworm", tmp_path / "root", store=store)
    assert r.rc == 0, r
    assert (tmp_path / "root/etc/debian_version").read_text().startswith("12")
    snaps = store / "snapshots"
    assert not snaps.exists() or list(snaps.iterdir()) == []
    # run keeps one, for the next run
    r = imgbuild("run", f"{registry}/debian:bookworm", "--", "true", store=store)
    assert r.rc == 0, r
    assert len(list(snaps.iterdir())) == 1


def test_tar_output_bad_compression_fails_before_any_step(registry, tmp_path):
    recipe = write(tmp_path / "c.recipe", f"""
FROM {registry}/debian:bookworm
RUN echo should-not-run
OUTPUT type=tar,dest=x.tar,compression=xz
""")
    r = imgbuild(recipe, store=tmp_path / "store", cwd=tmp_path)
    assert r.rc == 1, r
    assert f"{recipe}:4" in r.err and "compression=xz" in r.err and "gzip, zstd or none" in r.err
    assert "should-not-run" not in r.err and "pull " not in r.err
    assert not (tmp_path / "x.tar").exists()
