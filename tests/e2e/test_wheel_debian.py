"""Wheels from real Debian sources built inside imgbuild
(tests/fixtures/wheels/debian-sources.recipe): markupsafe (C), python-rapidjson
(C++), python-snappy (C++ linking libsnappy.so.1) and python-xxhash (C linking
libxxhash.so.0), from bookworm's orig tarballs on the Debian mirror.

Not part of make test (it needs the mirror's source archive, which CI must
not depend on): run by `make e2e-debian-wheels`, which sets
IMGBUILD_DEBIAN_WHEELS=1; skipped otherwise.  auditwheel's answers for these
wheels are in tests/fixtures/wheels/auditwheel.json, "debian_sources"."""
import hashlib
import json
import os
import subprocess
import time
import zipfile

import pytest

from conftest import imgbuild
from test_wheel import (AUDITWHEEL, EPOCH, FIXTURES, PYVER, TOOLCHAIN, audit,  # noqa: F401
                        clean_rootfs, run_import, wheel_store)

pytestmark = pytest.mark.skipif(os.environ.get("IMGBUILD_DEBIAN_WHEELS") != "1",
                                reason="needs the mirror's source archive: make e2e-debian-wheels")
RECORDED = AUDITWHEEL["debian_sources"]


@pytest.fixture(scope="module")
def debian(wheel_store, tmp_path_factory):
    out = tmp_path_factory.mktemp("debian-wheels")
    t0 = time.monotonic()
    r = imgbuild(FIXTURES / "debian-sources.recipe", "--build-arg", f"TOOLCHAIN={TOOLCHAIN}",
                 "--context", FIXTURES,
                 "--output", f"type=local,dest={out}/dist,src=/wheels",
                 "--output", f"type=local,dest={out}/snappy,src=/wheels/python-snappy,"
                             "repair=manylinux_2_24_x86_64",
                 "--output", f"type=local,dest={out}/xxhash,src=/wheels/python-xxhash,"
                             "repair=manylinux_2_17_x86_64",
                 store=wheel_store, cwd=out, env={"SOURCE_DATE_EPOCH": str(EPOCH)})
    elapsed = time.monotonic() - t0
    assert r.rc == 0, r
    print(f"\ndebian-sources.recipe: built in {elapsed:.0f} s")
    return {"out": out, "log": r.err,
            "built": sorted((out / "dist").glob("*/*.whl")),
            "repaired": sorted(out.glob("snappy/*.whl")) + sorted(out.glob("xxhash/*.whl"))}


def test_debian_wheels_audit_as_auditwheel(debian):
    names = [p.name for p in debian["built"]]
    assert names == sorted(RECORDED["show"]), names
    for w in debian["built"]:
        want = RECORDED["show"][w.name]
        assert f"wheel {w.name}: " in debian["log"] and \
            f"platform tag {want['overall_tag']}" in debian["log"]
        r = audit(w, "--json")
        assert r.rc == 0, r
        got = json.loads(r.out)
        assert got["overall_tag"] == want["overall_tag"], w.name
        # the whole answer, where this host resolves libraries as the one
        # auditwheel ran on (libsnappy absent there: null)
        assert got == want, w.name
        if hashlib.sha256(w.read_bytes()).hexdigest() != RECORDED["wheel_sha256"][w.name]:
            print(f"{w.name}: not the bytes auditwheel saw (a newer toolchain on the mirror?)")


def test_debian_wheels_repaired_graft_and_import(debian, clean_rootfs, store, tmp_path):
    names = [p.name for p in debian["repaired"]]
    assert names == [f"python_snappy-0.5.3-{PYVER}-{PYVER}-manylinux_2_24_x86_64.whl",
                     f"xxhash-3.2.0-{PYVER}-{PYVER}-manylinux2014_x86_64.manylinux_2_17_x86_64.whl"]
    for w in debian["repaired"]:
        r = audit(w, "--json")
        assert r.rc == 0, r
        assert json.loads(r.out) == RECORDED["repaired"][w.name]
    snappy, xxh = debian["repaired"]
    assert [n for n in zipfile.ZipFile(snappy).namelist() if ".libs/" in n][0] \
        .startswith("python_snappy.libs/libsnappy-")
    assert [n for n in zipfile.ZipFile(xxh).namelist() if ".libs/" in n][0] \
        .startswith("xxhash.libs/libxxhash-")
    code = ("import snappy; d = b'imgbuild ' * 100; c = snappy.compress(d); "
            "assert snappy.decompress(c) == d and len(c) < len(d); print('snappy ok')")
    # the minbase rootfs has no libsnappy: the wheel as built cannot load there
    orig = tmp_path / "orig"
    zipfile.ZipFile(next(p for p in debian["built"] if p.name.startswith("python_snappy"))).extractall(orig)
    r = run_import(clean_rootfs, store, orig, tmp_path / "a", code)
    assert r.rc == 1 and "libsnappy.so.1: cannot open shared object file" in r.err, r
    fixed = tmp_path / "fixed"
    zipfile.ZipFile(snappy).extractall(fixed)
    r = run_import(clean_rootfs, store, fixed, tmp_path / "b", code)
    assert r.rc == 0 and r.out.strip() == "snappy ok", r
    # xxhash loads its grafted copy (minbase has apt's libxxhash0 too)
    fixed = tmp_path / "fx"
    zipfile.ZipFile(xxh).extractall(fixed)
    r = run_import(clean_rootfs, store, fixed, tmp_path / "c",
                   "import xxhash; print(xxhash.xxh64_hexdigest(b''))")
    assert r.rc == 0 and r.out.strip() == "ef46db3751d8e999", r  # XXH64 of no bytes, seed 0
    needed = subprocess.run(["readelf", "-d", str(next(fixed.glob("xxhash/_xxhash*.so")))],
                            capture_output=True, text=True).stdout
    assert "[libxxhash-" in needed and "[$ORIGIN/../xxhash.libs]" in needed, needed


def test_debian_wheels_others_import(debian, clean_rootfs, store, tmp_path):
    for prefix, code, expect in [
            ("MarkupSafe", "import markupsafe, markupsafe._speedups; print(markupsafe.escape('<a>'))",
             "&lt;a&gt;"),
            ("python_rapidjson", "import rapidjson; print(rapidjson.dumps({'a': [1, 2]}))",
             '{"a":[1,2]}')]:
        w = next(p for p in debian["built"] if p.name.startswith(prefix))
        d = tmp_path / prefix
        zipfile.ZipFile(w).extractall(d)
        r = run_import(clean_rootfs, store, d, tmp_path / (prefix + "-run"), code)
        assert r.rc == 0 and r.out.strip() == expect, r
