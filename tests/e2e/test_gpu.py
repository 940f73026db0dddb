"""GPU passthrough without a GPU: a fake NVIDIA driver tree
(tests/fixtures/gpu/make_fake_driver.sh) found by discovery
(IMGBUILD_NVIDIA_ROOT, IMGBUILD_LDCONFIG) or described by CDI specs in the
test's own --cdi-spec-dir (never the system's).  Asserts exactly what
appears in the sandbox, that nothing else does, and that the rootfs is
unchanged afterwards (mount points, symlinks, ld.so.cache)."""
import hashlib
import subprocess
from pathlib import Path

import pytest

from conftest import ROOT, imgbuild

LIB = "/usr/lib/x86_64-linux-gnu"


@pytest.fixture(scope="module")
def fake(tmp_path_factory):
    d = tmp_path_factory.mktemp("fake-driver")
    subprocess.run(["bash", str(ROOT / "tests/fixtures/gpu/make_fake_driver.sh"), str(d)], check=True)
    return d


@pytest.fixture(scope="module")
def gstore(tmp_path_factory, registry, base_image):
    store = tmp_path_factory.mktemp("gpu-store")
    assert imgbuild("pull", base_image, store=store).rc == 0
    return store


@pytest.fixture(scope="module")
def grootfs(tmp_path_factory, gstore, base_image):
    d = tmp_path_factory.mktemp("gpu-rootfs") / "r"
    assert imgbuild("unpack", base_image, d, store=gstore).rc == 0
    return d


def tree_digest(root):
    """(path, type, mode, size, link target, content hash) of every entry."""
    h = hashlib.sha256()
    for p in sorted(Path(root).rglob("*")):
        st = p.lstat()
        h.update(str(p.relative_to(root)).encode() + b"\0" + str(st.st_mode).encode())
        if p.is_symlink():
            h.update(str(p.readlink()).encode())
        elif p.is_file():
            h.update(p.read_bytes())
    return h.hexdigest()


PROBE = ("ls /dev | grep nvidia | sort | tr '\\n' ' '; echo; "
         "for f in /dev/nvidia*; do [ -f $f ] || [ -c $f ] && cat $f; done 2>/dev/null; "
         f"ls {LIB} | grep -E 'nvidia|cuda' | tr '\\n' ' '; echo; "
         f"readlink {LIB}/libcuda.so.1; "
         "ldconfig -p | grep -E 'libcuda|libnvidia' | sed 's/ (.*=>/ =>/' | sort; "
         "nvidia-smi; echo NVIDIA_VISIBLE_DEVICES=$NVIDIA_VISIBLE_DEVICES FROM_CDI=${FROM_CDI:-}")


def run_probe(gstore, grootfs, fake, device, cdi_dir, env_extra=(), extra_env=None):
    env = {"IMGBUILD_NVIDIA_ROOT": str(fake), "IMGBUILD_LDCONFIG": str(fake / "ldconfig")}
    env.update(extra_env or {})
    args = ["run", "--cdi-spec-dir", cdi_dir]
    for e in env_extra:
        args += ["-e", e]
    if device:
        args += ["--device", device]
    return imgbuild(*args, "--rootfs", grootfs, "--", "sh", "-c", PROBE, store=gstore, env=env)


def test_discovery_one_gpu(gstore, grootfs, fake):
    before = tree_digest(grootfs)
    r = run_probe(gstore, grootfs, fake, "nvidia.com/gpu=0", fake / "cdi-empty")
    assert r.rc == 0, r
    lines = r.out.splitlines()
    # control nodes, GPU 0 only, the caps directory
    assert lines[0] == "nvidia-caps nvidia-uvm nvidia-uvm-tools nvidia0 nvidiactl ", r.out
    assert lines[1:5] == ["fake /dev/nvidia-uvm", "fake /dev/nvidia-uvm-tools",
                          "fake /dev/nvidia0", "fake /dev/nvidiactl"], r.out
    # compute + utility libraries (not the video one), soname links, ld cache
    assert lines[5] == ("libcuda.so.1 libcuda.so.999.01 libnvidia-ml.so.1 libnvidia-ml.so.999.01 "
                        "libnvidia-ptxjitcompiler.so.1 libnvidia-ptxjitcompiler.so.999.01 "), r.out
    assert lines[6] == "libcuda.so.999.01"
    assert lines[7:10] == [f"\tlibcuda.so.1 => {LIB}/libcuda.so.1",
                           f"\tlibnvidia-ml.so.1 => {LIB}/libnvidia-ml.so.1",
                           f"\tlibnvidia-ptxjitcompiler.so.1 => {LIB}/libnvidia-ptxjitcompiler.so.1"], r.out
    assert lines[10] == "fake nvidia-smi"
    assert lines[11] == "NVIDIA_VISIBLE_DEVICES=0 FROM_CDI="
    assert len(lines) == 12, r.out
    assert tree_digest(grootfs) == before, "the run left something in the rootfs"
    # the cache's second libcuda.so.1 (/opt/second) was not bound
    r2 = imgbuild("run", "--cdi-spec-dir", fake / "cdi-empty", "--device", "nvidia.com/gpu=0",
                  "--rootfs", grootfs, "--", "sh", "-c", "ls /opt/second 2>&1 || true", store=gstore,
                  env={"IMGBUILD_NVIDIA_ROOT": str(fake), "IMGBUILD_LDCONFIG": str(fake / "ldconfig")})
    assert r2.rc == 0 and "No such file" in r2.out, r2


@pytest.mark.parametrize("device,visible,caps,gpus,libs", [
    ("nvidia.com/gpu=all", None, None, "nvidia0 nvidia1", "cuda ml ptx"),
    ("nvidia.com/gpu=GPU-22222222-2222-2222-2222-222222222222", None, None, "nvidia1", "cuda ml ptx"),
    ("nvidia.com/gpu=all", "1", None, "nvidia1", "cuda ml ptx"),
    ("nvidia.com/gpu=all", "none", None, "", "cuda ml ptx"),
    ("nvidia.com/gpu=0", None, "utility", "nvidia0", "ml"),
    ("nvidia.com/gpu=0", None, "video,compute", "nvidia0", "cuda encode ptx"),
])
def test_discovery_selection(gstore, grootfs, fake, device, visible, caps, gpus, libs):
    env = []
    if visible:
        env.append(f"NVIDIA_VISIBLE_DEVICES={visible}")
    if caps:
        env.append(f"NVIDIA_DRIVER_CAPABILITIES={caps}")
    r = run_probe(gstore, grootfs, fake, device, fake / "cdi-empty", env_extra=env)
    assert r.rc == 0, r
    first = r.out.splitlines()[0].split()
    assert [x for x in first if x[-1].isdigit() and x.startswith("nvidia") and "-" not in x] \
        == gpus.split(), r.out
    short = {"libcuda.so.1": "cuda", "libnvidia-ml.so.1": "ml", "libnvidia-encode.so.1": "encode",
             "libnvidia-ptxjitcompiler.so.1": "ptx"}
    libline = [x for x in r.out.splitlines() if ".so.999.01 " in x]
    got = sorted(short[w] for w in (libline[0].split() if libline else []) if w in short)
    assert got == sorted(libs.split()), r.out


def test_device_env_replaces_the_callers_not_added_twice(gstore, grootfs, fake):
    """A CDI device's variables replace the same names from -e or the image
    in `imgbuild run`, as in RUN (one resolution of a step's devices) and as
    CDI's own spec editing does: the command's environment holds each name
    once."""
    r = imgbuild("run", "--cdi-spec-dir", fake / "cdi", "-e", "NVIDIA_VISIBLE_DEVICES=1",
                 "-e", "FROM_CDI=no", "--device",
                 "nvidia.com/gpu=GPU-22222222-2222-2222-2222-222222222222", "--rootfs", grootfs,
                 "--", "env", store=gstore)  # env itself: a shell would merge the names
    assert r.rc == 0, r
    got = [v for v in r.out.splitlines() if v.split("=")[0] in ("NVIDIA_VISIBLE_DEVICES", "FROM_CDI")]
    assert sorted(got) == ["FROM_CDI=yes", "NVIDIA_VISIBLE_DEVICES=void"], r


def test_cdi_yaml_spec(gstore, grootfs, fake):
    before = tree_digest(grootfs)
    r = run_probe(gstore, grootfs, fake, "nvidia.com/gpu=GPU-22222222-2222-2222-2222-222222222222",
                  fake / "cdi")
    assert r.rc == 0, r
    lines = r.out.splitlines()
    assert lines[0] == "nvidia1 nvidiactl ", r.out
    assert lines[1:3] == ["fake /dev/nvidia1", "fake /dev/nvidiactl"]
    assert lines[3] == "libcuda.so.1 libcuda.so.999.01 ", r.out
    assert lines[4] == "libcuda.so.999.01"
    assert lines[5] == f"\tlibcuda.so.1 => {LIB}/libcuda.so.1", r.out
    assert lines[6] == "fake nvidia-smi"
    assert lines[7] == "NVIDIA_VISIBLE_DEVICES=void FROM_CDI=yes"
    assert tree_digest(grootfs) == before


def test_cdi_json_other_vendor_and_unknown_hook(gstore, grootfs, fake):
    r = imgbuild("run", "--cdi-spec-dir", fake / "cdi", "--device", "example.com/widget=w1",
                 "--rootfs", grootfs, "--", "sh", "-c", "echo $WIDGET; ls /opt/widget; "
                 "(touch /opt/widget/x) 2>/dev/null || echo read-only", store=gstore)
    assert r.rc == 0, r
    assert r.out == "1\nnvidia-smi\nread-only\n", r
    assert "CDI hook /usr/bin/widget-hook (createContainer)" in r.err and "is not run" in r.err


@pytest.mark.parametrize("device,cdi,message", [
    ("nvidia.com/gpu=7", "cdi-empty", "no GPU '7' (2 GPUs found)"),
    ("nvidia.com/gpu=7", "cdi", "CDI device nvidia.com/gpu=7: not found in {fake}/cdi "
                                "(devices: 0, GPU-22222222-2222-2222-2222-222222222222, all)"),
    ("example.com/widget=w9", "cdi", "CDI device example.com/widget=w9: not found in"),
    ("foo", "cdi", "expected a CDI device name vendor.com/class=NAME"),
    ("acme.com/thing=1", "cdi", "no CDI spec of kind acme.com/thing in"),
])
def test_device_errors(gstore, grootfs, fake, device, cdi, message):
    message = message.replace("{fake}", str(fake))
    r = run_probe(gstore, grootfs, fake, device, fake / cdi)
    assert r.rc == 125, r
    assert message in r.err, r


def test_bad_spec_names_the_file_and_line(gstore, grootfs, fake, tmp_path):
    d = tmp_path / "cdi"
    d.mkdir()
    (d / "bad.yaml").write_text("kind: nvidia.com/gpu\ndevices:\n  - name: [unclosed\n")
    r = run_probe(gstore, grootfs, fake, "nvidia.com/gpu=0", d)
    assert r.rc == 125, r
    assert f"CDI spec {d}/bad.yaml: line " in r.err, r


def test_no_driver_is_a_clear_error(gstore, grootfs, tmp_path, fake):
    r = run_probe(gstore, grootfs, fake, "nvidia.com/gpu=all", fake / "cdi-empty",
                  extra_env={"IMGBUILD_NVIDIA_ROOT": str(tmp_path)})
    assert r.rc == 125, r
    assert "no CDI spec in" in r.err and "no NVIDIA driver found" in r.err, r


def test_build_run_device(gstore, base_image, fake, tmp_path):
    out = tmp_path / "out"
    recipe = tmp_path / "r.recipe"
    recipe.write_text(f"""FROM {base_image}
RUN --device=nvidia.com/gpu=0 sh -c 'nvidia-smi > /smi.txt; ldconfig -p | grep -c libcuda > /count.txt'
OUTPUT type=local,dest={out}
OUTPUT type=image,name=gpu:probe
""")
    r = imgbuild("build", "--cdi-spec-dir", fake / "cdi-empty", recipe, store=gstore, cwd=tmp_path,
                 env={"IMGBUILD_NVIDIA_ROOT": str(fake), "IMGBUILD_LDCONFIG": str(fake / "ldconfig")})
    assert r.rc == 0, r
    assert (out / "smi.txt").read_text() == "fake nvidia-smi\n"
    assert (out / "count.txt").read_text() == "1\n"
    # the layer has the step's files only: no driver file, no device node,
    # and the image's own ld.so.cache
    assert not (out / "usr/bin/nvidia-smi").exists()
    assert not list((out / "usr/lib/x86_64-linux-gnu").glob("libcuda*"))
    assert not (out / "dev/nvidia0").exists()
    r = imgbuild("run", "gpu:probe", "--", "sh", "-c", "ldconfig -p | grep -c libcuda", store=gstore)
    assert r.out == "0\n", r
    # The step's layer: its two files; nothing of the mount points (not even
    # a changed directory time).  ldconfig's two caches were rewritten and put
    # back: they appear with the base image's bytes and times (their inode
    # changed), so the layer is the same on every build.
    import json
    import tarfile
    m = json.loads(imgbuild("inspect", "gpu:probe", store=gstore).out)
    layers = m["manifest"]["layers"]
    with tarfile.open(Path(gstore) / "blobs/sha256" / layers[-1]["digest"].split(":")[1]) as t:
        got = {ti.name: (ti.mtime, t.extractfile(ti).read() if ti.isfile() else None)
               for ti in t.getmembers()}
    with tarfile.open(Path(gstore) / "blobs/sha256" / layers[0]["digest"].split(":")[1]) as t:
        base = {ti.name.lstrip("./"): (ti.mtime, t.extractfile(ti).read() if ti.isfile() else None)
                for ti in t.getmembers()}
    assert {"count.txt", "smi.txt"} <= set(got), sorted(got)
    assert set(got) - {"count.txt", "smi.txt"} <= {
        "etc", "etc/ld.so.cache", "var", "var/cache", "var/cache/ldconfig",
        "var/cache/ldconfig/aux-cache"}, sorted(got)
    for name in set(got) - {"count.txt", "smi.txt"}:
        assert got[name] == base[name], name
