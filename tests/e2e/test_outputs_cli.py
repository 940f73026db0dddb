"""build's outputs as docker buildx takes them: -o DIR and -o - shorthands,
type=oci/docker tarballs (and to stdout), type=image,push=true, --push and
--load, unknown OUTPUT keys refused before the build, -q printing the image
ID, --iidfile and --metadata-file (buildx's JSON plus the wheels written)."""
import hashlib
import json
import shutil
import subprocess
import tarfile

import pytest

from conftest import IMGBUILD, imgbuild, sh, stored_names, tiny_wheel, write

RECIPE = """FROM scratch
COPY busybox /bin/busybox
COPY hello.txt /srv/hello.txt
CMD ["/bin/busybox", "cat", "/srv/hello.txt"]
"""


@pytest.fixture
def ctx(tmp_path):
    c = tmp_path / "ctx"
    c.mkdir()
    shutil.copy("/bin/busybox", c / "busybox")
    write(c / "hello.txt", "hello from the outputs\n")
    write(c / "Dockerfile", RECIPE)
    return c


def inspect(ref, store):
    r = imgbuild("inspect", ref, store=store)
    assert r.rc == 0, r
    return json.loads(r.out)


def run_binary_stdout(args, store, cwd, out_path):
    """imgbuild ARGS with stdout in the file `out_path` (bytes); stderr as text."""
    with open(out_path, "wb") as f:
        p = subprocess.run([str(IMGBUILD), "--store", str(store), *map(str, args)], cwd=cwd,
                           stdout=f, stderr=subprocess.PIPE, text=False, timeout=600)
    return p.returncode, p.stderr.decode()


def test_o_dir_and_dash(tmp_path, ctx):
    store = tmp_path / "store"
    # -o DIR: type=local,dest=DIR (a comma and a blank in the name stay in it)
    # (--add-host beside: its option code once collided with --push's)
    r = imgbuild("build", ".", "-o", "out dir,1", "--add-host", "h:10.0.0.1", store=store, cwd=ctx)
    assert r.rc == 0, r
    assert (ctx / "out dir,1/srv/hello.txt").read_text() == "hello from the outputs\n"
    assert (ctx / "out dir,1/bin/busybox").read_bytes() == (ctx / "busybox").read_bytes()
    # -o -: the tree as a tarball on stdout, everything else on stderr
    rc, err = run_binary_stdout(["build", ".", "-o", "-"], store, ctx, tmp_path / "t.tar")
    assert rc == 0, err
    assert "OUTPUT tar / -> -" in err
    with tarfile.open(tmp_path / "t.tar") as t:
        assert t.extractfile("srv/hello.txt").read() == b"hello from the outputs\n"
        assert "bin/busybox" in t.getnames()
    # nothing left behind in the store's tmp/
    assert list((store / "tmp").glob("stdout-*")) == []


def test_oci_tarball_directory_and_docker(tmp_path, ctx):
    store = tmp_path / "store"
    (ctx / "existing").mkdir()
    r = imgbuild("build", ".", "-t", "app:1",
                 "-o", "type=oci,dest=out/app.tar,name=app:1",
                 "-o", "type=oci,dest=out/layout/",
                 "-o", "type=oci,dest=existing",
                 "-o", "type=oci,dest=out/notar,tar=false",
                 "-o", "type=docker,dest=out/docker.tar,name=app:1",
                 store=store, cwd=ctx)
    assert r.rc == 0, r
    img = inspect("app:1", store)
    digest, config = img["digest"], img["manifest"]["config"]["digest"]
    tar = ctx / "out/app.tar"
    assert tar.is_file()
    with tarfile.open(tar) as t:
        names = t.getnames()
        assert names[:2] == ["oci-layout", "index.json"]
        index = json.load(t.extractfile("index.json"))
        m = index["manifests"][0]
        assert m["digest"] == digest
        assert m["annotations"]["org.opencontainers.image.ref.name"] == "app:1"
        blobs = [n for n in names if n.startswith("blobs/sha256/") and len(n) > 13]
        wanted = {digest, config, *(l["digest"] for l in img["manifest"]["layers"])}
        assert {"sha256:" + n.rsplit("/", 1)[1] for n in blobs} == wanted
        for n in blobs:  # every blob's bytes are its digest
            assert hashlib.sha256(t.extractfile(n).read()).hexdigest() == n.rsplit("/", 1)[1]
    raw = json.loads(sh("skopeo", "inspect", "--raw", f"oci-archive:{tar}").stdout)
    assert raw["config"]["digest"] == config
    # dest ending in '/', an existing directory, tar=false: layout directories
    for d in ("out/layout", "existing", "out/notar"):
        assert (ctx / d / "index.json").is_file(), d
        assert json.loads((ctx / d / "index.json").read_text())["manifests"][0]["digest"] == digest
        raw = json.loads(sh("skopeo", "inspect", "--raw", f"oci:{ctx / d}").stdout)
        assert raw["config"]["digest"] == config
    # type=docker: docker-archive reads it; its config is the image's
    cfg = json.loads(sh("skopeo", "inspect", "--config", "--raw",
                        f"docker-archive:{ctx / 'out/docker.tar'}").stdout)
    with tarfile.open(ctx / "out/docker.tar") as t:
        manifest = json.load(t.extractfile("manifest.json"))
        assert manifest[0]["Config"] == config.split(":")[1] + ".json"
        assert manifest[0]["RepoTags"] == ["app:1"]
    assert cfg["config"]["Cmd"] == ["/bin/busybox", "cat", "/srv/hello.txt"]
    # type=docker,dest=- and type=oci,dest=-: to stdout
    rc, err = run_binary_stdout(["build", ".", "-o", "type=docker,dest=-"], store, ctx,
                                tmp_path / "d.tar")
    assert rc == 0, err
    with tarfile.open(tmp_path / "d.tar") as t:
        assert json.load(t.extractfile("manifest.json"))[0]["Config"] == config.split(":")[1] + ".json"
    rc, err = run_binary_stdout(["build", ".", "-q", "-o", "type=oci,dest=-,name=app:1"], store, ctx,
                                tmp_path / "o.tar")
    assert rc == 0, err
    assert (tmp_path / "o.tar").read_bytes() == tar.read_bytes()  # no ID line after it


def test_image_push_true_registry_and_push_flag(tmp_path, ctx, registry):
    store = tmp_path / "store"
    a, b, c, d = (f"{registry}/outputs-cli/{n}:1" for n in "abcd")
    r = imgbuild("build", ".", "-o", f'type=image,"name={a},{b}",push=true',
                 "-o", f"type=image,name={d},push=false", store=store, cwd=ctx)
    assert r.rc == 0, r
    digest = inspect(a, store)["digest"]
    for ref in (a, b):
        raw = sh("skopeo", "inspect", "--raw", "--tls-verify=false", f"docker://{ref}").stdout
        assert "sha256:" + hashlib.sha256(raw.encode()).hexdigest() == digest, ref
    # push=false: tagged in the store, not pushed
    assert inspect(d, store)["digest"] == digest
    p = subprocess.run(["skopeo", "inspect", "--raw", "--tls-verify=false", f"docker://{d}"],
                       capture_output=True, text=True)
    assert p.returncode != 0
    # --push: type=registry named by -t; its digest in the metadata file
    r = imgbuild("build", ".", "-t", c, "--push", "--metadata-file", "meta.json",
                 store=store, cwd=ctx)
    assert r.rc == 0, r
    raw = sh("skopeo", "inspect", "--raw", "--tls-verify=false", f"docker://{c}").stdout
    meta = json.loads((ctx / "meta.json").read_text())
    assert meta["containerimage.digest"] == "sha256:" + hashlib.sha256(raw.encode()).hexdigest()
    assert meta["image.name"] == c
    # --push without -t: a usage error, nothing built
    r = imgbuild("build", ".", "--push", store=tmp_path / "s2", cwd=ctx)
    assert r.rc == 2 and "--push needs -t REF" in r.err, r


def test_unknown_keys_refused_before_the_build(tmp_path, ctx):
    store = tmp_path / "store"
    write(ctx / "r.recipe", RECIPE + "OUTPUT type=image,name=x:1,pusj=true\n")
    r = imgbuild("build", ctx / "r.recipe", store=store, cwd=ctx)
    assert r.rc == 1
    assert "r.recipe:5: OUTPUT type=image: unknown key 'pusj' (accepted: type, name, push)" in r.err
    assert stored_names(store) == []
    r = imgbuild("build", ".", "-t", "y:1", "-o", "type=local,dest=out,srcc=/srv", store=store,
                 cwd=ctx)
    assert r.rc == 1
    assert ("--output type=local,dest=out,srcc=/srv: OUTPUT type=local: unknown key 'srcc' "
            "(accepted: type, dest, src, require, repair, repair-exclude)") in r.err, r
    assert not (ctx / "out").exists() and stored_names(store) == []
    assert "FROM scratch" not in r.err  # no step ran
    r = imgbuild("build", ".", "-o", "type=oci,dest=o.tar,tar=yes", store=store, cwd=ctx)
    assert r.rc == 1 and "OUTPUT tar=yes: expected true or false" in r.err, r
    r = imgbuild("build", ".", "-o", "type=tar,dest=t.tar,compresion=gzip", store=store, cwd=ctx)
    assert r.rc == 1 and "unknown key 'compresion'" in r.err, r
    assert not (ctx / "t.tar").exists() and not (ctx / "o.tar").exists()


def test_quiet_iidfile_metadata(tmp_path, ctx):
    store = tmp_path / "store"
    tiny_wheel(ctx, "demo", "1.0")
    write(ctx / "Dockerfile", """FROM scratch AS wheels
COPY demo-1.0-py3-none-any.whl /wheels/
OUTPUT type=local,dest=dist,src=/wheels
OUTPUT type=local,dest=one,src=/wheels/demo-1.0-py3-none-any.whl
OUTPUT type=image,name=wheels:1

FROM scratch
COPY busybox /bin/busybox
COPY hello.txt /srv/hello.txt
RUN ["/bin/busybox", "sh", "-c", "echo run-says-hi; echo run-says-hi >&2"]
OUTPUT type=image,name=final:extra
""")
    r = imgbuild("build", ".", "-q", "-t", "final:1", "--iidfile", "out/iid",
                 "--metadata-file", "out/meta.json", store=store, cwd=ctx)
    assert r.rc == 1 and "--iidfile out/iid" in r.err  # out/ does not exist: named
    (ctx / "out").mkdir()
    r = imgbuild("build", ".", "-q", "-t", "final:1", "--iidfile", "out/iid",
                 "--metadata-file", "out/meta.json", store=store, cwd=ctx)
    assert r.rc == 0, r
    img = inspect("final:1", store)
    config = img["manifest"]["config"]["digest"]
    # -q: the image ID (the config's digest, as docker's) alone on stdout,
    # a RUN's output included
    assert r.out == config + "\n"
    assert "OUTPUT" not in r.err
    assert (ctx / "out/iid").read_text() == config
    meta = json.loads((ctx / "out/meta.json").read_text())
    manifest_bytes = (store / "blobs/sha256" / img["digest"].split(":")[1]).read_bytes()
    assert meta["containerimage.digest"] == img["digest"]
    assert meta["containerimage.config.digest"] == config
    assert meta["containerimage.descriptor"] == {
        "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "digest": img["digest"], "size": len(manifest_bytes)}
    # the final target's image and its names; not the other stage's
    assert meta["image.name"] == "docker.io/library/final:extra,docker.io/library/final:1"
    assert inspect("wheels:1", store)["digest"] != img["digest"]
    whl = ctx / "dist/demo-1.0-py3-none-any.whl"
    sha = hashlib.sha256(whl.read_bytes()).hexdigest()
    assert sha == hashlib.sha256((ctx / "demo-1.0-py3-none-any.whl").read_bytes()).hexdigest()
    assert meta["imgbuild.wheels"] == [
        {"path": "dist/demo-1.0-py3-none-any.whl", "sha256": sha},
        {"path": "one/demo-1.0-py3-none-any.whl", "sha256": sha}]
    # the same with -j 2: the stage processes relay what they wrote
    r = imgbuild("build", ".", "-j", "2", "-t", "final:1", "--metadata-file", "out/meta2.json",
                 store=store, cwd=ctx)
    assert r.rc == 0, r
    assert json.loads((ctx / "out/meta2.json").read_text()) == meta
    # --load: accepted, says where the image is
    r = imgbuild("build", ".", "--load", store=store, cwd=ctx)
    assert r.rc == 0 and "--load: the image is in imgbuild's store already" in r.err, r
    # --iidfile with --matrix is a usage error
    r = imgbuild("build", ".", "--matrix", "A=1,2", "--iidfile", "x", store=store, cwd=ctx)
    assert r.rc == 2 and "--iidfile describes one image" in r.err, r


def test_save_and_push_write_oci_archives(tmp_path, ctx):
    """The OCI layout tarball writer behind type=oci also serves `imgbuild
    save --format oci-archive` and `push NAME oci-archive:FILE[:NAME]`; and
    a layout saved by digest has no name (it used to crash)."""
    store = tmp_path / "store"
    r = imgbuild("build", ".", "-t", "app:1", store=store, cwd=ctx)
    assert r.rc == 0, r
    img = inspect("app:1", store)
    digest, config = img["digest"], img["manifest"]["config"]["digest"]
    r = imgbuild("save", "--format", "oci-archive", "-o", tmp_path / "s.tar", "app:1", store=store)
    assert r.rc == 0, r
    r = imgbuild("push", "app:1", f"oci-archive:{tmp_path / 'p.tar'}:team/app:2", store=store)
    assert r.rc == 0, r
    for tar, name in ((tmp_path / "s.tar", "docker.io/library/app:1"),
                      (tmp_path / "p.tar", "team/app:2")):
        with tarfile.open(tar) as t:
            m = json.load(t.extractfile("index.json"))["manifests"][0]
        assert m["digest"] == digest and m["annotations"] == {
            "org.opencontainers.image.ref.name": name}, tar
        raw = json.loads(sh("skopeo", "inspect", "--raw", f"oci-archive:{tar}").stdout)
        assert raw["config"]["digest"] == config
    # loaded back into another store: the same manifest
    r = imgbuild("load", "-i", tmp_path / "s.tar", store=tmp_path / "s2")
    assert r.rc == 0, r
    assert inspect("app:1", tmp_path / "s2")["digest"] == digest
    # by digest: no name to write, the layout is unnamed
    for fmt, dest in (("oci-dir", tmp_path / "od"), ("oci-archive", tmp_path / "od.tar")):
        r = imgbuild("save", "--format", fmt, "-o", dest, digest, store=store)
        assert r.rc == 0, r
        raw = json.loads(sh("skopeo", "inspect", "--raw",
                            f"{'oci' if fmt == 'oci-dir' else fmt}:{dest}").stdout)
        assert raw["config"]["digest"] == config
    assert "annotations" not in json.loads((tmp_path / "od/index.json").read_text())["manifests"][0]
