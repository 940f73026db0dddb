"""imgbuild wheel audit|repair and the audit of wheels a build outputs
(builder/wheel/).  The fixture wheels (a C, a C++, a libyaml-linking and a
black-listed-symbol extension, tests/fixtures/wheels) are built once per
session INSIDE imgbuild: tests/fixtures/wheels/toolchain.recipe adds
Debian's gcc, g++, python3-dev, setuptools, wheel and libyaml-dev to the
suite's bookworm base (that apt step kept in $IMGBUILD_TEST_CACHE), and
build.recipe runs `python3 setup.py bdist_wheel` there, the wheels coming
out through OUTPUT type=local with the build's own audit.  auditwheel's
answers for those wheels are recorded in tests/fixtures/wheels/auditwheel.json
(with how they were obtained)."""
import calendar
import hashlib
import io
import json
import os
import shutil
import subprocess
import tarfile
import sys
import time
import zipfile
from pathlib import Path

import pytest

from conftest import ROOT, cache_dir, imgbuild, local_cache_args, sh

FIXTURES = ROOT / "tests/fixtures/wheels"
AUDITWHEEL = json.loads((FIXTURES / "auditwheel.json").read_text())
PY = "/usr/bin/python3"
PYVER = "cp%d%d" % sys.version_info[:2]


def built_name(dist):
    return f"{dist}-0.1-{PYVER}-{PYVER}-linux_x86_64.whl"


TOOLCHAIN = "localhost/ibw-toolchain:bookworm"
EPOCH = 1700000000


@pytest.fixture(scope="session")
def wheel_store(base_image, tmp_path_factory):
    """A store holding TOOLCHAIN (toolchain.recipe on the suite's base); its
    apt step comes from the suite's cache when an earlier run recorded it."""
    store = tmp_path_factory.mktemp("wheel-store")
    cache = cache_dir() / "wheel-toolchain-cache"
    args = local_cache_args(cache)
    r = imgbuild(FIXTURES / "toolchain.recipe", "--build-arg", f"BASE={base_image}",
                 "-t", TOOLCHAIN, *args, store=store, cwd=FIXTURES)
    assert r.rc == 0, r
    return store


def build_wheels(store, out, *extra):
    """build.recipe on TOOLCHAIN with SOURCE_DATE_EPOCH: every wheel to
    out/dist (audited by the build), ibw_yaml's repaired to
    manylinux_2_17 in out/wheelhouse."""
    return imgbuild(FIXTURES / "build.recipe", "--build-arg", f"TOOLCHAIN={TOOLCHAIN}",
                    "--context", FIXTURES,
                    "--output", f"type=local,dest={out}/dist,src=/wheels",
                    "--output", f"type=local,dest={out}/wheelhouse,src=/wheels/yamlext,"
                                "repair=manylinux_2_17_x86_64",
                    *extra, store=store, cwd=out, env={"SOURCE_DATE_EPOCH": str(EPOCH)})


@pytest.fixture(scope="session")
def built(wheel_store, tmp_path_factory):
    out = tmp_path_factory.mktemp("built")
    r = build_wheels(wheel_store, out, "--no-cache")
    assert r.rc == 0, r
    return {"out": out, "log": r.err,
            "wheels": {p.name.split("-")[0]: p for p in (out / "dist").glob("*/*.whl")},
            "repaired": sorted((out / "wheelhouse").iterdir())}


@pytest.fixture(scope="session")
def wheels(built):
    """The fixture wheels, built inside imgbuild (build.recipe)."""
    return built["wheels"]


def audit(path, *extra, env=None):
    return imgbuild("wheel", "audit", *extra, path, store="/nonexistent-store", env=env)


def recorded(name):
    if name not in AUDITWHEEL["show"]:
        pytest.skip(f"auditwheel's answer is recorded for {name} (a Debian 12 / CPython 3.11 "
                    "build), not for this host's wheel")
    return AUDITWHEEL["show"][name]


@pytest.mark.parametrize("dist", ["ibw_cext", "ibw_cpp", "ibw_yaml", "ibw_bl"])
def test_audit_matches_auditwheel(wheels, dist):
    w = wheels[dist]
    want = recorded(w.name)
    t0 = time.monotonic()
    r = audit(w, "--json")
    elapsed = time.monotonic() - t0
    assert r.rc == 0, r
    assert json.loads(r.out) == want
    assert elapsed < 5
    # the text form says the same tag, in auditwheel show's words
    r = audit(w)
    assert r.rc == 0, r
    assert f'is consistent with the following platform tag: "{want["overall_tag"]}"' in \
        " ".join(r.out.split())


def test_audit_text_names_what_holds_the_tag_back(wheels):
    # ibw_yaml: its symbol versions constrain the tag (auditwheel's sym_tag);
    # like auditwheel show without -v, the text stops there
    w = wheels["ibw_yaml"]
    want = recorded(w.name)
    r = audit(w)
    assert r.rc == 0, r
    text = " ".join(r.out.split())
    versions = ", ".join(f"'{v}'" for v in want["versioned_symbols"]["libc.so.6"])
    assert f"libc.so.6 with versions {{{versions}}}" in text
    assert f'This constrains the platform tag to "{want["sym_tag"]}"' in text
    # ibw_cext: nothing constrains, no external library
    w = wheels["ibw_cext"]
    want = recorded(w.name)
    text = " ".join(audit(w).out.split())
    assert want["external_libs"] == {}
    assert "The wheel requires no external shared libraries! :)" in text


def rewrite_zip(src, dst, change):
    """Copy a zip member by member; change(name, data) -> data or None (drop)."""
    with zipfile.ZipFile(src) as zin, zipfile.ZipFile(dst, "w", zipfile.ZIP_DEFLATED) as zout:
        for info in zin.infolist():
            data = change(info.filename, zin.read(info))
            if data is not None:
                zout.writestr(info, data)


def test_audit_stops_at_the_uncompressed_size_limit(wheels, tmp_path):
    """A decompression bomb: a member of 64 MiB of zeros (about 64 kB in
    the zip) against a limit of 16 MiB, which IMGBUILD_MAX_LAYER_BYTES sets
    as for layers; the same wheel passes the size check without the limit."""
    w = wheels["ibw_cext"]
    bomb = tmp_path / w.name
    rewrite_zip(w, bomb, lambda n, d: d)
    with zipfile.ZipFile(bomb, "a", compression=zipfile.ZIP_DEFLATED) as z:
        z.writestr("ibw_cext/zeros.bin", bytes(64 << 20))
    r = audit(bomb, env={"IMGBUILD_MAX_LAYER_BYTES": str(16 << 20)})
    assert r.rc == 1 and r.out == "", r
    assert r.err.strip() == (f"imgbuild: wheel {w.name}: more than {16 << 20} bytes uncompressed "
                             "(the limit; IMGBUILD_MAX_LAYER_BYTES sets it)")
    # without that limit it is read to the end, and fails on RECORD instead
    r = audit(bomb)
    assert r.rc == 1 and "ibw_cext/zeros.bin" in r.err and "RECORD" in r.err, r


def test_audit_refuses_corrupt_wheels(wheels, tmp_path):
    w = wheels["ibw_cext"]
    so = next(n for n in zipfile.ZipFile(w).namelist() if n.endswith(".so"))
    # one flipped byte in the extension: RECORD's digest no longer matches
    bad = tmp_path / w.name
    rewrite_zip(w, bad, lambda n, d: d[:100] + bytes([d[100] ^ 1]) + d[101:] if n == so else d)
    r = audit(bad)
    assert r.rc == 1 and r.out == ""
    assert r.err.strip() == f"imgbuild: wheel {w.name}: RECORD: hash mismatch for {so}"
    # a member RECORD does not list
    rewrite_zip(w, bad, lambda n, d: d)
    with zipfile.ZipFile(bad, "a") as z:
        z.writestr("ibw_cext/extra.py", "x = 1\n")
    r = audit(bad)
    assert r.rc == 1 and "RECORD does not list ibw_cext/extra.py" in r.err
    # no METADATA
    rewrite_zip(w, bad, lambda n, d: None if n.endswith("/METADATA") else d)
    r = audit(bad)
    assert r.rc == 1 and "missing ibw_cext-0.1.dist-info/METADATA" in r.err
    # truncated: not a readable zip
    bad.write_bytes(w.read_bytes()[:2000])
    r = audit(bad)
    assert r.rc == 1 and "not a readable zip" in r.err
    # a file name that is not PEP 427's
    other = tmp_path / "ibw_cext-0.1-linux_x86_64.whl"
    shutil.copy(w, other)
    r = audit(other)
    assert r.rc == 1 and "expected 5 or 6" in r.err
    # usage errors exit 2
    assert imgbuild("wheel", "audit", store="/x").rc == 2
    assert imgbuild("wheel", "frobnicate", w, store="/x").rc == 2


def readelf_dynamic(path):
    out = sh("readelf", "-d", path).stdout
    needed = [l.split("[")[1].rstrip("]") for l in out.splitlines() if "(NEEDED)" in l]
    rpath = [l.split("[")[1].rstrip("]") for l in out.splitlines() if "(RPATH)" in l]
    soname = [l.split("[")[1].rstrip("]") for l in out.splitlines() if "(SONAME)" in l]
    return needed, rpath, soname


def host_lib(soname):
    """The host's library as auditwheel resolved it (recorded path), else ldconfig's."""
    for line in sh("/sbin/ldconfig", "-p").stdout.splitlines():
        if line.strip().startswith(soname + " ") and "x86-64" in line:
            return Path(os.path.realpath(line.split("=>")[1].strip()))
    raise AssertionError(f"{soname} not in ldconfig -p")


@pytest.fixture(scope="session")
def repaired(wheels, tmp_path_factory):
    out = tmp_path_factory.mktemp("repaired")
    r = imgbuild("wheel", "repair", wheels["ibw_yaml"], "--plat", "manylinux_2_17_x86_64",
                 "-w", out, store="/x", env={"SOURCE_DATE_EPOCH": "1700000000"})
    assert r.rc == 0, r
    return Path(r.out.strip())


def test_repair_grafts_libyaml(wheels, repaired, tmp_path):
    assert repaired.name == (f"ibw_yaml-0.1-{PYVER}-{PYVER}-"
                             "manylinux2014_x86_64.manylinux_2_17_x86_64.whl")
    lib = host_lib("libyaml-0.so.2")
    digest = hashlib.sha256(lib.read_bytes()).hexdigest()[:8]
    base, ext = lib.name.split(".", 1)
    grafted = f"ibw_yaml.libs/{base}-{digest}.{ext}"
    z = zipfile.ZipFile(repaired)
    names = z.namelist()
    assert grafted in names
    # WHEEL's tags are the new platforms; linux_x86_64 is gone
    wheel_meta = z.read("ibw_yaml-0.1.dist-info/WHEEL").decode()
    tags = sorted(l.split(": ")[1] for l in wheel_meta.splitlines() if l.startswith("Tag: "))
    assert tags == [f"{PYVER}-{PYVER}-manylinux2014_x86_64", f"{PYVER}-{PYVER}-manylinux_2_17_x86_64"]
    # DT_NEEDED rewritten, RPATH set, the grafted soname changed
    z.extractall(tmp_path / "x")
    so = next((tmp_path / "x").glob("ibw_yaml.cpython-*.so"))
    needed, rpath, _ = readelf_dynamic(so)
    assert f"{base}-{digest}.{ext}" in needed and "libyaml-0.so.2" not in needed
    assert rpath == ["$ORIGIN/ibw_yaml.libs"]
    _, _, soname = readelf_dynamic(tmp_path / "x" / grafted)
    assert soname == [f"{base}-{digest}.{ext}"]
    # the grafted bytes are the host's library but for the soname patchelf changed
    assert (tmp_path / "x" / grafted).stat().st_size >= lib.stat().st_size - 4096
    # RECORD is right (our audit verifies it), the tag is the requested one,
    # and auditwheel said the same of this wheel
    r = audit(repaired, "--json")
    assert r.rc == 0, r
    got = json.loads(r.out)
    assert got["overall_tag"] == "manylinux_2_17_x86_64"
    if repaired.name in AUDITWHEEL["repaired"]:
        assert got["overall_tag"] == AUDITWHEEL["repaired"][repaired.name]["overall_tag"]
        assert got["external_libs"] == AUDITWHEEL["repaired"][repaired.name]["external_libs"] == {}
    # RECORD checked independently: every member's urlsafe-b64 sha256 and size
    import base64
    rec = z.read("ibw_yaml-0.1.dist-info/RECORD").decode().splitlines()
    for line in rec:
        path, h, size = line.rsplit(",", 2)
        if path.endswith("/RECORD"):
            assert h == "" and size == ""
            continue
        data = z.read(path)
        assert h == "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        assert int(size) == len(data)
    assert len(rec) == len(names)


def test_repair_is_reproducible(wheels, repaired, tmp_path):
    r = imgbuild("wheel", "repair", wheels["ibw_yaml"], "--plat", "manylinux_2_17_x86_64",
                 "-w", tmp_path, store="/x",
                 env={"SOURCE_DATE_EPOCH": "1700000000", "TZ": "America/New_York"})
    assert r.rc == 0, r
    again = Path(r.out.strip())
    assert again.read_bytes() == repaired.read_bytes()
    z = zipfile.ZipFile(again)
    infos = z.infolist()
    # entry times are SOURCE_DATE_EPOCH in UTC, as bdist_wheel writes them
    assert {i.date_time for i in infos} == {time.gmtime(1700000000)[:6]}
    names = [i.filename for i in infos]
    # sorted, .dist-info last, RECORD the very last
    assert names[-1] == "ibw_yaml-0.1.dist-info/RECORD"
    di = [n for n in names if n.startswith("ibw_yaml-0.1.dist-info/")]
    assert names[-len(di):] == sorted(di[:-1]) + [di[-1]]
    assert names[:-len(di)] == sorted(names[:-len(di)])
    modes = {i.filename: (i.external_attr >> 16) & 0o777 for i in infos}
    assert set(modes.values()) <= {0o644, 0o755}
    assert modes["ibw_yaml-0.1.dist-info/RECORD"] == 0o644


def test_repair_without_epoch_keeps_member_times_whatever_tz(wheels, tmp_path):
    """No SOURCE_DATE_EPOCH: each member keeps the MS-DOS time fields the
    wheel stored (bdist_wheel's, in UTC), read and written without the
    local time zone; the grafted library gets the newest member's, so
    that a repair's bytes depend on its inputs only (not on the clock)."""
    orig = {i.filename: i.date_time for i in zipfile.ZipFile(wheels["ibw_yaml"]).infolist()}
    newest = max(orig.values())
    outs = []
    for tz in ("Asia/Kolkata", "America/New_York"):
        r = imgbuild("wheel", "repair", wheels["ibw_yaml"], "--plat", "manylinux_2_17_x86_64",
                     "-w", tmp_path / tz.replace("/", "_"), store="/x", env={"TZ": tz})
        assert r.rc == 0, r
        infos = zipfile.ZipFile(r.out.strip()).infolist()
        for i in infos:
            if i.filename in orig:
                assert i.date_time == orig[i.filename], (tz, i.filename)
            else:
                assert i.filename.startswith("ibw_yaml.libs/")
                assert i.date_time == newest, (tz, i.date_time)
        outs.append(Path(r.out.strip()).read_bytes())
    assert outs[0] == outs[1]  # the same bytes, whatever TZ and the time


def test_repair_refusals(wheels, tmp_path):
    # the C++ wheel's symbols need manylinux_2_24 (auditwheel's sym_tag)
    want = recorded(wheels["ibw_cpp"].name)
    r = imgbuild("wheel", "repair", wheels["ibw_cpp"], "--plat", "manylinux_2_17_x86_64",
                 "-w", tmp_path, store="/x")
    assert r.rc == 1
    assert "too-recent versioned symbols" in r.err and want["sym_tag"] in r.err
    assert list(tmp_path.iterdir()) == []
    # patchelf missing: named in the error
    r = imgbuild("wheel", "repair", wheels["ibw_yaml"], "--plat", "manylinux_2_17_x86_64",
                 "-w", tmp_path, "--patchelf", "/nonexistent/patchelf", store="/x")
    assert r.rc == 1 and "patchelf not found" in r.err
    # an architecture the wheel is not
    r = imgbuild("wheel", "repair", wheels["ibw_yaml"], "--plat", "manylinux_2_17_aarch64",
                 "-w", tmp_path, store="/x")
    assert r.rc == 1 and "cannot repair a x86_64 wheel" in r.err
    assert imgbuild("wheel", "repair", wheels["ibw_yaml"], store="/x").rc == 2  # no --plat


def test_repair_exclude_keeps_the_library_out(wheels, tmp_path):
    # as PyTorch's builds exclude the CUDA runtime: never grafted, DT_NEEDED kept
    r = imgbuild("wheel", "repair", wheels["ibw_yaml"], "--plat", "manylinux_2_17_x86_64",
                 "-w", tmp_path, "--exclude", "libyaml-0.so.*", store="/x")
    assert r.rc == 0, r
    out = Path(r.out.strip())
    z = zipfile.ZipFile(out)
    assert not [n for n in z.namelist() if ".libs/" in n]
    z.extractall(tmp_path / "x")
    so = next((tmp_path / "x").glob("ibw_yaml.cpython-*.so"))
    assert "libyaml-0.so.2" in readelf_dynamic(so)[0]
    # a pattern matching the library's path (as auditwheel's --exclude) does the same
    r = imgbuild("wheel", "repair", wheels["ibw_yaml"], "--plat", "manylinux_2_17_x86_64",
                 "-w", tmp_path / "p", "--exclude", "*/" + host_lib("libyaml-0.so.2").name,
                 store="/x")
    assert r.rc == 0, r
    assert not [n for n in zipfile.ZipFile(r.out.strip()).namelist() if ".libs/" in n]


def hand_wheel(path, dist, files):
    """A wheel made here: PEP 427's layout and RECORD around `files`."""
    import base64
    files = dict(files)
    files[f"{dist}-1.0.dist-info/METADATA"] = f"Metadata-Version: 2.1\nName: {dist}\nVersion: 1.0\n".encode()
    files[f"{dist}-1.0.dist-info/WHEEL"] = (f"Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: false\n"
                                            f"Tag: {PYVER}-{PYVER}-linux_x86_64\n").encode()
    rec = "".join(f"{n},sha256={base64.urlsafe_b64encode(hashlib.sha256(b).digest()).rstrip(b'=').decode()},{len(b)}\n"
                  for n, b in sorted(files.items())) + f"{dist}-1.0.dist-info/RECORD,,\n"
    with zipfile.ZipFile(path, "w") as z:
        for n, b in sorted(files.items()):
            z.writestr(n, b)
        z.writestr(f"{dist}-1.0.dist-info/RECORD", rec)
    return path


def py_include():
    return sh(PY, "-c", "import sysconfig; print(sysconfig.get_paths()['include'])").stdout.strip()


def test_repair_never_grafts_the_nvidia_driver(tmp_path):
    """An extension linking a libcuda.so.1 (a stub built here) is repaired
    without grafting it, and without --exclude."""
    d = tmp_path / "stub"
    d.mkdir()
    (d / "cuda.c").write_text("int cuInit(unsigned f) { return (int) f; }\n")
    sh("gcc", "-shared", "-fPIC", "-Wl,-soname,libcuda.so.1", "-o", d / "libcuda.so.1", d / "cuda.c")
    (d / "ext.c").write_text(
        "#include <Python.h>\nint cuInit(unsigned);\n"
        "static struct PyModuleDef m = { PyModuleDef_HEAD_INIT, \"drv\", NULL, -1, NULL };\n"
        "PyMODINIT_FUNC PyInit_drv(void) { cuInit(0); return PyModule_Create(&m); }\n")
    inc = py_include()
    so = f"drv.{PYVER.replace('cp', 'cpython-')}-x86_64-linux-gnu.so"
    sh("gcc", "-shared", "-fPIC", f"-I{inc}", "-o", d / so, d / "ext.c", f"-L{d}", "-lcuda")
    whl = hand_wheel(tmp_path / f"drv-1.0-{PYVER}-{PYVER}-linux_x86_64.whl", "drv",
                     {so: (d / so).read_bytes()})
    env = {"LD_LIBRARY_PATH": str(d)}
    r = imgbuild("wheel", "repair", whl, "--plat", "manylinux_2_17_x86_64", "-w", tmp_path / "o",
                 store="/x", env=env)
    assert r.rc == 0, r
    z = zipfile.ZipFile(r.out.strip())
    assert not [n for n in z.namelist() if "libcuda" in n or ".libs/" in n]
    z.extractall(tmp_path / "x")
    assert "libcuda.so.1" in readelf_dynamic(tmp_path / "x" / so)[0]


@pytest.fixture(scope="session")
def clean_rootfs(tmp_path_factory, base_image, store):
    """The Debian minbase test image unpacked (it has no libyaml)."""
    d = tmp_path_factory.mktemp("wheelroot") / "r"
    r = imgbuild("unpack", base_image, d, store=store)
    assert r.rc == 0, r
    return d


def run_import(rootfs, store, wheel_dir, tmp_path, code):
    """Run the host's python3 in `rootfs` (its binary, libexpat and stdlib
    bind-mounted read-only; nothing else of the host) with the unpacked
    wheel on sys.path."""
    py = tmp_path / "py"
    py.mkdir(parents=True)
    shutil.copy(os.path.realpath("/usr/bin/python3"), py / "python3")
    libexpat = sh("/sbin/ldconfig", "-p").stdout
    for line in libexpat.splitlines():
        if line.strip().startswith("libexpat.so.1 ") and "x86-64" in line:
            shutil.copy(os.path.realpath(line.split("=>")[1].strip()), py / "libexpat.so.1")
    stdlib = sh(PY, "-c", "import sysconfig; print(sysconfig.get_paths()['stdlib'])").stdout.strip()
    return imgbuild("run", "-v", f"{py}:/opt/py:ro", "-v", f"{stdlib}:{stdlib}:ro",
                    "-v", f"{wheel_dir}:/opt/whl:ro", "-e", "LD_LIBRARY_PATH=/opt/py",
                    "-e", "PYTHONHOME=/usr", "--rootfs", rootfs, "--",
                    "/opt/py/python3", "-S", "-c",
                    "import sys; sys.path.insert(0, '/opt/whl'); " + code,
                    store=store)


def test_repaired_module_imports_in_a_rootfs_without_libyaml(wheels, repaired, clean_rootfs,
                                                             store, tmp_path):
    code = "import ibw_yaml; print(ibw_yaml.first_scalar('greeting: hello'))"
    check = "import os; print(os.path.exists('/usr/lib/x86_64-linux-gnu/libyaml-0.so.2'))"
    # the original wheel cannot be imported there: libyaml is missing
    orig = tmp_path / "orig"
    zipfile.ZipFile(wheels["ibw_yaml"]).extractall(orig)
    r = run_import(clean_rootfs, store, orig, tmp_path / "a", check)
    assert r.rc == 0 and r.out.strip() == "False", r
    r = run_import(clean_rootfs, store, orig, tmp_path / "b", code)
    assert r.rc == 1 and "libyaml-0.so.2: cannot open shared object file" in r.err, r
    # the repaired one can, and it works
    fixed = tmp_path / "fixed"
    zipfile.ZipFile(repaired).extractall(fixed)
    r = run_import(clean_rootfs, store, fixed, tmp_path / "c", code)
    assert r.rc == 0, r
    assert r.out.strip() == "greeting"


def test_build_output_audits_wheels(wheels, tmp_path):
    """OUTPUT type=local: every *.whl it writes is verified and audited (the
    tag printed); a corrupt one fails the build.  The wheel (built by
    build.recipe) is copied into a scratch stage from the context, so the
    test can also hand the build a corrupt one."""
    w = wheels["ibw_cext"]
    want = recorded(w.name)
    c = tmp_path / "ctx"
    (c / "dist/sub").mkdir(parents=True)
    shutil.copy(w, c / "dist/sub" / w.name)
    (c / "dist/notes.txt").write_text("not a wheel\n")
    (c / "r.recipe").write_text("FROM scratch\nCOPY dist/ /wheels/\n"
                                "OUTPUT type=local,dest=out,src=/wheels\n")
    store = tmp_path / "store"
    r = imgbuild("build", c / "r.recipe", store=store, cwd=c)
    assert r.rc == 0, r
    n = len(zipfile.ZipFile(w).namelist())
    assert f"wheel {w.name}: verified, {n} files; platform tag {want['overall_tag']}" in r.err
    assert (c / "out/sub" / w.name).read_bytes() == w.read_bytes()
    # one flipped byte in the extension: the build fails and says why
    so = next(x for x in zipfile.ZipFile(w).namelist() if x.endswith(".so"))
    rewrite_zip(w, c / "dist/sub" / w.name,
                lambda name, d: d[:100] + bytes([d[100] ^ 1]) + d[101:] if name == so else d)
    r = imgbuild("build", c / "r.recipe", store=store, cwd=c)
    assert r.rc != 0
    assert f"wheel {w.name}: RECORD: hash mismatch for {so}" in r.err
    # and the rejected wheel does not stay in the destination
    assert "(removed)" in r.err
    assert not (c / "out/sub" / w.name).exists()


def test_build_output_repairs_wheels(wheels, tmp_path):
    """OUTPUT type=local,repair=PLAT: the wheel is repaired in place, the
    library grafted is the stage's (a stub libyaml built here, not the
    host's), and the linux_x86_64 original is gone."""
    w = wheels["ibw_yaml"]
    c = tmp_path / "ctx"
    (c / "dist").mkdir(parents=True)
    shutil.copy(w, c / "dist" / w.name)
    (c / "stub.c").write_text("int yaml_stub_marker(void) { return 42; }\n")
    sh("gcc", "-shared", "-fPIC", "-Wl,-soname,libyaml-0.so.2", "-o", c / "libyaml-0.so.2", c / "stub.c")
    stub_digest = hashlib.sha256((c / "libyaml-0.so.2").read_bytes()).hexdigest()[:8]
    assert stub_digest != hashlib.sha256(host_lib("libyaml-0.so.2").read_bytes()).hexdigest()[:8]
    (c / "r.recipe").write_text(
        "FROM scratch\nCOPY libyaml-0.so.2 /usr/lib/libyaml-0.so.2\nCOPY dist/ /wheels/\n"
        "OUTPUT type=local,dest=out,src=/wheels,repair=manylinux_2_17_x86_64\n")
    r = imgbuild("build", c / "r.recipe", "--metadata-file", "meta.json", store=tmp_path / "store",
                 cwd=c, env={"SOURCE_DATE_EPOCH": "1700000000"})
    assert r.rc == 0, r
    # the stub needs no versioned symbol, and the extension's own are old
    # enough for manylinux_2_5: as auditwheel does, the higher tag is added
    plats = "manylinux1_x86_64.manylinux2014_x86_64.manylinux_2_17_x86_64.manylinux_2_5_x86_64"
    fixed = f"ibw_yaml-0.1-{PYVER}-{PYVER}-{plats}.whl"
    assert sorted(p.name for p in (c / "out").iterdir()) == [fixed]
    n = len(zipfile.ZipFile(w).namelist())
    assert f"wheel {w.name}: verified, {n} files; platform tag linux_x86_64" in r.err
    assert f"repaired as {fixed}; platform tag manylinux_2_5_x86_64" in r.err
    z = zipfile.ZipFile(c / "out" / fixed)
    assert f"ibw_yaml.libs/libyaml-0-{stub_digest}.so.2" in z.namelist()
    assert imgbuild("wheel", "audit", c / "out" / fixed, store="/x").rc == 0
    # --metadata-file names the repaired wheel, not the one copied
    meta = json.loads((c / "meta.json").read_text())
    assert meta["imgbuild.wheels"] == [
        {"path": f"out/{fixed}", "sha256": hashlib.sha256((c / "out" / fixed).read_bytes()).hexdigest()}]


def test_copy_repair_gives_the_output_repair_bytes(wheels, tmp_path):
    """COPY --from=STAGE --repair=PLAT: the wheels copied are audited with
    the source stage's libraries and repaired in the destination, and the
    repaired wheel is byte for byte the one OUTPUT repair= writes for the
    same stage (no SOURCE_DATE_EPOCH: a repair depends on its inputs only);
    owner and mode are the copied wheel's; the step is cached as any COPY.
    The library is found, by both, through the source stage's
    LD_LIBRARY_PATH (it is in no ld.so.conf directory)."""
    w = wheels["ibw_yaml"]
    c = tmp_path / "ctx"
    (c / "dist").mkdir(parents=True)
    shutil.copy(w, c / "dist" / w.name)
    (c / "stub.c").write_text("int yaml_stub_marker(void) { return 42; }\n")
    sh("gcc", "-shared", "-fPIC", "-Wl,-soname,libyaml-0.so.2", "-o", c / "libyaml-0.so.2", c / "stub.c")
    stub_digest = hashlib.sha256((c / "libyaml-0.so.2").read_bytes()).hexdigest()[:8]
    (c / "r.recipe").write_text(
        "FROM scratch AS build\nCOPY libyaml-0.so.2 /opt/deps/lib/libyaml-0.so.2\n"
        "ENV LD_LIBRARY_PATH=/opt/deps/lib\nCOPY --chmod=640 dist/ /wheels/\n"
        "OUTPUT type=local,dest=out,src=/wheels,repair=manylinux_2_17_x86_64\n"
        "FROM scratch\nARG PLAT=manylinux_2_17_x86_64\n"
        "COPY --from=build --repair=${PLAT} /wheels/ /opt/\n"
        "OUTPUT type=tar,dest=client.tar\n")
    store = tmp_path / "store"
    r = imgbuild("build", c / "r.recipe", store=store, cwd=c)
    assert r.rc == 0, r
    plats = "manylinux1_x86_64.manylinux2014_x86_64.manylinux_2_17_x86_64.manylinux_2_5_x86_64"
    fixed = f"ibw_yaml-0.1-{PYVER}-{PYVER}-{plats}.whl"
    assert sorted(p.name for p in (c / "out").iterdir()) == [fixed]
    with tarfile.open(c / "client.tar") as t:
        opt = {m.name: m for m in t.getmembers() if m.name.startswith("opt/")}
        assert sorted(opt) == [f"opt/{fixed}"], sorted(opt)  # the linux_x86_64 one is gone
        m = opt[f"opt/{fixed}"]
        assert (m.uid, m.gid, m.mode) == (0, 0, 0o640), (m.uid, m.gid, oct(m.mode))
        data = t.extractfile(m).read()
    assert data == (c / "out" / fixed).read_bytes()
    assert f"ibw_yaml.libs/libyaml-0-{stub_digest}.so.2" in zipfile.ZipFile(io.BytesIO(data)).namelist()
    # again: every step cached, the same bytes
    (c / "client.tar").unlink()
    r = imgbuild("build", c / "r.recipe", store=store, cwd=c)
    assert r.rc == 0, r
    assert "(4 steps cached, 0 run)" in r.err, r.err
    with tarfile.open(c / "client.tar") as t:
        assert t.extractfile(f"opt/{fixed}").read() == data
    # another policy is another step
    r = imgbuild("build", c / "r.recipe", "--build-arg", "PLAT=manylinux_2_28_x86_64",
                 store=store, cwd=c)
    assert r.rc == 0, r
    with tarfile.open(c / "client.tar") as t:
        names = [m.name for m in t.getmembers() if m.name.startswith("opt/")]
    assert len(names) == 1 and "manylinux_2_28_x86_64" in names[0], names


@pytest.mark.parametrize("copy, msg", [
    ("COPY --repair=manylinux_2_17_x86_64 dist/ /opt/",
     "--repair=manylinux_2_17_x86_64 needs --from: the stage or image whose libraries are grafted"),
    ("COPY --from=build --repair-exclude=libyaml* /wheels/ /opt/", "--repair-exclude needs --repair=PLAT"),
    ("COPY --from=build --repair=manylinux_9_99_x86_64 /wheels/ /opt/", "manylinux_9_99_x86_64"),
])
def test_copy_repair_refusals(wheels, tmp_path, copy, msg):
    c = tmp_path / "ctx"
    (c / "dist").mkdir(parents=True)
    shutil.copy(wheels["ibw_yaml"], c / "dist")
    (c / "r.recipe").write_text(f"FROM scratch AS build\nCOPY dist/ /wheels/\nFROM scratch\n{copy}\n")
    r = imgbuild("build", c / "r.recipe", store=tmp_path / "store", cwd=c)
    assert r.rc != 0 and msg in r.err, r
    assert "Traceback" not in r.err


def test_build_output_repair_values_are_expanded(wheels, tmp_path):
    """OUTPUT's repair= and repair-exclude= take build ARGs (as
    recipes/torch-cuda-ext.recipe's repair=${REPAIR},repair-exclude=${REPAIR_EXCLUDE}):
    the excluded library is not grafted and its DT_NEEDED stays; with the
    ARG emptied it is grafted; the plan shows the expanded values."""
    w = wheels["ibw_yaml"]
    c = tmp_path / "ctx"
    (c / "dist").mkdir(parents=True)
    shutil.copy(w, c / "dist" / w.name)
    (c / "stub.c").write_text("int yaml_stub_marker(void) { return 42; }\n")
    sh("gcc", "-shared", "-fPIC", "-Wl,-soname,libyaml-0.so.2", "-o", c / "libyaml-0.so.2", c / "stub.c")
    (c / "r.recipe").write_text(
        "FROM scratch\nCOPY libyaml-0.so.2 /usr/lib/libyaml-0.so.2\nCOPY dist/ /wheels/\n"
        "ARG REPAIR=manylinux_2_17_x86_64\nARG EXCL=libfoo.so.*:libyaml-0.so.*\n"
        "OUTPUT type=local,dest=out,src=/wheels,repair=${REPAIR},repair-exclude=${EXCL}\n")
    r = imgbuild("plan", c / "r.recipe", store=tmp_path / "store", cwd=c)
    assert r.rc == 0, r
    assert ("output: type=local dest=out src=/wheels repair=manylinux_2_17_x86_64 "
            "repair-exclude='libfoo.so.*:libyaml-0.so.*'\n") in r.out, r.out
    r = imgbuild("build", c / "r.recipe", store=tmp_path / "store", cwd=c)
    assert r.rc == 0, r
    (fixed,) = (c / "out").iterdir()
    assert "manylinux_2_17_x86_64" in fixed.name and "linux_x86_64.whl" not in fixed.name
    z = zipfile.ZipFile(fixed)
    assert not [n for n in z.namelist() if ".libs/" in n], z.namelist()
    z.extractall(tmp_path / "x")
    so = next((tmp_path / "x").glob("ibw_yaml.cpython-*.so"))
    assert "libyaml-0.so.2" in readelf_dynamic(so)[0]
    # EXCL emptied: nothing excluded, the stage's libyaml is grafted
    shutil.rmtree(c / "out")
    r = imgbuild("build", c / "r.recipe", "--build-arg", "EXCL=", store=tmp_path / "store", cwd=c)
    assert r.rc == 0, r
    (fixed,) = (c / "out").iterdir()
    assert [n for n in zipfile.ZipFile(fixed).namelist() if n.startswith("ibw_yaml.libs/libyaml-0-")]


def test_repair_libraries_inside_the_wheel(tmp_path):
    """An extension loading ibw_int/lib/libinner.so through its RUNPATH
    $ORIGIN/lib; libinner needs libyaml (outside) and libb.so (beside it, but
    libinner has no RPATH: found through the extension's tree, auditwheel's
    _fixup_elf_trees).  Only libyaml is external; the repaired wheel imports."""
    d = tmp_path / "src"
    lib = d / "ibw_int/lib"
    lib.mkdir(parents=True)
    (d / "b.c").write_text("int bfunc (void) { return 7; }\n")
    (d / "inner.c").write_text("#include <yaml.h>\nint bfunc (void);\n"
                               "int inner_version (void) { int a, b, c; yaml_get_version (&a, &b, &c);"
                               " return a * 100 + b + bfunc (); }\n")
    (d / "ext.c").write_text(
        "#include <Python.h>\nint inner_version (void);\n"
        "static PyObject *v (PyObject *s, PyObject *a) { (void) s; (void) a; return PyLong_FromLong (inner_version ()); }\n"
        "static PyMethodDef m[] = { { \"v\", v, METH_NOARGS, \"\" }, { NULL, NULL, 0, NULL } };\n"
        "static struct PyModuleDef md = { PyModuleDef_HEAD_INIT, \"_ext\", NULL, -1, m, NULL, NULL, NULL, NULL };\n"
        "PyMODINIT_FUNC PyInit__ext (void) { return PyModule_Create (&md); }\n")
    ext = f"_ext.{PYVER.replace('cp', 'cpython-')}-x86_64-linux-gnu.so"
    sh("gcc", "-shared", "-fPIC", "-o", lib / "libb.so", d / "b.c", "-Wl,-soname,libb.so")
    sh("gcc", "-shared", "-fPIC", "-o", lib / "libinner.so", d / "inner.c", "-lyaml", f"-L{lib}", "-lb",
       "-Wl,-soname,libinner.so")
    sh("gcc", "-shared", "-fPIC", f"-I{py_include()}", "-o", d / "ibw_int" / ext, d / "ext.c", f"-L{lib}",
       "-linner", "-Wl,-rpath,$ORIGIN/lib", "-Wl,--no-as-needed", "-lb")
    whl = hand_wheel(tmp_path / f"ibw_int-1.0-{PYVER}-{PYVER}-linux_x86_64.whl", "ibw_int", {
        "ibw_int/__init__.py": b"",
        f"ibw_int/{ext}": (d / "ibw_int" / ext).read_bytes(),
        "ibw_int/lib/libinner.so": (lib / "libinner.so").read_bytes(),
        "ibw_int/lib/libb.so": (lib / "libb.so").read_bytes()})
    r = audit(whl, "--json")
    assert r.rc == 0, r
    got = json.loads(r.out)
    assert got["overall_tag"] == "linux_x86_64"
    assert got["external_libs"] == {"libyaml-0.so.2": got["external_libs"]["libyaml-0.so.2"]}
    assert os.path.samefile(got["external_libs"]["libyaml-0.so.2"], host_lib("libyaml-0.so.2"))
    if whl.name in AUDITWHEEL["show"]:
        assert got == AUDITWHEEL["show"][whl.name]
    r = imgbuild("wheel", "repair", whl, "--plat", "manylinux_2_17_x86_64", "-w", tmp_path / "o",
                 store="/x")
    assert r.rc == 0, r
    out = Path(r.out.strip())
    z = zipfile.ZipFile(out)
    grafted = [n for n in z.namelist() if n.startswith("ibw_int.libs/")]
    assert len(grafted) == 1 and grafted[0].startswith("ibw_int.libs/libyaml-0-")
    z.extractall(tmp_path / "x")
    needed, rpath, _ = readelf_dynamic(tmp_path / "x/ibw_int/lib/libinner.so")
    assert needed == [grafted[0].split("/")[1], "libb.so"] and rpath == ["$ORIGIN/../../ibw_int.libs"]
    needed, rpath, _ = readelf_dynamic(tmp_path / "x/ibw_int" / ext)
    assert rpath == ["$ORIGIN/lib:$ORIGIN/../ibw_int.libs"]
    # it loads the grafted copy: the host's libyaml-0.so.2 is no longer named
    r = subprocess.run([PY, "-S", "-c", "import sys; sys.path.insert(0, sys.argv[1]); "
                        "import ibw_int._ext as e; print(e.v())", str(tmp_path / "x")],
                       capture_output=True, text=True, env={"PATH": "/usr/bin:/bin"})
    assert r.returncode == 0 and r.stdout.strip() == "9", r.stderr


# ---------------------------------------------------------------- wheels built inside imgbuild

def test_build_audits_the_wheels_it_built(built):
    """build.recipe's OUTPUT: each wheel verified and audited by the build,
    its tag the one auditwheel gave for that wheel."""
    assert sorted(built["wheels"]) == ["ibw_bl", "ibw_cext", "ibw_cpp", "ibw_yaml"]
    for dist, w in built["wheels"].items():
        want = recorded(w.name)
        n = len(zipfile.ZipFile(w).namelist())
        assert f"wheel {w.name}: verified, {n} files; platform tag {want['overall_tag']}" \
            in built["log"]


def zip_facts(path):
    z = zipfile.ZipFile(path)
    return [(i.filename, i.date_time, (i.external_attr >> 16) & 0o7777) for i in z.infolist()]


def test_built_wheels_are_reproducible(built, wheel_store, tmp_path):
    """SOURCE_DATE_EPOCH set, --no-cache: a second build gives the same
    bytes, for the wheels as bdist_wheel wrote them and for the repaired
    one; every zip entry's time is the epoch (UTC), file modes 0644 / 0755."""
    r = build_wheels(wheel_store, tmp_path, "--no-cache")
    assert r.rc == 0, r
    first = sorted(built["out"].glob("*/*/*.whl")) + sorted(built["out"].glob("wheelhouse/*.whl"))
    again = sorted(tmp_path.glob("*/*/*.whl")) + sorted(tmp_path.glob("wheelhouse/*.whl"))
    assert [p.relative_to(built["out"]) for p in first] == [p.relative_to(tmp_path) for p in again]
    assert len(first) == 5
    for a, b in zip(first, again):
        assert hashlib.sha256(a.read_bytes()).hexdigest() == \
            hashlib.sha256(b.read_bytes()).hexdigest(), a.name
        facts = zip_facts(a)
        assert {t for _, t, _ in facts} == {time.gmtime(EPOCH)[:6]}, a.name
        # bdist_wheel writes RECORD with a fixed 0664 (wheel/wheelfile.py),
        # imgbuild's repair 0644; the other members' modes are the files'
        assert {m for n, _, m in facts if not n.endswith("/RECORD")} <= {0o644, 0o755}, a.name
        assert [m for n, _, m in facts if n.endswith("/RECORD")] == \
            [0o644 if "wheelhouse" in str(a) else 0o664], a.name
        assert any(m == 0o755 for n, _, m in facts if n.endswith(".so")), a.name


def test_build_repairs_libyaml_into_the_wheel(built, clean_rootfs, store, tmp_path):
    """OUTPUT ...,src=/wheels/yamlext,repair=manylinux_2_17_x86_64: the
    stage's libyaml grafted into ibw_yaml.libs; the repaired wheel imports
    and works in the minbase rootfs, which lacks libyaml."""
    plats = "manylinux2014_x86_64.manylinux_2_17_x86_64"
    name = f"ibw_yaml-0.1-{PYVER}-{PYVER}-{plats}.whl"
    assert [p.name for p in built["repaired"]] == [name]
    fixed = built["repaired"][0]
    z = zipfile.ZipFile(fixed)
    grafted = [n for n in z.namelist() if n.startswith("ibw_yaml.libs/")]
    assert len(grafted) == 1 and grafted[0].startswith("ibw_yaml.libs/libyaml-0-"), grafted
    assert f"repaired as {name}; platform tag manylinux_2_17_x86_64" in built["log"]
    r = audit(fixed, "--json")
    assert r.rc == 0, r
    got = json.loads(r.out)
    assert got["overall_tag"] == "manylinux_2_17_x86_64" and got["external_libs"] == {}
    if name in AUDITWHEEL["repaired"]:
        assert got == AUDITWHEEL["repaired"][name]
    code = "import ibw_yaml; print(ibw_yaml.first_scalar('greeting: hello'))"
    check = "import os; print(os.path.exists('/usr/lib/x86_64-linux-gnu/libyaml-0.so.2'))"
    orig = tmp_path / "orig"
    zipfile.ZipFile(built["wheels"]["ibw_yaml"]).extractall(orig)
    r = run_import(clean_rootfs, store, orig, tmp_path / "a", check)
    assert r.rc == 0 and r.out.strip() == "False", r
    r = run_import(clean_rootfs, store, orig, tmp_path / "b", code)
    assert r.rc == 1 and "libyaml-0.so.2: cannot open shared object file" in r.err, r
    z.extractall(tmp_path / "fixed")
    r = run_import(clean_rootfs, store, tmp_path / "fixed", tmp_path / "c", code)
    assert r.rc == 0, r
    assert r.out.strip() == "greeting"


def build_require(store, out, spec):
    return imgbuild(FIXTURES / "build.recipe", "--build-arg", f"TOOLCHAIN={TOOLCHAIN}",
                    "--context", FIXTURES, "--output", spec, store=store, cwd=out,
                    env={"SOURCE_DATE_EPOCH": str(EPOCH)})


def test_output_require_fails_on_wheels_below_the_policy(built, wheel_store, tmp_path):
    """OUTPUT type=local,require=PLAT: no grafting; a wheel that does not
    satisfy PLAT fails the build, the message names each such wheel and
    what holds it back, and nothing is copied to dest."""
    dest = tmp_path / "strict"
    r = build_require(wheel_store, tmp_path,
                      f"type=local,dest={dest},src=/wheels,require=manylinux_2_17_x86_64")
    assert r.rc == 1, r
    err = " ".join(r.err.split())
    w = {d: p.name for d, p in built["wheels"].items()}
    assert "require=manylinux_2_17_x86_64: 3 of 4 wheels do not satisfy it (nothing copied)" in err
    assert (f"wheel {w['ibw_cpp']}: platform tag manylinux_2_24_x86_64, not manylinux_2_17_x86_64: "
            "versioned symbols need manylinux_2_24_x86_64 (libstdc++.so.6 CXXABI_1.3.9, "
            "libstdc++.so.6 GLIBCXX_3.4.21)") in err
    assert (f"wheel {w['ibw_yaml']}: platform tag linux_x86_64, not manylinux_2_17_x86_64: "
            "external libraries off its whitelist: libyaml-0.so.2") in err
    assert (f"wheel {w['ibw_bl']}: platform tag manylinux_2_34_x86_64, not manylinux_2_17_x86_64: "
            "versioned symbols need manylinux_2_34_x86_64 (libc.so.6 GLIBC_2.34); "
            "black-listed symbols: libc.so.6 pthread_getattr_default_np") in err
    assert w["ibw_cext"] not in err.split("(nothing copied)")[1]
    assert not dest.exists()
    # a wheel that satisfies it is copied as built, not repaired nor retagged
    r = build_require(wheel_store, tmp_path,
                      f"type=local,dest={dest},src=/wheels/cppext,require=manylinux_2_24_x86_64")
    assert r.rc == 0, r
    assert f"wheel {w['ibw_cpp']}: satisfies manylinux_2_24_x86_64" in r.err
    assert [p.name for p in dest.iterdir()] == [w["ibw_cpp"]]
    assert (dest / w["ibw_cpp"]).read_bytes() == built["wheels"]["ibw_cpp"].read_bytes()
    # an alias names the same policy
    r = build_require(wheel_store, tmp_path,
                      f"type=local,dest={tmp_path}/alias,src=/wheels/cext,require=manylinux1_x86_64")
    assert r.rc == 0, r


def test_output_require_refusals_before_any_step(wheel_store, tmp_path):
    for spec, want in [
        (f"type=local,dest={tmp_path}/x,src=/wheels,require=manylinux_2_99_x86_64",
         "OUTPUT require: manylinux_2_99_x86_64: no manylinux policy of that name"),
        (f"type=local,dest={tmp_path}/x,src=/wheels,require=linux_x86_64",
         "OUTPUT require: linux_x86_64: no manylinux policy of that name"),
        (f"type=local,dest={tmp_path}/x,src=/wheels,require=manylinux_2_17_x86_64,"
         "repair=manylinux_2_17_x86_64", "OUTPUT require= and repair= together"),
    ]:
        r = build_require(wheel_store, tmp_path, spec)
        assert r.rc == 1 and want in r.err, r
        assert "RUN" not in r.err and "COPY" not in r.err, r
        assert not (tmp_path / "x").exists()


# -- the stage's LD_LIBRARY_PATH -----------------------------------------------
# A C extension linking libibwdep.so.1, a library the stage installs only in
# /opt/deps/lib: not in its /etc/ld.so.conf nor a default directory, found
# by ld.so (and by auditwheel run in the stage) only through the stage's
# `ENV LD_LIBRARY_PATH` (MXNet's seed build names its deps directory so).
# The library calls pthread_create, whose GLIBC_2.34 version the audit
# sees only when it resolves the library.  The extension's RUNPATH is a
# relative "deps": ld.so would take it from the loading process's
# directory, which for the stage is never imgbuild's.

DEP_C = r"""
#include <pthread.h>
static void *run (void *p) { return p; }
int ibw_dep_value (void)
{
  pthread_t t;
  void *r = 0;
  if (pthread_create (&t, 0, run, (void *) 42L) == 0)
    pthread_join (t, &r);
  return (int) (long) r;
}
"""

DEP_EXT_C = r"""
#define PY_SSIZE_T_CLEAN
#include <Python.h>
int ibw_dep_value (void);
static PyObject *value (PyObject *self, PyObject *args)
{
  (void) self; (void) args;
  return PyLong_FromLong (ibw_dep_value ());
}
static PyMethodDef methods[] = { { "value", value, METH_NOARGS, "42, from libibwdep" },
                                 { NULL, NULL, 0, NULL } };
static struct PyModuleDef mod = { PyModuleDef_HEAD_INIT, "ibw_dep", NULL, -1, methods,
                                  NULL, NULL, NULL, NULL };
PyMODINIT_FUNC PyInit_ibw_dep (void) { return PyModule_Create (&mod); }
"""

DEP_SETUP = """from setuptools import Extension, setup
setup(name="ibw_dep", version="0.1",
      ext_modules=[Extension("ibw_dep", ["ext.c"], libraries=["ibwdep"],
                             library_dirs=["/opt/deps/lib"],
                             extra_link_args=["-Wl,-rpath,deps"])])
"""

# ARG LDP: the stage's LD_LIBRARY_PATH (empty: the stage sets none), set
# after the build step so that each value reuses it; /opt/linked is an
# absolute symlink to /opt/deps/lib (a path the host does not have).
DEP_RECIPE = """ARG TOOLCHAIN
FROM ${TOOLCHAIN}
COPY dep.c ext.c setup.py /src/
RUN set -e; umask 022; mkdir -p /opt/deps/lib; cd /src; \\
    gcc -shared -fPIC -O1 -Wl,-soname,libibwdep.so.1 -o /opt/deps/lib/libibwdep.so.1 dep.c; \\
    ln -s libibwdep.so.1 /opt/deps/lib/libibwdep.so; ln -s /opt/deps/lib /opt/linked; \\
    python3 setup.py -q bdist_wheel -d /wheels >/dev/null; rm -rf build *.egg-info
WORKDIR /opt
ARG LDP=/opt/deps/lib
ENV LD_LIBRARY_PATH=${LDP}
"""


def dep_context(tmp_path):
    c = tmp_path / "depctx"
    c.mkdir()
    (c / "dep.c").write_text(DEP_C)
    (c / "ext.c").write_text(DEP_EXT_C)
    (c / "setup.py").write_text(DEP_SETUP)
    (c / "r.recipe").write_text(DEP_RECIPE)
    return c


def build_dep(store, c, *outputs, ldp=None, env=None, cwd=None):
    args = ["--build-arg", f"TOOLCHAIN={TOOLCHAIN}"]
    if ldp is not None:
        args += ["--build-arg", f"LDP={ldp}"]
    for o in outputs:
        args += ["--output", o]
    return imgbuild(c / "r.recipe", *args, "--context", c, store=store, cwd=cwd or c,
                    env=dict({"SOURCE_DATE_EPOCH": str(EPOCH)}, **(env or {})))


DEP_WHEEL = f"ibw_dep-0.1-{PYVER}-{PYVER}-linux_x86_64.whl"
DEP_REPAIRED = f"ibw_dep-0.1-{PYVER}-{PYVER}-manylinux_2_34_x86_64.whl"


def test_output_repair_finds_libraries_on_the_stage_ld_library_path(wheel_store, tmp_path):
    """OUTPUT repair=: libibwdep.so.1, found only through the stage's ENV
    LD_LIBRARY_PATH=/opt/deps/lib, is grafted into the wheel, whose tag
    counts the library's GLIBC_2.34; require= sees the same library."""
    c = dep_context(tmp_path)
    # (the library copied out to a directory that is not the extension's
    # relative RUNPATH "deps" below the build's working directory)
    r = build_dep(wheel_store, c, f"type=local,dest={c}/stagelib,src=/opt/deps/lib",
                  f"type=local,dest={c}/out,src=/wheels,repair=manylinux_2_34_x86_64")
    assert r.rc == 0, r
    assert f"wheel {DEP_WHEEL}: verified" in r.err, r
    assert f"repaired as {DEP_REPAIRED}; platform tag manylinux_2_34_x86_64" in r.err, r
    assert sorted(p.name for p in (c / "out").iterdir()) == [DEP_REPAIRED]
    lib = (c / "stagelib/libibwdep.so.1").read_bytes()
    digest = hashlib.sha256(lib).hexdigest()[:8]
    z = zipfile.ZipFile(c / "out" / DEP_REPAIRED)
    grafted = f"ibw_dep.libs/libibwdep-{digest}.so.1"
    assert grafted in z.namelist(), z.namelist()
    # the grafted library is the stage's, its soname set to its new name
    (tmp_path / "x").mkdir()
    z.extract(grafted, tmp_path / "x")
    needed, _, soname = readelf_dynamic(tmp_path / "x" / grafted)
    assert soname == [f"libibwdep-{digest}.so.1"] and needed == ["libc.so.6"], (needed, soname)
    # and the extension needs it under that name, through an $ORIGIN RPATH
    ext = next(n for n in z.namelist() if n.startswith("ibw_dep.") and n.endswith(".so"))
    z.extract(ext, tmp_path / "x")
    needed, rpath, _ = readelf_dynamic(tmp_path / "x" / ext)
    assert f"libibwdep-{digest}.so.1" in needed and "libibwdep.so.1" not in needed, needed
    assert rpath == ["$ORIGIN/ibw_dep.libs"], rpath
    assert imgbuild("wheel", "audit", c / "out" / DEP_REPAIRED, store="/x").rc == 0

    # require=: the library resolved, its GLIBC_2.34 counts
    r = build_dep(wheel_store, c, f"type=local,dest={c}/strict,src=/wheels,"
                                  "require=manylinux_2_17_x86_64")
    assert r.rc == 1, r
    err = " ".join(r.err.split())
    assert (f"wheel {DEP_WHEEL}: platform tag linux_x86_64, not manylinux_2_17_x86_64: "
            "versioned symbols need manylinux_2_34_x86_64 (libc.so.6 GLIBC_2.34)") in err, err
    assert "external libraries off its whitelist: libibwdep.so.1" in err, err
    assert not (c / "strict").exists()

    # the entries as ld.so reads them: ';' separates too, a relative entry
    # is from WORKDIR (/opt), one with $ORIGIN is skipped; an absolute
    # symlink is followed inside the stage
    for i, ldp in enumerate(["$ORIGIN/nothing;deps/lib", "/nonexistent::/opt/linked"]):
        out = c / f"out{i}"
        r = build_dep(wheel_store, c, f"type=local,dest={out},src=/wheels,"
                                      "repair=manylinux_2_34_x86_64", ldp=ldp)
        assert r.rc == 0, (ldp, r)
        assert sorted(p.name for p in out.iterdir()) == [DEP_REPAIRED], ldp
        assert grafted in zipfile.ZipFile(out / DEP_REPAIRED).namelist(), ldp
    # and with none of them naming the library, it is not found
    r = build_dep(wheel_store, c, f"type=local,dest={c}/none,src=/wheels,"
                                  "repair=manylinux_2_34_x86_64",
                  ldp="$ORIGIN/../deps/lib:deps:/opt/deps")
    assert r.rc == 1, r
    assert "needs libibwdep.so.1, which was not found" in r.err, r


def test_output_audit_ignores_the_host_environment(wheel_store, tmp_path):
    """imgbuild's own LD_LIBRARY_PATH and current directory never reach a
    stage's audit: for a stage without LD_LIBRARY_PATH, where libibwdep.so.1
    is on no search path, repair= and require= answer the same whether
    imgbuild runs with LD_LIBRARY_PATH naming a host directory that holds a
    libibwdep.so.1 and from a directory whose deps/ (the extension's
    relative RUNPATH) holds one, or not.  Either host library, if it were
    read, would be grafted, and its GLIBC_2.34 would show."""
    c = dep_context(tmp_path)
    host = tmp_path / "hostlib"
    run_dir = tmp_path / "rundir"
    (run_dir / "deps").mkdir(parents=True)
    host.mkdir()
    for d in (host, run_dir / "deps"):
        sh("gcc", "-shared", "-fPIC", "-Wl,-soname,libibwdep.so.1", "-o", d / "libibwdep.so.1",
           c / "dep.c")
    out = tmp_path / "out"
    answers = []
    for env, cwd in [({}, c), ({"LD_LIBRARY_PATH": str(host)}, run_dir)]:
        r = build_dep(wheel_store, c, f"type=local,dest={out},src=/wheels,"
                                      "repair=manylinux_2_17_x86_64", ldp="", env=env, cwd=cwd)
        assert r.rc == 1, r
        said = " ".join(r.err.split())
        assert f"wheel {DEP_WHEEL}: cannot repair: ibw_dep." in said, r
        assert ("needs libibwdep.so.1, which was not found in the root filesystem's library "
                "path") in said, r
        assert not out.exists() or list(out.iterdir()) == []
        r = build_dep(wheel_store, c, f"type=local,dest={out},src=/wheels,"
                                      "require=manylinux_2_17_x86_64", ldp="", env=env, cwd=cwd)
        assert r.rc == 1, r
        said = [l for l in r.err.splitlines() if "require=manylinux_2_17_x86_64:" in l]
        assert len(said) == 1, r
        assert "external libraries off its whitelist: libibwdep.so.1" in said[0], r
        assert "GLIBC_2.34" not in said[0], r
        answers.append(said[0])
    assert answers[0] == answers[1]
